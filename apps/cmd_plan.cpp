// `ringpack plan`: analyse every legal reorder of the batch with the cost model
// (ringpack::plan_job) and show which one `auto` picks and why.
#include <memory>

#include "batch_options.h"
#include "commands.h"
#include "json_report.h"
#include "output_file.h"
#include "text_report.h"

namespace ringpack::cli {
namespace {

struct PlanCommand {
  BatchFlags batch;
  ConfigKeys keys;
};

void plan(PlanCommand& command) {
  const PlanReport report = plan_job(command.batch.resolve(command.keys));
  const OutputOptions& output = command.batch.output();
  write_output(output.json ? json_text(plan_report_json(report)) : format_plan_report(report),
               output.output_file);
}

}  // namespace

void add_plan_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "plan", "compare the reorders on a batch: balance, tile efficiency, bytes, cost");
  auto state = std::make_shared<PlanCommand>();
  state->batch.add_to(*command, state->keys);
  for (const char* key : kRunOnlyConfigKeys) state->keys.add_ignored(key);
  command->callback([state] { plan(*state); });
}

}  // namespace ringpack::cli

// `ringpack layout`: where each token goes after the reorder (ringpack::layout_job): per rank the
// original token indices, segment ids and positions.
#include <memory>

#include "batch_options.h"
#include "commands.h"
#include "json_report.h"
#include "output_file.h"
#include "text_report.h"

namespace ringpack::cli {
namespace {

struct LayoutCommand {
  BatchFlags batch;
  ConfigKeys keys;
};

void layout(LayoutCommand& command) {
  const LayoutReport report = layout_job(command.batch.resolve(command.keys));
  const OutputOptions& output = command.batch.output();
  write_output(output.json ? json_text(layout_report_json(report)) : format_layout_report(report),
               output.output_file);
}

}  // namespace

void add_layout_command(CLI::App& app) {
  CLI::App* command =
      app.add_subcommand("layout", "show which tokens each rank holds after the reorder");
  auto state = std::make_shared<LayoutCommand>();
  state->batch.add_to(*command, state->keys);
  for (const char* key : kRunOnlyConfigKeys) state->keys.add_ignored(key);
  command->callback([state] { layout(*state); });
}

}  // namespace ringpack::cli

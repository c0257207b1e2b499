// `ringpack plan`: analyse every legal reorder of the batch with the cost model
// (ringpack::plan_job) and show which one `auto` picks and why.
#include "batch_report_command.h"
#include "commands.h"
#include "text_report.h"

namespace ringpack::cli {

void add_plan_command(CLI::App& app) {
  add_batch_report_command(app, "plan",
                           "compare the reorders on a batch: balance, tile efficiency, bytes, cost",
                           plan_job, plan_report_json, format_plan_report);
}

}  // namespace ringpack::cli

// `ringpack layout`: where each token goes after the reorder (ringpack::layout_job): per rank the
// original token indices, segment ids and positions.
#include "batch_report_command.h"
#include "commands.h"
#include "text_report.h"

namespace ringpack::cli {

void add_layout_command(CLI::App& app) {
  add_batch_report_command(app, "layout", "show which tokens each rank holds after the reorder",
                           layout_job, layout_report_json, format_layout_report);
}

}  // namespace ringpack::cli

// plan_job and layout_job: the analysis behind `ringpack plan` and `ringpack layout`.
#include "job/resolve.h"
#include "ringpack/error.h"
#include "ringpack/job.h"

namespace ringpack {
PlanReport plan_job(const BatchOptions& options, BackendKind backend, const ProgressFn& progress) {
  const auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  PlanReport report;
  report.options = options;
  say("building the batch");
  const PackedBatch batch = build_resolved_batch(report.options, plan_bytes_needed, "a plan");
  RINGPACK_CHECK(options.cp >= 1, "cp ", options.cp, " must be at least 1");
  validate_reorder(batch.seq_len, options.cp, {ReorderKind::kContiguous});
  say("planning " + std::to_string(batch.batch) + " x " + std::to_string(batch.seq_len) +
      " tokens over " + std::to_string(options.cp) + " ranks");
  report.plan = make_plan(batch, plan_config(report.options, backend), progress);
  return report;
}

LayoutReport layout_job(const BatchOptions& options, BackendKind backend,
                        const ProgressFn& progress) {
  const auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  LayoutReport report;
  report.options = options;
  say("building the batch");
  const PackedBatch batch = build_resolved_batch(report.options, plan_bytes_needed, "a layout");
  say("resolving the reorder");
  const ReorderSpec spec =
      resolve_reorder(batch, options.reorder, plan_config(report.options, backend));
  say("placing " + std::to_string(batch.batch) + " x " + std::to_string(batch.seq_len) +
      " tokens on " + std::to_string(options.cp) + " ranks (" + reorder_label(spec) + ")");
  report.options.reorder = spec;
  report.reorder = reorder_label(spec);
  const std::vector<int32_t> index = reorder_index(batch.seq_len, options.cp, spec);
  const int n = batch.seq_len / options.cp;
  for (int r = 0; r < options.cp; ++r) {
    RankLayout rank;
    rank.rank = r;
    for (int row = 0; row < batch.batch; ++row) {
      std::vector<int32_t> tokens(index.begin() + r * n, index.begin() + (r + 1) * n);
      std::vector<int32_t> ids, pos;
      for (int32_t t : tokens) {
        ids.push_back(batch.segment_id(row, t));
        pos.push_back(batch.position(row, t));
      }
      rank.tokens.push_back(std::move(tokens));
      rank.segment_ids.push_back(std::move(ids));
      rank.positions.push_back(std::move(pos));
    }
    report.ranks.push_back(std::move(rank));
  }
  return report;
}

}  // namespace ringpack

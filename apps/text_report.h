// Readable text forms of the run, plan and layout reports (the default output).
#pragma once

#include <string>

#include "ringpack/job.h"

namespace ringpack::cli {

// Batch, resolved reorder and why, per-rank table, imbalance, phase times, the errors table and
// a final line "PASS" or "FAIL".
std::string format_run_report(const RunReport& report);

// Per reorder candidate: imbalance, tile efficiency, cost, bytes and skippable steps; per-rank
// visible pairs; the one auto picks and why.
std::string format_plan_report(const PlanReport& report);

// Per rank and row: original token indices, segment ids and positions. Rows longer than
// kLayoutTokensShown are cut, with a note (use --json for everything).
inline constexpr size_t kLayoutTokensShown = 32;
std::string format_layout_report(const LayoutReport& report);

}  // namespace ringpack::cli

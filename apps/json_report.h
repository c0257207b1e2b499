// JSON forms of the run, plan and layout reports (`--json`).
//
// Non-finite numbers (an LSE of -inf, a NaN error) are written as the strings "inf", "-inf" and
// "nan", never as null, so every number field is either a finite number or one of these strings.
//
// Every report starts with the batch configuration as resolved: batch, seq_len, cp, strategy,
// reorder_requested, heads_q, heads_kv, head_dim, dtype, causal, window, seed, packing, lengths,
// layout (file or null). run adds backend, comm, threads (per rank), backward, deterministic,
// the resolved reorder, and "verified" and "passed": passed is true or false when the run was
// verified and null when it was not.
//
// layout: {"reorder", "ranks": [{"rank", "tokens", "segment_ids", "positions"}]} where tokens,
// segment_ids and positions are those of row 0; when batch > 1 each rank also has
// "rows": [{"tokens", "segment_ids", "positions"}, ...] with every row (row 0 included).
#pragma once

#include <nlohmann/json.hpp>

#include "ringpack/job.h"

namespace ringpack::cli {

nlohmann::json run_report_json(const RunReport& report);
nlohmann::json plan_report_json(const PlanReport& report);
nlohmann::json layout_report_json(const LayoutReport& report);

// The JSON text printed for a report: indented, newline-terminated.
std::string json_text(const nlohmann::json& json);

}  // namespace ringpack::cli

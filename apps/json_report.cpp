// JSON reports (json_report.h describes the fields and the non-finite rule).
#include "json_report.h"

#include <cmath>

namespace ringpack::cli {
namespace {

using nlohmann::json;

constexpr double kMillisecondsPerSecond = 1000.0;
constexpr int kJsonIndent = 2;

// A finite number as is; inf, -inf and nan as strings (JSON has no literal for them).
json number(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return value;
}

json milliseconds(double seconds) {
  return number(seconds * kMillisecondsPerSecond);
}

json tensor_error_json(const TensorError& error) {
  return {{"max_abs_err", number(error.max_abs_err)},
          {"rel_err", number(error.rel_err)},
          {"baseline_rel_err", number(error.baseline_rel_err)},
          {"tolerance", number(error.tolerance)},
          {"masked_mismatches", error.masked_mismatches},
          {"passed", error.passed},
          {"worst", error.worst}};
}

json rank_json(const RankReport& rank) {
  return {{"rank", rank.rank},
          {"visible_pairs", rank.visible_pairs},
          {"steps_computed", rank.steps_computed},
          {"steps_skipped", rank.steps_skipped},
          {"bytes_sent", rank.bytes_sent},
          {"forward_ms", milliseconds(rank.forward_seconds)},
          {"backward_ms", milliseconds(rank.backward_seconds)},
          {"compute_ms", milliseconds(rank.compute_seconds)},
          {"transfer_ms", milliseconds(rank.transfer_seconds)},
          {"wait_ms", milliseconds(rank.wait_seconds)}};
}

json analysis_json(const ReorderAnalysis& analysis) {
  return {{"visible_pairs", analysis.visible_pairs},
          {"imbalance", number(analysis.imbalance)},
          {"tile_efficiency", number(analysis.tile_efficiency)},
          {"bytes_sent", analysis.bytes_sent},
          {"skippable_steps", analysis.skippable_steps},
          {"cost", number(analysis.cost)}};
}

// One row of one rank: original token indices, segment ids and positions.
json row_json(const RankLayout& rank, size_t row) {
  return {{"tokens", rank.tokens.at(row)},
          {"segment_ids", rank.segment_ids.at(row)},
          {"positions", rank.positions.at(row)}};
}

// The configuration of a batch, as resolved (docs/design.md §5): every field that decides the
// result, so that a report can be reproduced from itself.
json batch_config_json(const BatchOptions& options) {
  json layout = nullptr;
  if (!options.layout_file.empty()) layout = options.layout_file;
  return {{"batch", options.batch},
          {"seq_len", options.seq_len},
          {"cp", options.cp},
          {"strategy", strategy_name(options.strategy)},
          {"reorder_requested", reorder_label(options.reorder)},
          {"heads_q", options.num_heads_q},
          {"heads_kv", options.num_heads_kv},
          {"head_dim", options.head_dim},
          {"dtype", dtype_name(options.dtype)},
          {"causal", options.mask.causal},
          {"window", options.mask.window},
          {"seed", options.seed},
          {"packing", options.packer.packing},
          {"lengths", length_source_name(options.packer.source)},
          {"layout", layout}};
}

}  // namespace

json run_report_json(const RunReport& report) {
  const BatchOptions& options = report.options;
  json verify = json::object();
  for (const TensorError& error : report.errors) verify[error.name] = tensor_error_json(error);
  json ranks = json::array();
  for (const RankReport& rank : report.ranks) ranks.push_back(rank_json(rank));
  json phases = json::object();
  for (const PhaseTime& phase : report.phases) phases[phase.name] = milliseconds(phase.seconds);

  json out = batch_config_json(options);
  out.update({{"passed", report.verified ? json(report.passed) : json(nullptr)},
              {"reorder", report.reorder},
              {"reorder_reason", report.reorder_reason},
              {"backend", report.backend},
              {"comm", report.comm},
              {"threads", report.threads},
              {"backward", report.backward},
              {"deterministic", report.deterministic},
              {"documents", report.documents},
              {"padding_tokens", report.padding_tokens},
              {"imbalance", number(report.imbalance)},
              {"verified", report.verified},
              {"verify_note", report.verify_note},
              {"verify", verify},
              {"ranks", ranks},
              {"phases", phases}});
  return out;
}

json plan_report_json(const PlanReport& report) {
  const BatchOptions& options = report.options;
  const Plan& plan = report.plan;
  json reorders = json::object();
  for (const ReorderAnalysis& analysis : plan.candidates) {
    reorders[analysis.label] = analysis_json(analysis);
  }
  json chosen = nullptr;
  if (!plan.candidates.empty()) chosen = plan.candidates.at(size_t(plan.chosen)).label;
  json out = batch_config_json(options);
  out.update({{"reorders", reorders}, {"auto", chosen}, {"explanation", plan.explanation}});
  return out;
}

json layout_report_json(const LayoutReport& report) {
  json ranks = json::array();
  for (const RankLayout& rank : report.ranks) {
    json entry = {{"rank", rank.rank}};
    if (!rank.tokens.empty()) entry.update(row_json(rank, 0));
    if (rank.tokens.size() > 1) {
      json rows = json::array();
      for (size_t row = 0; row < rank.tokens.size(); ++row) rows.push_back(row_json(rank, row));
      entry["rows"] = rows;
    }
    ranks.push_back(entry);
  }
  json out = batch_config_json(report.options);
  out.update({{"reorder", report.reorder}, {"ranks", ranks}});
  return out;
}

std::string json_text(const nlohmann::json& json) {
  return json.dump(kJsonIndent) + "\n";
}

}  // namespace ringpack::cli

// Load-balance analysis of reorders on a batch, and `auto`: the balanced candidate with the
// lowest modelled time (docs/design.md §3-4; the cost model is in cost_model.h).
#include "ringpack/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "core/cost_model.h"
#include "core/pair_count.h"
#include "core/tile_mask.h"
#include "ringpack/error.h"

namespace ringpack {
namespace {

// Stripe sizes auto tries besides the backend's tile_q: single tokens (finest balance) and
// common tile heights (whole tiles per stripe keep tiles inside one stripe).
constexpr int kCandidateStripeSizes[] = {1, 16, 64, 128};

// MaskSpec::window of no window; smaller values are rejected, not read as "none".
constexpr int64_t kNoWindow = -1;

// candidate_specs puts contiguous first and the balanced reorders after it.
constexpr int kFirstBalanced = 1;

// Costs closer than this (relative) count as a tie; the earlier, simpler candidate wins.
constexpr double kTieTolerance = 1e-9;

void check_config(const PlanConfig& config) {
  RINGPACK_CHECK(config.cp >= 1, "--cp ", config.cp, " must be at least 1");
  RINGPACK_CHECK(config.num_heads_q >= 1 && config.num_heads_kv >= 1, "--heads-q ",
                 config.num_heads_q, " and --heads-kv ", config.num_heads_kv,
                 " must be at least 1");
  RINGPACK_CHECK(config.num_heads_q % config.num_heads_kv == 0, "--heads-q ", config.num_heads_q,
                 " is not a multiple of --heads-kv ", config.num_heads_kv,
                 "; pick kv heads that divide the query heads");
  RINGPACK_CHECK(config.head_dim >= 1, "--head-dim ", config.head_dim, " must be at least 1");
  RINGPACK_CHECK(config.mask.window >= kNoWindow, "--window ", config.mask.window,
                 " is not a window: pass -1 for none, or 0 or more tokens");
  RINGPACK_CHECK(config.dtype_bytes >= 1, "dtype_bytes ", config.dtype_bytes,
                 " must be at least 1");
  RINGPACK_CHECK(config.tile_q >= 1 && config.tile_k >= 1, "tile shape ", config.tile_q, " x ",
                 config.tile_k, " must be at least 1 x 1");
}

// A tile of one rank's shard: its token range summary and its number of tokens.
struct ShardTile {
  TileRange range;
  int64_t tokens;
};

// Tiles of `tile` tokens over each rank's shard of one reordered row ([cp][tiles]); the last
// tile of a shard is shorter when tile does not divide n.
std::vector<std::vector<ShardTile>> shard_tiles(const std::vector<int32_t>& ids,
                                                const std::vector<int32_t>& positions, int cp,
                                                int tile) {
  const int n = int(ids.size()) / cp;
  std::vector<std::vector<ShardTile>> tiles(cp);
  for (int r = 0; r < cp; ++r) {
    for (int begin = r * n; begin < (r + 1) * n; begin += tile) {
      const int end = std::min(begin + tile, (r + 1) * n);
      tiles[r].push_back({make_tile_range(ids.data(), positions.data(), begin, end), end - begin});
    }
  }
  return tiles;
}

// elements[r][s]: elements of the tile_q x tile_k tiles of rank r's queries against rank s's
// keys that classify_tile does not skip, summed over rows ([cp][cp]). The ring skips a whole
// step that has no visible pair, so its tiles count only where step_pairs[r][s] > 0.
std::vector<std::vector<int64_t>> count_step_tile_elements(
    const PackedBatch& batch, const std::vector<int32_t>& index,
    const std::vector<std::vector<int64_t>>& step_pairs, const PlanConfig& config) {
  const int cp = config.cp;
  std::vector<std::vector<int64_t>> elements(cp, std::vector<int64_t>(cp, 0));
  std::vector<int32_t> ids(batch.seq_len);        // [seq_len] reordered row
  std::vector<int32_t> positions(batch.seq_len);  // [seq_len] reordered row
  for (int row = 0; row < batch.batch; ++row) {
    for (int slot = 0; slot < batch.seq_len; ++slot) {
      ids[slot] = batch.segment_id(row, index[slot]);
      positions[slot] = batch.position(row, index[slot]);
    }
    const auto q_tiles = shard_tiles(ids, positions, cp, config.tile_q);
    const auto k_tiles = shard_tiles(ids, positions, cp, config.tile_k);
    for (int r = 0; r < cp; ++r) {
      for (int s = 0; s < cp; ++s) {
        if (config.strategy == Strategy::kRing && step_pairs[r][s] == 0) continue;
        for (const ShardTile& q : q_tiles[r]) {
          for (const ShardTile& k : k_tiles[s]) {
            if (classify_tile(q.range, k.range, config.mask) != TileClass::kSkip) {
              elements[r][s] += q.tokens * k.tokens;
            }
          }
        }
      }
    }
  }
  return elements;
}

// analyse_reorder without validating the batch and config (make_plan validates once).
ReorderAnalysis analyse_valid(const PackedBatch& batch, const ReorderSpec& spec,
                              const PlanConfig& config) {
  const int cp = config.cp;
  const std::vector<int32_t> index = reorder_index(batch.seq_len, cp, spec);
  ReorderAnalysis a;
  a.spec = spec;
  a.label = reorder_label(spec);
  a.step_pairs = count_step_pairs(batch, token_ranks(index, cp), cp, config.mask);

  a.visible_pairs.resize(cp);
  a.skippable_steps.resize(cp);
  for (int r = 0; r < cp; ++r) {
    a.visible_pairs[r] =
        std::accumulate(a.step_pairs[r].begin(), a.step_pairs[r].end(), int64_t(0));
    a.skippable_steps[r] = int(std::count(a.step_pairs[r].begin(), a.step_pairs[r].end(), 0));
  }
  const int64_t total_pairs =
      std::accumulate(a.visible_pairs.begin(), a.visible_pairs.end(), int64_t(0));
  const int64_t max_pairs = *std::max_element(a.visible_pairs.begin(), a.visible_pairs.end());
  a.imbalance = total_pairs == 0 ? 1.0 : double(max_pairs) * cp / double(total_pairs);

  const auto tile_elements = count_step_tile_elements(batch, index, a.step_pairs, config);
  a.computed_tile_elements.resize(cp);
  for (int r = 0; r < cp; ++r) {
    a.computed_tile_elements[r] =
        std::accumulate(tile_elements[r].begin(), tile_elements[r].end(), int64_t(0));
  }
  const int64_t total_elements =
      std::accumulate(a.computed_tile_elements.begin(), a.computed_tile_elements.end(), int64_t(0));
  a.tile_efficiency = total_elements == 0 ? 1.0 : double(total_pairs) / double(total_elements);

  const uint64_t bytes = bytes_sent_per_rank(batch.batch, batch.seq_len, config);
  a.bytes_sent.assign(cp, bytes);
  a.cost = modelled_seconds(tile_elements, bytes, config);
  return a;
}

// Legal candidates in order of simplicity: contiguous, dual_chunk_swap, striped by stripe size.
std::vector<ReorderSpec> candidate_specs(int seq_len, const PlanConfig& config) {
  std::vector<ReorderSpec> specs = {{ReorderKind::kContiguous, 1}};
  if (config.cp == 1) return specs;
  std::vector<ReorderSpec> wanted = {{ReorderKind::kDualChunkSwap, 1}};
  std::vector<int> stripes(std::begin(kCandidateStripeSizes), std::end(kCandidateStripeSizes));
  stripes.push_back(config.tile_q);
  std::sort(stripes.begin(), stripes.end());
  stripes.erase(std::unique(stripes.begin(), stripes.end()), stripes.end());
  const int n = seq_len / config.cp;
  for (const int stripe : stripes) {
    // A stripe of a whole shard is contiguous again.
    if (stripe < n) wanted.push_back({ReorderKind::kStriped, stripe});
  }
  for (const ReorderSpec& spec : wanted) {
    try {
      validate_reorder(seq_len, config.cp, spec);
      specs.push_back(spec);
    } catch (const Error&) {
      // Not legal for this seq_len and cp: not a candidate.
    }
  }
  return specs;
}

std::string format_seconds(double seconds) {
  char text[32];
  if (seconds >= 1.0) {
    std::snprintf(text, sizeof(text), "%.3g s", seconds);
  } else if (seconds >= 1e-3) {
    std::snprintf(text, sizeof(text), "%.3g ms", seconds * 1e3);
  } else {
    std::snprintf(text, sizeof(text), "%.3g us", seconds * 1e6);
  }
  return text;
}

std::string format_ratio(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f", value);
  return text;
}

int total_skippable(const ReorderAnalysis& a) {
  return std::accumulate(a.skippable_steps.begin(), a.skippable_steps.end(), 0);
}

int64_t slowest_compute(const ReorderAnalysis& a) {
  return a.computed_tile_elements.empty()
             ? 0
             : *std::max_element(a.computed_tile_elements.begin(), a.computed_tile_elements.end());
}

bool ties(const ReorderAnalysis& a, const ReorderAnalysis& b) {
  return std::abs(a.cost - b.cost) <= kTieTolerance * std::max(a.cost, b.cost);
}

// Lower modelled time wins. When the times tie (the run is bound by transfers that every reorder
// shares), the reorder whose slowest rank computes less wins: it leaves more slack for faster
// links and slower backends. Full ties keep the earlier, simpler candidate.
bool cheaper(const ReorderAnalysis& a, const ReorderAnalysis& b) {
  if (!ties(a, b)) return a.cost < b.cost;
  return slowest_compute(a) < slowest_compute(b);
}

// The candidate auto compares the chosen one with: the cheapest other balanced reorder, or
// contiguous when the chosen one is the only balanced reorder.
int runner_up(const Plan& plan) {
  int next = 0;
  for (int i = kFirstBalanced; i < int(plan.candidates.size()); ++i) {
    if (i == plan.chosen) continue;
    if (next == 0 || cheaper(plan.candidates[i], plan.candidates[next])) next = i;
  }
  return next;
}

std::string explain(const Plan& plan, const PlanConfig& config, int seq_len) {
  const ReorderAnalysis& best = plan.candidates[plan.chosen];
  if (plan.candidates.size() == 1 && config.cp == 1) {
    return "cp = 1: one rank holds the whole row, so " + best.label + " is the only reorder.";
  }
  if (plan.candidates.size() == 1) {
    return "no balanced reorder is legal for seq_len " + std::to_string(seq_len) + " and cp " +
           std::to_string(config.cp) +
           " (dual_chunk_swap needs seq_len divisible by 2*cp, striped a stripe shorter than "
           "seq_len / cp), so contiguous.";
  }
  const int next = runner_up(plan);
  const ReorderAnalysis& other = plan.candidates[next];
  std::ostringstream out;
  if (ties(best, other) && slowest_compute(best) < slowest_compute(other)) {
    out << best.label << " ties with " << other.label << " at " << format_seconds(best.cost)
        << " modelled time (bound by transfers) and its slowest rank computes less ("
        << format_ratio(double(slowest_compute(best)) /
                        double(std::max<int64_t>(1, slowest_compute(other))))
        << "x the tile elements)";
  } else if (ties(best, other)) {
    out << best.label << " ties with " << other.label << " at " << format_seconds(best.cost)
        << " modelled time; the simpler " << best.label << " is kept";
  } else {
    out << best.label << " has the lowest modelled time: " << format_seconds(best.cost) << " vs "
        << format_seconds(other.cost) << " (" << other.label << ", next best)";
  }
  out << "; max/mean visible pairs " << format_ratio(best.imbalance) << " vs "
      << format_ratio(other.imbalance) << ", tile efficiency " << format_ratio(best.tile_efficiency)
      << " vs " << format_ratio(other.tile_efficiency);
  if (config.strategy == Strategy::kRing) {
    out << ", skippable ring steps " << total_skippable(best) << " vs " << total_skippable(other);
  }
  out << ".";
  const ReorderAnalysis& contiguous = plan.candidates[0];
  if (plan.chosen != 0 && next != 0) {
    out << " contiguous: " << format_seconds(contiguous.cost) << ", max/mean visible pairs "
        << format_ratio(contiguous.imbalance) << ".";
  }
  return out.str();
}

}  // namespace

ReorderAnalysis analyse_reorder(const PackedBatch& batch, const ReorderSpec& spec,
                                const PlanConfig& config) {
  check_config(config);
  validate_batch(batch);
  validate_reorder(batch.seq_len, config.cp, spec);
  return analyse_valid(batch, spec, config);
}

Plan make_plan(const PackedBatch& batch, const PlanConfig& config, const PlanProgress& progress) {
  check_config(config);
  validate_batch(batch);
  validate_reorder(batch.seq_len, config.cp, ReorderSpec{ReorderKind::kContiguous, 1});
  Plan plan;
  const std::vector<ReorderSpec> specs = candidate_specs(batch.seq_len, config);
  for (const ReorderSpec& spec : specs) {
    if (progress) {
      progress("analysing " + reorder_label(spec) + " (" +
               std::to_string(plan.candidates.size() + 1) + " of " + std::to_string(specs.size()) +
               ")");
    }
    plan.candidates.push_back(analyse_valid(batch, spec, config));
  }
  // auto picks among the balanced reorders (docs/design.md §3); contiguous only when none is
  // legal. The plan still shows contiguous for comparison.
  plan.chosen = plan.candidates.size() > 1 ? kFirstBalanced : 0;
  for (int i = plan.chosen + 1; i < int(plan.candidates.size()); ++i) {
    if (cheaper(plan.candidates[i], plan.candidates[plan.chosen])) plan.chosen = i;
  }
  plan.explanation = explain(plan, config, batch.seq_len);
  return plan;
}

ReorderSpec resolve_reorder(const PackedBatch& batch, const ReorderSpec& requested,
                            const PlanConfig& config, std::string* explanation) {
  if (requested.kind != ReorderKind::kAuto) {
    validate_reorder(batch.seq_len, config.cp, requested);
    if (explanation != nullptr) *explanation = reorder_label(requested) + " as requested.";
    return requested;
  }
  const Plan plan = make_plan(batch, config);
  if (explanation != nullptr) *explanation = plan.explanation;
  return plan.candidates[plan.chosen].spec;
}

}  // namespace ringpack

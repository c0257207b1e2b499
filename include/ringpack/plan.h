// Load-balance analysis and the cost model behind `auto` (docs/design.md §3, `ringpack plan`).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ringpack/attention.h"
#include "ringpack/cp.h"
#include "ringpack/layout.h"
#include "ringpack/mask.h"
#include "ringpack/reorder.h"

namespace ringpack {

// Rates the cost model assumes for one rank (src/core/cost_model.cpp says where they come from).
struct CostRates {
  double flops_per_second = 0.0;  // sustained attention throughput
  double bytes_per_second = 0.0;  // transfer rate to a peer, per direction
};

// The rates of the backend that runs: GPU rates for cuda, CPU rates for cpu and reference.
CostRates cost_rates(BackendKind backend);

struct PlanConfig {
  int cp = 1;
  Strategy strategy = Strategy::kRing;
  MaskSpec mask;
  int num_heads_q = 1;
  int num_heads_kv = 1;
  int head_dim = 64;
  int dtype_bytes = 2;
  int tile_q = 128;  // tile shape the backend computes in (tile efficiency)
  int tile_k = 128;
  CostRates rates = cost_rates(BackendKind::kCuda);  // jobs set the rates of the backend that runs
};

// The analysis of one reorder on one batch.
struct ReorderAnalysis {
  ReorderSpec spec;
  std::string label;                             // reorder_label(spec)
  std::vector<int64_t> visible_pairs;            // [cp]: pairs whose query this rank holds
  std::vector<std::vector<int64_t>> step_pairs;  // [cp][cp]: rank r's queries x rank s's keys
  double imbalance = 1.0;                        // max / mean of visible_pairs (1 = perfect)
  std::vector<int64_t> computed_tile_elements;   // [cp]: elements of tiles not skipped
  double tile_efficiency = 1.0;                  // visible pairs / computed tile elements
  std::vector<int> skippable_steps;              // [cp]: steps with no visible pair
  std::vector<uint64_t> bytes_sent;              // [cp]: forward + backward, per rank
  double cost = 0.0;                             // model time units; lower is better
};

struct Plan {
  std::vector<ReorderAnalysis> candidates;  // every legal reorder for this batch and cp
  int chosen = 0;                           // index into candidates picked by auto
  std::string explanation;                  // one or two sentences: why the chosen one wins
};

// Analyses one (legal) reorder.
ReorderAnalysis analyse_reorder(const PackedBatch& batch, const ReorderSpec& spec,
                                const PlanConfig& config);

// A short line saying which candidate is being analysed (for progress on long plans).
using PlanProgress = std::function<void(const std::string&)>;

// Analyses contiguous, dual_chunk_swap, striped (stripe sizes 1 and a few tile multiples) where
// legal, and picks the cheapest balanced one by the cost model (contiguous only when no balanced
// reorder is legal).
Plan make_plan(const PackedBatch& batch, const PlanConfig& config,
               const PlanProgress& progress = {});

// The spec to run: `requested` unless it is kAuto, then make_plan's choice.
ReorderSpec resolve_reorder(const PackedBatch& batch, const ReorderSpec& requested,
                            const PlanConfig& config, std::string* explanation = nullptr);

}  // namespace ringpack

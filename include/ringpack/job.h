// The jobs behind the CLI: `run` (build a batch, reorder, shard, run CP forward and backward,
// inverse-reorder, verify against the fp64 reference), `plan` and `layout`.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ringpack/attention.h"
#include "ringpack/cp.h"
#include "ringpack/layout.h"
#include "ringpack/packing.h"
#include "ringpack/plan.h"
#include "ringpack/reorder.h"
#include "ringpack/tensor_error.h"

namespace ringpack {

// max_doc_length of BatchOptions::packer that means "a quarter of the row" (docs/design.md §8 caps
// sampled lengths at S/4); build_batch resolves it. 0 means no cap.
constexpr int kQuarterRowDocCap = -1;

inline PackerOptions quarter_row_packer() {
  PackerOptions packer;
  packer.max_doc_length = kQuarterRowDocCap;
  return packer;
}

// Everything that describes a batch and its CP configuration; shared by run, plan and layout.
// The packer's seed is `seed` (build_batch overrides packer.seed); inputs derive from it too.
struct BatchOptions {
  int batch = 1;
  int seq_len = 4096;
  int cp = 4;
  PackerOptions packer = quarter_row_packer();
  std::string layout_file;            // replaces the packer; batch/seq_len come from it
  std::optional<PackedBatch> layout;  // a layout given directly (CLI --segment-ids, tests)
  ReorderSpec reorder{ReorderKind::kAuto, 1};
  Strategy strategy = Strategy::kRing;
  MaskSpec mask;
  int num_heads_q = 4;
  int num_heads_kv = 2;
  int head_dim = 64;
  DType dtype = DType::kBF16;
  uint64_t seed = 0;
};

struct RunOptions {
  BatchOptions batch;
  BackendKind backend = BackendKind::kCpu;
  BackendOptions backend_options;
  // Compare with the single-device fp64 reference. Unset = on when the reference is cheap
  // enough for the machine (the default size is), off otherwise (the report says so).
  std::optional<bool> verify;
  bool backward = true;
};

struct RankReport {
  int rank = 0;
  int64_t visible_pairs = 0;
  int steps_computed = 0;
  int steps_skipped = 0;
  uint64_t bytes_sent = 0;
  double forward_seconds = 0.0;
  double backward_seconds = 0.0;
  double compute_seconds = 0.0;
  double wait_seconds = 0.0;
};

struct PhaseTime {
  std::string name;
  double seconds = 0.0;
};

struct RunReport {
  BatchOptions options;  // as resolved (layout sizes, reorder)
  std::string backend;
  std::string reorder;  // resolved label
  std::string reorder_reason;
  int documents = 0;
  int64_t padding_tokens = 0;
  std::vector<RankReport> ranks;
  double imbalance = 1.0;  // max / mean visible pairs
  std::vector<PhaseTime> phases;
  bool verified = false;
  std::string verify_note;  // why verification was skipped, when it was
  std::vector<TensorError> errors;
  bool passed = false;  // all verified tensors within tolerance (true when !verified)
};

// Progress callback: a short line describing what the job is doing now.
using ProgressFn = std::function<void(const std::string&)>;

// Builds the batch described by options (layout file, given layout, or the packer), validated.
PackedBatch build_batch(const BatchOptions& options);

RunReport run_job(const RunOptions& options, const ProgressFn& progress = {});

struct PlanReport {
  BatchOptions options;
  Plan plan;
};
PlanReport plan_job(const BatchOptions& options);

struct RankLayout {
  int rank = 0;
  std::vector<std::vector<int32_t>> tokens;       // [batch][n]: original token indices
  std::vector<std::vector<int32_t>> segment_ids;  // [batch][n]
  std::vector<std::vector<int32_t>> positions;    // [batch][n]
};
struct LayoutReport {
  BatchOptions options;
  std::string reorder;  // resolved label
  std::vector<RankLayout> ranks;
};
LayoutReport layout_job(const BatchOptions& options);

}  // namespace ringpack

// The jobs behind the CLI: `run` (build a batch, reorder, shard, run CP forward and backward,
// inverse-reorder, verify against the fp64 reference), `plan` and `layout`.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ringpack/attention.h"
#include "ringpack/comm.h"
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
  // How ranks talk (docs/design.md §4). Unset: threads for CPU backends, device for CUDA.
  // mpi and nccl run one rank per process of an mpirun / torchrun launch.
  std::optional<CommKind> comm;
  double comm_timeout_seconds = kDefaultCommTimeoutSeconds;  // every host wait of a rank
  // Compare with the single-device fp64 reference. Unset = on when the reference is cheap
  // enough for the machine (the default size is), off otherwise (the report says so).
  std::optional<bool> verify;
  bool backward = true;
};

// Times are measured in stream order (ScheduleStats): on a GPU they time the device's work.
struct RankReport {
  int rank = 0;
  int64_t visible_pairs = 0;
  int steps_computed = 0;
  int steps_skipped = 0;
  uint64_t bytes_sent = 0;
  double forward_seconds = 0.0;
  double backward_seconds = 0.0;
  double compute_seconds = 0.0;   // forward + backward
  double wait_seconds = 0.0;      // forward + backward: the compute stream waiting on transfers
  double transfer_seconds = 0.0;  // forward + backward: transfers on the communicator's stream
                                  // (device, nccl; 0 where the communicator does not mark them)
  std::vector<TraceSpan> forward_spans;   // seconds from the forward's start
  std::vector<TraceSpan> backward_spans;  // seconds from the backward's start
};

struct PhaseTime {
  std::string name;
  double seconds = 0.0;
};

struct RunReport {
  BatchOptions options;  // as resolved (layout sizes, reorder)
  std::string backend;
  std::string comm;  // communicator name
  int threads = 0;   // CPU worker threads per rank, as resolved (--threads 0: cores / cp)
  bool backward = true;
  bool deterministic = false;
  int process_rank = 0;  // this process's rank (multi-process runs); 0 when it holds them all
  std::string reorder;   // resolved label
  std::string reorder_reason;
  int documents = 0;
  int64_t padding_tokens = 0;
  std::vector<RankReport> ranks;
  double imbalance = 1.0;  // max / mean visible pairs
  std::vector<PhaseTime> phases;
  bool verified = false;    // compared with the reference (multi-process: on rank 0)
  std::string verify_note;  // why verification was skipped, when it was
  std::vector<TensorError> errors;
  bool passed = false;  // verified, and every tensor within tolerance (false when !verified)
};

// Progress callback: a short line describing what the job is doing now.
using ProgressFn = std::function<void(const std::string&)>;

// Builds the batch described by options (layout file, given layout, or the packer), validated.
PackedBatch build_batch(const BatchOptions& options);

RunReport run_job(const RunOptions& options, const ProgressFn& progress = {});

// The whole CP forward and backward timed on one batch (docs/design.md §8): wall time from a
// barrier of all ranks to the next, median over `reps` after `warmup`, and the same batch as
// one rank on one device for the ratio.
struct CpBenchOptions {
  RunOptions run;  // verify is ignored: nothing is compared
  int reps = 10;
  int warmup = 2;
};

struct CpBenchReport {
  BatchOptions options;  // as resolved
  std::string backend;
  std::string comm;
  std::string reorder;
  int process_rank = 0;
  int devices = 1;               // devices the ranks run on (1 for threads and device)
  double visible_pairs = 0.0;    // of the whole batch
  double forward_seconds = 0.0;  // median over reps; every rank finished
  double backward_seconds = 0.0;
  double single_forward_seconds = 0.0;  // one rank, the whole batch, one device
  double single_backward_seconds = 0.0;
  double forward_exposed = 0.0;  // max over ranks of the median share of the loop spent waiting
  double backward_exposed = 0.0;
};

CpBenchReport bench_cp_job(const CpBenchOptions& options, const ProgressFn& progress = {});

// One backend's kernels timed on one batch, as one device runs a whole row (docs/design.md §8):
// forward_direct (out in the dtype, lse), then compute_delta + backward, each `reps` times after
// `warmup`, timed by the backend's timeline (CUDA events on a GPU). Then one fresh forward and
// backward is compared with the fp64 reference (verify_run: every element of out, lse, dq, dk,
// dv, with the run's tolerances).
struct KernelBenchOptions {
  BatchOptions batch;  // heads, head_dim, dtype, mask, seed (the inputs); cp and reorder unused
  int warmup = 5;
  int reps = 30;
  bool backward = true;
  // Unset: on when the reference is cheap enough (the GPU reference for the CUDA backend, the
  // CPU reference for small rows); the report says when it was skipped.
  std::optional<bool> verify;
};

struct KernelTiming {
  double median_ms = 0.0;
  double min_ms = 0.0;
  double max_ms = 0.0;
};

struct KernelBenchReport {
  std::string backend;
  KernelTiming forward;
  KernelTiming backward;  // zeros without KernelBenchOptions::backward
  bool verified = false;
  std::string verify_note;  // the reference, or why it was skipped
  std::vector<TensorError> errors;
  bool passed = false;  // verified and every tensor within tolerance
};

// Runs on `backend` (its stream and memory); throws ringpack::Error for an unsupported
// configuration before any work.
KernelBenchReport bench_kernels(const PackedBatch& batch, const KernelBenchOptions& options,
                                AttentionBackend& backend, BackendKind kind,
                                const ProgressFn& progress = {});

// The device a backend of `kind` runs on, for report headers: the GPU's name for CUDA, "cpu"
// otherwise.
std::string backend_device_name(BackendKind kind, const BackendOptions& options);

struct PlanReport {
  BatchOptions options;
  Plan plan;
};
// backend: the backend whose rates the cost model uses (the one `run` would use).
PlanReport plan_job(const BatchOptions& options, BackendKind backend = BackendKind::kCpu,
                    const ProgressFn& progress = {});

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
LayoutReport layout_job(const BatchOptions& options, BackendKind backend = BackendKind::kCpu,
                        const ProgressFn& progress = {});

}  // namespace ringpack

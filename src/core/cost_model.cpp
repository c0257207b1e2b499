// The cost model behind `auto`; formulas in cost_model.h, reasons beside the constants.
#include "core/cost_model.h"

#include <algorithm>

namespace ringpack {
namespace {

// A tile element is one (query, key) score for every query head: forward 4*head_dim FLOPs per
// head (QK^T and PV), backward 2.5x forward (docs/design.md §8), so 3.5 * 4 * head_dim per head.
constexpr double kForwardFlopsPerHeadDim = 4.0;
constexpr double kForwardPlusBackward = 3.5;

// GPU (cuda backend): sustained attention throughput and per-direction link bandwidth of one GPU
// of the H100/H200 class (bf16 flash attention reaches roughly 40% of the ~1000 TFLOP/s dense
// peak; NVLink 4 moves ~450 GB/s per direction, NCCL point-to-point reaches about two thirds of
// it). Only their ratio (~1300 FLOPs per byte) decides between reorders; the absolute values make
// the cost readable as seconds.
constexpr CostRates kGpuRates{400e12, 300e9};

// CPU (cpu backend: blocked fp32 kernels on the rank's share of the cores; ranks are threads of
// one process that exchange blocks by memcpy on a progress thread). Calibrated with `ringpack run
// --seq-len 16384 --cp 4 --no-verify` on a 2-core x86-64 VM: rank 0 computed 4.7e6 visible
// pairs x 4 heads x 3.5 x 4 x 64 FLOPs = 1.7e10 FLOPs in 16.7 s, about 1 GFLOP/s per rank; a
// memcpy-based transfer moves a few GB/s, 2 GB/s is the conservative figure. Far below one FLOP
// per byte, every CPU run is bound by compute, and the balance of the work decides.
constexpr CostRates kCpuRates{1e9, 2e9};

// Reference backend: scalar fp64 loops, about ten times slower than the blocked backend.
constexpr CostRates kReferenceRates{0.1e9, 2e9};

constexpr uint64_t kIdBytes = sizeof(int32_t);  // segment ids and positions are int32
constexpr uint64_t kGradBytes = sizeof(float);  // dK/dV accumulators are fp32

}  // namespace

CostRates cost_rates(BackendKind backend) {
  switch (backend) {
    case BackendKind::kCuda:
      return kGpuRates;
    case BackendKind::kCpu:
      return kCpuRates;
    case BackendKind::kReference:
      return kReferenceRates;
  }
  return kCpuRates;
}

uint64_t bytes_sent_per_rank(int batch, int seq_len, const PlanConfig& config) {
  const uint64_t cp = uint64_t(config.cp);
  const uint64_t tokens = uint64_t(batch) * uint64_t(seq_len) / cp;  // batch * n
  const uint64_t kv_elements = tokens * uint64_t(config.num_heads_kv) * uint64_t(config.head_dim);
  const uint64_t block = 2 * kv_elements * uint64_t(config.dtype_bytes) + 2 * tokens * kIdBytes;
  const uint64_t grads = 2 * kv_elements * kGradBytes;
  if (config.strategy == Strategy::kRing) {
    const uint64_t forward = (cp - 1) * block;
    const uint64_t backward = (cp - 1) * block + (cp > 1 ? cp * grads : 0);
    return forward + backward;
  }
  const uint64_t gather = (cp - 1) * block;
  const uint64_t reduce_scatter = (cp - 1) * grads;
  return gather + gather + reduce_scatter;
}

double modelled_seconds(const std::vector<std::vector<int64_t>>& step_tile_elements,
                        uint64_t bytes_sent, const PlanConfig& config) {
  const double seconds_per_element = kForwardPlusBackward * kForwardFlopsPerHeadDim *
                                     config.head_dim * config.num_heads_q /
                                     config.rates.flops_per_second;
  const double comm_seconds = double(bytes_sent) / config.rates.bytes_per_second;
  double slowest = 0.0;
  for (int r = 0; r < config.cp; ++r) {
    double rank_seconds = 0.0;
    if (config.strategy == Strategy::kRing) {
      // cp steps; each step's transfer (spread evenly) overlaps that step's compute, so a step
      // costs whichever is longer. A skipped step still waits for its transfer.
      const double step_comm = comm_seconds / config.cp;
      for (int s = 0; s < config.cp; ++s) {
        rank_seconds += std::max(step_comm, step_tile_elements[r][s] * seconds_per_element);
      }
    } else {
      // all_gather: the gather precedes compute and the reduce-scatter follows it.
      double compute = 0.0;
      for (int s = 0; s < config.cp; ++s) compute += step_tile_elements[r][s] * seconds_per_element;
      rank_seconds = comm_seconds + compute;
    }
    slowest = std::max(slowest, rank_seconds);
  }
  return slowest;
}

}  // namespace ringpack

// The attention backend interface: one CP step, queries of one shard against one block of keys
// and values, merged into fp32 running accumulators (docs/design.md §2, §4).
//
// Every pointer lives in the backend's memory space (host for CPU backends, device for CUDA).
// Tensors are BSHD, row-major, contiguous:
//   q, dout, out accumulators  [batch, seqlen_q, num_heads_q, head_dim]
//   k, v, dk/dv accumulators   [batch, seqlen_k, num_heads_kv, head_dim]
//   lse, delta                 [batch, num_heads_q, seqlen_q]     (fp32, natural log)
//   segment ids, positions     [batch, seqlen_q] / [batch, seqlen_k] (int32)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "ringpack/dtype.h"
#include "ringpack/mask.h"
#include "ringpack/timeline.h"

namespace ringpack {

struct AttentionDims {
  int batch = 0;
  int seqlen_q = 0;
  int seqlen_k = 0;
  int num_heads_q = 0;
  int num_heads_kv = 0;
  int head_dim = 0;
};

// One step's inputs. scale <= 0 means 1/sqrt(head_dim).
struct AttentionStep {
  AttentionDims dims;
  DType dtype = DType::kF32;
  MaskSpec mask;
  float scale = 0.0f;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const int32_t* segment_ids_q = nullptr;
  const int32_t* positions_q = nullptr;
  const int32_t* segment_ids_k = nullptr;
  const int32_t* positions_k = nullptr;
};

// Running forward state (fp32). Initialise out = 0, lse = -inf; each forward() merges its
// partial (o_s, lse_s) in:  lse_new = logaddexp(lse, lse_s);
//   out = out * exp(lse - lse_new) + o_s * exp(lse_s - lse_new);  lse = lse_new.
struct ForwardAccumulators {
  float* out = nullptr;  // [batch, seqlen_q, num_heads_q, head_dim]
  float* lse = nullptr;  // [batch, num_heads_q, seqlen_q]
};

struct BackwardInputs {
  const void* dout = nullptr;    // [batch, seqlen_q, num_heads_q, head_dim], step dtype
  const float* lse = nullptr;    // [batch, num_heads_q, seqlen_q], final forward LSE
  const float* delta = nullptr;  // [batch, num_heads_q, seqlen_q], rowsum(dO * O)
};

// backward() adds this step's contribution to each (fp32, not overwritten).
struct BackwardAccumulators {
  float* dq = nullptr;  // [batch, seqlen_q, num_heads_q, head_dim]
  float* dk = nullptr;  // [batch, seqlen_k, num_heads_kv, head_dim]
  float* dv = nullptr;  // [batch, seqlen_k, num_heads_kv, head_dim]
};

enum class MemorySpace { kHost, kDevice };
enum class BackendKind { kReference, kCpu, kCuda };

const char* backend_kind_name(BackendKind kind);  // "reference", "cpu", "cuda"
BackendKind parse_backend_kind(std::string_view name);

class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;

  virtual std::string name() const = 0;
  virtual MemorySpace memory_space() const = 0;
  // Throws ringpack::Error naming the value and the fix when this backend cannot run the forward
  // of the configuration, or, with `backward`, its backward too. Called before any work starts.
  virtual void check_supported(DType dtype, int head_dim, bool backward) const = 0;

  virtual void forward(const AttentionStep& step, const ForwardAccumulators& acc) = 0;
  virtual void backward(const AttentionStep& step, const BackwardInputs& in,
                        const BackwardAccumulators& acc) = 0;
  // The whole attention of `step` (every key of it, no accumulators): out [batch, seqlen_q,
  // num_heads_q, head_dim] in the step's dtype and lse [batch, num_heads_q, seqlen_q] (fp32),
  // both overwritten. What a single-device op or a kernel benchmark runs. The default runs
  // forward into `out` itself for fp32, else into an fp32 scratch (allocate, fill, forward,
  // cast_from_f32); the CUDA backend writes the dtype directly from its epilogue.
  virtual void forward_direct(const AttentionStep& step, void* out, float* lse);

  // Memory of this backend's space, and copies to/from the host.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr) = 0;
  virtual void copy_from_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // within the space

  // Element-wise helpers the CP schedules need, in this backend's space.
  virtual void fill(float* data, size_t count, float value) = 0;
  // dst[i] = round(src[i]) to `dtype`.
  virtual void cast_from_f32(void* dst, DType dtype, const float* src, size_t count) = 0;
  // delta[b][h][s] = sum_d dout[b][s][h][d] * out[b][s][h][d] (fp32).
  virtual void compute_delta(const void* dout, const void* out, DType dtype,
                             const AttentionDims& dims, float* delta) = 0;
  // dst[i] += src[i] for i < count (fp32).
  virtual void accumulate(float* dst, const float* src, size_t count) = 0;

  // Stream order (docs/design.md §4). Every call above is enqueued on one compute stream: a
  // cudaStream_t for the CUDA backend, nullptr for host backends, whose calls run to completion
  // before they return. Only copy_to_host, copy_from_host and synchronize wait on the host.
  virtual void* stream() const { return nullptr; }
  // Waits for all work issued by this backend (no-op on the host).
  virtual void synchronize() = 0;
  // Whether all work issued so far has finished; never blocks.
  virtual bool idle() { return true; }
  // A timeline whose marks on stream() time this backend's work (host backends: the host clock).
  virtual std::unique_ptr<Timeline> make_timeline() = 0;
};

// CUDA: the main loop a kernel family runs.
enum class MainLoop {
  kAuto,     // Hopper's (wgmma, TMA) where the device, head_dim and tensors allow it, else mma.sync
  kWgmma,    // Hopper's, or ringpack::Error naming what prevents it
  kMmaSync,  // the portable mma.sync loop
};
const char* main_loop_name(MainLoop loop);  // "auto", "wgmma", "mma_sync"
MainLoop parse_main_loop(std::string_view name);

// CUDA: how the Hopper kernels' CTAs meet their work items (forward: a query head and query
// tile; backward: a key tile and kv head).
enum class KernelSchedule {
  kAuto,        // the one measured faster (docs/benchmarks.md): the forward persistent at
                // head_dim 64 and 128, grid at 256; the backward grid
  kGrid,        // one CTA per item, launched in the kernel's order: the Hopper forward's query
                // tiles in descending row order, the Hopper backward's key tiles in row order
  kPersistent,  // one CTA per SM (BackendOptions::sm_margin fewer), each walking items in that
                // order; the next item's loads start while the current item finishes
};
const char* kernel_schedule_name(KernelSchedule schedule);  // "auto", "grid", "persistent"
KernelSchedule parse_kernel_schedule(std::string_view name);

// CUDA: how the Hopper forward's two consumer warpgroups keep the tensor cores busy while they
// compute the softmax.
enum class MmaOverlap {
  kAuto,       // the one measured faster (docs/benchmarks.md): pingpong at head_dim 256,
               // warpgroup at 64 and 128
  kWarpgroup,  // each warpgroup issues S_{j+1} with P_j V_j and runs S_{j+1}'s softmax meanwhile
  kPingPong,   // also: the warpgroups take turns to issue their MMAs, so one's softmax runs
               // while the other's MMAs occupy the tensor cores
};
const char* mma_overlap_name(MmaOverlap overlap);  // "auto", "warpgroup", "pingpong"
MmaOverlap parse_mma_overlap(std::string_view name);

// CUDA: how the Hopper backward adds dQ, dK and dV into the fp32 accumulators.
enum class GradientAdd {
  kAuto,     // TMA tensor reductions where TMA can describe the accumulators, else atomics
  kTma,      // TMA tensor reductions of tiles staged in shared memory, or ringpack::Error
  kAtomics,  // float2 atomics from registers
};
const char* gradient_add_name(GradientAdd add);  // "auto", "tma", "atomics"
GradientAdd parse_gradient_add(std::string_view name);

struct BackendOptions {
  int num_threads = 0;  // CPU backends: worker threads per call (0 = hardware concurrency)
  int device = 0;       // CUDA: device ordinal
  bool deterministic = false;
  // CUDA: the compute stream to enqueue on (a cudaStream_t, e.g. a framework's current stream);
  // 0 = the backend creates its own non-blocking stream.
  std::uintptr_t stream = 0;
  // CUDA: the forward's main loop (Hopper kernels: head_dim 64, 128 and 256 on compute
  // capability 9.x).
  MainLoop forward_loop = MainLoop::kAuto;
  // CUDA: the backward's main loop (Hopper kernels: head_dim 64, 128 and 256, not deterministic).
  MainLoop backward_loop = MainLoop::kAuto;
  // CUDA: how the Hopper backward adds its gradients (the mma.sync backward uses atomics, so kTma
  // needs the Hopper backward).
  GradientAdd backward_grad_add = GradientAdd::kAuto;
  // CUDA: CTAs per (key tile, kv head) of the backward's dK/dV kernel, each walking its share of
  // the GQA group; a divisor of num_heads_q / num_heads_kv. 0 = one per query head (deterministic:
  // one per group, the only value it accepts besides 0).
  int backward_head_splits = 0;
  // CUDA: the Hopper forward's and backward's schedules.
  KernelSchedule forward_schedule = KernelSchedule::kAuto;
  KernelSchedule backward_schedule = KernelSchedule::kAuto;
  // CUDA: the Hopper forward's overlap of the softmax with the MMAs.
  MmaOverlap forward_overlap = MmaOverlap::kAuto;
  // CUDA: SMs that the persistent kernels leave free, so that NCCL transfers of context
  // parallelism run beside them; 0 = every SM. Needs the persistent schedule (chosen, or auto's
  // choice) for every direction that runs.
  int sm_margin = 0;
};

std::unique_ptr<AttentionBackend> make_backend(BackendKind kind, const BackendOptions& options);

// 1/sqrt(head_dim) when scale <= 0.
float resolve_scale(float scale, int head_dim);

// Throws ringpack::Error naming the value when a step's sizes or pointers are unusable: negative
// sizes, num_heads_q not a multiple of num_heads_kv, head_dim < 1, a null tensor of a non-empty
// step. `backend` names the backend in the message. Every backend calls it first.
void check_attention_step(const AttentionStep& step, const std::string& backend);

}  // namespace ringpack

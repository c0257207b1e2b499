// The Hopper (sm_90a) dK/dV/dQ backward (backward/kernel_sm90.h): its tile choices and its
// launcher, instantiated in src/cuda/instances/backward_hd{64,128,256}_*_sm90.cu. The launcher
// plans the step's tiles on the device (tiles/tile_lists.h: per key tile, the query tiles that are
// not skipped) and launches one CTA per (key tile, kv head, head split), key tiles in row order.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/backward/params.h"
#include "cuda/kernel_options.h"
#include "ringpack/attention.h"

namespace ringpack::cuda {

// Tiles (head_dim 64 and 128): a CTA owns kBlockN = 128 keys, 64 per consumer warpgroup, whose
// dK and dV (at head_dim 128: 64 + 64 fp32 registers a thread) stay in registers; it walks query
// tiles of kBlockM = 64 (S^T and dP^T: 32 + 32 registers; dQ: 32). Shared memory at head_dim 128:
// K, V 32 KB each, two stages of Q and dO (16 KB each), two dS^T buffers (16 KB each), the staged
// dQ tiles (32 KB): 192 KB; at head_dim 64 K, V, Q and dO take half, and a third Q / dO stage
// (kStages) brings it to 148.5 KB. One CTA per SM, 384 threads: setmaxnreg gives 240 registers
// to each consumer and 24 to each producer thread.
//
// dQ of a query tile (64 queries x head_dim, a sum over the 128 keys) is split between the two
// consumer warpgroups: at head_dim 128 by columns (warpgroup w: columns [64 w, 64 w + 64) over
// all 128 keys, reading both warpgroups' dS^T), at head_dim 64 by keys (warpgroup w: all 64
// columns over its own 64 keys; both halves are added to the fp32 accumulator): a 64-wide dQ has
// no column halves of the 64 columns a wgmma needs. (Splitting it by steps instead, one
// warpgroup computing all of dQ over the 128 keys in turns, halved the dQ additions but measured
// 10-14% slower on packed rows; docs/history.md, session 12.)
//
// head_dim 256 (kDimSplit): dK and dV of 64 keys would take 128 + 128 registers a thread, so both
// warpgroups own the same kBlockN = 64 keys and each accumulates dK, dV over its half of the
// columns (64 + 64 registers). Each computes S^T and dP^T of the 64 keys over its half of the
// queries (wgmma 64 x 32) and writes its half of P^T and dS^T to shared memory; after a barrier
// both read all of them there for dV, dK (and dS^T for dQ, split by 128-column halves). Computing
// S^T and dP^T of all 64 queries in both warpgroups instead (P^T, dS^T from registers) cost 7 MMA
// units of work for 5 and twice the exponentials (docs/history.md, session 25). Shared memory:
// K, V 32 KB each, two stages of Q and dO (32 KB each), the P^T and dS^T tiles (8 KB each, one
// buffer each): 208 KB, which leaves no room for dQ tiles of their own (kDqInQStages): with
// GradAdd::kTiles each warpgroup stages its dQ part (64 x 128 fp32, 32 KB) in the step's Q
// (warpgroup 0) or dO (warpgroup 1) stage once both warpgroups' MMAs are done with them, and
// releases the stage to the producer once the tensor reductions have read it, during the next
// step's S^T and dP^T; dK and dV are staged in K, V, Q and dO at the end, as at 64 and 128.
// The dQ adds bound this kernel at the rate the L2 adds them (by tensor reductions 0.82-0.85x the
// time of float2 atomics, docs/benchmarks.md, "Session 27").
template <class Element_, int kHeadDim_>
struct BackwardWgmmaTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256,
                "the Hopper backward serves head_dim 64, 128, 256");
  static constexpr bool kDimSplit = kHeadDim == 256;
  static constexpr int kBlockN = kDimSplit ? 64 : 128;  // keys per CTA: 64 per consumer warpgroup
  static constexpr int kBlockM = 64;                    // queries per step
  static constexpr int kGroupCols = kDimSplit ? kHeadDim / 2 : kHeadDim;  // dK, dV of a group
  // Q / dO stages: three at head_dim 64 (the producer's row vectors and TMA loads one more step
  // ahead), two at 128 and 256, where a third would not fit (229 KB at 128).
  static constexpr int kStages = kHeadDim == 64 ? 3 : 2;
  static constexpr int kNumConsumerThreads = 2 * 128;
  static constexpr int kNumThreads = kNumConsumerThreads + 128;
  static constexpr int kConsumerRegisters = 240;
  static constexpr int kProducerRegisters = 24;
  static constexpr int kKVElems = kBlockN * kHeadDim;
  static constexpr int kQElems = kBlockM * kHeadDim;
  static constexpr int kKeyQueryElems = kBlockN * kBlockM;             // a P^T or dS^T tile
  static constexpr bool kDqByKeys = kHeadDim == 64;                    // else by column halves
  static constexpr int kDqCols = kDqByKeys ? kHeadDim : kHeadDim / 2;  // dQ columns of a group
  // GradAdd::kTiles: dQ staged in smem.dq (64, 128) or in the step's Q / dO stage (256); dK, dV
  // staged at the end in K, V, Q and dO and added by tensor reductions too.
  static constexpr bool kDqInQStages = kDimSplit;
};

// How the backward adds dQ (each step) and dK / dV (at the end) to the fp32 accumulators:
// kTiles stages them in shared memory and adds them by TMA tensor reductions (needs TMA maps of
// dq, dk, dv: 16-byte aligned, rows a multiple of 16 bytes apart); kAtomics adds float2 pairs
// from registers (8-byte alignment).
// BackendOptions::backward_grad_add chooses (GradientAdd: kAuto takes kTiles where the maps
// encode).
enum class GradAdd { kAtomics, kTiles };

// The boxes of the kTiles reductions: one consumer warp's 16 rows x 32 fp32 columns (128 bytes,
// the widest box the 128-byte swizzle allows).
constexpr int kGradBoxRows = 16;
constexpr int kGradBoxCols = 32;
constexpr int kGradBoxFloats = kGradBoxRows * kGradBoxCols;
constexpr int kDqBoxes = 64 / kGradBoxCols;  // boxes of a warpgroup's 64-column dQ half (smem.dq)

// Whether the Hopper backward serves a configuration: head_dim 64, 128 or 256, not deterministic
// (the deterministic mode uses the mma.sync kernels). It can add its gradients by tensor
// reductions (GradAdd::kTiles) at each of them.
constexpr bool backward_wgmma_head_dim(int head_dim) {
  return head_dim == 64 || head_dim == 128 || head_dim == 256;
}
constexpr bool backward_has_wgmma(int head_dim, bool deterministic) {
  return backward_wgmma_head_dim(head_dim) && !deterministic;
}

// params: every field of the step (make_backward_params, head_splits included: CTAs per (key
// tile, kv head)); the tile fields are filled here. The gradients are added as
// options.backward_grad_add says, by CTAs as options.backward_schedule and sm_margin say.
template <class Element, int kHeadDim>
void launch_backward_wgmma(BackwardParams params, const BackwardTensorMaps& maps,
                           const KernelOptions& options, cudaStream_t stream);

#define RINGPACK_BACKWARD_WGMMA_INSTANCE(kind, head_dim, element) \
  kind template void launch_backward_wgmma<element, head_dim>(    \
      BackwardParams, const BackwardTensorMaps&, const KernelOptions&, cudaStream_t)

RINGPACK_BACKWARD_WGMMA_INSTANCE(extern, 64, __nv_bfloat16);
RINGPACK_BACKWARD_WGMMA_INSTANCE(extern, 64, __half);
RINGPACK_BACKWARD_WGMMA_INSTANCE(extern, 128, __nv_bfloat16);
RINGPACK_BACKWARD_WGMMA_INSTANCE(extern, 128, __half);
RINGPACK_BACKWARD_WGMMA_INSTANCE(extern, 256, __nv_bfloat16);
RINGPACK_BACKWARD_WGMMA_INSTANCE(extern, 256, __half);

}  // namespace ringpack::cuda

// The Hopper (sm_90a) dK/dV/dQ backward (backward_wgmma_kernel.h): its tile choices and its
// launcher, instantiated in src/cuda/instances/backward_wgmma_hd128_*.cu. The launcher plans the
// step's tiles on the device (tile_lists.h: per key tile, the query tiles that are not skipped,
// heaviest key tiles first) and launches one CTA per (key tile, kv head, head split).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/backward_params.h"

namespace ringpack::cuda {

// Tiles (head_dim 128 only): a CTA owns kBlockN = 128 keys, 64 per consumer warpgroup, whose dK
// and dV (64 + 64 fp32 registers a thread) stay in registers; it walks query tiles of kBlockM =
// 64 (S^T and dP^T: 32 + 32 registers; dQ half: 32). Shared memory: K, V 32 KB each, two stages
// of Q and dO (16 KB each), two dS^T buffers (16 KB each), the staged dQ rows (36 KB): 196 KB. One
// CTA per SM, 384 threads: setmaxnreg gives 240 registers to each consumer and 24 to each producer
// thread.
template <class Element_>
struct BackwardWgmmaTraits {
  using Element = Element_;
  static constexpr int kHeadDim = 128;
  static constexpr int kBlockN = 128;  // keys per CTA: 64 per consumer warpgroup
  static constexpr int kBlockM = 64;   // queries per step
  static constexpr int kStages = 2;
  static constexpr int kNumConsumerThreads = 2 * 128;
  static constexpr int kNumThreads = kNumConsumerThreads + 128;
  static constexpr int kConsumerRegisters = 240;
  static constexpr int kProducerRegisters = 24;
  static constexpr int kKVElems = kBlockN * kHeadDim;
  static constexpr int kQElems = kBlockM * kHeadDim;
  static constexpr int kDsElems = kBlockN * kBlockM;
  // Row stride (floats) of the staged dQ rows: 64 + 8, so rows g and g + 1 of a fragment store
  // start 8 banks apart and a half-warp's float2 stores hit 32 distinct banks; 288 bytes keeps
  // every row 16-byte aligned for the bulk reduction.
  static constexpr int kDqStageStride = 72;
  static constexpr int kDqStageFloats = kNumConsumerThreads / 32 * 16 * kDqStageStride;
};

// How the backward adds each step's dQ tile to the fp32 dq accumulator.
enum class DqAdd {
  kAtomics,  // float2 atomics from the accumulator registers (any 8-byte aligned dq)
  kRows,     // rows staged in shared memory, one bulk reduction per 256-byte row (16-byte aligned)
  kTiles,    // tiles staged in shared memory, two tensor reductions per warp (a TMA map of dq)
};

// The fastest mode the accumulator allows (tile_map: dq has a TMA map; rows_aligned: 16-byte
// aligned), unless RINGPACK_BACKWARD_DQ names one (atomics, rows, tiles) for A/B benchmarks.
DqAdd choose_dq_add(bool tile_map, bool rows_aligned);

// CTAs per (key tile, kv head): backward_head_splits (one per query head, dK/dV added with
// atomics), unless RINGPACK_BACKWARD_HEAD_SPLITS names a divisor of the group size (A/B
// benchmarks: 1 walks the whole GQA group in one CTA).
int backward_wgmma_head_splits(int group_size);

// params: every field of the step (make_backward_params); the tile fields are filled here.
// dq is added as choose_dq_add says; the deterministic mode uses the mma.sync kernels.
template <class Element>
void launch_backward_wgmma(BackwardParams params, const BackwardTensorMaps& maps,
                           cudaStream_t stream);

#define RINGPACK_BACKWARD_WGMMA_INSTANCE(kind, element)                                        \
  kind template void launch_backward_wgmma<element>(BackwardParams, const BackwardTensorMaps&, \
                                                    cudaStream_t)

RINGPACK_BACKWARD_WGMMA_INSTANCE(extern, __nv_bfloat16);
RINGPACK_BACKWARD_WGMMA_INSTANCE(extern, __half);

}  // namespace ringpack::cuda

// The forward attention kernel for Hopper (sm_90a): warp-specialised, TMA-fed, wgmma main loop,
// for packed rows in any token order. Device code; included only by
// src/cuda/instances/forward_*_sm90.cu.
//
// Same contract, tile lists, mask policy, softmax and epilogues as the mma.sync kernel
// (forward/kernel_sm80.h); the main loop differs:
//   - CTA = 2 consumer warpgroups + 1 producer warpgroup (setmaxnreg moves its registers to the
//     consumers). Warpgroup w < 2 owns query rows [64 w, 64 w + 64) of a 128-row tile; both read
//     the same K/V tiles.
//   - One producer warp walks the tile list and fills two K and two V stages with TMA copies
//     (tensor maps with the 128-byte swizzle of common/wgmma.h), plus the keys' ids and positions
//     for partial tiles; full/empty mbarriers per stage hand each stage to the consumers and back,
//     so the warpgroups run decoupled from each other and from the loads.
//   - S = Q K^T: 64 x 128 per warpgroup, head_dim / 16 wgmma with Q and K from shared memory;
//     O += P V with P in registers (the S accumulator layout is the A fragment layout once packed
//     to 16 bits) and V read MN-major from the same tile layout as K.
//   - Software pipeline inside each warpgroup: S_{j+1} is issued together with P_j V_j, and its
//     softmax runs on the CUDA cores while P_j V_j occupies the tensor cores; O is rescaled once
//     P_j V_j has landed.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/cuda_check.h"
#include "cuda/common/mma_sync.h"
#include "cuda/common/tma.h"
#include "cuda/common/wgmma.h"
#include "cuda/forward/epilogue.h"
#include "cuda/forward/instances.h"
#include "cuda/forward/params.h"
#include "cuda/forward/softmax.h"
#include "cuda/forward/traits.h"

namespace ringpack::cuda {

// Shared memory of one CTA; tiles first, each 1024-byte aligned for the swizzle.
template <class Traits>
struct ForwardWgmmaSmem {
  using Element = typename Traits::Element;
  static constexpr int kStages = Traits::kStages;
  static constexpr int kBlockN = Traits::kBlockN;
  alignas(1024) Element q[Traits::kQElems];            // [kHeadDim / 64][kBlockM][64]
  alignas(1024) Element k[kStages][Traits::kKVElems];  // [kHeadDim / 64][kBlockN][64] each
  alignas(1024) Element v[kStages][Traits::kKVElems];  // [kHeadDim / 64][kBlockN][64] each
  int32_t segment_ids_k[kStages][kBlockN];             // keys' ids / positions, partial tiles only
  int32_t positions_k[kStages][kBlockN];
  uint64_t q_full;            // Q landed
  uint64_t k_full[kStages];   // K (and ids/positions) of the stage's tile landed
  uint64_t k_empty[kStages];  // every consumer warp is done with the stage's K
  uint64_t v_full[kStages];
  uint64_t v_empty[kStages];
};

template <class Traits, bool kMerge>
__global__ void __launch_bounds__(Traits::kNumThreads, 1)
    forward_wgmma_kernel(const __grid_constant__ ForwardParams params,
                         const __grid_constant__ ForwardTensorMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Element = typename Traits::Element;
  using Ops = ElementOps<Element>;
  using Smem = ForwardWgmmaSmem<Traits>;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kStages = Traits::kStages;
  constexpr int kSTiles = kBlockN / 8;                    // n8 accumulator tiles of S
  constexpr int kOTiles = kHeadDim / 8;                   // n8 accumulator tiles of O
  constexpr int kDSteps = kHeadDim / kWgmmaK;             // k16 steps of Q K^T
  constexpr int kNSteps = kBlockN / kWgmmaK;              // k16 steps of P V
  constexpr int kStepsPerBlock = kSwizzleCols / kWgmmaK;  // k16 steps per 64-column block: 4
  constexpr int kColBlocks = kHeadDim / kSwizzleCols;     // TMA boxes per tile
  constexpr int kRows = 2;                                // query rows per thread: g and g + 8
  constexpr int kConsumerWarps = Traits::kNumConsumerThreads / kWarpSize;
  constexpr uint32_t kTileBytes = Traits::kKVElems * sizeof(Element);
  using MmaS = WgmmaOps<Element, kBlockN>;
  using MmaO = WgmmaOps<Element, kHeadDim>;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  Smem& smem = *reinterpret_cast<Smem*>(smem_raw);

  const int head = blockIdx.x;
  const int slot = params.tile_order[blockIdx.y];  // heaviest query tiles launch first
  const int batch = slot / params.num_tiles_q;
  const int q_begin = (slot % params.num_tiles_q) * kBlockM;
  const int kv_head = head / params.heads_per_kv;
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int32_t* tile_list = params.tile_lists + int64_t(slot) * params.num_tiles_k;
  const int tile_count = params.tile_counts[slot];

  if (threadIdx.x == 0) {
    mbarrier_init(&smem.q_full, 1);
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(&smem.k_full[s], kWarpSize);  // every producer lane (ids/positions)
      mbarrier_init(&smem.k_empty[s], kConsumerWarps);
      mbarrier_init(&smem.v_full[s], 1);
      mbarrier_init(&smem.v_empty[s], kConsumerWarps);
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  if (threadIdx.x >= Traits::kNumConsumerThreads) {
    // ---- producer warpgroup: gives its registers to the consumers; its first warp loads Q
    // once, then K (+ ids/positions) and V of each listed key tile ----
    set_max_registers_dec<Traits::kProducerRegisters>();
    if (warp != kConsumerWarps) return;
    const int64_t q_row0 = int64_t(batch) * params.seqlen_q + q_begin;
    const int64_t k_row0 = int64_t(batch) * params.seqlen_k;
    const int32_t* seg_k = params.segment_ids_k + k_row0;
    const int32_t* pos_k = params.positions_k + k_row0;
    if (tile_count > 0 && lane == 0) {
      mbarrier_arrive_expect_bytes(&smem.q_full, Traits::kQElems * sizeof(Element));
      for (int b = 0; b < kColBlocks; ++b)
        tma_load_3d(smem.q + b * kBlockM * kSwizzleCols, &maps.q, b * kSwizzleCols, head,
                    int(q_row0), &smem.q_full);
    }
    for (int it = 0; it < tile_count; ++it) {
      const int stage = it % kStages;
      const uint32_t free_parity = ((it / kStages) & 1) ^ 1;  // first use: passes at once
      const int entry = tile_list[it];
      const int k_begin = (entry >> 1) * kBlockN;
      mbarrier_wait(&smem.k_empty[stage], free_parity);
      if (lane == 0) {
        mbarrier_expect_bytes(&smem.k_full[stage], kTileBytes);
        for (int b = 0; b < kColBlocks; ++b)
          tma_load_3d(smem.k[stage] + b * kBlockN * kSwizzleCols, &maps.k, b * kSwizzleCols,
                      kv_head, int(k_row0 + k_begin), &smem.k_full[stage]);
      }
      if (entry & 1) {  // partial tile: keys past seqlen_k read as padding (id 0: never visible)
        for (int i = lane; i < kBlockN; i += kWarpSize) {
          const bool in_range = k_begin + i < params.seqlen_k;
          smem.segment_ids_k[stage][i] = in_range ? seg_k[k_begin + i] : 0;
          smem.positions_k[stage][i] = in_range ? pos_k[k_begin + i] : 0;
        }
      }
      mbarrier_arrive(&smem.k_full[stage]);  // after this lane's ids/positions are written

      mbarrier_wait(&smem.v_empty[stage], free_parity);
      if (lane == 0) {
        mbarrier_arrive_expect_bytes(&smem.v_full[stage], kTileBytes);
        for (int b = 0; b < kColBlocks; ++b)
          tma_load_3d(smem.v[stage] + b * kBlockN * kSwizzleCols, &maps.v, b * kSwizzleCols,
                      kv_head, int(k_row0 + k_begin), &smem.v_full[stage]);
      }
    }
    return;
  }

  // ---- consumer warpgroups ----
  set_max_registers_inc<Traits::kConsumerRegisters>();
  const int warpgroup = threadIdx.x / kWarpgroupThreads;
  const int quad_row = lane / 4;
  const int quad_col = (lane % 4) * 2;
  const int warp_row0 = warp * Traits::kRowsPerWarp;  // = 64 warpgroup + 16 (warp % 4)

  // The visible-key interval of this thread's two query rows (rows past seqlen_q: padding).
  VisibleKeys keys[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int row = q_begin + warp_row0 + quad_row + 8 * i;
    const int64_t index = int64_t(batch) * params.seqlen_q + row;
    const bool valid = row < params.seqlen_q;
    keys[i] = visible_keys(valid ? params.segment_ids_q[index] : 0,
                           valid ? params.positions_q[index] : 0, params.mask);
  }

  float acc_o[1][kOTiles][4] = {};
  float row_max[kRows] = {-INFINITY, -INFINITY};  // running max of raw scores <q, k>
  float row_sum[kRows] = {0.0f, 0.0f};            // this thread's partial of l

  // Descriptors (common/wgmma.h). Q: this warpgroup's 64 rows, K-major; K: K-major; V: MN-major.
  constexpr uint32_t kBlockBytesQ = kBlockM * kSwizzleLineBytes;   // one 64-column block of Q
  constexpr uint32_t kBlockBytesKV = kBlockN * kSwizzleLineBytes;  // one 64-column block of K / V
  constexpr uint32_t kStepBytes = kWgmmaK * sizeof(Element);       // one k16 step along a line: 32
  const uint64_t desc_q =
      smem_descriptor(smem.q + warpgroup * 64 * kSwizzleCols, kChunkBytes, kSwizzleAtomBytes);

  // Issues S = Q K^T (64 x kBlockN per warpgroup, fp32) for the K tile in `stage`.
  auto issue_scores = [&](float(&scores)[1][kSTiles][4], int stage) {
    const uint64_t desc_k = smem_descriptor(smem.k[stage], kChunkBytes, kSwizzleAtomBytes);
#pragma unroll
    for (int d = 0; d < kDSteps; ++d) {
      const uint32_t in_block = (d % kStepsPerBlock) * kStepBytes;
      MmaS::template ss<0>(
          scores[0], advance_descriptor(desc_q, (d / kStepsPerBlock) * kBlockBytesQ + in_block),
          advance_descriptor(desc_k, (d / kStepsPerBlock) * kBlockBytesKV + in_block), d > 0);
    }
  };
  // Issues O += P V for listed tile `it` once its V has landed: V rows 16 kk .. 16 kk + 15 are
  // k16 step kk.
  auto issue_output = [&](const uint32_t(&probs)[kNSteps][4], int it) {
    const int stage = it % kStages;
    mbarrier_wait(&smem.v_full[stage], (it / kStages) & 1);
    const uint64_t desc_v = smem_descriptor(smem.v[stage], kBlockBytesKV, kSwizzleAtomBytes);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kNSteps; ++kk)
      MmaO::template rs<1>(acc_o[0], probs[kk],
                           advance_descriptor(desc_v, kk * kWgmmaK * kSwizzleLineBytes), true);
    wgmma_commit();
  };
  // Partial tiles: rule (1) per element on the scores of the key tile in `stage`.
  auto mask_scores = [&](float(&scores)[1][kSTiles][4], int entry, int stage) {
    if (entry & 1)
      mask_partial_tile(scores, keys, smem.segment_ids_k[stage], smem.positions_k[stage], quad_col);
  };
  // P as A fragments: two n8 S tiles = one k16 A tile (rows g, g + 8; columns c, c + 8).
  auto pack_probs = [&](uint32_t(&probs)[kNSteps][4], const float(&scores)[1][kSTiles][4]) {
#pragma unroll
    for (int kk = 0; kk < kNSteps; ++kk) {
      probs[kk][0] = Ops::pack(scores[0][2 * kk][0], scores[0][2 * kk][1]);
      probs[kk][1] = Ops::pack(scores[0][2 * kk][2], scores[0][2 * kk][3]);
      probs[kk][2] = Ops::pack(scores[0][2 * kk + 1][0], scores[0][2 * kk + 1][1]);
      probs[kk][3] = Ops::pack(scores[0][2 * kk + 1][2], scores[0][2 * kk + 1][3]);
    }
  };
  // This warp is done with a stage (its reads and its warpgroup's wgmma reads have finished).
  auto release = [&](uint64_t* empty) {
    __syncwarp();
    if (lane == 0) mbarrier_arrive(empty);
  };

  if (tile_count > 0) {
    float s[1][kSTiles][4];
    uint32_t p[kNSteps][4];
    float correction[kRows];
    mbarrier_wait(&smem.q_full, 0);
    mbarrier_wait(&smem.k_full[0], 0);
    wgmma_fence();
    issue_scores(s, 0);
    wgmma_commit();
    wgmma_wait<0>();
    fence_accumulators(s[0]);
    mask_scores(s, tile_list[0], 0);
    release(&smem.k_empty[0]);
    softmax_tile(s, row_max, row_sum, params.scale_log2, correction);  // O = 0: nothing to rescale
    pack_probs(p, s);

    // The last tile is outside the loop so the body issues S_{it+1} unconditionally: a branch
    // around that issue makes ptxas serialise the wgmma pipeline (docs/cuda_kernels.md).
    for (int it = 0; it + 1 < tile_count; ++it) {
      const int next = (it + 1) % kStages;
      fence_accumulators(acc_o[0]);
      mbarrier_wait(&smem.k_full[next], ((it + 1) / kStages) & 1);
      wgmma_fence();
      issue_scores(s, next);
      wgmma_commit();
      issue_output(p, it);
      wgmma_wait<1>();  // S_{it+1} landed; P_it V_it may still run
      fence_accumulators(s[0]);
      mask_scores(s, tile_list[it + 1], next);
      release(&smem.k_empty[next]);
      softmax_tile(s, row_max, row_sum, params.scale_log2, correction);
      wgmma_wait<0>();
      fence_accumulators(acc_o[0]);
      release(&smem.v_empty[it % kStages]);
      rescale_output(acc_o, correction);
      pack_probs(p, s);
    }
    issue_output(p, tile_count - 1);
    wgmma_wait<0>();
    fence_accumulators(acc_o[0]);
    release(&smem.v_empty[(tile_count - 1) % kStages]);
  }

  // Direct: staged through Q's shared memory in the epilogue's own layout, so both warpgroups'
  // MMAs must have finished reading Q (a barrier of the consumer threads only).
  named_barrier_sync(NamedBarrier::kConsumers, Traits::kNumConsumerThreads);
  forward_epilogue<Traits, kMerge>(params, acc_o, row_max, row_sum, smem.q + warp_row0 * kHeadDim,
                                   WarpRows{batch, head, q_begin + warp_row0, lane});
#else
  __trap();  // built without sm_90a code: the launcher never selects this kernel
#endif
}

template <class Traits, bool kMerge>
void launch_forward_wgmma(const ForwardParams& params, const ForwardTensorMaps& maps,
                          cudaStream_t stream) {
  auto kernel = forward_wgmma_kernel<Traits, kMerge>;
  constexpr int kSmemBytes = int(sizeof(ForwardWgmmaSmem<Traits>));
  RINGPACK_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const dim3 grid(params.num_heads_q, params.batch * params.num_tiles_q);
  kernel<<<grid, Traits::kNumThreads, kSmemBytes, stream>>>(params, maps);
  RINGPACK_CHECK_LAUNCH();
}

}  // namespace ringpack::cuda

// The forward attention kernel with Hopper's warpgroup MMA (wgmma, sm_90a) for packed rows in any
// token order. Device code; included only by src/cuda/instances/forward_wgmma_*.cu.
//
// Same contract, tile lists, mask policy, softmax and epilogues as the mma.sync kernel
// (forward_kernel.h); only the main loop differs:
//   - CTA = 2 warpgroups; warpgroup w owns query rows [64 w, 64 w + 64) of a 128-row tile;
//   - S = Q K^T: 64 x 128 per warpgroup, kHeadDim / 16 wgmma with Q and K from shared memory;
//   - O += P V: P stays in registers (the S accumulator layout is the A fragment layout once
//     packed to 16 bits), V is read MN-major from the same swizzled tile layout as K;
//   - K/V tiles (and the keys' ids/positions of partial tiles) stream through two cp.async stages;
//   - software pipeline inside each warpgroup: S_{j+1} = Q K_{j+1}^T is issued together with
//     P_j V_j, and its softmax runs on the CUDA cores while P_j V_j occupies the tensor cores.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/cuda_check.h"
#include "cuda/forward_epilogue.h"
#include "cuda/forward_instances.h"
#include "cuda/forward_mma.h"
#include "cuda/forward_params.h"
#include "cuda/forward_softmax.h"
#include "cuda/kernel_traits.h"
#include "cuda/wgmma.h"

namespace ringpack::cuda {

// Copies rows [0, kRows) of a [tokens, row_stride] global tile into a 128B-swizzled shared tile
// (wgmma.h); rows at or past valid_rows are zero-filled (their source is never read).
template <class Traits, int kRows>
__device__ __forceinline__ void load_swizzled_tile_async(typename Traits::Element* smem,
                                                         const typename Traits::Element* gmem,
                                                         int64_t row_stride, int valid_rows) {
  constexpr int kChunks = Traits::kChunksPerRow;
#pragma unroll 4
  for (int i = threadIdx.x; i < kRows * kChunks; i += Traits::kNumThreads) {
    const int row = i / kChunks;
    const int chunk = i % kChunks;
    const bool valid = row < valid_rows;
    const auto* src = gmem + (valid ? row * row_stride + chunk * kChunkElems : 0);
    cp_async_16(smem + swizzled_tile_offset<kRows>(row, chunk), src, valid);
  }
}

template <class Traits, bool kMerge>
__global__ void __launch_bounds__(Traits::kNumThreads, 1)
    forward_wgmma_kernel(const __grid_constant__ ForwardParams params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Element = typename Traits::Element;
  using Ops = ElementOps<Element>;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kSTiles = kBlockN / 8;                    // n8 accumulator tiles of S
  constexpr int kOTiles = kHeadDim / 8;                   // n8 accumulator tiles of O
  constexpr int kDSteps = kHeadDim / kWgmmaK;             // k16 steps of Q K^T
  constexpr int kNSteps = kBlockN / kWgmmaK;              // k16 steps of P V
  constexpr int kRows = 2;                                // query rows per thread: g and g + 8
  constexpr int kStepsPerBlock = kSwizzleCols / kWgmmaK;  // k16 steps per 64-column block: 4
  using MmaS = WgmmaOps<Element, kBlockN>;
  using MmaO = WgmmaOps<Element, kHeadDim>;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  Element* s_q = reinterpret_cast<Element*>(smem_raw);      // [kHeadDim / 64][kBlockM][64]
  Element* s_k = s_q + Traits::kQElems;                     // [kStages][kHeadDim / 64][kBlockN][64]
  Element* s_v = s_k + Traits::kStages * Traits::kKVElems;  // [kStages][kHeadDim / 64][kBlockN][64]
  int32_t* s_seg_k = reinterpret_cast<int32_t*>(s_v + Traits::kStages * Traits::kKVElems);
  int32_t* s_pos_k = s_seg_k + Traits::kStages * kBlockN;  // [kStages][kBlockN] each
  int32_t* s_seg_q = s_pos_k + Traits::kStages * kBlockN;  // [kBlockM]
  int32_t* s_pos_q = s_seg_q + kBlockM;                    // [kBlockM]

  const int head = blockIdx.x;
  const int slot = params.tile_order[blockIdx.y];  // heaviest query tiles launch first
  const int batch = slot / params.num_tiles_q;
  const int q_begin = (slot % params.num_tiles_q) * kBlockM;
  const int kv_head = head / params.heads_per_kv;
  const int warpgroup = threadIdx.x / kWarpgroupThreads;
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int quad_row = lane / 4;
  const int quad_col = (lane % 4) * 2;
  const int warp_row0 = warp * Traits::kRowsPerWarp;  // = 64 warpgroup + 16 (warp % 4)

  const auto* q = static_cast<const Element*>(params.q) +
                  (int64_t(batch) * params.seqlen_q + q_begin) * params.q_token_stride +
                  int64_t(head) * kHeadDim;
  const int64_t kv_offset =
      int64_t(batch) * params.seqlen_k * params.kv_token_stride + int64_t(kv_head) * kHeadDim;
  const auto* k = static_cast<const Element*>(params.k) + kv_offset;
  const auto* v = static_cast<const Element*>(params.v) + kv_offset;
  const int32_t* seg_k = params.segment_ids_k + int64_t(batch) * params.seqlen_k;
  const int32_t* pos_k = params.positions_k + int64_t(batch) * params.seqlen_k;
  const int32_t* tile_list = params.tile_lists + int64_t(slot) * params.num_tiles_k;
  const int tile_count = params.tile_counts[slot];

  for (int r = threadIdx.x; r < kBlockM; r += Traits::kNumThreads) {
    const bool valid = q_begin + r < params.seqlen_q;
    const int64_t index = int64_t(batch) * params.seqlen_q + q_begin + r;
    s_seg_q[r] = valid ? params.segment_ids_q[index] : 0;
    s_pos_q[r] = valid ? params.positions_q[index] : 0;
  }  // visible to all warps after the first barrier of the tile loop

  float acc_o[1][kOTiles][4] = {};
  float row_max[kRows] = {-INFINITY, -INFINITY};  // running max of raw scores <q, k>
  float row_sum[kRows] = {0.0f, 0.0f};            // this thread's partial of l

  // K (and, for partial tiles, the keys' ids and positions) and V of key tile `entry` (encoded
  // (tile << 1) | partial) go to `stage` in separate cp.async groups: K is needed a step earlier.
  auto issue_k = [&](int entry, int stage) {
    const int k_begin = (entry >> 1) * kBlockN;
    const int valid = min(kBlockN, params.seqlen_k - k_begin);
    load_swizzled_tile_async<Traits, kBlockN>(s_k + stage * Traits::kKVElems,
                                              k + int64_t(k_begin) * params.kv_token_stride,
                                              params.kv_token_stride, valid);
    if (entry & 1) {  // partial tile: the per-element rule needs the keys' ids and positions
      for (int i = threadIdx.x; i < kBlockN; i += Traits::kNumThreads) {
        const bool in_range = i < valid;
        const int t = in_range ? k_begin + i : 0;
        cp_async_4(s_seg_k + stage * kBlockN + i, seg_k + t, in_range);  // 0 = never visible
        cp_async_4(s_pos_k + stage * kBlockN + i, pos_k + t, in_range);
      }
    }
  };
  auto issue_v = [&](int entry, int stage) {
    const int k_begin = (entry >> 1) * kBlockN;
    const int valid = min(kBlockN, params.seqlen_k - k_begin);
    load_swizzled_tile_async<Traits, kBlockN>(s_v + stage * Traits::kKVElems,
                                              v + int64_t(k_begin) * params.kv_token_stride,
                                              params.kv_token_stride, valid);
  };

  // Descriptors (wgmma.h). Q: this warpgroup's 64 rows, K-major; K: K-major; V: MN-major.
  constexpr uint32_t kBlockBytesQ = kBlockM * kSwizzleLineBytes;   // one 64-column block of Q
  constexpr uint32_t kBlockBytesKV = kBlockN * kSwizzleLineBytes;  // one 64-column block of K / V
  constexpr uint32_t kStageBytes = Traits::kKVElems * sizeof(Element);
  constexpr uint32_t kStepBytes = kWgmmaK * sizeof(Element);  // one k16 step along a line: 32
  const uint64_t desc_q =
      smem_descriptor(s_q + warpgroup * 64 * kSwizzleCols, kChunkBytes, kSwizzleAtomBytes);
  const uint64_t desc_k = smem_descriptor(s_k, kChunkBytes, kSwizzleAtomBytes);
  const uint64_t desc_v = smem_descriptor(s_v, kBlockBytesKV, kSwizzleAtomBytes);

  // Issues S = Q K^T (64 x kBlockN per warpgroup, fp32) for the K tile in `stage`.
  auto issue_scores = [&](float(&scores)[1][kSTiles][4], int stage) {
#pragma unroll
    for (int d = 0; d < kDSteps; ++d) {
      const uint32_t in_block = (d % kStepsPerBlock) * kStepBytes;
      const uint32_t offset_q = (d / kStepsPerBlock) * kBlockBytesQ + in_block;
      const uint32_t offset_k =
          stage * kStageBytes + (d / kStepsPerBlock) * kBlockBytesKV + in_block;
      MmaS::template ss<0>(scores[0], advance_descriptor(desc_q, offset_q),
                           advance_descriptor(desc_k, offset_k), d > 0);
    }
  };
  // Issues O += P V for the V tile in `stage`: V rows 16 kk .. 16 kk + 15 are k16 step kk.
  auto issue_output = [&](const uint32_t(&probs)[kNSteps][4], int stage) {
#pragma unroll
    for (int kk = 0; kk < kNSteps; ++kk) {
      const uint32_t offset_v = stage * kStageBytes + kk * kWgmmaK * kSwizzleLineBytes;
      MmaO::template rs<1>(acc_o[0], probs[kk], advance_descriptor(desc_v, offset_v), true);
    }
  };
  // Partial tiles: rule (1) per element on the scores of the key tile in `stage`.
  auto mask_scores = [&](float(&scores)[1][kSTiles][4], int entry, int stage) {
    if (!(entry & 1)) return;
    VisibleKeys keys[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int row = warp_row0 + quad_row + 8 * i;
      keys[i] = visible_keys(s_seg_q[row], s_pos_q[row], params.mask);
    }
    mask_partial_tile(scores, keys, s_seg_k + stage * kBlockN, s_pos_k + stage * kBlockN, quad_col);
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

  if (tile_count > 0) {
    // Software pipeline: while the tensor cores run P_j V_j, the warpgroup turns S_{j+1} into
    // P_{j+1}; O is rescaled once P_j V_j has landed. cp.async groups, in order: {Q, K_0, V_0},
    // {K_1}, {V_1}, then per step j: {K_{j+2}} at its start and {V_{j+2}} at its end, so step j
    // waits for all but the newest group (K_{j+1} and V_j landed, V_{j+1} may be in flight).
    load_swizzled_tile_async<Traits, kBlockM>(s_q, q, params.q_token_stride,
                                              params.seqlen_q - q_begin);
    issue_k(tile_list[0], 0);
    issue_v(tile_list[0], 0);
    cp_async_commit();
    if (tile_count > 1) issue_k(tile_list[1], 1);
    cp_async_commit();
    if (tile_count > 1) issue_v(tile_list[1], 1);
    cp_async_commit();
    cp_async_wait<2>();
    fence_proxy_async_shared();  // copies visible to the tensor cores
    __syncthreads();

    float s[1][kSTiles][4];
    uint32_t p[kNSteps][4];
    float correction[kRows];
    wgmma_fence();
    issue_scores(s, 0);
    wgmma_commit();
    wgmma_wait<0>();
    fence_accumulators(s[0]);
    mask_scores(s, tile_list[0], 0);
    softmax_tile(s, row_max, row_sum, params.scale_log2, correction);  // O = 0: nothing to rescale
    pack_probs(p, s);

    for (int it = 0; it < tile_count; ++it) {
      const int stage = it & 1;
      const bool has_next = it + 1 < tile_count;
      cp_async_wait<1>();  // K_{it+1} and V_it landed (this thread's copies)
      fence_proxy_async_shared();
      __syncthreads();  // ... everyone's; and every S_it is done, so K stage `stage` is free
      if (it + 2 < tile_count) issue_k(tile_list[it + 2], stage);
      cp_async_commit();

      fence_accumulators(acc_o[0]);
      wgmma_fence();
      if (has_next) {
        issue_scores(s, stage ^ 1);
        wgmma_commit();
      }
      issue_output(p, stage);
      wgmma_commit();
      if (has_next) {
        wgmma_wait<1>();  // S_{it+1} landed; P_it V_it may still run
        fence_accumulators(s[0]);
        mask_scores(s, tile_list[it + 1], stage ^ 1);
        softmax_tile(s, row_max, row_sum, params.scale_log2, correction);
      }
      wgmma_wait<0>();
      fence_accumulators(acc_o[0]);
      if (has_next) {
        rescale_output(acc_o, correction);
        pack_probs(p, s);
      }
      __syncthreads();  // every warpgroup is done with V stage `stage`
      if (it + 2 < tile_count) issue_v(tile_list[it + 2], stage);
      cp_async_commit();
    }
  }

  // Direct: staged through rows of s_q in the epilogue's own layout; every warpgroup's MMAs
  // have finished reading Q (the loop ends with a barrier after the last wait).
  forward_epilogue<Traits, kMerge>(params, acc_o, row_max, row_sum, s_q + warp_row0 * kHeadDim,
                                   WarpRows{batch, head, q_begin + warp_row0, lane});
#else
  __trap();  // built without sm_90a code: the launcher never selects this kernel
#endif
}

template <class Traits, bool kMerge>
void launch_forward_wgmma(const ForwardParams& params, cudaStream_t stream) {
  auto kernel = forward_wgmma_kernel<Traits, kMerge>;
  RINGPACK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           Traits::kSmemBytes));
  const dim3 grid(params.num_heads_q, params.batch * params.num_tiles_q);
  kernel<<<grid, Traits::kNumThreads, Traits::kSmemBytes, stream>>>(params);
  RINGPACK_CHECK_LAUNCH();
}

}  // namespace ringpack::cuda

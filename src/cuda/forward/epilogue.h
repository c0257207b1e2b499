// The forward epilogues, shared by the mma.sync (forward/kernel_sm80.h) and wgmma
// (forward/kernel_sm90.h) main loops. Device code.
//
// Each thread holds, per m16 row block m of its warp, O for rows g and g + 8 (g = lane / 4) in
// the accumulator fragment layout (acc_o[m][n8 tile][(g, c), (g, c+1), (g+8, c), (g+8, c+1)],
// c = 2 (lane % 4)), and per row i = 2 m + (0: g, 1: g + 8) the running max of raw scores and its
// partial of l (the quad's four lanes share a row).
//   Direct: O / l in the input dtype, lse = m * scale + ln(l) (natural log), -inf if empty.
//   Merge (docs/design.md §4): lse' = logaddexp(lse_acc, lse_s);
//     out_acc = out_acc * exp(lse_acc - lse') + (O / l) * exp(lse_s - lse'); empty rows untouched.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/mma_sync.h"
#include "cuda/forward/params.h"

namespace ringpack::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

// Where this warp's rows are: row0 = first query row of the warp in its row of the batch.
struct WarpRows {
  int batch;
  int head;
  int row0;
  int lane;
};

// s_o: kRowsPerWarp x kHeadDim elements of shared memory that only this warp touches now
// (direct epilogue staging for 16-byte stores).
template <class Traits, bool kMerge>
__device__ __forceinline__ void forward_epilogue(
    const ForwardParams& params, float (&acc_o)[Traits::kMTiles][Traits::kHeadDim / 8][4],
    const float (&row_max)[2 * Traits::kMTiles], const float (&row_sum)[2 * Traits::kMTiles],
    typename Traits::Element* s_o, const WarpRows& at) {
  using Element = typename Traits::Element;
  using Ops = ElementOps<Element>;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kOTiles = kHeadDim / 8;
  constexpr int kRows = 2 * Traits::kMTiles;
  const int lane = at.lane;
  const int quad_row = lane / 4;
  const int quad_col = (lane % 4) * 2;
  const int64_t lse_base = (int64_t(at.batch) * params.num_heads_q + at.head) * params.seqlen_q;

  // Row totals l = sum over the quad, then lse = m * scale + ln(l) (natural log).
  float lse_row[kRows];
  float inv_sum[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    float sum = row_sum[i];
    sum += __shfl_xor_sync(kFullMask, sum, 1);
    sum += __shfl_xor_sync(kFullMask, sum, 2);
    const bool any = sum > 0.0f;
    lse_row[i] = any ? row_max[i] * params.scale + logf(sum) : -INFINITY;
    inv_sum[i] = any ? 1.0f / sum : 0.0f;
  }

  if constexpr (!kMerge) {
    // Stage O (dtype) through s_o, then 16-byte coalesced stores.
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int row = 16 * (i / 2) + quad_row + 8 * (i % 2);
#pragma unroll
      for (int t = 0; t < kOTiles; ++t) {  // n8 tile t = 16-byte chunk t of the row
        const float* o = acc_o[i / 2][t] + 2 * (i % 2);
        *reinterpret_cast<uint32_t*>(s_o + swizzled_offset<kHeadDim>(row, t) + quad_col) =
            Ops::pack(o[0] * inv_sum[i], o[1] * inv_sum[i]);
      }
    }
    __syncwarp();
    auto* out = static_cast<Element*>(params.out) + int64_t(at.head) * kHeadDim;
    for (int i = lane; i < Traits::kRowsPerWarp * Traits::kChunksPerRow; i += kWarpSize) {
      const int r = i / Traits::kChunksPerRow;
      const int chunk = i % Traits::kChunksPerRow;
      const int row = at.row0 + r;
      if (row >= params.seqlen_q) continue;
      const int64_t token = int64_t(at.batch) * params.seqlen_q + row;
      *reinterpret_cast<uint4*>(out + token * params.q_token_stride + chunk * kChunkElems) =
          *reinterpret_cast<const uint4*>(s_o + swizzled_offset<kHeadDim>(r, chunk));
    }
    if (lane % 4 == 0) {
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const int row = at.row0 + 16 * (i / 2) + quad_row + 8 * (i % 2);
        if (row < params.seqlen_q) params.lse[lse_base + row] = lse_row[i];
      }
    }
  } else {
    // Lane 0 of each quad reads lse_acc once and shares it, so the later write cannot race a read.
    float lse_old[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int row = at.row0 + 16 * (i / 2) + quad_row + 8 * (i % 2);
      const float mine =
          (lane % 4 == 0 && row < params.seqlen_q) ? params.lse_acc[lse_base + row] : 0.0f;
      lse_old[i] = __shfl_sync(kFullMask, mine, lane & ~3);
    }
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int row = at.row0 + 16 * (i / 2) + quad_row + 8 * (i % 2);
      if (row >= params.seqlen_q || lse_row[i] == -INFINITY) continue;  // nothing to merge
      const float hi = fmaxf(lse_old[i], lse_row[i]);
      const float lse_new = hi + logf(expf(lse_old[i] - hi) + expf(lse_row[i] - hi));
      const float w_old = expf(lse_old[i] - lse_new);  // 0 when lse_acc = -inf
      const float w_new = expf(lse_row[i] - lse_new) * inv_sum[i];
      const int64_t token = int64_t(at.batch) * params.seqlen_q + row;
      float* out = params.out_acc + token * params.q_token_stride + int64_t(at.head) * kHeadDim;
#pragma unroll
      for (int t = 0; t < kOTiles; ++t) {
        const float* o_s = acc_o[i / 2][t] + 2 * (i % 2);
        float2* p = reinterpret_cast<float2*>(out + 8 * t + quad_col);
        // The row's first contribution: nothing to keep, so the accumulator is not read.
        float2 o = lse_old[i] == -INFINITY ? make_float2(0.0f, 0.0f) : *p;
        o.x = o.x * w_old + o_s[0] * w_new;
        o.y = o.y * w_old + o_s[1] * w_new;
        *p = o;
      }
      if (lane % 4 == 0) params.lse_acc[lse_base + row] = lse_new;
    }
  }
}

}  // namespace ringpack::cuda

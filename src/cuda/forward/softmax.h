// The per-tile softmax steps shared by the forward main loops (mma.sync and wgmma): rule (1) of
// docs/design.md §2 applied per element on partial tiles (the intervals of core/tile_mask.h), and
// the online softmax that turns a tile of scores into P while rescaling O. Device code.
//
// Register layout (both main loops): s[m][t][e] is the score of row g + 8 (e / 2) of m16 row
// block m and column 8 t + c + e % 2 of the key tile (g = lane / 4, c = 2 (lane % 4)); acc_o has
// the same layout over head_dim columns. Row i of a thread is row block i / 2, row g + 8 (i % 2).
//
// Online softmax (exp2 domain, scale * log2(e) folded into one FFMA), per row:
//     m' = max(m, max_j s_j);  l' = l * 2^(m - m') + sum_j 2^(s_j - m');  O' = O * 2^(m - m') + P V
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/tile_mask.h"

namespace ringpack::cuda {

// 2^x on the SFU (ex2.approx): the softmax's exponentials; 2^-inf = +0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Partial tile: rule (1) per element; invisible pairs get -inf. s_seg / s_pos: the key tile's
// segment ids and positions (shared memory); keys[i]: the visible interval of this thread's row i.
template <int kMTiles, int kSTiles>
__device__ __forceinline__ void mask_partial_tile(float (&s)[kMTiles][kSTiles][4],
                                                  const VisibleKeys (&keys)[2 * kMTiles],
                                                  const int32_t* s_seg, const int32_t* s_pos,
                                                  int quad_col) {
#pragma unroll
  for (int t = 0; t < kSTiles; ++t) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int col = 8 * t + quad_col + j;
      const int32_t key_seg = s_seg[col];
      const int32_t key_pos = s_pos[col];
#pragma unroll
      for (int i = 0; i < 2 * kMTiles; ++i)
        if (!keys[i].contains(key_seg, key_pos)) s[i / 2][t][2 * (i % 2) + j] = -INFINITY;
    }
  }
}

// One online-softmax step on a tile of scores: new row max (quad-reduced: 4 lanes share a row),
// l rescaled and grown, s replaced by P = 2^(s * scale * log2 e - m'). O is not touched: the
// factor 2^(m - m') for each row comes back in `correction`, so a caller whose P V is still in
// flight can rescale O once it lands (rescale_output).
template <int kMTiles, int kSTiles>
__device__ __forceinline__ void softmax_tile(float (&s)[kMTiles][kSTiles][4],
                                             float (&row_max)[2 * kMTiles],
                                             float (&row_sum)[2 * kMTiles], float scale_log2,
                                             float (&correction)[2 * kMTiles]) {
  constexpr unsigned kQuadMask = 0xffffffffu;
#pragma unroll
  for (int i = 0; i < 2 * kMTiles; ++i) {
    const int m = i / 2;
    const int e0 = 2 * (i % 2);
    float tile_max = -INFINITY;
#pragma unroll
    for (int t = 0; t < kSTiles; ++t)
      tile_max = fmaxf(tile_max, fmaxf(s[m][t][e0], s[m][t][e0 + 1]));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(kQuadMask, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(kQuadMask, tile_max, 2));
    const float new_max = fmaxf(row_max[i], tile_max);
    // A row with nothing visible yet keeps max -inf; use 0 so 2^(-inf - 0) = 0, not NaN.
    const float max_scaled = new_max == -INFINITY ? 0.0f : new_max * scale_log2;
    correction[i] = fast_exp2(row_max[i] * scale_log2 - max_scaled);
    row_max[i] = new_max;
    float sum = row_sum[i] * correction[i];
#pragma unroll
    for (int t = 0; t < kSTiles; ++t) {
#pragma unroll
      for (int e = e0; e < e0 + 2; ++e) {
        s[m][t][e] = fast_exp2(fmaf(s[m][t][e], scale_log2, -max_scaled));
        sum += s[m][t][e];
      }
    }
    row_sum[i] = sum;
  }
}

// O rows times their softmax correction factors.
template <int kMTiles, int kOTiles>
__device__ __forceinline__ void rescale_output(float (&acc_o)[kMTiles][kOTiles][4],
                                               const float (&correction)[2 * kMTiles]) {
#pragma unroll
  for (int i = 0; i < 2 * kMTiles; ++i) {
#pragma unroll
    for (int t = 0; t < kOTiles; ++t) {
      acc_o[i / 2][t][2 * (i % 2)] *= correction[i];
      acc_o[i / 2][t][2 * (i % 2) + 1] *= correction[i];
    }
  }
}

// softmax_tile then rescale_output: the step of a main loop whose P V has already landed.
template <int kMTiles, int kSTiles, int kOTiles>
__device__ __forceinline__ void online_softmax(float (&s)[kMTiles][kSTiles][4],
                                               float (&acc_o)[kMTiles][kOTiles][4],
                                               float (&row_max)[2 * kMTiles],
                                               float (&row_sum)[2 * kMTiles], float scale_log2) {
  float correction[2 * kMTiles];
  softmax_tile(s, row_max, row_sum, scale_log2, correction);
  rescale_output(acc_o, correction);
}

}  // namespace ringpack::cuda

// The forward attention kernel (FlashAttention-2 style) for packed rows in any token order.
// Device code; included only by the instance files in src/cuda/instances/.
//
// Math (DESIGN.md §2): per query row, s = scale * <q, k> over the visible keys of rule (1);
// an online softmax keeps the running max m and sum l per row (in the exp2 domain, with
// scale * log2(e) folded into one FFMA), rescaling O when m grows:
//     m' = max(m, max_j s_j);  l' = l * 2^(m - m') + sum_j 2^(s_j - m');  O' = O * 2^(m - m') + P V
// At the end O / l is the attention output and lse = ln(l) + m (natural log).
// Epilogues: direct (O in the input dtype, LSE fp32) or merge into fp32 running accumulators
// with the lse merge of DESIGN.md §4.
//
// Per CTA: kBlockM query rows of one head (warp w owns rows [16w, 16w + 16)); the key tiles to
// visit come from the pre-pass list (tile_lists): skipped tiles cost nothing, full tiles run the
// bare MMA loop, and only partial tiles load the key tile's segment ids / positions and apply
// rule (1) per element. K/V tiles stream through a two-stage cp.async pipeline.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/cuda_check.h"
#include "cuda/forward_instances.h"
#include "cuda/forward_mma.h"
#include "cuda/forward_params.h"
#include "cuda/kernel_traits.h"

namespace ringpack::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

// Copies rows [0, rows) of a [tokens, row_stride] global tile into a swizzled shared tile; rows at
// or past valid_rows are zero-filled (their source is never read).
template <class Traits>
__device__ __forceinline__ void load_tile_async(typename Traits::Element* smem,
                                                const typename Traits::Element* gmem,
                                                int64_t row_stride, int rows, int valid_rows) {
  constexpr int kChunks = Traits::kChunksPerRow;
  for (int i = threadIdx.x; i < rows * kChunks; i += Traits::kNumThreads) {
    const int row = i / kChunks;
    const int chunk = i % kChunks;
    const bool valid = row < valid_rows;
    const auto* src = gmem + (valid ? row * row_stride + chunk * kChunkElems : 0);
    cp_async_16(smem + swizzled_offset<Traits::kHeadDim>(row, chunk), src, valid);
  }
}

template <class Traits, bool kMerge>
__global__ void __launch_bounds__(Traits::kNumThreads, 1)
    forward_kernel(const __grid_constant__ ForwardParams params) {
  using Element = typename Traits::Element;
  using Ops = ElementOps<Element>;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kSTiles = kBlockN / 8;    // n8 accumulator tiles of S per warp
  constexpr int kOTiles = kHeadDim / 8;   // n8 accumulator tiles of O per warp
  constexpr int kDSteps = kHeadDim / 16;  // k16 steps of Q K^T
  constexpr int kNSteps = kBlockN / 16;   // k16 steps of P V
  constexpr int kQFragSteps = Traits::kQInRegisters ? kDSteps : 1;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  Element* s_q = reinterpret_cast<Element*>(smem_raw);      // [kBlockM, kHeadDim]
  Element* s_k = s_q + Traits::kQElems;                     // [kStages][kBlockN, kHeadDim]
  Element* s_v = s_k + Traits::kStages * Traits::kKVElems;  // [kStages][kBlockN, kHeadDim]
  int32_t* s_seg_k = reinterpret_cast<int32_t*>(s_v + Traits::kStages * Traits::kKVElems);
  int32_t* s_pos_k = s_seg_k + Traits::kStages * kBlockN;  // [kStages][kBlockN] each

  const int head = blockIdx.x;
  const int slot = params.tile_order[blockIdx.y];  // heaviest query tiles launch first
  const int batch = slot / params.num_tiles_q;
  const int q_begin = (slot % params.num_tiles_q) * kBlockM;
  const int kv_head = head / params.heads_per_kv;
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int quad_row = lane / 4;        // accumulator row g inside the warp's 16 rows
  const int quad_col = (lane % 4) * 2;  // accumulator column c inside an n8 tile

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

  // This thread's two query rows: warp * 16 + g and + 8. Rows past seqlen_q act as padding.
  int32_t seg_q[2];
  int32_t pos_q[2];
  for (int i = 0; i < 2; ++i) {
    const int row = q_begin + warp * Traits::kRowsPerWarp + quad_row + 8 * i;
    const bool valid = row < params.seqlen_q;
    const int64_t index = int64_t(batch) * params.seqlen_q + row;
    seg_q[i] = valid ? params.segment_ids_q[index] : 0;
    pos_q[i] = valid ? params.positions_q[index] : 0;
  }

  // Issues the cp.async copies of key tile `entry` (encoded (tile << 1) | partial) into `stage`.
  auto issue_kv = [&](int entry, int stage) {
    const int k_begin = (entry >> 1) * kBlockN;
    const int valid = min(kBlockN, params.seqlen_k - k_begin);
    const int64_t offset = int64_t(k_begin) * params.kv_token_stride;
    load_tile_async<Traits>(s_k + stage * Traits::kKVElems, k + offset, params.kv_token_stride,
                            kBlockN, valid);
    load_tile_async<Traits>(s_v + stage * Traits::kKVElems, v + offset, params.kv_token_stride,
                            kBlockN, valid);
    if (entry & 1) {  // partial tile: the per-element rule needs the keys' ids and positions
      for (int i = threadIdx.x; i < kBlockN; i += Traits::kNumThreads) {
        const bool in_range = i < valid;
        const int t = in_range ? k_begin + i : 0;
        cp_async_4(s_seg_k + stage * kBlockN + i, seg_k + t, in_range);  // 0 = never visible
        cp_async_4(s_pos_k + stage * kBlockN + i, pos_k + t, in_range);
      }
    }
  };

  float acc_o[kOTiles][4] = {};  // O rows g, g+8 of the warp: [n8 tile][c, c+1, c+8 row pair]
  float row_max[2] = {-INFINITY, -INFINITY};  // running max of raw scores <q, k>
  float row_sum[2] = {0.0f, 0.0f};            // this thread's partial of l (quad-reduced at end)
  uint32_t q_frag[kQFragSteps][4];

  // ldmatrix row addresses: A operand (Q, 16 x 16) and B operand (K, two n8 tiles x k16).
  const int a_row = warp * Traits::kRowsPerWarp + (lane & 15);
  const int a_chunk = lane >> 4;
  const int k_row = (lane & 7) + ((lane >> 4) << 3);
  const int k_chunk = (lane >> 3) & 1;
  const int v_row = (lane & 7) + (((lane >> 3) & 1) << 3);
  const int v_chunk = lane >> 4;

  if (tile_count > 0) {
    load_tile_async<Traits>(s_q, q, params.q_token_stride, kBlockM, params.seqlen_q - q_begin);
    int entry = tile_list[0];
    issue_kv(entry, 0);
    cp_async_commit();
    int entry_after = tile_count > 1 ? tile_list[1] : -1;  // list read one tile ahead

    for (int it = 0; it < tile_count; ++it) {
      const int stage = it & 1;
      const int next = entry_after;
      entry_after = it + 2 < tile_count ? tile_list[it + 2] : -1;
      if (next >= 0) issue_kv(next, stage ^ 1);
      cp_async_commit();
      cp_async_wait<1>();  // Q and this tile have landed
      __syncthreads();

      if constexpr (Traits::kQInRegisters) {
        if (it == 0) {
          for (int d = 0; d < kDSteps; ++d)
            ldmatrix_x4(q_frag[d], s_q + swizzled_offset<kHeadDim>(a_row, 2 * d + a_chunk));
        }
      }

      // S = Q K^T for this warp's 16 rows x kBlockN keys (fp32).
      const Element* s_k_stage = s_k + stage * Traits::kKVElems;
      float s[kSTiles][4] = {};
#pragma unroll
      for (int d = 0; d < kDSteps; ++d) {
        uint32_t(&a)[4] = q_frag[Traits::kQInRegisters ? d : 0];
        if constexpr (!Traits::kQInRegisters)
          ldmatrix_x4(a, s_q + swizzled_offset<kHeadDim>(a_row, 2 * d + a_chunk));
#pragma unroll
        for (int n = 0; n < kSTiles / 2; ++n) {
          uint32_t b[4];
          ldmatrix_x4(b, s_k_stage + swizzled_offset<kHeadDim>(16 * n + k_row, 2 * d + k_chunk));
          Ops::mma(s[2 * n], a, b[0], b[1]);
          Ops::mma(s[2 * n + 1], a, b[2], b[3]);
        }
      }

      // Partial tile: rule (1) per element; invisible pairs get -inf.
      if (entry & 1) {
        const int32_t* s_seg = s_seg_k + stage * kBlockN;
        const int32_t* s_pos = s_pos_k + stage * kBlockN;
#pragma unroll
        for (int t = 0; t < kSTiles; ++t) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = 8 * t + quad_col + (e & 1);
            const int r = e >> 1;
            if (!visible(seg_q[r], pos_q[r], s_seg[col], s_pos[col], params.mask))
              s[t][e] = -INFINITY;
          }
        }
      }

      // Online softmax: new row max (quad-reduced: 4 lanes share a row), rescale O and l.
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float tile_max = -INFINITY;
#pragma unroll
        for (int t = 0; t < kSTiles; ++t)
          tile_max = fmaxf(tile_max, fmaxf(s[t][2 * r], s[t][2 * r + 1]));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, 1));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, 2));
        const float new_max = fmaxf(row_max[r], tile_max);
        // A row with nothing visible yet keeps max -inf; use 0 so exp2(-inf - 0) = 0, not NaN.
        const float max_scaled = new_max == -INFINITY ? 0.0f : new_max * params.scale_log2;
        const float correction = exp2f(row_max[r] * params.scale_log2 - max_scaled);
        row_max[r] = new_max;
        row_sum[r] *= correction;
#pragma unroll
        for (int t = 0; t < kOTiles; ++t) {
          acc_o[t][2 * r] *= correction;
          acc_o[t][2 * r + 1] *= correction;
        }
#pragma unroll
        for (int t = 0; t < kSTiles; ++t) {
#pragma unroll
          for (int e = 2 * r; e < 2 * r + 2; ++e) {
            s[t][e] = exp2f(fmaf(s[t][e], params.scale_log2, -max_scaled));  // P
            row_sum[r] += s[t][e];
          }
        }
      }

      // O += P V: P re-packed as A fragments (two n8 S tiles = one k16 A tile).
      const Element* s_v_stage = s_v + stage * Traits::kKVElems;
#pragma unroll
      for (int kk = 0; kk < kNSteps; ++kk) {
        const uint32_t a[4] = {Ops::pack(s[2 * kk][0], s[2 * kk][1]),
                               Ops::pack(s[2 * kk][2], s[2 * kk][3]),
                               Ops::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                               Ops::pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int n = 0; n < kOTiles / 2; ++n) {
          uint32_t b[4];
          ldmatrix_x4_trans(
              b, s_v_stage + swizzled_offset<kHeadDim>(16 * kk + v_row, 2 * n + v_chunk));
          Ops::mma(acc_o[2 * n], a, b[0], b[1]);
          Ops::mma(acc_o[2 * n + 1], a, b[2], b[3]);
        }
      }
      __syncthreads();  // every warp is done with `stage` before it is refilled
      entry = next;
    }
  }

  // Row totals l = sum over the quad, then lse = m * scale + ln(l) (natural log).
  float lse_row[2];
  float inv_sum[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = row_sum[r];
    sum += __shfl_xor_sync(kFullMask, sum, 1);
    sum += __shfl_xor_sync(kFullMask, sum, 2);
    const bool any = sum > 0.0f;
    lse_row[r] = any ? row_max[r] * params.scale + logf(sum) : -INFINITY;
    inv_sum[r] = any ? 1.0f / sum : 0.0f;
  }

  const int warp_row0 = q_begin + warp * Traits::kRowsPerWarp;  // first query row of the warp
  if constexpr (!kMerge) {
    // Direct: stage O (dtype) through the warp's own rows of s_q, then 16-byte coalesced stores.
    Element* s_o = s_q + warp * Traits::kRowsPerWarp * kHeadDim;
#pragma unroll
    for (int t = 0; t < kOTiles; ++t) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = quad_row + 8 * r;  // column block t = chunk t of the row
        const uint32_t pair =
            Ops::pack(acc_o[t][2 * r] * inv_sum[r], acc_o[t][2 * r + 1] * inv_sum[r]);
        *reinterpret_cast<uint32_t*>(s_o + swizzled_offset<kHeadDim>(row, t) + quad_col) = pair;
      }
    }
    __syncwarp();
    auto* out = static_cast<Element*>(params.out) + int64_t(head) * kHeadDim;
    for (int i = lane; i < Traits::kRowsPerWarp * Traits::kChunksPerRow; i += kWarpSize) {
      const int r = i / Traits::kChunksPerRow;
      const int chunk = i % Traits::kChunksPerRow;
      const int row = warp_row0 + r;
      if (row >= params.seqlen_q) continue;
      const int64_t token = int64_t(batch) * params.seqlen_q + row;
      *reinterpret_cast<uint4*>(out + token * params.q_token_stride + chunk * kChunkElems) =
          *reinterpret_cast<const uint4*>(s_o + swizzled_offset<kHeadDim>(r, chunk));
    }
    if (lane % 4 == 0) {
      for (int r = 0; r < 2; ++r) {
        const int row = warp_row0 + quad_row + 8 * r;
        if (row < params.seqlen_q)
          params.lse[(int64_t(batch) * params.num_heads_q + head) * params.seqlen_q + row] =
              lse_row[r];
      }
    }
  } else {
    // Merge (DESIGN.md §4): lse' = logaddexp(lse_acc, lse_s);
    //   out_acc = out_acc * exp(lse_acc - lse') + (O / l) * exp(lse_s - lse').
    // Lane 0 of each quad reads lse_acc once and shares it, so the later write cannot race a read.
    float lse_old[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp_row0 + quad_row + 8 * r;
      const int64_t index = (int64_t(batch) * params.num_heads_q + head) * params.seqlen_q + row;
      const float mine = (lane % 4 == 0 && row < params.seqlen_q) ? params.lse_acc[index] : 0.0f;
      lse_old[r] = __shfl_sync(kFullMask, mine, lane & ~3);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp_row0 + quad_row + 8 * r;
      if (row >= params.seqlen_q || lse_row[r] == -INFINITY) continue;  // nothing to merge
      const float hi = fmaxf(lse_old[r], lse_row[r]);
      const float lse_new = hi + logf(expf(lse_old[r] - hi) + expf(lse_row[r] - hi));
      const float w_old = expf(lse_old[r] - lse_new);  // 0 when lse_acc = -inf
      const float w_new = expf(lse_row[r] - lse_new) * inv_sum[r];
      const int64_t token = int64_t(batch) * params.seqlen_q + row;
      float* out = params.out_acc + token * params.q_token_stride + int64_t(head) * kHeadDim;
#pragma unroll
      for (int t = 0; t < kOTiles; ++t) {
        float2* p = reinterpret_cast<float2*>(out + 8 * t + quad_col);
        float2 o = *p;
        o.x = o.x * w_old + acc_o[t][2 * r] * w_new;
        o.y = o.y * w_old + acc_o[t][2 * r + 1] * w_new;
        *p = o;
      }
      if (lane % 4 == 0)
        params.lse_acc[(int64_t(batch) * params.num_heads_q + head) * params.seqlen_q + row] =
            lse_new;
    }
  }
}

template <class Traits, bool kMerge>
void launch_forward(const ForwardParams& params, cudaStream_t stream) {
  auto kernel = forward_kernel<Traits, kMerge>;
  // Per launch (cheap, host side): the attribute is per device, and a process may use several.
  RINGPACK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           Traits::kSmemBytes));
  const dim3 grid(params.num_heads_q, params.batch * params.num_tiles_q);
  kernel<<<grid, Traits::kNumThreads, Traits::kSmemBytes, stream>>>(params);
  RINGPACK_CHECK_LAUNCH();
}

}  // namespace ringpack::cuda

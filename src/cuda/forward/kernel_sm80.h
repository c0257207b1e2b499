// The forward attention kernel (FlashAttention-2 style) for packed rows in any token order.
// Device code; included only by the instance files in src/cuda/instances/.
//
// Math (docs/design.md §2): per query row, s = scale * <q, k> over the visible keys of rule (1);
// an online softmax keeps the running max m and sum l per row (in the exp2 domain, with
// scale * log2(e) folded into one FFMA), rescaling O when m grows:
//     m' = max(m, max_j s_j);  l' = l * 2^(m - m') + sum_j 2^(s_j - m');  O' = O * 2^(m - m') + P V
// At the end O / l is the attention output and lse = ln(l) + m (natural log).
// Epilogues: direct (O in the input dtype, LSE fp32) or merge into fp32 running accumulators
// with the lse merge of docs/design.md §4.
//
// Per CTA: kBlockM query rows of one head (warp w owns rows [w, w + 1) * kRowsPerWarp); the key
// tiles to visit come from the pre-pass list (tile_lists): skipped tiles cost nothing, full tiles
// run the bare MMA loop, and only partial tiles load the key tile's segment ids / positions and
// apply rule (1) per element. K/V tiles stream through a two-stage cp.async pipeline.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/cuda_check.h"
#include "cuda/common/mma_sync.h"
#include "cuda/forward/epilogue.h"
#include "cuda/forward/instances.h"
#include "cuda/forward/params.h"
#include "cuda/forward/softmax.h"
#include "cuda/forward/traits.h"

namespace ringpack::cuda {

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
__global__ void __launch_bounds__(Traits::kNumThreads, 2)
    forward_kernel(const __grid_constant__ ForwardParams params) {
  using Element = typename Traits::Element;
  using Ops = ElementOps<Element>;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kMTiles = Traits::kMTiles;  // m16 row blocks per warp
  constexpr int kSTiles = kBlockN / 8;      // n8 accumulator tiles of S per row block
  constexpr int kOTiles = kHeadDim / 8;     // n8 accumulator tiles of O per row block
  constexpr int kDSteps = kHeadDim / 16;    // k16 steps of Q K^T
  constexpr int kNSteps = kBlockN / 16;     // k16 steps of P V
  constexpr int kQFragSteps = Traits::kQInRegisters ? kDSteps : 1;
  constexpr int kRows = 2 * kMTiles;  // query rows per thread: g and g + 8 of each row block

  extern __shared__ __align__(128) unsigned char smem_raw[];
  Element* s_q = reinterpret_cast<Element*>(smem_raw);      // [kBlockM, kHeadDim]
  Element* s_k = s_q + Traits::kQElems;                     // [kStages][kBlockN, kHeadDim]
  Element* s_v = s_k + Traits::kStages * Traits::kKVElems;  // [kStages][kBlockN, kHeadDim]
  int32_t* s_seg_k = reinterpret_cast<int32_t*>(s_v + Traits::kStages * Traits::kKVElems);
  int32_t* s_pos_k = s_seg_k + Traits::kStages * kBlockN;  // [kStages][kBlockN] each
  int32_t* s_seg_q = s_pos_k + Traits::kStages * kBlockN;  // [kBlockM]
  int32_t* s_pos_q = s_seg_q + kBlockM;                    // [kBlockM]

  const int head = blockIdx.x;
  const int slot = params.tile_order[blockIdx.y];  // heaviest query tiles launch first
  const int batch = slot / params.num_tiles_q;
  const int q_begin = (slot % params.num_tiles_q) * kBlockM;
  const int kv_head = head / params.heads_per_kv;
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int quad_row = lane / 4;                      // accumulator row g inside a 16-row block
  const int quad_col = (lane % 4) * 2;                // accumulator column c inside an n8 tile
  const int warp_row0 = warp * Traits::kRowsPerWarp;  // first tile row of this warp

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

  // Segment ids and positions of the tile's query rows, kept in shared memory (registers are
  // the scarce resource); rows past seqlen_q act as padding (segment 0: nothing visible).
  for (int r = threadIdx.x; r < kBlockM; r += Traits::kNumThreads) {
    const bool valid = q_begin + r < params.seqlen_q;
    const int64_t index = int64_t(batch) * params.seqlen_q + q_begin + r;
    s_seg_q[r] = valid ? params.segment_ids_q[index] : 0;
    s_pos_q[r] = valid ? params.positions_q[index] : 0;
  }  // visible to all warps after the first barrier of the tile loop

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

  // O of rows (g, g+8) per row block: [m][n8 tile][(g, c), (g, c+1), (g+8, c), (g+8, c+1)].
  float acc_o[kMTiles][kOTiles][4] = {};
  float row_max[kRows];  // running max of raw scores <q, k>
  float row_sum[kRows];  // this thread's partial of l (quad-reduced at the end)
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    row_max[i] = -INFINITY;
    row_sum[i] = 0.0f;
  }
  uint32_t q_frag[kQFragSteps][4];

  // ldmatrix row addresses: A operand (Q, 16 x 16), B operands (K: two n8 tiles x k16;
  // V transposed: k16 x two n8 tiles).
  const int a_row = warp_row0 + (lane & 15);
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
#pragma unroll
          for (int d = 0; d < kDSteps; ++d)
            ldmatrix_x4(q_frag[d], s_q + swizzled_offset<kHeadDim>(a_row, 2 * d + a_chunk));
        }
      }

      // S = Q K^T for this warp's rows x kBlockN keys (fp32); each K fragment feeds kMTiles MMAs.
      const Element* s_k_stage = s_k + stage * Traits::kKVElems;
      float s[kMTiles][kSTiles][4] = {};
      // Not unrolled over d when Q is re-read: the per-d ldmatrix addresses are then computed in
      // the loop instead of held in registers, which O and S need.
#pragma unroll(Traits::kQInRegisters ? kDSteps : 1)
      for (int d = 0; d < kDSteps; ++d) {
        uint32_t a[kMTiles][4];
#pragma unroll
        for (int m = 0; m < kMTiles; ++m) {
          if constexpr (Traits::kQInRegisters) {
#pragma unroll
            for (int x = 0; x < 4; ++x) a[m][x] = q_frag[d][x];
          } else {
            ldmatrix_x4(a[m], s_q + swizzled_offset<kHeadDim>(a_row + 16 * m, 2 * d + a_chunk));
          }
        }
#pragma unroll
        for (int n = 0; n < kSTiles / 2; ++n) {
          uint32_t b[4];
          ldmatrix_x4(b, s_k_stage + swizzled_offset<kHeadDim>(16 * n + k_row, 2 * d + k_chunk));
#pragma unroll
          for (int m = 0; m < kMTiles; ++m) {
            Ops::mma(s[m][2 * n], a[m], b[0], b[1]);
            Ops::mma(s[m][2 * n + 1], a[m], b[2], b[3]);
          }
        }
      }

      // Partial tile: rule (1) per element; then P and the rescaled O, l.
      if (entry & 1) {
        VisibleKeys keys[kRows];
#pragma unroll
        for (int i = 0; i < kRows; ++i) {
          const int row = warp_row0 + 16 * (i / 2) + quad_row + 8 * (i % 2);
          keys[i] = visible_keys(s_seg_q[row], s_pos_q[row], params.mask);
        }
        mask_partial_tile(s, keys, s_seg_k + stage * kBlockN, s_pos_k + stage * kBlockN, quad_col);
      }
      online_softmax(s, acc_o, row_max, row_sum, params.scale_log2);

      // O += P V: P re-packed as A fragments (two n8 S tiles = one k16 A tile); each V fragment
      // feeds kMTiles MMAs.
      const Element* s_v_stage = s_v + stage * Traits::kKVElems;
#pragma unroll
      for (int kk = 0; kk < kNSteps; ++kk) {
        uint32_t a[kMTiles][4];
#pragma unroll
        for (int m = 0; m < kMTiles; ++m) {
          a[m][0] = Ops::pack(s[m][2 * kk][0], s[m][2 * kk][1]);
          a[m][1] = Ops::pack(s[m][2 * kk][2], s[m][2 * kk][3]);
          a[m][2] = Ops::pack(s[m][2 * kk + 1][0], s[m][2 * kk + 1][1]);
          a[m][3] = Ops::pack(s[m][2 * kk + 1][2], s[m][2 * kk + 1][3]);
        }
#pragma unroll
        for (int n = 0; n < kOTiles / 2; ++n) {
          uint32_t b[4];
          ldmatrix_x4_trans(
              b, s_v_stage + swizzled_offset<kHeadDim>(16 * kk + v_row, 2 * n + v_chunk));
#pragma unroll
          for (int m = 0; m < kMTiles; ++m) {
            Ops::mma(acc_o[m][2 * n], a[m], b[0], b[1]);
            Ops::mma(acc_o[m][2 * n + 1], a[m], b[2], b[3]);
          }
        }
      }
      __syncthreads();  // every warp is done with `stage` before it is refilled
      entry = next;
    }
  }

  // Direct: staged through the warp's own rows of s_q (no other warp reads them).
  forward_epilogue<Traits, kMerge>(params, acc_o, row_max, row_sum, s_q + warp_row0 * kHeadDim,
                                   WarpRows{batch, head, q_begin + warp_row0, lane});
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

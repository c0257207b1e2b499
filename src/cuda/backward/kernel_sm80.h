// The dK/dV kernel of the backward (FlashAttention-2 style, mma.sync m16n8k16): a CTA owns
// kBlockN keys of one kv head and walks the query tiles that its key tile's list in the tile plan
// holds (tiles/tile_lists.h: the tiles not skipped, in order; the CTAs of the heaviest key tiles
// launch first), for the query heads of its GQA group (all of them, or 1/head_splits of them:
// backward_head_splits in backward/traits.h).
// At head_dim 256 two warps share each 16 keys, one per half of the dK/dV columns (kDimSplit in
// backward/traits.h).
// Per query tile, with the final forward LSE and delta = rowsum(dO * O) (docs/design.md §2):
//   S^T  = K Q^T                      [kBlockN, kBlockM]   (each warp: 16 keys, whole head dim)
//   P^T  = exp(scale S^T - lse)       masked entries 0 (partial tiles: each query's VisibleKeys,
//                                     core/tile_mask.h); a query with lse = -inf gives 0
//   dV  += P^T dO                     registers
//   dP^T = V dO^T
//   dS^T = P^T * (dP^T - delta)
//   dK  += dS^T Q                     registers, scaled once at the end
//   dQ  += scale dS K                 dS^T through shared memory, fp32 atomics (unless the
//                                     deterministic dQ kernel does it)
// dK and dV are added (+=) into the fp32 accumulators at the end.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "core/tile_mask.h"
#include "cuda/backward/mma.h"
#include "cuda/backward/params.h"

namespace ringpack::cuda::bwd {

// lse (natural log) in the base-2 units of exp2; a query with no visible key (lse = -inf) maps to
// +inf so that exp2(x - lse) = 0 for every x, never NaN.
__device__ inline float lse_to_log2(float lse) {
  return lse == -INFINITY ? INFINITY : lse * kLog2e;
}

// Query-tile state in shared memory, double-buffered: Q, dO and the per-query vectors.
template <class Traits>
struct QueryTileSmem {
  uint16_t* q;        // TileQ
  uint16_t* dout;     // TileQ
  float* lse;         // [kBlockM]
  float* delta;       // [kBlockM]
  int32_t* segment;   // [kBlockM]
  int32_t* position;  // [kBlockM]
};

// Buffer `i` (0 or 1) of the query-tile state: arithmetic on the shared-memory bases, so no
// run-time-indexed array lands in local memory.
template <class Traits>
__device__ inline QueryTileSmem<Traits> query_tile_smem(uint16_t* smem_q, float* smem_vectors,
                                                        int i) {
  constexpr int kBlockM = Traits::kBlockM;
  QueryTileSmem<Traits> t;
  t.q = smem_q + 2 * i * Traits::TileQ::kElems;
  t.dout = t.q + Traits::TileQ::kElems;
  float* vectors = smem_vectors + 4 * i * kBlockM;
  t.lse = vectors;
  t.delta = vectors + kBlockM;
  t.segment = reinterpret_cast<int32_t*>(vectors + 2 * kBlockM);
  t.position = reinterpret_cast<int32_t*>(vectors + 3 * kBlockM);
  return t;
}

// Issues cp.async loads of query tile `m` of query head `h` (row b) into `dst`; rows past
// seqlen_q are zero-filled (segment id 0: never visible).
template <class Traits>
__device__ inline void load_query_tile(const BackwardParams& p, const QueryTileSmem<Traits>& dst,
                                       int b, int h, int m) {
  constexpr int kBlockM = Traits::kBlockM;
  const int thread = threadIdx.x;
  const int row0 = m * kBlockM;
  const int64_t head_offset =
      int64_t(b) * p.seqlen_q * p.q_token_stride + int64_t(h) * Traits::kHeadDim;
  load_tile_async<typename Traits::TileQ, Traits::kThreads>(
      dst.q, static_cast<const uint16_t*>(p.q) + head_offset, p.q_token_stride, row0, p.seqlen_q,
      thread);
  load_tile_async<typename Traits::TileQ, Traits::kThreads>(
      dst.dout, static_cast<const uint16_t*>(p.dout) + head_offset, p.q_token_stride, row0,
      p.seqlen_q, thread);
  const int64_t vector_offset = (int64_t(b) * p.num_heads_q + h) * p.seqlen_q;
  const int64_t token_offset = int64_t(b) * p.seqlen_q;
  for (int i = thread; i < 4 * kBlockM; i += Traits::kThreads) {
    const int which = i / kBlockM;
    const int row = i % kBlockM;
    const bool valid = row0 + row < p.seqlen_q;
    const int64_t at = valid ? row0 + row : 0;
    switch (which) {
      case 0:
        cp_async_4(dst.lse + row, p.lse + vector_offset + at, valid);
        break;
      case 1:
        cp_async_4(dst.delta + row, p.delta + vector_offset + at, valid);
        break;
      case 2:
        cp_async_4(dst.segment + row, p.segment_ids_q + token_offset + at, valid);
        break;
      default:
        cp_async_4(dst.position + row, p.positions_q + token_offset + at, valid);
        break;
    }
  }
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    backward_dkdv_kernel(const __grid_constant__ BackwardParams p) {
  using Element = typename Traits::Element;
  using TileKV = typename Traits::TileKV;
  using TileQ = typename Traits::TileQ;
  using TileDs = typename Traits::TileDs;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kSubM = Traits::kSubM;
  constexpr int kDimCols = Traits::kDimCols;

  const int slot = p.tile_order[blockIdx.x];  // heaviest key tiles first
  const int b = slot / p.num_tiles_k;
  const int n_tile = slot % p.num_tiles_k;
  const int h_kv = blockIdx.y / p.head_splits;
  const int split = blockIdx.y % p.head_splits;  // which query heads of the group this CTA walks
  const int32_t* tile_list = p.tile_lists + int64_t(slot) * p.num_tiles_q;
  const int tile_count = p.tile_counts[slot];
  if (tile_count == 0) return;  // no visible pair: this CTA adds nothing
  const int thread = threadIdx.x;
  const int warp = thread / kWarpSize;
  const int lane = thread % kWarpSize;
  const int group = lane / 4;                              // fragment row within the 16-row slice
  const int quad = lane % 4;                               // fragment column pair
  const int n0 = n_tile * kBlockN;                         // first key of the tile
  const int key0 = (warp / Traits::kDimSplit) * kMmaM;     // first key of this warp in the tile
  const int dim0 = (warp % Traits::kDimSplit) * kDimCols;  // first dK/dV column of this warp
  const bool writes_ds = warp % Traits::kDimSplit == 0;    // one warp of a pair stores dS^T

  extern __shared__ __align__(128) unsigned char smem_raw[];
  uint16_t* smem_k = reinterpret_cast<uint16_t*>(smem_raw);
  uint16_t* smem_v = smem_k + TileKV::kElems;
  uint16_t* smem_q = smem_v + TileKV::kElems;  // [2 buffers][Q, dO] TileQ
  uint16_t* smem_ds = smem_q + 4 * TileQ::kElems;
  float* smem_vectors = reinterpret_cast<float*>(smem_ds + TileDs::kElems);  // [2][4][kBlockM]

  // K and V of this tile: [kBlockN, head_dim], rows past seqlen_k zero-filled.
  const int64_t kv_offset = int64_t(b) * p.seqlen_k * p.kv_token_stride + int64_t(h_kv) * kHeadDim;
  load_tile_async<TileKV, Traits::kThreads>(smem_k, static_cast<const uint16_t*>(p.k) + kv_offset,
                                            p.kv_token_stride, n0, p.seqlen_k, thread);
  load_tile_async<TileKV, Traits::kThreads>(smem_v, static_cast<const uint16_t*>(p.v) + kv_offset,
                                            p.kv_token_stride, n0, p.seqlen_k, thread);
  cp_async_commit();

  // Ids and positions of this thread's two key rows (fragment rows g and g + 8); past seqlen_k
  // the segment id 0 makes every pair invisible.
  int32_t segment_k[2];
  int32_t position_k[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = n0 + key0 + group + 8 * r;
    const bool valid = key < p.seqlen_k;
    segment_k[r] = valid ? p.segment_ids_k[int64_t(b) * p.seqlen_k + key] : 0;
    position_k[r] = valid ? p.positions_k[int64_t(b) * p.seqlen_k + key] : 0;
  }

  float acc_dk[kDimCols / kMmaN][4];  // [16 keys, kDimCols] of this warp
  float acc_dv[kDimCols / kMmaN][4];
  zero(acc_dk);
  zero(acc_dv);

  const int heads_per_cta = p.heads_per_kv / p.head_splits;
  const int h_first = h_kv * p.heads_per_kv + split * heads_per_cta;

  // The listed query tiles, entries (tile << 1) | partial, for each query head in turn.
  const int steps = tile_count * heads_per_cta;  // (query head, listed tile) pairs
  load_query_tile<Traits>(p, query_tile_smem<Traits>(smem_q, smem_vectors, 0), b, h_first,
                          tile_list[0] >> 1);
  cp_async_commit();
  int h = h_first;  // this step's query head and its index in the list
  int i = 0;
  int h_next = h, i_next = i;
  for (int step = 0; step < steps; ++step, h = h_next, i = i_next) {
    const int entry = __ldg(tile_list + i);
    i_next = i + 1 == tile_count ? 0 : i + 1;
    h_next = i + 1 == tile_count ? h + 1 : h;
    const int m = entry >> 1;
    const bool partial = (entry & 1) != 0;
    const QueryTileSmem<Traits> cur = query_tile_smem<Traits>(smem_q, smem_vectors, step % 2);

    // Q/dO of this step landed; every warp is done with the previous step's buffers and dS.
    cp_async_wait<0>();
    __syncthreads();
    if (step + 1 < steps) {
      load_query_tile<Traits>(p, query_tile_smem<Traits>(smem_q, smem_vectors, (step + 1) % 2), b,
                              h_next, __ldg(tile_list + i_next) >> 1);
    }
    cp_async_commit();

    // The query tile in register sub-tiles of kSubM queries (S^T and dP^T of one sub-tile are
    // live at a time; not unrolled, so the compiler cannot interleave two sub-tiles).
#pragma unroll 1
    for (int sub = 0; sub < kBlockM; sub += kSubM) {
      // S^T = K Q^T and dP^T = V dO^T: [16 keys, kSubM queries] per warp.
      float acc_s[kSubM / kMmaN][4];
      float acc_dp[kSubM / kMmaN][4];
      zero(acc_s);
      zero(acc_dp);
      gemm_smem_nk<Element, kSubM, kHeadDim, TileKV, TileQ>(acc_s, smem_k, key0, cur.q, sub, lane);
      gemm_smem_nk<Element, kSubM, kHeadDim, TileKV, TileQ>(acc_dp, smem_v, key0, cur.dout, sub,
                                                            lane);

      // P^T = exp2(scale_log2 S^T - lse_log2); dS^T = P^T (dP^T - delta). acc_s becomes P^T,
      // acc_dp becomes dS^T.
#pragma unroll
      for (int nt = 0; nt < kSubM / kMmaN; ++nt) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int col = sub + nt * kMmaN + 2 * quad + j;  // the query of elements j and j + 2
          VisibleKeys keys{};
          if (partial) keys = visible_keys(cur.segment[col], cur.position[col], p.mask);
#pragma unroll
          for (int r = 0; r < 2; ++r) {  // this thread's keys g and g + 8
            const int e = 2 * r + j;
            float x = acc_s[nt][e] * p.scale_log2 - lse_to_log2(cur.lse[col]);
            if (partial && !keys.contains(segment_k[r], position_k[r])) x = -INFINITY;
            const float prob = exp2f(x);
            acc_s[nt][e] = prob;
            acc_dp[nt][e] = prob * (acc_dp[nt][e] - cur.delta[col]);
          }
        }
      }

      // dV += P^T dO, dK += dS^T Q (A operands straight from the accumulator registers).
      {
        uint32_t frag_p[kSubM / kMmaK][4];
        pack_a<Element, kSubM>(frag_p, acc_s);
        gemm_reg_kn<Element, kDimCols, kSubM, TileQ>(acc_dv, frag_p, cur.dout, sub, dim0, lane);
      }
      uint32_t frag_ds[kSubM / kMmaK][4];
      pack_a<Element, kSubM>(frag_ds, acc_dp);
      gemm_reg_kn<Element, kDimCols, kSubM, TileQ>(acc_dk, frag_ds, cur.q, sub, dim0, lane);

      // dS^T -> shared memory [kBlockN keys, kBlockM queries] for the dQ reduction over keys.
      if (p.accumulate_dq && writes_ds) {
#pragma unroll
        for (int s = 0; s < kSubM / kMmaK; ++s) {
          const int col = sub + s * kMmaK + 2 * quad;
          const int row = key0 + group;
          *reinterpret_cast<uint32_t*>(smem_ds + TileDs::offset(row, col)) = frag_ds[s][0];
          *reinterpret_cast<uint32_t*>(smem_ds + TileDs::offset(row + 8, col)) = frag_ds[s][1];
          *reinterpret_cast<uint32_t*>(smem_ds + TileDs::offset(row, col + 8)) = frag_ds[s][2];
          *reinterpret_cast<uint32_t*>(smem_ds + TileDs::offset(row + 8, col + 8)) = frag_ds[s][3];
        }
      }
    }

    if (!p.accumulate_dq) continue;
    __syncthreads();

    // dQ[kBlockM, head_dim] = scale dS K: warp (wm, wn) owns rows [kDqRows wm, +kDqRows) and
    // columns [kDqCols wn, +kDqCols); the sum runs over the kBlockN keys of the tile.
    constexpr int kDqMTiles = Traits::kDqRows / kMmaM;
    const int wm = warp % Traits::kDqWarpsM;
    const int wn = warp / Traits::kDqWarpsM;
    float acc_dq[kDqMTiles][Traits::kDqCols / kMmaN][4];
#pragma unroll
    for (int mt = 0; mt < kDqMTiles; ++mt) zero(acc_dq[mt]);
    const LaneOffset<TileDs> lane_ds = lane_a_trans<TileDs>(lane);
    const LaneOffset<TileKV> lane_k = lane_b_kn<TileKV>(lane);
#pragma unroll
    for (int k = 0; k < kBlockN; k += kMmaK) {
      uint32_t a[kDqMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kDqMTiles; ++mt) {
        load_a_trans(a[mt], smem_ds, lane_ds, wm * Traits::kDqRows + mt * kMmaM, k);
      }
#pragma unroll
      for (int n = 0; n < Traits::kDqCols; n += 2 * kMmaN) {
        uint32_t frag_b[4];
        load_b_kn(frag_b, smem_k, lane_k, wn * Traits::kDqCols + n, k);
#pragma unroll
        for (int mt = 0; mt < kDqMTiles; ++mt) {
          ElementOps<Element>::mma(acc_dq[mt][n / kMmaN], a[mt], frag_b[0], frag_b[1]);
          ElementOps<Element>::mma(acc_dq[mt][n / kMmaN + 1], a[mt], frag_b[2], frag_b[3]);
        }
      }
    }
    // One float4 atomic per 4 columns: lanes of a pair swap halves so that the even lane holds
    // 4 columns of row g and the odd lane 4 columns of row g + 8.
    const bool odd = (quad & 1) != 0;
#pragma unroll
    for (int mt = 0; mt < kDqMTiles; ++mt) {
      const int query = m * kBlockM + wm * Traits::kDqRows + mt * kMmaM + group + (odd ? 8 : 0);
      float* dq_row = p.dq + (int64_t(b) * p.seqlen_q + query) * p.q_token_stride +
                      int64_t(h) * kHeadDim + wn * Traits::kDqCols + 2 * (quad & ~1);
#pragma unroll
      for (int nt = 0; nt < Traits::kDqCols / kMmaN; ++nt) {
        const float* c = acc_dq[mt][nt];
        const float send0 = odd ? c[0] : c[2];
        const float send1 = odd ? c[1] : c[3];
        const float recv0 = __shfl_xor_sync(0xffffffffu, send0, 1);
        const float recv1 = __shfl_xor_sync(0xffffffffu, send1, 1);
        const float4 value =
            odd ? make_float4(recv0, recv1, c[2], c[3]) : make_float4(c[0], c[1], recv0, recv1);
        if (query < p.seqlen_q) {
#if __CUDA_ARCH__ >= 900  // the float4 overload needs compute capability 9.x
          atomicAdd(reinterpret_cast<float4*>(dq_row + nt * kMmaN),
                    make_float4(p.scale * value.x, p.scale * value.y, p.scale * value.z,
                                p.scale * value.w));
#else
          float* dst = dq_row + nt * kMmaN;
          atomicAdd(dst + 0, p.scale * value.x);
          atomicAdd(dst + 1, p.scale * value.y);
          atomicAdd(dst + 2, p.scale * value.z);
          atomicAdd(dst + 3, p.scale * value.w);
#endif
        }
      }
    }
  }

  // dK += scale dK_tile, dV += dV_tile (fp32). With one CTA per key tile (head_splits = 1) it
  // owns these rows: read-modify-write, with the product rounded before the add (no FMA), so a
  // step adds exactly its own contribution. With head_splits > 1 the CTAs of one key tile add
  // with fp32 atomics.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = n0 + key0 + group + 8 * r;
    if (key >= p.seqlen_k) continue;
    const int64_t row_offset = (int64_t(b) * p.seqlen_k + key) * p.kv_token_stride +
                               int64_t(h_kv) * kHeadDim + dim0 + 2 * quad;
#pragma unroll
    for (int nt = 0; nt < kDimCols / kMmaN; ++nt) {
      float2* dk = reinterpret_cast<float2*>(p.dk + row_offset + nt * kMmaN);
      float2* dv = reinterpret_cast<float2*>(p.dv + row_offset + nt * kMmaN);
      const float2 dk_add = make_float2(__fmul_rn(p.scale, acc_dk[nt][2 * r]),
                                        __fmul_rn(p.scale, acc_dk[nt][2 * r + 1]));
      const float2 dv_add = make_float2(acc_dv[nt][2 * r], acc_dv[nt][2 * r + 1]);
      add_pair(dk, dk_add, p.head_splits > 1);
      add_pair(dv, dv_add, p.head_splits > 1);
    }
  }
}

}  // namespace ringpack::cuda::bwd

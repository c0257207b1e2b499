// The deterministic dQ kernel of the backward: a CTA owns kDqBlockM queries of one query head and
// walks the key tiles of its kv head that its query tile's list in the tile plan holds
// (tiles/tile_lists.h: the tiles not skipped, in order), so dQ is summed in a fixed order with no
// atomics and repeated runs are bit-identical. Per key tile (docs/design.md §2):
//   S  = Q K^T, P = exp(scale S - lse), dP = dO V^T, dS = P (dP - delta), dQ += dS K
// and at the end dq += scale dQ (fp32, read-modify-write: the CTA owns these rows). Partial tiles
// test each key against the visible interval of the thread's queries (VisibleKeys,
// core/tile_mask.h). Used with the dK/dV kernel in its accumulate_dq = false mode; its params
// carry a tile plan at this kernel's tiles (kDqBlockM, kDqBlockN).
#pragma once

#include <cuda_runtime.h>

#include "cuda/backward/kernel_sm80.h"

namespace ringpack::cuda::bwd {

template <class Traits>
__global__ void __launch_bounds__(Traits::kDqKernelThreads, 1)
    backward_dq_kernel(const __grid_constant__ BackwardParams p) {
  using Element = typename Traits::Element;
  using TileKV = typename Traits::TileDqKV;
  using TileQ = typename Traits::TileDqQ;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kBlockM = Traits::kDqBlockM;
  constexpr int kBlockN = Traits::kDqBlockN;
  constexpr int kThreads = Traits::kDqKernelThreads;

  // Grid: x = query tile, y = query head, z = batch row (any order gives the same sums: a CTA
  // owns its dq rows). A query tile with no listed key tile adds 0.
  const int m_tile = blockIdx.x;
  const int h = blockIdx.y;
  const int b = blockIdx.z;
  const int slot = b * p.num_tiles_q + m_tile;
  const int32_t* tile_list = p.tile_lists + int64_t(slot) * p.num_tiles_k;
  const int tile_count = p.tile_counts[slot];
  const int h_kv = h / p.heads_per_kv;
  const int thread = threadIdx.x;
  const int warp = thread / kWarpSize;
  const int lane = thread % kWarpSize;
  const int group = lane / 4;
  const int quad = lane % 4;
  const int m0 = m_tile * kBlockM;
  const int query0 = warp * kMmaM;  // first query of this warp within the tile

  extern __shared__ __align__(128) unsigned char smem_raw[];
  uint16_t* smem_q = reinterpret_cast<uint16_t*>(smem_raw);
  uint16_t* smem_dout = smem_q + TileQ::kElems;
  // Buffer i: K at smem_kv + 2 i TileKV, V right after; ids and positions [2][2][kBlockN].
  uint16_t* smem_kv = smem_dout + TileQ::kElems;
  int32_t* smem_ids = reinterpret_cast<int32_t*>(smem_kv + 4 * TileKV::kElems);

  const int64_t q_offset = int64_t(b) * p.seqlen_q * p.q_token_stride + int64_t(h) * kHeadDim;
  load_tile_async<TileQ, kThreads>(smem_q, static_cast<const uint16_t*>(p.q) + q_offset,
                                   p.q_token_stride, m0, p.seqlen_q, thread);
  load_tile_async<TileQ, kThreads>(smem_dout, static_cast<const uint16_t*>(p.dout) + q_offset,
                                   p.q_token_stride, m0, p.seqlen_q, thread);
  cp_async_commit();

  // Per-query values of this thread's two rows (g and g + 8); past seqlen_q segment 0 (no
  // visible key).
  VisibleKeys keys_q[2];
  float lse_log2[2];
  float delta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int query = m0 + query0 + group + 8 * r;
    const bool valid = query < p.seqlen_q;
    const int64_t token = int64_t(b) * p.seqlen_q + query;
    const int64_t vector = (int64_t(b) * p.num_heads_q + h) * p.seqlen_q + query;
    keys_q[r] =
        visible_keys(valid ? p.segment_ids_q[token] : 0, valid ? p.positions_q[token] : 0, p.mask);
    lse_log2[r] = valid ? lse_to_log2(p.lse[vector]) : INFINITY;
    delta[r] = valid ? p.delta[vector] : 0.0f;
  }

  const int64_t kv_offset = int64_t(b) * p.seqlen_k * p.kv_token_stride + int64_t(h_kv) * kHeadDim;
  const int64_t token_k = int64_t(b) * p.seqlen_k;
  auto load_key_tile = [&](int buffer, int n_tile) {
    const int n0 = n_tile * kBlockN;
    uint16_t* smem_k = smem_kv + 2 * buffer * TileKV::kElems;
    int32_t* segment_k = smem_ids + 2 * buffer * kBlockN;
    int32_t* position_k = segment_k + kBlockN;
    load_tile_async<TileKV, kThreads>(smem_k, static_cast<const uint16_t*>(p.k) + kv_offset,
                                      p.kv_token_stride, n0, p.seqlen_k, thread);
    load_tile_async<TileKV, kThreads>(smem_k + TileKV::kElems,
                                      static_cast<const uint16_t*>(p.v) + kv_offset,
                                      p.kv_token_stride, n0, p.seqlen_k, thread);
    for (int i = thread; i < 2 * kBlockN; i += kThreads) {
      const int key = i % kBlockN;
      const bool valid = n0 + key < p.seqlen_k;
      const int64_t at = token_k + (valid ? n0 + key : 0);
      if (i < kBlockN) {
        cp_async_4(segment_k + key, p.segment_ids_k + at, valid);
      } else {
        cp_async_4(position_k + key, p.positions_k + at, valid);
      }
    }
  };

  float acc_dq[kHeadDim / kMmaN][4];  // [16 queries, head_dim] of this warp
  zero(acc_dq);

  // The listed key tiles, entries (tile << 1) | partial.
  if (tile_count > 0) {
    load_key_tile(0, __ldg(tile_list) >> 1);
    cp_async_commit();
  }
  for (int step = 0; step < tile_count; ++step) {
    const int entry = __ldg(tile_list + step);
    const bool partial = (entry & 1) != 0;
    const int buffer = step % 2;
    const uint16_t* smem_k = smem_kv + 2 * buffer * TileKV::kElems;
    const uint16_t* smem_v = smem_k + TileKV::kElems;
    const int32_t* segment_k = smem_ids + 2 * buffer * kBlockN;
    const int32_t* position_k = segment_k + kBlockN;

    cp_async_wait<0>();
    __syncthreads();  // K/V of this step landed; every warp is done with the other buffer
    if (step + 1 < tile_count) load_key_tile(1 - buffer, __ldg(tile_list + step + 1) >> 1);
    cp_async_commit();

    // S = Q K^T, dP = dO V^T: [16 queries, kBlockN keys] per warp.
    float acc_s[kBlockN / kMmaN][4];
    float acc_dp[kBlockN / kMmaN][4];
    zero(acc_s);
    zero(acc_dp);
    gemm_smem_nk<Element, kBlockN, kHeadDim, TileQ, TileKV>(acc_s, smem_q, query0, smem_k, 0, lane);
    gemm_smem_nk<Element, kBlockN, kHeadDim, TileQ, TileKV>(acc_dp, smem_dout, query0, smem_v, 0,
                                                            lane);
    // dS = P (dP - delta), P = exp2(scale_log2 S - lse_log2), masked entries 0.
#pragma unroll
    for (int nt = 0; nt < kBlockN / kMmaN; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = nt * kMmaN + 2 * quad + (e & 1);
        const int r = e / 2;
        float x = acc_s[nt][e] * p.scale_log2 - lse_log2[r];
        if (partial && !keys_q[r].contains(segment_k[key], position_k[key])) x = -INFINITY;
        acc_dp[nt][e] = exp2f(x) * (acc_dp[nt][e] - delta[r]);
      }
    }
    uint32_t frag_ds[kBlockN / kMmaK][4];
    pack_a<Element, kBlockN>(frag_ds, acc_dp);
    gemm_reg_kn<Element, kHeadDim, kBlockN, TileKV>(acc_dq, frag_ds, smem_k, 0, 0, lane);
  }
  cp_async_wait<0>();  // nothing left in flight (with no listed key tile: the Q/dO copies)

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int query = m0 + query0 + group + 8 * r;
    if (query >= p.seqlen_q) continue;
    float* dq_row = p.dq + (int64_t(b) * p.seqlen_q + query) * p.q_token_stride +
                    int64_t(h) * kHeadDim + 2 * quad;
#pragma unroll
    for (int nt = 0; nt < kHeadDim / kMmaN; ++nt) {
      float2* dq = reinterpret_cast<float2*>(dq_row + nt * kMmaN);
      float2 value = *dq;
      value.x += __fmul_rn(p.scale, acc_dq[nt][2 * r]);
      value.y += __fmul_rn(p.scale, acc_dq[nt][2 * r + 1]);
      *dq = value;
    }
  }
}

}  // namespace ringpack::cuda::bwd

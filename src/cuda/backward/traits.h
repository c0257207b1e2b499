// Compile-time tile choices of the backward kernels (one traits type) and the one
// heuristic that picks them. The kernels are in backward/kernel_sm80.h and
// backward/dq_kernel_sm80.h.
#pragma once

#include "cuda/backward/mma.h"

namespace ringpack::cuda {

// Tile heuristic (H100/H200, mma.sync): a CTA of 8 warps owns kBlockN = 128 keys, 16 per warp, so
// each warp keeps its dK and dV rows in registers (2 * 16 * head_dim fp32 per warp: 64 registers a
// thread each at head_dim 128). A step loads a query tile of kBlockM = 64 (one barrier pair and
// one cp.async stage per 64 queries) and computes it in register sub-tiles of kSubM queries:
// S^T and dP^T of 64 queries (32 + 32 registers) fit beside dK, dV at head_dim 64; at head_dim
// 128 sub-tiles of 32 are the largest that do not spill. The [kBlockM, head_dim] dQ tile of each
// step is split over the 8 warps for the atomic reduction.
//
// At head_dim 256 the dK and dV rows of 16 keys would take 256 registers a thread, so the head
// dim is split: kDimSplit = 2 warps share 16 keys, each accumulating dK and dV over its half of
// the columns (the same 128 registers as at head_dim 128). Both warps of a pair compute the same
// S^T and dP^T over the whole head dim (the sums cannot be split without a reduction between
// warps); the pair's first warp writes dS^T for dQ. The CTA then owns kBlockN = 64 keys and walks
// query tiles of kBlockM = 32.
constexpr int backward_dim_split(int head_dim) {
  return head_dim <= 128 ? 1 : head_dim / 128;
}
constexpr int backward_block_m(int head_dim) {
  return head_dim <= 128 ? 64 : 32;
}
constexpr int backward_sub_m(int head_dim) {
  return head_dim <= 64 ? 64 : head_dim <= 128 ? 32 : 16;
}
constexpr int kBackwardWarps = 8;

// CTAs per (key tile, kv head) of the dK/dV kernel. One CTA walking every query head of its GQA
// group serialises heads_per_kv times the query tiles of its key tile: on packed rows the CTAs at
// the start of the longest documents then outlast the average load of an SM (packed-16k: 1024
// steps against about 780 per SM), so the atomic mode gives each query head its own CTA and adds
// dK/dV with fp32 atomics (a few per key, against dQ's one per query and key tile). The
// deterministic mode keeps one CTA, whose read-modify-write is ordered.
constexpr int backward_head_splits(int heads_per_kv, bool deterministic) {
  return deterministic ? 1 : heads_per_kv;
}

template <class Element_, int kHeadDim_>
struct BackwardTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static_assert(kHeadDim % 64 == 0, "head_dim is a multiple of 64");

  // dK/dV kernel: a CTA owns kBlockN keys of one kv head; warp w owns keys
  // [16 (w / kDimSplit), +16) and dK/dV columns [kDimCols (w % kDimSplit), +kDimCols).
  static constexpr int kWarps = kBackwardWarps;
  static constexpr int kThreads = kWarps * kWarpSize;
  static constexpr int kDimSplit = backward_dim_split(kHeadDim);
  static constexpr int kDimCols = kHeadDim / kDimSplit;
  static constexpr int kBlockN = bwd::kMmaM * kWarps / kDimSplit;
  static constexpr int kBlockM = backward_block_m(kHeadDim);
  static constexpr int kSubM = backward_sub_m(kHeadDim);
  static_assert(kBlockM % kSubM == 0, "whole register sub-tiles per query tile");

  // dQ reduction inside the dK/dV kernel: the [kBlockM, kHeadDim] tile split over the warps in
  // warp tiles of kDqRows x kDqCols (32 x 32 at head_dim 128: each A and B fragment feeds two
  // MMAs, the least shared-memory traffic per MMA of the splits over 8 warps).
  static constexpr int kDqWarpsM = kBlockM / 32 > 0 ? kBlockM / 32 : 1;
  static constexpr int kDqWarpsN = kWarps / kDqWarpsM;
  static constexpr int kDqRows = kBlockM / kDqWarpsM;
  static constexpr int kDqCols = kHeadDim / kDqWarpsN;
  static_assert(kWarps % kDqWarpsM == 0 && kDqRows % bwd::kMmaM == 0 &&
                    kDqCols % (2 * bwd::kMmaN) == 0,
                "dQ warp split");

  // Deterministic dQ kernel: a CTA owns kDqBlockM queries of one q head (16 per warp) and walks
  // key tiles of kDqBlockN; its own tile sizes (and tile ranges) keep S, dP and dQ of a warp
  // (16 x kDqBlockN, 16 x kDqBlockN, 16 x head_dim fp32) within the registers.
  static constexpr int kDqBlockM = 64;
  static constexpr int kDqBlockN = kHeadDim <= 128 ? 64 : 32;  // dQ alone: 128 registers at 256
  static constexpr int kDqKernelWarps = kDqBlockM / bwd::kMmaM;
  static constexpr int kDqKernelThreads = kDqKernelWarps * kWarpSize;

  using TileKV = bwd::SmemTile<kBlockN, kHeadDim>;      // K, V: [kBlockN, head_dim]
  using TileQ = bwd::SmemTile<kBlockM, kHeadDim>;       // Q, dO: [kBlockM, head_dim]
  using TileDs = bwd::SmemTile<kBlockN, kBlockM>;       // dS^T: [kBlockN keys, kBlockM queries]
  using TileDqQ = bwd::SmemTile<kDqBlockM, kHeadDim>;   // dQ kernel Q, dO
  using TileDqKV = bwd::SmemTile<kDqBlockN, kHeadDim>;  // dQ kernel K, V

  // dK/dV kernel shared memory: K, V, double-buffered Q and dO, dS^T, then per-query vectors
  // (lse, delta, segment id, position; double-buffered).
  static constexpr int kSmemKV = 2 * TileKV::kElems * 2;
  static constexpr int kSmemQ = 2 * 2 * TileQ::kElems * 2;
  static constexpr int kSmemDs = TileDs::kElems * 2;
  static constexpr int kSmemRowVectors = 2 * 4 * kBlockM * 4;
  static constexpr int kSmemBytes = kSmemKV + kSmemQ + kSmemDs + kSmemRowVectors;

  // Deterministic dQ kernel: Q, dO once; double-buffered K, V; per-key ids and positions.
  static constexpr int kDqSmemBytes =
      2 * TileDqQ::kElems * 2 + 4 * TileDqKV::kElems * 2 + 2 * 2 * kDqBlockN * 4;
};

}  // namespace ringpack::cuda

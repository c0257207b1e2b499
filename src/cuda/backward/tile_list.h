// The mask at tile granularity for the backward kernels: lists, in shared memory, the tiles of
// the other side that are not skipped against this CTA's tile (src/core/tile_mask.h decides), so
// the main loop never visits a fully masked tile.
#pragma once

#include "core/tile_mask.h"
#include "cuda/backward/mma.h"
#include "cuda/tiles/tile_ranges.h"

namespace ringpack::cuda::bwd {

// A list entry: tile index and whether the tile needs per-element checks.
__device__ inline int encode_tile(int tile, bool partial) {
  return 2 * tile + (partial ? 1 : 0);
}
__device__ inline int entry_tile(int entry) {
  return entry / 2;
}
__device__ inline bool entry_partial(int entry) {
  return (entry & 1) != 0;
}

// Lists the tiles t in [*next, count) of `others` that are not kSkip against `mine`, in order,
// into list[0, kCapacity); stops before a round of kThreads candidates that would not fit and
// sets *next to the first tile not examined. A tile pair is partial when classify_tile says so
// (padding and tokens past the end of the row make it so: TileRange::has_padding). Returns the
// number listed. All threads of the CTA call it; warp_counts holds kThreads / 32 ints of shared
// memory. kOthersAreQueries says which side of classify_tile(q, k) the listed tiles are.
template <int kThreads, int kCapacity, bool kOthersAreQueries>
__device__ int build_tile_list(const TileRange* others, int count, const TileRange& mine,
                               const MaskSpec& mask, int* list, int* warp_counts, int* next) {
  static_assert(kCapacity >= kThreads, "a round always fits an empty list");
  constexpr int kWarps = kThreads / kWarpSize;
  const int thread = threadIdx.x;
  const int warp = thread / kWarpSize;
  const int lane = thread % kWarpSize;
  int stored = 0;
  int begin = *next;
  while (begin < count) {
    const int t = begin + thread;
    bool keep = false;
    bool partial = false;
    if (t < count) {
      const TileRange other = others[t];
      const TileClass cls =
          kOthersAreQueries ? classify_tile(other, mine, mask) : classify_tile(mine, other, mask);
      keep = cls != TileClass::kSkip;
      partial = cls == TileClass::kPartial;
    }
    const unsigned ballot = __ballot_sync(0xffffffffu, keep);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int prefix = 0;
    int total = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      prefix += w < warp ? warp_counts[w] : 0;
      total += warp_counts[w];
    }
    __syncthreads();  // warp_counts is rewritten by the next round
    if (stored + total > kCapacity) break;
    if (keep) {
      const unsigned lanes_below = (1u << lane) - 1u;
      list[stored + prefix + __popc(ballot & lanes_below)] = encode_tile(t, partial);
    }
    stored += total;
    begin += kThreads;
  }
  __syncthreads();  // the list is visible to every thread
  *next = begin;
  return stored;
}

}  // namespace ringpack::cuda::bwd

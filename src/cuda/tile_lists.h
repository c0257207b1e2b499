// The mask policy at tile granularity, on the device, for whole steps: from the tile ranges of
// both sides (tile_ranges.h), per tile of one side the list of tiles of the other side that are
// not skipped (src/core/tile_mask.h classifies), and an order of the tiles by list length.
// Stream-ordered, no host synchronisation.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/tile_mask.h"
#include "ringpack/mask.h"

namespace ringpack::cuda {

// List entries. Tiles are 64 or 128 tokens; the mask is classified on 64 x 64 sub-tiles
// ("quadrants") of each tile pair, so a kernel can skip the quadrants nobody sees (packed rows:
// about 30% of the work of 128 x 128 tiles is masked, 15% at 64 x 64). An entry is
//   (other tile << 8) | (partial bits << 4) | live bits,
// bit 2 a + b of each 4-bit field being sub-tile a of my tile against sub-tile b of the other:
// live = not skipped, partial = needs per-element checks. Tiles with no live quadrant are not
// listed.
constexpr int kSubTile = 64;

RINGPACK_HOST_DEVICE int entry_tile(int entry) {
  return entry >> 8;
}
RINGPACK_HOST_DEVICE bool entry_live(int entry, int mine, int other) {
  return ((entry >> (2 * mine + other)) & 1) != 0;
}
RINGPACK_HOST_DEVICE bool entry_partial(int entry, int mine, int other) {
  return ((entry >> (4 + 2 * mine + other)) & 1) != 0;
}
RINGPACK_HOST_DEVICE bool entry_any_partial(int entry) {
  return ((entry >> 4) & 0xF) != 0;
}

// For tile i of row b on "my" side (slot = b * num_mine + i): lists[slot * num_others + j],
// j < counts[slot], are the entries of the tiles of row b on the other side with a live
// quadrant, in increasing tile order. ranges_*: per 64-token sub-tile (tile_ranges.h);
// sub_mine / sub_others: sub-tiles per tile (1 or 2). lists_of_queries: the other side is the
// query side (the backward's key-tile CTAs) rather than the key side (the forward's).
void build_tile_lists(const TileRange* ranges_mine, const TileRange* ranges_others, int batch,
                      int num_mine, int num_others, int sub_mine, int sub_others,
                      int sub_tiles_mine, int sub_tiles_others, bool lists_of_queries,
                      const MaskSpec& mask, int32_t* lists, int32_t* counts, cudaStream_t stream);

// order[rank] = slot, by descending counts (ties by slot): heaviest tiles launch first.
void order_tiles_by_count(const int32_t* counts, int slots, int32_t* order, cudaStream_t stream);

// One step's tile plan in one stream-ordered device allocation: sub-tile ranges of both sides, then
// per tile of "my" side the list of tiles of the other side that are not skipped, the list
// lengths and the heaviest-first order of my tiles. Free with release(stream) once the kernels
// that read it are enqueued.
struct TilePlan {
  int num_mine = 0;           // tiles per row on my side
  int num_others = 0;         // tiles per row on the other side
  int32_t* lists = nullptr;   // [batch * num_mine, num_others]
  int32_t* counts = nullptr;  // [batch * num_mine]
  int32_t* order = nullptr;   // [batch * num_mine]
  void release(cudaStream_t stream);

 private:
  friend TilePlan plan_tiles(const int32_t*, const int32_t*, int, int, const int32_t*,
                             const int32_t*, int, int, int, bool, const MaskSpec&, cudaStream_t);
  void* scratch_ = nullptr;
};

// Side "mine": seqlen_mine tokens per row in tiles of tile_mine (64 or 128; segment ids,
// positions: [batch, seqlen] on the device); likewise the other side. lists_of_queries as above.
TilePlan plan_tiles(const int32_t* segment_ids_mine, const int32_t* positions_mine, int seqlen_mine,
                    int tile_mine, const int32_t* segment_ids_others,
                    const int32_t* positions_others, int seqlen_others, int tile_others, int batch,
                    bool lists_of_queries, const MaskSpec& mask, cudaStream_t stream);

}  // namespace ringpack::cuda

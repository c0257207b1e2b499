// The mask policy at tile granularity, on the device, for whole steps: from the tile ranges of
// both sides (tiles/tile_ranges.h), per tile of one side the list of tiles of the other side that
// are not skipped (src/core/tile_mask.h classifies), and an order of the tiles by list length.
// Stream-ordered, no host synchronisation.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/tile_mask.h"
#include "cuda/common/step_params.h"
#include "ringpack/mask.h"

namespace ringpack::cuda {

// The order of my tiles a plan writes: heaviest first (most tiles of the other side first, ties
// by slot), which the portable loops launch in, or none, for kernels that take their order from
// the slot index (the Hopper loops, the deterministic dQ kernel): order stays null then.
enum class SlotOrder { kHeaviestFirst, kFromIndex };

// One step's tile plan in one stream-ordered device allocation: tile ranges of both sides, then
// per tile of "my" side the list of tiles of the other side that are not skipped, the list
// lengths, the heaviest-first order of my tiles (SlotOrder), and a work counter for persistent
// kernels. Free with release(stream) once the kernels that read it are enqueued.
struct TilePlan {
  int num_mine = 0;    // tiles per row on my side
  int num_others = 0;  // tiles per row on the other side
  TileRange* ranges_mine = nullptr;
  TileRange* ranges_others = nullptr;
  int32_t* lists = nullptr;         // [batch * num_mine, num_others]
  int32_t* counts = nullptr;        // [batch * num_mine]
  int32_t* order = nullptr;         // [batch * num_mine]; null with SlotOrder::kFromIndex
  int32_t* work_counter = nullptr;  // 0 once the plan is built; persistent kernels count on it
  void* scratch = nullptr;          // the one allocation all of the above live in
  void release(cudaStream_t stream);
};

// Side "mine": seqlen_mine tokens per row in tiles of tile_mine (segment ids, positions:
// [batch, seqlen] on the device); likewise the other side. For tile i of row b on my side
// (slot = b * num_mine + i), lists[slot * num_others + j], j < counts[slot], are the tiles of row
// b on the other side that are not skipped against it, in increasing order, as
// (tile << 1) | partial; with SlotOrder::kHeaviestFirst, order[rank] = slot by descending count
// (ties by slot). lists_of_queries: the other side is the query side (the backward's key-tile
// CTAs) rather than the key side (the forward's query-tile CTAs).
TilePlan plan_tiles(const int32_t* segment_ids_mine, const int32_t* positions_mine, int seqlen_mine,
                    int tile_mine, const int32_t* segment_ids_others,
                    const int32_t* positions_others, int seqlen_others, int tile_others, int batch,
                    bool lists_of_queries, SlotOrder slot_order, const MaskSpec& mask,
                    cudaStream_t stream);

// plan_tiles for the step that `params` describes, at query tiles of tile_q and key tiles of
// tile_k, with the query tiles as "my" side (lists of key tiles: the forward, the deterministic
// dQ kernel) or, with lists_of_queries, the key tiles (lists of query tiles: the dK/dV kernels);
// sets params' tile plan (lists, counts, order, work counter) and num_tiles_q / num_tiles_k.
TilePlan plan_step_tiles(StepParams& params, int tile_q, int tile_k, bool lists_of_queries,
                         SlotOrder slot_order, cudaStream_t stream);

}  // namespace ringpack::cuda

// Per-tile summaries for the backward's tile classification: the TileRange of a tile's real
// (non-padding) tokens, and whether the tile also holds padding or reaches past the end of its
// row. Ranges over real tokens only keep a tile that ends in tail padding from overlapping every
// segment (padding has id 0 and position 0), which would make its CTA walk the whole row;
// `needs_checks` keeps such a tile partial, so padding pairs still get per-element checks.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/tile_mask.h"

namespace ringpack::cuda {

struct TileSummary {
  TileRange real;        // min/max id and position over real tokens; all 0 when there are none
  int32_t needs_checks;  // 1 when the tile holds padding or tokens past seqlen, else 0
};

// summaries[b * ceil(seqlen / tile) + i] for tokens [i*tile, (i+1)*tile) of row b.
// segment_ids, positions: [batch, seqlen] int32 on the device; summaries: device memory.
void compute_tile_summaries(const int32_t* segment_ids, const int32_t* positions, int batch,
                            int seqlen, int tile, TileSummary* summaries, cudaStream_t stream);

}  // namespace ringpack::cuda

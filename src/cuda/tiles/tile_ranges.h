// Per-tile ranges of segment ids and positions, computed on the device (no host sync).
// The mask policy (src/core/tile_mask.h) classifies tile pairs from these.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/tile_mask.h"

namespace ringpack::cuda {

inline int num_tiles(int seqlen, int tile) {
  return (seqlen + tile - 1) / tile;
}

// ranges[b * num_tiles(seqlen, tile) + i] = make_tile_range over tokens [i*tile, min((i+1)*tile,
// seqlen)) of row b; a last tile cut short by seqlen also has has_padding set. segment_ids,
// positions: [batch, seqlen] int32 on the device; ranges: device memory.
void compute_tile_ranges(const int32_t* segment_ids, const int32_t* positions, int batch,
                         int seqlen, int tile, TileRange* ranges, cudaStream_t stream);

}  // namespace ringpack::cuda

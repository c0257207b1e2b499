// One warp per tile: a warp-wide min/max reduction over the tile's real tokens (tile_mask.h).
#include "cuda/common/cuda_check.h"
#include "cuda/tiles/tile_ranges.h"

namespace ringpack::cuda {
namespace {

constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = 4;

__global__ void tile_ranges_kernel(const int32_t* __restrict__ segment_ids,
                                   const int32_t* __restrict__ positions, int batch, int seqlen,
                                   int tile, int tiles_per_row, TileRange* __restrict__ ranges) {
  const int warp = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (warp >= batch * tiles_per_row) return;
  const int row = warp / tiles_per_row;
  const int begin = (warp % tiles_per_row) * tile;
  const int end = min(begin + tile, seqlen);
  const int32_t* seg = segment_ids + size_t(row) * seqlen;
  const int32_t* pos = positions + size_t(row) * seqlen;
  TileRange r{INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, begin + tile > seqlen ? 1 : 0};
  for (int t = begin + lane; t < end; t += kWarpSize) {
    if (seg[t] == 0) {
      r.has_padding = 1;
      continue;
    }
    r.seg_min = min(r.seg_min, seg[t]);
    r.seg_max = max(r.seg_max, seg[t]);
    r.pos_min = min(r.pos_min, pos[t]);
    r.pos_max = max(r.pos_max, pos[t]);
  }
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    r.seg_min = min(r.seg_min, __shfl_xor_sync(0xffffffffu, r.seg_min, offset));
    r.seg_max = max(r.seg_max, __shfl_xor_sync(0xffffffffu, r.seg_max, offset));
    r.pos_min = min(r.pos_min, __shfl_xor_sync(0xffffffffu, r.pos_min, offset));
    r.pos_max = max(r.pos_max, __shfl_xor_sync(0xffffffffu, r.pos_max, offset));
    r.has_padding = max(r.has_padding, __shfl_xor_sync(0xffffffffu, r.has_padding, offset));
  }
  if (r.seg_max == INT32_MIN) r = TileRange{0, 0, 0, 0, 1};  // no real token
  if (lane == 0) ranges[warp] = r;
}

}  // namespace

void compute_tile_ranges(const int32_t* segment_ids, const int32_t* positions, int batch,
                         int seqlen, int tile, TileRange* ranges, cudaStream_t stream) {
  const int tiles = batch * num_tiles(seqlen, tile);
  if (tiles == 0) return;
  const int blocks = (tiles + kWarpsPerBlock - 1) / kWarpsPerBlock;
  tile_ranges_kernel<<<blocks, kWarpsPerBlock * kWarpSize, 0, stream>>>(
      segment_ids, positions, batch, seqlen, tile, num_tiles(seqlen, tile), ranges);
  RINGPACK_CHECK_LAUNCH();
}

}  // namespace ringpack::cuda

// BackwardParams: everything the backward kernels read, one trivially copyable struct passed by
// value as a __grid_constant__ kernel parameter. The math is docs/design.md §2.
//
// Tensors are BSHD and contiguous; strides are in elements. Every pointer is device memory.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/tiles/tile_ranges.h"
#include "ringpack/mask.h"

namespace ringpack::cuda {

struct BackwardParams {
  // Inputs of the step (element type = the kernel's Element: bf16 or fp16).
  const void* q;                 // [batch, seqlen_q, num_heads_q, head_dim]
  const void* k;                 // [batch, seqlen_k, num_heads_kv, head_dim]
  const void* v;                 // [batch, seqlen_k, num_heads_kv, head_dim]
  const void* dout;              // [batch, seqlen_q, num_heads_q, head_dim]
  const float* lse;              // [batch, num_heads_q, seqlen_q], final forward LSE (natural log)
  const float* delta;            // [batch, num_heads_q, seqlen_q], rowsum(dO * O)
  const int32_t* segment_ids_q;  // [batch, seqlen_q]
  const int32_t* positions_q;    // [batch, seqlen_q]
  const int32_t* segment_ids_k;  // [batch, seqlen_k]
  const int32_t* positions_k;    // [batch, seqlen_k]

  // Per-tile ranges (tiles/tile_ranges.h) at the tiles of the kernel that reads them.
  const TileRange* ranges_q;  // [batch, ceil(seqlen_q / tile_q)]
  const TileRange* ranges_k;  // [batch, ceil(seqlen_k / tile_k)]

  // wgmma dK/dV kernel only (tiles/tile_lists.h): per key tile (slot = b * num_tiles_k + i) the
  // query tiles that are not skipped, as (tile << 1) | partial; their counts; slots heaviest first.
  const int32_t* tile_lists;   // [batch * num_tiles_k, num_tiles_q]
  const int32_t* tile_counts;  // [batch * num_tiles_k]
  const int32_t* tile_order;   // [batch * num_tiles_k]

  // fp32 accumulators, added to (+=).
  float* dq;  // [batch, seqlen_q, num_heads_q, head_dim]
  float* dk;  // [batch, seqlen_k, num_heads_kv, head_dim]
  float* dv;  // [batch, seqlen_k, num_heads_kv, head_dim]

  int batch;
  int seqlen_q;
  int seqlen_k;
  int num_heads_q;
  int num_heads_kv;
  int head_dim;
  int group_size;   // num_heads_q / num_heads_kv: query heads per kv head
  int head_splits;  // dK/dV kernel: CTAs per (key tile, kv head), each walking group_size /
                    // head_splits query heads; > 1 adds dK/dV with atomics
  int num_tiles_q;  // ceil(seqlen_q / tile_q) of the kernel that reads ranges_q
  int num_tiles_k;  // ceil(seqlen_k / tile_k) of the kernel that reads ranges_k
  MaskSpec mask;
  float scale;         // softmax scale (resolved: > 0)
  float scale_log2;    // scale * log2(e): exp(scale * s) = exp2(scale_log2 * s)
  bool accumulate_dq;  // false in deterministic mode: the dK/dV kernel leaves dq alone

  // Strides (elements) of one token, for the q-side and k-side tensors.
  int64_t row_stride_q;  // num_heads_q * head_dim
  int64_t row_stride_k;  // num_heads_kv * head_dim
};

// TMA descriptors of the wgmma dK/dV kernel (common/tensor_map.h): q and dout as
// [batch * seqlen_q, num_heads_q, head_dim] in boxes of tile_q tokens x 64 columns, k and v as
// [batch * seqlen_k, num_heads_kv, head_dim] in boxes of tile_k tokens x 64 columns.
struct BackwardTensorMaps {
  CUtensorMap q;
  CUtensorMap k;
  CUtensorMap v;
  CUtensorMap dout;
  CUtensorMap dq;  // fp32 accumulators, for the tensor reductions of GradAdd::kTiles
  CUtensorMap dk;
  CUtensorMap dv;
};

}  // namespace ringpack::cuda

// StepParams: what every kernel of a step reads, forward and backward alike, in one stride
// vocabulary: the step's inputs, its tile plan, its shapes and its math. ForwardParams
// (forward/params.h) and BackwardParams (backward/params.h) derive from it and add their outputs;
// make_step_params fills it for both from an AttentionStep. Trivially copyable: the derived
// structs are passed by value as __grid_constant__ kernel arguments.
//
// Tensors are BSHD and contiguous; strides are in elements; every pointer is device memory.
#pragma once

#include <cstdint>
#include <type_traits>

#include "ringpack/attention.h"
#include "ringpack/mask.h"

namespace ringpack::cuda {

constexpr float kLog2e = 1.4426950408889634f;  // log2(e): exp(x) = exp2(x * log2(e))

struct StepParams {
  // ---- inputs (element type = the kernel's Element: bf16 or fp16) ----
  const void* q;                 // [batch, seqlen_q, num_heads_q, head_dim]
  const void* k;                 // [batch, seqlen_k, num_heads_kv, head_dim]
  const void* v;                 // [batch, seqlen_k, num_heads_kv, head_dim]
  const int32_t* segment_ids_q;  // [batch, seqlen_q]; 0 = padding
  const int32_t* positions_q;    // [batch, seqlen_q]
  const int32_t* segment_ids_k;  // [batch, seqlen_k]
  const int32_t* positions_k;    // [batch, seqlen_k]
  // ---- the tile plan (tiles/tile_lists.h; device scratch written by the launcher) ----
  // Per slot (a tile of the kernel's own side: query tiles in the forward, key tiles in the
  // Hopper backward; slot = b * tiles of that side + t): the other side's tiles that are not
  // skipped, as (tile << 1) | partial, in increasing order; their counts; slots heaviest first
  // (the order the portable loops launch in; the Hopper forward takes descending row order, the
  // Hopper backward row order).
  const int32_t* tile_lists;   // [slots, tiles of the other side]
  const int32_t* tile_counts;  // [slots]
  const int32_t* tile_order;   // [slots]; null where the kernel takes its order from the slot
                               // index (SlotOrder::kFromIndex)
  int32_t* work_counter;       // persistent kernels claim work items past the first gridDim.x by
                               // counting on it (0 at launch)
  // ---- shapes ----
  int batch;
  int seqlen_q;  // tokens of the query shard
  int seqlen_k;  // tokens of the key/value block
  int num_heads_q;
  int num_heads_kv;
  int heads_per_kv;         // num_heads_q / num_heads_kv (the GQA group size)
  int num_tiles_q;          // ceil(seqlen_q / the kernel's query tile)
  int num_tiles_k;          // ceil(seqlen_k / the kernel's key tile)
  int64_t q_token_stride;   // elements between consecutive tokens of q-side tensors
  int64_t kv_token_stride;  // elements between consecutive tokens of k-side tensors
  // ---- math ----
  float scale;       // s = scale * <q, k> (docs/design.md §2 (2)), resolved: > 0
  float scale_log2;  // scale * log2(e): exponentials are computed as exp2
  MaskSpec mask;     // causal / window; segments always apply
};
static_assert(std::is_trivially_copyable_v<StepParams>, "passed by value to the kernels");

// The inputs, shapes, strides and math of `step` (the tile fields are left to the launcher).
StepParams make_step_params(const AttentionStep& step);

}  // namespace ringpack::cuda

// The one parameter block of the forward kernel family: trivially copyable, passed by
// value as a __grid_constant__ kernel argument. Built by the launcher (forward/launch.cu) from an
// AttentionStep; the math it drives is docs/design.md §2 (direct) and §4 (merge).
//
// Tensors are BSHD, contiguous; strides below are in elements.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <type_traits>

#include "core/tile_mask.h"
#include "ringpack/mask.h"

namespace ringpack::cuda {

constexpr float kLog2e = 1.4426950408889634f;  // log2(e): exp(x) = exp2(x * log2(e))

struct ForwardParams {
  // ---- inputs (device memory) ----
  const void* q;  // [batch, seqlen_q, num_heads_q, head_dim], bf16 or fp16 (the instance's type)
  const void* k;  // [batch, seqlen_k, num_heads_kv, head_dim]
  const void* v;  // [batch, seqlen_k, num_heads_kv, head_dim]
  const int32_t* segment_ids_q;  // [batch, seqlen_q]; 0 = padding
  const int32_t* positions_q;    // [batch, seqlen_q]
  const int32_t* segment_ids_k;  // [batch, seqlen_k]
  const int32_t* positions_k;    // [batch, seqlen_k]

  // ---- per-tile metadata (device scratch, written by the launcher's pre-pass) ----
  // For query tile t of row b (tiles of block_m tokens), slot i = b * num_tiles_q + t:
  // tile_lists[i * num_tiles_k + j], j < tile_counts[i], are the key tiles (of block_n tokens)
  // that are not skipped, in increasing order, encoded as (key_tile << 1) | partial.
  const int32_t* tile_lists;   // [batch * num_tiles_q, num_tiles_k]
  const int32_t* tile_counts;  // [batch * num_tiles_q]
  const int32_t* tile_order;   // [batch * num_tiles_q]: slots, heaviest (most key tiles) first

  // ---- outputs (device memory); direct mode uses out/lse, merge mode out_acc/lse_acc ----
  void* out;       // [batch, seqlen_q, num_heads_q, head_dim], input dtype; O of rule (4)
  float* lse;      // [batch, num_heads_q, seqlen_q]; natural-log LSE of rule (3), -inf if empty
  float* out_acc;  // [batch, seqlen_q, num_heads_q, head_dim], fp32 running output (merged into)
  float* lse_acc;  // [batch, num_heads_q, seqlen_q], fp32 running LSE (merged into)

  // ---- shapes ----
  int batch;
  int seqlen_q;  // tokens of the query shard
  int seqlen_k;  // tokens of the key/value block
  int num_heads_q;
  int num_heads_kv;
  int heads_per_kv;        // num_heads_q / num_heads_kv (GQA group size)
  int num_tiles_q;         // ceil(seqlen_q / block_m)
  int num_tiles_k;         // ceil(seqlen_k / block_n)
  int64_t q_token_stride;  // elements between consecutive tokens of q / out: num_heads_q * head_dim
  int64_t kv_token_stride;  // elements between consecutive tokens of k / v: num_heads_kv * head_dim

  // ---- math ----
  float scale;       // s = scale * <q, k> (docs/design.md §2 (2))
  float scale_log2;  // scale * log2(e): exponentials are computed as exp2
  MaskSpec mask;     // causal / window; segments always apply
};

static_assert(std::is_trivially_copyable_v<ForwardParams>, "passed by value to the kernel");

// TMA descriptors of the wgmma kernel (common/tensor_map.h), passed by value beside ForwardParams:
// q as [batch * seqlen_q, num_heads_q, head_dim] in boxes of block_m tokens x 64 columns, k and v
// as [batch * seqlen_k, num_heads_kv, head_dim] in boxes of block_n tokens x 64 columns.
struct ForwardTensorMaps {
  CUtensorMap q;
  CUtensorMap k;
  CUtensorMap v;
};

}  // namespace ringpack::cuda

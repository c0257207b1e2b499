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
#include "cuda/common/step_params.h"

namespace ringpack::cuda {

// The forward's parameters: the step's (StepParams: inputs, the tile plan per query tile, shapes,
// strides and math) and its outputs.
struct ForwardParams : StepParams {
  // Direct mode writes out / lse, merge mode merges into out_acc / lse_acc.
  void* out;       // [batch, seqlen_q, num_heads_q, head_dim], input dtype; O of rule (4)
  float* lse;      // [batch, num_heads_q, seqlen_q]; natural-log LSE of rule (3), -inf if empty
  float* out_acc;  // [batch, seqlen_q, num_heads_q, head_dim], fp32 running output (merged into)
  float* lse_acc;  // [batch, num_heads_q, seqlen_q], fp32 running LSE (merged into)
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

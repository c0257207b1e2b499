// BackwardParams: everything the backward kernels read, one trivially copyable struct passed by
// value as a __grid_constant__ kernel parameter. The math is docs/design.md §2.
//
// Tensors are BSHD and contiguous; strides are in elements. Every pointer is device memory.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/common/step_params.h"

namespace ringpack::cuda {

// The backward's parameters: the step's (StepParams; the tile plan is that of the kernel it is
// passed to: per key tile for the dK/dV kernels, per query tile for the deterministic dQ kernel)
// and its own inputs and accumulators.
struct BackwardParams : StepParams {
  const void* dout;    // [batch, seqlen_q, num_heads_q, head_dim]
  const float* lse;    // [batch, num_heads_q, seqlen_q], final forward LSE (natural log)
  const float* delta;  // [batch, num_heads_q, seqlen_q], rowsum(dO * O)
  // fp32 accumulators, added to (+=).
  float* dq;           // [batch, seqlen_q, num_heads_q, head_dim]
  float* dk;           // [batch, seqlen_k, num_heads_kv, head_dim]
  float* dv;           // [batch, seqlen_k, num_heads_kv, head_dim]
  int head_splits;     // dK/dV kernel: CTAs per (key tile, kv head), each walking heads_per_kv /
                       // head_splits query heads; > 1 adds dK/dV with atomics
  bool accumulate_dq;  // false in deterministic mode: the dK/dV kernel leaves dq alone
};
static_assert(std::is_trivially_copyable_v<BackwardParams>, "passed by value to the kernels");

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

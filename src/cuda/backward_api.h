// Launcher entry points of the CUDA backward (owner: cudabwd). Host-only header: no CUDA types
// other than cudaStream_t. The math is docs/design.md §2 (backward); the kernels are documented in
// docs/cuda_kernels.md.
#pragma once

#include <cuda_runtime.h>

#include "ringpack/attention.h"

namespace ringpack::cuda {

// Overwrites delta[b][h][s] with sum_d dout[b][s][h][d] * out[b][s][h][d]
// (fp32). dout, out: [batch, seqlen_q, num_heads_q, head_dim] of `dtype` (bf16 or fp16) on the
// device; delta: [batch, num_heads_q, seqlen_q] fp32 on the device.
void run_delta(const void* dout, const void* out, DType dtype, const AttentionDims& dims,
               float* delta, cudaStream_t stream);

// Adds this step's dQ, dK, dV into the fp32 accumulators of `acc` (+=, never overwritten).
// `in.lse` is the final forward LSE, `in.delta` the output of run_delta. With `deterministic`,
// dQ is reduced without atomics and repeated runs are bit-identical.
void run_backward(const AttentionStep& step, const BackwardInputs& in,
                  const BackwardAccumulators& acc, bool deterministic, cudaStream_t stream);

}  // namespace ringpack::cuda

// Launcher entry points of the CUDA backward (owner: cudabwd). Host-only header: no CUDA types
// other than cudaStream_t. The math is docs/design.md §2 (backward); the kernels are documented in
// docs/cuda_kernels.md.
#pragma once

#include <cuda_runtime.h>

#include "cuda/kernel_options.h"
#include "ringpack/attention.h"

namespace ringpack::cuda {

// Overwrites delta[b][h][s] with sum_d dout[b][s][h][d] * out[b][s][h][d]
// (fp32). dout, out: [batch, seqlen_q, num_heads_q, head_dim] of `dtype` (bf16 or fp16) on the
// device; delta: [batch, num_heads_q, seqlen_q] fp32 on the device.
void run_delta(const void* dout, const void* out, DType dtype, const AttentionDims& dims,
               float* delta, cudaStream_t stream);

// Adds this step's dQ, dK, dV into the fp32 accumulators of `acc` (+=, never overwritten).
// `in.lse` is the final forward LSE, `in.delta` the output of run_delta. With
// options.deterministic, dQ is reduced without atomics and repeated runs are bit-identical; the
// other backward fields of `options` pick the kernel (kernel_options.h).
void run_backward(const AttentionStep& step, const BackwardInputs& in,
                  const BackwardAccumulators& acc, const KernelOptions& options,
                  cudaStream_t stream);

// Throws ringpack::Error naming the value and the fix unless the backward kernels support the
// dtype and head_dim (bf16 / fp16; 64, 128, 256). check_supported (kernel_options.h) adds the
// options.
void check_backward_supported(DType dtype, int head_dim);

}  // namespace ringpack::cuda

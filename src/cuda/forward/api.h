// Host entry points of the forward attention kernels (owner: cudafwd). Host-only declarations:
// no CUDA types other than cudaStream_t. Math: docs/design.md §2 (direct) and §4 (merge).
#pragma once

#include <cuda_runtime.h>

#include "cuda/kernel_options.h"
#include "ringpack/attention.h"

namespace ringpack::cuda {

// Merge mode: one CP step merged into the fp32 running accumulators (acc.out, acc.lse), which
// must hold a valid state (out = 0 and lse = -inf before the first step). options.forward_loop
// picks the main loop (kernel_options.h).
void run_forward(const AttentionStep& step, const ForwardAccumulators& acc,
                 const KernelOptions& options, cudaStream_t stream);

// Direct mode: writes O (step.dtype, [batch, seqlen_q, num_heads_q, head_dim]) and LSE
// (fp32, [batch, num_heads_q, seqlen_q]); no accumulators (cp = 1, benchmarks).
void run_forward_direct(const AttentionStep& step, void* out, float* lse,
                        const KernelOptions& options, cudaStream_t stream);

// Throws ringpack::Error naming the value and the fix unless the kernels support the dtype and
// head_dim (bf16 / fp16; 64, 128, 256). check_supported (kernel_options.h) adds the options.
void check_forward_supported(DType dtype, int head_dim);

}  // namespace ringpack::cuda

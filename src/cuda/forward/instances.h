// The compiled forward kernel instances: one launch function per (main loop, traits, epilogue),
// defined in forward/kernel_sm80.h (mma.sync) and forward/kernel_sm90.h (wgmma, sm_90a), explicitly
// instantiated in src/cuda/instances/forward_*.cu so the builds run in parallel. The launcher
// (forward/launch.cu) picks one at run time.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/forward/params.h"
#include "cuda/forward/traits.h"
#include "cuda/kernel_options.h"

namespace ringpack::cuda {

// kMerge = false: the direct epilogue (out, lse); true: merge into out_acc / lse_acc.
template <class Traits, bool kMerge>
void launch_forward(const ForwardParams& params, cudaStream_t stream);

#define RINGPACK_FORWARD_INSTANCE(kind, head_dim, element)                       \
  kind template void launch_forward<ForwardTraitsFor<head_dim, element>, false>( \
      const ForwardParams&, cudaStream_t);                                       \
  kind template void launch_forward<ForwardTraitsFor<head_dim, element>, true>(  \
      const ForwardParams&, cudaStream_t)

// CTAs as options.forward_schedule and sm_margin say: one per work item (query head, query tile),
// or persistent ones on all SMs but sm_margin.
template <class Traits, bool kMerge>
void launch_forward_wgmma(const ForwardParams& params, const ForwardTensorMaps& maps,
                          const KernelOptions& options, cudaStream_t stream);

#define RINGPACK_FORWARD_WGMMA_INSTANCE(kind, head_dim, element)                           \
  kind template void launch_forward_wgmma<ForwardWgmmaTraits<head_dim, element>, false>(   \
      const ForwardParams&, const ForwardTensorMaps&, const KernelOptions&, cudaStream_t); \
  kind template void launch_forward_wgmma<ForwardWgmmaTraits<head_dim, element>, true>(    \
      const ForwardParams&, const ForwardTensorMaps&, const KernelOptions&, cudaStream_t)

RINGPACK_FORWARD_INSTANCE(extern, 64, __nv_bfloat16);
RINGPACK_FORWARD_INSTANCE(extern, 64, __half);
RINGPACK_FORWARD_INSTANCE(extern, 128, __nv_bfloat16);
RINGPACK_FORWARD_INSTANCE(extern, 128, __half);
RINGPACK_FORWARD_INSTANCE(extern, 256, __nv_bfloat16);
RINGPACK_FORWARD_INSTANCE(extern, 256, __half);
RINGPACK_FORWARD_WGMMA_INSTANCE(extern, 64, __nv_bfloat16);
RINGPACK_FORWARD_WGMMA_INSTANCE(extern, 64, __half);
RINGPACK_FORWARD_WGMMA_INSTANCE(extern, 128, __nv_bfloat16);
RINGPACK_FORWARD_WGMMA_INSTANCE(extern, 128, __half);
RINGPACK_FORWARD_WGMMA_INSTANCE(extern, 256, __nv_bfloat16);
RINGPACK_FORWARD_WGMMA_INSTANCE(extern, 256, __half);

}  // namespace ringpack::cuda

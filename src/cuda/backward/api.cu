// run_backward: validates one step, builds BackwardParams and dispatches on dtype x head_dim to
// an explicit instance (src/cuda/instances/backward_*_sm80.cu). Math: docs/design.md §2; kernels:
// backward/kernel_sm80.h (dK, dV, atomic dQ) and backward/dq_kernel_sm80.h (deterministic dQ).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/backward/api.h"
#include "cuda/backward/launch.h"
#include "cuda/backward/params.h"
#include "cuda/backward/traits.h"
#include "ringpack/error.h"

namespace ringpack::cuda {
namespace {

// CTAs per (key tile, kv head) of the dK/dV kernels: options.backward_head_splits when given (it
// must divide the GQA group, and be 1 when deterministic), else backward_head_splits.
int resolve_head_splits(const KernelOptions& options, int heads_per_kv) {
  const int splits = options.backward_head_splits;
  if (splits == 0) return backward_head_splits(heads_per_kv, options.deterministic);
  RINGPACK_CHECK(splits > 0 && heads_per_kv % splits == 0, "--backward-head-splits ", splits,
                 " must divide the GQA group size ", heads_per_kv,
                 " (num_heads_q / num_heads_kv); use a divisor, or 0 for the default");
  RINGPACK_CHECK(!options.deterministic || splits == 1, "--backward-head-splits ", splits,
                 " with --deterministic: the deterministic backward adds dK/dV from one CTA per "
                 "kv head; use 0 or 1");
  return splits;
}

BackwardParams make_backward_params(const AttentionStep& step, const BackwardInputs& in,
                                    const BackwardAccumulators& acc, const KernelOptions& options) {
  check_attention_step(step, "cuda");
  RINGPACK_CHECK(in.dout && in.lse && in.delta,
                 "CUDA backward: dout, lse and delta must all be set");
  RINGPACK_CHECK(acc.dq && acc.dk && acc.dv,
                 "CUDA backward: dq, dk and dv accumulators must be set");
  BackwardParams p{};
  static_cast<StepParams&>(p) = make_step_params(step);
  p.dout = in.dout;
  p.lse = in.lse;
  p.delta = in.delta;
  p.dq = acc.dq;
  p.dk = acc.dk;
  p.dv = acc.dv;
  p.head_splits = resolve_head_splits(options, p.heads_per_kv);
  return p;
}

template <class Element>
void dispatch_head_dim(int head_dim, const BackwardParams& p, const KernelOptions& options,
                       cudaStream_t stream) {
  switch (head_dim) {
    case 64:
      run_backward_instance<Element, 64>(p, options, stream);
      break;
    case 128:
      run_backward_instance<Element, 128>(p, options, stream);
      break;
    case 256:
      run_backward_instance<Element, 256>(p, options, stream);
      break;
    default:
      RINGPACK_FAIL("unreachable: check_backward_supported accepted head_dim ", head_dim);
  }
}

}  // namespace

void check_backward_supported(DType dtype, int head_dim) {
  RINGPACK_CHECK(dtype == DType::kBF16 || dtype == DType::kF16, "dtype ", dtype_name(dtype),
                 " is not supported by the CUDA backward; use --dtype bf16 or --dtype fp16");
  RINGPACK_CHECK(head_dim == 64 || head_dim == 128 || head_dim == 256, "head_dim ", head_dim,
                 " is not supported by the CUDA backward; use --head-dim 64, 128 or 256");
}

void run_backward(const AttentionStep& step, const BackwardInputs& in,
                  const BackwardAccumulators& acc, const KernelOptions& options,
                  cudaStream_t stream) {
  check_backward_supported(step.dtype, step.dims.head_dim);
  const BackwardParams p = make_backward_params(step, in, acc, options);
  if (step.dtype == DType::kBF16) {
    dispatch_head_dim<__nv_bfloat16>(step.dims.head_dim, p, options, stream);
  } else {
    dispatch_head_dim<__half>(step.dims.head_dim, p, options, stream);
  }
}

}  // namespace ringpack::cuda

// run_backward: validates one step, builds BackwardParams and dispatches on dtype x head_dim to
// an explicit instance (src/cuda/instances/backward_*.cu). Math: docs/design.md §2; kernels:
// backward_kernel.h (dK, dV, atomic dQ) and backward_dq_kernel.h (deterministic dQ).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdlib>

#include "cuda/backward_api.h"
#include "cuda/backward_launch.h"
#include "cuda/backward_params.h"
#include "cuda/backward_traits.h"
#include "cuda/backward_wgmma_launch.h"
#include "ringpack/error.h"

namespace ringpack::cuda {
namespace {

constexpr float kLog2e = 1.4426950408889634f;

BackwardParams make_backward_params(const AttentionStep& step, const BackwardInputs& in,
                                    const BackwardAccumulators& acc) {
  const AttentionDims& d = step.dims;
  check_attention_step(step, "cuda");
  RINGPACK_CHECK(in.dout && in.lse && in.delta,
                 "CUDA backward: dout, lse and delta must all be set");
  RINGPACK_CHECK(acc.dq && acc.dk && acc.dv,
                 "CUDA backward: dq, dk and dv accumulators must be set");
  BackwardParams p{};
  p.q = step.q;
  p.k = step.k;
  p.v = step.v;
  p.dout = in.dout;
  p.lse = in.lse;
  p.delta = in.delta;
  p.segment_ids_q = step.segment_ids_q;
  p.positions_q = step.positions_q;
  p.segment_ids_k = step.segment_ids_k;
  p.positions_k = step.positions_k;
  p.dq = acc.dq;
  p.dk = acc.dk;
  p.dv = acc.dv;
  p.batch = d.batch;
  p.seqlen_q = d.seqlen_q;
  p.seqlen_k = d.seqlen_k;
  p.num_heads_q = d.num_heads_q;
  p.num_heads_kv = d.num_heads_kv;
  p.head_dim = d.head_dim;
  p.group_size = d.num_heads_q / d.num_heads_kv;
  p.mask = step.mask;
  p.scale = resolve_scale(step.scale, d.head_dim);
  p.scale_log2 = p.scale * kLog2e;
  p.row_stride_q = int64_t(d.num_heads_q) * d.head_dim;
  p.row_stride_k = int64_t(d.num_heads_kv) * d.head_dim;
  return p;
}

template <class Element>
void dispatch_head_dim(const BackwardParams& p, bool deterministic, cudaStream_t stream) {
  switch (p.head_dim) {
    case 64:
      run_backward_instance<Element, 64>(p, deterministic, stream);
      break;
    case 128:
      run_backward_instance<Element, 128>(p, deterministic, stream);
      break;
    default:
      RINGPACK_FAIL("CUDA backward: head_dim = ", p.head_dim,
                    " is not supported; use 64 or 128 (or the cpu backend)");
  }
}

}  // namespace

int backward_wgmma_head_splits(int group_size) {
  const char* value = std::getenv("RINGPACK_BACKWARD_HEAD_SPLITS");
  if (value != nullptr) {
    const int splits = std::atoi(value);
    RINGPACK_CHECK(splits > 0 && group_size % splits == 0, "RINGPACK_BACKWARD_HEAD_SPLITS=", value,
                   " must divide the GQA group size ", group_size);
    return splits;
  }
  return backward_head_splits(group_size, /*deterministic=*/false);
}

void run_backward(const AttentionStep& step, const BackwardInputs& in,
                  const BackwardAccumulators& acc, bool deterministic, cudaStream_t stream) {
  const BackwardParams p = make_backward_params(step, in, acc);
  switch (step.dtype) {
    case DType::kBF16:
      dispatch_head_dim<__nv_bfloat16>(p, deterministic, stream);
      break;
    case DType::kF16:
      dispatch_head_dim<__half>(p, deterministic, stream);
      break;
    default:
      RINGPACK_FAIL("CUDA backward: dtype ", dtype_name(step.dtype),
                    " is not supported; use bf16 or fp16 (or the cpu backend)");
  }
}

}  // namespace ringpack::cuda

// The delta pre-pass of the backward: delta[b][h][s] = sum_d dO[b][s][h][d] * O[b][s][h][d] in
// fp32 (docs/design.md §2). Eight threads per (b, s, h) row, 16-byte loads, a shuffle reduction.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/backward/api.h"
#include "cuda/backward/mma.h"
#include "cuda/common/cuda_check.h"

namespace ringpack::cuda {
namespace {

constexpr int kDeltaThreads = 256;
constexpr int kDeltaThreadsPerRow = 8;
constexpr int kDeltaRowsPerBlock = kDeltaThreads / kDeltaThreadsPerRow;

// dout, out: [batch, seqlen, heads, head_dim]; delta: [batch, heads, seqlen]. One row = one
// (b, s, h) token-head of head_dim elements.
template <class Element>
__global__ void __launch_bounds__(kDeltaThreads)
    delta_kernel(const uint4* __restrict__ dout, const uint4* __restrict__ out,
                 float* __restrict__ delta, int64_t rows, int seqlen, int heads, int head_dim) {
  const int64_t row = (int64_t(blockIdx.x) * kDeltaThreads + threadIdx.x) / kDeltaThreadsPerRow;
  const int sub = threadIdx.x % kDeltaThreadsPerRow;
  const int chunks = head_dim / kChunkElems;
  float sum = 0.0f;
  if (row < rows) {
    for (int c = sub; c < chunks; c += kDeltaThreadsPerRow) {
      const uint4 a = dout[row * chunks + c];
      const uint4 o = out[row * chunks + c];
      const uint32_t a_words[4] = {a.x, a.y, a.z, a.w};
      const uint32_t o_words[4] = {o.x, o.y, o.z, o.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 da = ElementOps<Element>::unpack(a_words[i]);
        const float2 oa = ElementOps<Element>::unpack(o_words[i]);
        sum += da.x * oa.x + da.y * oa.y;
      }
    }
  }
  for (int offset = kDeltaThreadsPerRow / 2; offset > 0; offset /= 2) {
    sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  }
  if (row < rows && sub == 0) {
    const int64_t b = row / (int64_t(seqlen) * heads);
    const int64_t s = (row / heads) % seqlen;
    const int64_t h = row % heads;
    delta[(b * heads + h) * seqlen + s] = sum;
  }
}

}  // namespace

void run_delta(const void* dout, const void* out, DType dtype, const AttentionDims& dims,
               float* delta, cudaStream_t stream) {
  RINGPACK_CHECK(dims.head_dim % kChunkElems == 0, "head_dim = ", dims.head_dim,
                 " is not a multiple of ", kChunkElems, "; the CUDA backend needs 64, 128 or 256");
  const int64_t rows = int64_t(dims.batch) * dims.seqlen_q * dims.num_heads_q;
  if (rows == 0) return;
  const int64_t blocks = (rows + kDeltaRowsPerBlock - 1) / kDeltaRowsPerBlock;
  const auto* dout16 = static_cast<const uint4*>(dout);
  const auto* out16 = static_cast<const uint4*>(out);
  switch (dtype) {
    case DType::kBF16:
      delta_kernel<__nv_bfloat16><<<blocks, kDeltaThreads, 0, stream>>>(
          dout16, out16, delta, rows, dims.seqlen_q, dims.num_heads_q, dims.head_dim);
      break;
    case DType::kF16:
      delta_kernel<__half><<<blocks, kDeltaThreads, 0, stream>>>(
          dout16, out16, delta, rows, dims.seqlen_q, dims.num_heads_q, dims.head_dim);
      break;
    default:
      RINGPACK_FAIL("CUDA delta: dtype ", dtype_name(dtype), " is not supported; use bf16 or fp16");
  }
  RINGPACK_CHECK_LAUNCH();
}

}  // namespace ringpack::cuda

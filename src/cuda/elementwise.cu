// Element-wise device kernels (see elementwise.h): grid-stride loops, one launch each, checked.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "cuda/common/cuda_check.h"
#include "cuda/elementwise.h"

namespace ringpack::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;

int blocks_for(size_t count) {
  return int(std::min<size_t>((count + kThreads - 1) / kThreads, kMaxBlocks));
}

__global__ void fill_kernel(float* __restrict__ data, size_t count, float value) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x)
    data[i] = value;
}

// float4 pieces where both pointers allow it (cudaMalloc'd buffers and 16-byte offsets).
__global__ void accumulate_kernel(float* __restrict__ dst, const float* __restrict__ src,
                                  size_t count) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x)
    dst[i] += src[i];
}

__global__ void accumulate4_kernel(float4* __restrict__ dst, const float4* __restrict__ src,
                                   size_t count4) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count4;
       i += size_t(gridDim.x) * blockDim.x) {
    float4 a = dst[i];
    const float4 b = src[i];
    a.x += b.x;
    a.y += b.y;
    a.z += b.z;
    a.w += b.w;
    dst[i] = a;
  }
}

template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}

template <class T>
__global__ void cast_kernel(T* __restrict__ dst, const float* __restrict__ src, size_t count) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x)
    dst[i] = from_float<T>(src[i]);
}

// One thread per (row, token, word): tokens are copied in `Word`-sized pieces.
template <class Word>
__global__ void gather_kernel(const Word* __restrict__ src, Word* __restrict__ dst,
                              const int32_t* __restrict__ index, int rows, int tokens,
                              size_t words_per_token) {
  const size_t total = size_t(rows) * tokens * words_per_token;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total;
       i += size_t(gridDim.x) * blockDim.x) {
    const size_t word = i % words_per_token;
    const size_t slot = i / words_per_token;  // row * tokens + reordered token
    const size_t row = slot / tokens;
    const size_t token = slot % tokens;
    dst[i] = src[(row * tokens + size_t(index[token])) * words_per_token + word];
  }
}

template <class Word>
void launch_gather(const void* src, void* dst, const int32_t* index, int rows, int tokens,
                   size_t token_bytes, cudaStream_t stream) {
  const size_t words = token_bytes / sizeof(Word);
  gather_kernel<Word><<<blocks_for(size_t(rows) * tokens * words), kThreads, 0, stream>>>(
      static_cast<const Word*>(src), static_cast<Word*>(dst), index, rows, tokens, words);
  RINGPACK_CHECK_LAUNCH();
}

}  // namespace

void fill(float* data, size_t count, float value, cudaStream_t stream) {
  if (count == 0) return;
  fill_kernel<<<blocks_for(count), kThreads, 0, stream>>>(data, count, value);
  RINGPACK_CHECK_LAUNCH();
}

void accumulate(float* dst, const float* src, size_t count, cudaStream_t stream) {
  if (count == 0) return;
  constexpr size_t kVector = 4;
  const bool aligned = reinterpret_cast<uintptr_t>(dst) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(src) % 16 == 0 && count % kVector == 0;
  if (aligned) {
    accumulate4_kernel<<<blocks_for(count / kVector), kThreads, 0, stream>>>(
        reinterpret_cast<float4*>(dst), reinterpret_cast<const float4*>(src), count / kVector);
  } else {
    accumulate_kernel<<<blocks_for(count), kThreads, 0, stream>>>(dst, src, count);
  }
  RINGPACK_CHECK_LAUNCH();
}

void cast_from_f32(void* dst, DType dtype, const float* src, size_t count, cudaStream_t stream) {
  if (count == 0) return;
  switch (dtype) {
    case DType::kF32:
      RINGPACK_CUDA_CHECK(
          cudaMemcpyAsync(dst, src, count * sizeof(float), cudaMemcpyDeviceToDevice, stream));
      return;
    case DType::kBF16:
      cast_kernel<<<blocks_for(count), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(dst), src,
                                                              count);
      break;
    case DType::kF16:
      cast_kernel<<<blocks_for(count), kThreads, 0, stream>>>(static_cast<__half*>(dst), src,
                                                              count);
      break;
  }
  RINGPACK_CHECK_LAUNCH();
}

void gather_tokens(const void* src, void* dst, const int32_t* index, int rows, int tokens,
                   size_t token_bytes, cudaStream_t stream) {
  if (rows == 0 || tokens == 0 || token_bytes == 0) return;
  // The widest word that divides the token and both base addresses.
  const auto aligned = [&](size_t width) {
    return token_bytes % width == 0 && reinterpret_cast<uintptr_t>(src) % width == 0 &&
           reinterpret_cast<uintptr_t>(dst) % width == 0;
  };
  if (aligned(sizeof(uint4)))
    return launch_gather<uint4>(src, dst, index, rows, tokens, token_bytes, stream);
  if (aligned(sizeof(uint32_t)))
    return launch_gather<uint32_t>(src, dst, index, rows, tokens, token_bytes, stream);
  launch_gather<uint8_t>(src, dst, index, rows, tokens, token_bytes, stream);
}

}  // namespace ringpack::cuda

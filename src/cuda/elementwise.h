// Element-wise device kernels of the CUDA backend and the job layer: fill, fp32 -> bf16/fp16
// casts, and the token gathers that apply a reorder or its inverse on the device (docs/design.md
// §3). Host-only declarations; every function enqueues on `stream` and never synchronises.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "ringpack/dtype.h"

namespace ringpack::cuda {

// data[i] = value for i < count (fp32).
void fill(float* data, size_t count, float value, cudaStream_t stream);

// dst[i] += src[i] for i < count (fp32).
void accumulate(float* dst, const float* src, size_t count, cudaStream_t stream);

// dst[i] = round_to_nearest_even(src[i]) in `dtype` (fp32 copies, bf16, fp16).
void cast_from_f32(void* dst, DType dtype, const float* src, size_t count, cudaStream_t stream);

// dst[row][i] = src[row][index[i]] for `rows` rows of `tokens` tokens of `token_bytes` bytes;
// index: [tokens] int32 on the device. Gathering with a reorder index reorders a row; gathering
// with its inverse (invert_index) restores the original order. dst and src must not overlap.
void gather_tokens(const void* src, void* dst, const int32_t* index, int rows, int tokens,
                   size_t token_bytes, cudaStream_t stream);

}  // namespace ringpack::cuda

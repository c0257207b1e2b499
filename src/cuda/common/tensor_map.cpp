#include "cuda/common/tensor_map.h"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>

#include "cuda/common/cuda_check.h"
#include "ringpack/error.h"

namespace ringpack::cuda {
namespace {

constexpr int kSwizzleCols = 64;               // 16-bit elements per 128-byte swizzle line
constexpr unsigned kDriverApiVersion = 12000;  // the cuTensorMapEncodeTiled ABI of CUDA 12.0

PFN_cuTensorMapEncodeTiled_v12000 encode_function() {
  static PFN_cuTensorMapEncodeTiled_v12000 function = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* pointer = nullptr;
    cudaDriverEntryPointQueryResult status{};
    RINGPACK_CUDA_CHECK(cudaGetDriverEntryPointByVersion(
        "cuTensorMapEncodeTiled", &pointer, kDriverApiVersion, cudaEnableDefault, &status));
    RINGPACK_CHECK(status == cudaDriverEntryPointSuccess && pointer != nullptr,
                   "the CUDA driver has no cuTensorMapEncodeTiled (needs a CUDA 12+ driver)");
    function = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(pointer);
  });
  return function;
}

}  // namespace

bool encode_token_tile_map(CUtensorMap* map, const void* base, bool bf16, int64_t tokens,
                           int num_heads, int head_dim, int box_rows) {
  constexpr uintptr_t kAlignment = 16;
  if (reinterpret_cast<uintptr_t>(base) % kAlignment != 0 || tokens <= 0) return false;
  constexpr int64_t kElementBytes = 2;
  const cuuint64_t dims[3] = {cuuint64_t(head_dim), cuuint64_t(num_heads), cuuint64_t(tokens)};
  const cuuint64_t strides[2] = {cuuint64_t(head_dim * kElementBytes),
                                 cuuint64_t(int64_t(num_heads) * head_dim * kElementBytes)};
  const cuuint32_t box[3] = {cuuint32_t(kSwizzleCols), 1, cuuint32_t(box_rows)};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult result = encode_function()(
      map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3,
      const_cast<void*>(base), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  RINGPACK_CHECK(result == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed (CUresult ", int(result),
                 ") for a [", tokens, ", ", num_heads, ", ", head_dim, "] tensor, box ", box_rows,
                 " x 64");
  return true;
}

bool encode_fp32_tile_map(CUtensorMap* map, float* base, int batch, int seqlen, int num_heads,
                          int head_dim, int64_t row_stride, int box_rows, int box_cols) {
  constexpr uintptr_t kAlignment = 16;
  constexpr int64_t kElementBytes = 4;
  constexpr int kSwizzleBytes = 128;  // the widest box row the 128-byte swizzle allows
  RINGPACK_CHECK(box_cols > 0 && box_cols * kElementBytes <= kSwizzleBytes, "fp32 box of ",
                 box_cols, " columns is wider than the 128-byte swizzle");
  const int64_t row_bytes = row_stride * kElementBytes;
  if (reinterpret_cast<uintptr_t>(base) % kAlignment != 0 || row_bytes % int64_t(kAlignment) != 0 ||
      batch <= 0 || seqlen <= 0)
    return false;
  const cuuint64_t dims[4] = {cuuint64_t(head_dim), cuuint64_t(num_heads), cuuint64_t(seqlen),
                              cuuint64_t(batch)};
  const cuuint64_t strides[3] = {cuuint64_t(head_dim * kElementBytes), cuuint64_t(row_bytes),
                                 cuuint64_t(row_bytes * seqlen)};
  const cuuint32_t box[4] = {cuuint32_t(box_cols), 1, cuuint32_t(box_rows), 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUresult result =
      encode_function()(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, base, dims, strides, box,
                        element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  RINGPACK_CHECK(result == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed (CUresult ", int(result),
                 ") for an fp32 accumulator [", batch, ", ", seqlen, ", ", num_heads, ", ",
                 head_dim, "], row stride ", row_stride, ", box ", box_rows, " x ", box_cols);
  return true;
}

}  // namespace ringpack::cuda

// Warp-level building blocks of the mma.sync kernels (device code only, sm_80+ instructions): the
// m16n8k16 tensor-core MMA with fp32 accumulation, 16-bit pair packing, and the XOR swizzle of the
// forward's shared-memory tiles; cp.async and ldmatrix come from common/ptx.h.
//
// Fragment layouts follow the PTX ISA ("Matrix fragments for mma.m16n8k16"): with g = lane / 4
// and c = 2 * (lane % 4), a 16x8 fp32 accumulator holds (g, c), (g, c+1), (g+8, c), (g+8, c+1);
// an A fragment (16x16) holds rows g and g+8 at columns c, c+1, c+8, c+9 as four packed pairs;
// a B fragment (16x8, k x n) holds column g at rows c, c+1, c+8, c+9 as two packed pairs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/ptx.h"

namespace ringpack::cuda {

constexpr int kSwizzleRows = 8;  // rows whose chunk indices are permuted against each other

// Element offset of chunk `chunk` (8 elements) of tile row `row` in a swizzled shared tile with
// `row_elems` elements per row: chunk c of row r lives at chunk c ^ (r % 8), so the 8 rows an
// ldmatrix reads at one chunk column hit 8 different bank groups (row_elems >= 64).
template <int kRowElems>
__device__ __forceinline__ int swizzled_offset(int row, int chunk) {
  static_assert(kRowElems % (kChunkElems * kSwizzleRows) == 0, "rows of >= 64 elements");
  return row * kRowElems + ((chunk ^ (row % kSwizzleRows)) * kChunkElems);
}

// The element types the kernels instantiate: the MMA's PTX type and the float-pair packing.
template <class T>
struct ElementOps;

template <>
struct ElementOps<__nv_bfloat16> {
  // Two floats rounded to nearest even and packed low (first) / high (second).
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&pair);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t bits) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits));
  }
  // d = a (16x16) * b (16x8) + d, fp32 accumulate.
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

template <>
struct ElementOps<__half> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __half2 pair = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&pair);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t bits) {
    return __half22float2(*reinterpret_cast<const __half2*>(&bits));
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

}  // namespace ringpack::cuda

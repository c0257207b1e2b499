// PTX building blocks shared by the forward and backward kernels (device code, sm_80+):
// cp.async copies into shared memory and ldmatrix fragment loads.
#pragma once

#include <cstdint>

namespace ringpack::cuda {

constexpr int kWarpSize = 32;
constexpr int kChunkBytes = 16;  // one cp.async / ldmatrix row: 16 bytes = 8 bf16 or fp16
constexpr int kChunkElems = 8;

// A value that is the same on every lane of the (converged) warp, e.g. threadIdx.x / 128,
// broadcast from lane 0: the compiler then knows it is warp-uniform and keeps what derives from
// it (the wgmma descriptors, shared addresses of TMA operands) in uniform registers instead of
// moving it there before each use.
__device__ __forceinline__ int warp_uniform(int value) {
  return __shfl_sync(0xffffffffu, value, 0);
}

__device__ __forceinline__ uint32_t shared_address(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// 16-byte global -> shared copy; src_bytes = 0 writes zeros without reading the source.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  const int src_bytes = valid ? kChunkBytes : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(smem)),
               "l"(gmem), "r"(src_bytes));
}

// 4-byte global -> shared copy; zero-filled when !valid.
__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem, bool valid) {
  const int src_bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(shared_address(smem)),
               "l"(gmem), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}

// Waits until at most `kPending` committed groups of this thread are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Four 8x8 b16 matrices; lane i supplies the row address of row (i % 8) of matrix i / 8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(smem)));
}

// The same, each matrix transposed on the way (for B operands stored k-major, e.g. V).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(smem)));
}

}  // namespace ringpack::cuda

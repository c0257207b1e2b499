// Hopper (sm_90a) warpgroup MMA plumbing shared by the wgmma kernels: the 128-byte-swizzled
// shared-memory tile layout, its matrix descriptors, and the fences that order registers, shared
// memory and the asynchronous tensor cores. The instruction wrappers are in common/wgmma_ops.h.
//
// Tile layout (PTX ISA "Shared Memory Matrix Layout", 128B swizzle): a [rows, cols] tile of 16-bit
// elements (cols a multiple of 64) is stored as cols / 64 column blocks, each [rows][64]: one
// 128-byte line per row, and 16-byte chunk c of row r at chunk c ^ (r % 8) of its line. Every
// 8 rows (1024 bytes) the pattern repeats, so a tile must start on a 1024-byte boundary.
//
// The same bytes serve as a K-major operand (rows = M or N, cols = K: Q, K) and as an MN-major
// one (rows = K, cols = N: V in P V), only the descriptor differs:
//   K-major:  start = block (k / 64) + (k % 64) * 2 bytes; SBO = 1024 (next 8 rows); LBO unused.
//   MN-major: start = row k * 128 bytes; LBO = rows * 128 (next 64-column block); SBO = 1024
//             (next 8 rows along K).
#pragma once

#include <cstdint>

#include "cuda/common/ptx.h"
#include "cuda/common/wgmma_ops.h"

namespace ringpack::cuda {

constexpr int kWarpgroupThreads = 128;
constexpr int kSwizzleLineBytes = 128;   // one row of a column block
constexpr int kSwizzleAtomBytes = 1024;  // 8 rows: the unit the XOR pattern repeats over
constexpr int kSwizzleCols = 64;         // 16-bit elements per line
constexpr int kWgmmaK = 16;              // K of one wgmma (16-bit inputs)

// Matrix descriptor (PTX ISA "Matrix Descriptor Format"): bits 0-13 start address >> 4, 16-29
// leading-dimension byte offset >> 4, 32-45 stride-dimension byte offset >> 4, 62-63 swizzle
// mode (1 = 128B). Base offset (bits 49-51) stays 0: tiles are 1024-byte aligned.
__device__ __forceinline__ uint64_t smem_descriptor(const void* smem, uint32_t lbo_bytes,
                                                    uint32_t sbo_bytes) {
  constexpr uint64_t kSwizzle128B = 1;
  const uint64_t start = (shared_address(smem) & 0x3FFFF) >> 4;
  return start | (uint64_t((lbo_bytes >> 4) & 0x3FFF) << 16) |
         (uint64_t((sbo_bytes >> 4) & 0x3FFF) << 32) | (kSwizzle128B << 62);
}

// A descriptor moved by `bytes` (a multiple of 16) inside its tile: the start address field.
__device__ __forceinline__ uint64_t advance_descriptor(uint64_t desc, uint32_t bytes) {
  return desc + (bytes >> 4);
}

// Orders this thread's register writes before the next wgmma of the warpgroup reads them.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

// Closes the batch of wgmma issued since the last commit.
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Waits until at most kPending committed batches are still running.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Makes this thread's generic-proxy shared-memory writes (st.shared, cp.async) visible to the
// async proxy (wgmma operand reads); a barrier must follow before another thread's wgmma.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// stmatrix: stores four 8x8 16-bit matrices whose registers are in the accumulator / A-fragment
// layout (thread t holds row t / 4, columns 2 (t % 4) .. + 1 of matrix j in r[j]); lane i supplies
// the address of row i % 8 of matrix i / 8.
__device__ __forceinline__ void stmatrix_x4(const uint32_t (&r)[4], void* smem) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(
                   shared_address(smem)),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// Keeps the compiler from moving reads or writes of accumulator registers across an
// asynchronous wgmma (it cannot see that the hardware writes them later).
template <int kTiles>
__device__ __forceinline__ void fence_accumulators(float (&d)[kTiles][4]) {
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[t][e])::"memory");
}

// Warp specialisation: a warpgroup gives up registers (dec) or takes them (inc); every warp of the
// warpgroup executes the same one. Needs a register cap at kernel entry (__launch_bounds__).
template <int kRegisters>
__device__ __forceinline__ void set_max_registers_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void set_max_registers_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

}  // namespace ringpack::cuda

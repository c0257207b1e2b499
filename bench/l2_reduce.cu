// How fast an H100 / H200 adds fp32 tiles into global memory, by the three mechanisms a backward
// kernel can use for dQ: float2 and float4 atomics from registers (RED.F32x2 / x4, in the pattern
// of a wgmma accumulator fragment, as backward/kernel_sm90.h's atomic path adds dQ) and bulk
// reductions from shared memory (cp.reduce.async.bulk ... add.f32, one 1 KiB row each). Each CTA
// adds one 64 x 256 fp32 tile (64 KiB, a dQ tile at head_dim 256) per iteration to a tile of a
// buffer that holds `tiles` of them, a different one each time; the rate is bytes added per
// second. A measuring tool, not part of the library; CMake builds it as ringpack_l2_reduce where
// sm_90a is among the architectures (scripts/gpu_check.sh's build: build-gpu/ringpack_l2_reduce):
//
//   ringpack_l2_reduce [ctas_per_sm=1] [iterations=400]
//
// Prints one line per (mechanism, buffer size): the median of 5 timed runs.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "cuda/common/cuda_check.h"

namespace {

constexpr int kRows = 64;
constexpr int kCols = 256;
constexpr int kTileFloats = kRows * kCols;
constexpr int kThreads = 256;  // two warpgroups, each adding a 64 x 128 half

// The tile a CTA adds in iteration `it`: concurrent CTAs add to different tiles.
__device__ int tile_of(int cta, int it, int tiles) {
  return int((int64_t(cta) + int64_t(it) * gridDim.x) % tiles);
}

// Atomics in the accumulator-fragment pattern: warp w of warpgroup g holds rows 16 (w % 4) +
// lane / 4 (+ 8) and columns 128 g + 8 t + 2 (lane % 4) (+ 1), t < 16. kVec 2: one float2 per
// (row, t); kVec 4: lane pairs join their halves, the even lane adding row r, the odd one r + 8.
template <int kVec>
__global__ void __launch_bounds__(kThreads) add_atomics(float* buffer, int tiles, int iterations) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int row0 = 16 * (warp % 4) + lane / 4;
  const int col0 = 128 * (warp / 4) + 2 * (lane % 4);
  for (int it = 0; it < iterations; ++it) {
    float* tile = buffer + int64_t(tile_of(blockIdx.x, it, tiles)) * kTileFloats;
    if constexpr (kVec == 2) {
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int t = 0; t < 16; ++t)
          atomicAdd(reinterpret_cast<float2*>(tile + (row0 + 8 * r) * kCols + col0 + 8 * t),
                    make_float2(1.0f, 1.0f));
    } else {
      const int odd = lane & 1;
#pragma unroll
      for (int t = 0; t < 16; ++t)
        atomicAdd(
            reinterpret_cast<float4*>(tile + (row0 + 8 * odd) * kCols + col0 - 2 * odd + 8 * t),
            make_float4(1.0f, 1.0f, 1.0f, 1.0f));
    }
  }
}

// Bulk reductions: the tile (ones) sits in shared memory; threads 0-63 each add one 1 KiB row per
// iteration and wait until the engine has read it before the next (as a kernel that stages the
// next tile in the same memory must).
__global__ void __launch_bounds__(kThreads) add_bulk(float* buffer, int tiles, int iterations) {
  extern __shared__ __align__(128) float staged[];
  for (int i = threadIdx.x; i < kTileFloats; i += kThreads) staged[i] = 1.0f;
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  if (threadIdx.x >= kRows) return;
  const int row = threadIdx.x;
  const uint32_t src = uint32_t(__cvta_generic_to_shared(staged + row * kCols));
  for (int it = 0; it < iterations; ++it) {
    float* dst = buffer + int64_t(tile_of(blockIdx.x, it, tiles)) * kTileFloats + row * kCols;
    asm volatile(
        "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
        "r"(src), "n"(kCols * 4)
        : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
  }
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

template <class Launch>
double median_ms(Launch launch) {
  cudaEvent_t start, stop;
  RINGPACK_CUDA_CHECK(cudaEventCreate(&start));
  RINGPACK_CUDA_CHECK(cudaEventCreate(&stop));
  launch();  // warm-up
  RINGPACK_CUDA_CHECK(cudaGetLastError());
  std::vector<float> times;
  for (int rep = 0; rep < 5; ++rep) {
    RINGPACK_CUDA_CHECK(cudaEventRecord(start));
    launch();
    RINGPACK_CUDA_CHECK(cudaEventRecord(stop));
    RINGPACK_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    RINGPACK_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  RINGPACK_CUDA_CHECK(cudaEventDestroy(start));
  RINGPACK_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int measure(int argc, char** argv) {
  const int ctas_per_sm = argc > 1 ? std::atoi(argv[1]) : 1;
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 400;
  cudaDeviceProp prop{};
  RINGPACK_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const int ctas = prop.multiProcessorCount * ctas_per_sm;
  const int bulk_smem = kTileFloats * 4;
  RINGPACK_CUDA_CHECK(
      cudaFuncSetAttribute(add_bulk, cudaFuncAttributeMaxDynamicSharedMemorySize, bulk_smem));
  std::printf(
      "device: %s, %d SMs, L2 %d MiB; %d CTAs x %d threads, %d iterations of a 64 KiB tile\n",
      prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, ctas, kThreads, iterations);
  for (const int tiles : {256, 4096}) {  // 16 MiB (fits L2) and 256 MiB
    float* buffer = nullptr;
    RINGPACK_CUDA_CHECK(cudaMalloc(&buffer, size_t(tiles) * kTileFloats * 4));
    RINGPACK_CUDA_CHECK(cudaMemset(buffer, 0, size_t(tiles) * kTileFloats * 4));
    const double bytes = double(ctas) * iterations * kTileFloats * 4;
    const auto report = [&](const char* name, double ms) {
      std::printf("%-14s buffer %4d MiB: %8.3f ms, %6.3f TB/s of fp32 adds\n", name,
                  int((size_t(tiles) * kTileFloats * 4) >> 20), ms, bytes / (ms * 1e-3) / 1e12);
    };
    report("float2 atomics",
           median_ms([&] { add_atomics<2><<<ctas, kThreads>>>(buffer, tiles, iterations); }));
    report("float4 atomics",
           median_ms([&] { add_atomics<4><<<ctas, kThreads>>>(buffer, tiles, iterations); }));
    report("bulk rows",
           median_ms([&] { add_bulk<<<ctas, kThreads, bulk_smem>>>(buffer, tiles, iterations); }));
    RINGPACK_CUDA_CHECK(cudaGetLastError());
    RINGPACK_CUDA_CHECK(cudaFree(buffer));
  }
  return 0;
}

int main(int argc, char** argv) {
  try {
    return measure(argc, argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "ringpack_l2_reduce: %s\n", error.what());
    return 1;
  }
}

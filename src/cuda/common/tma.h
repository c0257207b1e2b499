// Hopper (sm_90) asynchronous copies and their barriers, device side: mbarriers (PTX ISA
// "Parallel Synchronization and Communication Instructions: mbarrier") and the tensor copy engine
// (TMA, "cp.async.bulk.tensor") that fills shared tiles and signals an mbarrier with the bytes it
// wrote. The tensor maps these copies read are encoded on the host (common/tensor_map.h).
//
// Phases: an mbarrier completes a phase when its expected arrivals have arrived and its
// transaction bytes have landed; waiters name the phase by its parity. A barrier that guards
// stage s of a ring of kStages buffers completes phase n for the n-th use of the stage, so the
// j-th item (stage j % kStages) waits for parity (j / kStages) & 1.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/common/ptx.h"

namespace ringpack::cuda {

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)),
               "r"(arrivals));
}

// Makes initialised barriers visible to the async proxy (TMA) and to other threads; a CTA
// barrier must follow before any other thread uses them.
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// One arrival (release: this thread's earlier shared-memory writes are visible to the waiters).
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_address(bar)) : "memory");
}

// One arrival that also announces `bytes` of asynchronous copies still to land in this phase.
__device__ __forceinline__ void mbarrier_arrive_expect_bytes(uint64_t* bar, uint32_t bytes) {
  asm volatile(
      "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(bar)),
      "r"(bytes)
      : "memory");
}

// Announces `bytes` of asynchronous copies still to land in the current phase (no arrival).
__device__ __forceinline__ void mbarrier_expect_bytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)),
               "r"(bytes)
               : "memory");
}

// Blocks until the phase of the given parity has completed (acquire).
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(shared_address(bar)),
      "r"(parity)
      : "memory");
}

// TMA: copies the box at coordinates (c0, c1, c2) of a rank-3 tensor map into shared memory
// (laid out and swizzled as the map says) and completes `bytes` on `bar` when it lands.
__device__ __forceinline__ void tma_load_3d(void* smem, const CUtensorMap* map, int c0, int c1,
                                            int c2, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
      "%3, %4}], [%5];\n" ::"r"(shared_address(smem)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(shared_address(bar))
      : "memory");
}

// Tensor reduction (PTX ISA "cp.reduce.async.bulk.tensor", tile mode): adds the box at coordinates
// (c0, c1, c2, c3) of a rank-4 fp32 tensor map element-wise from shared memory (laid out and
// swizzled as the map says) into global memory; elements outside the tensor are dropped. Tracked
// by the issuing thread's bulk groups: commit, then wait before the shared source is written
// again.
__device__ __forceinline__ void tma_reduce_add_4d(const CUtensorMap* map, const float* smem, int c0,
                                                  int c1, int c2, int c3) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2, %3, "
      "%4}], [%5];\n" ::"l"(reinterpret_cast<uint64_t>(map)),
      "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(shared_address(smem))
      : "memory");
}

// Closes the batch of bulk operations this thread issued since its last commit.
__device__ __forceinline__ void bulk_commit_group() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// Waits until at most kPending of this thread's committed bulk batches still read their shared
// sources (kReadOnly) or are still running at all.
template <int kPending, bool kReadOnly>
__device__ __forceinline__ void bulk_wait_group() {
  if constexpr (kReadOnly)
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
  else
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// The named barriers of the Hopper kernels: every id a kernel uses is here, so that two roles
// never share one by accident (0 is __syncthreads', 16 ids in all).
enum class NamedBarrier : int {
  kConsumers = 1,  // the consumer warpgroups only (the producer warp runs on)
  // The forward's ping-pong: consumer warpgroup w waits on kTurn0 + w for its turn to issue
  // MMAs, and the other warpgroup's arrival gives it (forward/kernel_sm90.h).
  kTurn0 = 2,
  kTurn1 = 3,
  // One consumer warpgroup alone: w waits on kWarpgroup0 + w (the backward at head_dim 64, where
  // a warpgroup's dQ reads only its own dS^T; backward/kernel_sm90.h).
  kWarpgroup0 = 4,
  kWarpgroup1 = 5,
  // The forward's key ids and positions in K stage s (kKeyIds0 + s; kernels without ping-pong):
  // every consumer thread arrives once it is done with the stage's tile, and the producer warp
  // syncs before it loads the stage again (forward/kernel_sm90.h).
  kKeyIds0 = 6,
  kKeyIds1 = 7,
};

// Synchronises `threads` threads (whole warps) on named barrier `id`.
__device__ __forceinline__ void named_barrier_sync(NamedBarrier id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(static_cast<int>(id)), "r"(threads) : "memory");
}

// Arrives on named barrier `id` of `threads` threads without waiting for the others.
__device__ __forceinline__ void named_barrier_arrive(NamedBarrier id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(static_cast<int>(id)), "r"(threads) : "memory");
}

}  // namespace ringpack::cuda

// The persistent kernels' hand-over of work items, device side. The producer warp claims the
// CTA's items (the first is blockIdx.x, each next one gridDim.x plus a global counter's count,
// claimed one item ahead: claim_next_work) and writes each into a ring of two slots in shared
// memory; the consumer threads take them in the same order. The grid is common/persistent.h's.
#pragma once

#include <cstdint>

#include "cuda/common/tma.h"

namespace ringpack::cuda {

// full[i]: slot i is written (one arrival, the producer's lane 0). With kEmptyBarrier, empty[i]:
// every consumer thread has read slot i, which the producer waits for before writing it again;
// without it, the kernel must order the rewrite otherwise (it says how).
template <class Work, bool kEmptyBarrier>
struct WorkRing {
  uint64_t full[2];
  uint64_t empty[kEmptyBarrier ? 2 : 1];
  Work items[2];

  // One thread, before the CTA barrier that follows the barriers' initialisation.
  __device__ void init(int consumer_threads) {
    for (int i = 0; i < 2; ++i) {
      mbarrier_init(&full[i], 1);
      if constexpr (kEmptyBarrier) mbarrier_init(&empty[i], consumer_threads);
    }
  }

  // The producer warp's n-th item: lane 0 writes make() into its slot. Returns the slot, which
  // the warp's lanes may read until they publish item n + 2.
  template <class Make>
  __device__ Work& publish(int n, int lane, Make&& make) {
    Work& slot = items[n % 2];
    if constexpr (kEmptyBarrier) mbarrier_wait(&empty[n % 2], ((n / 2) & 1) ^ 1);  // 1st: at once
    __syncwarp();  // every lane is done with the item this slot held before
    if (lane == 0) {
      slot = make();
      mbarrier_arrive(&full[n % 2]);
    }
    __syncwarp();
    return slot;
  }

  // A consumer thread's n-th item.
  __device__ Work take(int n) {
    mbarrier_wait(&full[n % 2], (n / 2) & 1);
    const Work work = items[n % 2];
    if constexpr (kEmptyBarrier) mbarrier_arrive(&empty[n % 2]);
    return work;
  }
};

// The producer's next item (one lane calls it).
__device__ __forceinline__ int claim_next_work(int32_t* counter) {
  return int(gridDim.x) + atomicAdd(counter, 1);
}

}  // namespace ringpack::cuda

// The visibility rule (1) of docs/design.md §2, shared by every backend and the cost model.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define RINGPACK_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define RINGPACK_HOST_DEVICE inline
#endif

namespace ringpack {

struct MaskSpec {
  bool causal = true;   // drop the position condition when false
  int64_t window = -1;  // sliding window: pos_q - pos_k <= window; < 0 means no window
};

// visible(q, k) = seg_q == seg_k && seg_q != 0 && pos_k <= pos_q [&& pos_q - pos_k <= window]
RINGPACK_HOST_DEVICE bool visible(int32_t seg_q, int32_t pos_q, int32_t seg_k, int32_t pos_k,
                                  const MaskSpec& mask) {
  if (seg_q != seg_k || seg_q == 0) return false;
  if (mask.causal && pos_k > pos_q) return false;
  if (mask.window >= 0) {
    const int64_t distance = int64_t(pos_q) - int64_t(pos_k);
    if (distance > mask.window || (!mask.causal && -distance > mask.window)) return false;
  }
  return true;
}

}  // namespace ringpack

// The host-memory half of every CPU backend: allocation, copies and the element-wise helpers of
// the AttentionBackend interface (attention.h), all on ordinary host memory.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "ringpack/attention.h"

namespace ringpack {

class HostBackend : public AttentionBackend {
 public:
  MemorySpace memory_space() const override { return MemorySpace::kHost; }

  // 64-byte aligned (one cache line; the widest vector loads).
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr) override;
  void copy_from_host(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;

  void fill(float* data, size_t count, float value) override;
  void cast_from_f32(void* dst, DType dtype, const float* src, size_t count) override;
  // delta[b][h][s] = sum_d dout[b][s][h][d] * out[b][s][h][d], fp32.
  void compute_delta(const void* dout, const void* out, DType dtype, const AttentionDims& dims,
                     float* delta) override;
  void accumulate(float* dst, const float* src, size_t count) override;
  void synchronize() override {}
  // Marks read the host clock (steady_clock) when they are made.
  std::unique_ptr<Timeline> make_timeline() override;
};

}  // namespace ringpack

// Host memory and element-wise helpers shared by the CPU backends (host_backend.h).
#include "cpu/host_backend.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "ringpack/error.h"

namespace ringpack {
namespace {
constexpr size_t kHostAlignment = 64;  // bytes: one cache line

class HostTimeline final : public Timeline {
 public:
  size_t mark(void* /*stream*/) override {
    const double now = std::chrono::duration<double>(Clock::now() - start_).count();
    std::lock_guard<std::mutex> lock(mutex_);
    marks_.push_back(now);
    return marks_.size() - 1;
  }
  double seconds(size_t id) override {
    std::lock_guard<std::mutex> lock(mutex_);
    RINGPACK_CHECK(id < marks_.size(), "timeline mark ", id, " was never made");
    return marks_[id];
  }

 private:
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start_ = Clock::now();
  std::mutex mutex_;
  std::vector<double> marks_;
};

}  // namespace

void* HostBackend::allocate(size_t bytes) {
  // aligned_alloc needs a size that is a multiple of the alignment (and not 0).
  const size_t rounded = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  void* ptr = std::aligned_alloc(kHostAlignment, rounded == 0 ? kHostAlignment : rounded);
  RINGPACK_CHECK(ptr != nullptr, "host allocation of ", bytes,
                 " bytes failed: reduce batch, seq_len or heads");
  return ptr;
}

void HostBackend::deallocate(void* ptr) {
  std::free(ptr);
}

void HostBackend::copy_from_host(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

void HostBackend::copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

void HostBackend::copy(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memmove(dst, src, bytes);
}

void HostBackend::fill(float* data, size_t count, float value) {
  for (size_t i = 0; i < count; ++i) data[i] = value;
}

void HostBackend::cast_from_f32(void* dst, DType dtype, const float* src, size_t count) {
  for (size_t i = 0; i < count; ++i) store_element(dst, dtype, i, src[i]);
}

void HostBackend::accumulate(float* dst, const float* src, size_t count) {
  for (size_t i = 0; i < count; ++i) dst[i] += src[i];
}

std::unique_ptr<Timeline> HostBackend::make_timeline() {
  return std::make_unique<HostTimeline>();
}

void HostBackend::compute_delta(const void* dout, const void* out, DType dtype,
                                const AttentionDims& dims, float* delta) {
  const int D = dims.head_dim;
  for (int b = 0; b < dims.batch; ++b) {
    for (int s = 0; s < dims.seqlen_q; ++s) {
      for (int h = 0; h < dims.num_heads_q; ++h) {
        const size_t row = ((size_t(b) * dims.seqlen_q + s) * dims.num_heads_q + h) * D;
        float sum = 0.0f;
        for (int d = 0; d < D; ++d) {
          sum += load_element(dout, dtype, row + d) * load_element(out, dtype, row + d);
        }
        delta[(size_t(b) * dims.num_heads_q + h) * dims.seqlen_q + s] = sum;
      }
    }
  }
}

}  // namespace ringpack

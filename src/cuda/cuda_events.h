// CUDA events for the stream-ordered runtime (docs/design.md §4): a pool of ordering events
// (no timing) that stream-ordered communicators take per transfer, and the CUDA Timeline
// (timing events, read after the stream reached them). Host-side code; thread-safe.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "ringpack/timeline.h"

namespace ringpack::cuda {

// Ordering events of one device, reused: acquire() hands out an event no one else holds,
// release() returns it. Events are created on first need (the pool only grows), so a warmed-up
// step loop creates none.
class EventPool {
 public:
  explicit EventPool(int device);
  ~EventPool();
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  cudaEvent_t acquire();
  void release(cudaEvent_t event);

 private:
  int device_;
  std::mutex mutex_;
  std::vector<cudaEvent_t> free_;
  std::vector<cudaEvent_t> all_;
};

// An event of a pool, returned to it on destruction.
class PooledEvent {
 public:
  PooledEvent() = default;
  explicit PooledEvent(EventPool& pool) : pool_(&pool), event_(pool.acquire()) {}
  ~PooledEvent() { reset(); }
  PooledEvent(PooledEvent&& other) noexcept;
  PooledEvent& operator=(PooledEvent&& other) noexcept;
  PooledEvent(const PooledEvent&) = delete;
  PooledEvent& operator=(const PooledEvent&) = delete;

  cudaEvent_t get() const { return event_; }
  explicit operator bool() const { return event_ != nullptr; }

 private:
  void reset();
  EventPool* pool_ = nullptr;
  cudaEvent_t event_ = nullptr;
};

// Timing events on any stream of one device; mark(nullptr) marks `default_stream`.
std::unique_ptr<Timeline> make_cuda_timeline(int device, cudaStream_t default_stream);

}  // namespace ringpack::cuda

// EventPool, PooledEvent and the CUDA Timeline (cuda_events.h).
#include "cuda/cuda_events.h"

#include <utility>

#include "cuda/common/cuda_check.h"

namespace ringpack::cuda {

EventPool::EventPool(int device) : device_(device) {}

EventPool::~EventPool() {
  cudaSetDevice(device_);
  for (cudaEvent_t event : all_) cudaEventDestroy(event);
}

cudaEvent_t EventPool::acquire() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (free_.empty()) {
    RINGPACK_CUDA_CHECK(cudaSetDevice(device_));
    cudaEvent_t event = nullptr;
    RINGPACK_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    all_.push_back(event);
    return event;
  }
  cudaEvent_t event = free_.back();
  free_.pop_back();
  return event;
}

void EventPool::release(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(mutex_);
  free_.push_back(event);
}

PooledEvent::PooledEvent(PooledEvent&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)), event_(std::exchange(other.event_, nullptr)) {}

PooledEvent& PooledEvent::operator=(PooledEvent&& other) noexcept {
  if (this != &other) {
    reset();
    pool_ = std::exchange(other.pool_, nullptr);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void PooledEvent::reset() {
  // A recorded event may be released at once: a later record replaces its state, and every
  // cudaStreamWaitEvent on it was made before (it captures the state at the call).
  if (event_ != nullptr) pool_->release(event_);
  event_ = nullptr;
  pool_ = nullptr;
}

namespace {

class CudaTimeline final : public Timeline {
 public:
  CudaTimeline(int device, cudaStream_t default_stream)
      : device_(device), default_stream_(default_stream) {
    start_ = mark(default_stream_);
  }
  ~CudaTimeline() override {
    cudaSetDevice(device_);
    for (cudaEvent_t event : events_) cudaEventDestroy(event);
  }

  size_t mark(void* stream) override {
    std::lock_guard<std::mutex> lock(mutex_);
    RINGPACK_CUDA_CHECK(cudaSetDevice(device_));
    cudaEvent_t event = nullptr;
    RINGPACK_CUDA_CHECK(cudaEventCreate(&event));  // with timing
    events_.push_back(event);
    cudaStream_t target = stream != nullptr ? static_cast<cudaStream_t>(stream) : default_stream_;
    RINGPACK_CUDA_CHECK(cudaEventRecord(event, target));
    return events_.size() - 1;
  }

  double seconds(size_t id) override {
    std::lock_guard<std::mutex> lock(mutex_);
    RINGPACK_CHECK(id < events_.size(), "timeline mark ", id, " was never made");
    float ms = 0.0f;
    RINGPACK_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[start_], events_[id]));
    constexpr double kSecondsPerMs = 1e-3;
    return double(ms) * kSecondsPerMs;
  }

 private:
  int device_;
  cudaStream_t default_stream_;
  std::mutex mutex_;
  std::vector<cudaEvent_t> events_;
  size_t start_ = 0;
};

}  // namespace

std::unique_ptr<Timeline> make_cuda_timeline(int device, cudaStream_t default_stream) {
  return std::make_unique<CudaTimeline>(device, default_stream);
}

}  // namespace ringpack::cuda

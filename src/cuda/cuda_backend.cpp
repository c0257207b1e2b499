// The CUDA AttentionBackend (attention.h): one device, one compute stream per instance (its own,
// or the caller's from BackendOptions::stream). Every call binds
// the backend's device first (CP ranks may drive several GPUs from several threads) and enqueues
// on the stream; only copy_to_host and synchronize wait.
#include "cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <mutex>
#include <set>
#include <string>

#include "cuda/backward/api.h"
#include "cuda/common/cuda_check.h"
#include "cuda/cuda_events.h"
#include "cuda/elementwise.h"
#include "cuda/forward/api.h"
#include "cuda/kernel_options.h"
#include "ringpack/error.h"

namespace ringpack {
namespace {

// Keeps freed scratch of the kernels' stream-ordered allocations in the device's pool between
// steps. Once per device and process, by its first backend: a backend made later (e.g. for the
// stream a framework is capturing into a CUDA graph) must not, as pool attributes cannot be set
// while a stream captures.
void keep_pool_memory(int device) {
  static std::mutex mutex;
  static std::set<int> done;
  std::lock_guard<std::mutex> lock(mutex);
  if (!done.insert(device).second) return;
  cudaMemPool_t pool = nullptr;
  RINGPACK_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  uint64_t keep = std::numeric_limits<uint64_t>::max();
  RINGPACK_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
}

class CudaBackend final : public AttentionBackend {
 public:
  explicit CudaBackend(const BackendOptions& options)
      : device_(options.device), kernel_options_(cuda::kernel_options(options)) {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    RINGPACK_CHECK(status == cudaSuccess && count > 0,
                   "backend 'cuda': no usable CUDA device on this machine (",
                   status == cudaSuccess ? "none visible" : cudaGetErrorString(status),
                   "); use --backend cpu, or run on a machine with an NVIDIA GPU and driver");
    RINGPACK_CHECK(device_ >= 0 && device_ < count, "CUDA device ", device_, " does not exist (",
                   count, " visible); use a device ordinal below ", count);
    RINGPACK_CUDA_CHECK(cudaSetDevice(device_));
    if (options.stream != 0) {
      stream_ = reinterpret_cast<cudaStream_t>(options.stream);  // the caller's; not ours
    } else {
      RINGPACK_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      owns_stream_ = true;
    }
    keep_pool_memory(device_);
  }

  ~CudaBackend() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    if (owns_stream_) cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda"; }
  MemorySpace memory_space() const override { return MemorySpace::kDevice; }

  void check_supported(DType dtype, int head_dim, bool backward) const override {
    cuda::check_supported(dtype, head_dim, backward, kernel_options_, device_);
  }

  void forward(const AttentionStep& step, const ForwardAccumulators& acc) override {
    bind();
    cuda::run_forward(step, acc, kernel_options_, stream_);
  }

  void forward_direct(const AttentionStep& step, void* out, float* lse) override {
    bind();
    cuda::run_forward_direct(step, out, lse, kernel_options_, stream_);
  }

  void backward(const AttentionStep& step, const BackwardInputs& in,
                const BackwardAccumulators& acc) override {
    bind();
    cuda::run_backward(step, in, acc, kernel_options_, stream_);
  }

  // Stream-ordered allocations from the device's pool (kept between calls, see the
  // constructor): neither allocating nor freeing waits on the host, and a buffer freed while
  // queued work still reads it is reused only after that work.
  void* allocate(size_t bytes) override {
    bind();
    void* ptr = nullptr;
    if (bytes > 0) RINGPACK_CUDA_CHECK(cudaMallocAsync(&ptr, bytes, stream_));
    return ptr;
  }

  void deallocate(void* ptr) override {
    if (ptr == nullptr) return;
    bind();
    RINGPACK_CUDA_CHECK(cudaFreeAsync(ptr, stream_));
  }

  void copy_from_host(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    bind();
    RINGPACK_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    // The host buffer may be reused as soon as this returns.
    RINGPACK_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    bind();
    RINGPACK_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    RINGPACK_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    bind();
    RINGPACK_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  }

  void fill(float* data, size_t count, float value) override {
    bind();
    cuda::fill(data, count, value, stream_);
  }

  void cast_from_f32(void* dst, DType dtype, const float* src, size_t count) override {
    bind();
    cuda::cast_from_f32(dst, dtype, src, count, stream_);
  }

  void compute_delta(const void* dout, const void* out, DType dtype, const AttentionDims& dims,
                     float* delta) override {
    bind();
    cuda::run_delta(dout, out, dtype, dims, delta, stream_);
  }

  void accumulate(float* dst, const float* src, size_t count) override {
    bind();
    cuda::accumulate(dst, src, count, stream_);
  }

  void* stream() const override { return stream_; }

  void synchronize() override {
    bind();
    RINGPACK_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  bool idle() override {
    bind();
    const cudaError_t status = cudaStreamQuery(stream_);
    if (status == cudaErrorNotReady) return false;
    RINGPACK_CUDA_CHECK(status);
    return true;
  }

  std::unique_ptr<Timeline> make_timeline() override {
    return cuda::make_cuda_timeline(device_, stream_);
  }

 private:
  void bind() const { RINGPACK_CUDA_CHECK(cudaSetDevice(device_)); }

  int device_;
  cuda::KernelOptions kernel_options_;  // BackendOptions' kernel choices and mode
  cudaStream_t stream_ = nullptr;
  bool owns_stream_ = false;
};

}  // namespace

std::unique_ptr<AttentionBackend> make_cuda_backend(const BackendOptions& options) {
  return std::make_unique<CudaBackend>(options);
}

}  // namespace ringpack

// Shared helpers for the GPU tests (label gpu): a fixture that skips without a CUDA device,
// seeds from the test name, random inputs rounded to the test dtype (core/random.h), and device
// buffers that upload, download and poison (NaN) themselves.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/host_tensor.h"
#include "core/random.h"
#include "ringpack/dtype.h"
#include "support/adversarial_layouts.h"  // seed_from_test_name, layouts

namespace ringpack::testing {

// True when at least one CUDA device is visible and usable.
bool cuda_device_available();

// The multiprocessors of device 0 (the persistent kernels' tests leave all but a few of them to
// other work through sm_margin). Throws when the device cannot say.
int device_sm_count();

// Two rows: a document of 100 tokens, and documents of 7 and 300; each padded to 700. Its padded
// tails give tiles with nothing visible: the empty work items of the persistent kernels.
PackedBatch short_documents_then_padding();

// Every GPU test derives from this: it skips cleanly on machines without a device.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device: GPU test skipped";
  }
};

// `values` rounded to dtype (round to nearest even) as a flat HostTensor: one row of
// values.size() elements.
HostTensor make_host_tensor(const std::vector<float>& values, DType dtype);
// random_uniform(count, seed) (in [-1, 1)) rounded to dtype.
HostTensor random_tensor(size_t count, DType dtype, uint64_t seed);
// bytes of `dtype` widened to float.
std::vector<float> widen(const void* bytes, DType dtype, size_t count);
// The elements of a flat tensor of `dtype` widened to double: what a reference computation reads.
std::vector<double> as_doubles(const HostTensor& tensor, DType dtype);

// Device memory owned by the test (cudaMalloc / cudaFree). Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }

  void upload(const void* host, size_t bytes);
  void download(void* host, size_t bytes) const;
  // Every byte 0xFF: NaN as fp32, bf16 and fp16, -1 as int32.
  void poison();

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

template <class T>
DeviceBuffer to_device(const std::vector<T>& host) {
  DeviceBuffer buffer(host.size() * sizeof(T));
  buffer.upload(host.data(), host.size() * sizeof(T));
  return buffer;
}

inline DeviceBuffer to_device(const HostTensor& tensor) {
  return to_device(tensor.bytes);
}

template <class T>
std::vector<T> to_host(const DeviceBuffer& buffer, size_t count) {
  std::vector<T> host(count);
  buffer.download(host.data(), count * sizeof(T));
  return host;
}

// A device buffer of `count` elements of dtype, poisoned.
DeviceBuffer poisoned_buffer(size_t count, DType dtype);
// Downloads `count` elements of dtype and widens them to float.
std::vector<float> download_as_float(const DeviceBuffer& buffer, DType dtype, size_t count);

}  // namespace ringpack::testing

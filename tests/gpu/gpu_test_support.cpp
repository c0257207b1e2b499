// Implementation of the GPU test helpers (see gpu_test_support.h).
#include "gpu/gpu_test_support.h"

#include <cuda_runtime.h>

#include <utility>

#include "cuda/common/cuda_check.h"

namespace ringpack::testing {

constexpr int kPoisonByte = 0xFF;

bool cuda_device_available() {
  static const bool available = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky "no device" status
      return false;
    }
    return count > 0;
  }();
  return available;
}

int device_sm_count() {
  int sms = 0;
  RINGPACK_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  return sms;
}

PackedBatch short_documents_then_padding() {
  return batch_from_lengths({{100}, {7, 300}}, 700);
}

HostTensor make_host_tensor(const std::vector<float>& values, DType dtype) {
  HostTensor tensor(1, int(values.size()), dtype_size(dtype));
  tensor.bytes = to_dtype_bytes(values, dtype);
  return tensor;
}

HostTensor random_tensor(size_t count, DType dtype, uint64_t seed) {
  return make_host_tensor(random_uniform(count, seed), dtype);
}

std::vector<float> widen(const void* bytes, DType dtype, size_t count) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = load_element(bytes, dtype, i);
  return values;
}

std::vector<double> as_doubles(const HostTensor& tensor, DType dtype) {
  std::vector<double> values(tensor.size_bytes() / dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) values[i] = load_element(tensor.data(), dtype, i);
  return values;
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) RINGPACK_CUDA_CHECK(cudaMalloc(&data_, bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::upload(const void* host, size_t bytes) {
  RINGPACK_CHECK(bytes <= bytes_, "upload of ", bytes, " bytes into a buffer of ", bytes_);
  if (bytes > 0) RINGPACK_CUDA_CHECK(cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice));
}

void DeviceBuffer::download(void* host, size_t bytes) const {
  RINGPACK_CHECK(bytes <= bytes_, "download of ", bytes, " bytes from a buffer of ", bytes_);
  if (bytes > 0) RINGPACK_CUDA_CHECK(cudaMemcpy(host, data_, bytes, cudaMemcpyDeviceToHost));
}

void DeviceBuffer::poison() {
  if (bytes_ > 0) RINGPACK_CUDA_CHECK(cudaMemset(data_, kPoisonByte, bytes_));
}

DeviceBuffer poisoned_buffer(size_t count, DType dtype) {
  DeviceBuffer buffer(count * dtype_size(dtype));
  buffer.poison();
  return buffer;
}

std::vector<float> download_as_float(const DeviceBuffer& buffer, DType dtype, size_t count) {
  std::vector<std::byte> bytes(count * dtype_size(dtype));
  buffer.download(bytes.data(), bytes.size());
  return widen(bytes.data(), dtype, count);
}

}  // namespace ringpack::testing

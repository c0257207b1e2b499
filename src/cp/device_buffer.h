// RAII ownership of one allocation in an attention backend's memory space (host or device).
//
// The CP schedules never dereference these pointers on the host: everything they do to a buffer
// goes through the backend (copy, fill, cast), so the same schedule runs on CUDA memory.
#pragma once

#include <cstddef>
#include <utility>

#include "ringpack/attention.h"

namespace ringpack {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(AttentionBackend& backend, size_t bytes)
      : backend_(&backend), bytes_(bytes), data_(bytes > 0 ? backend.allocate(bytes) : nullptr) {}
  ~DeviceBuffer() { reset(); }

  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : backend_(other.backend_),
        bytes_(std::exchange(other.bytes_, 0)),
        data_(std::exchange(other.data_, nullptr)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      backend_ = other.backend_;
      bytes_ = std::exchange(other.bytes_, 0);
      data_ = std::exchange(other.data_, nullptr);
    }
    return *this;
  }

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  // Pointer `offset` bytes into the buffer (still in the backend's space).
  void* at(size_t offset) const { return static_cast<std::byte*>(data_) + offset; }

 private:
  void reset() {
    if (data_ != nullptr) backend_->deallocate(data_);
    data_ = nullptr;
    bytes_ = 0;
  }

  AttentionBackend* backend_ = nullptr;
  size_t bytes_ = 0;
  void* data_ = nullptr;
};

}  // namespace ringpack

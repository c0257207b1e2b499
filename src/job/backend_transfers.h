// Host tensors into and out of an attention backend's memory, for the jobs (run and bench).
#pragma once

#include <cstddef>

#include "core/host_tensor.h"
#include "cp/device_buffer.h"
#include "ringpack/attention.h"

namespace ringpack {

// A new buffer of the backend holding `bytes` bytes from `host` (stream-ordered copy).
inline DeviceBuffer upload(AttentionBackend& backend, const void* host, size_t bytes) {
  DeviceBuffer buffer(backend, bytes);
  if (bytes > 0) backend.copy_from_host(buffer.data(), host, bytes);
  return buffer;
}

inline DeviceBuffer upload(AttentionBackend& backend, const HostTensor& host) {
  return upload(backend, host.data(), host.size_bytes());
}

// `host` (already shaped) receives the buffer's first host.size_bytes() bytes.
inline void download(AttentionBackend& backend, const DeviceBuffer& buffer, HostTensor& host) {
  if (host.size_bytes() > 0) backend.copy_to_host(host.data(), buffer.data(), host.size_bytes());
}

// The buffer as a host tensor of `like`'s shape.
inline HostTensor download_like(AttentionBackend& backend, const DeviceBuffer& buffer,
                                const HostTensor& like) {
  HostTensor host(like.rows, like.tokens, like.token_bytes);
  download(backend, buffer, host);
  return host;
}

}  // namespace ringpack

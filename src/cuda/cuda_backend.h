// The CUDA attention backend AttentionBackend on one device and one stream,
// forward via run_forward (merge epilogue), backward via run_backward, device memory via
// the stream-ordered allocator. Host-only header: no CUDA types.
#pragma once

#include <memory>

#include "ringpack/attention.h"

namespace ringpack {

// Throws ringpack::Error when no CUDA device with ordinal options.device exists.
std::unique_ptr<AttentionBackend> make_cuda_backend(const BackendOptions& options);

}  // namespace ringpack

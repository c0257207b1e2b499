// The CUDA attention backend (owner: cuda). Host-only header: no CUDA types.
#pragma once
#include <memory>
#include "ringpack/attention.h"
namespace ringpack {
std::unique_ptr<AttentionBackend> make_cuda_backend(const BackendOptions& options);
}

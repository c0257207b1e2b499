// The blocked fp32 CPU backend (STUB header; owner: cpu backends).
#pragma once
#include <memory>
#include "ringpack/attention.h"
namespace ringpack {
std::unique_ptr<AttentionBackend> make_blocked_backend(const BackendOptions& options);
}

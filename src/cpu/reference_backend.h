// The fp64 reference as a CP backend (STUB header; owner: cpu backends).
#pragma once
#include <memory>
#include "ringpack/attention.h"
namespace ringpack {
std::unique_ptr<AttentionBackend> make_reference_backend(const BackendOptions& options);
}

// The fp64 reference as a CP backend: each step runs reference_attention on the
// step's keys in fp64 and merges into the fp32 accumulators with lse_merge.h. Slow, exact; name
// "reference".
#pragma once

#include <memory>

#include "ringpack/attention.h"

namespace ringpack {

std::unique_ptr<AttentionBackend> make_reference_backend(const BackendOptions& options);

}  // namespace ringpack

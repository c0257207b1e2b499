// The blocked fp32 CPU backend (name "cpu"): FlashAttention-2 style online softmax over key
// tiles, tiles classified skip / full / partial by tile_mask.h, work spread over threads.
// The math is docs/design.md §2 (attention and gradients) and §4 (the merge into the accumulators).
#pragma once

#include <memory>

#include "ringpack/attention.h"

namespace ringpack {

std::unique_ptr<AttentionBackend> make_blocked_backend(const BackendOptions& options);

}  // namespace ringpack

// Host-side tensors of a run (core/host_tensor.h) cut into shards and put back together, through
// the reorder (docs/design.md §3).
#pragma once

#include <cstdint>
#include <vector>

#include "core/host_tensor.h"

namespace ringpack {

// Tokens [shard * n, (shard + 1) * n) of every row, as a [rows, n, token_bytes] tensor.
HostTensor slice_tokens(const HostTensor& full, int shard, int n);
// The inverse: writes `part` into tokens [shard * n, (shard + 1) * n) of every row of `full`.
void place_tokens(const HostTensor& part, int shard, HostTensor& full);
// Every row's tokens permuted by `index` (dst[i] = src[index[i]]), see gather_tokens.
HostTensor permute_tokens(const HostTensor& full, const std::vector<int32_t>& index);

}  // namespace ringpack

// Host-side tensors of a run (core/host_tensor.h) cut into shards and put back together, through
// the reorder (docs/design.md §3).
#pragma once

#include <cstdint>
#include <vector>

#include "core/host_tensor.h"

namespace ringpack {

// Rank `shard`'s tokens of `full` under the reorder `index` (reorder.h), as a [rows, n,
// token_bytes] tensor, n = full.tokens / cp: token t of every row is the row's token
// index[shard * n + t]. The reordered row cut into cp slices, without the reordered copy.
HostTensor shard_tokens(const HostTensor& full, const std::vector<int32_t>& index, int shard,
                        int cp);
// The inverse: the ranks' shards `parts` (rank r's at parts[r], all of one shape) put back
// together in the original order of the rows.
HostTensor unshard_tokens(const std::vector<const HostTensor*>& parts,
                          const std::vector<int32_t>& index);

}  // namespace ringpack

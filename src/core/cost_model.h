// The cost model behind `auto` (docs/design.md §3): bytes each rank sends and a modelled run time
// from the work the kernel really does (elements of tiles it does not skip).
#pragma once

#include <cstdint>
#include <vector>

#include "ringpack/plan.h"

namespace ringpack {

// Bytes one rank sends for forward + backward (every rank sends the same), n = seq_len / cp:
//   KV block  = K and V, batch*n*num_heads_kv*head_dim*dtype_bytes each, + ids and positions
//               (2*batch*n*4 bytes)
//   dK/dV     = fp32 gradients of one block, 2*batch*n*num_heads_kv*head_dim*4
//   ring:       forward (cp-1) blocks; backward (cp-1) blocks + cp dK/dV accumulator hops
//   all_gather: forward (cp-1) blocks (its block to every other rank); backward the same gather
//               again + reduce-scatter of dK/dV, (cp-1)/cp of the full fp32 row = (cp-1) dK/dV.
uint64_t bytes_sent_per_rank(int batch, int seq_len, const PlanConfig& config);

// Modelled seconds of forward + backward on the slowest rank.
//   step_tile_elements[r][s]: elements of the non-skipped tiles of rank r's queries against
//   rank s's keys ([cp][cp]), summed over rows; bytes_sent: bytes_sent_per_rank(...).
double modelled_seconds(const std::vector<std::vector<int64_t>>& step_tile_elements,
                        uint64_t bytes_sent, const PlanConfig& config);

}  // namespace ringpack

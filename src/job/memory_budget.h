// Size limits of run, plan and layout (docs/design.md §5): the memory a job would need, estimated
// from the sizes alone, checked against this machine's memory before anything is allocated.
#pragma once

#include <cstdint>

#include "ringpack/job.h"

namespace ringpack {

// Peak bytes of `ringpack run` on `options` (host tensors of the row, the shards and the
// results; the plan's cp x cp tables; with verify, the fp64 reference).
uint64_t run_bytes_needed(const BatchOptions& options, bool backward, bool verify);

// Peak bytes of `ringpack plan` / `ringpack layout`: the row's ids, positions and reorder index
// per candidate, the per-rank layout, and the cp x cp tables of every candidate reorder.
uint64_t plan_bytes_needed(const BatchOptions& options);

// The memory this process may use: physical memory, or the address-space limit when lower.
uint64_t usable_memory_bytes();

// Throws ringpack::Error naming the sizes, the bytes needed and the fix when `bytes` exceeds
// usable_memory_bytes(). `job` names the job ("run", "plan", "layout").
void check_memory(uint64_t bytes, const BatchOptions& options, const char* job);

}  // namespace ringpack

// What the ranks of a multi-process run (mpi, nccl) exchange besides the schedule's transfers:
// a fingerprint of the batch, to prove every process built the same one, and each rank's
// results, so that rank 0 can restore the rows and verify them (docs/design.md §4, §7).
// Everything moves through the run's own communicator, in the backend's memory space.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "job/rank_runner.h"
#include "ringpack/attention.h"
#include "ringpack/comm.h"
#include "ringpack/packing.h"

namespace ringpack {

// Every rank's `mine` (sizes may differ), indexed by rank. Blocks with the communicator's
// deadline.
std::vector<std::vector<std::byte>> all_gather_bytes(AttentionBackend& backend, Communicator& comm,
                                                     const std::vector<std::byte>& mine);

// A hash of the batch layout and of every option that shapes the run.
uint64_t batch_fingerprint(const PackedBatch& batch, const BatchOptions& options, bool backward);

// Throws, naming the ranks, when some rank's fingerprint differs from rank 0's.
void check_same_batch(AttentionBackend& backend, Communicator& comm, uint64_t fingerprint);

// Every rank's RankResult (tensors with their shapes, and the report), indexed by rank.
std::vector<RankResult> gather_results(AttentionBackend& backend, Communicator& comm,
                                       const RankResult& mine);

}  // namespace ringpack

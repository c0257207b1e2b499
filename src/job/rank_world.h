// The ranks of a run and where they live (docs/design.md §4): all of them as threads of this
// process (communicators `threads` and `device`), or this process's one rank of a launch by
// mpirun / torchrun (`mpi`, `nccl`). Each rank gets its own backend and communicator; the
// backend is made first, since stream-ordered communicators order against its compute stream.
#pragma once

#include <functional>

#include "ringpack/attention.h"
#include "ringpack/comm.h"
#include "ringpack/job.h"

namespace ringpack {

// Whether `kind` runs one rank per process (mpi, nccl) rather than all ranks as threads.
bool is_multi_process(CommKind kind);

// The communicator a run uses: options.comm, or the default for its backend (threads for CPU
// backends, device for CUDA).
CommKind resolve_comm(const RunOptions& options);

// Throws, before any work, when a multi-process run (mpi, nccl) was not started as it needs:
// by a launcher whose world size is cp, with the backend its communicator moves (mpi: host,
// nccl: cuda). Nothing to check for threads and device.
void check_launch(const RunOptions& options, int cp);

// Runs body(backend, comm) for every rank of this process: `cp` threads, or this process's rank
// (then the launch's world size must equal cp). A rank whose body throws aborts its
// communicator, so its peers stop waiting for it, and the exception propagates (threads: the
// first real one, after all threads joined).
void for_each_rank(const RunOptions& options, int cp,
                   const std::function<void(AttentionBackend&, Communicator&)>& body);

}  // namespace ringpack

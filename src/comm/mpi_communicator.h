// The MPI communicator: CPU ranks in separate processes over MPI (Debian's Open MPI), launched
// with mpirun (docs/design.md §4; interface in include/ringpack/comm.h). This header does not
// include mpi.h: callers need no MPI headers, and without MPI (RINGPACK_WITH_MPI unset) the
// functions exist and throw an Error that says how to install it (src/comm/mpi_unavailable.cpp).
//
// A host communicator: wait() and the collectives block the host, polling MPI with a deadline of
// timeout_seconds (--comm-timeout), and throw ringpack::Error naming this rank, the peer and the
// cause when it passes. Point-to-point messages go over a duplicate of MPI_COMM_WORLD with one tag,
// so messages of one pair match in posting order (MPI's non-overtaking rule); messages larger than
// the chunk size (default 1 GiB, below MPI's int count limit) travel as several messages.
//
// Failures: MPI errors are returned, not fatal (MPI_ERRORS_RETURN), and become ringpack::Error.
// abort() calls MPI_Abort and does not return: every rank of the job then exits with status 2
// (mpirun too). It is the one way to stop peers blocked in MPI, so a failed run calls it on the
// way out; called while an exception is handled, it first prints that exception on stderr as
// "ringpack: error: rank r: <message>" (the process has no other chance to). Open MPI's mpirun
// also stops the whole job when one rank dies, so a dead peer ends the run even where no wait is
// pending; a hung peer makes the waits of the others time out.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>

#include "ringpack/comm.h"

namespace ringpack {

// Largest message the MPI communicator hands to one MPI call (MPI counts are int).
constexpr size_t kMpiDefaultChunkBytes = size_t{1} << 30;

// True when an MPI launcher started this process. Reads only these environment variables:
// OMPI_COMM_WORLD_SIZE (Open MPI's mpirun), PMI_SIZE (MPICH/Hydra, Slurm PMI) and PMIX_RANK
// (PMIx launchers: Open MPI, Slurm's srun --mpi=pmix).
inline bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
         std::getenv("PMIX_RANK") != nullptr;
}

// Initialises MPI on the first call in this process (MPI_Init_thread, MPI_THREAD_SERIALIZED; an
// MPI that someone else initialised is reused and left to them to finalise) and returns a
// communicator over a duplicate of MPI_COMM_WORLD: rank() and size() are the world's. MPI is
// finalised at process exit, unless a transfer was abandoned after a failure (then the process
// aborts at exit, so that MPI_Finalize cannot hang on a peer that is gone). MPI_Init_thread and
// MPI_Finalize wait for every rank and have no deadline of their own: when one takes longer than
// timeout_seconds, the process prints why and exits with status 2 (mpirun then stops the job).
// Messages above chunk_bytes are split (tests pass a small value to exercise the split).
// Communicators are used by one thread at a time.
std::unique_ptr<Communicator> make_mpi_communicator(
    double timeout_seconds = kDefaultCommTimeoutSeconds,
    size_t chunk_bytes = kMpiDefaultChunkBytes);

}  // namespace ringpack

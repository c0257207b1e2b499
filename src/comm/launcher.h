// The launcher's environment: which rank this process is, how many there are, and where rank 0
// listens, as torchrun, mpirun or Slurm tell it (docs/design.md §4).
//
// These are the only environment variables the library reads to find its place in a job (the
// NCCL communicator also reads NCCL_HOSTID, see nccl_communicator.h). A variable set to the empty
// string counts as unset. The first launcher whose rank and size variables are set wins:
//   torchrun  RANK, WORLD_SIZE; LOCAL_RANK, LOCAL_WORLD_SIZE (also Slurm wrapper scripts that
//             export the torchrun names)
//   mpirun    OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE; OMPI_COMM_WORLD_LOCAL_RANK,
//             OMPI_COMM_WORLD_LOCAL_SIZE (Open MPI)
//   pmi       PMI_RANK, PMI_SIZE; MPI_LOCALRANKID, MPI_LOCALNRANKS (MPICH's Hydra, Intel MPI)
//   slurm     SLURM_PROCID, SLURM_NTASKS; SLURM_LOCALID, SLURM_TASKS_PER_NODE with SLURM_NODEID
//             (the task variables of srun)
// and, whatever the launcher, MASTER_ADDR and MASTER_PORT (rank 0's host and port: torchrun
// sets them; under mpirun or srun export them and, with mpirun, pass -x MASTER_ADDR -x
// MASTER_PORT). torchrun comes first because it may itself run under mpirun or srun, whose
// variables then describe the torchrun processes, not the ranks; Open MPI comes before Slurm for
// the same reason (mpirun inside an allocation).
//
// A launcher that does not say which ranks share a node is taken to have started one node:
// local_rank = rank, local_world_size = world_size.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace ringpack {

struct LauncherEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        // rank among the processes of this node
  int local_world_size = 1;  // processes on this node
  std::string master_addr;   // MASTER_ADDR; empty when unset
  int master_port = 0;       // MASTER_PORT; 0 when unset
  std::string launcher;      // "torchrun", "mpirun", "pmi" or "slurm"
};

// Looks up one environment variable (nullptr: unset); tests pass their own.
using EnvLookup = std::function<const char*(const char*)>;

// The launcher's environment, or nullopt when no launcher variables are set (a plain process).
// Throws ringpack::Error naming the variable, its value and the fix when a value is not a
// number, negative, out of range (a rank not below the world size, a local rank not below the
// local size, a port outside 1..65534), or when a rank variable is set without its size
// variable (or the other way round). A missing MASTER_ADDR is not an error here: only the TCP
// rendezvous needs it (rendezvous_config in rendezvous.h).
std::optional<LauncherEnv> read_launcher_env();
std::optional<LauncherEnv> read_launcher_env(const EnvLookup& lookup);

// "rank 1 of 4 (mpirun)": how errors name this process.
std::string describe(const LauncherEnv& env);

// The GPU a rank drives: local_rank % device_count (ranks of one node take the node's devices in
// turn; with more ranks than devices several ranks share one, which NCCL accepts only with a
// different NCCL_HOSTID per rank). Throws when device_count < 1.
int launcher_device(const LauncherEnv& env, int device_count);

}  // namespace ringpack

// for_each_rank: backends and communicators of the ranks of a run (rank_world.h).
#include "job/rank_world.h"

#include <memory>

#include "comm/device_communicator.h"
#include "comm/launcher.h"
#include "comm/mpi_communicator.h"
#include "comm/nccl_communicator.h"
#include "comm/staging_communicator.h"
#include "ringpack/error.h"

namespace ringpack {
namespace {

// Runs body on this rank; on failure aborts the communicator before the error leaves.
void run_guarded(AttentionBackend& backend, Communicator& comm,
                 const std::function<void(AttentionBackend&, Communicator&)>& body) {
  try {
    body(backend, comm);
  } catch (...) {
    comm.abort();
    throw;
  }
}

void check_world_size(int world_size, int cp, const char* launcher) {
  RINGPACK_CHECK(world_size == cp, "the launch has ", world_size, " ranks (", launcher,
                 ") but --cp is ", cp, ": start cp processes (e.g. mpirun -np ", cp,
                 ") or pass --cp ", world_size);
}

}  // namespace

bool is_multi_process(CommKind kind) {
  return kind == CommKind::kMpi || kind == CommKind::kNccl;
}

CommKind resolve_comm(const RunOptions& options) {
  if (options.comm) return *options.comm;
  return options.backend == BackendKind::kCuda ? CommKind::kDevice : CommKind::kThreads;
}

void check_launch(const RunOptions& options, int cp) {
  const CommKind kind = resolve_comm(options);
  if (!is_multi_process(kind)) return;
  const bool mpi = kind == CommKind::kMpi;
  RINGPACK_CHECK(mpi || options.backend == BackendKind::kCuda,
                 "--comm nccl needs --backend cuda (CPU ranks in processes use --comm mpi)");
  RINGPACK_CHECK(!mpi || options.backend != BackendKind::kCuda,
                 "--comm mpi moves host memory between CPU ranks; with --backend cuda use "
                 "--comm nccl (one process per GPU)");
  const std::optional<LauncherEnv> env = read_launcher_env();
  if (mpi && cp == 1 && !env) return;  // one MPI process needs no launcher
  RINGPACK_CHECK(env.has_value() && (!mpi || launched_by_mpi()), "--comm ", comm_kind_name(kind),
                 " runs one rank per process, but no launcher started this one: use ",
                 mpi ? "mpirun -np N ringpack run --comm mpi"
                     : "torchrun --nproc-per-node N --no-python ringpack run --comm nccl (or "
                       "mpirun -np N)",
                 " with N = --cp = ", cp);
  check_world_size(env->world_size, cp, env->launcher.c_str());
}

void for_each_rank(const RunOptions& options, int cp,
                   const std::function<void(AttentionBackend&, Communicator&)>& body) {
  check_launch(options, cp);
  const double timeout = options.comm_timeout_seconds;
  switch (resolve_comm(options)) {
    case CommKind::kThreads:
      run_in_process(
          cp,
          [&](Communicator& host) {
            auto backend = make_backend(options.backend, options.backend_options);
            if (backend->memory_space() == MemorySpace::kHost) {
              run_guarded(*backend, host, body);
            } else {  // explicitly asked for: device buffers staged through the host
              StagingCommunicator staging(host, *backend);
              run_guarded(*backend, staging, body);
            }
          },
          timeout);
      return;
    case CommKind::kDevice: {
      RINGPACK_CHECK(options.backend == BackendKind::kCuda, "--comm device runs virtual ranks of ",
                     "one GPU and needs --backend cuda (CPU ranks use --comm threads or mpi)");
      const std::shared_ptr<DeviceWorld> world = make_device_world(cp, timeout);
      run_in_process(
          cp,
          [&](Communicator& host) {
            auto backend = make_backend(options.backend, options.backend_options);
            auto comm = make_device_communicator(world, host.rank(), *backend);
            run_guarded(*backend, *comm, body);
          },
          timeout);
      return;
    }
    case CommKind::kMpi: {  // check_launch: a host backend, started by mpirun with cp ranks
      auto comm = make_mpi_communicator(timeout);
      detail::set_current_rank(comm->rank());
      check_world_size(comm->size(), cp, "mpi");
      auto backend = make_backend(options.backend, options.backend_options);
      run_guarded(*backend, *comm, body);
      return;
    }
    case CommKind::kNccl: {  // check_launch: the CUDA backend, a launcher with cp ranks
      const LauncherEnv env = read_launcher_env().value();
      detail::set_current_rank(env.rank);
      BackendOptions backend_options = options.backend_options;
      backend_options.device = launcher_device(env);
      auto backend = make_backend(options.backend, backend_options);
      auto comm = make_nccl_communicator(env, *backend, timeout);
      run_guarded(*backend, *comm, body);
      return;
    }
  }
  RINGPACK_FAIL("unknown communicator kind");
}

}  // namespace ringpack

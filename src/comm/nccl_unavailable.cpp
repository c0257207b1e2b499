// Stands in for the NCCL communicator (src/comm/nccl_communicator.cpp) in builds without NCCL:
// every function throws an Error that says how to get it.
#include "comm/nccl_communicator.h"
#include "ringpack/error.h"

namespace ringpack {
namespace {

[[noreturn]] void fail_without_nccl() {
  RINGPACK_FAIL(
      "the nccl communicator is not available: ringpack was built without NCCL: build with the "
      "CUDA toolkit (nvcc) and NCCL (nccl.h and libnccl, e.g. in /usr/local/cuda), or pass "
      "-DRINGPACK_NCCL=ON to cmake to make a missing NCCL an error");
}

}  // namespace

bool nccl_available() {
  return false;
}

NcclUniqueId make_nccl_unique_id() {
  fail_without_nccl();
}

int launcher_device(const LauncherEnv& env) {
  fail_without_nccl();
}

std::unique_ptr<Communicator> make_nccl_communicator(const LauncherEnv& env,
                                                     AttentionBackend& backend,
                                                     double timeout_seconds) {
  fail_without_nccl();
}

std::unique_ptr<Communicator> make_nccl_communicator_from_id(const void* unique_id, int rank,
                                                             int size, AttentionBackend& backend,
                                                             double timeout_seconds) {
  fail_without_nccl();
}

std::unique_ptr<Communicator> borrow_nccl_communicator(void* nccl_comm, AttentionBackend& backend,
                                                       double timeout_seconds) {
  fail_without_nccl();
}

}  // namespace ringpack

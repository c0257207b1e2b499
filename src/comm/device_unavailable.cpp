// Stands in for the device communicator (src/comm/device_communicator.cpp) in builds without
// CUDA: make_device_world and make_device_communicator throw an Error that says how to get it.
// No ordering rules apply: nothing is enqueued anywhere.
#include "comm/device_communicator.h"
#include "ringpack/error.h"

namespace ringpack {
namespace {

[[noreturn]] void fail_without_cuda() {
  RINGPACK_FAIL(
      "the device communicator is not available: ringpack was built without CUDA: install the "
      "CUDA toolkit (nvcc) and rebuild with -DRINGPACK_CUDA=ON, or use --comm threads or mpi with "
      "a CPU backend");
}

}  // namespace

std::shared_ptr<DeviceWorld> make_device_world(int size, double timeout_seconds) {
  fail_without_cuda();
}

std::unique_ptr<Communicator> make_device_communicator(std::shared_ptr<DeviceWorld> world, int rank,
                                                       AttentionBackend& backend) {
  fail_without_cuda();
}

}  // namespace ringpack

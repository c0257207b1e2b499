#include "cuda/main_loop.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <string_view>

#include "cuda/cuda_check.h"

namespace ringpack::cuda {

bool use_hopper_main_loop(const char* force_mma_sync_variable) {
  constexpr int kHopperMajor = 9;
  int device = 0;
  int major = 0;
  RINGPACK_CUDA_CHECK(cudaGetDevice(&device));
  RINGPACK_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  const char* force = std::getenv(force_mma_sync_variable);
  const bool forced_mma_sync = force != nullptr && std::string_view(force) == "1";
  return major == kHopperMajor && !forced_mma_sync;
}

}  // namespace ringpack::cuda

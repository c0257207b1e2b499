#include "cuda/main_loop.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <string_view>

#include "cuda/cuda_check.h"

namespace ringpack::cuda {

bool env_flag(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::string_view(value) == "1";
}

bool use_hopper_main_loop(const char* force_mma_sync_variable) {
  constexpr int kHopperMajor = 9;
  int device = 0;
  int major = 0;
  RINGPACK_CUDA_CHECK(cudaGetDevice(&device));
  RINGPACK_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major == kHopperMajor && !env_flag(force_mma_sync_variable);
}

}  // namespace ringpack::cuda

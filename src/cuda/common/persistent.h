// The grid of a persistent kernel: as many CTAs as fit on the device's SMs at once, less
// `sm_margin` SMs left free (for NCCL transfers that run beside the kernel in CP), and no more
// than there are work items. Host-only.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/common/cuda_check.h"

namespace ringpack::cuda {

// The number of SMs of the current device.
inline int current_device_sms() {
  int device = 0;
  int sms = 0;
  RINGPACK_CUDA_CHECK(cudaGetDevice(&device));
  RINGPACK_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

template <class Kernel>
int persistent_grid(Kernel kernel, int threads, int smem_bytes, int num_work, int sm_margin) {
  const int sms = current_device_sms();
  RINGPACK_CHECK(sm_margin >= 0 && sm_margin < sms, "--sm-margin ", sm_margin,
                 " must leave at least one of the device's ", sms, " SMs to the kernels");
  int per_sm = 0;
  RINGPACK_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem_bytes));
  RINGPACK_CHECK(per_sm > 0, "the kernel does not fit on an SM (", threads, " threads, ",
                 smem_bytes, " bytes of shared memory)");
  return std::max(1, std::min(num_work, per_sm * (sms - sm_margin)));
}

}  // namespace ringpack::cuda

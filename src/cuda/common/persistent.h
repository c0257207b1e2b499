// The grid of a persistent kernel: as many CTAs as fit on the device's SMs at once, less
// `sm_margin` SMs left free (for NCCL transfers that run beside the kernel in CP), and no more
// than there are work items. Host-only.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/common/cuda_check.h"

namespace ringpack::cuda {

// The SMs of `device` that a persistent kernel may use with `sm_margin`; throws ringpack::Error
// unless 0 <= sm_margin < the device's SMs. check_supported and the launchers both ask it.
inline int sms_for_kernels(int sm_margin, int device) {
  int sms = 0;
  RINGPACK_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  RINGPACK_CHECK(sm_margin >= 0 && sm_margin < sms, "--sm-margin ", sm_margin,
                 " must be at least 0 and leave at least one of device ", device, "'s ", sms,
                 " SMs to the kernels");
  return sms - sm_margin;
}

template <class Kernel>
int persistent_grid(Kernel kernel, int threads, int smem_bytes, int num_work, int sm_margin) {
  int device = 0;
  RINGPACK_CUDA_CHECK(cudaGetDevice(&device));
  const int sms = sms_for_kernels(sm_margin, device);
  int per_sm = 0;
  RINGPACK_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem_bytes));
  RINGPACK_CHECK(per_sm > 0, "the kernel does not fit on an SM (", threads, " threads, ",
                 smem_bytes, " bytes of shared memory)");
  return std::max(1, std::min(num_work, per_sm * sms));
}

}  // namespace ringpack::cuda

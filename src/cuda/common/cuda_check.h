// RINGPACK_CUDA_CHECK and RINGPACK_CHECK_LAUNCH: the CUDA members of the check family.
#pragma once

#include <cuda_runtime.h>

#include "ringpack/error.h"

#define RINGPACK_CUDA_CHECK(expr)                                                                \
  do {                                                                                           \
    const cudaError_t ringpack_cuda_status = (expr);                                             \
    if (ringpack_cuda_status != cudaSuccess)                                                     \
      ::ringpack::detail::throw_error(#expr, __FILE__, __LINE__,                                 \
                                      "CUDA error: ", cudaGetErrorString(ringpack_cuda_status)); \
  } while (0)

// After every kernel launch.
#define RINGPACK_CHECK_LAUNCH() RINGPACK_CUDA_CHECK(cudaGetLastError())

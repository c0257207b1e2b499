// The backward launcher of one kernel instance (element type x head_dim): computes the tile
// ranges at the traits' tile sizes, launches the dK/dV kernel and, in deterministic mode, the dQ
// kernel. Defined in backward/launch_template.h, instantiated in
// src/cuda/instances/backward_*_sm80.cu.
#pragma once

#include <cuda_runtime.h>

#include "cuda/backward/params.h"
#include "cuda/kernel_options.h"

namespace ringpack::cuda {

// params: every field but ranges_q/ranges_k/num_tiles_q/num_tiles_k, which are filled here.
// options: the main loop, the gradient adds and the mode (kernel_options.h).
template <class Element, int kHeadDim>
void run_backward_instance(BackwardParams params, const KernelOptions& options,
                           cudaStream_t stream);

}  // namespace ringpack::cuda

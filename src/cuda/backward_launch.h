// The backward launcher of one kernel instance (element type x head_dim): computes the tile
// ranges at the traits' tile sizes, launches the dK/dV kernel and, in deterministic mode, the dQ
// kernel. Defined in backward_launch_template.h, instantiated in src/cuda/instances/backward_*.cu.
#pragma once

#include <cuda_runtime.h>

#include "cuda/backward_params.h"

namespace ringpack::cuda {

// params: every field but ranges_q/ranges_k/num_tiles_q/num_tiles_k, which are filled here.
template <class Element, int kHeadDim>
void run_backward_instance(BackwardParams params, bool deterministic, cudaStream_t stream);

}  // namespace ringpack::cuda

// The backward launcher of one kernel instance (element type x head_dim): builds the tile plan at
// the kernel's tile sizes (tiles/tile_lists.h), launches the dK/dV kernel (Hopper's or the
// mma.sync one) and, in deterministic mode, the dQ kernel with a plan at its own tiles. Defined in
// backward/launch_template.h, instantiated in src/cuda/instances/backward_*_sm80.cu.
#pragma once

#include <cuda_runtime.h>

#include "cuda/backward/params.h"
#include "cuda/kernel_options.h"

namespace ringpack::cuda {

// params: every field but the tile plan's (tile_lists, tile_counts, tile_order, work_counter,
// num_tiles_q, num_tiles_k), which are filled here.
// options: the main loop, the gradient adds and the mode (kernel_options.h).
template <class Element, int kHeadDim>
void run_backward_instance(BackwardParams params, const KernelOptions& options,
                           cudaStream_t stream);

}  // namespace ringpack::cuda

// Explicit instantiation of the CUDA backward for bf16, head_dim 64.
#include "cuda/backward_launch_template.h"

namespace ringpack::cuda {
template void run_backward_instance<__nv_bfloat16, 64>(BackwardParams, const KernelOptions&,
                                                       cudaStream_t);
}  // namespace ringpack::cuda

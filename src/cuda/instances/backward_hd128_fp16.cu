// Explicit instantiation of the CUDA backward for fp16, head_dim 128.
#include "cuda/backward_launch_template.h"

namespace ringpack::cuda {
template void run_backward_instance<__half, 128>(BackwardParams, const KernelOptions&,
                                                 cudaStream_t);
}  // namespace ringpack::cuda

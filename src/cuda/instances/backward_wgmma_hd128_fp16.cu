// Backward wgmma kernel instance (sm_90a): head_dim 128, fp16.
#include "cuda/backward_wgmma_kernel.h"

namespace ringpack::cuda {
RINGPACK_BACKWARD_WGMMA_INSTANCE(, __half);
}  // namespace ringpack::cuda

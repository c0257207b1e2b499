// Backward wgmma kernel instance (sm_90a): head_dim 128, bf16.
#include "cuda/backward_wgmma_kernel.h"

namespace ringpack::cuda {
RINGPACK_BACKWARD_WGMMA_INSTANCE(, __nv_bfloat16);
}  // namespace ringpack::cuda

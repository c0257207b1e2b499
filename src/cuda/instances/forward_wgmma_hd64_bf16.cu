// Forward wgmma kernel instances (sm_90a): head_dim 64, bf16, direct and merge epilogues.
#include "cuda/forward_wgmma_kernel.h"

namespace ringpack::cuda {
RINGPACK_FORWARD_WGMMA_INSTANCE(, 64, __nv_bfloat16);
}  // namespace ringpack::cuda

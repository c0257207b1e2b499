// Forward wgmma kernel instances (sm_90a): head_dim 128, fp16, direct and merge epilogues.
#include "cuda/forward_wgmma_kernel.h"

namespace ringpack::cuda {
RINGPACK_FORWARD_WGMMA_INSTANCE(, 128, __half);
}  // namespace ringpack::cuda

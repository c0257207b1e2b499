// Forward kernel instances: head_dim 64, fp16, direct and merge epilogues.
#include "cuda/forward_kernel.h"

namespace ringpack::cuda {
RINGPACK_FORWARD_INSTANCE(, 64, __half);
}  // namespace ringpack::cuda

// Forward kernel instances: head_dim 256, fp16, direct and merge epilogues.
#include "cuda/forward_kernel.h"

namespace ringpack::cuda {
RINGPACK_FORWARD_INSTANCE(, 256, __half);
}  // namespace ringpack::cuda

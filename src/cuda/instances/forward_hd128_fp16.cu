// Forward kernel instances: head_dim 128, fp16, direct and merge epilogues.
#include "cuda/forward_kernel.h"

namespace ringpack::cuda {
RINGPACK_FORWARD_INSTANCE(, 128, __half);
}  // namespace ringpack::cuda

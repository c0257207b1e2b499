// STUB: replaced by the CUDA backend.
#include "cuda/cuda_backend.h"
#include "ringpack/error.h"
namespace ringpack {
std::unique_ptr<AttentionBackend> make_cuda_backend(const BackendOptions&) { RINGPACK_FAIL("not implemented"); }
}

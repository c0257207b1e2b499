// STUB: replaced by the CUDA backward launchers (owner: cudabwd).
#include "cuda/backward_api.h"
#include "ringpack/error.h"

namespace ringpack::cuda {

void run_delta(const void*, const void*, DType, const AttentionDims&, float*, cudaStream_t) {
  RINGPACK_FAIL("CUDA run_delta is not implemented yet");
}

void run_backward(const AttentionStep&, const BackwardInputs&, const BackwardAccumulators&, bool,
                  cudaStream_t) {
  RINGPACK_FAIL("CUDA run_backward is not implemented yet");
}

}  // namespace ringpack::cuda

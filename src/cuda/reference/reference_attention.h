// The GPU reference attention (docs/numerics.md, "The GPU reference"): the fp64 reference of
// src/cpu/reference_attention.h and its low-precision baseline, computed on the device so that
// `ringpack run --backend cuda --verify` can judge full-size rows. Plain CUDA-core loops (no
// tensor cores, nothing shared with the fast kernels of src/cuda/): one warp per (row, head,
// query) for the forward and dQ, one warp per (row, kv head, key) for dK and dV, so every sum
// has one owner and the results are deterministic. Each query walks only the keys of its own
// document (and each key only the queries of its document) when the document is one contiguous
// run of its segment id in the row; otherwise it walks the whole row. The mask rule
// (ringpack/mask.h) is still evaluated for every pair it walks.
//
// Tensors are host buffers in `dtype`, BSHD, row-major, contiguous, with the layouts of
// src/cpu/reference_attention.h; queries and keys are the same tokens (seqlen_q == seqlen_k,
// one segment id and position per token). The functions copy to the device, compute, and copy
// the results back; they use the current CUDA device. head_dim <= 256.
#pragma once

#include <cstdint>

#include "cpu/reference_attention.h"
#include "ringpack/attention.h"
#include "ringpack/dtype.h"
#include "ringpack/mask.h"

namespace ringpack {

struct GpuReferenceProblem {
  AttentionDims dims;  // seqlen_q == seqlen_k
  MaskSpec mask;
  double scale = 0.0;                    // already resolved (resolve_scale)
  DType dtype = DType::kF32;             // of q, k, v and dout
  const void* q = nullptr;               // host [b, s, hq, d]
  const void* k = nullptr;               // host [b, s, hkv, d]
  const void* v = nullptr;               // host [b, s, hkv, d]
  const int32_t* segment_ids = nullptr;  // host [b, s]
  const int32_t* positions = nullptr;    // host [b, s]
};

// reference_forward on the device: fp64 sums.
ReferenceForward gpu_reference_forward(const GpuReferenceProblem& problem);

// reference_backward on the device, from gpu_reference_forward's (or reference_forward's)
// result. dout: host [b, s, hq, d] in problem.dtype.
ReferenceGrads gpu_reference_backward(const GpuReferenceProblem& problem, const void* dout,
                                      const ReferenceForward& forward);

// lowprec_forward on the device: fp32 sums, P rounded to dtype before P V, out rounded to dtype.
ReferenceForward gpu_lowprec_forward(const GpuReferenceProblem& problem);

// lowprec_backward on the device, given the gpu_lowprec_forward result (lowprec_backward
// recomputes it): delta = <dO, out> in fp32, P and dS rounded to dtype before their products,
// fp32 sums, dq, dk, dv rounded to dtype.
ReferenceGrads gpu_lowprec_backward(const GpuReferenceProblem& problem, const void* dout,
                                    const ReferenceForward& low_forward);

}  // namespace ringpack

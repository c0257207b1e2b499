// The fp64 reference attention (docs/design.md §2, §7): naive loops, obviously right; the truth
// every backend and every CP run is compared against. Also the low-precision baseline: the same
// loops done in the run's dtype, which sets the "within 2x" tolerance of compare.h.
//
// All tensors are host, BSHD, row-major, contiguous:
//   q, dout, out, dq   [batch, seqlen_q, num_heads_q, head_dim]
//   k, v, dk, dv       [batch, seqlen_k, num_heads_kv, head_dim]
//   lse, delta         [batch, num_heads_q, seqlen_q]  (natural log)
//   segment ids, pos   [batch, seqlen_q] / [batch, seqlen_k]
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ringpack/attention.h"
#include "ringpack/dtype.h"
#include "ringpack/mask.h"

namespace ringpack {

struct ReferenceProblem {
  AttentionDims dims;
  MaskSpec mask;
  double scale = 0.0;                      // already resolved (resolve_scale)
  const double* q = nullptr;               // [b, sq, hq, d]
  const double* k = nullptr;               // [b, sk, hkv, d]
  const double* v = nullptr;               // [b, sk, hkv, d]
  const int32_t* segment_ids_q = nullptr;  // [b, sq]
  const int32_t* positions_q = nullptr;    // [b, sq]
  const int32_t* segment_ids_k = nullptr;  // [b, sk]
  const int32_t* positions_k = nullptr;    // [b, sk]
};

struct ReferenceForward {
  std::vector<double> out;  // [b, sq, hq, d]; 0 for rows with no visible key
  std::vector<double> lse;  // [b, hq, sq];    -inf for rows with no visible key
};

struct ReferenceGrads {
  std::vector<double> dq;  // [b, sq, hq, d]
  std::vector<double> dk;  // [b, sk, hkv, d]
  std::vector<double> dv;  // [b, sk, hkv, d]
};

// Equations (2)-(4) of docs/design.md §2 in fp64.
ReferenceForward reference_forward(const ReferenceProblem& problem);

// The gradients of docs/design.md §2 from the forward's out and lse (delta = <dO, O> per row).
ReferenceGrads reference_backward(const ReferenceProblem& problem, const double* dout,
                                  const ReferenceForward& forward);

// The same gradients from given per-row statistics: P = exp(s - lse), dS = P * (<dO, V> - delta).
// With the final lse and delta of a whole row this gives one CP step's contribution when the
// problem holds only that step's keys. lse, delta: [b, hq, sq]; rows with lse = -inf are skipped.
ReferenceGrads reference_backward_from_stats(const ReferenceProblem& problem, const double* dout,
                                             const double* lse, const double* delta);

// The low-precision baseline: the reference's loops with inputs already rounded to `dtype`, fp32
// accumulation, P rounded to dtype before P*V, out rounded to dtype, lse kept in fp32.
ReferenceForward lowprec_forward(const ReferenceProblem& problem, DType dtype);

// Its backward: forward recomputed as above, delta = <dO, round(O)> in fp32, P and dS rounded to
// dtype before the products dV += P^T dO, dQ += scale dS K, dK += scale dS^T Q (fp32 sums),
// dq, dk, dv rounded to dtype. dout is assumed already rounded.
ReferenceGrads lowprec_backward(const ReferenceProblem& problem, const double* dout, DType dtype);

// `count` elements of a buffer of `dtype`, widened to double.
std::vector<double> to_double(const void* data, DType dtype, size_t count);

}  // namespace ringpack

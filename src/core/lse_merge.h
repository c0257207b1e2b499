// Merging partial attention results over disjoint key sets, in fp32 (docs/design.md §4).
//
// If (o_1, lse_1) is the attention of one query row over key set K1 and (o_2, lse_2) over a
// disjoint key set K2, then over K1 ∪ K2, with Z_i = exp(lse_i) the softmax normaliser of K_i:
//
//   lse = log(Z_1 + Z_2)                         = logaddexp(lse_1, lse_2)
//   o   = (Z_1 * o_1 + Z_2 * o_2) / (Z_1 + Z_2)  = o_1 * exp(lse_1 - lse) + o_2 * exp(lse_2 - lse)
//
// A side with no visible key has lse = -inf and o = 0; its weight exp(-inf - lse) is 0. When both
// sides are -inf the merged row stays (o = 0, lse = -inf): both weights are forced to 0 instead of
// evaluating exp(-inf - (-inf)) = exp(NaN).
//
// Host and device code share this header.
#pragma once

#include <cmath>

#include "ringpack/mask.h"

namespace ringpack {

// log(exp(a) + exp(b)) = max + log1p(exp(min - max)), which never overflows. -inf with -inf
// gives -inf (never NaN).
RINGPACK_HOST_DEVICE float logaddexp(float a, float b) {
  const float hi = a > b ? a : b;
  const float lo = a > b ? b : a;
  if (hi == -INFINITY) return -INFINITY;
  return hi + log1pf(expf(lo - hi));
}

// The weights of one merge: lse_new = logaddexp(lse_acc, lse_s),
// weight_acc = exp(lse_acc - lse_new), weight_s = exp(lse_s - lse_new).
struct LseMergeWeights {
  float lse;
  float weight_acc;
  float weight_s;
};

RINGPACK_HOST_DEVICE LseMergeWeights lse_merge_weights(float lse_acc, float lse_s) {
  const float lse_new = logaddexp(lse_acc, lse_s);
  if (lse_new == -INFINITY) return LseMergeWeights{-INFINITY, 0.0f, 0.0f};
  return LseMergeWeights{lse_new, expf(lse_acc - lse_new), expf(lse_s - lse_new)};
}

// Merges one row (o_s, lse_s) into the running row (o_acc, lse_acc) in place.
//   o_acc, o_s: [head_dim]; lse_acc: one value.
RINGPACK_HOST_DEVICE void lse_merge_row(float* o_acc, float* lse_acc, const float* o_s, float lse_s,
                                        int head_dim) {
  const LseMergeWeights w = lse_merge_weights(*lse_acc, lse_s);
  for (int d = 0; d < head_dim; ++d) {
    // A -inf side holds o = 0 by contract; multiplying by its weight 0 keeps it 0.
    o_acc[d] = o_acc[d] * w.weight_acc + o_s[d] * w.weight_s;
  }
  *lse_acc = w.lse;
}

}  // namespace ringpack

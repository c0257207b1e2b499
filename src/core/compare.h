// Comparing a result with the fp64 reference: the one place tolerances live (docs/design.md §7).
//
// rel_err = ||got - ref|| / ||ref|| and max_abs_err = max |got - ref| over entries where both are
// finite. Entries where both sides are the same infinity (the lse of a row with no visible key is
// -inf on both sides) count as equal; entries where exactly one side is non-finite are
// masked_mismatches and fail the comparison, and never reach the figures (no NaN).
//
// Tolerances (kToleranceTable in compare.cpp):
//   fp32       rel_err     <= 1e-5 (+ 2 * baseline rel_err when a baseline is given)
//   bf16/fp16  rel_err     <= 2 * baseline rel_err     + 1e-5
//              max_abs_err <= 2 * baseline max_abs_err + 1e-5
// where the baseline is the reference's own computation in the dtype (lowprec_forward /
// lowprec_backward on the same rounded inputs), held against the same fp64 reference. An all-zero
// reference is held to max_abs_err <= 1e-5 instead: no relative figure means anything there.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ringpack/dtype.h"
#include "ringpack/tensor_error.h"

namespace ringpack {

// Error of `got` against `ref` (fp64 reference on the same rounded inputs); `baseline` is the
// low-precision reference's result (required for bf16/fp16, optional for fp32). shape = BSHD dims
// or [b, h, s] for lse, with one name per axis, used to name the worst element:
// "row b, token t, head h, dim d: expected x, got y".
TensorError compare_tensor(const std::string& name, const std::vector<double>& got,
                           const std::vector<double>& ref, const std::vector<double>* baseline,
                           DType dtype, const std::vector<int64_t>& shape,
                           const std::vector<std::string>& axis_names);

// Axis names of the two layouts compare_tensor sees.
const std::vector<std::string>& bshd_axis_names();  // {"row", "token", "head", "dim"}
const std::vector<std::string>& lse_axis_names();   // {"row", "head", "token"}

}  // namespace ringpack

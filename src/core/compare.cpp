// Error figures and tolerances of a tensor against the fp64 reference (compare.h).
#include "core/compare.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "core/parallel_for.h"
#include "ringpack/error.h"

namespace ringpack {
namespace {

// One row per dtype. A result passes when it has no masked mismatch and
//   rel_err     <= baseline_factor * baseline rel_err     + rel_floor   (baseline term if given)
//   max_abs_err <= baseline_factor * baseline max_abs_err + abs_floor   (when needs_baseline)
// fp32 is held to a fixed relative error (1e-5: fp32 accumulation over long rows stays well
// below it); bf16/fp16 to twice the error of the reference's own computation in the dtype, with
// a floor at fp32 noise so that a baseline that happens to be exact does not demand exactness.
struct ToleranceRule {
  DType dtype;
  double rel_floor;
  double baseline_factor;
  double abs_floor;
  bool needs_baseline;  // and checks max_abs_err against it
};

constexpr ToleranceRule kToleranceTable[] = {
    // dtype        rel_floor  factor  abs_floor  needs_baseline
    {DType::kF32, 1e-5, 2.0, 0.0, false},
    {DType::kBF16, 1e-5, 2.0, 1e-5, true},
    {DType::kF16, 1e-5, 2.0, 1e-5, true},
};

// When the reference is exactly zero everywhere (every gradient of a row of one-token documents,
// or a window of 0) no relative figure means anything, and the dtype baseline may be exactly zero
// too by luck of summation order. Such a tensor passes when every element is within fp32 noise of
// zero for unit-scale inputs.
constexpr double kZeroReferenceAbsTolerance = 1e-5;

const ToleranceRule& tolerance_rule(DType dtype) {
  for (const ToleranceRule& rule : kToleranceTable) {
    if (rule.dtype == dtype) return rule;
  }
  RINGPACK_FAIL("no tolerance for dtype ", dtype_name(dtype));
}

struct ErrorFigures {
  double rel_err = 0.0;
  double max_abs_err = 0.0;
  int64_t mismatches = 0;
  size_t worst_index = 0;  // the first mismatch if any, else where max_abs_err occurs
  bool has_worst = false;
  bool zero_reference = false;  // every finite reference entry is 0
};

// The sums of error_figures over elements [begin, end).
struct PartialFigures {
  double diff_sq = 0.0, ref_sq = 0.0, got_sq = 0.0, max_abs_err = 0.0;
  int64_t mismatches = 0;
  size_t worst_index = 0;  // the first mismatch if any, else the first place of max_abs_err
  bool has_worst = false;
};

PartialFigures partial_figures(const double* got, const double* ref, size_t begin, size_t end) {
  PartialFigures f;
  for (size_t i = begin; i < end; ++i) {
    const double g = got[i], r = ref[i];
    if (!std::isfinite(g) || !std::isfinite(r)) {
      if (g == r) continue;  // the same infinity on both sides (NaN never equals)
      if (f.mismatches == 0) f.worst_index = i;
      ++f.mismatches;
      f.has_worst = true;
      continue;
    }
    const double diff = std::fabs(g - r);
    f.diff_sq += diff * diff;
    f.ref_sq += r * r;
    f.got_sq += g * g;
    if (f.mismatches == 0 && (!f.has_worst || diff > f.max_abs_err)) {
      f.worst_index = i;
      f.has_worst = true;
    }
    f.max_abs_err = std::max(f.max_abs_err, diff);
  }
  return f;
}

// Elements per block of error_figures: blocks are summed on several threads and combined in
// block order, so the figures do not depend on the number of threads.
constexpr size_t kFigureBlock = size_t(1) << 20;

ErrorFigures error_figures(const std::vector<double>& got, const std::vector<double>& ref) {
  std::vector<PartialFigures> parts((ref.size() + kFigureBlock - 1) / kFigureBlock);
  parallel_for_blocks(ref.size(), kFigureBlock, [&](size_t begin, size_t end, uint64_t block) {
    parts[block] = partial_figures(got.data(), ref.data(), begin, end);
  });
  PartialFigures all;
  for (const PartialFigures& part : parts) {
    all.diff_sq += part.diff_sq;
    all.ref_sq += part.ref_sq;
    all.got_sq += part.got_sq;
    if (part.has_worst) {
      // A mismatch anywhere wins over every finite difference; the first one over later ones.
      const bool take =
          !all.has_worst ||
          (all.mismatches == 0 && (part.mismatches > 0 || part.max_abs_err > all.max_abs_err));
      if (take) all.worst_index = part.worst_index;
      all.has_worst = true;
    }
    all.mismatches += part.mismatches;
    all.max_abs_err = std::max(all.max_abs_err, part.max_abs_err);
  }
  ErrorFigures f;
  f.max_abs_err = all.max_abs_err;
  f.mismatches = all.mismatches;
  f.worst_index = all.worst_index;
  f.has_worst = all.has_worst;
  // With ||ref|| == 0 the relative error is meaningless; ||got|| is the error then.
  f.rel_err =
      all.ref_sq > 0.0 ? std::sqrt(all.diff_sq) / std::sqrt(all.ref_sq) : std::sqrt(all.got_sq);
  f.zero_reference = all.ref_sq == 0.0;
  return f;
}

// "row 0, token 5, head 1, dim 3: expected 0.25, got 0.3"
std::string describe(size_t index, const std::vector<int64_t>& shape,
                     const std::vector<std::string>& axis_names, double expected, double got) {
  std::vector<int64_t> coords(shape.size());
  size_t rest = index;
  for (size_t a = shape.size(); a-- > 0;) {
    coords[a] = int64_t(rest % size_t(shape[a]));
    rest /= size_t(shape[a]);
  }
  std::ostringstream out;
  out.precision(9);
  for (size_t a = 0; a < shape.size(); ++a) {
    out << (a ? ", " : "") << axis_names[a] << " " << coords[a];
  }
  out << ": expected " << expected << ", got " << got;
  return out.str();
}

}  // namespace

const std::vector<std::string>& bshd_axis_names() {
  static const std::vector<std::string> names{"row", "token", "head", "dim"};
  return names;
}

const std::vector<std::string>& lse_axis_names() {
  static const std::vector<std::string> names{"row", "head", "token"};
  return names;
}

TensorError compare_tensor(const std::string& name, const std::vector<double>& got,
                           const std::vector<double>& ref, const std::vector<double>* baseline,
                           DType dtype, const std::vector<int64_t>& shape,
                           const std::vector<std::string>& axis_names) {
  RINGPACK_CHECK(got.size() == ref.size(), "compare ", name, ": result has ", got.size(),
                 " elements but the reference has ", ref.size());
  RINGPACK_CHECK(shape.size() == axis_names.size(), "compare ", name, ": ", shape.size(),
                 " axes but ", axis_names.size(), " axis names");
  int64_t elements = 1;
  for (const int64_t extent : shape) {
    RINGPACK_CHECK(extent >= 0, "compare ", name, ": negative extent ", extent, " in the shape");
    elements *= extent;
  }
  RINGPACK_CHECK(size_t(elements) == ref.size(), "compare ", name, ": shape holds ", elements,
                 " elements but the tensors have ", ref.size());
  const ToleranceRule& rule = tolerance_rule(dtype);
  RINGPACK_CHECK(baseline != nullptr || !rule.needs_baseline, "compare ", name, ": ",
                 dtype_name(dtype),
                 " needs the low-precision baseline (lowprec_forward/lowprec_backward)");
  RINGPACK_CHECK(baseline == nullptr || baseline->size() == ref.size(), "compare ", name,
                 ": baseline has ", baseline ? baseline->size() : 0,
                 " elements but the reference has ", ref.size());

  const ErrorFigures figures = error_figures(got, ref);
  TensorError error;
  error.name = name;
  error.rel_err = figures.rel_err;
  error.max_abs_err = figures.max_abs_err;
  error.masked_mismatches = figures.mismatches;
  if (figures.has_worst) {
    error.worst = describe(figures.worst_index, shape, axis_names, ref[figures.worst_index],
                           got[figures.worst_index]);
  }

  double max_abs_tolerance = std::numeric_limits<double>::infinity();
  error.tolerance = rule.rel_floor;
  if (baseline != nullptr) {
    const ErrorFigures base = error_figures(*baseline, ref);
    error.baseline_rel_err = base.rel_err;
    error.tolerance = rule.baseline_factor * base.rel_err + rule.rel_floor;
    if (rule.needs_baseline) {
      max_abs_tolerance = rule.baseline_factor * base.max_abs_err + rule.abs_floor;
    }
  }
  if (figures.zero_reference) {
    error.tolerance = kZeroReferenceAbsTolerance;
    error.passed = error.masked_mismatches == 0 && error.max_abs_err <= error.tolerance;
    return error;
  }
  error.passed = error.masked_mismatches == 0 && error.rel_err <= error.tolerance &&
                 error.max_abs_err <= max_abs_tolerance;
  return error;
}

}  // namespace ringpack

// compare_tensor (src/core/compare.h): -inf rows count as equal, one-sided -inf / NaN entries
// are masked mismatches that fail and never leak NaN into the figures, the worst element is
// named by its coordinates, and the per-dtype tolerance rules.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/compare.h"
#include "ringpack/error.h"

namespace ringpack {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(Compare, MinusInfOnBothSidesCountsAsEqual) {
  const std::vector<double> ref{1.0, -kInf, 2.0, -kInf};
  const TensorError e =
      compare_tensor("lse", ref, ref, nullptr, DType::kF32, {1, 1, 4}, lse_axis_names());
  EXPECT_TRUE(e.passed);
  EXPECT_EQ(e.rel_err, 0.0);
  EXPECT_EQ(e.max_abs_err, 0.0);
  EXPECT_EQ(e.masked_mismatches, 0);
}

TEST(Compare, OneSidedInfAndNaNAreMismatchesAndNeverNaNInTheFigures) {
  const std::vector<double> ref{1.0, -kInf, 2.0, 3.0, 4.0};
  const std::vector<double> got{1.0, 0.5, -kInf, kNaN, 4.0};
  const TensorError e =
      compare_tensor("lse", got, ref, nullptr, DType::kF32, {1, 1, 5}, lse_axis_names());
  EXPECT_FALSE(e.passed);
  EXPECT_EQ(e.masked_mismatches, 3);
  EXPECT_TRUE(std::isfinite(e.rel_err));
  EXPECT_TRUE(std::isfinite(e.max_abs_err));
  EXPECT_EQ(e.rel_err, 0.0);  // the finite entries agree
  // The first mismatch is named.
  EXPECT_EQ(e.worst, "row 0, head 0, token 1: expected -inf, got 0.5");
}

// The figures are summed in blocks of 2^20 elements on several threads: across blocks the worst
// element is still the first mismatch when there is one, else the first largest difference.
TEST(Compare, WorstElementAcrossSummationBlocks) {
  constexpr size_t kCount = (size_t(1) << 21) + 5;  // three blocks, the last one short
  const std::vector<int64_t> shape{1, int64_t(kCount), 1, 1};
  std::vector<double> ref(kCount, 1.0), got(kCount, 1.0);
  got[100] = 1.25;           // block 0
  got[(1 << 20) + 7] = 1.5;  // block 1: the largest difference
  got[(1 << 21) + 2] = 1.5;  // block 2: as large, later
  TensorError e = compare_tensor("out", got, ref, nullptr, DType::kF32, shape, bshd_axis_names());
  EXPECT_DOUBLE_EQ(e.max_abs_err, 0.5);
  EXPECT_EQ(e.worst, "row 0, token 1048583, head 0, dim 0: expected 1, got 1.5");
  // rel_err = sqrt(0.25^2 + 0.5^2 + 0.5^2) / sqrt(kCount), whatever the order of the sums.
  EXPECT_NEAR(e.rel_err, std::sqrt(0.5625 / double(kCount)), 1e-15);
  got[(1 << 21) + 4] = kNaN;  // a mismatch in the last block outranks every difference
  e = compare_tensor("out", got, ref, nullptr, DType::kF32, shape, bshd_axis_names());
  EXPECT_EQ(e.masked_mismatches, 1);
  EXPECT_EQ(e.worst, "row 0, token 2097156, head 0, dim 0: expected 1, got nan");
}

TEST(Compare, NaNOnBothSidesIsStillAMismatch) {
  const std::vector<double> nan{kNaN};
  const TensorError e =
      compare_tensor("out", nan, nan, nullptr, DType::kF32, {1, 1, 1, 1}, bshd_axis_names());
  EXPECT_FALSE(e.passed);
  EXPECT_EQ(e.masked_mismatches, 1);
}

TEST(Compare, NamesTheWorstElementByItsCoordinates) {
  // shape [2, 3, 2, 2]: flat index 17 = row 1, token 1, head 0, dim 1.
  std::vector<double> ref(24, 1.0), got(24, 1.0);
  got[5] = 1.001;
  got[17] = 0.5;
  const TensorError e =
      compare_tensor("out", got, ref, nullptr, DType::kF32, {2, 3, 2, 2}, bshd_axis_names());
  EXPECT_FALSE(e.passed);
  EXPECT_DOUBLE_EQ(e.max_abs_err, 0.5);
  EXPECT_EQ(e.worst, "row 1, token 1, head 0, dim 1: expected 1, got 0.5");
}

TEST(Compare, RelativeErrorIsTheNormOfTheDifference) {
  const std::vector<double> ref{3.0, 4.0}, got{3.0, 4.0 + 5e-6};
  const TensorError e =
      compare_tensor("out", got, ref, nullptr, DType::kF32, {1, 2, 1, 1}, bshd_axis_names());
  EXPECT_NEAR(e.rel_err, 1e-6, 1e-15);  // 5e-6 / 5
  EXPECT_TRUE(e.passed);
  const std::vector<double> far{3.0, 4.0 + 1e-4};
  EXPECT_FALSE(
      compare_tensor("out", far, ref, nullptr, DType::kF32, {1, 2, 1, 1}, bshd_axis_names())
          .passed);
}

TEST(Compare, ZeroReferenceUsesTheNormOfTheResult) {
  const std::vector<double> ref{0.0, 0.0}, got{0.0, 1e-3};
  const TensorError e =
      compare_tensor("dq", got, ref, nullptr, DType::kF32, {1, 1, 1, 2}, bshd_axis_names());
  EXPECT_DOUBLE_EQ(e.rel_err, 1e-3);
  EXPECT_FALSE(e.passed);
}

TEST(Compare, ZeroReferenceIsHeldToAnAbsoluteTolerance) {
  // Exact-zero gradients (one-token documents): fp32 noise passes, a real error does not, in
  // every dtype, even when the dtype baseline happens to be exactly zero as well.
  const std::vector<double> ref(4, 0.0);
  const std::vector<double> noise{1.5e-6, -2e-6, 0.0, 1e-6};
  const std::vector<double> wrong{1.5e-6, -2e-3, 0.0, 1e-6};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    EXPECT_TRUE(
        compare_tensor("dq", noise, ref, &ref, dtype, {1, 1, 1, 4}, bshd_axis_names()).passed);
    EXPECT_FALSE(
        compare_tensor("dq", wrong, ref, &ref, dtype, {1, 1, 1, 4}, bshd_axis_names()).passed);
  }
}

TEST(Compare, LowPrecisionIsHeldToTwiceTheBaseline) {
  const std::vector<double> ref{1.0, 2.0, 3.0, 4.0};
  const std::vector<double> baseline{1.0, 2.01, 3.0, 4.0};  // max abs 0.01
  const std::vector<int64_t> shape{1, 4, 1, 1};
  const std::vector<double> within{1.0, 2.0, 3.019, 4.0};
  const std::vector<double> beyond{1.0, 2.0, 3.03, 4.0};
  const TensorError ok =
      compare_tensor("out", within, ref, &baseline, DType::kBF16, shape, bshd_axis_names());
  EXPECT_TRUE(ok.passed) << ok.rel_err << " " << ok.tolerance;
  EXPECT_NEAR(ok.baseline_rel_err, 0.01 / std::sqrt(30.0), 1e-12);
  EXPECT_NEAR(ok.tolerance, 2 * ok.baseline_rel_err + 1e-5, 1e-12);
  EXPECT_FALSE(
      compare_tensor("out", beyond, ref, &baseline, DType::kF16, shape, bshd_axis_names()).passed);
  // A low-precision comparison without its baseline is a usage error.
  EXPECT_THROW(compare_tensor("out", within, ref, nullptr, DType::kBF16, shape, bshd_axis_names()),
               Error);
}

TEST(Compare, RejectsMismatchedSizes) {
  const std::vector<double> a{1.0, 2.0}, b{1.0};
  EXPECT_THROW(compare_tensor("out", a, b, nullptr, DType::kF32, {1, 1, 1, 1}, bshd_axis_names()),
               Error);
  EXPECT_THROW(compare_tensor("out", a, a, nullptr, DType::kF32, {1, 1, 1, 1}, bshd_axis_names()),
               Error);
}

}  // namespace
}  // namespace ringpack

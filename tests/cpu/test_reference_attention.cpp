// The fp64 reference attention: hand-computed small cases (equations (2)-(4) of docs/design.md §2
// evaluated in the test), padding rows, gradients against central finite differences of
// L = sum(dO * O), and the low-precision baseline.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <utility>
#include <vector>

#include "core/random.h"
#include "cpu/reference_attention.h"
#include "ringpack/error.h"
#include "support/adversarial_layouts.h"

namespace ringpack {
namespace {

using testing::batch_from_lengths;
using testing::seed_from_test_name;

constexpr double kTight = 1e-12;  // fp64 agreement of two evaluations of the same formula

// A self-attention problem over one packed batch: the problem points into this struct.
struct SelfProblem {
  PackedBatch layout;
  std::vector<double> q, k, v;
  ReferenceProblem problem;

  SelfProblem(PackedBatch batch, int num_heads_q, int num_heads_kv, int head_dim, MaskSpec mask,
              double scale, std::vector<double> q_in, std::vector<double> k_in,
              std::vector<double> v_in)
      : layout(std::move(batch)), q(std::move(q_in)), k(std::move(k_in)), v(std::move(v_in)) {
    problem.dims = {layout.batch, layout.seq_len, layout.seq_len,
                    num_heads_q,  num_heads_kv,   head_dim};
    problem.mask = mask;
    problem.scale = scale;
    point();
  }
  SelfProblem(const SelfProblem& other)
      : layout(other.layout), q(other.q), k(other.k), v(other.v), problem(other.problem) {
    point();
  }
  void point() {
    problem.q = q.data();
    problem.k = k.data();
    problem.v = v.data();
    problem.segment_ids_q = problem.segment_ids_k = layout.segment_ids.data();
    problem.positions_q = problem.positions_k = layout.positions.data();
  }
};

// random_normal (core/random.h) widened to fp64.
std::vector<double> normal_values(size_t count, uint64_t seed) {
  const std::vector<float> values = random_normal(count, seed);
  return std::vector<double>(values.begin(), values.end());
}

SelfProblem random_problem(const PackedBatch& layout, int num_heads_q, int num_heads_kv,
                           int head_dim, MaskSpec mask, uint64_t seed) {
  const size_t tokens = size_t(layout.batch) * layout.seq_len;
  std::vector<double> q = normal_values(tokens * num_heads_q * head_dim, seed * 4 + 1);
  std::vector<double> k = normal_values(tokens * num_heads_kv * head_dim, seed * 4 + 2);
  std::vector<double> v = normal_values(tokens * num_heads_kv * head_dim, seed * 4 + 3);
  return SelfProblem(layout, num_heads_q, num_heads_kv, head_dim, mask,
                     1.0 / std::sqrt(double(head_dim)), q, k, v);
}

// One doc of 2 tokens, d = 2, scale 1, causal. Token 0 sees key 0; token 1 sees keys 0 and 1:
//   s10 = <q1, k0> = 0, s11 = <q1, k1> = 1, lse1 = log(1 + e), O1 = (v0 + e v1) / (1 + e).
TEST(ReferenceAttention, TwoTokenCausalDocumentByHand) {
  const SelfProblem p(batch_from_lengths({{2}}, 2), 1, 1, 2, MaskSpec{true, -1}, 1.0, {1, 0, 0, 1},
                      {1, 0, 1, 1}, {1, 2, 3, 4});
  const ReferenceForward f = reference_forward(p.problem);
  const double e = std::exp(1.0);
  EXPECT_NEAR(f.lse[0], 1.0, kTight);
  EXPECT_NEAR(f.out[0], 1.0, kTight);
  EXPECT_NEAR(f.out[1], 2.0, kTight);
  EXPECT_NEAR(f.lse[1], std::log(1.0 + e), kTight);
  EXPECT_NEAR(f.out[2], (1.0 + e * 3.0) / (1.0 + e), kTight);
  EXPECT_NEAR(f.out[3], (2.0 + e * 4.0) / (1.0 + e), kTight);
}

// Non-causal, 3 tokens, d = 1, scale 0.5: every token sees every key; s_ij = 0.5 q_i k_j.
TEST(ReferenceAttention, ThreeTokenNonCausalByHand) {
  const std::vector<double> q{1, -1, 2}, k{0.5, 1, -2}, v{1, 10, 100};
  const SelfProblem p(batch_from_lengths({{3}}, 3), 1, 1, 1, MaskSpec{false, -1}, 0.5, q, k, v);
  const ReferenceForward f = reference_forward(p.problem);
  for (int i = 0; i < 3; ++i) {
    double z = 0, o = 0;
    for (int j = 0; j < 3; ++j) {
      z += std::exp(0.5 * q[i] * k[j]);
      o += std::exp(0.5 * q[i] * k[j]) * v[j];
    }
    EXPECT_NEAR(f.lse[i], std::log(z), kTight) << i;
    EXPECT_NEAR(f.out[i], o / z, kTight) << i;
  }
}

// Window 1 (causal): token 2 sees keys 1 and 2 only, token 0 only itself.
TEST(ReferenceAttention, SlidingWindowByHand) {
  const std::vector<double> q{1, 2, 3}, k{1, 1, 1}, v{5, 7, 11};
  const SelfProblem p(batch_from_lengths({{3}}, 3), 1, 1, 1, MaskSpec{true, 1}, 1.0, q, k, v);
  const ReferenceForward f = reference_forward(p.problem);
  EXPECT_NEAR(f.out[0], 5.0, kTight);
  EXPECT_NEAR(f.lse[0], 1.0, kTight);
  // keys 1, 2 have equal scores 3: O = (7 + 11) / 2, lse = 3 + log 2.
  EXPECT_NEAR(f.out[2], 9.0, kTight);
  EXPECT_NEAR(f.lse[2], 3.0 + std::log(2.0), kTight);
}

// Segments [1, 1, 0, 2], GQA 2:1, d = 1, scale 1. Token 3 (its own document) sees only itself;
// the padding token 2 has O = 0, lse = -inf; q head 1 uses kv head 0.
TEST(ReferenceAttention, SegmentsPaddingAndGqaByHand) {
  const std::vector<double> q{1, 2, 3, 4, 5, 6, 7, 8};  // [1, 4 tokens, 2 heads, 1]
  const std::vector<double> k{1, -1, 9, 0.5}, v{2, 4, 8, 16};
  const SelfProblem p(batch_from_lengths({{2, 0, 1}}, 4), 2, 1, 1, MaskSpec{true, -1}, 1.0, q, k,
                      v);
  const ReferenceForward f = reference_forward(p.problem);
  auto lse = [&](int h, int t) { return f.lse[size_t(h) * 4 + t]; };
  auto out = [&](int t, int h) { return f.out[size_t(t) * 2 + h]; };
  for (int h = 0; h < 2; ++h) {
    EXPECT_EQ(lse(h, 2), -INFINITY);
    EXPECT_EQ(out(2, h), 0.0);
    EXPECT_NEAR(out(3, h), 16.0, kTight);
    EXPECT_NEAR(lse(h, 3), q[3 * 2 + h] * 0.5, kTight);
    // token 1: keys 0 and 1 with scores q, -q.
    const double s0 = q[2 + h] * 1.0, s1 = q[2 + h] * -1.0;
    EXPECT_NEAR(lse(h, 1), std::log(std::exp(s0) + std::exp(s1)), kTight);
    EXPECT_NEAR(out(1, h), (std::exp(s0) * 2 + std::exp(s1) * 4) / (std::exp(s0) + std::exp(s1)),
                kTight);
  }
}

TEST(ReferenceAttention, PaddingRowsGetZeroOutputMinusInfLseAndZeroGradient) {
  const PackedBatch layout = batch_from_lengths({{}, {3, 0, 0, 2}}, 7);  // row 0 all padding
  const SelfProblem p = random_problem(layout, 2, 1, 3, MaskSpec{true, -1}, seed_from_test_name());
  const ReferenceForward f = reference_forward(p.problem);
  const std::vector<double> dout = normal_values(f.out.size(), seed_from_test_name());
  const ReferenceGrads g = reference_backward(p.problem, dout.data(), f);
  for (int b = 0; b < 2; ++b) {
    for (int t = 0; t < 7; ++t) {
      if (layout.segment_id(b, t) != 0) continue;
      for (int h = 0; h < 2; ++h) {
        EXPECT_EQ(f.lse[(size_t(b) * 2 + h) * 7 + t], -INFINITY) << b << " " << t;
        for (int e = 0; e < 3; ++e) {
          EXPECT_EQ(f.out[((size_t(b) * 7 + t) * 2 + h) * 3 + e], 0.0);
          EXPECT_EQ(g.dq[((size_t(b) * 7 + t) * 2 + h) * 3 + e], 0.0);
        }
      }
      for (int e = 0; e < 3; ++e) {  // one kv head
        EXPECT_EQ(g.dk[(size_t(b) * 7 + t) * 3 + e], 0.0);
        EXPECT_EQ(g.dv[(size_t(b) * 7 + t) * 3 + e], 0.0);
      }
    }
  }
}

// L = sum(dO * O); its gradient w.r.t. every input element against central differences.
void expect_gradients_match_finite_differences(const SelfProblem& base, const std::string& label) {
  const ReferenceForward f = reference_forward(base.problem);
  const std::vector<double> dout = normal_values(f.out.size(), seed_from_test_name());
  const ReferenceGrads g = reference_backward(base.problem, dout.data(), f);
  auto loss = [&](const SelfProblem& p) {
    const ReferenceForward fp = reference_forward(p.problem);
    double l = 0;
    for (size_t i = 0; i < fp.out.size(); ++i) l += dout[i] * fp.out[i];
    return l;
  };
  constexpr double kStep = 1e-5;       // central difference step
  constexpr double kTolerance = 1e-7;  // O(step^2) truncation plus cancellation
  auto check = [&](std::vector<double> SelfProblem::*tensor, const std::vector<double>& grad,
                   const char* name) {
    for (size_t i = 0; i < grad.size(); ++i) {
      SelfProblem plus = base, minus = base;
      (plus.*tensor)[i] += kStep;
      (minus.*tensor)[i] -= kStep;
      const double numeric = (loss(plus) - loss(minus)) / (2 * kStep);
      EXPECT_NEAR(grad[i], numeric, kTolerance) << label << " " << name << "[" << i << "]";
    }
  };
  check(&SelfProblem::q, g.dq, "dq");
  check(&SelfProblem::k, g.dk, "dk");
  check(&SelfProblem::v, g.dv, "dv");
}

TEST(ReferenceAttention, GradientsMatchFiniteDifferences) {
  // Two rows: two segments with interior padding; one segment and tail padding.
  const PackedBatch layout = batch_from_lengths({{3, 0, 2}, {4}}, 6);
  struct Case {
    const char* name;
    MaskSpec mask;
    int num_heads_q, num_heads_kv;
  };
  const Case cases[] = {{"causal", {true, -1}, 1, 1},
                        {"non_causal", {false, -1}, 2, 2},
                        {"window", {true, 1}, 2, 1},
                        {"gqa_4_to_1", {true, -1}, 4, 1},
                        {"non_causal_window", {false, 1}, 2, 1}};
  for (const Case& c : cases) {
    const SelfProblem p =
        random_problem(layout, c.num_heads_q, c.num_heads_kv, 3, c.mask, seed_from_test_name());
    expect_gradients_match_finite_differences(p, c.name);
  }
}

TEST(ReferenceAttention, BackwardFromStatsEqualsBackward) {
  const SelfProblem p = random_problem(batch_from_lengths({{4, 0, 3}}, 8), 2, 1, 4,
                                       MaskSpec{true, -1}, seed_from_test_name());
  const ReferenceForward f = reference_forward(p.problem);
  const std::vector<double> dout = normal_values(f.out.size(), seed_from_test_name());
  std::vector<double> delta(f.lse.size(), 0.0);  // [1, 2, 8]
  for (int t = 0; t < 8; ++t) {
    for (int h = 0; h < 2; ++h) {
      for (int e = 0; e < 4; ++e) {
        const size_t i = (size_t(t) * 2 + h) * 4 + e;
        delta[size_t(h) * 8 + t] += dout[i] * f.out[i];
      }
    }
  }
  const ReferenceGrads a = reference_backward(p.problem, dout.data(), f);
  const ReferenceGrads b =
      reference_backward_from_stats(p.problem, dout.data(), f.lse.data(), delta.data());
  for (size_t i = 0; i < a.dq.size(); ++i) EXPECT_NEAR(a.dq[i], b.dq[i], kTight);
  for (size_t i = 0; i < a.dk.size(); ++i) EXPECT_NEAR(a.dk[i], b.dk[i], kTight);
  for (size_t i = 0; i < a.dv.size(); ++i) EXPECT_NEAR(a.dv[i], b.dv[i], kTight);
}

double relative_error(const std::vector<double>& got, const std::vector<double>& ref) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(ref[i])) continue;
    diff += (got[i] - ref[i]) * (got[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return std::sqrt(diff / norm);
}

TEST(ReferenceAttention, LowPrecisionBaselineRoundsToTheDtype) {
  const SelfProblem p = random_problem(batch_from_lengths({{20, 0, 11}}, 32), 2, 1, 8,
                                       MaskSpec{true, -1}, seed_from_test_name());
  const ReferenceForward ref = reference_forward(p.problem);
  const std::vector<double> dout = normal_values(ref.out.size(), seed_from_test_name());
  const ReferenceGrads ref_grads = reference_backward(p.problem, dout.data(), ref);

  // fp32: plain fp32 arithmetic, close to fp64.
  const ReferenceForward f32 = lowprec_forward(p.problem, DType::kF32);
  EXPECT_LT(relative_error(f32.out, ref.out), 1e-6);
  EXPECT_LT(relative_error(f32.lse, ref.lse), 1e-6);

  // bf16: outputs are bf16 values, with an error of bf16 size (8 mantissa bits).
  const ReferenceForward bf16 = lowprec_forward(p.problem, DType::kBF16);
  const ReferenceGrads bf16_grads = lowprec_backward(p.problem, dout.data(), DType::kBF16);
  for (const double x : bf16.out) EXPECT_EQ(double(round_to(DType::kBF16, float(x))), x);
  for (const double x : bf16_grads.dq) EXPECT_EQ(double(round_to(DType::kBF16, float(x))), x);
  constexpr double kBf16Epsilon = 1.0 / 256;
  for (const auto& [got, expected] :
       {std::pair{&bf16.out, &ref.out}, std::pair{&bf16_grads.dq, &ref_grads.dq},
        std::pair{&bf16_grads.dk, &ref_grads.dk}, std::pair{&bf16_grads.dv, &ref_grads.dv}}) {
    const double rel = relative_error(*got, *expected);
    EXPECT_GT(rel, 0.0);
    EXPECT_LT(rel, 4 * kBf16Epsilon);
  }
  for (size_t i = 0; i < ref.lse.size(); ++i) {  // lse stays fp32, -inf rows stay -inf
    if (std::isinf(ref.lse[i])) {
      EXPECT_EQ(bf16.lse[i], ref.lse[i]);
    } else {
      EXPECT_NEAR(bf16.lse[i], ref.lse[i], 1e-5 * std::fabs(ref.lse[i]) + 1e-5);
    }
  }
}

TEST(ReferenceAttention, ToDoubleWidensEveryDtype) {
  const float values[2] = {1.5f, -0.1f};
  EXPECT_EQ(to_double(values, DType::kF32, 2), (std::vector<double>{1.5, double(-0.1f)}));
  const uint16_t bf16[2] = {float_to_bf16(1.5f), float_to_bf16(-0.1f)};
  EXPECT_EQ(to_double(bf16, DType::kBF16, 2)[1], double(round_to(DType::kBF16, -0.1f)));
  const uint16_t fp16[2] = {float_to_fp16(1.5f), float_to_fp16(-0.1f)};
  EXPECT_EQ(to_double(fp16, DType::kF16, 2)[1], double(round_to(DType::kF16, -0.1f)));
}

TEST(ReferenceAttention, RejectsGqaRatioThatDoesNotDivide) {
  SelfProblem p = random_problem(batch_from_lengths({{4}}, 4), 3, 2, 2, MaskSpec{}, 1);
  EXPECT_THROW(reference_forward(p.problem), Error);
}

}  // namespace
}  // namespace ringpack

// The CPU backends ("cpu" blocked and "reference") against the fp64 reference attention: forward
// into fresh accumulators, then backward from the forward's lse and delta, compared with
// compare_tensor (fp32: rel <= 1e-5; bf16/fp16: within 2x of the low-precision baseline), over
// dtypes, GQA ratios, masks, batch > 1, lengths that are not tile multiples, permuted token
// orders and the named adversarial layouts. Also: the merge of two key halves through two
// forward() calls equals one call over all keys, and backward contributions of the halves add up.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/compare.h"
#include "core/random.h"
#include "cpu/blocked_backend.h"
#include "cpu/reference_attention.h"
#include "cpu/reference_backend.h"
#include "ringpack/attention.h"
#include "ringpack/error.h"
#include "ringpack/reorder.h"
#include "support/adversarial_layouts.h"

namespace ringpack {
namespace {

using testing::batch_from_lengths;
using testing::seed_from_test_name;

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();

// One self-attention problem: a packed batch and random Q, K, V, dO rounded to the dtype.
struct Problem {
  AttentionDims dims;
  DType dtype = DType::kF32;
  MaskSpec mask;
  PackedBatch layout;
  std::vector<std::byte> q, k, v, dout;  // raw dtype storage, BSHD

  AttentionStep step() const {
    AttentionStep s;
    s.dims = dims;
    s.dtype = dtype;
    s.mask = mask;
    s.q = q.data();
    s.k = k.data();
    s.v = v.data();
    s.segment_ids_q = s.segment_ids_k = layout.segment_ids.data();
    s.positions_q = s.positions_k = layout.positions.data();
    return s;
  }
  size_t q_count() const {
    return size_t(dims.batch) * dims.seqlen_q * dims.num_heads_q * dims.head_dim;
  }
  size_t kv_count() const {
    return size_t(dims.batch) * dims.seqlen_k * dims.num_heads_kv * dims.head_dim;
  }
  size_t stat_count() const { return size_t(dims.batch) * dims.num_heads_q * dims.seqlen_q; }
};

Problem make_problem(const PackedBatch& layout, int num_heads_q, int num_heads_kv, int head_dim,
                     DType dtype, MaskSpec mask, uint64_t seed) {
  Problem p;
  p.dims = {layout.batch, layout.seq_len, layout.seq_len, num_heads_q, num_heads_kv, head_dim};
  p.dtype = dtype;
  p.mask = mask;
  p.layout = layout;
  p.q = to_dtype_bytes(random_normal(p.q_count(), seed * 4 + 1), dtype);
  p.k = to_dtype_bytes(random_normal(p.kv_count(), seed * 4 + 2), dtype);
  p.v = to_dtype_bytes(random_normal(p.kv_count(), seed * 4 + 3), dtype);
  p.dout = to_dtype_bytes(random_normal(p.q_count(), seed * 4 + 4), dtype);
  return p;
}

// Every tensor a backend produces for one problem, widened to double.
struct Results {
  std::vector<double> out, lse, dq, dk, dv;
};

// forward() into fresh accumulators (out = 0, lse = -inf), O cast to the dtype, delta from
// compute_delta, backward() into zeroed gradient accumulators.
Results run_backend(AttentionBackend& backend, const Problem& p) {
  const AttentionStep step = p.step();
  std::vector<float> out(p.q_count(), 0.0f), lse(p.stat_count(), kMinusInf);
  backend.forward(step, {out.data(), lse.data()});

  std::vector<uint8_t> out_cast(p.q_count() * dtype_size(p.dtype));
  std::vector<float> out_poison(p.q_count(), kPoison);
  backend.cast_from_f32(out_cast.data(), p.dtype, out_poison.data(), p.q_count());  // poison
  backend.cast_from_f32(out_cast.data(), p.dtype, out.data(), p.q_count());
  std::vector<float> delta(p.stat_count(), kPoison);
  backend.compute_delta(p.dout.data(), out_cast.data(), p.dtype, p.dims, delta.data());

  std::vector<float> dq(p.q_count(), 0.0f), dk(p.kv_count(), 0.0f), dv(p.kv_count(), 0.0f);
  backend.backward(step, {p.dout.data(), lse.data(), delta.data()},
                   {dq.data(), dk.data(), dv.data()});
  return {std::vector<double>(out.begin(), out.end()), std::vector<double>(lse.begin(), lse.end()),
          std::vector<double>(dq.begin(), dq.end()), std::vector<double>(dk.begin(), dk.end()),
          std::vector<double>(dv.begin(), dv.end())};
}

// The fp64 reference (and, for bf16/fp16, the low-precision baseline) of a problem.
struct Expected {
  std::vector<double> q, k, v, dout;
  ReferenceProblem problem;
  ReferenceForward forward, base_forward;
  ReferenceGrads grads, base_grads;
};

std::unique_ptr<Expected> reference_for(const Problem& p) {
  auto e = std::make_unique<Expected>();
  e->q = to_double(p.q.data(), p.dtype, p.q_count());
  e->k = to_double(p.k.data(), p.dtype, p.kv_count());
  e->v = to_double(p.v.data(), p.dtype, p.kv_count());
  e->dout = to_double(p.dout.data(), p.dtype, p.q_count());
  ReferenceProblem& r = e->problem;
  r.dims = p.dims;
  r.mask = p.mask;
  r.scale = resolve_scale(0.0f, p.dims.head_dim);
  r.q = e->q.data();
  r.k = e->k.data();
  r.v = e->v.data();
  r.segment_ids_q = r.segment_ids_k = p.layout.segment_ids.data();
  r.positions_q = r.positions_k = p.layout.positions.data();
  e->forward = reference_forward(r);
  e->grads = reference_backward(r, e->dout.data(), e->forward);
  if (p.dtype != DType::kF32) {
    e->base_forward = lowprec_forward(r, p.dtype);
    e->base_grads = lowprec_backward(r, e->dout.data(), p.dtype);
  }
  return e;
}

// Every tensor of `got` within compare_tensor's tolerance of the reference.
void expect_matches_reference(const Results& got, const Problem& p, const std::string& label) {
  const std::unique_ptr<Expected> e = reference_for(p);
  const bool low = p.dtype != DType::kF32;
  const AttentionDims& d = p.dims;
  const std::vector<int64_t> q_shape{d.batch, d.seqlen_q, d.num_heads_q, d.head_dim};
  const std::vector<int64_t> kv_shape{d.batch, d.seqlen_k, d.num_heads_kv, d.head_dim};
  const std::vector<int64_t> lse_shape{d.batch, d.num_heads_q, d.seqlen_q};
  const TensorError errors[] = {
      compare_tensor("out", got.out, e->forward.out, low ? &e->base_forward.out : nullptr, p.dtype,
                     q_shape, bshd_axis_names()),
      compare_tensor("lse", got.lse, e->forward.lse, low ? &e->base_forward.lse : nullptr,
                     DType::kF32, lse_shape, lse_axis_names()),
      compare_tensor("dq", got.dq, e->grads.dq, low ? &e->base_grads.dq : nullptr, p.dtype, q_shape,
                     bshd_axis_names()),
      compare_tensor("dk", got.dk, e->grads.dk, low ? &e->base_grads.dk : nullptr, p.dtype,
                     kv_shape, bshd_axis_names()),
      compare_tensor("dv", got.dv, e->grads.dv, low ? &e->base_grads.dv : nullptr, p.dtype,
                     kv_shape, bshd_axis_names()),
  };
  for (const TensorError& error : errors) {
    EXPECT_TRUE(error.passed) << label << " " << dtype_name(p.dtype) << " " << error.name
                              << ": rel_err " << error.rel_err << " > tolerance " << error.tolerance
                              << " (baseline " << error.baseline_rel_err << "), max_abs_err "
                              << error.max_abs_err << ", masked mismatches "
                              << error.masked_mismatches << ", worst: " << error.worst;
  }
}

std::unique_ptr<AttentionBackend> blocked(int num_threads = 2) {
  BackendOptions options;
  options.num_threads = num_threads;
  return make_blocked_backend(options);
}

MaskSpec causal() {
  return MaskSpec{true, -1};
}
MaskSpec non_causal() {
  return MaskSpec{false, -1};
}
MaskSpec window(int64_t w, bool is_causal = true) {
  return MaskSpec{is_causal, w};
}

// Two rows of different packings, 150 tokens (not a multiple of the 64-token tile): documents
// longer and shorter than a tile, interior and tail padding.
PackedBatch two_packed_rows() {
  return batch_from_lengths({{70, 3, 0, 0, 40, 1, 20}, {5, 90, 0, 30}}, 150);
}

TEST(BlockedBackend, Fp32MatchesReferenceForEveryMaskAndGqaRatio) {
  const PackedBatch layout = two_packed_rows();
  const MaskSpec masks[] = {causal(), non_causal(), window(9), window(12, false)};
  for (const MaskSpec& mask : masks) {
    for (const int num_heads_kv : {4, 2, 1}) {
      const Problem p = make_problem(layout, 4, num_heads_kv, 16, DType::kF32, mask,
                                     seed_from_test_name() + num_heads_kv);
      const auto backend = blocked();
      expect_matches_reference(run_backend(*backend, p), p,
                               "causal=" + std::to_string(mask.causal) +
                                   " window=" + std::to_string(mask.window) +
                                   " hkv=" + std::to_string(num_heads_kv));
    }
  }
}

TEST(BlockedBackend, Bf16AndFp16WithinTwiceTheLowPrecisionBaseline) {
  const PackedBatch layout = two_packed_rows();
  for (const DType dtype : {DType::kBF16, DType::kF16}) {
    for (const MaskSpec& mask : {causal(), non_causal(), window(17)}) {
      const Problem p = make_problem(layout, 4, 2, 32, dtype, mask, seed_from_test_name());
      const auto backend = blocked();
      expect_matches_reference(
          run_backend(*backend, p), p,
          "causal=" + std::to_string(mask.causal) + " window=" + std::to_string(mask.window));
    }
  }
}

TEST(BlockedBackend, OddHeadDimAndSingleTokenRows) {
  // head_dim 5 exercises the non-vector tails; 1-token rows and a 1-token batch row.
  const Problem p = make_problem(batch_from_lengths({{1}, {3, 0, 2}}, 7), 2, 1, 5, DType::kF32,
                                 causal(), seed_from_test_name());
  const auto backend = blocked();
  expect_matches_reference(run_backend(*backend, p), p, "tiny");
}

TEST(BlockedBackend, PermutedTokenOrdersMatchReference) {
  // Positions, not row indices, carry the mask: a striped or dual-chunk-swap order of the row is
  // a legal problem with the same answers per token.
  const PackedBatch layout = batch_from_lengths({{100, 0, 60, 32}}, 192);
  const ReorderSpec orders[] = {
      {ReorderKind::kStriped, 1}, {ReorderKind::kStriped, 4}, {ReorderKind::kDualChunkSwap, 1}};
  for (const ReorderSpec& order : orders) {
    const std::vector<int32_t> index = reorder_index(layout.seq_len, 4, order);
    PackedBatch permuted = layout;
    for (size_t i = 0; i < index.size(); ++i) {
      permuted.segment_ids[i] = layout.segment_ids[size_t(index[i])];
      permuted.positions[i] = layout.positions[size_t(index[i])];
    }
    for (const DType dtype : {DType::kF32, DType::kBF16}) {
      const Problem p = make_problem(permuted, 4, 2, 16, dtype, causal(), seed_from_test_name());
      const auto backend = blocked();
      expect_matches_reference(run_backend(*backend, p), p, reorder_label(order));
    }
  }
}

TEST(BlockedBackend, AdversarialLayoutsMatchReference) {
  std::vector<testing::NamedLayout> layouts = testing::adversarial_layouts(130, 4);
  // Tile-sized cases of the blocked loops (64-token tiles).
  layouts.push_back({"doc_shorter_than_tile", batch_from_lengths({{10, 50, 63, 7}}, 130)});
  layouts.push_back({"doc_longer_than_tile", batch_from_lengths({{65, 0, 64}}, 130)});
  for (const testing::NamedLayout& named : layouts) {
    for (const DType dtype : {DType::kF32, DType::kF16}) {
      const Problem p = make_problem(named.batch, 2, 1, 8, dtype, causal(), seed_from_test_name());
      const auto backend = blocked();
      expect_matches_reference(run_backend(*backend, p), p, named.name);
    }
  }
}

TEST(BlockedBackend, PaddingRowsGiveZeroOutputMinusInfLseAndZeroGradient) {
  const PackedBatch layout = batch_from_lengths({{}, {20, 0, 0, 10}}, 70);  // row 0 all padding
  const Problem p = make_problem(layout, 2, 2, 8, DType::kF32, causal(), seed_from_test_name());
  const auto backend = blocked();
  const Results r = run_backend(*backend, p);
  const int D = p.dims.head_dim, H = p.dims.num_heads_q;
  for (int b = 0; b < layout.batch; ++b) {
    for (int t = 0; t < layout.seq_len; ++t) {
      if (layout.segment_id(b, t) != 0) continue;
      for (int h = 0; h < H; ++h) {
        EXPECT_EQ(r.lse[(size_t(b) * H + h) * layout.seq_len + t], -INFINITY) << b << " " << t;
        for (int e = 0; e < D; ++e) {
          const size_t i = ((size_t(b) * layout.seq_len + t) * H + h) * D + e;
          EXPECT_EQ(r.out[i], 0.0) << b << " " << t;
          EXPECT_EQ(r.dq[i], 0.0) << b << " " << t;
          EXPECT_EQ(r.dk[i], 0.0) << b << " " << t;  // num_heads_kv == num_heads_q here
          EXPECT_EQ(r.dv[i], 0.0) << b << " " << t;
        }
      }
    }
  }
}

TEST(BlockedBackend, ResultDoesNotDependOnThreadCount) {
  const Problem p =
      make_problem(two_packed_rows(), 4, 2, 16, DType::kBF16, causal(), seed_from_test_name());
  const auto one = blocked(1);
  const auto three = blocked(3);
  const Results a = run_backend(*one, p);
  const Results b = run_backend(*three, p);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.lse, b.lse);
  EXPECT_EQ(a.dq, b.dq);
  EXPECT_EQ(a.dk, b.dk);
  EXPECT_EQ(a.dv, b.dv);
}

TEST(ReferenceBackend, MatchesReferenceAttention) {
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    const Problem p =
        make_problem(two_packed_rows(), 4, 2, 8, dtype, window(30), seed_from_test_name());
    const auto backend = make_reference_backend(BackendOptions{});
    EXPECT_EQ(backend->name(), "reference");
    expect_matches_reference(run_backend(*backend, p), p, "reference backend");
  }
}

// The first or second half of a problem's keys, [b, sk/2, hkv, d], with their ids and positions.
struct KeyHalf {
  std::vector<std::byte> k, v;
  std::vector<int32_t> segment_ids, positions;
};

KeyHalf key_half(const Problem& p, int half) {
  const int sk = p.dims.seqlen_k / 2;
  const size_t token_elems = size_t(p.dims.num_heads_kv) * p.dims.head_dim;
  const size_t token_bytes = token_elems * dtype_size(p.dtype);
  KeyHalf h;
  for (int b = 0; b < p.dims.batch; ++b) {
    const size_t first = size_t(b) * p.dims.seqlen_k + size_t(half) * sk;
    h.k.insert(h.k.end(), p.k.begin() + first * token_bytes,
               p.k.begin() + (first + sk) * token_bytes);
    h.v.insert(h.v.end(), p.v.begin() + first * token_bytes,
               p.v.begin() + (first + sk) * token_bytes);
    h.segment_ids.insert(h.segment_ids.end(), p.layout.segment_ids.begin() + first,
                         p.layout.segment_ids.begin() + first + sk);
    h.positions.insert(h.positions.end(), p.layout.positions.begin() + first,
                       p.layout.positions.begin() + first + sk);
  }
  return h;
}

AttentionStep half_step(const Problem& p, const KeyHalf& h) {
  AttentionStep s = p.step();
  s.dims.seqlen_k = p.dims.seqlen_k / 2;
  s.k = h.k.data();
  s.v = h.v.data();
  s.segment_ids_k = h.segment_ids.data();
  s.positions_k = h.positions.data();
  return s;
}

// Two steps over the two key halves (as a ring with cp = 2 runs them) against one step over all
// keys: forward merges through lse_merge.h; backward contributions of the halves add up.
void expect_halves_equal_whole(AttentionBackend& backend, const Problem& p) {
  const Results whole = run_backend(backend, p);
  const KeyHalf halves[] = {key_half(p, 1), key_half(p, 0)};  // the later keys first
  std::vector<float> out(p.q_count(), 0.0f), lse(p.stat_count(), kMinusInf);
  for (const KeyHalf& h : halves) backend.forward(half_step(p, h), {out.data(), lse.data()});

  std::vector<float> lse_whole(whole.lse.begin(), whole.lse.end());
  std::vector<uint8_t> out_cast(p.q_count() * dtype_size(p.dtype));
  std::vector<float> out_whole(whole.out.begin(), whole.out.end());
  backend.cast_from_f32(out_cast.data(), p.dtype, out_whole.data(), p.q_count());
  std::vector<float> delta(p.stat_count(), kPoison);
  backend.compute_delta(p.dout.data(), out_cast.data(), p.dtype, p.dims, delta.data());
  const size_t half_kv = p.kv_count() / 2;
  std::vector<float> dq(p.q_count(), 0.0f);
  std::vector<float> dk[2] = {std::vector<float>(half_kv, 0.0f), std::vector<float>(half_kv, 0.0f)};
  std::vector<float> dv[2] = {std::vector<float>(half_kv, 0.0f), std::vector<float>(half_kv, 0.0f)};
  for (int i = 0; i < 2; ++i) {
    backend.backward(half_step(p, halves[i]), {p.dout.data(), lse_whole.data(), delta.data()},
                     {dq.data(), dk[i].data(), dv[i].data()});
  }
  // Reassemble [b, sk, hkv, d] from the halves (halves[0] holds the second half of each row).
  const size_t row_half = half_kv / size_t(p.dims.batch);
  std::vector<double> dk_all, dv_all;
  for (int b = 0; b < p.dims.batch; ++b) {
    for (const int i : {1, 0}) {
      dk_all.insert(dk_all.end(), dk[i].begin() + b * row_half, dk[i].begin() + (b + 1) * row_half);
      dv_all.insert(dv_all.end(), dv[i].begin() + b * row_half, dv[i].begin() + (b + 1) * row_half);
    }
  }
  const AttentionDims& d = p.dims;
  const std::vector<int64_t> q_shape{d.batch, d.seqlen_q, d.num_heads_q, d.head_dim};
  const std::vector<int64_t> kv_shape{d.batch, d.seqlen_k, d.num_heads_kv, d.head_dim};
  const std::vector<int64_t> lse_shape{d.batch, d.num_heads_q, d.seqlen_q};
  const TensorError errors[] = {
      compare_tensor("out", std::vector<double>(out.begin(), out.end()), whole.out, nullptr,
                     DType::kF32, q_shape, bshd_axis_names()),
      compare_tensor("lse", std::vector<double>(lse.begin(), lse.end()), whole.lse, nullptr,
                     DType::kF32, lse_shape, lse_axis_names()),
      compare_tensor("dq", std::vector<double>(dq.begin(), dq.end()), whole.dq, nullptr,
                     DType::kF32, q_shape, bshd_axis_names()),
      compare_tensor("dk", dk_all, whole.dk, nullptr, DType::kF32, kv_shape, bshd_axis_names()),
      compare_tensor("dv", dv_all, whole.dv, nullptr, DType::kF32, kv_shape, bshd_axis_names()),
  };
  for (const TensorError& error : errors) {
    EXPECT_TRUE(error.passed) << backend.name() << " " << error.name << ": rel_err "
                              << error.rel_err << ", masked mismatches " << error.masked_mismatches
                              << ", worst: " << error.worst;
  }
}

TEST(BlockedBackend, TwoKeyHalvesMergeToTheWholeRow) {
  // Row 0: documents that straddle the halves; row 1: a document only in the first half, so the
  // later half gives its rows lse = -inf (the -inf merge path).
  const PackedBatch layout = batch_from_lengths({{30, 60, 10, 0, 30}, {40, 0, 0}}, 130);
  for (const MaskSpec& mask : {causal(), non_causal()}) {
    const Problem p = make_problem(layout, 4, 2, 16, DType::kBF16, mask, seed_from_test_name());
    const auto backend = blocked();
    expect_halves_equal_whole(*backend, p);
  }
}

TEST(ReferenceBackend, TwoKeyHalvesMergeToTheWholeRow) {
  const PackedBatch layout = batch_from_lengths({{30, 60, 10, 0, 30}, {40, 0, 0}}, 130);
  const Problem p = make_problem(layout, 2, 1, 8, DType::kF32, causal(), seed_from_test_name());
  const auto backend = make_reference_backend(BackendOptions{});
  expect_halves_equal_whole(*backend, p);
}

TEST(BlockedBackend, BackwardAddsToTheAccumulators) {
  const Problem p =
      make_problem(two_packed_rows(), 2, 1, 8, DType::kF32, causal(), seed_from_test_name());
  const auto backend = blocked();
  const Results fresh = run_backend(*backend, p);
  std::vector<float> lse(fresh.lse.begin(), fresh.lse.end());
  std::vector<float> out(fresh.out.begin(), fresh.out.end());
  std::vector<float> delta(p.stat_count(), kPoison);
  backend->compute_delta(p.dout.data(), out.data(), p.dtype, p.dims, delta.data());
  constexpr float kStart = 0.5f;
  std::vector<float> dq(p.q_count(), kStart), dk(p.kv_count(), kStart), dv(p.kv_count(), kStart);
  backend->backward(p.step(), {p.dout.data(), lse.data(), delta.data()},
                    {dq.data(), dk.data(), dv.data()});
  for (size_t i = 0; i < dq.size(); ++i) ASSERT_EQ(dq[i], kStart + float(fresh.dq[i])) << i;
  for (size_t i = 0; i < dk.size(); ++i) ASSERT_EQ(dk[i], kStart + float(fresh.dk[i])) << i;
  for (size_t i = 0; i < dv.size(); ++i) ASSERT_EQ(dv[i], kStart + float(fresh.dv[i])) << i;
}

TEST(BlockedBackend, HostHelpers) {
  const auto backend = blocked();
  EXPECT_EQ(backend->name(), "cpu");
  EXPECT_EQ(backend->memory_space(), MemorySpace::kHost);
  void* ptr = backend->allocate(100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(ptr) % 64, 0u);
  float* data = static_cast<float*>(ptr);
  backend->fill(data, 25, 1.5f);
  for (int i = 0; i < 25; ++i) EXPECT_EQ(data[i], 1.5f);
  const float values[3] = {1.0f, 1.0f / 3.0f, -2.5f};
  uint16_t bf16[3];
  backend->cast_from_f32(bf16, DType::kBF16, values, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(bf16_to_float(bf16[i]), round_to(DType::kBF16, values[i]));
  backend->deallocate(ptr);
}

TEST(BlockedBackend, RejectsGqaRatioThatDoesNotDivide) {
  Problem p = make_problem(two_packed_rows(), 3, 2, 8, DType::kF32, causal(), 1);
  std::vector<float> out(p.q_count(), 0.0f), lse(p.stat_count(), kMinusInf);
  const auto backend = blocked();
  EXPECT_THROW(backend->forward(p.step(), {out.data(), lse.data()}), Error);
}

}  // namespace
}  // namespace ringpack

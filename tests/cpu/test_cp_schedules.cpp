// The ring and all_gather CP schedules (src/cp/) on the in-process communicator: every rank's
// O, LSE, dQ, dK, dV match one whole-row step of the same backend (docs/design.md §4); step
// skipping leaves results unchanged; bytes sent; strategy names; validation errors release the
// other ranks.
//
// The backend here is a test double: naive loops over host memory (fp64 sums, fp32 storage),
// independent of src/cpu, so these tests check the schedules only. Shards are contiguous slices
// of the row (reorder "contiguous"); other reorders are tested at the job level.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/random.h"
#include "cp/kv_pack.h"
#include "cpu/host_backend.h"
#include "ringpack/attention.h"
#include "ringpack/comm.h"
#include "ringpack/cp.h"
#include "ringpack/error.h"

namespace ringpack {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kTolerance = 1e-5f;  // fp32 schedule vs one whole-row step, relative to 1 + |x|

// ---- a naive host backend ---------------------------------------------------------------------

// Host memory and the element-wise helpers come from HostBackend; attention is naive fp64 loops.
class NaiveHostBackend : public HostBackend {
 public:
  ~NaiveHostBackend() override { EXPECT_EQ(live_allocations_, 0) << "leaked backend buffers"; }

  std::string name() const override { return "naive_host"; }
  void check_supported(DType dtype, int head_dim, bool /*backward*/) const override {
    RINGPACK_CHECK(dtype == DType::kF32, "naive_host runs fp32 only, got ", dtype_name(dtype));
  }

  // Rule (1)-(4) of docs/design.md §2 for this block, merged into the running accumulators.
  void forward(const AttentionStep& step, const ForwardAccumulators& acc) override {
    const AttentionDims& d = step.dims;
    const double scale = resolve_scale(step.scale, d.head_dim);
    const int group = d.num_heads_q / d.num_heads_kv;
    std::vector<double> scores(size_t(d.seqlen_k));
    for (int b = 0; b < d.batch; ++b) {
      for (int h = 0; h < d.num_heads_q; ++h) {
        for (int i = 0; i < d.seqlen_q; ++i) {
          double max_score = -std::numeric_limits<double>::infinity();
          for (int j = 0; j < d.seqlen_k; ++j) {
            scores[size_t(j)] = -std::numeric_limits<double>::infinity();
            if (!sees(step, b, i, j)) continue;
            scores[size_t(j)] = scale * dot(q_row(step, b, i, h),
                                            kv_row(step, step.k, b, j, h / group), d.head_dim);
            max_score = std::max(max_score, scores[size_t(j)]);
          }
          if (std::isinf(max_score)) continue;  // nothing visible: the accumulators stay
          double sum = 0.0;
          for (int j = 0; j < d.seqlen_k; ++j) sum += std::exp(scores[size_t(j)] - max_score);
          const double lse_step = max_score + std::log(sum);
          float& lse =
              acc.lse[(size_t(b) * size_t(d.num_heads_q) + size_t(h)) * size_t(d.seqlen_q) +
                      size_t(i)];
          const double lse_new = std::isinf(lse)
                                     ? lse_step
                                     : std::max(double(lse), lse_step) +
                                           std::log1p(std::exp(-std::fabs(lse - lse_step)));
          const double keep = std::exp(double(lse) - lse_new);
          float* out = acc.out + index_q(d, b, i, h);
          for (int c = 0; c < d.head_dim; ++c) {
            double o_step = 0.0;
            for (int j = 0; j < d.seqlen_k; ++j) {
              o_step +=
                  std::exp(scores[size_t(j)] - lse_step) * kv_row(step, step.v, b, j, h / group)[c];
            }
            out[c] = float(out[c] * keep + o_step * std::exp(lse_step - lse_new));
          }
          lse = float(lse_new);
        }
      }
    }
  }

  void backward(const AttentionStep& step, const BackwardInputs& in,
                const BackwardAccumulators& acc) override {
    const AttentionDims& d = step.dims;
    const double scale = resolve_scale(step.scale, d.head_dim);
    const int group = d.num_heads_q / d.num_heads_kv;
    for (int b = 0; b < d.batch; ++b) {
      for (int h = 0; h < d.num_heads_q; ++h) {
        for (int i = 0; i < d.seqlen_q; ++i) {
          const size_t stat =
              (size_t(b) * size_t(d.num_heads_q) + size_t(h)) * size_t(d.seqlen_q) + size_t(i);
          if (std::isinf(in.lse[stat])) continue;  // a query with no visible key
          const float* q = q_row(step, b, i, h);
          const float* dout = static_cast<const float*>(in.dout) + index_q(d, b, i, h);
          for (int j = 0; j < d.seqlen_k; ++j) {
            if (!sees(step, b, i, j)) continue;
            const float* k = kv_row(step, step.k, b, j, h / group);
            const float* v = kv_row(step, step.v, b, j, h / group);
            const double p = std::exp(scale * dot(q, k, d.head_dim) - in.lse[stat]);
            const double ds = p * (dot(dout, v, d.head_dim) - in.delta[stat]);
            float* dq = acc.dq + index_q(d, b, i, h);
            float* dk = acc.dk + index_kv(d, b, j, h / group);
            float* dv = acc.dv + index_kv(d, b, j, h / group);
            for (int c = 0; c < d.head_dim; ++c) {
              dq[c] += float(scale * ds * k[c]);
              dk[c] += float(scale * ds * q[c]);
              dv[c] += float(p * dout[c]);
            }
          }
        }
      }
    }
  }

  void* allocate(size_t bytes) override {
    ++live_allocations_;
    return HostBackend::allocate(bytes);
  }
  void deallocate(void* ptr) override {
    --live_allocations_;
    HostBackend::deallocate(ptr);
  }
  void compute_delta(const void* dout, const void* out, DType dtype, const AttentionDims& d,
                     float* delta) override {
    for (int b = 0; b < d.batch; ++b) {
      for (int h = 0; h < d.num_heads_q; ++h) {
        for (int i = 0; i < d.seqlen_q; ++i) {
          double sum = 0.0;
          for (int c = 0; c < d.head_dim; ++c) {
            const size_t e = index_q(d, b, i, h) + size_t(c);
            sum += double(load_element(dout, dtype, e)) * load_element(out, dtype, e);
          }
          delta[(size_t(b) * size_t(d.num_heads_q) + size_t(h)) * size_t(d.seqlen_q) + size_t(i)] =
              float(sum);
        }
      }
    }
  }

 private:
  static size_t index_q(const AttentionDims& d, int b, int i, int h) {
    return ((size_t(b) * size_t(d.seqlen_q) + size_t(i)) * size_t(d.num_heads_q) + size_t(h)) *
           size_t(d.head_dim);
  }
  static size_t index_kv(const AttentionDims& d, int b, int j, int h) {
    return ((size_t(b) * size_t(d.seqlen_k) + size_t(j)) * size_t(d.num_heads_kv) + size_t(h)) *
           size_t(d.head_dim);
  }
  static const float* q_row(const AttentionStep& step, int b, int i, int h) {
    return static_cast<const float*>(step.q) + index_q(step.dims, b, i, h);
  }
  static const float* kv_row(const AttentionStep& step, const void* data, int b, int j, int h) {
    return static_cast<const float*>(data) + index_kv(step.dims, b, j, h);
  }
  static bool sees(const AttentionStep& step, int b, int i, int j) {
    const size_t qi = size_t(b) * size_t(step.dims.seqlen_q) + size_t(i);
    const size_t kj = size_t(b) * size_t(step.dims.seqlen_k) + size_t(j);
    return visible(step.segment_ids_q[qi], step.positions_q[qi], step.segment_ids_k[kj],
                   step.positions_k[kj], step.mask);
  }
  static double dot(const float* a, const float* b, int n) {
    double sum = 0.0;
    for (int c = 0; c < n; ++c) sum += double(a[c]) * double(b[c]);
    return sum;
  }

  int live_allocations_ = 0;
};

// ---- problems and runs ------------------------------------------------------------------------

// One batch of whole rows: Q, K, V, dO, segment ids and positions (fp32, BSHD).
struct Problem {
  AttentionDims dims;  // seqlen_q = seqlen_k = S, the whole row
  MaskSpec mask;
  std::vector<float> q, k, v, dout;
  std::vector<int32_t> segment_ids, positions;  // [batch, S]
};

struct Results {
  std::vector<float> out, lse, dq, dk, dv;  // whole rows; lse [batch, heads_q, S]
};

constexpr int kBatch = 2;
constexpr int kSeqLen = 24;  // divisible by every cp in 1..4
constexpr int kHeadsQ = 4;
constexpr int kHeadsKv = 2;  // GQA: two query heads per kv head
constexpr int kHeadDim = 8;

uint32_t test_seed() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return uint32_t(
      std::hash<std::string>{}(std::string(info->test_suite_name()) + "." + info->name()));
}

// Rows from document lengths per row (segment id 0 = padding, given as a negative length).
Problem make_problem(const std::vector<std::vector<int>>& docs_per_row) {
  Problem p;
  p.dims = AttentionDims{int(docs_per_row.size()), kSeqLen, kSeqLen, kHeadsQ, kHeadsKv, kHeadDim};
  for (const auto& docs : docs_per_row) {
    int segment = 0;
    for (int length : docs) {
      const bool padding = length < 0;
      if (!padding) ++segment;
      for (int t = 0; t < std::abs(length); ++t) {
        p.segment_ids.push_back(padding ? 0 : segment);
        p.positions.push_back(padding ? 0 : t);
      }
    }
  }
  EXPECT_EQ(p.segment_ids.size(), size_t(p.dims.batch) * kSeqLen) << "rows must fill S tokens";
  const uint64_t seed = uint64_t(test_seed()) * 4;
  const size_t tokens = size_t(p.dims.batch) * kSeqLen;
  p.q = random_uniform(tokens * kHeadsQ * kHeadDim, seed + 1);
  p.k = random_uniform(tokens * kHeadsKv * kHeadDim, seed + 2);
  p.v = random_uniform(tokens * kHeadsKv * kHeadDim, seed + 3);
  p.dout = random_uniform(tokens * kHeadsQ * kHeadDim, seed + 4);
  return p;
}

// Packed rows with a 1-token document, interior and tail padding, and documents that cross
// shard borders for every cp in 1..4.
Problem packed_problem() {
  return make_problem({{5, 1, 10, 3, -5}, {2, -2, 13, 4, -3}});
}

// One step over the whole row: the single-device result the schedules must reproduce.
Results run_whole_row(const Problem& p) {
  NaiveHostBackend backend;
  const AttentionDims& d = p.dims;
  AttentionStep step{d,
                     DType::kF32,
                     p.mask,
                     0.0f,
                     p.q.data(),
                     p.k.data(),
                     p.v.data(),
                     p.segment_ids.data(),
                     p.positions.data(),
                     p.segment_ids.data(),
                     p.positions.data()};
  Results r;
  r.out.assign(p.q.size(), 0.0f);
  r.lse.assign(size_t(d.batch) * kHeadsQ * kSeqLen, kNegInf);
  backend.forward(step, ForwardAccumulators{r.out.data(), r.lse.data()});
  std::vector<float> delta(r.lse.size());
  backend.compute_delta(p.dout.data(), r.out.data(), DType::kF32, d, delta.data());
  r.dq.assign(p.q.size(), 0.0f);
  r.dk.assign(p.k.size(), 0.0f);
  r.dv.assign(p.v.size(), 0.0f);
  backend.backward(step, BackwardInputs{p.dout.data(), r.lse.data(), delta.data()},
                   BackwardAccumulators{r.dq.data(), r.dk.data(), r.dv.data()});
  return r;
}

// Tokens [r*n, (r+1)*n) of each row of a [batch, S, width] tensor, and back.
template <class T>
std::vector<T> shard_of(const std::vector<T>& row, int batch, int width, int r, int n) {
  std::vector<T> shard;
  for (int b = 0; b < batch; ++b) {
    const auto begin = row.begin() + (ptrdiff_t(b) * kSeqLen + ptrdiff_t(r) * n) * width;
    shard.insert(shard.end(), begin, begin + ptrdiff_t(n) * width);
  }
  return shard;
}
void place_shard(std::vector<float>& row, const std::vector<float>& shard, int batch, int width,
                 int r, int n) {
  for (int b = 0; b < batch; ++b) {
    std::copy_n(shard.begin() + ptrdiff_t(b) * n * width, size_t(n) * size_t(width),
                row.begin() + (ptrdiff_t(b) * kSeqLen + ptrdiff_t(r) * n) * width);
  }
}

// step_visible[src] for rank r's queries, by brute force over rule (1).
std::vector<bool> brute_force_step_visible(const Problem& p, int cp, int r) {
  const int n = kSeqLen / cp;
  std::vector<bool> result(size_t(cp), false);
  for (int src = 0; src < cp; ++src) {
    for (int b = 0; b < p.dims.batch; ++b) {
      for (int i = r * n; i < (r + 1) * n; ++i) {
        for (int j = src * n; j < (src + 1) * n; ++j) {
          const size_t qi = size_t(b) * kSeqLen + size_t(i);
          const size_t kj = size_t(b) * kSeqLen + size_t(j);
          if (visible(p.segment_ids[qi], p.positions[qi], p.segment_ids[kj], p.positions[kj],
                      p.mask)) {
            result[size_t(src)] = true;
          }
        }
      }
    }
  }
  return result;
}

struct CpRun {
  Results results;
  std::vector<ScheduleStats> forward_stats;   // per rank
  std::vector<ScheduleStats> backward_stats;  // per rank
};

// Runs cp_forward then cp_backward on `cp` in-process ranks and assembles whole rows.
CpRun run_cp(const Problem& p, Strategy strategy, int cp, bool use_step_visible) {
  const int batch = p.dims.batch;
  const int n = kSeqLen / cp;
  const float poison = std::numeric_limits<float>::quiet_NaN();
  CpRun run;
  run.results =
      Results{std::vector<float>(p.q.size(), poison),
              std::vector<float>(size_t(batch) * kHeadsQ * kSeqLen, poison),
              std::vector<float>(p.q.size(), poison), std::vector<float>(p.k.size(), poison),
              std::vector<float>(p.v.size(), poison)};
  run.forward_stats.resize(size_t(cp));
  run.backward_stats.resize(size_t(cp));
  run_in_process(cp, [&](Communicator& comm) {
    const int r = comm.rank();
    NaiveHostBackend backend;
    const auto q = shard_of(p.q, batch, kHeadsQ * kHeadDim, r, n);
    const auto k = shard_of(p.k, batch, kHeadsKv * kHeadDim, r, n);
    const auto v = shard_of(p.v, batch, kHeadsKv * kHeadDim, r, n);
    const auto dout = shard_of(p.dout, batch, kHeadsQ * kHeadDim, r, n);
    const auto segment_ids = shard_of(p.segment_ids, batch, 1, r, n);
    const auto positions = shard_of(p.positions, batch, 1, r, n);
    ShardInputs in;
    in.dims = AttentionDims{batch, n, n, kHeadsQ, kHeadsKv, kHeadDim};
    in.mask = p.mask;
    in.q = q.data();
    in.k = k.data();
    in.v = v.data();
    in.segment_ids = segment_ids.data();
    in.positions = positions.data();
    if (use_step_visible) in.step_visible = brute_force_step_visible(p, cp, r);

    std::vector<float> out(q.size(), poison), lse(size_t(batch) * kHeadsQ * size_t(n), poison);
    cp_forward(strategy, in, backend, comm, ForwardOutputs{out.data(), lse.data()},
               run.forward_stats[size_t(r)]);
    std::vector<float> dq(q.size(), poison), dk(k.size(), poison), dv(v.size(), poison);
    cp_backward(strategy, in, out.data(), lse.data(), dout.data(), backend, comm,
                BackwardOutputs{dq.data(), dk.data(), dv.data()}, run.backward_stats[size_t(r)]);

    place_shard(run.results.out, out, batch, kHeadsQ * kHeadDim, r, n);
    place_shard(run.results.dq, dq, batch, kHeadsQ * kHeadDim, r, n);
    place_shard(run.results.dk, dk, batch, kHeadsKv * kHeadDim, r, n);
    place_shard(run.results.dv, dv, batch, kHeadsKv * kHeadDim, r, n);
    // lse is [batch, heads_q, n] per shard: the same slicing with batch * heads_q "rows".
    place_shard(run.results.lse, lse, batch * kHeadsQ, 1, r, n);
  });
  return run;
}

// Counts elements outside |got - expected| <= tolerance * (1 + |expected|) (both -inf is equal)
// and reports the first few.
void expect_close(const std::vector<float>& got, const std::vector<float>& expected,
                  const std::string& what, float tolerance = kTolerance) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  constexpr int kReported = 5;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool both_neg_inf = got[i] == kNegInf && expected[i] == kNegInf;
    if (both_neg_inf ||
        std::fabs(got[i] - expected[i]) <= tolerance * (1.0f + std::fabs(expected[i])))
      continue;
    if (bad++ < kReported) {
      ADD_FAILURE() << what << "[" << i << "]: expected " << expected[i] << ", got " << got[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements differ";
}

void expect_results_close(const Results& got, const Results& expected, const std::string& what,
                          float tolerance = kTolerance) {
  expect_close(got.out, expected.out, what + " O", tolerance);
  expect_close(got.lse, expected.lse, what + " LSE", tolerance);
  expect_close(got.dq, expected.dq, what + " dQ", tolerance);
  expect_close(got.dk, expected.dk, what + " dK", tolerance);
  expect_close(got.dv, expected.dv, what + " dV", tolerance);
}

// ---- tests ------------------------------------------------------------------------------------

constexpr Strategy kStrategies[] = {Strategy::kRing, Strategy::kAllGather};
constexpr int kCps[] = {1, 2, 3, 4};

TEST(CpSchedules, PackedRowsMatchWholeRowForEveryStrategyAndCp) {
  const Problem p = packed_problem();
  const Results expected = run_whole_row(p);
  for (Strategy strategy : kStrategies) {
    for (int cp : kCps) {
      const std::string what = std::string(strategy_name(strategy)) + " cp=" + std::to_string(cp);
      const CpRun run = run_cp(p, strategy, cp, /*use_step_visible=*/false);
      // cp = 1 runs the same single step as the whole-row call: bit-identical.
      expect_results_close(run.results, expected, what, cp == 1 ? 0.0f : kTolerance);
      const int steps = strategy == Strategy::kRing ? cp : 1;
      for (int r = 0; r < cp; ++r) {
        EXPECT_EQ(run.forward_stats[size_t(r)].steps_computed, steps) << what << " rank " << r;
        EXPECT_EQ(run.backward_stats[size_t(r)].steps_computed, steps) << what << " rank " << r;
        EXPECT_GE(run.forward_stats[size_t(r)].total_seconds,
                  run.forward_stats[size_t(r)].compute_seconds);
      }
    }
  }
}

TEST(CpSchedules, RingSkipsInvisibleStepsWithUnchangedResults) {
  // Four 6-token documents: with cp = 4 each rank sees only its own block; with cp = 2 the
  // shards hold whole documents too. cp = 3 splits documents across shards.
  const Problem p = make_problem({{6, 6, 6, 6}, {6, 6, 6, -6}});
  const Results expected = run_whole_row(p);
  for (int cp : kCps) {
    const std::string what = "ring cp=" + std::to_string(cp);
    const CpRun dense = run_cp(p, Strategy::kRing, cp, /*use_step_visible=*/false);
    const CpRun skipping = run_cp(p, Strategy::kRing, cp, /*use_step_visible=*/true);
    expect_results_close(skipping.results, expected, what);
    expect_results_close(skipping.results, dense.results, what + " vs no skipping", 0.0f);
    for (int r = 0; r < cp; ++r) {
      const std::vector<bool> step_visible = brute_force_step_visible(p, cp, r);
      const int invisible = int(std::count(step_visible.begin(), step_visible.end(), false));
      for (const auto* stats :
           {&skipping.forward_stats[size_t(r)], &skipping.backward_stats[size_t(r)]}) {
        EXPECT_EQ(stats->steps_skipped, invisible) << what << " rank " << r;
        EXPECT_EQ(stats->steps_computed, cp - invisible) << what << " rank " << r;
      }
    }
    if (cp == 4) {
      EXPECT_EQ(skipping.forward_stats[0].steps_skipped, cp - 1) << "doc-aligned shards";
    }
  }
}

TEST(CpSchedules, AllGatherIgnoresStepVisibleForCorrectness) {
  const Problem p = packed_problem();
  const Results expected = run_whole_row(p);
  for (int cp : kCps) {
    const CpRun run = run_cp(p, Strategy::kAllGather, cp, /*use_step_visible=*/true);
    expect_results_close(run.results, expected, "all_gather cp=" + std::to_string(cp));
  }
}

TEST(CpSchedules, BytesSentArePacksAndAccumulators) {
  const Problem p = packed_problem();
  for (int cp : kCps) {
    const int n = kSeqLen / cp;
    const AttentionDims shard{p.dims.batch, n, n, kHeadsQ, kHeadsKv, kHeadDim};
    const KvPackLayout layout = make_kv_pack_layout(shard, DType::kF32);
    const size_t raw_pack = size_t(p.dims.batch) * size_t(n) *
                            (2 * kHeadsKv * kHeadDim * sizeof(float) + 2 * sizeof(int32_t));
    EXPECT_GE(layout.total_bytes, raw_pack);
    EXPECT_LT(layout.total_bytes, raw_pack + 4 * kKvPackAlignment);
    const uint64_t pack = layout.total_bytes;
    // dK and dV accumulators of one shard, fp32.
    const uint64_t dkv =
        2 * uint64_t(p.dims.batch) * uint64_t(n) * kHeadsKv * kHeadDim * sizeof(float);

    const CpRun ring = run_cp(p, Strategy::kRing, cp, false);
    const CpRun gather = run_cp(p, Strategy::kAllGather, cp, false);
    for (int r = 0; r < cp; ++r) {
      const std::string what = "cp=" + std::to_string(cp) + " rank " + std::to_string(r);
      EXPECT_EQ(ring.forward_stats[size_t(r)].bytes_sent, uint64_t(cp - 1) * pack) << what;
      EXPECT_EQ(ring.backward_stats[size_t(r)].bytes_sent,
                uint64_t(cp - 1) * pack + (cp > 1 ? uint64_t(cp) * dkv : 0))
          << what;
      EXPECT_EQ(gather.forward_stats[size_t(r)].bytes_sent, uint64_t(cp - 1) * pack) << what;
      // Backward gathers again, then sends each other owner its dK/dV part.
      EXPECT_EQ(gather.backward_stats[size_t(r)].bytes_sent, uint64_t(cp - 1) * (pack + dkv))
          << what;
    }
  }
}

TEST(CpSchedules, StrategyNamesRoundTripAndUnknownNamesListTheChoices) {
  for (Strategy strategy : kStrategies) {
    EXPECT_EQ(parse_strategy(strategy_name(strategy)), strategy);
  }
  EXPECT_STREQ(strategy_name(Strategy::kRing), "ring");
  EXPECT_STREQ(strategy_name(Strategy::kAllGather), "all_gather");
  try {
    parse_strategy("ulysses");
    FAIL() << "expected an error for an unknown strategy";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("ulysses"), std::string::npos) << message;
    EXPECT_NE(message.find("ring"), std::string::npos) << message;
    EXPECT_NE(message.find("all_gather"), std::string::npos) << message;
  }
}

TEST(CpSchedules, InvalidShardOnOneRankFailsTheRunWithoutHanging) {
  // Rank 1 passes a step_visible of the wrong size: it throws before communicating, the other
  // ranks block in the ring and are released; the run rethrows rank 1's error.
  constexpr int kCp = 3;
  const Problem p = packed_problem();
  const int n = kSeqLen / kCp;
  try {
    run_in_process(kCp, [&](Communicator& comm) {
      NaiveHostBackend backend;
      const auto q = shard_of(p.q, p.dims.batch, kHeadsQ * kHeadDim, comm.rank(), n);
      const auto k = shard_of(p.k, p.dims.batch, kHeadsKv * kHeadDim, comm.rank(), n);
      const auto segment_ids = shard_of(p.segment_ids, p.dims.batch, 1, comm.rank(), n);
      const auto positions = shard_of(p.positions, p.dims.batch, 1, comm.rank(), n);
      ShardInputs in;
      in.dims = AttentionDims{p.dims.batch, n, n, kHeadsQ, kHeadsKv, kHeadDim};
      in.q = q.data();
      in.k = k.data();
      in.v = k.data();
      in.segment_ids = segment_ids.data();
      in.positions = positions.data();
      if (comm.rank() == 1) in.step_visible.assign(kCp + 1, true);
      std::vector<float> out(q.size()), lse(size_t(p.dims.batch) * kHeadsQ * size_t(n));
      ScheduleStats stats;
      cp_forward(Strategy::kRing, in, backend, comm, ForwardOutputs{out.data(), lse.data()}, stats);
    });
    FAIL() << "expected rank 1's validation error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("step_visible has 4 entries for cp = 3"),
              std::string::npos)
        << error.what();
    EXPECT_NE(error.where().find("(rank 1)"), std::string::npos) << error.where();
  }
}

TEST(CpSchedules, MismatchedShardLengthsAreRejected) {
  run_in_process(1, [](Communicator& comm) {
    NaiveHostBackend backend;
    const std::vector<float> data(kHeadsQ * kHeadDim * 2);
    const std::vector<int32_t> tokens(2);
    ShardInputs in;
    in.dims = AttentionDims{1, 2, 1, kHeadsQ, kHeadsKv, kHeadDim};
    in.q = in.k = in.v = data.data();
    in.segment_ids = in.positions = tokens.data();
    std::vector<float> out(data.size()), lse(kHeadsQ * 2);
    ScheduleStats stats;
    EXPECT_THROW(cp_forward(Strategy::kRing, in, backend, comm,
                            ForwardOutputs{out.data(), lse.data()}, stats),
                 Error);
    in.dims.seqlen_k = 2;
    in.dims.num_heads_kv = 3;
    EXPECT_THROW(cp_forward(Strategy::kAllGather, in, backend, comm,
                            ForwardOutputs{out.data(), lse.data()}, stats),
                 Error);
  });
}

// A backend whose forward runs and whose backward does not (as a backend without a backward for
// some head dim or dtype): check_supported says so, and cp_backward asks before any step.
class ForwardOnlyBackend final : public NaiveHostBackend {
 public:
  void check_supported(DType dtype, int head_dim, bool backward) const override {
    NaiveHostBackend::check_supported(dtype, head_dim, backward);
    RINGPACK_CHECK(!backward, "forward_only: head_dim ", head_dim, " has no backward");
  }
  void backward(const AttentionStep& step, const BackwardInputs& in,
                const BackwardAccumulators& acc) override {
    ++backward_steps;
    NaiveHostBackend::backward(step, in, acc);
  }
  int backward_steps = 0;
};

TEST(CpSchedules, UnsupportedBackwardIsRejectedBeforeAnyStep) {
  constexpr int kCp = 2;
  const Problem p = packed_problem();
  const int n = kSeqLen / kCp;
  for (const Strategy strategy : {Strategy::kRing, Strategy::kAllGather}) {
    std::vector<int> backward_steps(kCp, -1);
    std::vector<uint64_t> backward_bytes(kCp, 1);
    try {
      run_in_process(kCp, [&](Communicator& comm) {
        const int r = comm.rank();
        ForwardOnlyBackend backend;
        EXPECT_NO_THROW(backend.check_supported(DType::kF32, kHeadDim, /*backward=*/false));
        const auto q = shard_of(p.q, p.dims.batch, kHeadsQ * kHeadDim, r, n);
        const auto k = shard_of(p.k, p.dims.batch, kHeadsKv * kHeadDim, r, n);
        const auto v = shard_of(p.v, p.dims.batch, kHeadsKv * kHeadDim, r, n);
        const auto dout = shard_of(p.dout, p.dims.batch, kHeadsQ * kHeadDim, r, n);
        const auto segment_ids = shard_of(p.segment_ids, p.dims.batch, 1, r, n);
        const auto positions = shard_of(p.positions, p.dims.batch, 1, r, n);
        ShardInputs in;
        in.dims = AttentionDims{p.dims.batch, n, n, kHeadsQ, kHeadsKv, kHeadDim};
        in.q = q.data();
        in.k = k.data();
        in.v = v.data();
        in.segment_ids = segment_ids.data();
        in.positions = positions.data();
        std::vector<float> out(q.size()), lse(size_t(p.dims.batch) * kHeadsQ * size_t(n));
        ScheduleStats stats;
        cp_forward(strategy, in, backend, comm, ForwardOutputs{out.data(), lse.data()}, stats);
        std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
        const uint64_t bytes_before = comm.bytes_sent();
        try {
          cp_backward(strategy, in, out.data(), lse.data(), dout.data(), backend, comm,
                      BackwardOutputs{dq.data(), dk.data(), dv.data()}, stats);
        } catch (...) {
          backward_steps[size_t(r)] = backend.backward_steps;
          backward_bytes[size_t(r)] = comm.bytes_sent() - bytes_before;
          throw;
        }
      });
      ADD_FAILURE() << strategy_name(strategy) << ": the backward was not rejected";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("head_dim 8 has no backward"), std::string::npos)
          << error.what();
    }
    for (int r = 0; r < kCp; ++r) {
      EXPECT_EQ(backward_steps[size_t(r)], 0) << strategy_name(strategy) << " rank " << r;
      EXPECT_EQ(backward_bytes[size_t(r)], 0u) << strategy_name(strategy) << " rank " << r;
    }
  }
}

}  // namespace
}  // namespace ringpack

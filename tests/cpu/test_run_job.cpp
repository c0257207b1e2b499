// End to end: every strategy x reorder x packing x cp on fresh random inputs and on every
// adversarial layout of docs/design.md §7 — the inverse-reordered O, LSE, dQ, dK, dV of the CP run
// match the single-device fp64 reference (compare_tensor's tolerances).
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "ringpack/error.h"
#include "ringpack/job.h"
#include "support/adversarial_layouts.h"

namespace ringpack {
namespace {

std::vector<ReorderSpec> legal_reorders(int seq_len, int cp) {
  std::vector<ReorderSpec> specs{{ReorderKind::kContiguous}, {ReorderKind::kStriped, 1}};
  if (seq_len % (2 * cp) == 0) specs.push_back({ReorderKind::kDualChunkSwap});
  if (seq_len % (cp * 2) == 0) specs.push_back({ReorderKind::kStriped, 2});
  return specs;
}

RunOptions small_run(const PackedBatch& layout, int cp, Strategy strategy, ReorderSpec reorder,
                     DType dtype, uint64_t seed) {
  RunOptions options;
  options.batch.layout = layout;
  options.batch.cp = cp;
  options.batch.strategy = strategy;
  options.batch.reorder = reorder;
  options.batch.dtype = dtype;
  options.batch.num_heads_q = 4;
  options.batch.num_heads_kv = 2;
  options.batch.head_dim = 16;
  options.batch.seed = seed;
  options.backend = BackendKind::kCpu;
  options.backend_options.num_threads = 1;
  options.verify = true;
  return options;
}

std::string describe(const RunReport& report) {
  std::ostringstream out;
  for (const TensorError& e : report.errors) {
    out << e.name << ": rel " << e.rel_err << " (tol " << e.tolerance << ") max_abs "
        << e.max_abs_err << " masked_mismatches " << e.masked_mismatches
        << (e.passed ? "" : " FAILED at " + e.worst) << "\n";
  }
  return out.str();
}

void expect_exact(const RunOptions& options, const std::string& what) {
  SCOPED_TRACE(what);
  const RunReport report = run_job(options);
  ASSERT_TRUE(report.verified);
  ASSERT_EQ(report.errors.size(), 5u);
  for (const TensorError& e : report.errors) {
    EXPECT_TRUE(std::isfinite(e.rel_err) && std::isfinite(e.max_abs_err)) << e.name;
  }
  EXPECT_TRUE(report.passed) << describe(report);
}

TEST(RunJob, AdversarialLayoutsMatchReferenceForEveryStrategyReorderAndCp) {
  const int seq_len = 48;  // divisible by 2*cp for cp in {1, 2, 3, 4, 8}
  for (int cp : {1, 2, 3, 4, 8}) {
    for (const auto& layout : testing::adversarial_layouts(seq_len, cp)) {
      for (Strategy strategy : {Strategy::kRing, Strategy::kAllGather}) {
        for (const ReorderSpec& reorder : legal_reorders(seq_len, cp)) {
          const std::string what = layout.name + " cp=" + std::to_string(cp) + " " +
                                   strategy_name(strategy) + " " + reorder_label(reorder);
          expect_exact(small_run(layout.batch, cp, strategy, reorder, DType::kF32,
                                 testing::seed_from_test_name()),
                       what);
        }
      }
    }
  }
}

TEST(RunJob, RandomPackedBatchesInBf16AndFp16) {
  const uint64_t seed = testing::seed_from_test_name();
  const PackedBatch batch = testing::random_packed_batch(2, 60, seed);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int cp : {2, 3}) {
      for (Strategy strategy : {Strategy::kRing, Strategy::kAllGather}) {
        for (const ReorderSpec& reorder : legal_reorders(60, cp)) {
          expect_exact(small_run(batch, cp, strategy, reorder, dtype, seed + cp),
                       std::string(dtype_name(dtype)) + " cp=" + std::to_string(cp) + " " +
                           strategy_name(strategy) + " " + reorder_label(reorder));
        }
      }
    }
  }
}

TEST(RunJob, PackerBatchesWithAndWithoutPackingAndAutoReorder) {
  for (bool packing : {true, false}) {
    RunOptions options;
    options.batch.batch = 2;
    options.batch.seq_len = 96;
    options.batch.cp = 4;
    options.batch.packer.packing = packing;
    options.batch.head_dim = 16;
    options.batch.seed = testing::seed_from_test_name();
    options.backend_options.num_threads = 1;
    options.verify = true;
    const RunReport report = run_job(options);
    EXPECT_NE(report.reorder, "auto");
    EXPECT_TRUE(report.passed) << (packing ? "packing " : "no packing ") << describe(report);
    EXPECT_EQ(report.ranks.size(), 4u);
  }
}

TEST(RunJob, ReferenceBackendRanksAndSlidingWindow) {
  const PackedBatch batch = testing::random_packed_batch(1, 64, testing::seed_from_test_name());
  for (MaskSpec mask : {MaskSpec{true, 5}, MaskSpec{false, -1}, MaskSpec{false, 7}}) {
    RunOptions options = small_run(batch, 4, Strategy::kRing, {ReorderKind::kStriped, 1},
                                   DType::kF32, testing::seed_from_test_name());
    options.batch.mask = mask;
    options.backend = BackendKind::kReference;
    expect_exact(options, "causal=" + std::to_string(mask.causal) +
                              " window=" + std::to_string(mask.window));
  }
}

TEST(RunJob, SkipsStepsWithNoVisiblePair) {
  // Short documents, contiguous shards: rank r's queries only see rank r's keys.
  const PackedBatch batch = testing::batch_from_lengths({{4, 4, 4, 4, 4, 4, 4, 4}}, 32);
  RunOptions options =
      small_run(batch, 4, Strategy::kRing, {ReorderKind::kContiguous}, DType::kF32, 1);
  const RunReport report = run_job(options);
  EXPECT_TRUE(report.passed) << describe(report);
  for (const RankReport& rank : report.ranks) {
    EXPECT_EQ(rank.steps_computed, 2) << "rank " << rank.rank;  // one forward, one backward
    EXPECT_EQ(rank.steps_skipped, 6) << "rank " << rank.rank;
  }
}

TEST(RunJob, RejectsBadShapesWithClearErrors) {
  RunOptions options;
  options.batch.seq_len = 10;
  options.batch.cp = 4;
  options.verify = false;
  try {
    run_job(options);
    ADD_FAILURE() << "seq_len 10 with cp 4 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("seq_len 10"), std::string::npos) << e.what();
  }
  options.batch.seq_len = 16;
  options.batch.num_heads_q = 3;
  options.batch.num_heads_kv = 2;
  EXPECT_THROW(run_job(options), Error);
}

}  // namespace
}  // namespace ringpack

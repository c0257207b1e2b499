// Tests for the load-balance analysis, the cost model and `auto` (plan.h, docs/design.md §3-4):
// pair counts against brute force over rule (1), on adversarial layouts, every reorder and mask.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/cost_model.h"
#include "core/pair_count.h"
#include "ringpack/error.h"
#include "ringpack/mask.h"
#include "ringpack/packing.h"
#include "ringpack/plan.h"
#include "ringpack/reorder.h"

namespace ringpack {
namespace {

uint64_t test_seed() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::hash<std::string>{}(std::string(info->test_suite_name()) + "." + info->name());
}

using Row = std::vector<std::pair<int32_t, int32_t>>;  // [seq_len] (segment id, position)

// A row of random documents (1 to max_doc tokens) with padding runs between them (never inside
// one: docs/design.md §1), positions that start anywhere and step by 1 or 2 (a layout file may do
// both).
Row random_row(std::mt19937_64& rng, int seq_len, int max_doc) {
  Row row;
  int32_t segment = 0;
  while (int(row.size()) < seq_len) {
    if (rng() % 4 == 0) {
      row.push_back({0, 0});
      continue;
    }
    ++segment;
    const int length = 1 + int(rng() % max_doc);
    int32_t position = int32_t(rng() % 4);
    for (int i = 0; i < length && int(row.size()) < seq_len; ++i) {
      row.push_back({segment, position});
      position += 1 + int32_t(rng() % 2);
    }
  }
  return row;
}

Row one_document_row(int seq_len) {
  Row row;
  for (int t = 0; t < seq_len; ++t) row.push_back({1, t});
  return row;
}

Row single_token_docs_row(int seq_len) {
  Row row;
  for (int t = 0; t < seq_len; ++t) row.push_back({t + 1, 0});
  return row;
}

PackedBatch make_batch(const std::vector<Row>& rows) {
  PackedBatch batch;
  batch.batch = int(rows.size());
  batch.seq_len = int(rows[0].size());
  for (const Row& row : rows) {
    for (const auto& [id, pos] : row) {
      batch.segment_ids.push_back(id);
      batch.positions.push_back(pos);
    }
  }
  validate_batch(batch);
  return batch;
}

// Rows of 48 tokens: random packed rows, one document, one-token documents, all padding.
PackedBatch adversarial_batch(uint64_t seed) {
  constexpr int kSeqLen = 48;
  std::mt19937_64 rng(seed);
  return make_batch({random_row(rng, kSeqLen, 12), random_row(rng, kSeqLen, 30),
                     one_document_row(kSeqLen), single_token_docs_row(kSeqLen),
                     Row(kSeqLen, {0, 0})});
}

// [cp][cp] visible pairs by the definition: every (query, key) of every row through rule (1).
std::vector<std::vector<int64_t>> brute_force_step_pairs(const PackedBatch& batch,
                                                         const ReorderSpec& spec, int cp,
                                                         const MaskSpec& mask) {
  const std::vector<int32_t> index = reorder_index(batch.seq_len, cp, spec);
  const int n = batch.seq_len / cp;
  std::vector<std::vector<int64_t>> pairs(cp, std::vector<int64_t>(cp, 0));
  for (int row = 0; row < batch.batch; ++row) {
    for (int slot_q = 0; slot_q < batch.seq_len; ++slot_q) {
      for (int slot_k = 0; slot_k < batch.seq_len; ++slot_k) {
        const int q = index[slot_q];
        const int k = index[slot_k];
        if (visible(batch.segment_id(row, q), batch.position(row, q), batch.segment_id(row, k),
                    batch.position(row, k), mask)) {
          ++pairs[slot_q / n][slot_k / n];
        }
      }
    }
  }
  return pairs;
}

std::vector<ReorderSpec> all_specs() {
  return {{ReorderKind::kContiguous, 1},
          {ReorderKind::kDualChunkSwap, 1},
          {ReorderKind::kStriped, 1},
          {ReorderKind::kStriped, 2},
          {ReorderKind::kStriped, 4}};
}

std::vector<MaskSpec> all_masks() {
  return {{true, -1}, {false, -1}, {true, 3}, {false, 3}, {true, 0}};
}

bool is_legal(int seq_len, int cp, const ReorderSpec& spec) {
  try {
    validate_reorder(seq_len, cp, spec);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// The standard benchmark heads (docs/design.md §8): enough compute per token that balance, not the
// transfers, decides the modelled time at a few thousand tokens.
PlanConfig benchmark_config(int cp) {
  PlanConfig config;
  config.cp = cp;
  config.num_heads_q = 32;
  config.num_heads_kv = 8;
  config.head_dim = 128;
  config.tile_q = 128;
  config.tile_k = 128;
  return config;
}

PlanConfig config_for(int cp, const MaskSpec& mask, int tile) {
  PlanConfig config;
  config.cp = cp;
  config.mask = mask;
  config.tile_q = tile;
  config.tile_k = tile;
  return config;
}

std::string describe(int cp, const ReorderSpec& spec, const MaskSpec& mask) {
  return "cp " + std::to_string(cp) + " " + reorder_label(spec) +
         (mask.causal ? " causal" : " non-causal") + " window " + std::to_string(mask.window);
}

TEST(PairCount, MatchesBruteForceForEveryReorderAndMask) {
  const PackedBatch batch = adversarial_batch(test_seed());
  int checked = 0;
  for (const int cp : {1, 2, 3, 4}) {
    for (const ReorderSpec& spec : all_specs()) {
      if (!is_legal(batch.seq_len, cp, spec)) continue;
      const std::vector<int> rank_of = token_ranks(reorder_index(batch.seq_len, cp, spec), cp);
      for (const MaskSpec& mask : all_masks()) {
        SCOPED_TRACE(describe(cp, spec, mask));
        EXPECT_EQ(count_step_pairs(batch, rank_of, cp, mask),
                  brute_force_step_pairs(batch, spec, cp, mask));
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 50);
}

TEST(PlanAnalysis, PerRankCountsMatchBruteForce) {
  const PackedBatch batch = adversarial_batch(test_seed());
  for (const int cp : {1, 3, 4}) {
    for (const ReorderSpec& spec : all_specs()) {
      if (!is_legal(batch.seq_len, cp, spec)) continue;
      for (const MaskSpec& mask : all_masks()) {
        SCOPED_TRACE(describe(cp, spec, mask));
        const ReorderAnalysis a = analyse_reorder(batch, spec, config_for(cp, mask, 4));
        const auto expected = brute_force_step_pairs(batch, spec, cp, mask);
        EXPECT_EQ(a.label, reorder_label(spec));
        EXPECT_EQ(a.step_pairs, expected);
        int64_t total = 0;
        for (int r = 0; r < cp; ++r) {
          int64_t rank_pairs = 0;
          int empty_steps = 0;
          for (int s = 0; s < cp; ++s) {
            rank_pairs += expected[r][s];
            empty_steps += expected[r][s] == 0;
          }
          total += rank_pairs;
          EXPECT_EQ(a.visible_pairs[r], rank_pairs) << "rank " << r;
          EXPECT_EQ(a.skippable_steps[r], empty_steps) << "rank " << r;
          // Every visible pair lies in a tile that is not skipped.
          EXPECT_GE(a.computed_tile_elements[r], rank_pairs) << "rank " << r;
        }
        EXPECT_GT(total, 0);
        EXPECT_LE(a.tile_efficiency, 1.0);
        EXPECT_GT(a.tile_efficiency, 0.0);
        EXPECT_GE(a.imbalance, 1.0);
        EXPECT_GT(a.cost, 0.0);
      }
    }
  }
}

TEST(PlanAnalysis, TileEfficiencyOfOneCausalDocument) {
  // 8 tokens, tiles of 4: (q0-3, k0-3) partial 16, (q0-3, k4-7) skipped, (q4-7, k0-3) full 16,
  // (q4-7, k4-7) partial 16; 36 visible pairs of 48 computed elements.
  const PackedBatch batch = make_batch({one_document_row(8)});
  const ReorderAnalysis a =
      analyse_reorder(batch, {ReorderKind::kContiguous, 1}, config_for(1, {true, -1}, 4));
  EXPECT_EQ(a.visible_pairs, (std::vector<int64_t>{36}));
  EXPECT_EQ(a.computed_tile_elements, (std::vector<int64_t>{48}));
  EXPECT_DOUBLE_EQ(a.tile_efficiency, 0.75);
}

TEST(PlanAnalysis, SkippableStepsOfShortDocuments) {
  // cp 4, documents of 4 tokens: contiguous keeps each document inside one shard of 4, so
  // every rank sees only its own keys and 3 of 4 ring steps skip. Striped by 1 gives rank r
  // position r of every document: causal queries see keys of ranks 0..r only.
  Row row;
  for (int t = 0; t < 16; ++t) row.push_back({t / 4 + 1, t % 4});
  const PackedBatch batch = make_batch({row});
  const ReorderAnalysis a =
      analyse_reorder(batch, {ReorderKind::kContiguous, 1}, config_for(4, {true, -1}, 4));
  EXPECT_EQ(a.skippable_steps, (std::vector<int>{3, 3, 3, 3}));
  EXPECT_DOUBLE_EQ(a.imbalance, 1.0);
  const ReorderAnalysis striped =
      analyse_reorder(batch, {ReorderKind::kStriped, 1}, config_for(4, {true, -1}, 4));
  EXPECT_EQ(striped.skippable_steps, (std::vector<int>{3, 2, 1, 0}));
}

TEST(PlanAnalysis, AllPaddingBatchIsBalancedAndSkipsEverything) {
  const PackedBatch batch = make_batch({Row(16, {0, 0})});
  const ReorderAnalysis a =
      analyse_reorder(batch, {ReorderKind::kStriped, 1}, config_for(2, {true, -1}, 4));
  EXPECT_EQ(a.visible_pairs, (std::vector<int64_t>{0, 0}));
  EXPECT_DOUBLE_EQ(a.imbalance, 1.0);
  EXPECT_DOUBLE_EQ(a.tile_efficiency, 1.0);
  EXPECT_EQ(a.skippable_steps, (std::vector<int>{2, 2}));
}

TEST(PlanAnalysis, ContiguousLongCausalDocumentIsImbalancedDualChunkSwapIsNot) {
  // One causal document of S tokens, cp 4, n = S/4: rank r's queries see r*n^2 + n(n+1)/2 keys,
  // so max/mean = (3n^2 + n(n+1)/2) / (S(S+1)/8) -> 1.75; dual chunk swap gives every rank one
  // early and one late chunk: exactly equal.
  const PackedBatch batch = make_batch({one_document_row(4096)});
  const PlanConfig config = benchmark_config(4);
  const ReorderAnalysis contiguous = analyse_reorder(batch, {ReorderKind::kContiguous, 1}, config);
  const ReorderAnalysis dual = analyse_reorder(batch, {ReorderKind::kDualChunkSwap, 1}, config);
  EXPECT_NEAR(contiguous.imbalance, 1.75, 0.01);
  EXPECT_DOUBLE_EQ(dual.imbalance, 1.0);
  EXPECT_LT(dual.cost, contiguous.cost);
}

TEST(CostModel, BytesSentFollowTheFormula) {
  // batch 2, S 64, cp 4 -> 32 tokens per rank; kv heads 2, head_dim 8, bf16:
  // KV block = 2 * 32*2*8 * 2 + 2 * 32 * 4 = 2304 bytes; dK/dV fp32 = 2 * 32*2*8 * 4 = 4096.
  PlanConfig config = config_for(4, {true, -1}, 16);
  config.num_heads_q = 4;
  config.num_heads_kv = 2;
  config.head_dim = 8;
  config.dtype_bytes = 2;
  config.strategy = Strategy::kRing;
  EXPECT_EQ(bytes_sent_per_rank(2, 64, config), 3u * 2304 + 3u * 2304 + 4u * 4096);
  config.strategy = Strategy::kAllGather;
  EXPECT_EQ(bytes_sent_per_rank(2, 64, config), 3u * 2304 + 3u * 2304 + 3u * 4096);
  config.cp = 1;
  EXPECT_EQ(bytes_sent_per_rank(2, 64, config), 0u);
  config.strategy = Strategy::kRing;
  EXPECT_EQ(bytes_sent_per_rank(2, 64, config), 0u);
}

TEST(CostModel, SlowestRankDecidesAndRingOverlapsTransfers) {
  PlanConfig config = config_for(2, {true, -1}, 16);
  const std::vector<std::vector<int64_t>> balanced = {{100, 100}, {100, 100}};
  const std::vector<std::vector<int64_t>> skewed = {{0, 0}, {200, 200}};
  EXPECT_LT(modelled_seconds(balanced, 0, config), modelled_seconds(skewed, 0, config));
  // A transfer shorter than each step's compute hides behind it in the ring, not in all_gather.
  const double compute_only = modelled_seconds(balanced, 0, config);
  EXPECT_DOUBLE_EQ(modelled_seconds(balanced, 1, config), compute_only);
  config.strategy = Strategy::kAllGather;
  EXPECT_GT(modelled_seconds(balanced, 1, config), compute_only);
}

TEST(Plan, CandidatesAreLegalAndAutoPicksOneOfThem) {
  std::mt19937_64 rng(test_seed());
  for (const int seq_len : {12, 48, 96, 384}) {
    for (const int cp : {1, 2, 3, 4}) {
      if (seq_len % cp != 0) continue;
      const PackedBatch batch = make_batch({random_row(rng, seq_len, seq_len / 2)});
      const Plan plan = make_plan(batch, config_for(cp, {true, -1}, 16));
      SCOPED_TRACE("seq_len " + std::to_string(seq_len) + " cp " + std::to_string(cp));
      ASSERT_FALSE(plan.candidates.empty());
      ASSERT_GE(plan.chosen, 0);
      ASSERT_LT(plan.chosen, int(plan.candidates.size()));
      EXPECT_EQ(plan.candidates[0].spec.kind, ReorderKind::kContiguous);
      for (const ReorderAnalysis& candidate : plan.candidates) {
        EXPECT_TRUE(is_legal(seq_len, cp, candidate.spec)) << candidate.label;
        EXPECT_GE(candidate.cost, plan.candidates[plan.chosen].cost) << candidate.label;
        // A stripe of a whole shard would only repeat contiguous.
        if (candidate.spec.kind == ReorderKind::kStriped) {
          EXPECT_LT(candidate.spec.stripe_size, seq_len / cp) << candidate.label;
        }
      }
      if (cp == 1) {
        EXPECT_EQ(plan.candidates.size(), 1u);
      }
      EXPECT_NE(plan.explanation.find(plan.candidates[plan.chosen].label), std::string::npos)
          << plan.explanation;
      std::string explanation;
      const ReorderSpec resolved = resolve_reorder(batch, {ReorderKind::kAuto, 1},
                                                   config_for(cp, {true, -1}, 16), &explanation);
      EXPECT_EQ(reorder_label(resolved), plan.candidates[plan.chosen].label);
      EXPECT_EQ(explanation, plan.explanation);
    }
  }
}

TEST(Plan, DualChunkSwapIsNoCandidateWhenIllegal) {
  // 12 tokens, cp 4: 12 % 8 != 0.
  const PackedBatch batch = make_batch({one_document_row(12)});
  const Plan plan = make_plan(batch, config_for(4, {true, -1}, 16));
  for (const ReorderAnalysis& candidate : plan.candidates) {
    EXPECT_NE(candidate.spec.kind, ReorderKind::kDualChunkSwap);
  }
}

TEST(Plan, AutoBalancesOneLongCausalDocument) {
  const PackedBatch batch = make_batch({one_document_row(4096)});
  const Plan plan = make_plan(batch, benchmark_config(4));
  const ReorderAnalysis& chosen = plan.candidates[plan.chosen];
  EXPECT_NE(chosen.spec.kind, ReorderKind::kContiguous) << plan.explanation;
  EXPECT_LT(chosen.imbalance, 1.05) << plan.explanation;
  EXPECT_NE(plan.explanation.find("contiguous"), std::string::npos) << plan.explanation;
}

// auto picks among the balanced reorders (docs/design.md §3): even when transfers bound every
// candidate and contiguous ties with them, contiguous is shown but not chosen.
TEST(Plan, AutoNeverPicksContiguousWhenABalancedReorderIsLegal) {
  const PackedBatch batch = make_batch({single_token_docs_row(64)});  // nothing to balance
  PlanConfig config = config_for(4, {true, -1}, 16);
  config.rates = {1e18, 1.0};  // transfer-bound: every candidate costs the same
  const Plan plan = make_plan(batch, config);
  EXPECT_EQ(plan.candidates[0].spec.kind, ReorderKind::kContiguous);
  EXPECT_NE(plan.candidates[plan.chosen].spec.kind, ReorderKind::kContiguous) << plan.explanation;
}

TEST(Plan, AutoFallsBackToContiguousOnlyWhenNoBalancedReorderIsLegal) {
  const PackedBatch batch = make_batch({one_document_row(4)});  // one token per rank
  const Plan plan = make_plan(batch, config_for(4, {true, -1}, 16));
  ASSERT_EQ(plan.candidates.size(), 1u);
  EXPECT_NE(plan.explanation.find("no balanced reorder is legal"), std::string::npos)
      << plan.explanation;
}

TEST(Plan, ProgressNamesEachCandidate) {
  const PackedBatch batch = make_batch({one_document_row(64)});
  std::vector<std::string> lines;
  make_plan(batch, config_for(4, {true, -1}, 16),
            [&](const std::string& line) { lines.push_back(line); });
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0].rfind("analysing contiguous (1 of ", 0), 0u) << lines[0];
}

TEST(Plan, WindowBelowMinusOneIsRejected) {
  const PackedBatch batch = make_batch({one_document_row(16)});
  EXPECT_THROW(make_plan(batch, config_for(2, {true, -5}, 16)), Error);
}

// The cost model uses the rates of the backend that runs: the CPU computes far fewer FLOPs per
// byte moved than a GPU, so a CPU run is bound by compute.
TEST(CostModel, RatesFollowTheBackend) {
  const CostRates gpu = cost_rates(BackendKind::kCuda);
  const CostRates cpu = cost_rates(BackendKind::kCpu);
  const CostRates reference = cost_rates(BackendKind::kReference);
  EXPECT_GT(gpu.flops_per_second / gpu.bytes_per_second, 100.0);
  EXPECT_LT(cpu.flops_per_second / cpu.bytes_per_second, 10.0);
  EXPECT_LT(reference.flops_per_second, cpu.flops_per_second);
  PlanConfig config = config_for(2, {true, -1}, 16);
  const std::vector<std::vector<int64_t>> work = {{100, 100}, {100, 100}};
  config.rates = gpu;
  const double on_gpu = modelled_seconds(work, 0, config);
  config.rates = cpu;
  EXPECT_GT(modelled_seconds(work, 0, config), on_gpu);
}

TEST(Plan, ResolveKeepsARequestedReorderAndRejectsAnIllegalOne) {
  const PackedBatch batch = make_batch({one_document_row(12)});
  const PlanConfig config = config_for(4, {true, -1}, 16);
  const ReorderSpec striped{ReorderKind::kStriped, 3};
  EXPECT_EQ(reorder_label(resolve_reorder(batch, striped, config)), "striped:3");
  EXPECT_THROW(resolve_reorder(batch, {ReorderKind::kDualChunkSwap, 1}, config), Error);
}

TEST(Plan, BadConfigThrowsNamingTheValue) {
  const PackedBatch batch = make_batch({one_document_row(16)});
  PlanConfig config = config_for(2, {true, -1}, 16);
  config.num_heads_q = 6;
  config.num_heads_kv = 4;
  try {
    make_plan(batch, config);
    FAIL() << "no error for 6 query heads over 4 kv heads";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--heads-q 6"), std::string::npos) << e.what();
  }
  config = config_for(3, {true, -1}, 16);
  EXPECT_THROW(make_plan(batch, config), Error);  // 16 % 3 != 0
  config = config_for(0, {true, -1}, 16);
  EXPECT_THROW(make_plan(batch, config), Error);
}

TEST(Plan, RealisticSixtyFourKTokensWithCpEightPlansInUnderASecond) {
  constexpr int kSeqLen = 65536;
  PackerOptions options;
  options.seed = 0;
  options.max_doc_length = kSeqLen / 4;
  const PackedBatch batch = pack_documents(1, kSeqLen, options);
  const PlanConfig config = benchmark_config(8);
  const auto start = std::chrono::steady_clock::now();
  const Plan plan = make_plan(batch, config);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 1.0);
  EXPECT_GE(plan.candidates.size(), 5u);
  EXPECT_FALSE(plan.explanation.empty());
}

}  // namespace
}  // namespace ringpack

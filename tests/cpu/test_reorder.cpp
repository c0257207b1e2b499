// Reorder index maps against the worked examples of docs/design.md §3, inverses, round trips,
// errors.
#include <gtest/gtest.h>

#include <numeric>

#include "ringpack/error.h"
#include "ringpack/reorder.h"
#include "support/adversarial_layouts.h"

namespace ringpack {
namespace {

std::vector<int32_t> rank_tokens(const std::vector<int32_t>& index, int cp, int rank) {
  const size_t n = index.size() / cp;
  return {index.begin() + rank * n, index.begin() + (rank + 1) * n};
}

TEST(Reorder, DualChunkSwapMatchesDesignExample) {
  const auto index = reorder_index(16, 4, {ReorderKind::kDualChunkSwap});
  EXPECT_EQ(rank_tokens(index, 4, 0), (std::vector<int32_t>{0, 1, 14, 15}));
  EXPECT_EQ(rank_tokens(index, 4, 1), (std::vector<int32_t>{2, 3, 12, 13}));
  EXPECT_EQ(rank_tokens(index, 4, 2), (std::vector<int32_t>{4, 5, 10, 11}));
  EXPECT_EQ(rank_tokens(index, 4, 3), (std::vector<int32_t>{6, 7, 8, 9}));
}

TEST(Reorder, StripedMatchesDesignExamples) {
  const auto ss1 = reorder_index(16, 4, {ReorderKind::kStriped, 1});
  EXPECT_EQ(rank_tokens(ss1, 4, 0), (std::vector<int32_t>{0, 4, 8, 12}));
  EXPECT_EQ(rank_tokens(ss1, 4, 1), (std::vector<int32_t>{1, 5, 9, 13}));
  const auto ss2 = reorder_index(16, 4, {ReorderKind::kStriped, 2});
  EXPECT_EQ(rank_tokens(ss2, 4, 0), (std::vector<int32_t>{0, 1, 8, 9}));
  EXPECT_EQ(rank_tokens(ss2, 4, 1), (std::vector<int32_t>{2, 3, 10, 11}));
}

TEST(Reorder, ContiguousIsIdentity) {
  const auto index = reorder_index(12, 3, {ReorderKind::kContiguous});
  std::vector<int32_t> identity(12);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(index, identity);
}

TEST(Reorder, PackedStripedExampleMovesIdsAndPositions) {
  // docs/design.md §3: cp = 2, striped ss = 1.
  const std::vector<int32_t> ids{1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 0, 0};
  const std::vector<int32_t> pos{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5, 6, 7, 0, 0};
  const auto index = reorder_index(16, 2, {ReorderKind::kStriped, 1});
  std::vector<int32_t> ids_out(16), pos_out(16);
  gather_tokens(ids.data(), ids_out.data(), index, 1, sizeof(int32_t));
  gather_tokens(pos.data(), pos_out.data(), index, 1, sizeof(int32_t));
  EXPECT_EQ(std::vector<int32_t>(ids_out.begin(), ids_out.begin() + 8),
            (std::vector<int32_t>{1, 1, 1, 2, 2, 2, 2, 0}));
  EXPECT_EQ(std::vector<int32_t>(pos_out.begin(), pos_out.begin() + 8),
            (std::vector<int32_t>{0, 2, 4, 0, 2, 4, 6, 0}));
  EXPECT_EQ(std::vector<int32_t>(ids_out.begin() + 8, ids_out.end()),
            (std::vector<int32_t>{1, 1, 1, 2, 2, 2, 2, 0}));
  EXPECT_EQ(std::vector<int32_t>(pos_out.begin() + 8, pos_out.end()),
            (std::vector<int32_t>{1, 3, 5, 1, 3, 5, 7, 0}));
}

TEST(Reorder, EveryReorderRoundTripsForCp1To8) {
  for (int cp = 1; cp <= 8; ++cp) {
    const int seq_len = 2 * cp * 6;  // legal for every kind and stripe sizes 1, 2, 3, 6
    for (ReorderSpec spec :
         {ReorderSpec{ReorderKind::kContiguous}, ReorderSpec{ReorderKind::kDualChunkSwap},
          ReorderSpec{ReorderKind::kStriped, 1}, ReorderSpec{ReorderKind::kStriped, 2},
          ReorderSpec{ReorderKind::kStriped, 3}, ReorderSpec{ReorderKind::kStriped, 6}}) {
      SCOPED_TRACE(reorder_label(spec) + " cp=" + std::to_string(cp));
      const auto index = reorder_index(seq_len, cp, spec);
      const auto inverse = invert_index(index);  // throws unless a permutation
      // Two rows of 3-byte tokens: reorder then undo gives the input back.
      std::vector<uint8_t> data(2 * seq_len * 3);
      for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 7 + 1);
      std::vector<uint8_t> reordered(data.size()), restored(data.size());
      gather_tokens(data.data(), reordered.data(), index, 2, 3);
      gather_tokens(reordered.data(), restored.data(), inverse, 2, 3);
      EXPECT_EQ(restored, data);
    }
  }
}

TEST(Reorder, DualChunkSwapGivesEachRankEqualCausalWork) {
  // One causal document: rank r's queries see sum of (token index + 1) keys.
  const int cp = 4, seq_len = 64;
  const auto index = reorder_index(seq_len, cp, {ReorderKind::kDualChunkSwap});
  for (int r = 0; r < cp; ++r) {
    int64_t pairs = 0;
    for (int32_t t : rank_tokens(index, cp, r)) pairs += t + 1;
    EXPECT_EQ(pairs, int64_t(seq_len) * (seq_len + 1) / 2 / cp) << "rank " << r;
  }
}

void expect_error_mentions(int seq_len, int cp, ReorderSpec spec, const std::string& text) {
  try {
    validate_reorder(seq_len, cp, spec);
    ADD_FAILURE() << "no error for seq_len " << seq_len << " cp " << cp;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST(Reorder, IllegalConfigurationsNameTheValueAndTheFix) {
  expect_error_mentions(10, 4, {ReorderKind::kContiguous}, "seq_len 10 is not divisible by cp 4");
  expect_error_mentions(12, 4, {ReorderKind::kDualChunkSwap}, "2*cp = 8");
  expect_error_mentions(16, 4, {ReorderKind::kStriped, 0}, "stripe size 0");
  expect_error_mentions(16, 4, {ReorderKind::kStriped, 3}, "cp*stripe_size = 12");
  expect_error_mentions(16, 0, {ReorderKind::kContiguous}, "cp must be at least 1");
  EXPECT_THROW(validate_reorder(16, 4, {ReorderKind::kAuto}), Error);
}

TEST(Reorder, LabelsRoundTrip) {
  for (const char* label : {"contiguous", "dual_chunk_swap", "striped", "striped:64", "auto"}) {
    EXPECT_EQ(reorder_label(parse_reorder_label(label)), label);
  }
  EXPECT_THROW(parse_reorder_label("zigzag"), Error);
  EXPECT_THROW(parse_reorder_label("striped:x"), Error);
  EXPECT_THROW(parse_reorder_label("contiguous:2"), Error);
}

}  // namespace
}  // namespace ringpack

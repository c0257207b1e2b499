// classify_tile (src/core/tile_mask.h) against the brute-force rule (1) of docs/design.md §2: kSkip
// only when no pair of the two tiles is visible, kFull only when every pair is; and the common
// full / skip cases are detected rather than left partial.
#include <gtest/gtest.h>

#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/tile_mask.h"
#include "support/adversarial_layouts.h"

namespace ringpack {
namespace {

using testing::seed_from_test_name;

struct Tile {
  std::vector<int32_t> segment_ids, positions;
  TileRange range() const {
    return make_tile_range(segment_ids.data(), positions.data(), 0, int(segment_ids.size()));
  }
};

// Counts the visible pairs of two tiles by rule (1).
int64_t visible_pairs(const Tile& q, const Tile& k, const MaskSpec& mask) {
  int64_t pairs = 0;
  for (size_t i = 0; i < q.segment_ids.size(); ++i) {
    for (size_t j = 0; j < k.segment_ids.size(); ++j) {
      pairs += visible(q.segment_ids[i], q.positions[i], k.segment_ids[j], k.positions[j], mask);
    }
  }
  return pairs;
}

// A tile of `size` tokens with segment ids in [0, max_segment] and positions in [0, max_pos].
Tile random_tile(std::mt19937_64& rng, int size, int max_segment, int max_pos) {
  Tile t;
  for (int i = 0; i < size; ++i) {
    t.segment_ids.push_back(int32_t(rng() % (max_segment + 1)));
    t.positions.push_back(int32_t(rng() % (max_pos + 1)));
  }
  return t;
}

std::string describe(const MaskSpec& mask, const Tile& q, const Tile& k) {
  std::ostringstream out;
  out << "causal=" << mask.causal << " window=" << mask.window << " q (seg@pos):";
  for (size_t i = 0; i < q.segment_ids.size(); ++i) {
    out << " " << q.segment_ids[i] << "@" << q.positions[i];
  }
  out << " k:";
  for (size_t j = 0; j < k.segment_ids.size(); ++j) {
    out << " " << k.segment_ids[j] << "@" << k.positions[j];
  }
  return out.str();
}

TEST(TileMask, ClassificationAgreesWithBruteForceOnRandomTiles) {
  std::mt19937_64 rng(seed_from_test_name());
  const MaskSpec masks[] = {{true, -1}, {false, -1}, {true, 3}, {false, 2}, {true, 0}};
  constexpr int kTrials = 4000;
  int skips = 0, fulls = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    const MaskSpec& mask = masks[trial % 5];
    // Few segments and positions so that skip, full and partial all occur.
    const int max_segment = 1 + int(rng() % 2);
    const int size_q = 1 + int(rng() % 4), size_k = 1 + int(rng() % 4);
    const Tile q = random_tile(rng, size_q, max_segment, 8);
    const Tile k = random_tile(rng, size_k, max_segment, 8);
    const int64_t pairs = visible_pairs(q, k, mask);
    const TileClass c = classify_tile(q.range(), k.range(), mask);
    if (c == TileClass::kSkip) {
      ++skips;
      EXPECT_EQ(pairs, 0) << describe(mask, q, k);
    }
    if (c == TileClass::kFull) {
      ++fulls;
      EXPECT_EQ(pairs, int64_t(size_q) * size_k) << describe(mask, q, k);
    }
  }
  // The property above holds trivially if everything is partial: the draw must reach both.
  EXPECT_GT(skips, kTrials / 20);
  EXPECT_GT(fulls, kTrials / 100);
}

// Contiguous tiles of one row: [t0, t0 + n) with the given ids, positions = index in document.
Tile contiguous(int32_t segment, int32_t first_position, int n) {
  Tile t;
  for (int i = 0; i < n; ++i) {
    t.segment_ids.push_back(segment);
    t.positions.push_back(first_position + i);
  }
  return t;
}

TEST(TileMask, DetectsCommonFullAndSkipCases) {
  const MaskSpec causal{true, -1};
  // One document: a query tile below the diagonal sees all of an earlier key tile ...
  EXPECT_EQ(classify_tile(contiguous(1, 64, 64).range(), contiguous(1, 0, 64).range(), causal),
            TileClass::kFull);
  // ... not a later one ...
  EXPECT_EQ(classify_tile(contiguous(1, 0, 64).range(), contiguous(1, 64, 64).range(), causal),
            TileClass::kSkip);
  // ... and the diagonal tile is partial.
  EXPECT_EQ(classify_tile(contiguous(1, 0, 64).range(), contiguous(1, 0, 64).range(), causal),
            TileClass::kPartial);
  // Non-causal: the diagonal tile of one document is full.
  EXPECT_EQ(classify_tile(contiguous(1, 0, 64).range(), contiguous(1, 0, 64).range(),
                          MaskSpec{false, -1}),
            TileClass::kFull);
  // Different documents, and padding, are skipped.
  EXPECT_EQ(classify_tile(contiguous(2, 0, 64).range(), contiguous(1, 0, 64).range(), causal),
            TileClass::kSkip);
  EXPECT_EQ(classify_tile(contiguous(0, 0, 64).range(), contiguous(0, 0, 64).range(), causal),
            TileClass::kSkip);
  // A window of 64 excludes a key tile 128 positions back.
  EXPECT_EQ(classify_tile(contiguous(1, 128, 64).range(), contiguous(1, 0, 64).range(),
                          MaskSpec{true, 64}),
            TileClass::kSkip);
}

}  // namespace
}  // namespace ringpack

namespace ringpack {
namespace {

TEST(TileMask, PaddingNeitherWidensRangesNorAllowsFull) {
  // A tile of document 5 that ends in tail padding does not overlap document 1 ...
  const Tile tail_padded{{5, 5, 0, 0}, {3, 4, 0, 0}};
  const Tile other_doc{{1, 1}, {0, 1}};
  EXPECT_EQ(classify_tile(tail_padded.range(), other_doc.range(), MaskSpec{}), TileClass::kSkip);
  // ... and is never full against its own document, since its padding queries see nothing.
  const Tile same_doc{{5, 5}, {0, 1}};
  EXPECT_EQ(classify_tile(tail_padded.range(), same_doc.range(), MaskSpec{}), TileClass::kPartial);
  const Tile all_padding{{0, 0}, {0, 0}};
  EXPECT_EQ(classify_tile(all_padding.range(), same_doc.range(), MaskSpec{}), TileClass::kSkip);
}

}  // namespace
}  // namespace ringpack

namespace ringpack {
namespace {

// The kernels' per-element form of rule (1), VisibleKeys, against the rule itself: every pair of
// a grid of segment ids and positions (extreme positions included), under causal and non-causal
// masks with no window, a zero window, small windows and windows past the int32 range.
TEST(TileMask, VisibleKeyIntervalsAgreeWithRuleOne) {
  const std::vector<int32_t> positions = {INT32_MIN, INT32_MIN + 1, -5,       -1, 0, 1, 2, 3, 7,
                                          100,       INT32_MAX - 1, INT32_MAX};
  const std::vector<int32_t> segments = {0, 1, 2};
  int64_t checked = 0;
  for (const bool causal : {true, false}) {
    for (const int64_t window :
         {int64_t(-1), int64_t(0), int64_t(1), int64_t(3), int64_t(INT32_MAX), int64_t(1) << 40}) {
      const MaskSpec mask{causal, window};
      for (const int32_t seg_q : segments) {
        for (const int32_t pos_q : positions) {
          const VisibleKeys keys = visible_keys(seg_q, pos_q, mask);
          for (const int32_t seg_k : segments) {
            for (const int32_t pos_k : positions) {
              ASSERT_EQ(keys.contains(seg_k, pos_k), visible(seg_q, pos_q, seg_k, pos_k, mask))
                  << "causal " << causal << " window " << window << " q " << seg_q << "@" << pos_q
                  << " k " << seg_k << "@" << pos_k;
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 2 * 6 * 3 * 12 * 3 * 12);
}

}  // namespace
}  // namespace ringpack

// The mask as a policy object: per tile, skip / full / partial from the ranges of segment ids and
// positions the tile holds; per element, rule (1) as an interval test (VisibleKeys), which every
// kernel applies on partial tiles.
//
// Host and device code share this header. Classification is conservative: kSkip only when no
// pair of the two tiles is visible, kFull only when every pair is visible; anything else is
// kPartial and pays per-element checks.
#pragma once

#include <cstdint>

#include "ringpack/mask.h"

namespace ringpack {

// Summary of a tile of tokens: min/max segment id and position over its real (non-padding)
// tokens, and whether it also holds padding. Ranges over real tokens only keep a tile that ends
// in padding (id 0, position 0) from overlapping every segment of the row; has_padding keeps
// such a tile from being classified full. A tile with no real token has seg_max == 0.
struct TileRange {
  int32_t seg_min;
  int32_t seg_max;
  int32_t pos_min;
  int32_t pos_max;
  int32_t has_padding;  // 1 when the tile holds padding (device ranges: or is cut by the row end)
};

enum class TileClass : int32_t { kSkip = 0, kPartial = 1, kFull = 2 };

// The range of tokens [begin, end) of one row.
RINGPACK_HOST_DEVICE TileRange make_tile_range(const int32_t* segment_ids, const int32_t* positions,
                                               int begin, int end) {
  TileRange r{INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, 0};
  for (int t = begin; t < end; ++t) {
    const int32_t s = segment_ids[t];
    const int32_t p = positions[t];
    if (s == 0) {
      r.has_padding = 1;
      continue;
    }
    r.seg_min = s < r.seg_min ? s : r.seg_min;
    r.seg_max = s > r.seg_max ? s : r.seg_max;
    r.pos_min = p < r.pos_min ? p : r.pos_min;
    r.pos_max = p > r.pos_max ? p : r.pos_max;
  }
  if (r.seg_max == INT32_MIN) r = TileRange{0, 0, 0, 0, 1};  // no real token
  return r;
}

RINGPACK_HOST_DEVICE TileClass classify_tile(const TileRange& q, const TileRange& k, bool causal,
                                             int64_t window) {
  // Segments: no common id is possible when a tile has no real token or the ranges are disjoint.
  if (q.seg_max == 0 || k.seg_max == 0) return TileClass::kSkip;
  if (q.seg_max < k.seg_min || k.seg_max < q.seg_min) return TileClass::kSkip;
  // Positions: every key after every query (causal), or every pair farther than the window.
  if (causal && k.pos_min > q.pos_max) return TileClass::kSkip;
  if (window >= 0) {
    if (int64_t(q.pos_min) - int64_t(k.pos_max) > window) return TileClass::kSkip;
    if (!causal && int64_t(k.pos_min) - int64_t(q.pos_max) > window) return TileClass::kSkip;
  }
  // Full: one segment on both sides, no padding, and every position pair allowed.
  const bool one_segment = q.seg_min == q.seg_max && k.seg_min == k.seg_max &&
                           q.seg_min == k.seg_min && !q.has_padding && !k.has_padding;
  if (!one_segment) return TileClass::kPartial;
  if (causal && k.pos_max > q.pos_min) return TileClass::kPartial;
  if (window >= 0) {
    if (int64_t(q.pos_max) - int64_t(k.pos_min) > window) return TileClass::kPartial;
    if (!causal && int64_t(k.pos_max) - int64_t(q.pos_min) > window) return TileClass::kPartial;
  }
  return TileClass::kFull;
}

RINGPACK_HOST_DEVICE TileClass classify_tile(const TileRange& q, const TileRange& k,
                                             const MaskSpec& mask) {
  return classify_tile(q, k, mask.causal, mask.window);
}

// Rule (1) for one query as an interval test: the keys it sees are those of segment `segment`
// with position in [pos_lo, pos_hi] (causal: [pos - window, pos]; non-causal: [pos - window,
// pos + window]; no window: unbounded on that side, clamped to int32). A padding query (segment
// 0) gets an empty interval. Three compares per pair instead of the rule's branches; the forward
// tests a key tile's keys against its rows' intervals, the backward (transposed) a query tile's
// intervals against its rows' keys. contains(k) == visible(q, k) for every pair
// (tests/cpu/test_tile_mask.cpp).
struct VisibleKeys {
  int32_t segment;
  int32_t pos_lo;
  int32_t pos_hi;
  RINGPACK_HOST_DEVICE bool contains(int32_t key_segment, int32_t key_pos) const {
    return key_segment == segment && key_pos >= pos_lo && key_pos <= pos_hi;
  }
};

RINGPACK_HOST_DEVICE VisibleKeys visible_keys(int32_t segment, int32_t pos, const MaskSpec& mask) {
  if (segment == 0) return {0, INT32_MAX, INT32_MIN};
  const int64_t window = mask.window;
  const int64_t lo = window >= 0 ? int64_t(pos) - window : int64_t(INT32_MIN);
  const int64_t hi = mask.causal   ? int64_t(pos)
                     : window >= 0 ? int64_t(pos) + window
                                   : int64_t(INT32_MAX);
  return {segment, int32_t(lo > int64_t(INT32_MIN) ? lo : int64_t(INT32_MIN)),
          int32_t(hi < int64_t(INT32_MAX) ? hi : int64_t(INT32_MAX))};
}

}  // namespace ringpack

// Packed batches: per-token segment ids (0 = padding) and positions (docs/design.md §1-2, §5).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ringpack {

// A batch of `batch` rows of `seq_len` tokens. Both vectors are [batch, seq_len] row-major.
struct PackedBatch {
  int batch = 0;
  int seq_len = 0;
  std::vector<int32_t> segment_ids;  // [batch, seq_len]; 0 = padding
  std::vector<int32_t> positions;    // [batch, seq_len]; index inside the document

  int32_t segment_id(int row, int token) const {
    return segment_ids[size_t(row) * seq_len + token];
  }
  int32_t position(int row, int token) const { return positions[size_t(row) * seq_len + token]; }
};

// Throws ringpack::Error unless the batch is well formed (docs/design.md §5): sizes match, ids and
// positions are non-negative, a segment id does not reappear after another segment started, and
// positions strictly increase within a segment.
void validate_batch(const PackedBatch& batch);

// Positions 0, 1, 2, ... per segment (padding tokens get 0), for rows given by segment ids only.
std::vector<int32_t> derive_positions(const std::vector<int32_t>& segment_ids, int batch,
                                      int seq_len);

// Number of segments (documents) per row, padding excluded.
std::vector<int> count_documents(const PackedBatch& batch);

}  // namespace ringpack

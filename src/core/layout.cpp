// Validation and helpers for packed batches (docs/design.md §1, §5).
#include "ringpack/layout.h"

#include <unordered_map>

#include "ringpack/error.h"

namespace ringpack {

void validate_batch(const PackedBatch& batch) {
  RINGPACK_CHECK(batch.batch >= 1, "batch must be at least 1 row (got ", batch.batch, ")");
  RINGPACK_CHECK(batch.seq_len >= 1, "seq_len must be at least 1 token (got ", batch.seq_len, ")");
  const size_t tokens = size_t(batch.batch) * size_t(batch.seq_len);
  RINGPACK_CHECK(batch.segment_ids.size() == tokens, "segment_ids hold ", batch.segment_ids.size(),
                 " values but batch x seq_len = ", batch.batch, " x ", batch.seq_len, " = ", tokens,
                 "; give one id per token");
  RINGPACK_CHECK(batch.positions.size() == tokens, "positions hold ", batch.positions.size(),
                 " values but batch x seq_len = ", tokens, "; give one position per token");

  for (int row = 0; row < batch.batch; ++row) {
    // Last token index and position seen per segment id of this row.
    struct Seen {
      int token;
      int32_t position;
    };
    std::unordered_map<int32_t, Seen> last;
    int32_t current = 0;  // the segment that started most recently (0 = none yet)
    for (int t = 0; t < batch.seq_len; ++t) {
      const int32_t id = batch.segment_id(row, t);
      const int32_t pos = batch.position(row, t);
      RINGPACK_CHECK(id >= 0, "segment id ", id, " at row ", row, ", token ", t,
                     " is negative; use 0 for padding and positive ids for documents");
      RINGPACK_CHECK(pos >= 0, "position ", pos, " at row ", row, ", token ", t,
                     " is negative; positions count tokens inside a document from 0");
      if (id == 0) continue;
      auto it = last.find(id);
      if (it == last.end()) {
        last.emplace(id, Seen{t, pos});
        current = id;
        continue;
      }
      RINGPACK_CHECK(current == id, "segment id ", id, " appears again at row ", row, ", token ", t,
                     " after segment ", current,
                     " started; each document must be one contiguous run (give it a new id)");
      RINGPACK_CHECK(it->second.token == t - 1, "segment id ", id, " appears again at row ", row,
                     ", token ", t, " after padding at token ", it->second.token + 1,
                     "; each document must be one contiguous run (give it a new id, or move the "
                     "padding after the document)");
      RINGPACK_CHECK(pos > it->second.position, "positions of segment ", id, " in row ", row,
                     " do not increase: token ", it->second.token, " has ", it->second.position,
                     ", token ", t, " has ", pos,
                     "; positions must strictly increase within a document in original order");
      it->second = Seen{t, pos};
    }
  }
}

std::vector<int32_t> derive_positions(const std::vector<int32_t>& segment_ids, int batch,
                                      int seq_len) {
  RINGPACK_CHECK(segment_ids.size() == size_t(batch) * size_t(seq_len), "segment_ids hold ",
                 segment_ids.size(),
                 " values, expected batch x seq_len = ", size_t(batch) * size_t(seq_len));
  std::vector<int32_t> positions(segment_ids.size(), 0);
  for (int row = 0; row < batch; ++row) {
    std::unordered_map<int32_t, int32_t> next;  // next position per segment id
    for (int t = 0; t < seq_len; ++t) {
      const size_t i = size_t(row) * seq_len + t;
      if (segment_ids[i] != 0) positions[i] = next[segment_ids[i]]++;
    }
  }
  return positions;
}

std::vector<int> count_documents(const PackedBatch& batch) {
  std::vector<int> documents(batch.batch, 0);
  for (int row = 0; row < batch.batch; ++row) {
    int32_t previous = 0;
    for (int t = 0; t < batch.seq_len; ++t) {
      const int32_t id = batch.segment_id(row, t);
      if (id != 0 && id != previous) ++documents[row];
      if (id != 0) previous = id;
    }
  }
  return documents;
}

}  // namespace ringpack

// Visible pairs per (query rank, key rank); the method is described in pair_count.h.
#include "core/pair_count.h"

#include <limits>

#include "ringpack/error.h"

namespace ringpack {

std::vector<int> token_ranks(const std::vector<int32_t>& index, int cp) {
  const size_t n = index.size() / size_t(cp);  // tokens per rank
  std::vector<int> rank_of(index.size());
  for (size_t slot = 0; slot < index.size(); ++slot) rank_of[index[slot]] = int(slot / n);
  return rank_of;
}

std::vector<std::vector<int64_t>> count_step_pairs(const PackedBatch& batch,
                                                   const std::vector<int>& rank_of, int cp,
                                                   const MaskSpec& mask) {
  RINGPACK_CHECK(rank_of.size() == size_t(batch.seq_len), "token_ranks has ", rank_of.size(),
                 " entries for seq_len ", batch.seq_len, " (internal error)");
  constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();
  const bool windowed = mask.window >= 0;

  std::vector<std::vector<int64_t>> pairs(cp, std::vector<int64_t>(cp, 0));
  std::vector<std::vector<int32_t>> key_positions(cp);  // [cp][tokens of the segment on rank s]
  std::vector<size_t> first(cp);                        // first key inside the interval
  std::vector<size_t> past(cp);                         // one past the last key inside it
  for (int row = 0; row < batch.batch; ++row) {
    const int32_t* ids = &batch.segment_ids[size_t(row) * batch.seq_len];
    const int32_t* pos = &batch.positions[size_t(row) * batch.seq_len];
    int begin = 0;
    while (begin < batch.seq_len) {
      const int32_t segment = ids[begin];
      if (segment == 0) {
        ++begin;
        continue;
      }
      // The segment's tokens lie in [begin, end) with only padding between them: a segment id
      // never reappears after another segment started (validate_batch).
      int end = begin + 1;
      while (end < batch.seq_len && (ids[end] == segment || ids[end] == 0)) ++end;
      for (int s = 0; s < cp; ++s) {
        key_positions[s].clear();
        first[s] = past[s] = 0;
      }
      for (int t = begin; t < end; ++t) {
        if (ids[t] == segment) key_positions[rank_of[t]].push_back(pos[t]);
      }
      // Queries in token order = increasing position, so both interval ends move forward.
      for (int t = begin; t < end; ++t) {
        if (ids[t] != segment) continue;
        const int64_t pos_q = pos[t];
        const int64_t lowest = windowed ? pos_q - mask.window : -kUnbounded;
        const int64_t highest = mask.causal ? pos_q : (windowed ? pos_q + mask.window : kUnbounded);
        std::vector<int64_t>& query_rank_pairs = pairs[rank_of[t]];
        for (int s = 0; s < cp; ++s) {
          const std::vector<int32_t>& keys = key_positions[s];
          while (first[s] < keys.size() && keys[first[s]] < lowest) ++first[s];
          while (past[s] < keys.size() && keys[past[s]] <= highest) ++past[s];
          query_rank_pairs[s] += int64_t(past[s]) - int64_t(first[s]);
        }
      }
      begin = end;
    }
  }
  return pairs;
}

}  // namespace ringpack

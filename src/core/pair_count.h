// Visible (query, key) pairs per pair of CP ranks, counted without visiting every pair
// (rule (1) of docs/design.md §2; the reorders of §3 decide which rank holds which token).
#pragma once

#include <cstdint>
#include <vector>

#include "ringpack/layout.h"
#include "ringpack/mask.h"

namespace ringpack {

// Rank that holds each original token of a row under a reorder: [seq_len], values in [0, cp).
// `index` is reorder_index(seq_len, cp, spec): slot i holds token index[i], rank i / (seq_len/cp).
std::vector<int> token_ranks(const std::vector<int32_t>& index, int cp);

// pairs[r][s] = visible pairs, summed over all rows, whose query rank r holds and whose key
// rank s holds ([cp][cp]); heads share the mask, so a pair counts once. `rank_of` is
// token_ranks(...) ([seq_len], the same reorder for every row). The batch must be valid
// (validate_batch): a segment's tokens form one run (only padding may interrupt it) and its
// positions increase in token order.
//
// Per segment, the positions of its tokens held by each rank form sorted lists; the keys a query
// sees in rank s's list are a position interval ([pos_q - window, pos_q] causal, whole segment or
// [pos_q - window, pos_q + window] non-causal) whose ends only move forward as pos_q increases,
// so two pointers per rank count them: O(tokens * cp) per row.
std::vector<std::vector<int64_t>> count_step_pairs(const PackedBatch& batch,
                                                   const std::vector<int>& rank_of, int cp,
                                                   const MaskSpec& mask);

}  // namespace ringpack

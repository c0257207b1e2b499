// Named adversarial layouts of docs/design.md §7 and random packed batches, shared by the cpu and
// gpu test binaries. A failing case prints its layout name, so the name is the repro.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ringpack/layout.h"

namespace ringpack::testing {

struct NamedLayout {
  std::string name;
  PackedBatch batch;
};

// Every adversarial layout for rows of seq_len tokens sharded over cp ranks:
// single_token_docs, doc_shorter_than_cp, doc_longer_than_shard, doc_absent_from_rank,
// tail_padding, interior_padding, all_padding_row, mixed_rows (B = 3, a different layout per
// row), one_long_document. Needs seq_len >= 2 * cp.
std::vector<NamedLayout> adversarial_layouts(int seq_len, int cp);

// Rows of random document lengths (1 .. seq_len/2) with occasional interior and tail padding.
PackedBatch random_packed_batch(int batch, int seq_len, uint64_t seed);

// Builds a batch from per-row document lengths; 0 entries are padding tokens, lengths are
// placed left to right, the remainder of each row is tail padding.
PackedBatch batch_from_lengths(const std::vector<std::vector<int>>& rows, int seq_len);

// A seed derived from the running gtest's full name.
uint64_t seed_from_test_name();

}  // namespace ringpack::testing

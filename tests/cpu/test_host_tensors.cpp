// The host side of a run against its definition (docs/design.md §3): a rank's shard is the
// reordered row cut into cp slices, and unsharding places the ranks' slices side by side and undoes
// the reorder; the random inputs drawn straight into dtype bytes are random_normal rounded.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/random.h"
#include "job/host_tensors.h"
#include "job/rank_runner.h"
#include "ringpack/reorder.h"

namespace ringpack {
namespace {

constexpr int kCp = 3;
constexpr int kRows = 2;
constexpr int kSeqLen = 2 * kCp * 6;  // legal for every reorder below

const std::vector<ReorderSpec> kReorders{{ReorderKind::kContiguous}, {ReorderKind::kDualChunkSwap},
                                         {ReorderKind::kStriped, 1}, {ReorderKind::kStriped, 2},
                                         {ReorderKind::kStriped, 3}, {ReorderKind::kStriped, 6}};

// 1-byte, odd-sized and int32 tokens, and tokens so wide that a row takes several work items.
const std::vector<size_t> kTokenBytes{1, 7, sizeof(int32_t), 300001};

HostTensor numbered_tensor(int rows, int tokens, size_t token_bytes, uint32_t salt) {
  HostTensor t(rows, tokens, token_bytes);
  uint32_t state = 2654435761u * (salt + 1);
  for (std::byte& b : t.bytes) {
    state = state * 1664525u + 1013904223u;
    b = std::byte(state >> 24);
  }
  return t;
}

// The definition: every row permuted by `index` (gather_tokens), then its tokens [shard * n,
// (shard + 1) * n).
HostTensor reordered_slice(const HostTensor& full, const std::vector<int32_t>& index, int shard,
                           int cp) {
  HostTensor reordered(full.rows, full.tokens, full.token_bytes);
  gather_tokens(full.data(), reordered.data(), index, full.rows, full.token_bytes);
  const int n = full.tokens / cp;
  HostTensor part(full.rows, n, full.token_bytes);
  const size_t part_row = size_t(n) * full.token_bytes;
  const size_t full_row = size_t(full.tokens) * full.token_bytes;
  for (int row = 0; row < full.rows; ++row) {
    std::memcpy(part.bytes.data() + row * part_row,
                reordered.bytes.data() + row * full_row + size_t(shard) * part_row, part_row);
  }
  return part;
}

// The definition of the inverse: the parts placed side by side, then permuted by the inverse of
// `index`.
HostTensor placed_and_restored(const std::vector<HostTensor>& parts,
                               const std::vector<int32_t>& index) {
  const int n = parts[0].tokens;
  const size_t token_bytes = parts[0].token_bytes;
  HostTensor placed(parts[0].rows, int(index.size()), token_bytes);
  const size_t part_row = size_t(n) * token_bytes;
  const size_t full_row = index.size() * token_bytes;
  for (size_t shard = 0; shard < parts.size(); ++shard) {
    for (int row = 0; row < placed.rows; ++row) {
      std::memcpy(placed.bytes.data() + row * full_row + shard * part_row,
                  parts[shard].bytes.data() + row * part_row, part_row);
    }
  }
  HostTensor restored(placed.rows, placed.tokens, token_bytes);
  gather_tokens(placed.data(), restored.data(), invert_index(index), placed.rows, token_bytes);
  return restored;
}

TEST(HostTensors, ShardTokensIsTheReorderedRowCutIntoSlices) {
  for (const ReorderSpec& spec : kReorders) {
    const std::vector<int32_t> index = reorder_index(kSeqLen, kCp, spec);
    for (size_t token_bytes : kTokenBytes) {
      SCOPED_TRACE(reorder_label(spec) + ", " + std::to_string(token_bytes) + "-byte tokens");
      const HostTensor full = numbered_tensor(kRows, kSeqLen, token_bytes, uint32_t(token_bytes));
      for (int shard = 0; shard < kCp; ++shard) {
        const HostTensor part = shard_tokens(full, index, shard, kCp);
        const HostTensor expected = reordered_slice(full, index, shard, kCp);
        EXPECT_EQ(part.rows, kRows);
        EXPECT_EQ(part.tokens, kSeqLen / kCp);
        EXPECT_EQ(part.token_bytes, token_bytes);
        EXPECT_TRUE(part.bytes == expected.bytes) << "shard " << shard;
      }
    }
  }
}

TEST(HostTensors, UnshardTokensPlacesTheSlicesAndUndoesTheReorder) {
  for (const ReorderSpec& spec : kReorders) {
    const std::vector<int32_t> index = reorder_index(kSeqLen, kCp, spec);
    for (size_t token_bytes : kTokenBytes) {
      SCOPED_TRACE(reorder_label(spec) + ", " + std::to_string(token_bytes) + "-byte tokens");
      std::vector<HostTensor> parts;
      std::vector<const HostTensor*> pointers;
      for (int shard = 0; shard < kCp; ++shard) {
        parts.push_back(numbered_tensor(kRows, kSeqLen / kCp, token_bytes, uint32_t(shard)));
      }
      for (const HostTensor& part : parts) pointers.push_back(&part);
      const HostTensor full = unshard_tokens(pointers, index);
      EXPECT_EQ(full.rows, kRows);
      EXPECT_EQ(full.tokens, kSeqLen);
      EXPECT_EQ(full.token_bytes, token_bytes);
      EXPECT_TRUE(full.bytes == placed_and_restored(parts, index).bytes);
      // And the round trip: sharding the result gives the parts back.
      for (int shard = 0; shard < kCp; ++shard) {
        EXPECT_TRUE(shard_tokens(full, index, shard, kCp).bytes == parts[size_t(shard)].bytes)
            << "shard " << shard;
      }
    }
  }
}

TEST(HostTensors, MakeShardsCutsEveryInputAndTheLayout) {
  PackedBatch batch;
  batch.batch = kRows;
  batch.seq_len = kSeqLen;
  for (int row = 0; row < kRows; ++row) {
    for (int t = 0; t < kSeqLen; ++t) {  // documents of 5 + row tokens
      batch.segment_ids.push_back(1 + t / (5 + row));
      batch.positions.push_back(t % (5 + row));
    }
  }
  BatchOptions options;
  options.num_heads_q = 4;
  options.num_heads_kv = 2;
  options.head_dim = 8;
  options.dtype = DType::kBF16;
  options.seed = 5;
  const RowTensors row = draw_row_inputs(batch, options);
  HostTensor ids(kRows, kSeqLen, sizeof(int32_t)), pos(kRows, kSeqLen, sizeof(int32_t));
  std::memcpy(ids.data(), batch.segment_ids.data(), ids.size_bytes());
  std::memcpy(pos.data(), batch.positions.data(), pos.size_bytes());
  ReorderAnalysis analysis;
  analysis.step_pairs.assign(kCp, std::vector<int64_t>(kCp, 0));
  analysis.step_pairs[1][2] = 7;
  for (const ReorderSpec& spec : kReorders) {
    SCOPED_TRACE(reorder_label(spec));
    const std::vector<int32_t> index = reorder_index(kSeqLen, kCp, spec);
    const std::vector<RankShard> shards = make_shards(batch, row, index, kCp, analysis);
    ASSERT_EQ(shards.size(), size_t(kCp));
    for (int r = 0; r < kCp; ++r) {
      const RankShard& shard = shards[size_t(r)];
      EXPECT_TRUE(shard.q.bytes == reordered_slice(row.q, index, r, kCp).bytes);
      EXPECT_TRUE(shard.k.bytes == reordered_slice(row.k, index, r, kCp).bytes);
      EXPECT_TRUE(shard.v.bytes == reordered_slice(row.v, index, r, kCp).bytes);
      EXPECT_TRUE(shard.dout.bytes == reordered_slice(row.dout, index, r, kCp).bytes);
      EXPECT_TRUE(shard.segment_ids.bytes == reordered_slice(ids, index, r, kCp).bytes);
      EXPECT_TRUE(shard.positions.bytes == reordered_slice(pos, index, r, kCp).bytes);
      EXPECT_EQ(shard.step_visible, (std::vector<bool>{false, false, r == 1}));
    }
  }
}

TEST(HostTensors, RandomNormalBytesIsRandomNormalRounded) {
  const size_t count = (size_t(5) << 19) + 3;  // two whole blocks of 2^20 values, an odd rest
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    EXPECT_TRUE(random_normal_bytes(count, 11, dtype) ==
                to_dtype_bytes(random_normal(count, 11), dtype));
  }
}

}  // namespace
}  // namespace ringpack

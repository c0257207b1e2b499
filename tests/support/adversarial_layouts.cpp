// Named adversarial layouts (docs/design.md §7).
#include "support/adversarial_layouts.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>

namespace ringpack::testing {

PackedBatch batch_from_lengths(const std::vector<std::vector<int>>& rows, int seq_len) {
  PackedBatch batch;
  batch.batch = int(rows.size());
  batch.seq_len = seq_len;
  batch.segment_ids.assign(size_t(batch.batch) * seq_len, 0);
  batch.positions.assign(size_t(batch.batch) * seq_len, 0);
  for (int row = 0; row < batch.batch; ++row) {
    int t = 0;
    int32_t id = 0;
    for (int length : rows[row]) {
      if (length == 0) {  // one padding token
        ++t;
        continue;
      }
      ++id;
      for (int p = 0; p < length && t < seq_len; ++p, ++t) {
        batch.segment_ids[size_t(row) * seq_len + t] = id;
        batch.positions[size_t(row) * seq_len + t] = p;
      }
    }
  }
  validate_batch(batch);
  return batch;
}

std::vector<NamedLayout> adversarial_layouts(int seq_len, int cp) {
  const int shard = seq_len / cp;
  std::vector<NamedLayout> layouts;
  auto add = [&](std::string name, std::vector<std::vector<int>> rows) {
    layouts.push_back({std::move(name), batch_from_lengths(rows, seq_len)});
  };

  add("single_token_docs", {std::vector<int>(seq_len, 1)});

  std::vector<int> short_docs;  // documents of cp-1 tokens (1 when cp = 1), then the rest
  for (int used = 0; used < seq_len;) {
    const int length = std::min(std::max(cp - 1, 1), seq_len - used);
    short_docs.push_back(length);
    used += length;
  }
  add("doc_shorter_than_cp", {short_docs});

  const int long_doc = std::min(seq_len, shard + shard / 2 + 1);
  add("doc_longer_than_shard", {{long_doc, seq_len - long_doc}});

  // A 2-token document first: contiguous and striped layouts leave most ranks without it.
  add("doc_absent_from_rank", {{std::min(2, seq_len), seq_len - std::min(2, seq_len)}});

  add("tail_padding", {{seq_len / 2}});

  std::vector<int> interior{seq_len / 4};
  for (int i = 0; i < 3; ++i) interior.push_back(0);
  interior.push_back(seq_len / 4);
  interior.push_back(0);
  interior.push_back(seq_len / 8 + 1);
  add("interior_padding", {interior});

  add("all_padding_row", {{}});

  add("mixed_rows", {{3, 1, seq_len / 3, 0, 0, seq_len / 4}, {}, {seq_len}});

  add("one_long_document", {{seq_len}});
  return layouts;
}

PackedBatch random_packed_batch(int batch, int seq_len, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int>> rows(batch);
  const uint64_t max_length = std::max(1, seq_len / 2);
  for (auto& lengths : rows) {
    int used = 0;
    while (used < seq_len) {
      if (rng() % 8 == 0) {  // an interior padding token now and then
        lengths.push_back(0);
        ++used;
        continue;
      }
      const int length = int(std::min<uint64_t>(1 + rng() % max_length, seq_len - used));
      lengths.push_back(length);
      used += length;
    }
    if (rng() % 2 == 0 && lengths.size() > 1) lengths.pop_back();  // leaves tail padding
  }
  return batch_from_lengths(rows, seq_len);
}

uint64_t seed_from_test_name() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = "no-test";
  if (info != nullptr) name = std::string(info->test_suite_name()) + "." + info->name();
  // FNV-1a: the same seed on every standard library (std::hash is not portable).
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : name) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

}  // namespace ringpack::testing

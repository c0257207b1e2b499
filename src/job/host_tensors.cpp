// Host tensors: sharding and unsharding through the reorder.
#include "job/host_tensors.h"

#include <algorithm>
#include <cstring>

#include "core/parallel_for.h"
#include "ringpack/error.h"

namespace ringpack {
namespace {

// Tokens that one work item copies: about 1 MiB, at least one token.
int tokens_per_item(size_t token_bytes) {
  return int(std::max<size_t>(1, (size_t(1) << 20) / std::max<size_t>(1, token_bytes)));
}

// Runs copy(row, begin, end) over tokens [begin, end) of every row of a [rows, tokens] tensor, in
// blocks of tokens_per_item, on buffer_threads() threads.
template <class Copy>
void for_token_blocks(int rows, int tokens, size_t token_bytes, const Copy& copy) {
  const int per_item = tokens_per_item(token_bytes);
  const int items_per_row = (tokens + per_item - 1) / per_item;
  parallel_for(int64_t(rows) * items_per_row, buffer_threads(), [&](int64_t item) {
    const int row = int(item / items_per_row);
    const int begin = int(item % items_per_row) * per_item;
    copy(row, begin, std::min(tokens, begin + per_item));
  });
}

std::byte* token_at(HostTensor& t, int row, int token) {
  return t.bytes.data() + (size_t(row) * t.tokens + size_t(token)) * t.token_bytes;
}

const std::byte* token_at(const HostTensor& t, int row, int token) {
  return t.bytes.data() + (size_t(row) * t.tokens + size_t(token)) * t.token_bytes;
}

}  // namespace

HostTensor shard_tokens(const HostTensor& full, const std::vector<int32_t>& index, int shard,
                        int cp) {
  RINGPACK_CHECK(index.size() == size_t(full.tokens), "a reorder index of ", index.size(),
                 " tokens for rows of ", full.tokens);
  const int n = full.tokens / cp;
  HostTensor part(full.rows, n, full.token_bytes);
  const int32_t* original = index.data() + size_t(shard) * n;
  for_token_blocks(part.rows, n, part.token_bytes, [&](int row, int begin, int end) {
    for (int t = begin; t < end; ++t) {
      std::memcpy(token_at(part, row, t), token_at(full, row, original[t]), part.token_bytes);
    }
  });
  return part;
}

HostTensor unshard_tokens(const std::vector<const HostTensor*>& parts,
                          const std::vector<int32_t>& index) {
  const HostTensor& first = *parts.front();
  const int n = first.tokens;
  RINGPACK_CHECK(index.size() == parts.size() * size_t(n), "a reorder index of ", index.size(),
                 " tokens for ", parts.size(), " shards of ", n);
  HostTensor full(first.rows, int(index.size()), first.token_bytes);
  for (size_t shard = 0; shard < parts.size(); ++shard) {
    const HostTensor& part = *parts[shard];
    RINGPACK_CHECK(
        part.rows == first.rows && part.tokens == n && part.token_bytes == first.token_bytes,
        "shard ", shard, " is not shaped like shard 0");
    const int32_t* original = index.data() + shard * n;
    for_token_blocks(part.rows, n, part.token_bytes, [&](int row, int begin, int end) {
      for (int t = begin; t < end; ++t) {
        std::memcpy(token_at(full, row, original[t]), token_at(part, row, t), part.token_bytes);
      }
    });
  }
  return full;
}

}  // namespace ringpack

// Host-side tensors of a run: random inputs, reordering into shards and back (docs/design.md §3).
//
// A HostTensor is a flat byte buffer of `rows` rows, each of `tokens` tokens of `token_bytes`
// bytes: BSHD tensors have rows = batch and token_bytes = heads * head_dim * dtype size; LSE
// [batch, heads, tokens] has rows = batch * heads and token_bytes = 4.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ringpack/dtype.h"

namespace ringpack {

struct HostTensor {
  int rows = 0;
  int tokens = 0;
  size_t token_bytes = 0;
  std::vector<std::byte> bytes;  // [rows, tokens, token_bytes]

  HostTensor() = default;
  HostTensor(int rows_, int tokens_, size_t token_bytes_)
      : rows(rows_),
        tokens(tokens_),
        token_bytes(token_bytes_),
        bytes(size_t(rows_) * tokens_ * token_bytes_) {}
  void* data() { return bytes.data(); }
  const void* data() const { return bytes.data(); }
  size_t size_bytes() const { return bytes.size(); }
};

// `count` values of `dtype` drawn from N(0, 1) (then rounded to dtype) by a portable generator.
std::vector<std::byte> random_normal(size_t count, DType dtype, uint64_t seed);

// Tokens [shard * n, (shard + 1) * n) of every row, as a [rows, n, token_bytes] tensor.
HostTensor slice_tokens(const HostTensor& full, int shard, int n);
// The inverse: writes `part` into tokens [shard * n, (shard + 1) * n) of every row of `full`.
void place_tokens(const HostTensor& part, int shard, HostTensor& full);
// Every row's tokens permuted by `index` (dst[i] = src[index[i]]), see gather_tokens.
HostTensor permute_tokens(const HostTensor& full, const std::vector<int32_t>& index);

}  // namespace ringpack

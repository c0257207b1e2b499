// HostTensor: a tensor in host memory, the one type for the inputs and results that the job, the
// benchmark and the tests keep on the host. Its bytes are `rows` rows of `tokens` tokens of
// `token_bytes` bytes each: BSHD tensors have rows = batch and token_bytes = heads * head_dim *
// dtype size; LSE [batch, heads, tokens] has rows = batch * heads and token_bytes = 4; a flat
// tensor of n elements is one row of n tokens of one element.
#pragma once

#include <cstddef>
#include <vector>

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

}  // namespace ringpack

// Host tensors: token slicing, placing and permutation.
#include "job/host_tensors.h"

#include <cstring>

#include "ringpack/reorder.h"

namespace ringpack {

HostTensor slice_tokens(const HostTensor& full, int shard, int n) {
  HostTensor part(full.rows, n, full.token_bytes);
  const size_t part_row = size_t(n) * full.token_bytes;
  const size_t full_row = size_t(full.tokens) * full.token_bytes;
  for (int row = 0; row < full.rows; ++row) {
    std::memcpy(part.bytes.data() + row * part_row,
                full.bytes.data() + row * full_row + size_t(shard) * part_row, part_row);
  }
  return part;
}

void place_tokens(const HostTensor& part, int shard, HostTensor& full) {
  const size_t part_row = size_t(part.tokens) * part.token_bytes;
  const size_t full_row = size_t(full.tokens) * full.token_bytes;
  for (int row = 0; row < full.rows; ++row) {
    std::memcpy(full.bytes.data() + row * full_row + size_t(shard) * part_row,
                part.bytes.data() + row * part_row, part_row);
  }
}

HostTensor permute_tokens(const HostTensor& full, const std::vector<int32_t>& index) {
  HostTensor out(full.rows, full.tokens, full.token_bytes);
  gather_tokens(full.data(), out.data(), index, full.rows, full.token_bytes);
  return out;
}

}  // namespace ringpack

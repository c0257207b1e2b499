// Host tensors: a portable normal generator and token slicing/permutation.
#include "job/host_tensors.h"

#include <cmath>
#include <cstring>
#include <numbers>
#include <random>

#include "ringpack/reorder.h"

namespace ringpack {

std::vector<std::byte> random_normal(size_t count, DType dtype, uint64_t seed) {
  // Box-Muller on mt19937_64 bits: std::normal_distribution differs between standard libraries.
  std::mt19937_64 rng(seed);
  constexpr double kTwoToMinus53 = 1.0 / 9007199254740992.0;
  auto uniform = [&] { return (double(rng() >> 11) + 0.5) * kTwoToMinus53; };  // in (0, 1)
  std::vector<std::byte> bytes(count * dtype_size(dtype));
  for (size_t i = 0; i < count; i += 2) {
    const double radius = std::sqrt(-2.0 * std::log(uniform()));
    const double angle = 2.0 * std::numbers::pi * uniform();
    store_element(bytes.data(), dtype, i, float(radius * std::cos(angle)));
    if (i + 1 < count) store_element(bytes.data(), dtype, i + 1, float(radius * std::sin(angle)));
  }
  return bytes;
}

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

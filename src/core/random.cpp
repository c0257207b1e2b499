// Portable random inputs (random.h).
#include "core/random.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>

#include "core/parallel_for.h"

namespace ringpack {

std::vector<float> random_uniform(size_t count, uint64_t seed, float lo, float hi) {
  constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;  // spreads nearby seeds apart
  constexpr double kTwoToMinus53 = 1.0 / 9007199254740992.0;
  uint64_t state = seed * kGolden + 1;  // never 0, the fixed point of xorshift
  std::vector<float> values(count);
  for (float& x : values) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    const double unit = double(state >> 11) * kTwoToMinus53;  // in [0, 1)
    x = float(double(lo) + double(hi - lo) * unit);
  }
  return values;
}

namespace {

// Values of random_normal come in blocks of this many, each from its own generator, so that
// threads can draw them and the values do not depend on the number of threads.
constexpr size_t kNormalBlock = size_t(1) << 20;

uint64_t block_seed(uint64_t seed, uint64_t block) {  // SplitMix64 of (seed, block)
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (block + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Calls store(i, value) with `count` values from N(0, 1) drawn from `seed`, in order.
template <class Store>
void draw_normal(size_t count, uint64_t seed, const Store& store) {
  std::mt19937_64 rng(seed);
  constexpr double kTwoToMinus53 = 1.0 / 9007199254740992.0;
  auto uniform = [&] { return (double(rng() >> 11) + 0.5) * kTwoToMinus53; };  // in (0, 1)
  for (size_t i = 0; i < count; i += 2) {
    const double radius = std::sqrt(-2.0 * std::log(uniform()));
    const double angle = 2.0 * std::numbers::pi * uniform();
    store(i, float(radius * std::cos(angle)));
    if (i + 1 < count) store(i + 1, float(radius * std::sin(angle)));
  }
}

}  // namespace

std::vector<float> random_normal(size_t count, uint64_t seed) {
  std::vector<float> values(count);
  parallel_for_blocks(count, kNormalBlock, [&](size_t begin, size_t end, uint64_t block) {
    draw_normal(end - begin, block_seed(seed, block),
                [&](size_t i, float value) { values[begin + i] = value; });
  });
  return values;
}

std::vector<std::byte> random_normal_bytes(size_t count, uint64_t seed, DType dtype) {
  std::vector<std::byte> bytes(count * dtype_size(dtype));
  parallel_for_blocks(count, kNormalBlock, [&](size_t begin, size_t end, uint64_t block) {
    draw_normal(end - begin, block_seed(seed, block), [&](size_t i, float value) {
      store_element(bytes.data(), dtype, begin + i, value);
    });
  });
  return bytes;
}

std::vector<std::byte> to_dtype_bytes(const std::vector<float>& values, DType dtype) {
  std::vector<std::byte> bytes(values.size() * dtype_size(dtype));
  parallel_for_blocks(values.size(), kNormalBlock, [&](size_t begin, size_t end, uint64_t) {
    for (size_t i = begin; i < end; ++i) store_element(bytes.data(), dtype, i, values[i]);
  });
  return bytes;
}

}  // namespace ringpack

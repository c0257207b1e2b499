// Portable random inputs (random.h).
#include "core/random.h"

#include <cmath>
#include <numbers>
#include <random>

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

std::vector<float> random_normal(size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  constexpr double kTwoToMinus53 = 1.0 / 9007199254740992.0;
  auto uniform = [&] { return (double(rng() >> 11) + 0.5) * kTwoToMinus53; };  // in (0, 1)
  std::vector<float> values(count);
  for (size_t i = 0; i < count; i += 2) {
    const double radius = std::sqrt(-2.0 * std::log(uniform()));
    const double angle = 2.0 * std::numbers::pi * uniform();
    values[i] = float(radius * std::cos(angle));
    if (i + 1 < count) values[i + 1] = float(radius * std::sin(angle));
  }
  return values;
}

std::vector<std::byte> to_dtype_bytes(const std::vector<float>& values, DType dtype) {
  std::vector<std::byte> bytes(values.size() * dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) store_element(bytes.data(), dtype, i, values[i]);
  return bytes;
}

}  // namespace ringpack

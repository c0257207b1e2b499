// Random inputs of the job, the benchmark and the tests, from portable generators: a seed gives
// the same values with every compiler and standard library (std::*_distribution do not promise
// that), so a failure reproduces from its seed anywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ringpack/dtype.h"

namespace ringpack {

// `count` values uniform in [lo, hi): a xorshift64 stream, fast enough for the 2^28-element
// inputs of the benchmark.
std::vector<float> random_uniform(size_t count, uint64_t seed, float lo = -1.0f, float hi = 1.0f);

// `count` values from N(0, 1): Box-Muller on mt19937_64 bits.
std::vector<float> random_normal(size_t count, uint64_t seed);

// to_dtype_bytes(random_normal(count, seed), dtype), without the fp32 copy in between.
std::vector<std::byte> random_normal_bytes(size_t count, uint64_t seed, DType dtype);

// `values` rounded to `dtype` (to nearest even), as the bytes of a tensor of that dtype.
std::vector<std::byte> to_dtype_bytes(const std::vector<float>& values, DType dtype);

}  // namespace ringpack

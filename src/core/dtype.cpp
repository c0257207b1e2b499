// Host conversions between float and the 16-bit storage types.
#include "ringpack/dtype.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "core/excerpt.h"
#include "ringpack/error.h"

namespace ringpack {

size_t dtype_size(DType dtype) {
  return dtype == DType::kF32 ? 4 : 2;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "fp32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "fp16";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  if (name == "fp32" || name == "float32" || name == "f32") return DType::kF32;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "fp16" || name == "float16" || name == "f16") return DType::kF16;
  RINGPACK_FAIL("unknown dtype '", excerpt(name), "': use fp32, bf16 or fp16");
}

float bf16_to_float(uint16_t bits) {
  return std::bit_cast<float>(uint32_t(bits) << 16);
}

uint16_t float_to_bf16(float value) {
  const uint32_t u = std::bit_cast<uint32_t>(value);
  if (std::isnan(value)) return uint16_t((u >> 16) | 0x40);  // keep it a quiet NaN
  const uint32_t rounding_bias = 0x7FFF + ((u >> 16) & 1);   // round to nearest even
  return uint16_t((u + rounding_bias) >> 16);
}

float fp16_to_float(uint16_t bits) {
  const uint32_t sign = uint32_t(bits & 0x8000) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1F;
  const uint32_t mantissa = bits & 0x3FF;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float magnitude = std::ldexp(float(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t float_to_fp16(float value) {
  const uint32_t u = std::bit_cast<uint32_t>(value);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000);
  const float magnitude = std::fabs(value);
  if (std::isnan(value)) return uint16_t(sign | 0x7E00);
  if (magnitude >= 65520.0f) return uint16_t(sign | 0x7C00);  // rounds to infinity
  if (magnitude < 6.103515625e-05f) {                         // subnormal: multiples of 2^-24
    return uint16_t(sign | uint16_t(std::nearbyint(std::ldexp(magnitude, 24))));
  }
  const uint32_t m = std::bit_cast<uint32_t>(magnitude);
  const uint32_t rounding_bias = 0xFFF + ((m >> 13) & 1);  // round to nearest even at bit 13
  const uint32_t rounded = m + rounding_bias;
  return uint16_t(sign | (((rounded >> 23) - 112) << 10) | ((rounded >> 13) & 0x3FF));
}

float load_element(const void* data, DType dtype, size_t i) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(data)[i];
    case DType::kBF16:
      return bf16_to_float(static_cast<const uint16_t*>(data)[i]);
    case DType::kF16:
      return fp16_to_float(static_cast<const uint16_t*>(data)[i]);
  }
  return 0.0f;
}

void store_element(void* data, DType dtype, size_t i, float value) {
  switch (dtype) {
    case DType::kF32:
      static_cast<float*>(data)[i] = value;
      return;
    case DType::kBF16:
      static_cast<uint16_t*>(data)[i] = float_to_bf16(value);
      return;
    case DType::kF16:
      static_cast<uint16_t*>(data)[i] = float_to_fp16(value);
      return;
  }
}

float round_to(DType dtype, float value) {
  switch (dtype) {
    case DType::kF32:
      return value;
    case DType::kBF16:
      return bf16_to_float(float_to_bf16(value));
    case DType::kF16:
      return fp16_to_float(float_to_fp16(value));
  }
  return value;
}

}  // namespace ringpack

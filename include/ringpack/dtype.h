// Element types of Q/K/V/O/dO and host conversions between them and float.
//
// bf16 and fp16 are stored as uint16_t bit patterns; float -> bf16/fp16 rounds to nearest even.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ringpack {

enum class DType : uint8_t { kF32, kBF16, kF16 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);       // "fp32", "bf16", "fp16"
DType parse_dtype(std::string_view name);  // accepts the names above and float32/bfloat16/float16

float bf16_to_float(uint16_t bits);
uint16_t float_to_bf16(float value);
float fp16_to_float(uint16_t bits);
uint16_t float_to_fp16(float value);

// Element i of a buffer of `dtype`, widened to float / narrowed from float.
float load_element(const void* data, DType dtype, size_t i);
void store_element(void* data, DType dtype, size_t i, float value);

// value rounded to `dtype` and back (identity for fp32).
float round_to(DType dtype, float value);

}  // namespace ringpack

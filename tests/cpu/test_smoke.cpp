#include <gtest/gtest.h>
#include "ringpack/dtype.h"
TEST(DType, Bf16RoundTrip) { EXPECT_EQ(ringpack::round_to(ringpack::DType::kBF16, 1.0f), 1.0f); }

#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ds {

TEST(DType, Bf16RoundTripIsExactForBf16Values) {
  for (uint32_t v = 0; v < 0x10000; v += 7) {
    uint16_t b = static_cast<uint16_t>(v);
    float f = bf16_to_f32(b);
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_bf16(f), b) << v;
  }
}

TEST(DType, F16RoundTripIsExactForF16Values) {
  for (uint32_t v = 0; v < 0x10000; ++v) {
    uint16_t h = static_cast<uint16_t>(v);
    float f = f16_to_f32(h);
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h) << v;
  }
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256.0f), f32_to_bf16(1.0f));  // tie -> even
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3.0f / 256.0f)), 1.0f + 4.0f / 256.0f);
  EXPECT_EQ(f16_to_f32(f32_to_f16(65504.0f)), 65504.0f);
}

}  // namespace ds

// FP16 / BF16 conversions: edge cases against IEEE 754 facts, and an exhaustive round trip.
#include <npurt/numeric.hpp>

#include <catch2/catch_test_macros.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

using npurt::bfloat16;
using npurt::half;

namespace {

constexpr float inf = std::numeric_limits<float>::infinity();

std::uint16_t hb(float f) { return half(f).bits(); }
std::uint16_t bb(float f) { return bfloat16(f).bits(); }

// Independent oracle: the nearest binary16 by search over all finite halves (ties to the even
// encoding), computed in double. Slow but obviously right.
std::uint16_t nearest_half_by_search(float f) {
  const double x = f;
  if (std::isnan(x)) return 0x7e00;
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double ax = std::fabs(x);
  if (ax >= 65520.0) return sign | 0x7c00;
  std::uint16_t best = 0;
  double best_err = std::numeric_limits<double>::infinity();
  for (std::uint32_t b = 0; b <= 0x7bff; ++b) {
    const double v = npurt::numeric::half_bits_to_float(static_cast<std::uint16_t>(b));
    const double err = std::fabs(v - ax);
    if (err < best_err || (err == best_err && (b & 1u) == 0)) {
      best_err = err;
      best = static_cast<std::uint16_t>(b);
    }
  }
  return sign | best;
}

}  // namespace

TEST_CASE("half converts exact values, infinities and NaN as IEEE binary16 says", "[kernels][numeric]") {
  CHECK(hb(0.0f) == 0x0000);
  CHECK(hb(-0.0f) == 0x8000);
  CHECK(hb(1.0f) == 0x3c00);
  CHECK(hb(-2.0f) == 0xc000);
  CHECK(hb(65504.0f) == 0x7bff);
  CHECK(hb(inf) == 0x7c00);
  CHECK(hb(-inf) == 0xfc00);
  CHECK(half(std::numeric_limits<float>::quiet_NaN()).is_nan());
  CHECK(half(-std::numeric_limits<float>::quiet_NaN()).is_nan());
  // A signalling NaN whose payload sits only in the low float bits must not become infinity.
  CHECK(half(std::bit_cast<float>(0x7f800001u)).is_nan());
  CHECK(std::isnan(half::quiet_nan().to_float()));
  CHECK(half::from_bits(0x7c00).to_float() == inf);
  CHECK(half::max().to_float() == 65504.0f);
  CHECK(half::min_normal().to_float() == std::ldexp(1.0f, -14));
  CHECK(half::denorm_min().to_float() == std::ldexp(1.0f, -24));
  CHECK(half::epsilon().to_float() == std::ldexp(1.0f, -10));
}

TEST_CASE("half rounds to nearest with ties to even, including at overflow", "[kernels][numeric]") {
  // Between 1 and 1 + 2^-10: the midpoint ties to the even mantissa (1.0).
  CHECK(hb(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);
  // Between 1 + 2^-10 (odd) and 1 + 2^-9 (even): the midpoint goes up.
  CHECK(hb(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
  // Just above the midpoint goes up, just below goes down.
  CHECK(hb(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)) == 0x3c01);
  CHECK(hb(std::nextafter(1.0f + std::ldexp(1.0f, -11), 0.0f)) == 0x3c00);
  // 65504 is the largest half; 65520 is the midpoint to 2^16 and rounds (to even) to inf.
  CHECK(hb(65519.996f) == 0x7bff);
  CHECK(hb(65520.0f) == 0x7c00);
  CHECK(hb(-65520.0f) == 0xfc00);
  CHECK(hb(1e10f) == 0x7c00);
  // Mantissa carry into the exponent: 2047.9 rounds to 2048.
  CHECK(hb(2047.9f) == 0x6800);
}

TEST_CASE("half handles subnormals and underflow to signed zero", "[kernels][numeric]") {
  const float tiny = std::ldexp(1.0f, -24);  // smallest subnormal half
  CHECK(hb(tiny) == 0x0001);
  CHECK(hb(-tiny) == 0x8001);
  CHECK(hb(3 * tiny) == 0x0003);
  CHECK(hb(1023 * tiny) == 0x03ff);            // largest subnormal
  CHECK(hb(1023.5f * tiny) == 0x0400);         // tie between 0x3ff (odd) and 0x400: up, to the first normal
  CHECK(hb(2.5f * tiny) == 0x0002);            // tie to even
  CHECK(hb(3.5f * tiny) == 0x0004);            // tie to even
  CHECK(hb(0.5f * tiny) == 0x0000);            // exactly half the smallest subnormal: ties to 0
  CHECK(hb(std::nextafter(0.5f * tiny, 1.0f)) == 0x0001);
  CHECK(hb(-0.25f * tiny) == 0x8000);          // underflow keeps the sign
  CHECK(hb(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(half::from_bits(0x0001).is_subnormal());
  CHECK(half::from_bits(0x0003).to_float() == 3 * tiny);
  CHECK(half::from_bits(0x83ff).to_float() == -1023 * tiny);
}

TEST_CASE("every finite half survives a round trip through float", "[kernels][numeric]") {
  for (std::uint32_t b = 0; b <= 0xffff; ++b) {
    const auto h = half::from_bits(static_cast<std::uint16_t>(b));
    if (h.is_nan()) {
      REQUIRE(std::isnan(h.to_float()));
      REQUIRE(half(h.to_float()).is_nan());
      continue;
    }
    REQUIRE(half(h.to_float()).bits() == b);
  }
}

TEST_CASE("float to half agrees with a nearest-value search on midpoints and neighbours", "[kernels][numeric]") {
  // For a spread of halves, the exact midpoint to the next half and the floats next to it.
  for (std::uint32_t b = 0; b < 0x7bff; b += 97) {
    const double lo = npurt::numeric::half_bits_to_float(static_cast<std::uint16_t>(b));
    const double hi = npurt::numeric::half_bits_to_float(static_cast<std::uint16_t>(b + 1));
    const auto mid = static_cast<float>((lo + hi) / 2);  // exact: halves have 11 significant bits
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, inf), -mid}) {
      REQUIRE(hb(f) == nearest_half_by_search(f));
    }
  }
}

TEST_CASE("bfloat16 rounds to nearest even and keeps inf and NaN", "[kernels][numeric]") {
  CHECK(bb(1.0f) == 0x3f80);
  CHECK(bb(-0.0f) == 0x8000);
  CHECK(bb(inf) == 0x7f80);
  CHECK(bb(-inf) == 0xff80);
  CHECK(bfloat16(std::numeric_limits<float>::quiet_NaN()).is_nan());
  CHECK(bfloat16(std::bit_cast<float>(0x7f800001u)).is_nan());  // low-payload NaN stays NaN
  // 1 + 2^-8 is the midpoint between 1 and 1 + 2^-7: ties to even (1.0).
  CHECK(bb(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);
  // 1 + 3*2^-8 is the midpoint between 1 + 2^-7 (odd) and 1 + 2^-6: up.
  CHECK(bb(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);
  CHECK(bb(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)) == 0x3f81);
  // The largest float rounds up to infinity (its dropped bits are above the midpoint).
  CHECK(bb(std::numeric_limits<float>::max()) == 0x7f80);
  CHECK(bfloat16::max().to_float() == std::bit_cast<float>(0x7f7f0000u));
  // Subnormal floats stay subnormal bfloat16s (no flush to zero).
  CHECK(bb(std::bit_cast<float>(0x00010000u)) == 0x0001);
  CHECK(bb(std::bit_cast<float>(0x00018000u)) == 0x0002);  // tie, odd -> up to even
  CHECK(bb(std::bit_cast<float>(0x00008000u)) == 0x0000);  // tie, even -> down
  for (std::uint32_t b = 0; b <= 0xffff; ++b) {
    const auto v = bfloat16::from_bits(static_cast<std::uint16_t>(b));
    if (v.is_nan()) continue;
    REQUIRE(bfloat16(v.to_float()).bits() == b);
  }
}

TEST_CASE("conversions are usable at compile time", "[kernels][numeric]") {
  static_assert(half(1.0f).bits() == 0x3c00);
  static_assert(half::from_bits(0x3555).to_float() > 0.333f);
  static_assert(bfloat16(3.0f).bits() == 0x4040);
  static_assert(npurt::round_to_half(0.1f) != 0.1f);
  SUCCEED();
}

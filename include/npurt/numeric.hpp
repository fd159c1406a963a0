// npurt/numeric.hpp — the 16-bit floating-point types the NPU computes in: IEEE binary16
// (`half`) and bfloat16, with exact round-to-nearest-even conversions from float.
//
// Conversions are integer bit manipulation, not hardware instructions or compiler builtins
// (_Float16, F16C), so they give the same bits on every host and at compile time. NaN stays
// NaN (quieted, sign and top payload bits kept); overflow rounds to infinity as IEEE says;
// values below half's subnormal range round to signed zero.
#pragma once

#include <npurt/config.hpp>

#include <bit>
#include <cstdint>

namespace npurt {
namespace numeric {

/// float -> binary16 bits, round to nearest, ties to even.
constexpr std::uint16_t float_to_half_bits(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  std::uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {
    if (ax == 0x7f800000u) return sign | 0x7c00u;
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  }
  // 65520 is the midpoint between 65504 (max half, odd mantissa) and 2^16: ties go up to inf.
  if (ax >= 0x477ff000u) return sign | 0x7c00u;
  if (ax >= 0x38800000u) {  // normal half: >= 2^-14
    // Rebias the exponent and round the 13 dropped mantissa bits; a carry into the exponent
    // is the correct result (it cannot reach inf: that case was handled above).
    ax += 0xfffu + ((ax >> 13) & 1u);
    ax -= (127u - 15u) << 23;
    return static_cast<std::uint16_t>(sign | (ax >> 13));
  }
  // Subnormal half (or zero): result = round(value / 2^-24).
  const std::uint32_t e = ax >> 23;
  if (e < 102u) return sign;  // below 2^-25: rounds to zero (2^-25 exactly is a tie to 0)
  const std::uint32_t m = (ax & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126u - e;  // 14..24
  std::uint32_t q = m >> shift;
  const std::uint32_t rem = m & ((1u << shift) - 1u);
  const std::uint32_t halfway = 1u << (shift - 1u);
  if (rem > halfway || (rem == halfway && (q & 1u))) ++q;  // q == 0x400 is the smallest normal
  return static_cast<std::uint16_t>(sign | q);
}

/// binary16 bits -> float (exact).
constexpr float half_bits_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t e = (h >> 10) & 0x1fu;
  std::uint32_t m = h & 0x3ffu;
  if (e == 0x1fu) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    if (m == 0) return std::bit_cast<float>(sign);
    e = 127u - 14u;
    while ((m & 0x400u) == 0) {
      m <<= 1;
      --e;
    }
    return std::bit_cast<float>(sign | (e << 23) | ((m & 0x3ffu) << 13));
  }
  return std::bit_cast<float>(sign | ((e + 112u) << 23) | (m << 13));
}

/// float -> bfloat16 bits, round to nearest, ties to even (overflow rounds to inf).
constexpr std::uint16_t float_to_bfloat16_bits(float f) noexcept {
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>(x >> 16);
}

/// bfloat16 bits -> float (exact).
constexpr float bfloat16_bits_to_float(std::uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

}  // namespace numeric

/// IEEE 754 binary16: 1 sign, 5 exponent, 10 mantissa bits. A value type of exactly two bytes,
/// so a std::vector<half> is the host image of an FP16 device tensor.
class half {
 public:
  constexpr half() noexcept = default;
  constexpr explicit half(float f) noexcept : bits_(numeric::float_to_half_bits(f)) {}
  [[nodiscard]] static constexpr half from_bits(std::uint16_t b) noexcept {
    half h;
    h.bits_ = b;
    return h;
  }
  [[nodiscard]] constexpr std::uint16_t bits() const noexcept { return bits_; }
  constexpr explicit operator float() const noexcept { return numeric::half_bits_to_float(bits_); }
  [[nodiscard]] constexpr float to_float() const noexcept { return numeric::half_bits_to_float(bits_); }

  [[nodiscard]] constexpr bool is_nan() const noexcept { return (bits_ & 0x7fffu) > 0x7c00u; }
  [[nodiscard]] constexpr bool is_inf() const noexcept { return (bits_ & 0x7fffu) == 0x7c00u; }
  [[nodiscard]] constexpr bool is_subnormal() const noexcept { return (bits_ & 0x7c00u) == 0 && (bits_ & 0x3ffu) != 0; }

  static constexpr half max() noexcept { return from_bits(0x7bffu); }             // 65504
  static constexpr half lowest() noexcept { return from_bits(0xfbffu); }          // -65504
  static constexpr half min_normal() noexcept { return from_bits(0x0400u); }      // 2^-14
  static constexpr half denorm_min() noexcept { return from_bits(0x0001u); }      // 2^-24
  static constexpr half epsilon() noexcept { return from_bits(0x1400u); }         // 2^-10
  static constexpr half infinity() noexcept { return from_bits(0x7c00u); }
  static constexpr half quiet_nan() noexcept { return from_bits(0x7e00u); }

  /// Bitwise identity (so NaN == NaN and +0 != -0): what determinism tests compare.
  friend constexpr bool same_bits(half a, half b) noexcept { return a.bits_ == b.bits_; }

 private:
  std::uint16_t bits_ = 0;
};

/// bfloat16: the top half of a float (1 sign, 8 exponent, 7 mantissa bits).
class bfloat16 {
 public:
  constexpr bfloat16() noexcept = default;
  constexpr explicit bfloat16(float f) noexcept : bits_(numeric::float_to_bfloat16_bits(f)) {}
  [[nodiscard]] static constexpr bfloat16 from_bits(std::uint16_t b) noexcept {
    bfloat16 h;
    h.bits_ = b;
    return h;
  }
  [[nodiscard]] constexpr std::uint16_t bits() const noexcept { return bits_; }
  constexpr explicit operator float() const noexcept { return numeric::bfloat16_bits_to_float(bits_); }
  [[nodiscard]] constexpr float to_float() const noexcept { return numeric::bfloat16_bits_to_float(bits_); }

  [[nodiscard]] constexpr bool is_nan() const noexcept { return (bits_ & 0x7fffu) > 0x7f80u; }
  [[nodiscard]] constexpr bool is_inf() const noexcept { return (bits_ & 0x7fffu) == 0x7f80u; }

  static constexpr bfloat16 max() noexcept { return from_bits(0x7f7fu); }
  static constexpr bfloat16 lowest() noexcept { return from_bits(0xff7fu); }
  static constexpr bfloat16 min_normal() noexcept { return from_bits(0x0080u); }
  static constexpr bfloat16 epsilon() noexcept { return from_bits(0x3c00u); }  // 2^-7
  static constexpr bfloat16 infinity() noexcept { return from_bits(0x7f80u); }
  static constexpr bfloat16 quiet_nan() noexcept { return from_bits(0x7fc0u); }

  friend constexpr bool same_bits(bfloat16 a, bfloat16 b) noexcept { return a.bits_ == b.bits_; }

 private:
  std::uint16_t bits_ = 0;
};

static_assert(sizeof(half) == 2 && sizeof(bfloat16) == 2);

/// Rounds a float to the nearest value `half` can hold (the FP16 storage round trip).
constexpr float round_to_half(float f) noexcept { return half(f).to_float(); }
/// Rounds a float to the nearest value `bfloat16` can hold.
constexpr float round_to_bfloat16(float f) noexcept { return bfloat16(f).to_float(); }

}  // namespace npurt

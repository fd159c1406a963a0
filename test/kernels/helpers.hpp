// Shared helpers of the kernel tests: host tensors, deterministic data, tensor descriptors.
#pragma once

#include <npurt/numeric.hpp>
#include <npurt/sim/reference_kernels.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <system_error>
#include <vector>

namespace kt {

using npurt::dtype;
using npurt::shape;
using npurt::tensor_desc;

/// A host tensor: bytes plus its descriptor. Values go in and come out as double.
struct tensor {
  std::vector<std::byte> bytes;
  tensor_desc desc;

  tensor(shape s, dtype t = dtype::f32) {
    desc.shape = s;
    desc.type = t;
    bytes.resize(desc.bytes());
    desc.data = bytes.data();
  }
  // Copies point their descriptor at their own bytes.
  tensor(const tensor& o) : bytes(o.bytes), desc(o.desc) { desc.data = bytes.data(); }
  tensor& operator=(const tensor& o) {
    bytes = o.bytes;
    desc = o.desc;
    desc.data = bytes.data();
    return *this;
  }

  [[nodiscard]] std::size_t size() const { return static_cast<std::size_t>(desc.shape.elements()); }

  void set(std::size_t i, double v) {
    std::byte* p = bytes.data();
    switch (desc.type) {
      case dtype::f32: {
        float f = static_cast<float>(v);
        std::memcpy(p + 4 * i, &f, 4);
        break;
      }
      case dtype::f16: {
        auto b = npurt::half(static_cast<float>(v)).bits();
        std::memcpy(p + 2 * i, &b, 2);
        break;
      }
      case dtype::bf16: {
        auto b = npurt::bfloat16(static_cast<float>(v)).bits();
        std::memcpy(p + 2 * i, &b, 2);
        break;
      }
      case dtype::i8: {
        auto b = static_cast<std::int8_t>(v);
        std::memcpy(p + i, &b, 1);
        break;
      }
      case dtype::u8:
      case dtype::boolean: {  // bool: the byte as given, so tests can plant nonzero bytes other than 1
        auto b = static_cast<std::uint8_t>(v);
        std::memcpy(p + i, &b, 1);
        break;
      }
      case dtype::i32: {
        auto b = static_cast<std::int32_t>(v);
        std::memcpy(p + 4 * i, &b, 4);
        break;
      }
      case dtype::i64: {
        auto b = static_cast<std::int64_t>(v);
        std::memcpy(p + 8 * i, &b, 8);
        break;
      }
      case dtype::f64: std::memcpy(p + 8 * i, &v, 8); break;
      case dtype::i16: put<std::int16_t>(i, v); break;
      case dtype::u16: put<std::uint16_t>(i, v); break;
      case dtype::u32: put<std::uint32_t>(i, v); break;
      case dtype::u64: put<std::uint64_t>(i, v); break;
    }
  }
  /// Element i as T's bits (exact for u64 and i64 past 2^53).
  template <class T>
  void put(std::size_t i, double v) {
    const auto b = static_cast<T>(v);
    std::memcpy(bytes.data() + sizeof(T) * i, &b, sizeof(T));
  }
  template <class T>
  [[nodiscard]] T at(std::size_t i) const {
    T b;
    std::memcpy(&b, bytes.data() + sizeof(T) * i, sizeof(T));
    return b;
  }
  [[nodiscard]] double get(std::size_t i) const {
    const std::byte* p = bytes.data();
    switch (desc.type) {
      case dtype::f32: {
        float f;
        std::memcpy(&f, p + 4 * i, 4);
        return f;
      }
      case dtype::f16: {
        std::uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        return npurt::half::from_bits(b).to_float();
      }
      case dtype::bf16: {
        std::uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        return npurt::bfloat16::from_bits(b).to_float();
      }
      case dtype::i8: {
        std::int8_t b;
        std::memcpy(&b, p + i, 1);
        return b;
      }
      case dtype::u8:
      case dtype::boolean: {
        std::uint8_t b;
        std::memcpy(&b, p + i, 1);
        return b;
      }
      case dtype::i32: {
        std::int32_t b;
        std::memcpy(&b, p + 4 * i, 4);
        return b;
      }
      case dtype::i64: {
        std::int64_t b;
        std::memcpy(&b, p + 8 * i, 8);
        return static_cast<double>(b);
      }
      case dtype::f64: return at<double>(i);
      case dtype::i16: return at<std::int16_t>(i);
      case dtype::u16: return at<std::uint16_t>(i);
      case dtype::u32: return at<std::uint32_t>(i);
      case dtype::u64: return static_cast<double>(at<std::uint64_t>(i));
    }
    return 0;
  }
  [[nodiscard]] std::vector<double> values() const {
    std::vector<double> v(size());
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = get(i);
    return v;
  }
  void assign(const std::vector<double>& v) {
    for (std::size_t i = 0; i < v.size(); ++i) set(i, v[i]);
  }
  /// Deterministic pseudo-random fill: integers in [lo, hi] (exact in every float type when
  /// small), or reals in [lo, hi) when `integers` is false.
  void fill(std::uint64_t seed, double lo, double hi, bool integers) {
    std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (std::size_t i = 0; i < size(); ++i) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      const double u = static_cast<double>(s >> 11) * 0x1.0p-53;
      set(i, integers ? std::floor(lo + u * (hi - lo + 1)) : lo + u * (hi - lo));
    }
  }
};

/// A deterministic draw of integers in [lo, hi] (a 64-bit LCG), for randomised shapes.
class int_draw {
 public:
  explicit int_draw(std::uint64_t seed) : s_(seed) {}
  std::int64_t operator()(std::int64_t lo, std::int64_t hi) {
    s_ = s_ * 6364136223846793005ull + 1442695040888963407ull;
    return lo + static_cast<std::int64_t>((s_ >> 33) % static_cast<std::uint64_t>(hi - lo + 1));
  }

 private:
  std::uint64_t s_;
};

/// A tensor_desc without data (timing-only) of the given shape and type.
inline tensor_desc shape_only(shape s, dtype t = dtype::f32) {
  tensor_desc d;
  d.shape = s;
  d.type = t;
  return d;
}

/// Runs on host memory and reports the error code's value (0 = success) for Catch's messages.
inline int run(const npurt::kernel_desc& k) { return npurt::sim::run_reference(k).value(); }

/// Runs on host memory, sets ec, and returns what the kernel said was wrong with its data.
inline std::string run_why(const npurt::kernel_desc& k, std::error_code& ec) {
  std::string why;
  ec = npurt::sim::run_reference(k, npurt::sim::host_memory(), 0, &why);
  return why;
}

/// Row-major offset of a rank-4 index.
inline std::size_t at4(const shape& s, std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) {
  return static_cast<std::size_t>(((a * s[1] + b) * s[2] + c) * s[3] + d);
}

}  // namespace kt

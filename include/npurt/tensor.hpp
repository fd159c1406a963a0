// npurt/tensor.hpp — data types, shapes and the tensor descriptor kernels are given.
#pragma once

#include <npurt/config.hpp>
#include <npurt/error.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <span>
#include <string_view>
#include <type_traits>

namespace npurt {

/// Element types. `boolean` is ONNX's BOOL (and PyTorch's torch.bool): one byte per element, which
/// kernels write as 0 or 1 and read as true when nonzero. New types are appended: the values of the
/// existing ones do not change (checkpoints store them). f64 is ONNX's DOUBLE, which NPUs compute
/// off the cube (vector unit or AI CPU); i16, u16, u32 and u64 are ONNX's INT16, UINT16, UINT32 and
/// UINT64.
enum class dtype : std::uint8_t { f32, f16, bf16, i8, i32, i64, u8, boolean, f64, i16, u16, u32, u64 };

constexpr std::size_t size_of(dtype t) noexcept {
  switch (t) {
    case dtype::f32: return 4;
    case dtype::f16: return 2;
    case dtype::bf16: return 2;
    case dtype::i8: return 1;
    case dtype::i32: return 4;
    case dtype::i64: return 8;
    case dtype::u8: return 1;
    case dtype::boolean: return 1;
    case dtype::f64: return 8;
    case dtype::i16: return 2;
    case dtype::u16: return 2;
    case dtype::u32: return 4;
    case dtype::u64: return 8;
  }
  return 0;
}

/// Whether t holds floating-point values (f32, f16, bf16, f64).
constexpr bool is_float(dtype t) noexcept {
  return t == dtype::f32 || t == dtype::f16 || t == dtype::bf16 || t == dtype::f64;
}
/// Whether t holds integers (i8, i16, i32, i64, u8, u16, u32, u64); bool is neither a float nor an
/// integer.
constexpr bool is_integer(dtype t) noexcept {
  return t == dtype::i8 || t == dtype::i32 || t == dtype::i64 || t == dtype::u8 || t == dtype::i16 || t == dtype::u16 ||
         t == dtype::u32 || t == dtype::u64;
}
/// Whether t holds unsigned integers (u8, u16, u32, u64).
constexpr bool is_unsigned(dtype t) noexcept {
  return t == dtype::u8 || t == dtype::u16 || t == dtype::u32 || t == dtype::u64;
}

/// The dtype whose elements are T: float f32, double f64, the fixed-width integers theirs, bool
/// boolean (npurt's bool is one byte, 0 or 1, as C++'s is).
template <class T>
constexpr dtype dtype_of = [] {
  if constexpr (std::is_same_v<T, float>) return dtype::f32;
  else if constexpr (std::is_same_v<T, double>) return dtype::f64;
  else if constexpr (std::is_same_v<T, bool>) return dtype::boolean;
  else if constexpr (std::is_same_v<T, std::int8_t>) return dtype::i8;
  else if constexpr (std::is_same_v<T, std::int16_t>) return dtype::i16;
  else if constexpr (std::is_same_v<T, std::int32_t>) return dtype::i32;
  else if constexpr (std::is_same_v<T, std::int64_t>) return dtype::i64;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return dtype::u8;
  else if constexpr (std::is_same_v<T, std::uint16_t>) return dtype::u16;
  else if constexpr (std::is_same_v<T, std::uint32_t>) return dtype::u32;
  else if constexpr (std::is_same_v<T, std::uint64_t>) return dtype::u64;
  else static_assert(sizeof(T) == 0, "dtype_of: no dtype holds this element type");
}();

constexpr std::string_view to_string(dtype t) noexcept {
  switch (t) {
    case dtype::f32: return "f32";
    case dtype::f16: return "f16";
    case dtype::bf16: return "bf16";
    case dtype::i8: return "i8";
    case dtype::i32: return "i32";
    case dtype::i64: return "i64";
    case dtype::u8: return "u8";
    case dtype::boolean: return "bool";
    case dtype::f64: return "f64";
    case dtype::i16: return "i16";
    case dtype::u16: return "u16";
    case dtype::u32: return "u32";
    case dtype::u64: return "u64";
  }
  return "?";
}

/// Memory layouts. NC1HWC0 is Da Vinci's 5-D layout with C0 = 16 (FP16); kernels accept NCHW and
/// NHWC and account for the conversion the hardware would do.
enum class layout : std::uint8_t { nd, nchw, nhwc, nc1hwc0 };

/// A shape of at most 8 dimensions, stored inline: descriptors are copied on launch paths. More
/// dimensions are refused (errc::invalid_shape), never dropped.
class shape {
 public:
  static constexpr std::size_t max_rank = 8;
  constexpr shape() = default;
  constexpr shape(std::initializer_list<std::int64_t> dims) {
    for (auto d : dims) push_back(d);
  }
  constexpr explicit shape(std::span<const std::int64_t> dims) {
    for (auto d : dims) push_back(d);
  }
  [[nodiscard]] constexpr std::size_t rank() const noexcept { return rank_; }
  [[nodiscard]] constexpr std::int64_t operator[](std::size_t i) const noexcept { return dims_[i]; }
  [[nodiscard]] constexpr std::int64_t& operator[](std::size_t i) noexcept { return dims_[i]; }
  /// The product of the dimensions; saturates at the largest std::int64_t rather than overflow
  /// (checked_elements() tells the two apart).
  [[nodiscard]] constexpr std::int64_t elements() const noexcept {
    std::int64_t n = 1;
    for (std::size_t i = 0; i < rank_; ++i)
      if (__builtin_mul_overflow(n, dims_[i], &n)) return std::numeric_limits<std::int64_t>::max();
    return n;
  }
  /// The product of the dimensions, or -1 when one is negative or the product does not fit: what
  /// code that takes shapes from outside checks before it sizes anything.
  [[nodiscard]] constexpr std::int64_t checked_elements() const noexcept {
    std::int64_t n = 1;
    for (std::size_t i = 0; i < rank_; ++i)
      if (dims_[i] < 0 || __builtin_mul_overflow(n, dims_[i], &n)) return -1;
    return n;
  }
  [[nodiscard]] constexpr const std::int64_t* begin() const noexcept { return dims_.data(); }
  [[nodiscard]] constexpr const std::int64_t* end() const noexcept { return dims_.data() + rank_; }
  constexpr void push_back(std::int64_t d) {
    if (rank_ == max_rank) [[unlikely]]
      throw_error(make_error_code(errc::invalid_shape), "shape: more than 8 dimensions");
    dims_[rank_++] = d;
  }
  friend constexpr bool operator==(const shape& a, const shape& b) noexcept {
    if (a.rank_ != b.rank_) return false;
    for (std::size_t i = 0; i < a.rank_; ++i)
      if (a.dims_[i] != b.dims_[i]) return false;
    return true;
  }

 private:
  std::array<std::int64_t, max_rank> dims_{};
  std::size_t rank_ = 0;
};

/// What a kernel is told about one operand: where it lives (a device address, or null in
/// timing-only mode), its shape, type and layout. Descriptors never own memory.
struct tensor_desc {
  void* data = nullptr;
  npurt::shape shape{};
  npurt::dtype type = dtype::f32;
  npurt::layout format = layout::nd;

  /// Saturates at SIZE_MAX rather than wrap: no allocation or range check can then pass.
  [[nodiscard]] constexpr std::size_t bytes() const noexcept {
    std::size_t b = 0;
    if (__builtin_mul_overflow(static_cast<std::size_t>(shape.elements()), size_of(type), &b))
      return std::numeric_limits<std::size_t>::max();
    return b;
  }
};

}  // namespace npurt

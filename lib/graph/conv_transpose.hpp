// ConvTranspose's geometry, as ONNX defines it (onnx.ai/onnx/operators/onnx__ConvTranspose.html):
// shape inference and lowering read the attributes through this one function. Private to the
// graph library.
#pragma once

#include <npurt/graph/graph.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <string>

namespace npurt::graph_ops {

/// The geometry of a ConvTranspose over `rank` spatial axes (1 to 3); entries past `rank` are unused.
struct conv_transpose_geometry {
  std::size_t rank = 2;
  std::array<std::int64_t, 3> kernel{}, stride{1, 1, 1}, dilation{1, 1, 1}, output_padding{0, 0, 0};
  std::array<std::int64_t, 3> pad_begin{0, 0, 0}, pad_end{0, 0, 0};
  std::array<std::int64_t, 3> out{};  ///< the output's spatial extents (H and W in 2-D)
  /// 2-D only (the kernel's geometry): axes whose end pad exceeds what the kernel's geometry
  /// allows (pad_end > pad_begin + output_padding, as auto_pad SAME_UPPER gives with an odd
  /// total): computed with an end pad of pad_begin + output_padding, a larger output, and cropped
  /// to `out` by a Slice.
  std::array<bool, 3> crop{false, false, false};
  [[nodiscard]] bool needs_crop() const noexcept { return crop[0] || crop[1] || crop[2]; }
};

/// Python's // for the pads ONNX derives from a total that may be negative (an output_shape
/// larger than the natural one).
inline std::int64_t floor_half(std::int64_t v) noexcept { return v >= 0 ? v / 2 : -((-v + 1) / 2); }

/// The output size and the pads of a ConvTranspose with input x [N, C, D1, ...] and weight w
/// [C, M/group, k1, ...] of the same rank (3 to 5). `fail(code, what)` reports what is wrong and
/// does not return. In 2-D the pads are also checked against what the kernel (convolution's input
/// gradient, one pad per axis) computes; the 1-D and 3-D chains crop and pad any geometry.
template <class Fail>
conv_transpose_geometry conv_transpose_geom(const attributes& a, const shape& x, const shape& w, Fail&& fail) {
  conv_transpose_geometry g;
  if (x.rank() < 3 || x.rank() > 5 || w.rank() != x.rank())
    fail(errc::invalid_shape,
         "input " + shape_string(x) + " and weight " + shape_string(w) + " must be of one rank, 3 to 5 (1-D to 3-D)");
  const std::size_t r = x.rank() - 2;
  g.rank = r;
  const std::string per_axis = std::to_string(r) + " value" + (r == 1 ? "" : "s") + " (one per spatial axis)";
  const auto list = [&](std::string_view name, std::int64_t def) {
    const ints v = a.get_ints(name, ints(r, def));
    if (v.size() != r) fail(errc::invalid_argument, std::string(name) + " must have " + per_axis);
    std::array<std::int64_t, 3> out{def, def, def};
    std::copy(v.begin(), v.end(), out.begin());
    return out;
  };
  g.kernel = {1, 1, 1};
  for (std::size_t i = 0; i < r; ++i) g.kernel[i] = w[2 + i];
  if (a.has("kernel_shape") && list("kernel_shape", 1) != g.kernel)
    fail(errc::invalid_shape, "kernel_shape does not match the weight " + shape_string(w));
  g.stride = list("strides", 1);
  g.dilation = list("dilations", 1);
  g.output_padding = list("output_padding", 0);
  // The products below stay far from overflow with 32-bit windows, as the kernels take them.
  constexpr std::int64_t window_max = std::numeric_limits<std::int32_t>::max();
  for (std::size_t i = 0; i < r; ++i) {
    if (g.stride[i] < 1 || g.dilation[i] < 1 || g.kernel[i] < 1 || g.stride[i] > window_max ||
        g.dilation[i] > window_max || g.kernel[i] > window_max || x[2 + i] > window_max)
      fail(errc::invalid_argument, "strides, dilations, kernel and input extents must be positive 32-bit values");
    // ONNX: output_padding must be less than the stride (or the dilation).
    if (g.output_padding[i] < 0 || g.output_padding[i] >= std::max(g.stride[i], g.dilation[i]))
      fail(errc::invalid_argument, "output_padding must be at least 0 and less than the stride or the dilation");
  }
  const std::string auto_pad = a.get_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER")
    fail(errc::not_supported, "auto_pad " + auto_pad);
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  std::array<std::int64_t, 3> in{1, 1, 1};
  for (std::size_t i = 0; i < r; ++i) in[i] = x[2 + i];
  std::array<std::int64_t, 3> natural{};  // the output's size without pads
  for (std::size_t i = 0; i < r; ++i)
    natural[i] = g.stride[i] * (in[i] - 1) + g.output_padding[i] + (g.kernel[i] - 1) * g.dilation[i] + 1;
  if (a.has("pads")) {
    if (same) fail(errc::invalid_argument, "pads and auto_pad " + auto_pad + " are exclusive");
    const ints p = a.get_ints("pads");
    if (p.size() != 2 * r)
      fail(errc::invalid_argument, "pads must have " + std::to_string(2 * r) + " values (begins, then ends)");
    for (std::size_t i = 0; i < r; ++i) {
      if (p[i] < -window_max || p[i] > window_max || p[r + i] < -window_max || p[r + i] > window_max)
        fail(errc::invalid_argument, "pads must be 32-bit values");
      g.pad_begin[i] = p[i];
      g.pad_end[i] = p[r + i];
    }
  }
  if (a.has("output_shape") || (same && !a.has("pads"))) {
    // ONNX derives the pads from the requested size, the larger half at the end for SAME_UPPER
    // and at the start otherwise.
    std::array<std::int64_t, 3> want{};
    for (std::size_t i = 0; i < r; ++i) want[i] = in[i] * g.stride[i];
    if (a.has("output_shape")) {
      const ints o = a.get_ints("output_shape");
      if (o.size() != r) fail(errc::invalid_argument, "output_shape must have " + per_axis);
      for (std::size_t i = 0; i < r; ++i) want[i] = o[i];
    }
    for (std::size_t i = 0; i < r; ++i) {
      if (want[i] < 1 || want[i] > window_max) fail(errc::invalid_shape, "output_shape must be positive 32-bit values");
      if (a.has("pads")) continue;  // given pads stand; the output takes the requested size
      const std::int64_t total = natural[i] - want[i];
      g.pad_begin[i] = auto_pad == "SAME_UPPER" ? floor_half(total) : total - floor_half(total);
      g.pad_end[i] = total - g.pad_begin[i];
    }
    g.out = want;
  } else {
    for (std::size_t i = 0; i < r; ++i) g.out[i] = natural[i] - g.pad_begin[i] - g.pad_end[i];
  }
  for (std::size_t i = 0; i < r; ++i) {
    if (g.out[i] < 1) fail(errc::invalid_shape, "pads leave no output");
    if (r != 2) continue;
    // The kernel is convolution's input gradient with one pad per axis: the output must be what a
    // convolution with the start pad on both sides maps back onto the input.
    if (g.pad_begin[i] < 0 || g.pad_begin[i] > window_max)
      fail(errc::not_supported, "a negative start pad (an output_shape that needs one)");
    const std::int64_t span = g.out[i] + 2 * g.pad_begin[i] - ((g.kernel[i] - 1) * g.dilation[i] + 1);
    if (span >= 0 && span / g.stride[i] + 1 == in[i]) continue;
    // Only a larger end pad is left: the output is then a prefix of the one with pad_end =
    // pad_begin + output_padding, which the kernel computes.
    if (g.pad_end[i] > g.pad_begin[i] + g.output_padding[i]) {
      g.crop[i] = true;
      continue;
    }
    fail(errc::not_supported, "pads the kernel's geometry cannot take (start " + std::to_string(g.pad_begin[i]) +
                                  ", end " + std::to_string(g.pad_end[i]) + ")");
  }
  return g;
}

}  // namespace npurt::graph_ops

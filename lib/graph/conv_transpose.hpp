// ConvTranspose's geometry, as ONNX defines it (onnx.ai/onnx/operators/onnx__ConvTranspose.html):
// shape inference and lowering read the attributes through this one function. Private to the
// graph library.
#pragma once

#include <npurt/graph/graph.hpp>

#include <array>
#include <cstdint>
#include <limits>
#include <string>

namespace npurt::graph_ops {

struct conv_transpose_geometry {
  std::array<std::int64_t, 2> kernel{}, stride{1, 1}, dilation{1, 1}, output_padding{0, 0};
  std::array<std::int64_t, 2> pad_begin{0, 0}, pad_end{0, 0};
  std::array<std::int64_t, 2> out{};  ///< the output's H and W
  /// Axes whose end pad exceeds what the kernel's geometry allows (pad_end > pad_begin +
  /// output_padding, as auto_pad SAME_UPPER gives with an odd total): computed with an end pad
  /// of pad_begin + output_padding, a larger output, and cropped to `out` by a Slice.
  std::array<bool, 2> crop{false, false};
  [[nodiscard]] bool needs_crop() const noexcept { return crop[0] || crop[1]; }
};

/// Python's // for the pads ONNX derives from a total that may be negative (an output_shape
/// larger than the natural one).
inline std::int64_t floor_half(std::int64_t v) noexcept { return v >= 0 ? v / 2 : -((-v + 1) / 2); }

/// The output size and the pads of a 2-D ConvTranspose with input x [N, C, H, W] and weight w
/// [C, M/group, kH, kW]. `fail(code, what)` reports what is wrong and does not return.
template <class Fail>
conv_transpose_geometry conv_transpose_geom(const attributes& a, const shape& x, const shape& w, Fail&& fail) {
  conv_transpose_geometry g;
  const auto two = [&](std::string_view name, std::int64_t def) {
    const ints v = a.get_ints(name, {def, def});
    if (v.size() != 2) fail(errc::not_supported, std::string(name) + " must have 2 values (2-D only)");
    return std::array<std::int64_t, 2>{v[0], v[1]};
  };
  g.kernel = {w[2], w[3]};
  if (a.has("kernel_shape") && two("kernel_shape", 0) != g.kernel)
    fail(errc::invalid_shape, "kernel_shape does not match the weight " + shape_string(w));
  g.stride = two("strides", 1);
  g.dilation = two("dilations", 1);
  g.output_padding = two("output_padding", 0);
  // The products below stay far from overflow with 32-bit windows, as the kernels take them.
  constexpr std::int64_t window_max = std::numeric_limits<std::int32_t>::max();
  for (int i = 0; i < 2; ++i) {
    if (g.stride[i] < 1 || g.dilation[i] < 1 || g.kernel[i] < 1 || g.stride[i] > window_max ||
        g.dilation[i] > window_max || g.kernel[i] > window_max)
      fail(errc::invalid_argument, "strides, dilations and kernel must be positive 32-bit values");
    // ONNX: output_padding must be less than the stride (or the dilation).
    if (g.output_padding[i] < 0 || g.output_padding[i] >= std::max(g.stride[i], g.dilation[i]))
      fail(errc::invalid_argument, "output_padding must be at least 0 and less than the stride or the dilation");
  }
  const std::string auto_pad = a.get_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER")
    fail(errc::not_supported, "auto_pad " + auto_pad);
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  const std::array<std::int64_t, 2> in{x[2], x[3]};
  std::array<std::int64_t, 2> natural{};  // the output's size without pads
  for (int i = 0; i < 2; ++i)
    natural[i] = g.stride[i] * (in[i] - 1) + g.output_padding[i] + (g.kernel[i] - 1) * g.dilation[i] + 1;
  if (a.has("pads")) {
    if (same) fail(errc::invalid_argument, "pads and auto_pad " + auto_pad + " are exclusive");
    const ints p = a.get_ints("pads");
    if (p.size() != 4) fail(errc::not_supported, "pads must have 4 values (2-D only)");
    g.pad_begin = {p[0], p[1]};
    g.pad_end = {p[2], p[3]};
  }
  if (a.has("output_shape") || (same && !a.has("pads"))) {
    // ONNX derives the pads from the requested size, the larger half at the end for SAME_UPPER
    // and at the start otherwise.
    std::array<std::int64_t, 2> want{in[0] * g.stride[0], in[1] * g.stride[1]};
    if (a.has("output_shape")) {
      const ints o = a.get_ints("output_shape");
      if (o.size() != 2) fail(errc::not_supported, "output_shape must have 2 values (2-D only)");
      want = {o[0], o[1]};
    }
    for (int i = 0; i < 2; ++i) {
      if (want[i] < 1) fail(errc::invalid_shape, "output_shape must be positive");
      if (a.has("pads")) continue;  // given pads stand; the output takes the requested size
      const std::int64_t total = natural[i] - want[i];
      g.pad_begin[i] = auto_pad == "SAME_UPPER" ? floor_half(total) : total - floor_half(total);
      g.pad_end[i] = total - g.pad_begin[i];
    }
    g.out = want;
  } else {
    for (int i = 0; i < 2; ++i) g.out[i] = natural[i] - g.pad_begin[i] - g.pad_end[i];
  }
  for (int i = 0; i < 2; ++i) {
    if (g.out[i] < 1) fail(errc::invalid_shape, "pads leave no output");
    // The kernel is convolution's input gradient with one pad per axis: the output must be what a
    // convolution with the start pad on both sides maps back onto the input.
    if (g.pad_begin[i] < 0 || g.pad_begin[i] > window_max)
      fail(errc::not_supported, "a negative start pad (an output_shape that needs one)");
    const std::int64_t span = g.out[i] + 2 * g.pad_begin[i] - ((g.kernel[i] - 1) * g.dilation[i] + 1);
    if (span >= 0 && span / g.stride[i] + 1 == in[i]) continue;
    // Only a larger end pad is left: the output is then a prefix of the one with pad_end =
    // pad_begin + output_padding, which the kernel computes.
    if (g.pad_end[i] > g.pad_begin[i] + g.output_padding[i]) {
      g.crop[static_cast<std::size_t>(i)] = true;
      continue;
    }
    fail(errc::not_supported, "pads the kernel's geometry cannot take (start " + std::to_string(g.pad_begin[i]) +
                                  ", end " + std::to_string(g.pad_end[i]) + ")");
  }
  return g;
}

}  // namespace npurt::graph_ops

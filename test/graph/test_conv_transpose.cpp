// ConvTranspose: values against a direct scatter in double over strides, dilations, pads,
// output_padding, output_shape, groups and bias; and the attributes it refuses.
#include <npurt/graph/graph.hpp>
#include <npurt/graph/session.hpp>

#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

using namespace npurt;

namespace {

struct case_spec {
  std::string name;
  std::int64_t n = 1, c = 2, h = 3, w = 4, m = 2, kh = 3, kw = 2, group = 1;
  attributes attrs;
  bool bias = false;
  // What ONNX's formulas give: the output's H and W, and the start pads.
  std::int64_t out_h = 0, out_w = 0, pad_h = 0, pad_w = 0;
  std::int64_t sh = 1, sw = 1, dh = 1, dw = 1;
};

/// y[n, g·M/G + m, ih·s + ky·d − pad, iw·s + kx·d − pad] += x[n, c, ih, iw] · w[c, m, ky, kx] for
/// c in group g: the definition, summed in double.
std::vector<double> scatter(const case_spec& k, const std::vector<double>& x, const std::vector<double>& w,
                            const std::vector<double>& b) {
  const std::int64_t mg = k.m / k.group, cg = k.c / k.group;
  std::vector<double> y(static_cast<std::size_t>(k.n * k.m * k.out_h * k.out_w));
  for (std::int64_t in = 0; in < k.n; ++in)
    for (std::int64_t ic = 0; ic < k.c; ++ic)
      for (std::int64_t ih = 0; ih < k.h; ++ih)
        for (std::int64_t iw = 0; iw < k.w; ++iw)
          for (std::int64_t im = 0; im < mg; ++im)
            for (std::int64_t ky = 0; ky < k.kh; ++ky)
              for (std::int64_t kx = 0; kx < k.kw; ++kx) {
                const std::int64_t oh = ih * k.sh + ky * k.dh - k.pad_h, ow = iw * k.sw + kx * k.dw - k.pad_w;
                if (oh < 0 || oh >= k.out_h || ow < 0 || ow >= k.out_w) continue;
                const std::int64_t om = (ic / cg) * mg + im;
                y[static_cast<std::size_t>(((in * k.m + om) * k.out_h + oh) * k.out_w + ow)] +=
                    x[static_cast<std::size_t>(((in * k.c + ic) * k.h + ih) * k.w + iw)] *
                    w[static_cast<std::size_t>(((ic * mg + im) * k.kh + ky) * k.kw + kx)];
              }
  if (!b.empty())
    for (std::size_t i = 0; i < y.size(); ++i)
      y[i] += b[static_cast<std::size_t>((static_cast<std::int64_t>(i) / (k.out_h * k.out_w)) % k.m)];
  return y;
}

std::vector<double> values(std::size_t count, double scale) {
  std::vector<double> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = std::fmod(static_cast<double>(i) * 0.37, 2.0) * scale - scale;
  return v;
}

}  // namespace

TEST_CASE("ConvTranspose computes ONNX's definition over its attributes", "[graph][conv_transpose]") {
  std::vector<case_spec> cases;
  {
    case_spec k;
    k.name = "plain";
    k.out_h = 5, k.out_w = 5;  // (3 − 1) + 3, (4 − 1) + 2
    cases.push_back(k);
  }
  {
    case_spec k;
    k.name = "strided, padded, output_padding, bias";
    k.attrs = {{"strides", ints{3, 2}}, {"pads", ints{1, 0, 1, 0}}, {"output_padding", ints{1, 1}}};
    k.sh = 3, k.sw = 2, k.pad_h = 1, k.bias = true;
    k.out_h = 3 * 2 + 1 + 3 - 2, k.out_w = 2 * 3 + 1 + 2;
    cases.push_back(k);
  }
  {
    case_spec k;
    k.name = "dilated, two groups";
    k.c = 4, k.m = 6, k.group = 2;
    k.attrs = {{"dilations", ints{2, 2}}, {"group", std::int64_t{2}}};
    k.dh = 2, k.dw = 2;
    k.out_h = 2 + 2 * 2 + 1, k.out_w = 3 + 2 * 1 + 1;
    cases.push_back(k);
  }
  {
    case_spec k;
    k.name = "output_shape: ONNX derives the pads, the larger half first";
    k.attrs = {{"strides", ints{2, 2}}, {"output_shape", ints{6, 8}}};
    k.sh = 2, k.sw = 2;
    // natural 2·2 + 3 = 7 and 2·3 + 2 = 8: total pads 1 and 0, the odd one at the start.
    k.out_h = 6, k.out_w = 8, k.pad_h = 1;
    cases.push_back(k);
  }
  {
    case_spec k;
    k.name = "auto_pad SAME_UPPER with an odd total: the end pad is the larger, computed and cropped";
    k.attrs = {{"strides", ints{2, 2}}, {"auto_pad", std::string("SAME_UPPER")}};
    k.sh = 2, k.sw = 2, k.bias = true;
    // natural 2·2 + 3 = 7 and 2·3 + 2 = 8 against 3·2 and 4·2: pads (0, 1) on H, none on W.
    k.out_h = 6, k.out_w = 8;
    cases.push_back(k);
  }
  for (const auto& k : cases) {
    INFO(k.name);
    const auto xs = values(static_cast<std::size_t>(k.n * k.c * k.h * k.w), 1.5);
    const auto ws = values(static_cast<std::size_t>(k.c * (k.m / k.group) * k.kh * k.kw), 0.75);
    const auto bs = k.bias ? values(static_cast<std::size_t>(k.m), 0.5) : std::vector<double>{};
    graph g("ct");
    const auto x = g.add_input("x", {k.n, k.c, k.h, k.w}, dtype::f32);
    std::vector<std::string> ins{x, g.add_constant("w", tensor({k.c, k.m / k.group, k.kh, k.kw}, dtype::f32, ws))};
    if (k.bias) ins.push_back(g.add_constant("b", tensor({k.m}, dtype::f32, bs)));
    g.set_output(g.add_op("ConvTranspose", ins, k.attrs, "y"));
    REQUIRE(g.value("y").shape == shape{k.n, k.m, k.out_h, k.out_w});
    npurt::system sys = test::make_system();
    session s{sys};
    const auto r = s.run(s.compile(g), {{"x", tensor({k.n, k.c, k.h, k.w}, dtype::f32, xs)}});
    const auto want = scatter(k, xs, ws, bs);
    const auto got = r.outputs.at("y").to_vector();
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      INFO("element " << i);
      CHECK(std::abs(got[i] - want[i]) <= 1e-5 * std::max(1.0, std::abs(want[i])));
    }
  }
}

TEST_CASE("ConvTranspose refuses what it cannot compute, naming why", "[graph][conv_transpose][errors]") {
  graph g("ct");
  const auto x = g.add_input("x", {1, 2, 3, 3}, dtype::f32);
  const auto x1d = g.add_input("x1d", {1, 2, 3}, dtype::f32);
  const auto w = g.add_constant("w", tensor({2, 1, 3, 3}, dtype::f32));
  const auto w_wrong = g.add_constant("w_wrong", tensor({3, 1, 3, 3}, dtype::f32));
  const auto code = [&](const std::vector<std::string>& ins, const attributes& a) -> std::error_code {
    try {
      (void)g.add_op("ConvTranspose", ins, a, "y");
    } catch (const graph_error& e) { return e.code(); }
    return {};
  };
  CHECK(code({x1d, w}, {}) == errc::invalid_shape);          // a 1-D input and a 2-D weight
  CHECK(code({x, w_wrong}, {}) == errc::invalid_shape);      // the weight's C is not the input's
  CHECK(code({x, w}, {{"group", std::int64_t{3}}}) == errc::invalid_shape);
  CHECK(code({x, w}, {{"kernel_shape", ints{2, 2}}}) == errc::invalid_shape);
  CHECK(code({x, w}, {{"output_padding", ints{1, 1}}}) == errc::invalid_argument);  // not below the stride
  CHECK(code({x, w}, {{"strides", ints{0, 1}}}) == errc::invalid_argument);
  CHECK(code({x, w}, {{"auto_pad", std::string("SAME_UPPER")}, {"pads", ints{1, 1, 1, 1}}}) == errc::invalid_argument);
  CHECK(code({x, w}, {{"pads", ints{4, 4, 4, 4}}}) == errc::invalid_shape);  // nothing left of the output
  // An end pad below the start pad (minus output_padding) is no prefix of the kernel's output.
  CHECK(code({x, w}, {{"pads", ints{2, 2, 0, 0}}}) == errc::not_supported);
  CHECK(code({x, w}, {{"outputpadding", ints{0, 0}}}) == errc::not_supported);  // a misspelt attribute
  CHECK(!g.find("y"));
  // Output 6 from 3 with stride 2 and the start pad taking the odd one (SAME_LOWER) is computed.
  CHECK(code({x, w}, {{"strides", ints{2, 2}}, {"auto_pad", std::string("SAME_LOWER")}}) == std::error_code{});
  CHECK(g.value("y").shape == shape{1, 1, 6, 6});
  // The larger end pad (SAME_UPPER) is a ConvTranspose and a Slice that crops it, under the
  // node's name.
  graph h("ct");
  const auto hx = h.add_input("x", {1, 2, 3, 3}, dtype::f32);
  const auto hw = h.add_constant("w", tensor({2, 1, 3, 3}, dtype::f32));
  h.set_output(
      h.add_op("ConvTranspose", {hx, hw}, {{"strides", ints{2, 2}}, {"auto_pad", std::string("SAME_UPPER")}}, "y"));
  CHECK(h.value("y").shape == shape{1, 1, 6, 6});
  bool sliced = false;
  for (const auto& n : h.nodes()) sliced = sliced || (n.name == "y" && n.type == "Slice");
  CHECK(sliced);
}

namespace {

// A ConvTranspose over 1 to 3 spatial axes: x [N, C, in...], w [C, M/group, k...], its attributes
// and ONNX's output extents and start pads for them (worked out by hand from the spec's formulas).
struct nd_case {
  std::string name;
  std::int64_t n = 1, c = 2, m = 2, group = 1;
  std::vector<std::int64_t> in, k, stride, dilation, pad_begin, out;
  attributes attrs;
  bool bias = false;
};

/// y[n, g·M/G + m, i·s + k·d − pad_begin (per axis)] += x[n, c, i] · w[c, m, k] for c in group g,
/// plus bias[m]: ONNX's definition of ConvTranspose, summed in double over every tap.
std::vector<double> scatter_nd_reference(const nd_case& t, const std::vector<double>& x, const std::vector<double>& w,
                                         const std::vector<double>& b) {
  const std::size_t r = t.in.size();
  const std::int64_t mg = t.m / t.group, cg = t.c / t.group;
  std::int64_t in_size = 1, k_size = 1, out_size = 1;
  for (std::size_t a = 0; a < r; ++a) in_size *= t.in[a], k_size *= t.k[a], out_size *= t.out[a];
  std::vector<double> y(static_cast<std::size_t>(t.n * t.m * out_size));
  for (std::int64_t n = 0; n < t.n; ++n)
    for (std::int64_t c = 0; c < t.c; ++c)
      for (std::int64_t i = 0; i < in_size; ++i)
        for (std::int64_t m = 0; m < mg; ++m)
          for (std::int64_t k = 0; k < k_size; ++k) {
            // Unflatten i and k (row-major) and place the tap.
            std::int64_t ri = i, rk = k, o = 0;
            std::vector<std::int64_t> ii(r), kk(r);
            for (std::size_t a = r; a-- > 0;) {
              ii[a] = ri % t.in[a], ri /= t.in[a];
              kk[a] = rk % t.k[a], rk /= t.k[a];
            }
            bool inside = true;
            for (std::size_t a = 0; a < r; ++a) {
              const std::int64_t p = ii[a] * t.stride[a] + kk[a] * t.dilation[a] - t.pad_begin[a];
              inside = inside && p >= 0 && p < t.out[a];
              o = o * t.out[a] + p;
            }
            if (!inside) continue;
            const std::int64_t om = (c / cg) * mg + m;
            y[static_cast<std::size_t>((n * t.m + om) * out_size + o)] +=
                x[static_cast<std::size_t>((n * t.c + c) * in_size + i)] *
                w[static_cast<std::size_t>((c * mg + m) * k_size + k)];
          }
  if (!b.empty())
    for (std::size_t i = 0; i < y.size(); ++i)
      y[i] += b[static_cast<std::size_t>((static_cast<std::int64_t>(i) / out_size) % t.m)];
  return y;
}

}  // namespace

TEST_CASE("ConvTranspose in 1-D and 3-D computes ONNX's definition over its attributes", "[graph][conv_transpose]") {
  std::vector<nd_case> cases;
  // One case: its extents per spatial axis, and ONNX's output extents and start pads for them.
  const auto add = [&](std::string name, std::vector<std::int64_t> in, std::vector<std::int64_t> k,
                       std::vector<std::int64_t> stride, std::vector<std::int64_t> dilation,
                       std::vector<std::int64_t> pad_begin, std::vector<std::int64_t> out,
                       attributes attrs) -> nd_case& {
    nd_case t;
    t.name = std::move(name);
    t.in = std::move(in), t.k = std::move(k), t.stride = std::move(stride), t.dilation = std::move(dilation);
    t.pad_begin = std::move(pad_begin), t.out = std::move(out), t.attrs = std::move(attrs);
    return cases.emplace_back(std::move(t));
  };
  // 1-D. Natural extent: (in − 1)·s + (k − 1)·d + 1 + output_padding.
  add("1-D plain (onnx.ai's convtranspose_1d)", {3}, {3}, {1}, {1}, {0}, {5}, {}).c = 1;
  {
    // (5 − 1)·3 + 2·2 + 1 + 1 = 18, less pads 2 and 1.
    nd_case& t = add("1-D strided, padded, output_padding, dilated, grouped, bias", {5}, {3}, {3}, {2}, {2}, {15},
                     {{"strides", ints{3}},
                      {"dilations", ints{2}},
                      {"pads", ints{2, 1}},
                      {"output_padding", ints{1}},
                      {"group", std::int64_t{2}}});
    t.n = 2, t.c = 4, t.m = 6, t.group = 2, t.bias = true;
  }
  // SAME_UPPER: out = in·s = 8; natural 3·2 + 3 = 9, total pad 1, the odd one at the end.
  add("1-D auto_pad SAME_UPPER", {4}, {3}, {2}, {1}, {0}, {8},
      {{"strides", ints{2}}, {"auto_pad", std::string("SAME_UPPER")}});
  // output_shape 11 past the natural 9: total −2, pads −1 and −1, a zero column before and after.
  add("1-D output_shape larger than the scatter", {4}, {3}, {2}, {1}, {-1}, {11},
      {{"strides", ints{2}}, {"output_shape", ints{11}}})
      .bias = true;
  // 3-D. onnx.ai's convtranspose_3d: x [1, 1, 3, 4, 5], w [1, 2, 3, 3, 3].
  add("3-D plain (onnx.ai's convtranspose_3d)", {3, 4, 5}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {5, 6, 7}, {})
      .c = 1;
  {
    // D: 2·2 + 1 + 1 + output_padding 1 = 7, less 1 and 0; H: 1 + 2·2 + 1 = 6, less 0 and 1;
    // W: 2·3 + 1 + 1 + 2 = 10, less 2 and 1.
    nd_case& t = add("3-D strided, asymmetric pads, output_padding, two groups, bias", {3, 2, 3}, {2, 3, 2}, {2, 1, 3},
                     {1, 2, 1}, {1, 0, 2}, {6, 5, 7},
                     {{"strides", ints{2, 1, 3}},
                      {"dilations", ints{1, 2, 1}},
                      {"pads", ints{1, 0, 2, 0, 1, 1}},
                      {"output_padding", ints{1, 0, 2}},
                      {"group", std::int64_t{2}}});
    t.n = 2, t.c = 4, t.m = 4, t.group = 2, t.bias = true;
  }
  // Depth taps dilated past the stride, and SAME_LOWER: out = in·s, the odd pad at the start.
  // natural D: 1·2 + 2·3 + 1 = 9 → 4 (total 5: 3 before); H: 2·1 + 1 + 1 = 4 → 3 (1 before);
  // W: 1·2 + 1 + 1 = 4 → 4.
  add("3-D dilated depth taps, auto_pad SAME_LOWER", {2, 3, 2}, {3, 2, 2}, {2, 1, 2}, {3, 1, 1}, {3, 1, 0}, {4, 3, 4},
      {{"strides", ints{2, 1, 2}}, {"dilations", ints{3, 1, 1}}, {"auto_pad", std::string("SAME_LOWER")}});
  for (const auto& t : cases) {
    INFO(t.name);
    std::int64_t in_size = 1, k_size = 1;
    shape xs{t.n, t.c}, ws{t.c, t.m / t.group}, ys{t.n, t.m};
    for (std::size_t a = 0; a < t.in.size(); ++a) {
      in_size *= t.in[a], k_size *= t.k[a];
      xs.push_back(t.in[a]);
      ws.push_back(t.k[a]);
      ys.push_back(t.out[a]);
    }
    const auto xv = values(static_cast<std::size_t>(t.n * t.c * in_size), 1.5);
    const auto wv = values(static_cast<std::size_t>(t.c * (t.m / t.group) * k_size), 0.75);
    const auto bv = t.bias ? values(static_cast<std::size_t>(t.m), 0.5) : std::vector<double>{};
    graph g("ct_nd");
    const auto x = g.add_input("x", xs, dtype::f32);
    std::vector<std::string> ins{x, g.add_constant("w", tensor(ws, dtype::f32, wv))};
    if (t.bias) ins.push_back(g.add_constant("b", tensor({t.m}, dtype::f32, bv)));
    g.set_output(g.add_op("ConvTranspose", ins, t.attrs, "y"));
    REQUIRE(g.value("y").shape == ys);
    const auto want = scatter_nd_reference(t, xv, wv, bv);
    for (int level : {0, 2}) {
      CAPTURE(level);
      npurt::system sys = test::make_system();
      session s{sys};
      const auto got = s.run(s.compile(g, {.optimization_level = level}), {{"x", tensor(xs, dtype::f32, xv)}})
                           .outputs.at("y")
                           .to_vector();
      REQUIRE(got.size() == want.size());
      for (std::size_t i = 0; i < want.size(); ++i) {
        INFO("element " << i);
        CHECK(std::abs(got[i] - want[i]) <= 1e-5 * std::max(1.0, std::abs(want[i])));
      }
    }
  }
}

TEST_CASE("ConvTranspose in 1-D and 3-D refuses what ONNX refuses, naming the node",
          "[graph][conv_transpose][errors]") {
  graph g("ct_nd_bad");
  const auto x1 = g.add_input("x1", {1, 2, 4}, dtype::f32);
  const auto x3 = g.add_input("x3", {1, 2, 2, 2, 2}, dtype::f32);
  const auto w1 = g.add_constant("w1", tensor({2, 1, 3}, dtype::f32));
  const auto w3 = g.add_constant("w3", tensor({2, 1, 2, 2, 2}, dtype::f32));
  const auto x6 = g.add_input("x6", {1, 2, 2, 2, 2, 2}, dtype::f32);
  const auto code = [&](const std::vector<std::string>& ins, const attributes& a) -> std::error_code {
    try {
      (void)g.add_op("ConvTranspose", ins, a, "y");
    } catch (const graph_error& e) {
      CHECK(e.op() == "y");
      return e.code();
    }
    return {};
  };
  CHECK(code({x1, w3}, {}) == errc::invalid_shape);                                  // ranks differ
  CHECK(code({x1, w1}, {{"strides", ints{2, 2}}}) == errc::invalid_argument);         // two strides in 1-D
  CHECK(code({x3, w3}, {{"pads", ints{1, 1, 1, 1}}}) == errc::invalid_argument);      // 4 pads in 3-D
  CHECK(code({x1, w1}, {{"output_padding", ints{1}}}) == errc::invalid_argument);     // not below the stride
  CHECK(code({x1, w1}, {{"pads", ints{3, 3}}}) == errc::invalid_shape);               // nothing left
  CHECK(code({x1, w1}, {{"group", std::int64_t{3}}}) == errc::invalid_shape);         // C = 2 is no multiple
  CHECK(code({x3, w3}, {{"kernel_shape", ints{2, 2, 3}}}) == errc::invalid_shape);    // not the weight's
  CHECK(code({x1, w1, g.add_constant("b3", tensor({3}, dtype::f32))}, {}) == errc::invalid_shape);  // bias not [M]
  CHECK(code({x6, w3}, {}) == errc::not_supported);  // 4-D
  CHECK(!g.find("y"));
}

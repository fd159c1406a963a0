// RoiAlign (onnx.ai/onnx/operators/onnx__RoiAlign.html) through compiled runs. x is a linear
// function of (row, column), where bilinear sampling is exact and a bin's average is the function
// at the bin's centre, worked by hand from the spec for both coordinate transformations; the typed
// errors; a batch index outside the batch failing session::run naming it.
#include <npurt/graph/session.hpp>

#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cstdint>
#include <string>
#include <vector>

using namespace npurt;

namespace {

using test::expect_graph_error;

graph roi_align_graph(const attributes& attrs) {
  graph g("roi_align");
  auto x = g.add_input("x", {2, 1, 4, 4}, dtype::f32);
  auto rois = g.add_input("rois", {2, 4}, dtype::f32);
  auto idx = g.add_input("idx", {2}, dtype::i64);
  g.set_output(g.add_op("RoiAlign", {x, rois, idx}, attrs, "ra"));
  return g;
}

}  // namespace

TEST_CASE("RoiAlign averages each bin as onnx.ai defines it, in both coordinate transformations",
          "[graph][roi_align]") {
  // x[b][0][r][c] = 100 b + 4 r + c. ROI 0 (1, 1, 3, 3) on batch 1, ROI 1 (0, 0, 3, 3) on batch 0;
  // 2 x 2 bins of 2 x 2 samples.
  std::vector<double> xv;
  for (int b = 0; b < 2; ++b)
    for (int e = 0; e < 16; ++e) xv.push_back(100.0 * b + e);
  const tensor x({2, 1, 4, 4}, dtype::f32, xv);
  const tensor rois({2, 4}, dtype::f32, {1, 1, 3, 3, 0, 0, 3, 3});
  const tensor idx({2}, dtype::i64, {1, 0});
  auto sys = test::make_system();
  session s{sys};
  const auto run = [&](const attributes& attrs) {
    graph g = roi_align_graph(attrs);
    CHECK(g.value("ra").shape == shape{2, 1, 2, 2});
    return s.run(s.compile(g), {{"x", x}, {"rois", rois}, {"idx", idx}}).outputs.at("ra").to_vector();
  };
  const attributes base{
      {"output_height", std::int64_t{2}}, {"output_width", std::int64_t{2}}, {"sampling_ratio", std::int64_t{2}}};
  // output_half_pixel: ROI 0 spans [1, 3], bins of 1 centred at 1.5 and 2.5; ROI 1 spans [0, 3],
  // bins of 1.5 centred at 0.75 and 2.25. Every sample is inside x.
  attributes out_half = base;
  out_half.set("coordinate_transformation_mode", std::string("output_half_pixel"));
  CHECK(run(out_half) == std::vector<double>{107.5, 108.5, 111.5, 112.5, 3.75, 5.25, 9.75, 11.25});
  // half_pixel (the default): ROI 0 spans [0.5, 2.5], centres 1 and 2. ROI 1 spans [-0.5, 2.5]:
  // its first samples (at -0.125) clamp to row or column 0, so its first bin is the mean of
  // f at rows {0, 0.625} and columns {0, 0.625}: 4 * 0.3125 + 0.3125 = 1.5625.
  const auto half = run(base);
  CHECK(std::vector<double>(half.begin(), half.begin() + 5) == std::vector<double>{105, 106, 109, 110, 1.5625});
  // Adaptive sampling (0, the default) and max mode: ROI 0's bins are 1 x 1, one sample each at
  // the bin centre; max takes the largest weighted neighbour, 0.25 x the largest of four.
  attributes max_mode{
      {"output_height", std::int64_t{2}}, {"output_width", std::int64_t{2}}, {"mode", std::string("max")}};
  const auto m = run(max_mode);
  // ROI 0 bin (0, 0): sample at (1, 1) in half_pixel, all weight on x[1][1] = 105.
  CHECK(m[0] == 105);
}

TEST_CASE("RoiAlign refuses what it cannot compute, with typed errors naming the tensor", "[graph][roi_align]") {
  const auto build = [](const shape& xs, const shape& rs, const shape& is, const attributes& attrs = {},
                        dtype xt = dtype::f32, dtype rt = dtype::f32, dtype it = dtype::i64) {
    graph g("bad");
    auto x = g.add_input("x", xs, xt);
    auto rois = g.add_input("rois", rs, rt);
    auto idx = g.add_input("idx", is, it);
    g.add_op("RoiAlign", {x, rois, idx}, attrs, "ra");
  };
  const shape xs{1, 2, 4, 4}, rs{3, 4}, is{3};
  build(xs, rs, is);
  expect_graph_error([&] { build(xs, rs, is, {}, dtype::i32, dtype::i32); }, errc::not_supported, "ra", "x");
  expect_graph_error([&] { build(xs, rs, is, {}, dtype::f32, dtype::f16); }, errc::invalid_dtype, "ra", "rois");
  expect_graph_error([&] { build(xs, rs, is, {}, dtype::f32, dtype::f32, dtype::f32); }, errc::invalid_dtype, "ra",
                     "idx");
  expect_graph_error([&] { build({1, 2, 4}, rs, is); }, errc::invalid_shape, "ra", "x");
  expect_graph_error([&] { build(xs, {3, 5}, is); }, errc::invalid_shape, "ra", "rois");
  expect_graph_error([&] { build(xs, rs, {2}); }, errc::invalid_shape, "ra", "idx");
  expect_graph_error([&] { build(xs, rs, is, {{"mode", std::string("sum")}}); }, errc::invalid_argument, "ra", "x");
  expect_graph_error([&] { build(xs, rs, is, {{"coordinate_transformation_mode", std::string("asymmetric")}}); },
                     errc::invalid_argument, "ra", "x");
  expect_graph_error([&] { build(xs, rs, is, {{"output_height", std::int64_t{0}}}); }, errc::invalid_argument, "ra",
                     "x");
  expect_graph_error([&] { build(xs, rs, is, {{"sampling_ratio", std::int64_t{-1}}}); }, errc::invalid_argument, "ra",
                     "x");
  expect_graph_error([&] { build(xs, rs, is, {{"pooled_h", std::int64_t{2}}}); }, errc::not_supported, "ra", "");
  CHECK(is_supported_op("RoiAlign"));
}

TEST_CASE("a RoiAlign batch index outside the batch fails session::run naming it", "[graph][roi_align][errors]") {
  graph g = roi_align_graph({});
  auto sys = test::make_system();
  session s{sys};
  auto c = s.compile(g);
  const tensor x({2, 1, 4, 4}, dtype::f32, test::iota(32));
  const tensor rois({2, 4}, dtype::f32, {0, 0, 1, 1, 0, 0, 2, 2});
  try {
    (void)s.run(c, {{"x", x}, {"rois", rois}, {"idx", tensor({2}, dtype::i64, {0, 2})}});
    FAIL("batch index 2 of a batch of 2 was read");
  } catch (const error& e) {
    CHECK(e.code() == errc::invalid_argument);
    CHECK_THAT(e.what(), Catch::Matchers::ContainsSubstring("batch_indices[1] = 2"));
  }
}

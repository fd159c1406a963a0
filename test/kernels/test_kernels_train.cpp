// The inverse trigonometric functions: each against a reference
// written from ONNX's operator documentation (and NumPy's functions it names), evaluated in
// double or long double, never from the kernels' own output.
#include "helpers.hpp"

#include <npurt/error.hpp>

#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

using namespace kt;
namespace k = npurt::kernels;
using npurt::errc;

namespace {

// The relative error a result rounded once to t may carry, with a little room for libm.
double trig_tolerance(dtype t) {
  switch (t) {
    case dtype::f64: return 8 * std::numeric_limits<double>::epsilon();
    case dtype::f32: return 4e-7;
    case dtype::f16: return 1e-3;
    default: return 8e-3;  // bf16
  }
}

}  // namespace

TEST_CASE("asin, acos and atan follow numpy.arcsin, arccos and arctan in every float dtype, NaN outside the domain",
          "[kernels][eltwise][trig]") {
  // In and beyond [-1, 1], the ends, signed zeros and the infinities.
  const std::vector<double> v{-1.0, -0.999, -0.75, -0.5, -0.1, -0.0, 0.0,      0.1,       0.3, 0.5,
                              0.75, 0.999,  1.0,   1.5,  -1.5, 3.0,  INFINITY, -INFINITY, NAN};
  const double half_pi = std::numbers::pi / 2;
  for (const dtype t : {dtype::f32, dtype::f16, dtype::bf16, dtype::f64}) {
    CAPTURE(npurt::to_string(t));
    tensor x({static_cast<std::int64_t>(v.size())}, t), y(x.desc.shape, t);
    x.assign(v);
    const auto held = x.values();
    for (const auto fn : {k::eltwise_fn::asin, k::eltwise_fn::acos, k::eltwise_fn::atan}) {
      CAPTURE(k::op_name(k::elementwise{fn}));
      REQUIRE(run(k::elementwise{fn, x.desc, {}, y.desc}) == 0);
      for (std::size_t i = 0; i < v.size(); ++i) {
        const double in = held[i];
        CAPTURE(in);
        const bool outside = std::isnan(in) || (fn != k::eltwise_fn::atan && std::fabs(in) > 1);
        if (outside) {
          CHECK(std::isnan(y.get(i)));
          continue;
        }
        // arctan(+-inf) = +-pi/2; otherwise the functions' values in double.
        const double want = fn == k::eltwise_fn::asin   ? std::asin(in)
                            : fn == k::eltwise_fn::acos ? std::acos(in)
                            : std::isinf(in)            ? std::copysign(half_pi, in)
                                                        : std::atan(in);
        CHECK(std::fabs(y.get(i) - want) <= trig_tolerance(t) * std::fabs(want) + 1e-300);
        // Odd functions keep the sign of zero; acos(0) is pi/2.
        if (in == 0 && fn != k::eltwise_fn::acos) CHECK(std::signbit(y.get(i)) == std::signbit(in));
      }
    }
    if (t == dtype::f32) {
      CHECK(y.get(0) == static_cast<float>(-std::atan(1.0)));  // atan(-1) = -pi/4, rounded once
    }
  }
}

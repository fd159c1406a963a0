// The epilogue of the cube kernels (bias, residual, activation applied as results leave the
// accumulator): a fused kernel computes exactly what the separate kernels it replaces compute.
#include "helpers.hpp"

#include <npurt/error.hpp>

#include <catch2/catch_test_macros.hpp>

#include <bit>
#include <cstring>

using namespace kt;
namespace k = npurt::kernels;
using npurt::errc;

namespace {

// Bytes equal: bit-identical results, NaN payloads and signed zeros included.
bool same_bytes(const tensor& a, const tensor& b) { return a.bytes == b.bytes; }

k::eltwise_fn as_fn(k::activation a) {
  switch (a) {
    case k::activation::gelu: return k::eltwise_fn::gelu;
    case k::activation::sigmoid: return k::eltwise_fn::sigmoid;
    case k::activation::tanh: return k::eltwise_fn::tanh;
    default: return k::eltwise_fn::relu;
  }
}

// The unfused sequence: out, out += bias, out += residual, out = act(out), each its own kernel.
void unfused_tail(tensor& out, const tensor* bias, const tensor* residual, k::activation act) {
  if (bias) REQUIRE(run(k::elementwise{k::eltwise_fn::add, out.desc, bias->desc, out.desc}) == 0);
  if (residual) REQUIRE(run(k::elementwise{k::eltwise_fn::add, out.desc, residual->desc, out.desc}) == 0);
  if (act != k::activation::none) REQUIRE(run(k::elementwise{as_fn(act), out.desc, {}, out.desc}) == 0);
}

}  // namespace

TEST_CASE("a matmul with a fused epilogue equals matmul, add, add and activation kernels bit for bit",
          "[kernels][matmul][epilogue]") {
  const std::int64_t M = 13, N = 24, K = 37;
  for (dtype t : {dtype::f32, dtype::f16, dtype::bf16})
    for (auto act :
         {k::activation::none, k::activation::relu, k::activation::gelu, k::activation::sigmoid, k::activation::tanh})
      for (int parts = 0; parts < 4; ++parts) {
        const bool with_bias = (parts & 1) != 0, with_res = (parts & 2) != 0;
        CAPTURE(static_cast<int>(t), static_cast<int>(act), with_bias, with_res);
        tensor a({M, K}, t), b({K, N}, t), bias({N}, t), res({M, N}, t);
        a.fill(1, -1, 1, false);
        b.fill(2, -1, 1, false);
        bias.fill(3, -2, 2, false);
        res.fill(4, -2, 2, false);
        tensor fused({M, N}, t), plain({M, N}, t);
        k::matmul f{a.desc, b.desc, fused.desc};
        if (with_bias) f.bias = bias.desc;
        if (with_res) f.residual = res.desc;
        f.act = act;
        REQUIRE(run(f) == 0);
        REQUIRE(run(k::matmul{a.desc, b.desc, plain.desc}) == 0);
        unfused_tail(plain, with_bias ? &bias : nullptr, with_res ? &res : nullptr, act);
        CHECK(same_bytes(fused, plain));
        if (act == k::activation::relu)
          for (std::size_t i = 0; i < fused.size(); ++i) REQUIRE(fused.get(i) >= 0.0);
      }
}

TEST_CASE("a conv2d with a per-channel bias, a residual and Relu equals the unfused kernels bit for bit",
          "[kernels][conv][epilogue]") {
  for (dtype t : {dtype::f32, dtype::f16}) {
    CAPTURE(static_cast<int>(t));
    tensor x({2, 5, 9, 9}, t), w({6, 5, 3, 3}, t), bias({1, 6, 1, 1}, t), res({2, 6, 9, 9}, t);
    x.fill(5, -1, 1, false);
    w.fill(6, -1, 1, false);
    bias.fill(7, -1, 1, false);
    res.fill(8, -1, 1, false);
    tensor fused({2, 6, 9, 9}, t), plain({2, 6, 9, 9}, t);
    k::conv2d f{x.desc, w.desc, fused.desc, {1, 1}, {1, 1}};
    f.bias = bias.desc;
    f.residual = res.desc;
    f.act = k::activation::relu;
    REQUIRE(run(f) == 0);
    REQUIRE(run(k::conv2d{x.desc, w.desc, plain.desc, {1, 1}, {1, 1}}) == 0);
    unfused_tail(plain, &bias, &res, k::activation::relu);
    CHECK(same_bytes(fused, plain));
    // Not a no-op: the epilogue changed the plain convolution's result.
    tensor bare({2, 6, 9, 9}, t);
    REQUIRE(run(k::conv2d{x.desc, w.desc, bare.desc, {1, 1}, {1, 1}}) == 0);
    CHECK_FALSE(same_bytes(fused, bare));
  }
}

TEST_CASE("an epilogue the kernel cannot apply is refused with a typed error", "[kernels][epilogue][validate]") {
  tensor a({4, 8}), b({8, 16}), c({4, 16});
  k::matmul m{a.desc, b.desc, c.desc};
  SECTION("a bias that does not broadcast to the output") {
    tensor bias({15});
    m.bias = bias.desc;
    CHECK(run(m) == static_cast<int>(errc::invalid_shape));
  }
  SECTION("a residual of another dtype") {
    tensor res({4, 16}, dtype::f16);
    m.residual = res.desc;
    CHECK(run(m) == static_cast<int>(errc::invalid_dtype));
  }
  SECTION("an activation on an INT32 accumulator") {
    tensor a8({4, 8}, dtype::i8), b8({8, 16}, dtype::i8), c32({4, 16}, dtype::i32);
    k::matmul q{a8.desc, b8.desc, c32.desc};
    q.act = k::activation::relu;
    CHECK(run(q) == static_cast<int>(errc::invalid_dtype));
  }
  SECTION("an activation value outside the enumeration") {
    m.act = static_cast<k::activation>(42);
    CHECK(run(m) == static_cast<int>(errc::invalid_argument));
  }
  SECTION("a bias without data beside operands with data") {
    m.bias = shape_only({16});
    CHECK(run(m) == static_cast<int>(errc::invalid_argument));
  }
}

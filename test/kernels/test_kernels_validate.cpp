// Validation: every wrong shape, dtype, layout or parameter gets its typed error before
// anything runs; timing-only descriptors, pointer translation and the operand lists.
#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

using namespace kt;
namespace k = npurt::kernels;
using npurt::errc;
using npurt::kernel_desc;
using npurt::layout;

namespace {

tensor_desc t(shape s, dtype d = dtype::f32, layout l = layout::nd) {
  tensor_desc r = shape_only(s, d);
  r.format = l;
  return r;
}

struct bad_case {
  std::string what;
  kernel_desc k;
  errc want;
};

k::conv2d conv(tensor_desc x, tensor_desc w, tensor_desc y, std::array<std::int32_t, 2> s = {1, 1},
               std::array<std::int32_t, 2> p = {0, 0}, std::array<std::int32_t, 2> d = {1, 1}, std::int32_t g = 1) {
  return k::conv2d{x, w, y, s, p, d, g};
}

k::reduce red(tensor_desc x, tensor_desc y, std::uint32_t mask, bool keep = false) {
  return k::reduce{k::reduce_fn::sum, x, y, mask, keep};
}

k::transpose tr(tensor_desc x, tensor_desc y, std::initializer_list<std::uint8_t> perm) {
  k::transpose op{x, y};
  std::copy(perm.begin(), perm.end(), op.perm.begin());
  return op;
}

k::slice sl(tensor_desc x, tensor_desc y, std::initializer_list<std::int64_t> starts,
            std::initializer_list<std::int64_t> steps) {
  k::slice op{x, y};
  std::copy(starts.begin(), starts.end(), op.starts.begin());
  std::copy(steps.begin(), steps.end(), op.steps.begin());
  return op;
}

}  // namespace

TEST_CASE("well-formed descriptors of every operation validate", "[kernels][validate]") {
  const kernel_desc good[] = {
      k::fixed{},
      k::matmul{t({4, 8}), t({8, 3}), t({4, 3})},
      k::matmul{t({8, 4}), t({3, 8}), t({4, 3}), true, true},
      k::matmul{t({2, 4, 8}), t({8, 3}), t({2, 4, 3})},
      k::matmul{t({4, 8}, dtype::f16), t({8, 3}, dtype::f16), t({4, 3}, dtype::f16)},
      k::matmul{t({4, 8}, dtype::f16), t({8, 3}, dtype::f16), t({4, 3}, dtype::f32)},
      k::matmul{t({4, 8}, dtype::bf16), t({8, 3}, dtype::bf16), t({4, 3}, dtype::bf16)},
      k::matmul{t({4, 8}, dtype::i8), t({8, 3}, dtype::i8), t({4, 3}, dtype::i32)},
      conv(t({2, 3, 224, 224}, dtype::f16, layout::nchw), t({64, 3, 7, 7}, dtype::f16),
           t({2, 64, 112, 112}, dtype::f16), {2, 2}, {3, 3}),
      conv(t({1, 8, 5, 5}), t({8, 1, 3, 3}), t({1, 8, 5, 5}), {1, 1}, {2, 2}, {2, 2}, 8),
      conv(t({1, 8, 5, 5}, dtype::i8), t({4, 8, 1, 1}, dtype::i8), t({1, 4, 5, 5}, dtype::i32)),
      k::conv2d_backward_data{t({2, 64, 112, 112}), t({64, 3, 7, 7}), t({2, 3, 224, 224}), {2, 2}, {3, 3}},
      k::conv2d_backward_weight{t({2, 3, 224, 224}), t({2, 64, 112, 112}), t({64, 3, 7, 7}), {2, 2}, {3, 3}},
      k::elementwise{k::eltwise_fn::add, t({2, 3, 4}), t({3, 1}), t({2, 3, 4})},
      k::elementwise{k::eltwise_fn::gelu, t({7}), {}, t({7})},
      k::batchnorm{t({4, 3, 2, 2}), t({3}), t({3}), t({3}), t({3}), t({4, 3, 2, 2}), t({3}), t({3})},
      k::batchnorm{t({1, 3, 1, 1}), {}, {}, t({3}), t({3}), t({1, 3, 1, 1}), {}, {}, false},
      k::batchnorm_backward{t({4, 3, 2, 2}), t({4, 3, 2, 2}), t({3}), t({3}), t({3}), t({4, 3, 2, 2}), t({3}), t({3})},
      k::layernorm{t({2, 5, 6}), t({5, 6}), t({30}), t({2, 5, 6}), 1},
      k::pool2d{k::pool_mode::max, t({1, 64, 112, 112}), t({1, 64, 56, 56}), {3, 3}, {2, 2}, {1, 1}},
      k::pool2d{k::pool_mode::global_avg, t({8, 2048, 7, 7}), t({8, 2048, 1, 1})},
      k::pool2d_backward{k::pool_mode::avg, {}, t({1, 2, 2, 2}), t({1, 2, 4, 4})},
      k::softmax{t({3, 4}), t({3, 4}), 0},
      red(t({2, 3, 4}), t({1}), 0b111),
      red(t({2, 3, 4}), t({1, 3, 1}), 0b101, true),
      tr(t({2, 3, 4}, dtype::i64), t({4, 2, 3}, dtype::i64), {2, 0, 1}),
      sl(t({4, 6}, dtype::u8), t({2, 3}, dtype::u8), {3, 5}, {-2, -2}),
      sl(t({5}), t({1}), {4}, {std::numeric_limits<std::int64_t>::min()}),
      k::slice{t({2, 3}, dtype::bf16), t({2, 3}, dtype::bf16)},
      k::pad{t({2, 3}, dtype::u8), t({5, 1}, dtype::u8), {1, -2}, 255, k::pad_mode::constant},
      k::pad{t({2, 3}), t({9, 3}), {-4, 0}, 0, k::pad_mode::reflect},  // a crop past x: border only
      k::pad{t({4}, dtype::bf16), t({4}, dtype::bf16), {}, 0.5, k::pad_mode::wrap},
      k::tile{t({2, 1}, dtype::i8), t({4, 7}, dtype::i8)},
      k::nll_loss{t({4, 3, 2}), t({4, 2}, dtype::i64), t({3}), t({1})},
      k::nll_loss{
          t({4, 3}, dtype::f16), t({4}, dtype::i32), {}, t({4}, dtype::f16), -100, true, k::loss_reduction::none},
      k::trilu{t({2, 3, 4}, dtype::i64), t({2, 3, 4}, dtype::i64), std::numeric_limits<std::int64_t>::min(), false},
      k::resize{t({1, 3, 4, 4}, dtype::f16), t({1, 3, 8, 2}, dtype::f16), {1, 1, 2, 0.5}},
      k::resize{t({5}, dtype::bf16),
                t({7}, dtype::bf16),
                {1.4},
                -0.5f,
                k::resize_mode::cubic,
                k::resize_coordinates::align_corners,
                k::nearest_rounding::ceil,
                true},
      k::resize{t({2, 3}, dtype::i64), t({4, 3}, dtype::i64), {2, 1}},  // nearest: integers are copied
      k::resize{t({3}, dtype::boolean), t({6}, dtype::boolean), {2}},
      k::gather_elements{t({3, 4}), t({5, 2}, dtype::i32), t({5, 2}), 0},
      k::cast{t({5}, dtype::u8), t({5}, dtype::bf16)},
      k::sgd_update{t({10}, dtype::f32), t({10}, dtype::f16), t({10}), 0.1f, 0.9f},
      k::gather{t({5, 3}), t({2, 4}, dtype::i64), t({2, 4, 3}), 0},
      k::gather{t({5, 3}, dtype::f16), t({}, dtype::i32), t({5}, dtype::f16), 1},  // a scalar index
      k::gather{t({5}, dtype::i64), t({}, dtype::i64), t({}, dtype::i64), 0},      // ... of a vector
      k::gather{t({2, 3, 4}, dtype::u8), t({6}, dtype::i32), t({2, 6, 4}, dtype::u8), 1},
      k::grid_sample{t({2, 3, 4, 5}, dtype::f16), t({2, 6, 7, 2}), t({2, 3, 6, 7}, dtype::f16)},
      k::grid_sample{t({1, 2, 9}, dtype::bf16), t({1, 4, 1}, dtype::f16), t({1, 2, 4}, dtype::bf16),
                     k::grid_sample_mode::cubic, k::grid_padding::reflection, true},
      k::grid_sample{t({1, 1, 2, 3, 4}), t({1, 5, 6, 7, 3}, dtype::bf16), t({1, 1, 5, 6, 7}),
                     k::grid_sample_mode::nearest},
      k::compare{k::compare_fn::less_equal, t({2, 1}, dtype::bf16), t({3}, dtype::bf16), t({2, 3}, dtype::boolean)},
      k::where{t({3}, dtype::boolean), t({2, 3}, dtype::boolean), t({1}, dtype::boolean), t({2, 3}, dtype::boolean)},
      k::logical{k::logical_fn::xor_, t({2, 1}, dtype::boolean), t({1, 2}, dtype::boolean), t({2, 2}, dtype::boolean)},
  };
  for (const auto& k : good) {
    CAPTURE(k.display_name());
    CHECK(npurt::sim::validate(k).value() == 0);
    CHECK(npurt::sim::run_reference(k).value() == 0);  // timing-only: a no-op that succeeds
  }
}

TEST_CASE("every kind of bad descriptor gets its typed error", "[kernels][validate]") {
  const tensor_desc f4 = t({2, 3, 8, 8});
  const bad_case cases[] = {
      // Generic tensor checks.
      {"zero dimension", k::matmul{t({0, 8}), t({8, 3}), t({0, 3})}, errc::invalid_shape},
      {"negative dimension", k::matmul{t({-4, 8}), t({8, 3}), t({-4, 3})}, errc::invalid_shape},
      {"rank-0 required tensor", k::elementwise{k::eltwise_fn::relu, {}, {}, {}}, errc::invalid_shape},
      {"element count overflow", k::cast{t({1 << 30, 1 << 30, 1 << 30}), t({1 << 30, 1 << 30, 1 << 30})},
       errc::invalid_shape},
      {"NHWC layout", conv(t({2, 8, 8, 3}, dtype::f32, layout::nhwc), t({4, 3, 3, 3}), t({2, 4, 6, 6})),
       errc::invalid_layout},
      {"NC1HWC0 layout",
       k::elementwise{k::eltwise_fn::relu, t({4}, dtype::f16, layout::nc1hwc0), {}, t({4}, dtype::f16)},
       errc::invalid_layout},
      {"unknown dtype", k::cast{t({4}, static_cast<dtype>(99)), t({4})}, errc::invalid_dtype},
      {"unknown rounding mode", k::cast{t({4}), t({4}, dtype::i32), static_cast<k::round_mode>(9)},
       errc::invalid_argument},
      // matmul
      {"matmul K mismatch", k::matmul{t({4, 8}), t({7, 3}), t({4, 3})}, errc::invalid_shape},
      {"matmul K mismatch after transpose", k::matmul{t({4, 8}), t({8, 3}), t({4, 3}), true}, errc::invalid_shape},
      {"matmul wrong C", k::matmul{t({4, 8}), t({8, 3}), t({3, 4})}, errc::invalid_shape},
      {"matmul rank 1", k::matmul{t({8}), t({8, 3}), t({3})}, errc::invalid_shape},
      {"matmul rank 4", k::matmul{t({1, 2, 4, 8}), t({1, 2, 8, 3}), t({1, 2, 4, 3})}, errc::invalid_shape},
      {"matmul batch mismatch", k::matmul{t({2, 4, 8}), t({3, 8, 3}), t({2, 4, 3})}, errc::invalid_shape},
      {"matmul batched C for 2-D operands", k::matmul{t({4, 8}), t({8, 3}), t({1, 4, 3})}, errc::invalid_shape},
      {"matmul mixed input dtypes", k::matmul{t({4, 8}, dtype::f16), t({8, 3}), t({4, 3})}, errc::invalid_dtype},
      {"matmul FP32 into FP16", k::matmul{t({4, 8}), t({8, 3}), t({4, 3}, dtype::f16)}, errc::invalid_dtype},
      {"matmul INT8 into INT8", k::matmul{t({4, 8}, dtype::i8), t({8, 3}, dtype::i8), t({4, 3}, dtype::i8)},
       errc::invalid_dtype},
      {"matmul INT32 inputs", k::matmul{t({4, 8}, dtype::i32), t({8, 3}, dtype::i32), t({4, 3}, dtype::i32)},
       errc::invalid_dtype},
      {"matmul NaN alpha", k::matmul{t({4, 8}), t({8, 3}), t({4, 3}), false, false, NAN}, errc::invalid_argument},
      // conv2d
      {"conv stride 0", conv(f4, t({4, 3, 3, 3}), t({2, 4, 6, 6}), {0, 1}), errc::invalid_argument},
      {"conv negative pad", conv(f4, t({4, 3, 3, 3}), t({2, 4, 6, 6}), {1, 1}, {-1, 0}), errc::invalid_argument},
      {"conv dilation 0", conv(f4, t({4, 3, 3, 3}), t({2, 4, 6, 6}), {1, 1}, {0, 0}, {1, 0}), errc::invalid_argument},
      {"conv groups 0", conv(f4, t({4, 3, 3, 3}), t({2, 4, 6, 6}), {1, 1}, {0, 0}, {1, 1}, 0), errc::invalid_argument},
      {"conv wrong output size", conv(f4, t({4, 3, 3, 3}), t({2, 4, 8, 8})), errc::invalid_shape},
      {"conv output size ignores stride", conv(f4, t({4, 3, 3, 3}), t({2, 4, 6, 6}), {2, 2}), errc::invalid_shape},
      {"conv output size ignores dilation", conv(f4, t({4, 3, 3, 3}), t({2, 4, 6, 6}), {1, 1}, {0, 0}, {2, 2}),
       errc::invalid_shape},
      {"conv wrong output channels", conv(f4, t({4, 3, 3, 3}), t({2, 5, 6, 6})), errc::invalid_shape},
      {"conv wrong batch", conv(f4, t({4, 3, 3, 3}), t({1, 4, 6, 6})), errc::invalid_shape},
      {"conv weight channels", conv(f4, t({4, 2, 3, 3}), t({2, 4, 6, 6})), errc::invalid_shape},
      {"conv channels not divisible by groups", conv(f4, t({4, 1, 3, 3}), t({2, 4, 6, 6}), {1, 1}, {0, 0}, {1, 1}, 2),
       errc::invalid_shape},
      {"conv kernel larger than padded input", conv(t({1, 1, 2, 2}), t({1, 1, 5, 5}), t({1, 1, 1, 1})),
       errc::invalid_shape},
      {"conv rank 3", conv(t({3, 8, 8}), t({4, 3, 3, 3}), t({4, 6, 6})), errc::invalid_shape},
      {"conv mixed dtypes", conv(t({2, 3, 8, 8}, dtype::f16), t({4, 3, 3, 3}), t({2, 4, 6, 6})), errc::invalid_dtype},
      {"conv INT8 into FP32", conv(t({2, 3, 8, 8}, dtype::i8), t({4, 3, 3, 3}, dtype::i8), t({2, 4, 6, 6})),
       errc::invalid_dtype},
      {"conv backward-data relu_y dtype",
       k::conv2d_backward_data{t({2, 4, 6, 6}), t({4, 3, 3, 3}), t({2, 3, 8, 8}), {1, 1}, {0, 0}, {1, 1}, 1,
                               t({2, 3, 8, 8}, dtype::f16)},
       errc::invalid_dtype},
      {"conv backward-data relu_y shape",
       k::conv2d_backward_data{t({2, 4, 6, 6}), t({4, 3, 3, 3}), t({2, 3, 8, 8}), {1, 1}, {0, 0}, {1, 1}, 1,
                               t({2, 3, 8, 4})},
       errc::invalid_shape},
      {"conv backward-data wrong dx", k::conv2d_backward_data{t({2, 4, 6, 6}), t({4, 3, 3, 3}), t({2, 3, 9, 8})},
       errc::invalid_shape},
      {"conv backward-data INT8",
       k::conv2d_backward_data{t({2, 4, 6, 6}, dtype::i8), t({4, 3, 3, 3}, dtype::i8), t({2, 3, 8, 8}, dtype::i32)},
       errc::invalid_dtype},
      {"conv backward-weight wrong dw", k::conv2d_backward_weight{f4, t({2, 4, 6, 6}), t({4, 3, 2, 3})},
       errc::invalid_shape},
      {"conv backward-weight stride 0", k::conv2d_backward_weight{f4, t({2, 4, 6, 6}), t({4, 3, 3, 3}), {1, 0}},
       errc::invalid_argument},
      // elementwise
      {"not broadcastable", k::elementwise{k::eltwise_fn::add, t({2, 3}), t({2}), t({2, 3})}, errc::invalid_shape},
      {"broadcast output wrong", k::elementwise{k::eltwise_fn::mul, t({2, 1}), t({1, 3}), t({2, 1})},
       errc::invalid_shape},
      {"broadcast output rank", k::elementwise{k::eltwise_fn::mul, t({3}), t({3}), t({1, 3})}, errc::invalid_shape},
      {"unary output shape", k::elementwise{k::eltwise_fn::tanh, t({2, 3}), {}, t({3, 2})}, errc::invalid_shape},
      {"elementwise INT32 of a float-only function",
       k::elementwise{k::eltwise_fn::tanh, t({3}, dtype::i32), {}, t({3}, dtype::i32)}, errc::invalid_dtype},
      {"elementwise INT32 relu_backward",
       k::elementwise{k::eltwise_fn::relu_backward, t({3}, dtype::i32), t({3}, dtype::i32), t({3}, dtype::i32)},
       errc::invalid_dtype},
      {"elementwise float mod (ONNX: fmod = 1 for floats)", k::elementwise{k::eltwise_fn::mod, t({3}), t({3}), t({3})},
       errc::invalid_dtype},
      {"elementwise INT32 to INT64",
       k::elementwise{k::eltwise_fn::add, t({3}, dtype::i32), t({3}, dtype::i32), t({3}, dtype::i64)},
       errc::invalid_dtype},
      {"cumsum axis", k::cumsum{t({2, 3}), t({2, 3}), 2}, errc::invalid_argument},
      {"cumsum shape", k::cumsum{t({2, 3}), t({3, 2}), 0}, errc::invalid_shape},
      {"reduce fn past prod",
       k::reduce{static_cast<k::reduce_fn>(static_cast<int>(k::reduce_fn::prod) + 1), t({2, 3}), t({2}), 2u},
       errc::invalid_argument},
      {"elementwise mixed dtypes", k::elementwise{k::eltwise_fn::add, t({3}, dtype::f16), t({3}), t({3}, dtype::f16)},
       errc::invalid_dtype},
      {"elementwise output dtype", k::elementwise{k::eltwise_fn::relu, t({3}, dtype::f16), {}, t({3})},
       errc::invalid_dtype},
      {"unknown elementwise function", k::elementwise{static_cast<k::eltwise_fn>(200), t({3}), t({3}), t({3})},
       errc::invalid_argument},
      // batchnorm
      {"bn gamma size", k::batchnorm{f4, t({4}), {}, {}, {}, f4}, errc::invalid_shape},
      {"bn gamma rank", k::batchnorm{f4, t({1, 3}), {}, {}, {}, f4}, errc::invalid_shape},
      {"bn running stats size", k::batchnorm{f4, {}, {}, t({3}), t({2}), f4}, errc::invalid_shape},
      {"bn saved stats size", k::batchnorm{f4, {}, {}, {}, {}, f4, t({3}), t({6})}, errc::invalid_shape},
      {"bn inference without running stats", k::batchnorm{f4, {}, {}, {}, {}, f4, {}, {}, false}, errc::invalid_shape},
      {"bn rank 1", k::batchnorm{t({8}), {}, {}, {}, {}, t({8})}, errc::invalid_shape},
      {"bn y shape", k::batchnorm{f4, {}, {}, {}, {}, t({2, 3, 8, 7})}, errc::invalid_shape},
      {"bn one value per channel in training", k::batchnorm{t({1, 3, 1, 1}), {}, {}, {}, {}, t({1, 3, 1, 1})},
       errc::invalid_shape},
      {"bn momentum above 1", k::batchnorm{f4, {}, {}, {}, {}, f4, {}, {}, true, 1e-5f, 2.0f}, errc::invalid_argument},
      {"bn negative eps", k::batchnorm{f4, {}, {}, {}, {}, f4, {}, {}, true, -1.0f}, errc::invalid_argument},
      {"bn INT8", k::batchnorm{t({2, 3, 8, 8}, dtype::i8), {}, {}, {}, {}, t({2, 3, 8, 8}, dtype::i8)},
       errc::invalid_dtype},
      {"bn channel vector INT32", k::batchnorm{f4, t({3}, dtype::i32), {}, {}, {}, f4}, errc::invalid_dtype},
      {"bn backward saved mean size", k::batchnorm_backward{f4, f4, {}, t({4}), t({3}), f4}, errc::invalid_shape},
      {"bn backward dx shape", k::batchnorm_backward{f4, f4, {}, t({3}), t({3}), t({2, 3, 8, 9})}, errc::invalid_shape},
      {"bn backward missing saved stats", k::batchnorm_backward{f4, f4, {}, {}, {}, f4}, errc::invalid_shape},
      {"bn backward writes nothing", k::batchnorm_backward{f4, f4, {}, t({3}), t({3}), {}}, errc::invalid_argument},
      // layernorm
      {"layernorm axis past rank", k::layernorm{t({2, 3, 4}), {}, {}, t({2, 3, 4}), 3}, errc::invalid_argument},
      {"layernorm axis below -rank", k::layernorm{t({2, 3, 4}), {}, {}, t({2, 3, 4}), -4}, errc::invalid_argument},
      {"layernorm gamma shape", k::layernorm{t({2, 3, 4}), t({3, 4}), {}, t({2, 3, 4}), -1}, errc::invalid_shape},
      {"layernorm y shape", k::layernorm{t({2, 3, 4}), {}, {}, t({2, 12})}, errc::invalid_shape},
      // pooling
      {"pool window 0", k::pool2d{k::pool_mode::max, f4, t({2, 3, 4, 4}), {0, 2}}, errc::invalid_argument},
      {"pool stride 0", k::pool2d{k::pool_mode::avg, f4, t({2, 3, 4, 4}), {2, 2}, {2, 0}}, errc::invalid_argument},
      {"pool backward pad over half the window",
       k::pool2d_backward{k::pool_mode::avg, {}, t({2, 3, 6, 6}), f4, {2, 2}, {2, 2}, {2, 2}}, errc::invalid_argument},
      {"pool dilation 0", k::pool2d{k::pool_mode::max, f4, t({2, 3, 4, 4}), {2, 2}, {2, 2}, {0, 0}, {0, 0}, {1, 0}},
       errc::invalid_argument},
      {"pool output size", k::pool2d{k::pool_mode::max, f4, t({2, 3, 5, 4})}, errc::invalid_shape},
      {"pool window larger than input", k::pool2d{k::pool_mode::max, t({1, 1, 2, 2}), t({1, 1, 1, 1}), {3, 3}, {1, 1}},
       errc::invalid_shape},
      {"global pool output", k::pool2d{k::pool_mode::global_avg, f4, t({2, 3})}, errc::invalid_shape},
      {"pool rank 2", k::pool2d{k::pool_mode::max, t({8, 8}), t({4, 4})}, errc::invalid_shape},
      {"pool rank 6", k::pool2d{k::pool_mode::max, t({1, 1, 2, 2, 2, 2}), t({1, 1, 1, 1, 1, 1})}, errc::invalid_shape},
      {"pool output dtype", k::pool2d{k::pool_mode::max, f4, t({2, 3, 4, 4}, dtype::f16)}, errc::invalid_dtype},
      {"unknown pool mode", k::pool2d{static_cast<k::pool_mode>(9), f4, t({2, 3, 4, 4})}, errc::invalid_argument},
      {"max pool backward without x", k::pool2d_backward{k::pool_mode::max, {}, t({2, 3, 4, 4}), f4},
       errc::invalid_argument},
      {"pool backward dy shape", k::pool2d_backward{k::pool_mode::avg, f4, t({2, 3, 3, 4}), f4}, errc::invalid_shape},
      {"pool backward x and dx differ", k::pool2d_backward{k::pool_mode::max, t({2, 3, 8, 6}), t({2, 3, 4, 4}), f4},
       errc::invalid_shape},
      // softmax, reduce, transpose, slice, cast, sgd
      {"softmax axis", k::softmax{t({3, 4}), t({3, 4}), 2}, errc::invalid_argument},
      {"softmax negative axis", k::softmax{t({3, 4}), t({3, 4}), -3}, errc::invalid_argument},
      {"softmax y shape", k::softmax{t({3, 4}), t({4, 3})}, errc::invalid_shape},
      {"reduce empty mask", red(t({2, 3}), t({2, 3}), 0), errc::invalid_argument},
      {"reduce mask past rank", red(t({2, 3}), t({2}), 0b100), errc::invalid_argument},
      {"reduce output shape", red(t({2, 3, 4}), t({2, 4}), 0b001), errc::invalid_shape},
      {"reduce keep_dims shape", red(t({2, 3, 4}), t({3, 4}), 0b001, true), errc::invalid_shape},
      {"reduce full needs {1}", red(t({2, 3}), t({1, 1}), 0b11), errc::invalid_shape},
      {"reduce mean INT32", k::reduce{k::reduce_fn::mean, t({4}, dtype::i32), t({1}, dtype::i32), 1},
       errc::invalid_dtype},
      {"reduce max BOOL", k::reduce{k::reduce_fn::max, t({4}, dtype::boolean), t({1}, dtype::boolean), 1},
       errc::invalid_dtype},
      {"reduce sum INT32 to INT64", k::reduce{k::reduce_fn::sum, t({4}, dtype::i32), t({1}, dtype::i64), 1},
       errc::invalid_dtype},
      {"transpose repeated axis", tr(t({2, 3}), t({2, 2}), {0, 0}), errc::invalid_argument},
      {"transpose axis out of range", tr(t({2, 3}), t({3, 2}), {2, 0}), errc::invalid_argument},
      {"transpose output shape", tr(t({2, 3, 4}), t({2, 3, 4}), {1, 0, 2}), errc::invalid_shape},
      {"transpose rank", tr(t({2, 3}), t({3, 2, 1}), {1, 0}), errc::invalid_shape},
      {"transpose dtype", tr(t({2, 3}), t({3, 2}, dtype::f16), {1, 0}), errc::invalid_dtype},
      {"slice rank", sl(t({4, 6}), t({4}), {0, 0}, {1, 1}), errc::invalid_shape},
      {"slice dtype", sl(t({4, 6}), t({4, 6}, dtype::f16), {0, 0}, {1, 1}), errc::invalid_dtype},
      {"slice step 0", sl(t({4, 6}), t({1, 6}), {0, 0}, {0, 1}), errc::invalid_argument},
      {"slice start past x", sl(t({4, 6}), t({1, 6}), {4, 0}, {1, 1}), errc::invalid_argument},
      {"slice negative start", sl(t({4, 6}), t({1, 6}), {-1, 0}, {1, 1}), errc::invalid_argument},
      {"slice window past x's end", sl(t({4, 6}), t({2, 6}), {3, 0}, {1, 1}), errc::invalid_shape},
      {"slice window before x's start", sl(t({4, 6}), t({4, 4}), {0, 4}, {1, -2}), errc::invalid_shape},
      {"slice step whose span overflows",
       sl(t({4, 6}), t({4, 2}), {0, 0}, {1, std::numeric_limits<std::int64_t>::max()}), errc::invalid_shape},
      {"slice backward span overflows", sl(t({4, 6}), t({4, 3}), {0, 5}, {1, std::numeric_limits<std::int64_t>::min()}),
       errc::invalid_shape},
      {"pad dtype", k::pad{t({2, 3}), t({4, 3}, dtype::f16), {1, 0}}, errc::invalid_dtype},
      {"pad rank", k::pad{t({2, 3}), t({6}), {0, 0}}, errc::invalid_shape},
      {"pad mode", k::pad{t({2, 3}), t({2, 3}), {}, 0, static_cast<k::pad_mode>(4)}, errc::invalid_argument},
      {"pad fill an f16 rounds", k::pad{t({2}, dtype::f16), t({4}, dtype::f16), {1}, 0.1}, errc::invalid_argument},
      {"pad fill past u8", k::pad{t({2}, dtype::u8), t({4}, dtype::u8), {1}, 256}, errc::invalid_argument},
      {"pad fill not an integer", k::pad{t({2}, dtype::i32), t({4}, dtype::i32), {1}, 0.5}, errc::invalid_argument},
      {"pad fill NaN in an integer", k::pad{t({2}, dtype::i64), t({4}, dtype::i64), {1}, std::nan("")},
       errc::invalid_argument},
      {"pad begin whose index overflows", k::pad{t({2}), t({4}), {std::numeric_limits<std::int64_t>::min()}},
       errc::invalid_argument},
      {"gather float indices", k::gather{t({5, 3}), t({2}), t({2, 3})}, errc::invalid_dtype},
      {"gather int8 indices", k::gather{t({5, 3}), t({2}, dtype::i8), t({2, 3})}, errc::invalid_dtype},
      {"gather y dtype", k::gather{t({5, 3}), t({2}, dtype::i64), t({2, 3}, dtype::f16)}, errc::invalid_dtype},
      {"gather negative axis", k::gather{t({5, 3}), t({2}, dtype::i64), t({5, 2}), -1}, errc::invalid_argument},
      {"gather axis past the rank", k::gather{t({5, 3}), t({2}, dtype::i64), t({5, 3, 2}), 2}, errc::invalid_argument},
      {"gather y rank", k::gather{t({5, 3}), t({2, 2}, dtype::i64), t({4, 3}), 0}, errc::invalid_shape},
      {"gather y keeps the axis", k::gather{t({5, 3}), t({}, dtype::i64), t({1, 3}), 0}, errc::invalid_shape},
      {"gather y dimension", k::gather{t({5, 3}), t({2}, dtype::i64), t({2, 4}), 0}, errc::invalid_shape},
      {"gather y dimension after the axis", k::gather{t({5, 3, 2}), t({2}, dtype::i64), t({5, 2, 3}), 1},
       errc::invalid_shape},
      {"gather scalar data", k::gather{t({}), t({}, dtype::i64), t({}), 0}, errc::invalid_shape},
      {"gather whose y would have rank 9",
       k::gather{t({1, 1, 1, 1, 1, 1, 1, 2}), t({2, 2}, dtype::i64), t({1, 1, 1, 1, 1, 1, 1, 2}), 0},
       errc::invalid_shape},
      {"gather empty indices", k::gather{t({5, 3}), t({0}, dtype::i64), t({0, 3}), 0}, errc::invalid_shape},
      {"tile dtype", k::tile{t({2, 1}), t({4, 7}, dtype::f16)}, errc::invalid_dtype},
      {"tile rank", k::tile{t({2, 1}), t({2, 1, 3})}, errc::invalid_shape},
      {"nll integer scores", k::nll_loss{t({4, 3}, dtype::i32), t({4}, dtype::i64), {}, t({1}, dtype::i32)},
       errc::invalid_dtype},
      {"nll float target", k::nll_loss{t({4, 3}), t({4}), {}, t({1})}, errc::invalid_dtype},
      {"nll target shape", k::nll_loss{t({4, 3, 2}), t({4, 3}, dtype::i64), {}, t({1})}, errc::invalid_shape},
      {"nll weight shape", k::nll_loss{t({4, 3}), t({4}, dtype::i64), t({4}), t({1})}, errc::invalid_shape},
      {"nll reduced y", k::nll_loss{t({4, 3}), t({4}, dtype::i64), {}, t({4})}, errc::invalid_shape},
      {"nll unreduced y", k::nll_loss{t({4, 3}), t({4}, dtype::i64), {}, t({1}), 0, false, k::loss_reduction::none},
       errc::invalid_shape},
      {"nll reduction",
       k::nll_loss{t({4, 3}), t({4}, dtype::i64), {}, t({1}), 0, false, static_cast<k::loss_reduction>(3)},
       errc::invalid_argument},
      {"trilu rank", k::trilu{t({4}), t({4})}, errc::invalid_shape},
      {"trilu shape", k::trilu{t({4, 3}), t({3, 4})}, errc::invalid_shape},
      {"trilu dtype", k::trilu{t({4, 3}), t({4, 3}, dtype::f16)}, errc::invalid_dtype},
      {"resize integer data, linear",
       k::resize{t({2}, dtype::i32), t({4}, dtype::i32), {2}, -0.75f, k::resize_mode::linear},
       errc::invalid_dtype},
      {"resize uint8 crop, extrapolation value past 255",
       [] {
         k::resize r{t({2}, dtype::u8), t({4}, dtype::u8), {2}};
         r.coordinates = k::resize_coordinates::tf_crop_and_resize;
         r.extrapolation_value = 256;
         return r;
       }(),
       errc::invalid_argument},
      {"resize y dtype", k::resize{t({2}), t({4}, dtype::f16), {2}}, errc::invalid_dtype},
      {"resize rank", k::resize{t({2, 2}), t({4}), {2, 1}}, errc::invalid_shape},
      {"resize mode", k::resize{t({2}), t({4}), {2}, -0.75f, static_cast<k::resize_mode>(3)}, errc::invalid_argument},
      {"resize coordinates",
       k::resize{t({2}), t({4}), {2}, -0.75f, k::resize_mode::linear, static_cast<k::resize_coordinates>(7)},
       errc::invalid_argument},
      {"resize nearest rounding",
       k::resize{t({2}),
                 t({4}),
                 {2},
                 -0.75f,
                 k::resize_mode::nearest,
                 k::resize_coordinates::half_pixel,
                 static_cast<k::nearest_rounding>(4)},
       errc::invalid_argument},
      {"resize zero scale", k::resize{t({2, 2}), t({2, 4}), {0, 2}}, errc::invalid_argument},
      {"resize negative scale", k::resize{t({2}), t({4}), {-2}}, errc::invalid_argument},
      {"resize infinite scale", k::resize{t({2}), t({4}), {std::numeric_limits<double>::infinity()}},
       errc::invalid_argument},
      {"resize NaN scale", k::resize{t({2}), t({4}), {std::nan("")}}, errc::invalid_argument},
      {"resize NaN cubic coefficient", k::resize{t({2}), t({4}), {2}, std::nanf(""), k::resize_mode::cubic},
       errc::invalid_argument},
      {"resize antialiased nearest",
       k::resize{t({2}),
                 t({1}),
                 {0.5},
                 -0.75f,
                 k::resize_mode::nearest,
                 k::resize_coordinates::half_pixel,
                 k::nearest_rounding::floor,
                 false,
                 true},
       errc::invalid_argument},
      {"resize infinite crop box",
       k::resize{t({2}),
                 t({4}),
                 {2},
                 -0.75f,
                 k::resize_mode::linear,
                 k::resize_coordinates::tf_crop_and_resize,
                 k::nearest_rounding::floor,
                 false,
                 false,
                 0.0f,
                 {-std::numeric_limits<double>::infinity()}},
       errc::invalid_argument},
      {"gather_elements rank", k::gather_elements{t({3, 4}), t({3}, dtype::i64), t({3}), 0}, errc::invalid_shape},
      {"gather_elements off-axis extent", k::gather_elements{t({3, 4}), t({2, 5}, dtype::i64), t({2, 5}), 0},
       errc::invalid_shape},
      {"gather_elements y shape", k::gather_elements{t({3, 4}), t({2, 2}, dtype::i64), t({2, 3}), 0},
       errc::invalid_shape},
      {"gather_elements axis", k::gather_elements{t({3, 4}), t({2, 2}, dtype::i64), t({2, 2}), 2},
       errc::invalid_argument},
      {"gather_elements indices dtype", k::gather_elements{t({3, 4}), t({2, 2}), t({2, 2}), 0}, errc::invalid_dtype},
      {"grid_sample integer x",
       k::grid_sample{t({1, 1, 4, 4}, dtype::i32), t({1, 2, 2, 2}), t({1, 1, 2, 2}, dtype::i32)}, errc::invalid_dtype},
      {"grid_sample y dtype", k::grid_sample{t({1, 1, 4, 4}), t({1, 2, 2, 2}), t({1, 1, 2, 2}, dtype::f16)},
       errc::invalid_dtype},
      {"grid_sample integer grid", k::grid_sample{t({1, 1, 4, 4}), t({1, 2, 2, 2}, dtype::i64), t({1, 1, 2, 2})},
       errc::invalid_dtype},
      {"grid_sample rank 2", k::grid_sample{t({1, 4}), t({1, 2}), t({1, 4})}, errc::invalid_shape},
      {"grid_sample grid rank", k::grid_sample{t({1, 1, 4, 4}), t({1, 2, 2}), t({1, 1, 2, 2})}, errc::invalid_shape},
      {"grid_sample coordinates", k::grid_sample{t({1, 1, 4, 4}), t({1, 2, 2, 3}), t({1, 1, 2, 2})},
       errc::invalid_shape},
      {"grid_sample batch", k::grid_sample{t({2, 1, 4, 4}), t({1, 2, 2, 2}), t({2, 1, 2, 2})}, errc::invalid_shape},
      {"grid_sample y channels", k::grid_sample{t({1, 3, 4, 4}), t({1, 2, 2, 2}), t({1, 1, 2, 2})},
       errc::invalid_shape},
      {"grid_sample y extents", k::grid_sample{t({1, 1, 4, 4}), t({1, 2, 3, 2}), t({1, 1, 3, 2})}, errc::invalid_shape},
      {"grid_sample mode",
       k::grid_sample{t({1, 1, 4, 4}), t({1, 2, 2, 2}), t({1, 1, 2, 2}), static_cast<k::grid_sample_mode>(3)},
       errc::invalid_argument},
      {"grid_sample padding",
       k::grid_sample{t({1, 1, 4, 4}), t({1, 2, 2, 2}), t({1, 1, 2, 2}), k::grid_sample_mode::linear,
                      static_cast<k::grid_padding>(3)},
       errc::invalid_argument},
      {"cast shape", k::cast{t({4}), t({2, 2}, dtype::f16)}, errc::invalid_shape},
      {"sgd shapes", k::sgd_update{t({10}), t({11})}, errc::invalid_shape},
      {"sgd buffer shape", k::sgd_update{t({10}), t({10}), t({5}), 0.1f, 0.9f}, errc::invalid_shape},
      {"sgd momentum without buffer", k::sgd_update{t({10}), t({10}), {}, 0.1f, 0.9f}, errc::invalid_argument},
      {"sgd infinite lr", k::sgd_update{t({10}), t({10}), {}, INFINITY}, errc::invalid_argument},
      {"sgd INT32 param", k::sgd_update{t({10}, dtype::i32), t({10})}, errc::invalid_dtype},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    const std::error_code ec = npurt::sim::validate(c.k);
    CHECK(ec == c.want);
    CHECK(ec == npurt::error_class::caller);
    CHECK(npurt::sim::run_reference(c.k) == c.want);  // run_reference validates first
    // The words say which operand or parameter breaks which rule, never only the list of
    // operands, and leave the code's own message to the exception that carries them.
    std::string why;
    CHECK(npurt::sim::validate(c.k, &why) == c.want);
    CAPTURE(why);
    CHECK(why.starts_with(std::string(c.k.display_name())));
    CHECK_FALSE(why.starts_with(std::string(c.k.display_name()) + " with "));
    CHECK(why.find(ec.message()) == std::string::npos);
  }
}

TEST_CASE("a shape refusal names the rule the shapes break", "[kernels][validate]") {
  // The expected shapes are worked out from each operation's rule (kernel_ops.hpp, ONNX's
  // operator pages), not read from the output.
  const tensor_desc f4 = t({2, 3, 8, 8});
  const dtype u8 = dtype::u8, i8 = dtype::i8, i32 = dtype::i32, i64 = dtype::i64, b = dtype::boolean;
  k::fused_elementwise fused{};
  fused.a = t({3});
  fused.y = t({4});
  fused.inputs = 1;
  fused.count = 1;
  fused.stages[0] = {k::eltwise_fn::relu, 0, 0};
  k::quantize per_axis{k::quantize_fn::quantize, t({2, 4}), t({3}), {}, t({2, 4}, i8), 1};
  const std::pair<kernel_desc, const char*> cases[] = {
      {fused, "a [3] does not broadcast to y [4]"},
      {k::integer_matmul{t({2, 3}, u8), t({4, 4}, u8), {}, {}, t({2, 4}, i32)},
       "a [2,3] has K = 3, b [4,4] has K = 4: they must be equal"},
      // ConvInteger: 4 output channels, so a per-channel zero point has 4 values.
      {k::integer_conv2d{t({1, 2, 5, 5}, i8), t({4, 2, 3, 3}, i8), {}, t({3}, i8), t({1, 4, 3, 3}, i32)},
       "w_zero_point [3] must hold one value, or one per output channel, [4]"},
      // DFT along axis 1 of 8 samples, not onesided: 8 complex bins.
      {k::dft{t({1, 8, 1}), {}, t({1, 4, 2}), 8}, "y [1,4,2] must be [1,8,2]"},
      {k::roi_align{t({1, 1, 4, 4}), t({3, 4}), t({2}, i64), t({3, 1, 2, 2})},
       "batch_indices [2] and y [3,1,2,2] must have rois' 3 regions first"},
      {k::batchnorm{f4, t({4}), {}, {}, {}, f4}, "gamma [4] must be [3], one value per channel"},
      {k::batchnorm{t({1, 3, 1, 1}), {}, {}, {}, {}, t({1, 3, 1, 1})},
       "x [1,3,1,1] has one value per channel: training's unbiased variance needs two"},
      {k::batchnorm_backward{f4, f4, {}, t({3}), t({3}), t({2, 3, 8, 9})}, "dx [2,3,8,9] its shape"},
      {k::conv2d_backward_data{t({2, 4, 6, 6}), t({4, 3, 3, 3}), f4, {1, 1}, {0, 0}, {1, 1}, 1, t({2, 3, 8, 4})},
       "relu_y [2,3,8,4] must be dx's shape [2,3,8,8]"},
      // 8 / 2 windows of 2 with stride 2.
      {k::pool2d{k::pool_mode::max, f4, t({2, 3, 5, 4})}, "y [2,3,5,4] must be [2,3,4,4]"},
      {k::pool2d_backward{k::pool_mode::avg, f4, t({2, 3, 3, 4}), f4}, "dy [2,3,3,4] must be [2,3,4,4]"},
      {red(t({2, 3, 4}), t({2, 4}), 0b001), "y [2,4] must be [3,4], x [2,3,4] reduced over axes_mask 1"},
      {tr(t({2, 3, 4}), t({2, 3, 4}), {1, 0, 2}), "y [2,3,4] must be [3,2,4], x [2,3,4] permuted by perm"},
      // Rows 3 and 4 of a 4-row x: the second is past its last index, 3.
      {sl(t({4, 6}), t({2, 6}), {3, 0}, {1, 1}), "dimension 0: y's 2 elements from 3 in steps of 1 pass x's [0, 3]"},
      {k::pad{t({2, 3}), t({6}), {0, 0}}, "y [6] must be of x's rank 2"},
      {k::gather{t({5, 3}), t({2}, i64), t({2, 4}), 0},
       "y [2,4] must be [2,3], data [5,3] with axis 0 replaced by indices [2]"},
      {k::tile{t({2, 1}), t({2, 1, 3})}, "y [2,1,3] must be of x's rank 2"},
      {k::nll_loss{t({4, 3, 2}), t({4, 3}, i64), {}, t({1})},
       "target [4,3] must be [4,2], x [4,3,2] without its class dimension"},
      {k::nll_loss{t({4, 3}), t({4}, i64), t({4}), t({1})}, "weight [4] must be [3], one per class"},
      {k::trilu{t({4}), t({4})}, "x [4] must be of rank 2 or more"},
      {k::resize{t({2, 2}), t({4}), {2, 1}}, "y [4] must be of x's rank 2"},
      {k::gather_elements{t({3, 4}), t({2, 5}, i64), t({2, 5}), 0},
       "indices [2,5] is longer than data [3,4] in dimension 1, off the axis 0"},
      {k::cumsum{t({2, 3}), t({3, 2}), 0}, "y [3,2] must be x's shape [2,3]"},
      {k::grid_sample{t({2, 1, 4, 4}), t({1, 2, 2, 2}), t({2, 1, 2, 2})},
       "must be [N, C, D1..Dr], [N, O1..Or, r] and [N, C, O1..Or]"},
      // One index per row of data [4, 3]: updates are those rows, [2, 3].
      {k::scatter_nd{t({4, 3}), t({2, 1}, i64), t({2, 2}), t({4, 3})}, "updates [2,2] must be [2,3]"},
      {k::scatter_elements{t({3, 4}), t({2, 2}, i64), t({2, 3}), t({3, 4})},
       "updates [2,3] must be indices' shape [2,2]"},
      {k::gather_nd{t({2, 3}), t({4, 1}, i64), t({4, 2})}, "y [4,2] must be [4,3]"},
      {k::top_k{t({2, 5}), t({2, 2}), t({2, 2}, i64), 1, 3}, "must be [2,3], x with axis 1 k long"},
      {k::compare{k::compare_fn::less, t({2, 3}), t({2}), t({2, 3}, b)}, "a [2,3] and b [2] must broadcast together"},
      {k::where{t({2}, b), t({3}), t({3}), t({3})}, "cond [2], x [3] and y [3] must broadcast together"},
      {k::logical{k::logical_fn::not_, t({3}, b), {}, t({2}, b)}, "y [2] must be a's shape [3]"},
      {k::float_class{k::float_class_fn::is_nan, t({3}), t({2}, b)}, "y [2] must be x's shape [3]"},
      {per_axis, "scale [3] must be [4], x [2,4]'s extent on axis 1"},
      {k::lrn{t({4}), t({4})}, "x [4] must be of rank 2 or more"},
      {k::cast{t({4}), t({2, 2}, dtype::f16)}, "y [2,2] must be x's shape [4]"},
      {k::sgd_update{t({10}), t({11})}, "grad [11] must be param's shape [10]"},
      {k::det{t({2, 2, 3}), t({2})}, "x [2,2,3] must end in a square matrix"},
      // batch_axis 1 of x [3, 2]: two sequences.
      {k::reverse_sequence{t({3, 2}), t({3}, i64), t({3, 2}), 1, 0}, "sequence_lens [3] must be [2]"},
      // A tensor's own element count, before any rule between tensors.
      {k::cast{t({1 << 30, 1 << 30, 1 << 30}), t({1 << 30, 1 << 30, 1 << 30})}, "more than 2^52 elements"},
  };
  for (const auto& [kd, rule] : cases) {
    CAPTURE(kd.display_name(), rule);
    std::string why;
    CHECK(npurt::sim::validate(kd, &why) == errc::invalid_shape);
    CAPTURE(why);
    CHECK(why.starts_with(std::string(kd.display_name()) + ": ") ==
          (std::string_view(rule) != "more than 2^52 elements"));
    CHECK(why.find(rule) != std::string::npos);
  }
}

TEST_CASE("a bad gather's message names its scalar index, and blames no rank 0", "[kernels][validate][gather]") {
  std::string what;
  CHECK(npurt::sim::validate(k::gather{t({5, 3}), t({}, dtype::i64), t({1, 3}), 0}, &what) == errc::invalid_shape);
  CHECK(what.find("rank 0") == std::string::npos);
  // onnx.ai Gather: a scalar index drops the axis, so y is data [5,3] without axis 0.
  CHECK(what == "gather: y [1,3] must be [3], data [5,3] with axis 0 replaced by indices []");
  // Data must have an axis: a scalar is refused by its rank.
  tensor scalar({}), index({}, dtype::i64), out({});
  CHECK(npurt::sim::validate(k::gather{scalar.desc, index.desc, out.desc, 0}, &what) == errc::invalid_shape);
  CHECK(what.find("'data' []: rank 0") != std::string::npos);
}

TEST_CASE("cast validates between every pair of dtypes", "[kernels][validate][cast]") {
  for (auto a : {dtype::f32, dtype::f16, dtype::bf16, dtype::i8, dtype::i32, dtype::i64, dtype::u8, dtype::boolean})
    for (auto b : {dtype::f32, dtype::f16, dtype::bf16, dtype::i8, dtype::i32, dtype::i64, dtype::u8, dtype::boolean})
      CHECK(npurt::sim::validate(k::cast{t({3}, a), t({3}, b)}).value() == 0);
}

TEST_CASE("a descriptor mixing data and timing-only tensors is rejected and nothing is written",
          "[kernels][validate]") {
  tensor a({2, 2}), c({2, 2});
  a.assign({1, 2, 3, 4});
  c.assign({9, 9, 9, 9});
  const kernel_desc k = k::matmul{a.desc, shape_only({2, 2}), c.desc};
  CHECK(npurt::sim::validate(k) == errc::invalid_argument);
  CHECK(npurt::sim::run_reference(k) == errc::invalid_argument);
  CHECK(c.values() == std::vector<double>{9, 9, 9, 9});
}

TEST_CASE("a unary elementwise function given a second operand is refused, not run on a alone",
          "[kernels][validate][elementwise]") {
  // kernel_ops.hpp: a unary function's b stays empty. A b there means the caller meant another
  // function or kernel: nothing runs and nothing is written.
  tensor a({2, 2}), b({2, 2}), y({2, 2});
  a.assign({-1, 2, -3, 4});
  b.assign({5, 6, 7, 8});
  y.assign({9, 9, 9, 9});
  const kernel_desc with_data = k::elementwise{k::eltwise_fn::relu, a.desc, b.desc, y.desc};
  const kernel_desc timing_only =
      k::elementwise{k::eltwise_fn::relu, shape_only({2, 2}), shape_only({7}), shape_only({2, 2})};
  std::string what;
  CHECK(npurt::sim::validate(with_data, &what) == errc::invalid_argument);
  CHECK(what == "relu: relu is unary: b must be left empty, it is [2,2] f32");
  CHECK(npurt::sim::run_reference(with_data) == errc::invalid_argument);
  CHECK(y.values() == std::vector<double>{9, 9, 9, 9});
  CHECK(npurt::sim::validate(timing_only, &what) == errc::invalid_argument);
  CHECK(what == "relu: relu is unary: b must be left empty, it is [7] f32");
  // A scalar b with data is an operand too; an empty one ({}) is none.
  tensor scalar({});
  CHECK(npurt::sim::validate(k::elementwise{k::eltwise_fn::exp, a.desc, scalar.desc, y.desc}) ==
        errc::invalid_argument);
  CHECK(npurt::sim::validate(k::elementwise{k::eltwise_fn::exp, a.desc, {}, y.desc}).value() == 0);
  // Binary functions keep their b, and clip's bounds are its alpha and beta, not b.
  CHECK(npurt::sim::validate(k::elementwise{k::eltwise_fn::max, a.desc, b.desc, y.desc}).value() == 0);
  CHECK(npurt::sim::validate(k::elementwise{k::eltwise_fn::clip, a.desc, {}, y.desc, -1.0f, 1.0f}).value() == 0);
}

namespace {

// Translates host addresses unchanged except one range it pretends is not allocated, and
// counts the calls.
class holed_memory final : public npurt::memory_view {
 public:
  explicit holed_memory(const void* hole) : hole_(hole) {}
  std::byte* translate(npurt::device_id dev, const void* addr, std::size_t bytes) noexcept override {
    ++calls;
    last_dev = dev;
    last_bytes = bytes;
    if (addr == hole_) return nullptr;
    return static_cast<std::byte*>(const_cast<void*>(addr));
  }
  int calls = 0;
  npurt::device_id last_dev = -1;
  std::size_t last_bytes = 0;

 private:
  const void* hole_;
};

}  // namespace

TEST_CASE("a pointer the memory view cannot translate is invalid_pointer and nothing is written",
          "[kernels][validate]") {
  tensor a({2, 3}), b({3, 2}), c({2, 2});
  a.fill(1, -3, 3, true);
  b.fill(2, -3, 3, true);
  c.assign({7, 7, 7, 7});
  const kernel_desc k = k::matmul{a.desc, b.desc, c.desc};
  holed_memory mem(b.desc.data);
  CHECK(npurt::sim::run_reference(k, mem, 3) == errc::invalid_pointer);
  CHECK(c.values() == std::vector<double>{7, 7, 7, 7});
  holed_memory whole(nullptr);
  CHECK(npurt::sim::run_reference(k, whole, 5).value() == 0);
  CHECK(whole.calls == 3);
  CHECK(whole.last_dev == 5);
  CHECK(whole.last_bytes == c.desc.bytes());  // translated with each operand's full extent
  CHECK(c.get(0) != 7);
}

TEST_CASE("timing-only descriptors and fixed kernels do nothing and never translate", "[kernels][validate]") {
  holed_memory mem(nullptr);
  const kernel_desc big = k::matmul{shape_only({8192, 8192}, dtype::f16), shape_only({8192, 8192}, dtype::f16),
                                    shape_only({8192, 8192}, dtype::f16)};
  CHECK_FALSE(npurt::sim::has_data(big));
  CHECK(npurt::sim::run_reference(big, mem, 0).value() == 0);
  CHECK(npurt::sim::run_reference(kernel_desc{k::fixed{}}, mem, 0).value() == 0);
  CHECK(mem.calls == 0);
}

TEST_CASE("operand lists name what each operation reads and writes", "[kernels][validate]") {
  using npurt::sim::access;
  const tensor_desc a = t({2, 2}), b = t({2, 2}), c = t({2, 2});
  k::matmul mm{a, b, c};
  auto ops = npurt::sim::operands(mm);
  REQUIRE(ops.size() == 3);
  CHECK(ops.items[2].mode == access::write);
  mm.beta = 1.0f;
  ops = npurt::sim::operands(mm);
  CHECK(ops.items[2].mode == access::read_write);
  CHECK((ops.items[2].reads() && ops.items[2].writes()));
  // Unary elementwise does not use b; absent optional batchnorm operands are left out.
  CHECK(npurt::sim::operands(k::elementwise{k::eltwise_fn::relu, a, b, c}).size() == 2);
  const tensor_desc x = t({2, 3, 4, 4}), v = t({3});
  CHECK(npurt::sim::operands(k::batchnorm{x, {}, {}, {}, {}, x}).size() == 2);
  CHECK(npurt::sim::operands(k::batchnorm{x, v, v, v, v, x, v, v}).size() == 8);
  CHECK(npurt::sim::operands(k::batchnorm{x, v, v, v, v, x, v, v, false}).size() == 6);  // inference: no saved stats
  CHECK(npurt::sim::operands(k::sgd_update{a, b}).items[0].mode == access::read_write);
  // The list points into the operation: it must outlive the list.
  const npurt::kernel_op g = k::gather{a, t({2}, dtype::i64), c};
  ops = npurt::sim::operands(g);
  REQUIRE(ops.size() == 3);
  CHECK((ops.items[0].tensor->shape == a.shape && ops.items[0].mode == access::read));
  CHECK((ops.items[1].tensor->type == dtype::i64 && ops.items[1].mode == access::read));
  CHECK(ops.items[2].mode == access::write);
  CHECK(npurt::sim::operands(k::fixed{}).size() == 0);
}

TEST_CASE("a fused elementwise chain validates its stages, operands and broadcasts", "[kernels][validate][fused]") {
  using F = k::fused_elementwise;
  // y = relu(a * b + c) with b a per-channel scale: the well-formed chain.
  auto chain = [] {
    F f{};
    f.a = t({2, 3, 4});
    f.b = t({3, 1});
    f.c = t({2, 3, 4});
    f.y = t({2, 3, 4});
    f.inputs = 3;
    f.count = 3;
    f.stages[0] = {k::eltwise_fn::mul, 0, 1};
    f.stages[1] = {k::eltwise_fn::add, F::chain, 2};
    f.stages[2] = {k::eltwise_fn::relu, F::chain, F::chain};
    return f;
  };
  CHECK(npurt::sim::validate(chain()).value() == 0);
  auto bad = [&](auto change) {
    F f = chain();
    change(f);
    return npurt::sim::validate(f);
  };
  CHECK(bad([](F& f) { f.count = 0; }) == errc::invalid_argument);
  CHECK(bad([](F& f) { f.count = F::max_stages + 1; }) == errc::invalid_argument);
  CHECK(bad([](F& f) { f.inputs = F::max_inputs + 1; }) == errc::invalid_argument);
  CHECK(bad([](F& f) { f.stages[0].a = F::chain; }) == errc::invalid_argument);  // nothing before stage 0
  CHECK(bad([](F& f) { f.stages[1].b = 3; }) == errc::invalid_argument);        // an input past `inputs`
  CHECK(bad([](F& f) { f.stages[1].a = 0; }) == errc::invalid_argument);  // drops stage 0's result
  CHECK(bad([](F& f) { f.stages[2].fn = static_cast<k::eltwise_fn>(200); }) == errc::invalid_argument);
  CHECK(bad([](F& f) { f.stages[2].alpha = std::numeric_limits<float>::infinity(); }) == errc::invalid_argument);
  CHECK(bad([](F& f) { f.b = t({4, 1}); }) == errc::invalid_shape);  // does not broadcast to y
  CHECK(bad([](F& f) { f.c = t({2, 3, 4}, dtype::f16); }) == errc::invalid_dtype);
  CHECK(bad([](F& f) { f.y = t({2, 3, 4}, dtype::i32); }) == errc::invalid_dtype);
  // The operand list is the inputs in use and y.
  const auto ops = npurt::sim::operands(chain());
  REQUIRE(ops.size() == 4);
  CHECK(ops.items[3].writes());
  CHECK_FALSE(ops.items[0].writes());
}

TEST_CASE("a fused elementwise chain computes its stages' separate kernels bit for bit", "[kernels][fused]") {
  using F = k::fused_elementwise;
  // f16: a chain that kept its intermediates in float would differ from the separate kernels.
  tensor a({2, 3, 4}, dtype::f16), b({3, 1}, dtype::f16), c({2, 3, 4}, dtype::f16);
  for (std::size_t i = 0; i < a.size(); ++i) a.set(i, 0.37 * static_cast<double>(i) - 3.1);
  for (std::size_t i = 0; i < b.size(); ++i) b.set(i, 1.3 - 0.71 * static_cast<double>(i));
  for (std::size_t i = 0; i < c.size(); ++i) c.set(i, 0.11 * static_cast<double>(i % 7) - 0.2);
  // y = sigmoid(c - a * b), the running value as Sub's second operand.
  tensor y({2, 3, 4}, dtype::f16);
  F f{};
  f.a = a.desc;
  f.b = b.desc;
  f.c = c.desc;
  f.y = y.desc;
  f.inputs = 3;
  f.count = 3;
  f.stages[0] = {k::eltwise_fn::mul, 0, 1};
  f.stages[1] = {k::eltwise_fn::sub, 2, F::chain};
  f.stages[2] = {k::eltwise_fn::sigmoid, F::chain, F::chain};
  REQUIRE(run(f) == 0);
  tensor t1({2, 3, 4}, dtype::f16), t2({2, 3, 4}, dtype::f16), want({2, 3, 4}, dtype::f16);
  REQUIRE(run(k::elementwise{k::eltwise_fn::mul, a.desc, b.desc, t1.desc}) == 0);
  REQUIRE(run(k::elementwise{k::eltwise_fn::sub, c.desc, t1.desc, t2.desc}) == 0);
  REQUIRE(run(k::elementwise{k::eltwise_fn::sigmoid, t2.desc, {}, want.desc}) == 0);
  CHECK(y.bytes == want.bytes);
}

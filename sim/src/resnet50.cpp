// ResNet-50 v1.5 as kernel descriptors (see resnet50.hpp).
#include <npurt/sim/resnet50.hpp>

#include <functional>

namespace npurt::sim {

namespace {
using arr2 = std::array<std::int32_t, 2>;
}

resnet50::resnet50(std::int64_t batch, dtype compute) : batch_(batch), compute_(compute) { build(); }

std::string_view resnet50::intern(std::string s) {
  names_.push_back(std::move(s));
  return names_.back();
}

std::uint64_t resnet50::parameter_count() const noexcept {
  std::uint64_t n = 0;
  for (auto s : param_sizes_) n += static_cast<std::uint64_t>(s);
  return n;
}

std::uint64_t resnet50::forward_macs() const noexcept {
  std::uint64_t m = 0;
  for (const auto& c : convs_) m += c.macs();
  return m + 2048ull * 1000;  // FC
}

void resnet50::build() {
  using namespace kernels;
  const std::int64_t n = batch_;
  const dtype ct = compute_;
  auto act = [&](std::int64_t c, std::int64_t h) { return tensor_desc{nullptr, shape{n, c, h, h}, ct, layout::nchw}; };
  auto vec = [](std::int64_t c) { return tensor_desc{nullptr, shape{c}, dtype::f32, layout::nd}; };
  auto emit = [&](kernel_desc k, std::string name, step_phase ph) {
    k.name = intern(std::move(name));
    step_.push_back(k);
    phases_.push_back(ph);
  };
  auto fwd = [&](kernel_desc k, std::string name) { emit(std::move(k), std::move(name), step_phase::forward); };
  auto bwd = [&](kernel_desc k, std::string name) { emit(std::move(k), std::move(name), step_phase::backward); };

  // Backward work, pushed as the forward pass goes and run in reverse.
  std::vector<std::function<void()>> tape;

  struct param {
    std::string name;
    shape s;
    bool conv_weight;
  };
  std::vector<param> params;

  auto conv = [&](const std::string& name, const tensor_desc& x, std::int64_t cout, std::int64_t k, std::int64_t stride,
                  std::int64_t pad, bool need_dx) {
    const std::int64_t cin = x.shape[1], h = x.shape[2];
    const std::int64_t ho = (h + 2 * pad - k) / stride + 1;
    convs_.push_back({name, cin, cout, k, stride, pad, h, ho});
    const tensor_desc w{nullptr, shape{cout, cin, k, k}, ct, layout::nchw};
    const tensor_desc y = act(cout, ho);
    const arr2 s{static_cast<std::int32_t>(stride), static_cast<std::int32_t>(stride)};
    const arr2 p{static_cast<std::int32_t>(pad), static_cast<std::int32_t>(pad)};
    fwd(conv2d{x, w, y, s, p}, name);
    params.push_back({name + ".weight", shape{cout, cin, k, k}, true});
    param_sizes_.push_back(cout * cin * k * k);
    tape.emplace_back([=, &bwd] {
      const tensor_desc dw{nullptr, shape{cout, cin, k, k}, dtype::f32, layout::nchw};
      bwd(conv2d_backward_weight{x, y, dw, s, p}, name + ".grad_weight");
      if (need_dx) bwd(conv2d_backward_data{y, w, x, s, p}, name + ".grad_input");
    });
    return y;
  };
  auto bn = [&](const std::string& name, const tensor_desc& x) {
    const std::int64_t c = x.shape[1];
    const tensor_desc v = vec(c);
    fwd(batchnorm{x, v, v, v, v, x, v, v, true}, name);
    params.push_back({name + ".weight", shape{c}, false});
    params.push_back({name + ".bias", shape{c}, false});
    param_sizes_.push_back(c);
    param_sizes_.push_back(c);
    tape.emplace_back([=, &bwd] { bwd(batchnorm_backward{x, x, v, v, v, x, v, v}, name + ".grad"); });
    return x;
  };
  auto relu = [&](const std::string& name, const tensor_desc& x) {
    fwd(elementwise{eltwise_fn::relu, x, {}, x}, name);
    // The gradient is dy masked by y > 0: one multiply reading dy and y.
    tape.emplace_back([=, &bwd] { bwd(elementwise{eltwise_fn::mul, x, x, x}, name + ".grad"); });
    return x;
  };

  // Stem.
  tensor_desc x{nullptr, shape{n, 3, 224, 224}, ct, layout::nchw};
  x = conv("conv1", x, 64, 7, 2, 3, false);
  x = bn("bn1", x);
  x = relu("relu", x);
  {
    const tensor_desc in = x, out = act(64, 56);
    fwd(pool2d{pool_mode::max, in, out, {3, 3}, {2, 2}, {1, 1}}, "maxpool");
    tape.emplace_back([=, &bwd] { bwd(pool2d_backward{pool_mode::max, in, out, in, {3, 3}, {2, 2}, {1, 1}}, "maxpool.grad"); });
    x = out;
  }
  // Stages: planes, blocks, stride of the first block (on its 3x3 conv: v1.5).
  const std::int64_t stages[4][3] = {{64, 3, 1}, {128, 4, 2}, {256, 6, 2}, {512, 3, 2}};
  for (int s = 0; s < 4; ++s) {
    const std::int64_t planes = stages[s][0], blocks = stages[s][1];
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::string pre = "layer" + std::to_string(s + 1) + "." + std::to_string(b) + ".";
      const std::int64_t stride = b == 0 ? stages[s][2] : 1;
      const tensor_desc in = x;
      // Runs last in the backward pass: the branch and shortcut gradients meet here.
      tape.emplace_back([=, &bwd] { bwd(elementwise{eltwise_fn::add, in, in, in}, pre + "grad_add"); });
      tensor_desc y = conv(pre + "conv1", in, planes, 1, 1, 0, true);
      y = relu(pre + "relu1", bn(pre + "bn1", y));
      y = conv(pre + "conv2", y, planes, 3, stride, 1, true);
      y = relu(pre + "relu2", bn(pre + "bn2", y));
      y = conv(pre + "conv3", y, planes * 4, 1, 1, 0, true);
      y = bn(pre + "bn3", y);
      tensor_desc shortcut = in;
      if (b == 0) shortcut = bn(pre + "downsample.1", conv(pre + "downsample.0", in, planes * 4, 1, stride, 0, true));
      fwd(elementwise{eltwise_fn::add, y, shortcut, y}, pre + "add");
      x = relu(pre + "relu3", y);
    }
  }
  // Head: global average pool, FC, softmax cross-entropy.
  const tensor_desc pooled{nullptr, shape{n, 2048, 1, 1}, ct, layout::nchw};
  const tensor_desc flat{nullptr, shape{n, 2048}, ct, layout::nd};
  const tensor_desc fc_w{nullptr, shape{2048, 1000}, ct, layout::nd};
  const tensor_desc logits{nullptr, shape{n, 1000}, ct, layout::nd};
  const tensor_desc last = x;
  fwd(pool2d{pool_mode::global_avg, last, pooled, {7, 7}, {1, 1}, {0, 0}}, "avgpool");
  fwd(matmul{flat, fc_w, logits}, "fc");
  params.push_back({"fc.weight", shape{2048, 1000}, true});
  params.push_back({"fc.bias", shape{1000}, false});
  param_sizes_.push_back(2048 * 1000);
  param_sizes_.push_back(1000);
  fwd(softmax{logits, logits, 1}, "softmax");
  forward_count_ = step_.size();

  bwd(elementwise{eltwise_fn::sub, logits, logits, logits}, "softmax.grad");  // p - onehot
  bwd(matmul{flat, logits, {nullptr, shape{2048, 1000}, dtype::f32, layout::nd}, true, false}, "fc.grad_weight");
  bwd(reduce{reduce_fn::sum, logits, {nullptr, shape{1000}, ct, layout::nd}, 1u}, "fc.grad_bias");
  bwd(matmul{logits, fc_w, flat, false, true}, "fc.grad_input");
  bwd(pool2d_backward{pool_mode::global_avg, {}, pooled, last, {7, 7}, {1, 1}, {0, 0}}, "avgpool.grad");
  for (auto it = tape.rbegin(); it != tape.rend(); ++it) (*it)();

  // SGD with momentum on FP32 master weights; then the FP16 copies the convs and FC compute with.
  for (const auto& p : params) {
    const tensor_desc master{nullptr, p.s, dtype::f32, layout::nd};
    emit(sgd_update{master, master, master, 0.1f, 0.9f, 1e-4f}, p.name + ".sgd", step_phase::update);
  }
  for (const auto& p : params) {
    if (!p.conv_weight || ct == dtype::f32) continue;
    emit(cast{{nullptr, p.s, dtype::f32, layout::nd}, {nullptr, p.s, ct, layout::nd}}, p.name + ".cast", step_phase::update);
  }
}

}  // namespace npurt::sim

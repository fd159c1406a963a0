// ResNet-50 v1.5 as kernel descriptors (see resnet50.hpp).
#include <npurt/models/resnet50.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace npurt::models {

namespace {
using arr2 = std::array<std::int32_t, 2>;
}

resnet50::resnet50(std::int64_t batch, dtype compute) : batch_(batch), compute_(compute) {
  // The batch comes from the caller: a step of no or negative images has no meaning, and one
  // whose tensors do not fit in memory would give byte counts that saturate.
  if (batch < 1)
    throw_error(make_error_code(errc::invalid_argument),
                "models::resnet50: batch must be at least 1, got " + std::to_string(batch));
  build();
  for (const auto& t : tensors_)
    if (t.shape.checked_elements() < 0 ||
        tensor_desc{nullptr, t.shape, t.type}.bytes() > static_cast<std::size_t>(PTRDIFF_MAX))
      throw_error(make_error_code(errc::size_overflow), "models::resnet50: at batch " + std::to_string(batch) +
                                                            ", tensor '" + t.name + "' does not fit in memory");
}

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
  using ids = std::vector<std::uint32_t>;
  const std::int64_t n = batch_;
  const dtype ct = compute_;
  const bool mixed = ct != dtype::f32;
  auto act = [&](std::int64_t c, std::int64_t h) { return tensor_desc{nullptr, shape{n, c, h, h}, ct, layout::nchw}; };
  auto vec = [](std::int64_t c) { return tensor_desc{nullptr, shape{c}, dtype::f32, layout::nd}; };
  auto tensor = [&](std::string name, const shape& s, dtype t, tensor_role r) {
    tensors_.push_back({std::move(name), s, t, r});
    return static_cast<std::uint32_t>(tensors_.size() - 1);
  };
  auto emit = [&](kernel_desc k, std::string name, step_phase ph, ids reads, ids writes) {
    k.name = intern(std::move(name));
    step_.push_back(k);
    phases_.push_back(ph);
    accesses_.push_back({std::move(reads), std::move(writes)});
  };
  auto fwd = [&](kernel_desc k, std::string name, ids reads, ids writes) {
    emit(std::move(k), std::move(name), step_phase::forward, std::move(reads), std::move(writes));
  };
  auto bwd = [&](kernel_desc k, std::string name, ids reads, ids writes) {
    emit(std::move(k), std::move(name), step_phase::backward, std::move(reads), std::move(writes));
  };

  // Gradient slots: each forward value names the slot its gradient will be in, filled when the
  // backward pass writes it. Values whose gradients are one tensor (an in-place add passes its
  // gradient to both operands) share a slot through `alias`.
  constexpr std::uint32_t none = ~std::uint32_t{0};
  std::vector<std::size_t> alias;
  std::vector<std::uint32_t> grads;
  auto new_slot = [&] {
    alias.push_back(alias.size());
    grads.push_back(none);
    return alias.size() - 1;
  };
  auto root = [&](std::size_t s) {
    while (alias[s] != s) s = alias[s];
    return s;
  };
  auto grad_of = [&](std::size_t slot) { return grads[root(slot)]; };
  auto new_grad = [&](std::size_t slot, const std::string& name, const tensor_desc& d) {
    const auto id = tensor(name, d.shape, d.type, tensor_role::activation_grad);
    grads[root(slot)] = id;
    return id;
  };
  // A forward value: its descriptor, the tensor that stores it, its gradient slot.
  struct value {
    tensor_desc d;
    std::uint32_t t;
    std::size_t g;
  };

  // Backward work, pushed as the forward pass goes and run in reverse.
  std::vector<std::function<void()>> tape;

  struct param {
    std::string name;
    shape s;
    bool conv_weight;
    std::uint32_t master, momentum, grad;
  };
  std::vector<param> params;
  // Registers a parameter: its FP32 master, momentum and gradient; returns the master's index.
  auto add_param = [&](const std::string& name, const shape& s, bool conv_weight, dtype grad_type) {
    const auto master = tensor(name, s, dtype::f32, tensor_role::master_weight);
    const auto momentum = tensor(name + ".momentum", s, dtype::f32, tensor_role::optimizer_state);
    const auto grad = tensor(name + ".grad", s, grad_type, tensor_role::weight_grad);
    params.push_back({name, s, conv_weight, master, momentum, grad});
    param_sizes_.push_back(s.elements());
    return master;
  };
  // The tensor a conv or the FC reads its weight from: the compute-dtype copy, or the master.
  std::vector<std::uint32_t> compute_copy;  // by params index, none when the master is read
  auto compute_weight = [&](std::uint32_t master) {
    const auto& p = params.back();
    compute_copy.resize(params.size(), none);
    if (!mixed) return master;
    return compute_copy.back() =
               tensor(p.name + "." + std::string(to_string(ct)), p.s, ct, tensor_role::compute_weight);
  };

  auto conv = [&](const std::string& name, const value& x, std::int64_t cout, std::int64_t k, std::int64_t stride,
                  std::int64_t pad, bool need_dx) {
    const std::int64_t cin = x.d.shape[1], h = x.d.shape[2];
    const std::int64_t ho = (h + 2 * pad - k) / stride + 1;
    convs_.push_back({name, cin, cout, k, stride, pad, h, ho});
    const tensor_desc w{nullptr, shape{cout, cin, k, k}, ct, layout::nchw};
    const value y{act(cout, ho), tensor(name + ".out", act(cout, ho).shape, ct, tensor_role::activation), new_slot()};
    const arr2 s{static_cast<std::int32_t>(stride), static_cast<std::int32_t>(stride)};
    const arr2 p{static_cast<std::int32_t>(pad), static_cast<std::int32_t>(pad)};
    const auto master = add_param(name + ".weight", shape{cout, cin, k, k}, true, dtype::f32);
    const auto wt = compute_weight(master);
    const auto dw = params.back().grad;
    fwd(conv2d{x.d, w, y.d, s, p}, name, {x.t, wt}, {y.t});
    tape.emplace_back([=, &bwd, &grad_of, &new_grad] {
      const tensor_desc dwd{nullptr, shape{cout, cin, k, k}, dtype::f32, layout::nchw};
      const auto dy = grad_of(y.g);
      bwd(conv2d_backward_weight{x.d, y.d, dwd, s, p}, name + ".grad_weight", {x.t, dy}, {dw});
      if (need_dx)
        bwd(conv2d_backward_data{y.d, w, x.d, s, p}, name + ".grad_input", {dy, wt},
            {new_grad(x.g, name + ".grad_input", x.d)});
    });
    return y;
  };
  auto bn = [&](const std::string& name, const value& x) {
    const std::int64_t c = x.d.shape[1];
    const tensor_desc v = vec(c);
    const auto gamma = add_param(name + ".weight", shape{c}, false, dtype::f32);
    const auto dgamma = params.back().grad;
    const auto beta = add_param(name + ".bias", shape{c}, false, dtype::f32);
    const auto dbeta = params.back().grad;
    const auto rmean = tensor(name + ".running_mean", shape{c}, dtype::f32, tensor_role::running_stat);
    const auto rvar = tensor(name + ".running_var", shape{c}, dtype::f32, tensor_role::running_stat);
    const auto smean = tensor(name + ".saved_mean", shape{c}, dtype::f32, tensor_role::saved_stat);
    const auto sinvstd = tensor(name + ".saved_invstd", shape{c}, dtype::f32, tensor_role::saved_stat);
    const value y{x.d, tensor(name + ".out", x.d.shape, x.d.type, tensor_role::activation), new_slot()};
    fwd(batchnorm{x.d, v, v, v, v, x.d, v, v, true}, name, {x.t, gamma, beta, rmean, rvar},
        {y.t, rmean, rvar, smean, sinvstd});
    tape.emplace_back([=, &bwd, &grad_of, &new_grad] {
      const auto dy = grad_of(y.g);
      const auto dx = new_grad(x.g, name + ".grad_input", x.d);
      bwd(batchnorm_backward{x.d, x.d, v, v, v, x.d, v, v}, name + ".grad", {x.t, dy, gamma, smean, sinvstd},
          {dx, dgamma, dbeta});
    });
    return y;
  };
  auto relu = [&](const std::string& name, const value& x) {
    // In place (torchvision's inplace=True): the output overwrites the input's tensor.
    const value y{x.d, x.t, new_slot()};
    fwd(elementwise{eltwise_fn::relu, x.d, {}, x.d}, name, {x.t}, {x.t});
    // The gradient is dy masked by y > 0: one multiply reading dy and y.
    tape.emplace_back([=, &bwd, &grad_of, &new_grad] {
      const auto dy = grad_of(y.g);
      bwd(elementwise{eltwise_fn::mul, x.d, x.d, x.d}, name + ".grad", {dy, y.t},
          {new_grad(x.g, name + ".grad_input", x.d)});
    });
    return y;
  };

  // Stem.
  const auto images = tensor("input", shape{n, 3, 224, 224}, ct, tensor_role::input);
  const auto labels = tensor("labels", shape{n}, dtype::i64, tensor_role::input);
  value x{tensor_desc{nullptr, shape{n, 3, 224, 224}, ct, layout::nchw}, images, new_slot()};
  x = conv("conv1", x, 64, 7, 2, 3, false);
  x = bn("bn1", x);
  x = relu("relu", x);
  {
    const value in = x;
    const value out{act(64, 56), tensor("maxpool.out", act(64, 56).shape, ct, tensor_role::activation), new_slot()};
    fwd(pool2d{pool_mode::max, in.d, out.d, {3, 3}, {2, 2}, {1, 1}}, "maxpool", {in.t}, {out.t});
    tape.emplace_back([=, &bwd, &grad_of, &new_grad] {
      bwd(pool2d_backward{pool_mode::max, in.d, out.d, in.d, {3, 3}, {2, 2}, {1, 1}}, "maxpool.grad",
          {in.t, grad_of(out.g)}, {new_grad(in.g, "maxpool.grad_input", in.d)});
    });
    x = out;
  }
  // Stages: planes, blocks, stride of the first block (on its 3x3 conv: v1.5).
  const std::int64_t stages[4][3] = {{64, 3, 1}, {128, 4, 2}, {256, 6, 2}, {512, 3, 2}};
  for (int s = 0; s < 4; ++s) {
    const std::int64_t planes = stages[s][0], blocks = stages[s][1];
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::string pre = "layer" + std::to_string(s + 1) + "." + std::to_string(b) + ".";
      const std::int64_t stride = b == 0 ? stages[s][2] : 1;
      const value in = x;
      // The input feeds two consumers, so it gets two partial gradients, summed into its own.
      const value branch_in{in.d, in.t, new_slot()}, shortcut_in{in.d, in.t, new_slot()};
      // Runs last in the backward pass: the branch and shortcut gradients meet here.
      tape.emplace_back([=, &bwd, &grad_of, &new_grad] {
        const auto a = grad_of(branch_in.g), c = grad_of(shortcut_in.g);
        bwd(elementwise{eltwise_fn::add, in.d, in.d, in.d}, pre + "grad_add", {a, c},
            {new_grad(in.g, pre + "grad_add", in.d)});
      });
      value y = conv(pre + "conv1", branch_in, planes, 1, 1, 0, true);
      y = relu(pre + "relu1", bn(pre + "bn1", y));
      y = conv(pre + "conv2", y, planes, 3, stride, 1, true);
      y = relu(pre + "relu2", bn(pre + "bn2", y));
      y = conv(pre + "conv3", y, planes * 4, 1, 1, 0, true);
      y = bn(pre + "bn3", y);
      value shortcut = shortcut_in;
      if (b == 0)
        shortcut = bn(pre + "downsample.1", conv(pre + "downsample.0", shortcut_in, planes * 4, 1, stride, 0, true));
      // y += shortcut in place; its gradient is the gradient of the sum, for both operands.
      alias[root(shortcut.g)] = root(y.g);
      fwd(elementwise{eltwise_fn::add, y.d, shortcut.d, y.d}, pre + "add", {y.t, shortcut.t}, {y.t});
      x = relu(pre + "relu3", y);
    }
  }
  // Head: global average pool, FC, softmax cross-entropy.
  const tensor_desc pooled{nullptr, shape{n, 2048, 1, 1}, ct, layout::nchw};
  const tensor_desc flat{nullptr, shape{n, 2048}, ct, layout::nd};
  const tensor_desc fc_w{nullptr, shape{2048, 1000}, ct, layout::nd};
  const tensor_desc logits{nullptr, shape{n, 1000}, ct, layout::nd};
  const value last = x;
  const auto pooled_t = tensor("avgpool.out", pooled.shape, ct, tensor_role::activation);  // flat is a view of it
  const auto fc_master = add_param("fc.weight", shape{2048, 1000}, true, dtype::f32);
  const auto fc_wt = compute_weight(fc_master);
  const auto fc_dw = params.back().grad;
  const auto fc_bias = add_param("fc.bias", shape{1000}, false, ct);
  const auto fc_db = params.back().grad;
  const auto logits_t = tensor("fc.out", logits.shape, ct, tensor_role::activation);
  const auto probs_t = tensor("softmax.out", logits.shape, ct, tensor_role::activation);
  fwd(pool2d{pool_mode::global_avg, last.d, pooled, {7, 7}, {1, 1}, {0, 0}}, "avgpool", {last.t}, {pooled_t});
  // The bias add is fused into the FC (addmm), so the FC reads the bias.
  fwd(matmul{flat, fc_w, logits}, "fc", {pooled_t, fc_wt, fc_bias}, {logits_t});
  fwd(softmax{logits, logits, 1}, "softmax", {logits_t}, {probs_t});
  forward_count_ = step_.size();

  const auto dlogits = tensor("softmax.grad_input", logits.shape, ct, tensor_role::activation_grad);
  bwd(elementwise{eltwise_fn::sub, logits, logits, logits}, "softmax.grad", {probs_t, labels},
      {dlogits});  // p - onehot
  bwd(matmul{flat, logits, {nullptr, shape{2048, 1000}, dtype::f32, layout::nd}, true, false}, "fc.grad_weight",
      {pooled_t, dlogits}, {fc_dw});
  bwd(reduce{reduce_fn::sum, logits, {nullptr, shape{1000}, ct, layout::nd}, 1u}, "fc.grad_bias", {dlogits}, {fc_db});
  const auto dpooled = tensor("fc.grad_input", pooled.shape, ct, tensor_role::activation_grad);
  bwd(matmul{logits, fc_w, flat, false, true}, "fc.grad_input", {dlogits, fc_wt}, {dpooled});
  bwd(pool2d_backward{pool_mode::global_avg, {}, pooled, last.d, {7, 7}, {1, 1}, {0, 0}}, "avgpool.grad", {dpooled},
      {new_grad(last.g, "avgpool.grad_input", last.d)});
  for (auto it = tape.rbegin(); it != tape.rend(); ++it) (*it)();

  // SGD with momentum on FP32 master weights; then the FP16 copies the convs and FC compute with.
  for (const auto& p : params) {
    const tensor_desc master{nullptr, p.s, dtype::f32, layout::nd};
    emit(sgd_update{master, master, master, 0.1f, 0.9f, 1e-4f}, p.name + ".sgd", step_phase::update,
         {p.master, p.grad, p.momentum}, {p.master, p.momentum});
  }
  compute_copy.resize(params.size(), none);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i];
    if (!p.conv_weight || ct == dtype::f32) continue;
    emit(cast{{nullptr, p.s, dtype::f32, layout::nd}, {nullptr, p.s, ct, layout::nd}}, p.name + ".cast",
         step_phase::update, {p.master}, {compute_copy[i]});
  }
  shared_step_.reserve(step_.size());
  for (const auto& k : step_) shared_step_.push_back(make_shared_kernel(k));
}

}  // namespace npurt::models

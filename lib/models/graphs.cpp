// Models as graphs (see models/graphs.hpp).
#include <npurt/models/graphs.hpp>
#include <npurt/models/resnet50.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>

namespace npurt::models {

namespace {

// Deterministic values in [-scale, scale): a 64-bit LCG per tensor.
tensor param(shape s, dtype t, bool with_data, std::uint64_t seed, double scale, double offset = 0) {
  if (!with_data) return tensor::timing_only(s, t);
  tensor r(s, t);
  std::uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (std::int64_t i = 0; i < r.elements(); ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    r.set(i, offset + scale * (static_cast<double>(x >> 11) / 9007199254740992.0 * 2.0 - 1.0));
  }
  return r;
}

// Counts from the caller are checked before any arithmetic or shape uses them: a count below 1
// is invalid_argument, and a tensor whose bytes (at 4 per element, the widest dtype the models
// use) would not fit a std::ptrdiff_t is size_overflow.
void require_positive(const char* model, const char* what, std::int64_t v) {
  if (v < 1)
    throw_error(make_error_code(errc::invalid_argument),
                std::string("models::") + model + ": " + what + " must be at least 1, got " + std::to_string(v));
}

std::int64_t checked_elements(const char* model, std::initializer_list<std::int64_t> dims) {
  std::int64_t n = 4;
  for (auto d : dims)
    if (__builtin_mul_overflow(n, d, &n) || n > std::numeric_limits<std::ptrdiff_t>::max())
      throw_error(make_error_code(errc::size_overflow),
                  std::string("models::") + model + ": a tensor of the model does not fit in memory");
  return n / 4;
}

void check_widths(const char* model, std::int64_t batch, const std::vector<std::int64_t>& widths) {
  require_positive(model, "batch", batch);
  if (widths.empty())
    throw_error(make_error_code(errc::invalid_argument), std::string("models::") + model + ": no layer widths");
  for (auto w : widths) {
    require_positive(model, "a layer width", w);
    (void)checked_elements(model, {batch, w});
  }
  for (std::size_t i = 1; i < widths.size(); ++i) (void)checked_elements(model, {widths[i - 1], widths[i]});
}

void check_transformer(const char* model, const transformer_config& c) {
  require_positive(model, "batch", c.batch);
  require_positive(model, "seq", c.seq);
  require_positive(model, "hidden", c.hidden);
  require_positive(model, "heads", c.heads);
  require_positive(model, "ffn", c.ffn);
  if (c.hidden % c.heads != 0)
    throw_error(make_error_code(errc::invalid_argument), std::string("models::") + model + ": hidden " +
                                                             std::to_string(c.hidden) + " is not a multiple of heads " +
                                                             std::to_string(c.heads));
  (void)checked_elements(model, {c.batch, c.seq, std::max(c.hidden, c.ffn)});
  (void)checked_elements(model, {c.batch, c.heads, c.seq, c.seq});
  (void)checked_elements(model, {c.hidden, c.ffn});
}

tensor shape_const(std::initializer_list<std::int64_t> dims) {
  tensor t({static_cast<std::int64_t>(dims.size())}, dtype::i64);
  std::int64_t i = 0;
  for (auto d : dims) t.set(i++, static_cast<double>(d));
  return t;
}

}  // namespace

graph mlp(std::int64_t batch, const std::vector<std::int64_t>& widths, bool with_data, std::uint64_t seed) {
  check_widths("mlp", batch, widths);
  graph g("mlp");
  std::string h = g.add_input("x", {batch, widths.at(0)}, dtype::f32);
  for (std::size_t i = 1; i < widths.size(); ++i) {
    const std::string n = "fc" + std::to_string(i);
    const double s = 1.0 / std::sqrt(static_cast<double>(widths[i - 1]));
    auto w = g.add_constant(n + ".weight", param({widths[i - 1], widths[i]}, dtype::f32, with_data, seed + i * 2, s));
    auto b = g.add_constant(n + ".bias", param({widths[i]}, dtype::f32, with_data, seed + i * 2 + 1, 0.1));
    h = g.add_op("Gemm", {h, w, b}, {}, n);
    if (i + 1 < widths.size()) h = g.add_op("Relu", {h}, {}, n + ".relu");
  }
  g.set_output(g.add_op("Softmax", {h}, {{"axis", std::int64_t{1}}}, "prob"));
  return g;
}

graph mlp_training_step(std::int64_t batch, const std::vector<std::int64_t>& widths, double lr, bool with_data,
                        std::uint64_t seed) {
  check_widths("mlp_training_step", batch, widths);
  graph g("mlp_training_step");
  const std::size_t layers = widths.size() - 1;
  std::vector<std::string> h{g.add_input("x", {batch, widths.at(0)}, dtype::f32)};
  const std::string target = g.add_input("target", {batch, widths.back()}, dtype::f32);
  std::vector<std::string> w(layers + 1), b(layers + 1);
  // Forward: the same weights (names and values) as mlp().
  for (std::size_t i = 1; i <= layers; ++i) {
    const std::string n = "fc" + std::to_string(i);
    const double s = 1.0 / std::sqrt(static_cast<double>(widths[i - 1]));
    w[i] = g.add_constant(n + ".weight", param({widths[i - 1], widths[i]}, dtype::f32, with_data, seed + i * 2, s));
    b[i] = g.add_constant(n + ".bias", param({widths[i]}, dtype::f32, with_data, seed + i * 2 + 1, 0.1));
    std::string z = g.add_op("Gemm", {h.back(), w[i], b[i]}, {}, n);
    h.push_back(i < layers ? g.add_op("Relu", {z}, {}, n + ".relu") : z);
  }
  // Loss: mean((y - t)^2); its gradient 2 (y - t) / (batch * outputs).
  const std::string diff = g.add_op("Sub", {h.back(), target}, {}, "loss.diff");
  g.set_output(
      g.add_op("ReduceMean", {g.add_op("Mul", {diff, diff}, {}, "loss.sq")}, {{"keepdims", std::int64_t{1}}}, "loss"));
  const double scale = 2.0 / static_cast<double>(batch * widths.back());
  const std::string c = g.add_constant("loss.scale", tensor({1}, dtype::f32, {scale}));
  std::string dz = g.add_op("Mul", {diff, c}, {}, "loss.grad");
  // Backward, last layer first; each parameter's update follows its gradient.
  for (std::size_t i = layers; i >= 1; --i) {
    const std::string n = "fc" + std::to_string(i);
    const std::string dw = g.add_op("Gemm", {h[i - 1], dz}, {{"transA", std::int64_t{1}}}, n + ".weight.grad");
    const std::string db =
        g.add_op("ReduceSum", {dz}, {{"axes", ints{0}}, {"keepdims", std::int64_t{0}}}, n + ".bias.grad");
    if (i > 1) {
      const std::string dh = g.add_op("Gemm", {dz, w[i]}, {{"transB", std::int64_t{1}}}, n + ".input.grad");
      dz = g.add_op("ReluGrad", {dh, h[i - 1]}, {}, "fc" + std::to_string(i - 1) + ".relu.grad");
    }
    g.set_output(g.add_op("SGDUpdate", {w[i], dw}, {{"lr", lr}}, n + ".weight.next"));
    g.set_output(g.add_op("SGDUpdate", {b[i], db}, {{"lr", lr}}, n + ".bias.next"));
  }
  return g;
}

graph resnet50_graph(std::int64_t batch, std::int64_t image, bool with_data, std::uint64_t seed, dtype type) {
  require_positive("resnet50_graph", "batch", batch);
  require_positive("resnet50_graph", "image", image);
  (void)checked_elements("resnet50_graph", {batch, 64, image, image});
  const resnet50 table{1, dtype::f32};
  graph g("resnet50");
  std::string x = g.add_input("input", {batch, 3, image, image}, type);
  std::uint64_t k = seed;
  // conv -> BatchNormalization (-> Relu), with torchvision's parameter names.
  auto conv_bn = [&](const conv_layer& c, const std::string& in, bool relu) {
    const double s = std::sqrt(2.0 / static_cast<double>(c.cin * c.kernel * c.kernel));
    auto w = g.add_constant(c.name + ".weight", param({c.cout, c.cin, c.kernel, c.kernel}, type, with_data, ++k, s));
    std::string y = g.add_op("Conv", {in, w},
                             {{"strides", ints{c.stride, c.stride}},
                              {"pads", ints{c.pad, c.pad, c.pad, c.pad}},
                              {"kernel_shape", ints{c.kernel, c.kernel}}},
                             c.name);
    std::string bn = c.name;
    if (bn.find("downsample") != std::string::npos) bn.replace(bn.rfind(".0"), 2, ".1");
    else bn.replace(bn.find("conv"), 4, "bn");
    auto gm = g.add_constant(bn + ".weight", param({c.cout}, type, with_data, ++k, 0.2, 1.0));
    auto bt = g.add_constant(bn + ".bias", param({c.cout}, type, with_data, ++k, 0.1));
    auto mn = g.add_constant(bn + ".running_mean", param({c.cout}, type, with_data, ++k, 0.1));
    auto vr = g.add_constant(bn + ".running_var", param({c.cout}, type, with_data, ++k, 0.2, 1.0));
    y = g.add_op("BatchNormalization", {y, gm, bt, mn, vr}, {{"epsilon", 1e-5}}, bn);
    if (relu) y = g.add_op("Relu", {y}, {}, bn + ".relu");
    return y;
  };
  const auto& convs = table.convs();
  x = conv_bn(convs[0], x, true);
  x = g.add_op("MaxPool", {x}, {{"kernel_shape", ints{3, 3}}, {"strides", ints{2, 2}}, {"pads", ints{1, 1, 1, 1}}},
               "maxpool");
  for (std::size_t i = 1; i < convs.size();) {
    // A bottleneck block: conv1, conv2, conv3 and, in a stage's first block, the projection.
    const std::string block = convs[i].name.substr(0, convs[i].name.rfind(".conv"));
    // The projection is added first: the block's last convolution can then take the shortcut
    // as its fused residual, and the projection may run beside the main path.
    const bool projected = i + 3 < convs.size() && convs[i + 3].name.find("downsample") != std::string::npos;
    const std::string shortcut = projected ? conv_bn(convs[i + 3], x, false) : x;
    std::string y = conv_bn(convs[i], x, true);
    y = conv_bn(convs[i + 1], y, true);
    y = conv_bn(convs[i + 2], y, false);
    i += projected ? 4 : 3;
    x = g.add_op("Relu", {g.add_op("Add", {y, shortcut}, {}, block + ".add")}, {}, block + ".relu");
  }
  x = g.add_op("GlobalAveragePool", {x}, {}, "avgpool");
  x = g.add_op("Flatten", {x}, {{"axis", std::int64_t{1}}}, "flatten");
  auto fw = g.add_constant("fc.weight", param({1000, 2048}, type, with_data, ++k, 1.0 / std::sqrt(2048.0)));
  auto fb = g.add_constant("fc.bias", param({1000}, type, with_data, ++k, 0.1));
  g.set_output(g.add_op("Gemm", {x, fw, fb}, {{"transB", std::int64_t{1}}}, "logits"));
  return g;
}

graph resnet_training_step(const resnet_config& c, bool with_data, std::uint64_t seed,
                           std::vector<std::string>* gradients) {
  const char* model = "resnet_training_step";
  require_positive(model, "batch", c.batch);
  require_positive(model, "image", c.image);
  require_positive(model, "width", c.width);
  require_positive(model, "classes", c.classes);
  if (c.blocks.empty()) require_positive(model, "the stage count", 0);
  for (const std::int64_t b : c.blocks) require_positive(model, "a stage's block count", b);
  if (c.blocks.size() > 8)
    throw_error(make_error_code(errc::invalid_argument), "models::resnet_training_step: at most 8 stages");
  // The stem (stride 2), the max pool (stride 2) and each later stage (stride 2) halve the image.
  const std::int64_t min_image = std::int64_t{4} << c.blocks.size();
  if (c.image < min_image)
    throw_error(make_error_code(errc::invalid_argument), "models::resnet_training_step: image " +
                                                             std::to_string(c.image) + " is below " +
                                                             std::to_string(min_image) + ", the least its " +
                                                             std::to_string(c.blocks.size()) + " stages can halve");
  const std::int64_t last = c.width * 4 << (c.blocks.size() - 1);
  (void)checked_elements(model, {c.batch, c.width, c.image, c.image});
  (void)checked_elements(model, {c.batch, last});
  (void)checked_elements(model, {c.classes, last});
  const dtype t = dtype::f32;
  graph g("resnet_training_step");
  std::string x = g.add_input("input", {c.batch, 3, c.image, c.image}, t);
  const std::string labels = g.add_input("labels", {c.batch, c.classes}, t);
  std::uint64_t k = seed;
  std::vector<std::string> grads;
  auto update = [&](const std::string& param, const std::string& grad) {
    grads.push_back(grad);
    g.set_output(g.add_op("SGDUpdate", {param, grad}, {{"lr", c.lr}}, param + ".next"));
  };
  // A convolution and its BatchNorm (and Relu), with what backward needs of them.
  struct conv_bn {
    std::string in, w, conv, gamma, beta, saved_mean, saved_inv_std, out, bn;
    bool relu = false;
    attributes attrs;
  };
  auto forward = [&](const std::string& name, const std::string& in, std::int64_t cin, std::int64_t cout,
                     std::int64_t kernel, std::int64_t stride, bool relu) {
    conv_bn l;
    l.in = in;
    l.relu = relu;
    const std::int64_t pad = kernel / 2;
    l.attrs = {
        {"strides", ints{stride, stride}}, {"pads", ints{pad, pad, pad, pad}}, {"kernel_shape", ints{kernel, kernel}}};
    const double s = std::sqrt(2.0 / static_cast<double>(cin * kernel * kernel));
    l.w = g.add_constant(name + ".weight", param({cout, cin, kernel, kernel}, t, with_data, ++k, s));
    l.conv = g.add_op("Conv", {in, l.w}, l.attrs, name);
    l.bn = name;
    if (l.bn.find("downsample") != std::string::npos) l.bn.replace(l.bn.rfind(".0"), 2, ".1");
    else l.bn.replace(l.bn.find("conv"), 4, "bn");
    l.gamma = g.add_constant(l.bn + ".weight", param({cout}, t, with_data, ++k, 0.2, 1.0));
    l.beta = g.add_constant(l.bn + ".bias", param({cout}, t, with_data, ++k, 0.1));
    const std::string mean = g.add_constant(l.bn + ".running_mean", param({cout}, t, with_data, ++k, 0.1));
    const std::string var = g.add_constant(l.bn + ".running_var", param({cout}, t, with_data, ++k, 0.2, 1.0));
    const std::string y = l.bn + ".out";
    l.saved_mean = l.bn + ".saved_mean";
    l.saved_inv_std = l.bn + ".saved_inv_std";
    g.add_node("BatchNormInternal", l.bn, {l.conv, l.gamma, l.beta, mean, var},
               {y, l.bn + ".running_mean.next", l.bn + ".running_var.next", l.saved_mean, l.saved_inv_std},
               {{"epsilon", 1e-5}, {"momentum", c.momentum}});
    g.set_output(l.bn + ".running_mean.next");
    g.set_output(l.bn + ".running_var.next");
    l.out = relu ? g.add_op("Relu", {y}, {}, l.bn + ".relu") : y;
    return l;
  };
  // dY of the layer's output -> dX of its input; the parameters' gradients and updates. The stem
  // reads the image, whose gradient nobody wants: its ConvGrad leaves dX out ("").
  auto backward = [&](const conv_bn& l, std::string dy, bool want_dx = true) {
    if (l.relu) dy = g.add_op("ReluGrad", {dy, l.out}, {}, l.bn + ".relu.grad");
    const std::string dconv = l.bn + ".out.grad";
    g.add_node("BatchNormalizationGrad", l.bn + ".backward", {dy, l.conv, l.gamma, l.saved_mean, l.saved_inv_std},
               {dconv, l.gamma + ".grad", l.beta + ".grad"}, {});
    const std::string dx = want_dx ? l.conv + ".input.grad" : std::string();
    g.add_node("ConvGrad", l.conv + ".backward", {dconv, l.in, l.w}, {dx, l.w + ".grad"}, l.attrs);
    update(l.gamma, l.gamma + ".grad");
    update(l.beta, l.beta + ".grad");
    update(l.w, l.w + ".grad");
    return dx;
  };
  // Forward.
  const conv_bn stem = forward("conv1", x, 3, c.width, 7, 2, true);
  const attributes pool{{"kernel_shape", ints{3, 3}}, {"strides", ints{2, 2}}, {"pads", ints{1, 1, 1, 1}}};
  x = g.add_op("MaxPool", {stem.out}, pool, "maxpool");
  struct block {
    std::string in, out, name;
    std::vector<conv_bn> main;
    std::optional<conv_bn> projection;
  };
  std::vector<block> blocks;
  std::int64_t cin = c.width;
  for (std::size_t s = 0; s < c.blocks.size(); ++s) {
    const std::int64_t mid = c.width << s, cout = mid * 4;
    for (std::int64_t b = 0; b < c.blocks[s]; ++b) {
      block bl;
      bl.name = "layer" + std::to_string(s + 1) + "." + std::to_string(b);
      bl.in = x;
      const std::int64_t stride = b == 0 && s > 0 ? 2 : 1;
      // The projection first, as resnet50_graph adds it.
      if (b == 0) bl.projection = forward(bl.name + ".downsample.0", x, cin, cout, 1, stride, false);
      bl.main.push_back(forward(bl.name + ".conv1", x, cin, mid, 1, 1, true));
      bl.main.push_back(forward(bl.name + ".conv2", bl.main.back().out, mid, mid, 3, stride, true));
      bl.main.push_back(forward(bl.name + ".conv3", bl.main.back().out, mid, cout, 1, 1, false));
      const std::string shortcut = bl.projection ? bl.projection->out : x;
      bl.out = g.add_op("Relu", {g.add_op("Add", {bl.main.back().out, shortcut}, {}, bl.name + ".add")}, {},
                        bl.name + ".relu");
      x = bl.out;
      cin = cout;
      blocks.push_back(std::move(bl));
    }
  }
  const std::string features = x;
  x = g.add_op("Flatten", {g.add_op("GlobalAveragePool", {x}, {}, "avgpool")}, {{"axis", std::int64_t{1}}}, "flatten");
  const std::string fw =
      g.add_constant("fc.weight", param({c.classes, last}, t, with_data, ++k, 1.0 / std::sqrt(double(last))));
  const std::string fb = g.add_constant("fc.bias", param({c.classes}, t, with_data, ++k, 0.1));
  const std::string logits = g.add_op("Gemm", {x, fw, fb}, {{"transB", std::int64_t{1}}}, "logits");
  // Softmax cross-entropy: loss = -mean over the batch of sum(labels * log_softmax(logits));
  // its gradient (softmax(logits) - labels) / batch.
  const std::string ll = g.add_op(
      "Mul", {labels, g.add_op("LogSoftmax", {logits}, {{"axis", std::int64_t{1}}}, "log_softmax")}, {}, "loss.picked");
  const std::string per = g.add_op("ReduceSum", {ll}, {{"axes", ints{1}}, {"keepdims", std::int64_t{1}}}, "loss.sum");
  const std::string neg = g.add_constant("loss.neg", tensor({1}, t, {-1.0}));
  g.set_output(g.add_op("ReduceMean", {g.add_op("Mul", {per, neg}, {}, "loss.negated")},
                        {{"keepdims", std::int64_t{1}}}, "loss"));
  const std::string scale = g.add_constant("loss.scale", tensor({1}, t, {1.0 / static_cast<double>(c.batch)}));
  const std::string probs = g.add_op("Softmax", {logits}, {{"axis", std::int64_t{1}}}, "probs");
  const std::string dlogits =
      g.add_op("Mul", {g.add_op("Sub", {probs, labels}, {}, "loss.diff"), scale}, {}, "logits.grad");
  // Backward: the classifier, the pooling, the blocks last first, the stem.
  const std::string dfw = g.add_op("Gemm", {dlogits, x}, {{"transA", std::int64_t{1}}}, "fc.weight.grad");
  const std::string dfb =
      g.add_op("ReduceSum", {dlogits}, {{"axes", ints{0}}, {"keepdims", std::int64_t{0}}}, "fc.bias.grad");
  update(fw, dfw);
  update(fb, dfb);
  const std::string dflat = g.add_op("Gemm", {dlogits, fw}, {}, "flatten.grad");
  const std::string pooled_shape = g.add_constant("avgpool.grad.shape", shape_const({c.batch, last, 1, 1}));
  const std::string dpooled = g.add_op("Reshape", {dflat, pooled_shape}, {}, "avgpool.out.grad");
  std::string d = g.add_op("GlobalAveragePoolGrad", {dpooled, features}, {}, "avgpool.grad");
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) {
    const std::string dsum = g.add_op("ReluGrad", {d, b->out}, {}, b->name + ".relu.grad");
    std::string dm = dsum;
    for (auto l = b->main.rbegin(); l != b->main.rend(); ++l) dm = backward(*l, dm);
    const std::string ds = b->projection ? backward(*b->projection, dsum) : dsum;
    d = g.add_op("Add", {dm, ds}, {}, b->name + ".input.grad");
  }
  d = g.add_op("MaxPoolGrad", {d, stem.out}, pool, "maxpool.grad");
  (void)backward(stem, d, false);
  if (gradients) *gradients = std::move(grads);
  return g;
}

std::string add_encoder_block(graph& g, const std::string& x, const transformer_config& c, const std::string& p,
                              bool with_data, std::uint64_t seed) {
  check_transformer("add_encoder_block", c);
  const std::int64_t B = c.batch, S = c.seq, H = c.hidden, h = c.heads, d = H / h, F = c.ffn;
  const dtype t = c.type;
  std::uint64_t k = seed;
  const double sh = 1.0 / std::sqrt(static_cast<double>(H));
  auto linear = [&](const std::string& in, const std::string& name, std::int64_t fin, std::int64_t fout) {
    auto w = g.add_constant(p + "." + name + ".weight",
                            param({fin, fout}, t, with_data, ++k, 1.0 / std::sqrt(static_cast<double>(fin))));
    auto b = g.add_constant(p + "." + name + ".bias", param({fout}, t, with_data, ++k, 0.05));
    return g.add_op("Add", {g.add_op("MatMul", {in, w}, {}, p + "." + name), b}, {}, p + "." + name + ".bias_add");
  };
  auto heads_shape = g.add_constant(p + ".heads_shape", shape_const({B, S, h, d}));
  auto merged_shape = g.add_constant(p + ".merged_shape", shape_const({B, S, H}));
  auto split = [&](const std::string& in, const std::string& name, ints perm) {
    auto r = g.add_op("Reshape", {in, heads_shape}, {}, p + "." + name + ".split");
    return g.add_op("Transpose", {r}, {{"perm", perm}}, p + "." + name + ".heads");
  };
  auto q = split(linear(x, "query", H, H), "query", {0, 2, 1, 3});
  auto kt = split(linear(x, "key", H, H), "key", {0, 2, 3, 1});
  auto v = split(linear(x, "value", H, H), "value", {0, 2, 1, 3});
  auto scale = g.add_constant(p + ".scale", param({1}, t, true, 0, 0.0, 1.0 / std::sqrt(static_cast<double>(d))));
  auto scores = g.add_op("Mul", {g.add_op("MatMul", {q, kt}, {}, p + ".scores"), scale}, {}, p + ".scaled");
  auto probs = g.add_op("Softmax", {scores}, {{"axis", std::int64_t{-1}}}, p + ".probs");
  auto ctx = g.add_op("MatMul", {probs, v}, {}, p + ".context");
  ctx = g.add_op("Transpose", {ctx}, {{"perm", ints{0, 2, 1, 3}}}, p + ".context.merge");
  ctx = g.add_op("Reshape", {ctx, merged_shape}, {}, p + ".context.flat");
  auto attn = g.add_op("Add", {linear(ctx, "attention.output", H, H), x}, {}, p + ".residual1");
  auto ln = [&](const std::string& in, const std::string& name) {
    auto gm = g.add_constant(p + "." + name + ".weight", param({H}, t, with_data, ++k, 0.1, 1.0));
    auto bt = g.add_constant(p + "." + name + ".bias", param({H}, t, with_data, ++k, 0.05));
    return g.add_op("LayerNormalization", {in, gm, bt}, {{"axis", std::int64_t{-1}}, {"epsilon", 1e-5}},
                    p + "." + name);
  };
  auto a = ln(attn, "ln1");
  auto f = g.add_op("Gelu", {linear(a, "intermediate", H, F)}, {{"approximate", std::string("tanh")}}, p + ".gelu");
  auto o = g.add_op("Add", {linear(f, "output", F, H), a}, {}, p + ".residual2");
  (void)sh;
  return ln(o, "ln2");
}

graph transformer_encoder(const transformer_config& c, bool with_data, std::uint64_t seed) {
  check_transformer("transformer_encoder", c);
  graph g("transformer_encoder");
  auto x = g.add_input("x", {c.batch, c.seq, c.hidden}, c.type);
  auto y = add_encoder_block(g, x, c, "block", with_data, seed);
  g.set_output(g.add_op("Identity", {y}, {}, "y"));
  return g;
}

graph bert_large(std::int64_t batch, std::int64_t seq, bool with_data, int layers, dtype type) {
  const transformer_config c{batch, seq, 1024, 16, 4096, type};
  check_transformer("bert_large", c);
  if (layers < 0)
    throw_error(make_error_code(errc::invalid_argument),
                "models::bert_large: layers " + std::to_string(layers) + " is negative");
  graph g("bert_large");
  std::string x = g.add_input("x", {batch, seq, 1024}, type);
  for (int l = 0; l < layers; ++l)
    x = add_encoder_block(g, x, c, "layer" + std::to_string(l), with_data, 1000u * static_cast<std::uint64_t>(l + 1));
  g.set_output(g.add_op("Identity", {x}, {}, "y"));
  return g;
}

graph bert_training_step_graph(const bert_step_config& c, bool with_data, std::uint64_t seed,
                               std::vector<std::string>* gradients) {
  const char* model = "bert_training_step_graph";
  check_transformer(model, {c.batch, c.seq, c.hidden, c.heads, c.ffn, dtype::f32});
  require_positive(model, "vocab", c.vocab);
  require_positive(model, "layers", c.layers);
  if (c.masked < 0 || c.masked > c.seq)
    throw_error(make_error_code(errc::invalid_argument), std::string("models::") + model + ": masked " +
                                                             std::to_string(c.masked) + " is outside [0, seq " +
                                                             std::to_string(c.seq) + "]");
  if (c.type_vocab < 0)
    throw_error(make_error_code(errc::invalid_argument),
                std::string("models::") + model + ": type_vocab " + std::to_string(c.type_vocab) + " is negative");
  const std::int64_t B = c.batch, S = c.seq, H = c.hidden, h = c.heads, d = H / h, F = c.ffn, V = c.vocab;
  const std::int64_t M = c.masked, T = c.type_vocab;
  const std::int64_t N = checked_elements(model, {B, S});
  // The rows the classifier predicts: the masked positions, or every position.
  const std::int64_t R = M > 0 ? checked_elements(model, {B, M}) : N;
  (void)checked_elements(model, {N, V});
  (void)checked_elements(model, {H, V});
  (void)checked_elements(model, {N, H});
  if (T > 0) (void)checked_elements(model, {N, T});
  const dtype t = dtype::f32;
  graph g("bert_training_step");
  const std::string ids = g.add_input("input_ids", {B, S}, dtype::i64);
  const std::string labels = g.add_input("labels", {R, V}, t);
  std::uint64_t k = seed;
  std::vector<std::string> grads;
  auto weight = [&](const std::string& name, shape s, double scale, double offset = 0) {
    return g.add_constant(name, param(s, t, with_data, ++k, scale, offset));
  };
  auto update = [&](const std::string& p, const std::string& grad) {
    grads.push_back(grad);
    g.set_output(g.add_op("SGDUpdate", {p, grad}, {{"lr", c.lr}}, p + ".next"));
  };
  auto shape_of = [&](const std::string& name, std::initializer_list<std::int64_t> dims) {
    return g.add_constant(name, shape_const(dims));
  };
  const std::string rows_shape = shape_of("shape.rows", {N, H}), heads_shape = shape_of("shape.heads", {B, S, h, d});
  const std::string seq_shape = shape_of("shape.embedded", {B, S, H});
  const attributes trans_a{{"transA", std::int64_t{1}}}, trans_b{{"transB", std::int64_t{1}}};
  const attributes last_axis{{"axis", std::int64_t{-1}}}, tanh_form{{"approximate", std::string("tanh")}};
  const attributes swap_last{{"perm", ints{0, 1, 3, 2}}}, to_heads{{"perm", ints{0, 2, 1, 3}}};
  // A dense layer x [rows, in] · W [in, out] + b, with what backward needs.
  struct dense {
    std::string in, w, b, out;
  };
  auto linear = [&](const std::string& in, const std::string& name, std::int64_t fin, std::int64_t fout) {
    dense l{in,
            weight(name + ".weight", {fin, fout}, 1.0 / std::sqrt(static_cast<double>(fin))),
            weight(name + ".bias", {fout}, 0.05),
            {}};
    l.out = g.add_op("Gemm", {in, l.w, l.b}, {}, name);
    return l;
  };
  // Its backward: dW = xᵀ·dY, db = Σ_rows dY and dX = dY·Wᵀ.
  auto linear_grad = [&](const dense& l, const std::string& dy) {
    update(l.w, g.add_op("Gemm", {l.in, dy}, trans_a, l.w + ".grad"));
    update(l.b, g.add_op("ReduceSum", {dy}, {{"axes", ints{0}}, {"keepdims", std::int64_t{0}}}, l.b + ".grad"));
    return g.add_op("Gemm", {dy, l.w}, trans_b, l.out + ".input.grad");
  };
  // A LayerNormalization over the hidden axis keeping its statistics for its gradient.
  struct norm {
    std::string in, scale, bias, mean, inv_std_dev, out;
  };
  auto layer_norm = [&](const std::string& in, const std::string& name) {
    norm n{in,
           weight(name + ".weight", {H}, 0.1, 1.0),
           weight(name + ".bias", {H}, 0.05),
           name + ".mean",
           name + ".inv_std_dev",
           name + ".out"};
    g.add_node("LayerNormalization", name, {in, n.scale, n.bias}, {n.out, n.mean, n.inv_std_dev},
               {{"axis", std::int64_t{-1}}, {"epsilon", 1e-12}});
    return n;
  };
  auto layer_norm_grad = [&](const norm& n, const std::string& dy) {
    const std::string dx = n.out + ".input.grad";
    g.add_node("LayerNormalizationGrad", n.out + ".backward", {dy, n.in, n.scale, n.mean, n.inv_std_dev},
               {dx, n.scale + ".grad", n.bias + ".grad"}, {{"axis", std::int64_t{-1}}, {"epsilon", 1e-12}});
    update(n.scale, n.scale + ".grad");
    update(n.bias, n.bias + ".grad");
    return dx;
  };
  // [N, H] <-> [B, h, S, d].
  auto split = [&](const std::string& in, const std::string& name) {
    return g.add_op("Transpose", {g.add_op("Reshape", {in, heads_shape}, {}, name + ".split")}, to_heads,
                    name + ".heads");
  };
  auto merge = [&](const std::string& in, const std::string& name) {
    return g.add_op("Reshape", {g.add_op("Transpose", {in}, to_heads, name + ".merge"), rows_shape}, {},
                    name + ".rows");
  };
  // Forward: the embeddings.
  const std::string word = weight("embeddings.word_embeddings.weight", {V, H}, 1.0);
  const std::string position = weight("embeddings.position_embeddings.weight", {S, H}, 0.5);
  std::string embedded =
      g.add_op("Add", {g.add_op("Gather", {word, ids}, {}, "embeddings.words"), position}, {}, "embeddings.sum");
  std::string type_ids, token_type;
  if (T > 0) {
    type_ids = g.add_input("token_type_ids", {B, S}, dtype::i64);
    token_type = weight("embeddings.token_type_embeddings.weight", {T, H}, 0.5);
    embedded = g.add_op("Add", {embedded, g.add_op("Gather", {token_type, type_ids}, {}, "embeddings.token_types")}, {},
                        "embeddings.sum.types");
  }
  const norm emb_norm =
      layer_norm(g.add_op("Reshape", {embedded, rows_shape}, {}, "embeddings.rows"), "embeddings.LayerNorm");
  struct block {
    std::string p, q, kh, v, probs;
    dense query, key, value, attn_out, inter, out;
    norm ln1, ln2;
    std::string gelu_in;
  };
  const std::string scale =
      g.add_constant("attention.scale", param({1}, t, true, 0, 0.0, 1.0 / std::sqrt(static_cast<double>(d))));
  std::vector<block> blocks;
  std::string x = emb_norm.out;
  for (int l = 0; l < c.layers; ++l) {
    block b;
    b.p = "encoder.layer." + std::to_string(l);
    b.query = linear(x, b.p + ".attention.self.query", H, H);
    b.key = linear(x, b.p + ".attention.self.key", H, H);
    b.value = linear(x, b.p + ".attention.self.value", H, H);
    b.q = split(b.query.out, b.query.out);
    b.kh = split(b.key.out, b.key.out);
    b.v = split(b.value.out, b.value.out);
    const std::string kt = g.add_op("Transpose", {b.kh}, swap_last, b.key.out + ".transposed");
    const std::string scores = g.add_op("MatMul", {b.q, kt}, {}, b.p + ".attention.scores");
    b.probs = g.add_op("Softmax", {g.add_op("Mul", {scores, scale}, {}, b.p + ".attention.scaled")}, last_axis,
                       b.p + ".attention.probs");
    const std::string context =
        merge(g.add_op("MatMul", {b.probs, b.v}, {}, b.p + ".attention.context"), b.p + ".attention.context");
    b.attn_out = linear(context, b.p + ".attention.output.dense", H, H);
    b.ln1 = layer_norm(g.add_op("Add", {b.attn_out.out, x}, {}, b.p + ".attention.residual"),
                       b.p + ".attention.output.LayerNorm");
    b.inter = linear(b.ln1.out, b.p + ".intermediate.dense", H, F);
    b.gelu_in = b.inter.out;
    b.out = linear(g.add_op("Gelu", {b.inter.out}, tanh_form, b.p + ".intermediate.gelu"), b.p + ".output.dense", F, H);
    b.ln2 =
        layer_norm(g.add_op("Add", {b.out.out, b.ln1.out}, {}, b.p + ".output.residual"), b.p + ".output.LayerNorm");
    x = b.ln2.out;
    blocks.push_back(std::move(b));
  }
  // Masked language modelling predicts only the masked positions (Devlin et al., 2019, 3.1): their
  // rows are gathered, by (sequence, position) pairs, before the classifier over the vocabulary,
  // as BERT's reference implementation gathers them (gather_indexes in run_pretraining.py).
  std::string pairs;
  if (M > 0) {
    const std::string positions = g.add_input("masked_lm_positions", {B, M}, dtype::i64);
    tensor sequence(shape{B, M, 1}, dtype::i64);
    for (std::int64_t i = 0; i < B * M; ++i) sequence.set(i, static_cast<double>(i / M));
    pairs =
        g.add_op("Concat",
                 {g.add_constant("mlm.sequence", std::move(sequence)),
                  g.add_op("Reshape", {positions, shape_of("shape.mlm.positions", {B, M, 1})}, {}, "mlm.positions")},
                 {{"axis", std::int64_t{-1}}}, "mlm.index");
    x = g.add_op("Reshape",
                 {g.add_op("GatherND", {g.add_op("Reshape", {x, seq_shape}, {}, "mlm.sequence_output"), pairs}, {},
                           "mlm.gather"),
                  shape_of("shape.mlm.rows", {R, H})},
                 {}, "mlm.rows");
  }
  const dense cls = linear(x, "cls", H, V);
  // Softmax cross-entropy over the vocabulary at each position, as resnet_training_step's: loss =
  // −mean over positions of Σ labels · log_softmax(logits); its gradient (softmax − labels) / N.
  const std::string picked =
      g.add_op("Mul", {labels, g.add_op("LogSoftmax", {cls.out}, {{"axis", std::int64_t{1}}}, "log_softmax")}, {},
               "loss.picked");
  const std::string per =
      g.add_op("ReduceSum", {picked}, {{"axes", ints{1}}, {"keepdims", std::int64_t{1}}}, "loss.sum");
  const std::string neg = g.add_constant("loss.neg", tensor({1}, t, {-1.0}));
  g.set_output(g.add_op("ReduceMean", {g.add_op("Mul", {per, neg}, {}, "loss.negated")},
                        {{"keepdims", std::int64_t{1}}}, "loss"));
  const std::string inv_n = g.add_constant("loss.scale", tensor({1}, t, {1.0 / static_cast<double>(R)}));
  const std::string probs = g.add_op("Softmax", {cls.out}, {{"axis", std::int64_t{1}}}, "probs");
  const std::string dlogits =
      g.add_op("Mul", {g.add_op("Sub", {probs, labels}, {}, "loss.diff"), inv_n}, {}, "cls.grad");
  // Backward: the classifier, the blocks last first, the embeddings.
  std::string dx = linear_grad(cls, dlogits);
  if (M > 0) {
    // The gather's gradient: each predicted row's gradient added back at its position, zero at
    // the others.
    tensor zeros = with_data ? tensor(shape{B, S, H}, t) : tensor::timing_only({B, S, H}, t);
    const std::string scattered =
        g.add_op("ScatterND",
                 {g.add_constant("mlm.zeros", std::move(zeros)), pairs,
                  g.add_op("Reshape", {dx, shape_of("shape.mlm.gathered", {B, M, H})}, {}, "mlm.gather.output.grad")},
                 {{"reduction", std::string("add")}}, "mlm.gather.grad");
    dx = g.add_op("Reshape", {scattered, rows_shape}, {}, "mlm.sequence_output.grad");
  }
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) {
    const std::string dres2 = layer_norm_grad(b->ln2, dx);
    const std::string dgelu = linear_grad(b->out, dres2);
    const std::string dinter = g.add_op("GeluGrad", {dgelu, b->gelu_in}, tanh_form, b->p + ".intermediate.gelu.grad");
    const std::string dln1 =
        g.add_op("Add", {dres2, linear_grad(b->inter, dinter)}, {}, b->p + ".attention.output.LayerNorm.out.grad");
    const std::string dres1 = layer_norm_grad(b->ln1, dln1);
    const std::string dcontext = split(linear_grad(b->attn_out, dres1), b->p + ".attention.context.grad");
    // context = P · V: dP = dC · Vᵀ, dV = Pᵀ · dC.
    const std::string dprobs =
        g.add_op("MatMul", {dcontext, g.add_op("Transpose", {b->v}, swap_last, b->value.out + ".transposed")}, {},
                 b->p + ".attention.probs.grad");
    const std::string dv = g.add_op(
        "MatMul", {g.add_op("Transpose", {b->probs}, swap_last, b->p + ".attention.probs.transposed"), dcontext}, {},
        b->value.out + ".heads.grad");
    const std::string dscores = g.add_op(
        "Mul", {g.add_op("SoftmaxGrad", {dprobs, b->probs}, last_axis, b->p + ".attention.scaled.grad"), scale}, {},
        b->p + ".attention.scores.grad");
    // scores = Q · Kᵀ: dQ = dS · K, dK = dSᵀ · Q.
    const std::string dq = g.add_op("MatMul", {dscores, b->kh}, {}, b->query.out + ".heads.grad");
    const std::string dk = g.add_op(
        "MatMul", {g.add_op("Transpose", {dscores}, swap_last, b->p + ".attention.scores.grad.transposed"), b->q}, {},
        b->key.out + ".heads.grad");
    std::string sum = dres1;
    for (const auto& [l, dh] : {std::pair{&b->query, dq}, std::pair{&b->key, dk}, std::pair{&b->value, dv}})
      sum = g.add_op("Add", {sum, linear_grad(*l, merge(dh, l->out + ".grad"))}, {}, l->out + ".input.grad.sum");
    dx = sum;
  }
  const std::string demb = layer_norm_grad(emb_norm, dx);
  // The position embeddings add to every sequence; a word embedding's gradient is the sum of its
  // positions' rows: OneHot(input_ids)ᵀ · dE.
  const std::string demb3 = g.add_op("Reshape", {demb, seq_shape}, {}, "embeddings.sum.grad");
  update(position,
         g.add_op("ReduceSum", {demb3}, {{"axes", ints{0}}, {"keepdims", std::int64_t{0}}}, position + ".grad"));
  const std::string one_hot_values = g.add_constant("embeddings.one_hot_values", tensor({2}, t, {0.0, 1.0}));
  // OneHot(ids)ᵀ · dE, the gradient of a table whose rows `ids` gathered.
  const auto table_grad = [&](const std::string& table, const std::string& index, std::int64_t size,
                              const std::string& name) {
    tensor depth(shape{1}, dtype::i64);
    depth.set(0, static_cast<double>(size));
    const std::string one_hot =
        g.add_op("OneHot", {index, g.add_constant(name + ".depth", std::move(depth)), one_hot_values},
                 {{"axis", std::int64_t{-1}}}, name + ".one_hot");
    const std::string rows =
        g.add_op("Reshape", {one_hot, shape_of(name + ".one_hot.shape", {N, size})}, {}, name + ".one_hot.rows");
    update(table, g.add_op("Gemm", {rows, demb}, trans_a, table + ".grad"));
  };
  if (T > 0) table_grad(token_type, type_ids, T, "embeddings.token_types");
  table_grad(word, ids, V, "embeddings.words");
  if (gradients) *gradients = std::move(grads);
  return g;
}

std::vector<kernel_desc> bert_training_step(std::int64_t B, std::int64_t S, std::deque<std::string>& names, int layers,
                                            std::int64_t V) {
  using namespace kernels;
  check_transformer("bert_training_step", {B, S, 1024, 16, 4096, dtype::f16});
  require_positive("bert_training_step", "vocab", V);
  if (layers < 0)
    throw_error(make_error_code(errc::invalid_argument),
                "models::bert_training_step: layers " + std::to_string(layers) + " is negative");
  (void)checked_elements("bert_training_step", {B, 20, V});
  (void)checked_elements("bert_training_step", {1024, V});
  const std::int64_t H = 1024, F = 4096, h = 16, d = 64, T = B * S;
  const std::int64_t P = B * 20;  // masked positions per batch (max_predictions_per_seq = 20)
  const dtype c = dtype::f16, m = dtype::f32;
  std::vector<kernel_desc> ks;
  auto name = [&](std::string n) -> std::string_view {
    names.push_back(std::move(n));
    return names.back();
  };
  auto td = [](shape s, dtype t) { return tensor_desc{nullptr, s, t, layout::nd}; };
  auto mm = [&](const std::string& n, std::int64_t M, std::int64_t K, std::int64_t N, bool ta = false,
                bool tb = false) {
    ks.push_back(kernel_desc(
        matmul{td(ta ? shape{K, M} : shape{M, K}, c), td(tb ? shape{N, K} : shape{K, N}, c), td({M, N}, c), ta, tb},
        name(n)));
  };
  auto bmm = [&](const std::string& n, std::int64_t Bt, std::int64_t M, std::int64_t K, std::int64_t N) {
    ks.push_back(kernel_desc(matmul{td({Bt, M, K}, c), td({Bt, K, N}, c), td({Bt, M, N}, c)}, name(n)));
  };
  auto ew = [&](const std::string& n, eltwise_fn f, shape s, bool binary = true) {
    ks.push_back(kernel_desc(elementwise{f, td(s, c), binary ? td(s, c) : tensor_desc{}, td(s, c)}, name(n)));
  };
  auto bias = [&](const std::string& n, std::int64_t rows, std::int64_t cols) {
    ks.push_back(
        kernel_desc(elementwise{eltwise_fn::add, td({rows, cols}, c), td({cols}, c), td({rows, cols}, c)}, name(n)));
  };
  auto lnorm = [&](const std::string& n, std::int64_t rows) {
    ks.push_back(kernel_desc(layernorm{td({rows, H}, c), td({H}, c), td({H}, c), td({rows, H}, c)}, name(n)));
  };
  auto smax = [&](const std::string& n, shape s) {
    ks.push_back(kernel_desc(softmax{td(s, c), td(s, c), -1}, name(n)));
  };
  auto tr = [&](const std::string& n) {
    transpose t{td({B, S, h, d}, c), td({B, h, S, d}, c)};
    t.perm = {0, 2, 1, 3, 4, 5, 6, 7};
    ks.push_back(kernel_desc(t, name(n)));
  };
  auto colsum = [&](const std::string& n, std::int64_t rows, std::int64_t cols) {
    ks.push_back(kernel_desc(reduce{reduce_fn::sum, td({rows, cols}, c), td({cols}, c), 1u, false}, name(n)));
  };
  // Forward: embeddings (the lookups as adds of gathered rows), then the encoder, then the heads.
  ew("embeddings.add_position", eltwise_fn::add, {T, H});
  ew("embeddings.add_type", eltwise_fn::add, {T, H});
  lnorm("embeddings.ln", T);
  ew("embeddings.dropout", eltwise_fn::mul, {T, H});
  for (int l = 0; l < layers; ++l) {
    const std::string p = "layer" + std::to_string(l) + ".";
    mm(p + "qkv", T, H, 3 * H);
    bias(p + "qkv.bias", T, 3 * H);
    tr(p + "q.heads"), tr(p + "k.heads"), tr(p + "v.heads");
    bmm(p + "scores", B * h, S, d, S);
    ew(p + "scale_mask", eltwise_fn::add, {B * h, S, S});
    smax(p + "softmax", {B * h, S, S});
    ew(p + "attn.dropout", eltwise_fn::mul, {B * h, S, S});
    bmm(p + "context", B * h, S, S, d);
    tr(p + "context.merge");
    mm(p + "attn.out", T, H, H);
    bias(p + "attn.out.bias", T, H);
    ew(p + "attn.out.dropout", eltwise_fn::mul, {T, H});
    ew(p + "residual1", eltwise_fn::add, {T, H});
    lnorm(p + "ln1", T);
    mm(p + "ffn1", T, H, F);
    bias(p + "ffn1.bias", T, F);
    ew(p + "gelu", eltwise_fn::gelu, {T, F}, false);
    mm(p + "ffn2", T, F, H);
    bias(p + "ffn2.bias", T, H);
    ew(p + "ffn.dropout", eltwise_fn::mul, {T, H});
    ew(p + "residual2", eltwise_fn::add, {T, H});
    lnorm(p + "ln2", T);
  }
  mm("mlm.transform", P, H, H);
  ew("mlm.gelu", eltwise_fn::gelu, {P, H}, false);
  lnorm("mlm.ln", P);
  mm("mlm.decoder", P, H, V, false, true);  // tied to the word embeddings
  smax("mlm.log_softmax", {P, V});
  mm("nsp.pooler", B, H, H);
  ew("nsp.tanh", eltwise_fn::tanh, {B, H}, false);
  mm("nsp.classifier", B, H, 2);
  // Backward, in reverse. A matmul's gradient is two matmuls (dX = dY W^T, dW = X^T dY); an
  // elementwise op's is one or two elementwise passes; softmax's and layernorm's are a reduction
  // and two elementwise passes over their input; a bias's is a column sum.
  auto ln_bwd = [&](const std::string& n, std::int64_t rows) {
    colsum(n + ".dgamma_dbeta", rows, H);
    ew(n + ".dx1", eltwise_fn::mul, {rows, H});
    ew(n + ".dx2", eltwise_fn::sub, {rows, H});
  };
  ew("mlm.log_softmax.bwd", eltwise_fn::sub, {P, V});
  mm("mlm.decoder.dx", P, V, H);
  mm("mlm.decoder.dw", V, P, H, true, false);
  ln_bwd("mlm.ln.bwd", P);
  ew("mlm.gelu.bwd", eltwise_fn::mul, {P, H});
  mm("mlm.transform.dx", P, H, H, false, true);
  mm("mlm.transform.dw", H, P, H, true, false);
  mm("nsp.dx", B, 2, H), mm("nsp.dw", H, B, 2, true, false);
  ew("nsp.tanh.bwd", eltwise_fn::mul, {B, H});
  mm("nsp.pooler.dx", B, H, H, false, true), mm("nsp.pooler.dw", H, B, H, true, false);
  for (int l = layers - 1; l >= 0; --l) {
    const std::string p = "layer" + std::to_string(l) + ".bwd.";
    ln_bwd(p + "ln2", T);
    ew(p + "ffn.dropout", eltwise_fn::mul, {T, H});
    colsum(p + "ffn2.dbias", T, H);
    mm(p + "ffn2.dx", T, H, F, false, true);
    mm(p + "ffn2.dw", F, T, H, true, false);
    ew(p + "gelu", eltwise_fn::mul, {T, F});
    ew(p + "gelu.2", eltwise_fn::mul, {T, F});
    colsum(p + "ffn1.dbias", T, F);
    mm(p + "ffn1.dx", T, F, H, false, true);
    mm(p + "ffn1.dw", H, T, F, true, false);
    ew(p + "residual.grad", eltwise_fn::add, {T, H});
    ln_bwd(p + "ln1", T);
    ew(p + "attn.out.dropout", eltwise_fn::mul, {T, H});
    colsum(p + "attn.out.dbias", T, H);
    mm(p + "attn.out.dx", T, H, H, false, true);
    mm(p + "attn.out.dw", H, T, H, true, false);
    tr(p + "context.split");
    bmm(p + "context.dprobs", B * h, S, d, S);
    bmm(p + "context.dv", B * h, S, S, d);
    ew(p + "attn.dropout", eltwise_fn::mul, {B * h, S, S});
    ks.push_back(kernel_desc(reduce{reduce_fn::sum, td({B * h, S, S}, c), td({B * h, S, 1}, c), 4u, true},
                             name(p + "softmax.sum")));
    ew(p + "softmax.dx", eltwise_fn::sub, {B * h, S, S});
    ew(p + "softmax.dx2", eltwise_fn::mul, {B * h, S, S});
    bmm(p + "scores.dq", B * h, S, S, d);
    bmm(p + "scores.dk", B * h, S, S, d);
    tr(p + "q.merge"), tr(p + "k.merge"), tr(p + "v.merge");
    colsum(p + "qkv.dbias", T, 3 * H);
    mm(p + "qkv.dx", T, 3 * H, H, false, true);
    mm(p + "qkv.dw", H, T, 3 * H, true, false);
    ew(p + "residual.grad2", eltwise_fn::add, {T, H});
  }
  ln_bwd("embeddings.ln.bwd", T);
  ew("embeddings.scatter_add", eltwise_fn::add, {T, H});
  // Update: one pass per parameter tensor on FP32 master weights, then the FP16 copy.
  std::vector<std::pair<std::string, shape>> params{{"word_embeddings", {V, H}},
                                                    {"position_embeddings", {512, H}},
                                                    {"mlm.transform", {H, H}},
                                                    {"nsp.pooler", {H, H}}};
  for (int l = 0; l < layers; ++l) {
    const std::string p = "layer" + std::to_string(l) + ".";
    for (auto& [n, s] : std::vector<std::pair<std::string, shape>>{{"qkv", {H, 3 * H}},
                                                                   {"qkv.b", {3 * H}},
                                                                   {"attn.out", {H, H}},
                                                                   {"attn.out.b", {H}},
                                                                   {"ln1", {2 * H}},
                                                                   {"ffn1", {H, F}},
                                                                   {"ffn1.b", {F}},
                                                                   {"ffn2", {F, H}},
                                                                   {"ffn2.b", {H}},
                                                                   {"ln2", {2 * H}}})
      params.emplace_back(p + n, s);
  }
  for (const auto& [n, s] : params) {
    ks.push_back(kernel_desc(sgd_update{td(s, m), td(s, m), td(s, m), 1e-4f, 0.9f, 0.01f}, name(n + ".update")));
    ks.push_back(kernel_desc(cast{td(s, m), td(s, c)}, name(n + ".to_fp16")));
  }
  return ks;
}

}  // namespace npurt::models

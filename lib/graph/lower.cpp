// Lowering: the kernels and copies one compiled operator launches (see graph/session.hpp).
#include "lower.hpp"

#include "conv_transpose.hpp"
#include "eltwise.hpp"
#include "window.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <tuple>

namespace npurt {

namespace {

using arr2 = std::array<std::int32_t, 2>;

arr2 two(const ints& v, arr2 def) {
  if (v.size() < 2) return def;
  return {static_cast<std::int32_t>(v[0]), static_cast<std::int32_t>(v[1])};
}

// Pads and strides as the graph validated them (symmetric; auto_pad resolved).
arr2 pads_of(const node& n, const shape& x, arr2 kernel, arr2 stride, arr2 dil) {
  const std::string ap = n.attrs.get_string("auto_pad", "NOTSET");
  if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
    arr2 r{};
    for (int i = 0; i < 2; ++i) {
      const std::int64_t in = x[2 + static_cast<std::size_t>(i)];
      const std::int64_t out = (in + stride[i] - 1) / stride[i];
      const std::int64_t total = std::max<std::int64_t>(0, (out - 1) * stride[i] + dil[i] * (kernel[i] - 1) + 1 - in);
      r[i] = static_cast<std::int32_t>(total / 2);
    }
    return r;
  }
  if (ap == "VALID") return {0, 0};
  const ints p = n.attrs.get_ints("pads", {0, 0, 0, 0});
  return {static_cast<std::int32_t>(p[0]), static_cast<std::int32_t>(p[1])};
}

// A constant scalar input's value, if the input is given.
std::optional<double> scalar_input(const cstep& st, const std::vector<cvalue>& values, std::size_t i) {
  if (st.n->inputs.size() <= i || st.in[i] < 0) return std::nullopt;
  const cvalue& v = values[static_cast<std::size_t>(st.in[i])];
  if (!v.host || !v.host->is_host() || v.host->elements() < 1) return std::nullopt;
  // Infinite bounds clamp nothing: the largest finite float says the same to the kernel.
  const double lim = std::numeric_limits<float>::max();
  return std::clamp(v.host->get(0), -lim, lim);
}

// One slice kernel reading `w` from x into y.
kernels::slice slice_of(const tensor_desc& x, const tensor_desc& y, const graph_ops::window& w) {
  kernels::slice k{x, y};
  k.starts = w.starts;
  k.steps = w.steps;
  return k;
}

tensor_desc reshaped(tensor_desc d, shape s) {
  d.shape = s;
  return d;
}

}  // namespace

std::vector<lowered_task> lower_step(const cstep& st, const std::vector<cvalue>& values,
                                     const std::function<void*(int)>& ptr) {
  const node& n = *st.n;
  const std::string& t = n.type;
  auto desc = [&](int v) -> tensor_desc {
    if (v < 0) return {};
    const cvalue& c = values[static_cast<std::size_t>(v)];
    // A scalar is a one-element tensor to the kernels.
    return {ptr(v), c.shape.rank() == 0 ? shape{1} : c.shape, c.type, layout::nd};
  };
  // A scalar as the rank-0 tensor it is, for the kernels that take one (Gather's index and y,
  // ScatterND's update, GatherND's y): as the one-element tensor desc() makes of it, y would keep
  // a dimension the kernel does not expect.
  auto exact = [&](int v) {
    tensor_desc d = desc(v);
    d.shape = values[static_cast<std::size_t>(v)].shape;
    return d;
  };
  std::vector<lowered_task> out;
  // An operator whose outputs are all empty computes nothing: it launches no kernel rather than
  // an empty one, so it costs nothing (compile's empty-tensor rewrite removed every operator whose
  // empty input would give a non-empty output).
  if (std::all_of(st.out.begin(), st.out.end(),
                  [&](int v) { return v < 0 || values[static_cast<std::size_t>(v)].shape.elements() == 0; }))
    return out;
  auto kernel = [&](kernel_op op) { out.push_back({kernel_desc(std::move(op), st.kernel_name, st.block_dim), {}}); };
  const tensor_desc y = desc(st.out[0]);
  if (!st.chain.empty()) {
    kernels::fused_elementwise f{};
    f.y = y;
    f.inputs = static_cast<std::uint8_t>(st.in.size());
    for (std::size_t i = 0; i < st.in.size(); ++i) f.input(i) = desc(st.in[i]);
    f.count = static_cast<std::uint8_t>(st.chain.size());
    auto operand = [](int o) {
      return o == cstep::chain_value ? kernels::fused_elementwise::chain : static_cast<std::uint8_t>(o);
    };
    for (std::size_t k = 0; k < st.chain.size(); ++k) {
      const node& m = *st.chain[k];
      const auto e = graph_ops::find_eltwise(m.type);
      auto& stage = f.stages[k];
      stage.fn = e->fn;
      stage.a = operand(st.chain_operands[k][0]);
      stage.b = e->binary ? operand(st.chain_operands[k][1]) : stage.a;
      std::tie(stage.alpha, stage.beta) = graph_ops::eltwise_params(m, e->fn);
    }
    kernel(f);
    return out;
  }
  if (t == "Conv") {
    const tensor_desc x = desc(st.in[0]), w = desc(st.in[1]);
    kernels::conv2d c{x, w, y};
    c.stride = two(n.attrs.get_ints("strides"), {1, 1});
    c.dilation = two(n.attrs.get_ints("dilations"), {1, 1});
    c.pad = pads_of(n, x.shape, {static_cast<std::int32_t>(w.shape[2]), static_cast<std::int32_t>(w.shape[3])},
                    c.stride, c.dilation);
    c.groups = static_cast<std::int32_t>(n.attrs.get_int("group", 1));
    // Bias, residual and Relu are the convolution's epilogue: one pass over the output.
    if (n.inputs.size() > 2 && st.in[2] >= 0) c.bias = reshaped(desc(st.in[2]), {1, w.shape[0], 1, 1});
    if (st.residual >= 0) c.residual = desc(st.residual);
    if (st.relu_after) c.act = kernels::activation::relu;
    kernel(c);
  } else if (t == "ConvInteger") {
    const tensor_desc x = desc(st.in[0]), w = desc(st.in[1]);
    const auto optional = [&](std::size_t i) {
      return n.inputs.size() > i && st.in[i] >= 0 ? desc(st.in[i]) : tensor_desc{};
    };
    kernels::integer_conv2d c{x, w, optional(2), optional(3), y};
    c.stride = two(n.attrs.get_ints("strides"), {1, 1});
    c.dilation = two(n.attrs.get_ints("dilations"), {1, 1});
    c.pad = pads_of(n, x.shape, {static_cast<std::int32_t>(w.shape[2]), static_cast<std::int32_t>(w.shape[3])},
                    c.stride, c.dilation);
    c.groups = static_cast<std::int32_t>(n.attrs.get_int("group", 1));
    kernel(c);
  } else if (t == "MatMulInteger") {
    const tensor_desc a = desc(st.in[0]);
    kernels::integer_matmul m{a, desc(st.in[1])};
    m.y = y;
    if (n.inputs.size() > 2 && st.in[2] >= 0) {
      // A per-row zero point [M] is [M, 1] to the kernel, which broadcasts it NumPy-style.
      m.a_zero_point = desc(st.in[2]);
      if (m.a_zero_point.shape.rank() == 1 && m.a_zero_point.shape[0] != 1)
        m.a_zero_point.shape = shape{m.a_zero_point.shape[0], 1};
    }
    if (n.inputs.size() > 3 && st.in[3] >= 0) m.b_zero_point = desc(st.in[3]);
    kernel(m);
  } else if (t == "Requantize") {
    kernels::quantize q{kernels::quantize_fn::requantize, desc(st.in[0]), desc(st.in[1]), desc(st.in[2]), y};
    if (q.scale.shape.elements() != 1) {
      const auto r = static_cast<std::int64_t>(q.x.shape.rank());
      const std::int64_t a = n.attrs.get_int("axis", 1);
      q.axis = static_cast<std::int32_t>(a < 0 ? a + r : a);
    }
    kernel(q);
  } else if (t == "ConvTranspose") {
    // Transposed convolution is convolution's input gradient: the input plays dY, the weight
    // [C, M/group, kH, kW] is the forward weight, and the output is dX with the start pads.
    const tensor_desc x = desc(st.in[0]), w = desc(st.in[1]);
    const auto geo = graph_ops::conv_transpose_geom(n.attrs, x.shape, w.shape, [](errc e, const std::string& what) {
      throw graph_error(make_error_code(e), {}, {}, "ConvTranspose: " + what);
    });
    const auto i32 = [](const std::array<std::int64_t, 3>& v) {
      return arr2{static_cast<std::int32_t>(v[0]), static_cast<std::int32_t>(v[1])};
    };
    kernel(kernels::conv2d_backward_data{x, w, y, i32(geo.stride), i32(geo.pad_begin), i32(geo.dilation),
                                         static_cast<std::int32_t>(n.attrs.get_int("group", 1))});
    if (n.inputs.size() > 2 && st.in[2] >= 0) {
      // The bias per output channel, added in place: elementwise kernels read before they write.
      kernels::elementwise add{};
      add.fn = kernels::eltwise_fn::add;
      add.a = y;
      add.b = reshaped(desc(st.in[2]), {1, y.shape[1], 1, 1});
      add.y = y;
      kernel(add);
    }
  } else if (t == "ConvGrad") {
    // dX and dW are the convolution's two backward kernels; dB sums dY over N, H and W.
    const tensor_desc dy = desc(st.in[0]), x = desc(st.in[1]), w = desc(st.in[2]);
    const auto stride = two(n.attrs.get_ints("strides"), {1, 1});
    const auto dil = two(n.attrs.get_ints("dilations"), {1, 1});
    const auto pad = pads_of(n, x.shape, {static_cast<std::int32_t>(w.shape[2]), static_cast<std::int32_t>(w.shape[3])},
                             stride, dil);
    const auto groups = static_cast<std::int32_t>(n.attrs.get_int("group", 1));
    // An output left out launches nothing: the first convolution's dX is a gradient of the data.
    if (st.out[0] >= 0)
      kernel(kernels::conv2d_backward_data{dy, w, desc(st.out[0]), stride, pad, dil, groups,
                                           st.relu_mask >= 0 ? desc(st.relu_mask) : tensor_desc{}});
    if (st.out[1] >= 0) kernel(kernels::conv2d_backward_weight{x, dy, desc(st.out[1]), stride, pad, dil, groups});
    if (st.out.size() > 2 && st.out[2] >= 0) {
      kernels::reduce r{};
      r.fn = kernels::reduce_fn::sum;
      r.x = dy;
      r.y = desc(st.out[2]);
      r.axes_mask = 0b1101;
      kernel(r);
    }
  } else if (t == "MatMul" || t == "Gemm") {
    tensor_desc a = desc(st.in[0]), b = desc(st.in[1]), c = y;
    kernels::matmul m{};
    if (t == "Gemm") {
      m.trans_a = n.attrs.get_int("transA", 0) != 0;
      m.trans_b = n.attrs.get_int("transB", 0) != 0;
      m.alpha = static_cast<float>(n.attrs.get_float("alpha", 1.0));
    } else {
      const auto ra = a.shape.rank(), rb = b.shape.rank();
      if (rb == 2 && ra > 2) {
        // [..., M, K] x [K, N]: the leading dimensions are rows.
        a.shape = {a.shape.elements() / a.shape[ra - 1], a.shape[ra - 1]};
        c.shape = {c.shape.elements() / c.shape[c.shape.rank() - 1], c.shape[c.shape.rank() - 1]};
      } else if (ra > 3) {
        std::int64_t batch = 1;
        for (std::size_t i = 0; i + 2 < ra; ++i) batch *= a.shape[i];
        a.shape = {batch, a.shape[ra - 2], a.shape[ra - 1]};
        b.shape = {batch, b.shape[rb - 2], b.shape[rb - 1]};
        c.shape = {batch, c.shape[ra - 2], c.shape[ra - 1]};
      }
    }
    m.a = a;
    m.b = b;
    m.c = c;
    if (t == "Gemm" && n.inputs.size() > 2 && st.in[2] >= 0) m.bias = desc(st.in[2]);
    if (st.residual >= 0) m.residual = reshaped(desc(st.residual), c.shape);
    if (st.relu_after) m.act = kernels::activation::relu;
    kernel(m);
  } else if (t == "Max" || t == "Min") {
    // Folded pairwise into y; one input is max(x, x) = x.
    const auto f = t == "Max" ? kernels::eltwise_fn::max : kernels::eltwise_fn::min;
    const std::size_t n_in = n.inputs.size();
    kernel(kernels::elementwise{f, desc(st.in[0]), desc(st.in[n_in > 1 ? 1 : 0]), y});
    for (std::size_t i = 2; i < n_in; ++i) kernel(kernels::elementwise{f, y, desc(st.in[i]), y});
  } else if (const auto e = graph_ops::find_eltwise(t); e && e->binary) {
    kernel(kernels::elementwise{e->fn, desc(st.in[0]), desc(st.in[1]), y});
  } else if (e && !e->binary) {
    const auto [alpha, beta] =
        graph_ops::eltwise_params(n, e->fn, scalar_input(st, values, 1), scalar_input(st, values, 2));
    kernel(kernels::elementwise{e->fn, desc(st.in[0]), {}, y, alpha, beta});
  } else if (t == "SGDUpdate") {
    // y = param, then the update in place on y.
    const tensor_desc w = desc(st.in[0]);
    if (w.data && y.data) out.push_back({std::nullopt, copy_task{y.data, w.data, w.bytes()}});
    kernels::sgd_update u{};
    u.param = y;
    u.grad = desc(st.in[1]);
    u.lr = static_cast<float>(n.attrs.get_float("lr", 0.01));
    kernel(u);
  } else if (t == "BatchNormalization") {
    kernels::batchnorm b{};
    b.x = desc(st.in[0]);
    b.gamma = desc(st.in[1]);
    b.beta = desc(st.in[2]);
    b.running_mean = desc(st.in[3]);
    b.running_var = desc(st.in[4]);
    b.y = y;
    b.training = false;
    b.eps = static_cast<float>(n.attrs.get_float("epsilon", 1e-5));
    kernel(b);
  } else if (t == "BatchNormInternal") {
    // The running statistics are new tensors: the inputs' values, then updated in place by the
    // kernel (ONNX's momentum weighs the old value, the kernel's the batch's).
    kernels::batchnorm b{};
    b.x = desc(st.in[0]);
    b.gamma = desc(st.in[1]);
    b.beta = desc(st.in[2]);
    b.y = y;
    b.running_mean = desc(st.out[1]);
    b.running_var = desc(st.out[2]);
    b.saved_mean = desc(st.out[3]);
    b.saved_invstd = desc(st.out[4]);
    for (std::size_t k = 1; k < 3; ++k) {
      const tensor_desc from = desc(st.in[2 + k]), to = desc(st.out[k]);
      if (from.data && to.data) out.push_back({std::nullopt, copy_task{to.data, from.data, from.bytes()}});
    }
    b.training = true;
    b.eps = static_cast<float>(n.attrs.get_float("epsilon", 1e-5));
    b.momentum = static_cast<float>(1.0 - n.attrs.get_float("momentum", 0.9));
    kernel(b);
  } else if (t == "BatchNormalizationGrad") {
    kernels::batchnorm_backward b{};
    b.dy = desc(st.in[0]);
    b.x = desc(st.in[1]);
    b.gamma = desc(st.in[2]);
    b.saved_mean = desc(st.in[3]);
    b.saved_invstd = desc(st.in[4]);
    // An output left out is an absent operand: the kernel skips dX's pass when dX is not
    // wanted, and writes no dscale or dbias it was not given (the sums dX needs stay inside it).
    b.dx = y;
    if (st.out.size() > 1) b.dgamma = desc(st.out[1]);
    if (st.out.size() > 2) b.dbeta = desc(st.out[2]);
    kernel(b);
  } else if (t == "LayerNormalization") {
    kernels::layernorm l{};
    l.x = desc(st.in[0]);
    l.gamma = desc(st.in[1]);
    if (st.in.size() > 2) l.beta = desc(st.in[2]);
    l.y = y;
    l.axis = static_cast<std::int32_t>(n.attrs.get_int("axis", -1));
    l.eps = static_cast<float>(n.attrs.get_float("epsilon", 1e-5));
    kernel(l);
  } else if (t == "MaxPoolGrad" || t == "AveragePoolGrad" || t == "GlobalAveragePoolGrad") {
    const value_info dyi{n.inputs[0], desc(st.in[0]).shape, desc(st.in[0]).type};
    const value_info xi{n.inputs[1], desc(st.in[1]).shape, desc(st.in[1]).type};
    const std::array<const value_info*, 2> in{&dyi, &xi};
    shape fwd;
    kernels::pool2d_backward p = graph_ops::pool_backward_spec(n, in, fwd);
    p.dy = desc(st.in[0]);
    if (p.mode == kernels::pool_mode::max) p.x = desc(st.in[1]);
    p.dx = y;
    kernel(p);
  } else if (t == "MaxPool" || t == "AveragePool" || t == "GlobalAveragePool") {
    // The windows inference checked, computed again from the same attributes.
    const value_info xi{n.inputs[0], desc(st.in[0]).shape, desc(st.in[0]).type};
    const std::array<const value_info*, 1> in{&xi};
    shape out;
    kernels::pool2d p = graph_ops::pool_spec(n, in, out);
    p.x = desc(st.in[0]);
    p.y = y;
    if (st.out.size() > 1) p.indices = desc(st.out[1]);
    kernel(p);
  } else if (t == "LRN") {
    kernel(kernels::lrn{desc(st.in[0]), y, static_cast<std::int32_t>(n.attrs.get_int("size", 1)),
                        static_cast<float>(n.attrs.get_float("alpha", 1e-4)),
                        static_cast<float>(n.attrs.get_float("beta", 0.75)),
                        static_cast<float>(n.attrs.get_float("bias", 1.0))});
  } else if (t == "Softmax" || t == "LogSoftmax") {
    kernel(kernels::softmax{desc(st.in[0]), y, static_cast<std::int32_t>(n.attrs.get_int("axis", -1))});
    if (t == "LogSoftmax") kernel(kernels::elementwise{kernels::eltwise_fn::log, y, {}, y});
  } else if (t == "Transpose") {
    kernels::transpose tr{desc(st.in[0]), y};
    ints perm = n.attrs.get_ints("perm");
    if (perm.empty())
      for (std::size_t i = tr.x.shape.rank(); i-- > 0;) perm.push_back(static_cast<std::int64_t>(i));
    for (std::size_t i = 0; i < perm.size(); ++i) tr.perm[i] = static_cast<std::uint8_t>(perm[i]);
    kernel(tr);
  } else if (t == "Slice" || t == "Split" || t == "Pad" || t == "Tile" || t == "Expand" || t == "Trilu" ||
             t == "Resize" || t == "Upsample" || t == "GridSample" || t == "TopK" || t == "DFT" || t == "STFT" ||
             t == "RoiAlign") {
    // The windows (the border, the repeats, the resampling, the sampling, the selection)
    // inference checked, computed again from the same constants; each output is one kernel (data
    // given or not: a timing-only run launches the same kernels).
    std::vector<value_info> infos;
    std::vector<const tensor*> constants;
    for (int v : st.in) {
      const cvalue* c = v < 0 ? nullptr : &values[static_cast<std::size_t>(v)];
      infos.push_back(c ? value_info{c->name, c->shape, c->type, c->kind, -1, true} : value_info{});
      constants.push_back(c ? c->host : nullptr);
    }
    std::vector<const value_info*> in;
    for (std::size_t i = 0; i < st.in.size(); ++i) in.push_back(st.in[i] < 0 ? nullptr : &infos[i]);
    const tensor_desc x = desc(st.in[0]);
    if (t == "Trilu") {
      kernel(kernels::trilu{x, y, graph_ops::trilu_k(n, in, constants), n.attrs.get_int("upper", 1) != 0});
    } else if (t == "Tile" || t == "Expand") {
      // x aligned to y's rank (Expand's lower-rank input gains leading 1s): then both are a
      // repeat of x, y[i] = x[i mod x's extents].
      shape aligned;
      for (std::size_t d = x.shape.rank(); d < y.shape.rank(); ++d) aligned.push_back(1);
      for (const std::int64_t d : x.shape) aligned.push_back(d);
      kernel(kernels::tile{reshaped(x, aligned), y});
    } else if (t == "Resize" || t == "Upsample") {
      kernels::resize r = graph_ops::resize_spec(n, in, constants).op;
      r.x = x;
      r.y = y;
      kernel(r);
    } else if (t == "DFT" || t == "STFT") {
      shape out;
      kernels::dft d = graph_ops::dft_spec(n, in, constants, out);
      d.x = x;
      d.y = y;
      if (t == "STFT" && n.inputs.size() > 2 && st.in[2] >= 0) d.window = desc(st.in[2]);
      kernel(d);
    } else if (t == "GridSample") {
      shape out;
      kernels::grid_sample k = graph_ops::grid_sample_spec(n, in, out);
      k.x = x;
      k.grid = desc(st.in[1]);
      k.y = y;
      kernel(k);
    } else if (t == "RoiAlign") {
      shape out;
      kernels::roi_align k = graph_ops::roi_align_spec(n, in, out);
      k.x = x;
      k.rois = desc(st.in[1]);
      k.batch_indices = desc(st.in[2]);
      k.y = y;
      kernel(k);
    } else if (t == "TopK") {
      kernels::top_k k = graph_ops::top_k_spec(n, in, constants);
      k.x = x;
      k.values = y;
      k.indices = desc(st.out[1]);
      kernel(k);
    } else if (t == "Pad") {
      const graph_ops::padding p = graph_ops::pad_spec(n, in, constants);
      kernel(kernels::pad{x, y, p.begins, p.value, p.mode});
    } else if (t == "Slice") {
      kernel(slice_of(x, y, graph_ops::slice_window(n, in, constants)));
    } else {
      const auto windows = graph_ops::split_windows(n, in, constants);
      for (std::size_t k = 0; k < windows.size() && k < st.out.size(); ++k)
        if (windows[k].dims.elements() > 0) kernel(slice_of(x, desc(st.out[k]), windows[k]));  // empty: nothing
    }
  } else if (t == "Gather") {
    kernels::gather g{exact(st.in[0]), exact(st.in[1]), exact(st.out[0])};
    std::int64_t axis = n.attrs.get_int("axis", 0);
    if (axis < 0) axis += static_cast<std::int64_t>(g.data.shape.rank());
    g.axis = static_cast<std::int32_t>(axis);
    kernel(g);
  } else if (t == "GatherElements") {
    std::int64_t axis = n.attrs.get_int("axis", 0);
    const tensor_desc data = desc(st.in[0]);
    if (axis < 0) axis += static_cast<std::int64_t>(data.shape.rank());
    kernel(kernels::gather_elements{data, desc(st.in[1]), y, static_cast<std::int32_t>(axis)});
  } else if (t == "ScatterND") {
    kernel(kernels::scatter_nd{desc(st.in[0]), desc(st.in[1]), exact(st.in[2]), y, graph_ops::scatter_reduction_of(n)});
  } else if (t == "ScatterElements" || t == "Scatter") {
    std::int64_t axis = n.attrs.get_int("axis", 0);
    const tensor_desc data = desc(st.in[0]);
    if (axis < 0) axis += static_cast<std::int64_t>(data.shape.rank());
    kernel(kernels::scatter_elements{data, desc(st.in[1]), desc(st.in[2]), y, static_cast<std::int32_t>(axis),
                                     graph_ops::scatter_reduction_of(n)});
  } else if (t == "GatherND") {
    kernel(kernels::gather_nd{desc(st.in[0]), desc(st.in[1]), exact(st.out[0]),
                              static_cast<std::int32_t>(n.attrs.get_int("batch_dims", 0))});
  } else if (t == "NegativeLogLikelihoodLoss") {
    // A reduced loss is an ONNX scalar: the kernel writes it as one element.
    kernels::nll_loss k{desc(st.in[0]), desc(st.in[1])};
    if (n.inputs.size() > 2 && st.in[2] >= 0) k.weight = desc(st.in[2]);
    k.reduction = graph_ops::loss_reduction_of(n);
    k.y = k.reduction == kernels::loss_reduction::none ? y : reshaped(y, shape{1});
    k.has_ignore_index = n.attrs.has("ignore_index");
    k.ignore_index = n.attrs.get_int("ignore_index", 0);
    kernel(k);
  } else if (const auto f = graph_ops::compare_of(t)) {
    kernel(kernels::compare{*f, desc(st.in[0]), desc(st.in[1]), y});
  } else if (const auto l = graph_ops::logical_of(t)) {
    kernel(kernels::logical{*l, desc(st.in[0]), *l == kernels::logical_fn::not_ ? tensor_desc{} : desc(st.in[1]), y});
  } else if (t == "Where") {
    kernel(kernels::where{desc(st.in[0]), desc(st.in[1]), desc(st.in[2]), y});
  } else if (t == "QuantizeLinear" || t == "DequantizeLinear") {
    const bool quant = t == "QuantizeLinear";
    kernels::quantize q{quant ? kernels::quantize_fn::quantize : kernels::quantize_fn::dequantize, desc(st.in[0]),
                        desc(st.in[1]), st.in.size() > 2 ? desc(st.in[2]) : tensor_desc{}, y};
    // Inference checked the axis; a per-tensor scale ignores it.
    if (q.scale.shape.elements() != 1) {
      const auto r = static_cast<std::int64_t>(q.x.shape.rank());
      const std::int64_t a = n.attrs.get_int("axis", 1);
      q.axis = static_cast<std::int32_t>(a < 0 ? a + r : a);
    }
    kernel(q);
  } else if (t == "IsNaN" || t == "IsInf") {
    kernels::float_class f{t == "IsNaN" ? kernels::float_class_fn::is_nan : kernels::float_class_fn::is_inf,
                           desc(st.in[0]), y};
    f.detect_negative = n.attrs.get_int("detect_negative", 1) != 0;
    f.detect_positive = n.attrs.get_int("detect_positive", 1) != 0;
    kernel(f);
  } else if (t == "Cast" || t == "CastLike") {
    // ONNX's reference implementation converts with NumPy's astype: floats truncate toward zero.
    kernel(kernels::cast{desc(st.in[0]), y, kernels::round_mode::trunc});
  } else if (t == "ArgMax" || t == "ArgMin") {
    kernels::reduce r{};
    r.fn = t == "ArgMax" ? kernels::reduce_fn::argmax : kernels::reduce_fn::argmin;
    r.x = desc(st.in[0]);
    r.y = y;
    std::int64_t axis = n.attrs.get_int("axis", 0);
    if (axis < 0) axis += static_cast<std::int64_t>(r.x.shape.rank());
    r.axes_mask = 1u << axis;
    r.keep_dims = n.attrs.get_int("keepdims", 1) != 0;
    r.select_last = n.attrs.get_int("select_last_index", 0) != 0;
    // A reduction to nothing (rank 1, no keepdims) is one element to the kernels.
    if (!r.keep_dims && r.x.shape.rank() == 1) r.y.shape = shape{1};
    kernel(r);
  } else if (t == "ReduceMean" || t == "ReduceSum" || t == "ReduceMax" || t == "ReduceMin" || t == "ReduceProd") {
    kernels::reduce r{};
    r.fn = t == "ReduceMean"   ? kernels::reduce_fn::mean
           : t == "ReduceSum"  ? kernels::reduce_fn::sum
           : t == "ReduceMax"  ? kernels::reduce_fn::max
           : t == "ReduceProd" ? kernels::reduce_fn::prod
                               : kernels::reduce_fn::min;
    r.x = desc(st.in[0]);
    r.y = y;
    ints axes = n.attrs.get_ints("axes");
    // Axes given as a constant input were folded into the output shape: recover them.
    r.keep_dims = n.attrs.get_int("keepdims", 1) != 0;
    const auto rank = r.x.shape.rank();
    if (r.keep_dims) {
      for (std::size_t d = 0; d < rank; ++d)
        if (r.y.shape[d] == 1 && r.x.shape[d] != 1) r.axes_mask |= 1u << d;
      if (axes.empty() && r.axes_mask == 0 && r.y.shape.elements() == 1) r.axes_mask = (1u << rank) - 1;
    }
    if (!axes.empty() || !r.keep_dims) {
      r.axes_mask = 0;
      if (axes.empty() && !(st.in.size() > 1 && st.in[1] >= 0)) r.axes_mask = (1u << rank) - 1;
      for (auto a : axes) r.axes_mask |= 1u << (a < 0 ? a + static_cast<std::int64_t>(rank) : a);
      if (axes.empty() && st.in.size() > 1 && st.in[1] >= 0) {
        const cvalue& ax = values[static_cast<std::size_t>(st.in[1])];
        if (ax.host && ax.host->is_host())
          for (std::int64_t i = 0; i < ax.host->elements(); ++i) {
            auto a = ax.host->get_int(i);
            r.axes_mask |= 1u << (a < 0 ? a + static_cast<std::int64_t>(rank) : a);
          }
        // An axes input of no elements is ONNX's "reduce every axis" (noop_with_empty_axes = 1
        // never reaches here: it is an Identity).
        if (ax.host && ax.host->is_host() && ax.host->elements() == 0) r.axes_mask = (1u << rank) - 1;
      }
    }
    kernel(r);
  } else if (t == "Mod") {
    const auto f = n.attrs.get_int("fmod", 0) != 0 ? kernels::eltwise_fn::fmod : kernels::eltwise_fn::mod;
    kernel(kernels::elementwise{f, desc(st.in[0]), desc(st.in[1]), y});
  } else if (t == "BitShift") {
    const auto f = n.attrs.get_string("direction", "") == "LEFT" ? kernels::eltwise_fn::shift_left
                                                                 : kernels::eltwise_fn::shift_right;
    kernel(kernels::elementwise{f, desc(st.in[0]), desc(st.in[1]), y});
  } else if (t == "CumSum") {
    // The axis is a constant (checked when the node was added).
    const cvalue& ax = values[static_cast<std::size_t>(st.in[1])];
    if (!ax.host || !ax.host->is_host())
      throw graph_error(make_error_code(errc::not_supported), n.name, n.inputs[1],
                        "CumSum: the axis is not a constant");
    kernels::cumsum c{desc(st.in[0]), y};
    c.axis = static_cast<std::int32_t>(ax.host->get_int(0));
    c.exclusive = n.attrs.get_int("exclusive", 0) != 0;
    c.reverse = n.attrs.get_int("reverse", 0) != 0;
    kernel(c);
  } else if (t == "Recurrent") {
    // RNN, GRU and LSTM: the initial states are copied into Y_h and Y_c, which the kernel reads
    // as its starting state and overwrites with the last one.
    std::vector<value_info> infos;
    for (int v : st.in) {
      const cvalue* c = v < 0 ? nullptr : &values[static_cast<std::size_t>(v)];
      infos.push_back(c ? value_info{c->name, c->shape, c->type, c->kind, -1, true} : value_info{});
    }
    std::vector<const value_info*> in;
    for (std::size_t i = 0; i < st.in.size(); ++i) in.push_back(st.in[i] < 0 ? nullptr : &infos[i]);
    kernels::recurrent k = graph_ops::recurrent_spec(n, in).op;
    const auto input = [&](std::size_t i) {
      return i < st.in.size() && st.in[i] >= 0 ? desc(st.in[i]) : tensor_desc{};
    };
    k.x = input(0);
    k.w = input(1);
    k.r = input(2);
    k.b = input(3);
    k.sequence_lens = input(4);
    k.y = y;
    k.y_h = desc(st.out[1]);
    if (k.cell == kernels::rnn_cell::lstm) k.y_c = desc(st.out[2]);
    for (std::size_t i = 5; i < 7; ++i) {
      const tensor_desc from = input(i), to = i == 5 ? k.y_h : k.y_c;
      if (from.data && to.data) out.push_back({std::nullopt, copy_task{to.data, from.data, from.bytes()}});
    }
    kernel(k);
  } else if (t == "Concat") {
    // Concatenation is copying: each input's rows go to their place in every outer slice.
    const cvalue& yv = values[static_cast<std::size_t>(st.out[0])];
    const auto rank = static_cast<std::int64_t>(yv.shape.rank());
    std::int64_t axis = n.attrs.get_int("axis", 0);
    if (axis < 0) axis += rank;
    std::int64_t outer = 1;
    for (std::int64_t d = 0; d < axis; ++d) outer *= yv.shape[static_cast<std::size_t>(d)];
    const std::size_t esize = size_of(yv.type);
    const std::size_t row = static_cast<std::size_t>(yv.shape.elements() / std::max<std::int64_t>(1, outer)) * esize;
    std::size_t at = 0;
    for (int v : st.in) {
      const cvalue& xv = values[static_cast<std::size_t>(v)];
      if (xv.shape.elements() == 0) continue;  // numpy.concatenate: an empty input adds nothing
      const std::size_t xrow = static_cast<std::size_t>(xv.shape.elements() / std::max<std::int64_t>(1, outer)) * esize;
      void* src = ptr(v);
      void* dst = ptr(st.out[0]);
      if (!src || !dst) {
        // Timing-only: the same bytes through the vector unit as an identity transpose.
        kernel(kernels::transpose{desc(v), reshaped(desc(v), xv.shape)});
      } else {
        for (std::int64_t o = 0; o < outer; ++o)
          out.push_back(
              {std::nullopt, copy_task{static_cast<std::byte*>(dst) + static_cast<std::size_t>(o) * row + at,
                                       static_cast<const std::byte*>(src) + static_cast<std::size_t>(o) * xrow, xrow}});
      }
      at += xrow;
    }
  } else if (t == "Det") {
    // One matrix's determinant is a scalar: y as the rank-0 tensor it is.
    kernel(kernels::det{desc(st.in[0]), exact(st.out[0])});
  } else if (t == "ReverseSequence") {
    kernel(kernels::reverse_sequence{desc(st.in[0]), desc(st.in[1]), y,
                                     static_cast<std::int32_t>(n.attrs.get_int("batch_axis", 1)),
                                     static_cast<std::int32_t>(n.attrs.get_int("time_axis", 0))});
  }
  return out;
}

}  // namespace npurt

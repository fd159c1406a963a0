// compile(): rewrites (precision casts, BatchNorm folding), in-place and view decisions, the
// activation plan and the schedule (see graph/session.hpp).
#include "compiled.hpp"
#include "eltwise.hpp"
#include "window.hpp"

#include <npurt/memplan.hpp>

#include <range/v3/algorithm/all_of.hpp>
#include <range/v3/range/conversion.hpp>
#include <range/v3/view/chunk.hpp>
#include <range/v3/view/enumerate.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string_view>

namespace npurt {

namespace {

bool is_view(const std::string& t) {
  return t == "Reshape" || t == "Flatten" || t == "Identity" || t == "Dropout";  // Dropout: inference
}
bool is_unary_eltwise(const std::string& t) {
  const auto e = graph_ops::find_eltwise(t);
  return e && !e->binary;
}
bool is_binary_eltwise(const std::string& t) {
  const auto e = graph_ops::find_eltwise(t);
  return e && e->binary && t != "Max" && t != "Min";  // Max/Min may take more than two inputs
}
bool is_cube(const std::string& t) { return t == "Conv" || t == "MatMul" || t == "Gemm"; }

dtype compute_type(precision p) {
  switch (p) {
    case precision::fp16: return dtype::f16;
    case precision::bf16: return dtype::bf16;
    case precision::mixed: return dtype::f16;
    case precision::fp32: break;
  }
  return dtype::f32;
}

tensor converted(const tensor& t, dtype to) {
  if (!t.is_host()) return tensor::timing_only(t.shape(), to, t.format());
  tensor r(t.shape(), to, t.format());
  for (std::int64_t i = 0; i < t.elements(); ++i) r.set(i, t.get(i));
  return r;
}

// Outputs that are constants (nothing computes them) are carried over too.
void set_outputs(const graph& src, graph& g) {
  for (const auto& o : src.outputs()) {
    if (const tensor* c = src.constant(o); c && !g.find(o))
      g.add_constant(o, c->is_host() ? c->clone() : tensor::timing_only(c->shape(), c->type(), c->format()));
    g.set_output(o);
  }
}

// A node's first output it names: an operator may leave optional outputs out ("", ConvGrad's dX).
const std::string& first_output(const node& n) {
  for (const auto& o : n.outputs)
    if (!o.empty()) return o;
  return n.outputs.front();
}

// Number of nodes reading each tensor (graph outputs count as a reader).
std::map<std::string, int, std::less<>> use_counts(const graph& g) {
  std::map<std::string, int, std::less<>> uses;
  for (const auto& n : g.nodes())
    for (const auto& in : n.inputs)
      if (!in.empty()) ++uses[in];
  for (const auto& o : g.outputs()) ++uses[o];
  return uses;
}

// Whether the precision rewrite moves a value of dtype t into the compute type: f32, f16 and bf16
// do. f64 stays f64, as integers stay integers: a model that asks for float64 asks for its
// precision (a CumSum of float64 or a float64 reference computation), which f16's 11 bits would
// lose without a trace.
bool lowers(dtype t) noexcept { return is_float(t) && t != dtype::f64; }

// The precision rewrite: fp16/bf16 compute everything floating in the compute type, mixed only
// the cube operators; casts are inserted at the boundaries so feeds and outputs keep their types.
graph rewrite_precision(graph& src, precision p, std::size_t& casts, refit_log& log) {
  graph g(src.name());
  const dtype cd = compute_type(p);
  std::map<std::string, std::string, std::less<>> low;  // name -> its compute-type copy
  auto cast_node = [&](const std::string& from, const std::string& to, dtype t) {
    g.add_node("Cast", to + "::cast", {from}, {to}, {{"to", onnx_dtype_code(t)}});
    ++casts;
  };
  for (const auto& in : src.inputs()) {
    const auto& v = src.value(in);
    g.add_input(in, v.shape, v.type);
  }
  std::map<std::string, bool, std::less<>> is_const;
  for (const auto& n : src.nodes())
    for (const auto& in : n.inputs)
      if (const tensor* c = src.constant(in); c && !is_const.count(in)) {
        is_const[in] = true;
        g.add_constant(in, c->is_host() ? c->clone() : tensor::timing_only(c->shape(), c->type(), c->format()));
      }
  // The compute-type name of a tensor (a cast or converted constant, created once).
  auto lowered = [&](const std::string& name) -> std::string {
    if (name.empty()) return name;
    if (auto it = low.find(name); it != low.end()) return it->second;
    const auto& v = g.value(name);
    if (!lowers(v.type) || v.type == cd) return name;
    std::string l = name + "::" + std::string(to_string(cd));
    if (const tensor* c = g.constant(name)) {
      g.add_constant(l, converted(*c, cd));
      if (const auto d = log.derived.find(name); d != log.derived.end()) log.derived[l] = d->second;
    } else {
      cast_node(name, l, cd);
    }
    low[name] = l;
    return l;
  };
  const std::set<std::string> outs(src.outputs().begin(), src.outputs().end());
  for (auto i : src.topological_order()) {
    const node& n = src.nodes()[i];
    const bool lower = p != precision::mixed || is_cube(n.type);
    std::vector<std::string> ins;
    for (std::size_t k = 0; k < n.inputs.size(); ++k) {
      // Shape and axes inputs stay integers; BN/LN parameters follow x. Resize's roi and scales
      // are float but decide the output's shape: rounded, a scale could change an extent.
      const bool shape_input = k > 0 && (n.type == "Resize" || n.type == "Upsample");
      // GridSample's grid holds positions, not values: f16 keeps 11 bits of a coordinate in
      // [-1, 1], off by up to an eighth of an element across 1,024 of them, enough to make nearest pick
      // another one. The kernel reads a grid of any float dtype, so one the graph has in float
      // (an input, a constant) is read as it is, with no cast; one computed in the compute type
      // is read there (a cast back would restore no bits).
      const bool float_grid = k == 1 && n.type == "GridSample" && g.find(n.inputs[k]) != nullptr;
      // QuantizeLinear's scale sets where the rounding steps fall: in f16 a scale keeps 11 bits and
      // x / scale could round to another integer. The kernel reads a scale of any float dtype.
      // A scale the graph holds in float (a constant, an input, a cast-back output) is read as it
      // is; one computed in the compute type only exists there.
      // Requantize's multiplier likewise (the product's rounding steps).
      const bool quant_scale =
          k == 1 && (n.type == "QuantizeLinear" || n.type == "Requantize") && g.find(n.inputs[k]) != nullptr;
      // A Cast out of the float types (to an integer, bool or float64) of a value the graph holds
      // in float reads it as it is: through f16, a float index or count of 3001 would become 3000
      // (OneHot's float indices are such a Cast) with nothing to say so.
      const bool exact_cast =
          n.type == "Cast" && !lowers(src.value(n.outputs[0]).type) && g.find(n.inputs[k]) != nullptr;
      ins.push_back(lower && !shape_input && !float_grid && !quant_scale && !exact_cast ? lowered(n.inputs[k])
                                                                                        : n.inputs[k]);
    }
    if (n.type == "Cast") {
      g.add_node(n.type, n.name, ins, n.outputs, n.attrs);
      continue;
    }
    const bool float_out = lowers(src.value(first_output(n)).type);
    if (!lower || !float_out || cd == dtype::f32) {
      // Mixed: a non-cube op reads fp32 copies of fp16 tensors.
      if (p == precision::mixed) {
        for (auto& in : ins)
          if (!in.empty() && g.value(in).type == cd && is_float(cd) && cd != dtype::f32) {
            std::string up = in + "::f32";
            if (!g.find(up)) cast_node(in, up, dtype::f32);
            in = up;
          }
      }
      g.add_node(n.type, n.name, ins, n.outputs, n.attrs);
      continue;
    }
    // Computed in cd: outputs carry the compute type under a new name and are cast back to the
    // original name when something downstream needs the original type. An integer output (TopK's
    // indices) is no float to lower: it keeps its name and its type.
    std::vector<std::string> lowouts;
    for (const auto& o : n.outputs)
      lowouts.push_back(!o.empty() && lowers(src.value(o).type) ? o + "::" + std::string(to_string(cd)) : o);
    g.add_node(n.type, n.name, ins, lowouts, n.attrs);
    for (std::size_t k = 0; k < n.outputs.size(); ++k) {
      if (lowouts[k] == n.outputs[k]) continue;
      low[n.outputs[k]] = lowouts[k];
      if (p == precision::mixed) cast_node(lowouts[k], n.outputs[k], dtype::f32);
      else if (outs.count(n.outputs[k])) cast_node(lowouts[k], n.outputs[k], src.value(n.outputs[k]).type);
    }
  }
  set_outputs(src, g);
  g.validate();
  return g;
}

// Level 2: a BatchNormalization whose input is a Conv's output nothing else reads, with constant
// parameters, is folded into the Conv's weights and bias:
//   w' = w * gamma / sqrt(var + eps),  b' = (b - mean) * gamma / sqrt(var + eps) + beta.
graph fold_batchnorm(graph& src, std::size_t& fused, refit_log& log) {
  const auto uses = use_counts(src);
  std::map<std::string, std::size_t, std::less<>> bn_of_conv;  // conv output -> BN node
  for (std::size_t i = 0; i < src.nodes().size(); ++i) {
    const node& bn = src.nodes()[i];
    if (bn.type != "BatchNormalization" || bn.inputs.size() < 5) continue;
    const value_info* x = src.find(bn.inputs[0]);
    if (!x || x->producer < 0) continue;
    const node& conv = src.nodes()[static_cast<std::size_t>(x->producer)];
    if (conv.type != "Conv" || uses.at(bn.inputs[0]) != 1) continue;
    bool consts = src.constant(conv.inputs[1]) != nullptr;
    if (conv.inputs.size() > 2 && !conv.inputs[2].empty()) consts = consts && src.constant(conv.inputs[2]);
    for (std::size_t k = 1; k < 5; ++k) consts = consts && src.constant(bn.inputs[k]);
    if (consts) bn_of_conv[bn.inputs[0]] = i;
  }
  if (bn_of_conv.empty()) return std::move(src);
  graph g(src.name());
  for (const auto& in : src.inputs()) g.add_input(in, src.value(in).shape, src.value(in).type);
  std::set<std::string> added;
  auto add_const = [&](const std::string& name) {
    if (name.empty() || added.count(name) || !src.constant(name)) return;
    added.insert(name);
    const tensor* c = src.constant(name);
    g.add_constant(name, c->is_host() ? c->clone() : tensor::timing_only(c->shape(), c->type(), c->format()));
  };
  std::set<std::size_t> skip;
  for (const auto& [out, bn] : bn_of_conv) skip.insert(bn);
  for (auto i : src.topological_order()) {
    if (skip.count(i)) continue;
    const node& n = src.nodes()[i];
    auto it = n.type == "Conv" ? bn_of_conv.find(n.outputs[0]) : bn_of_conv.end();
    if (it == bn_of_conv.end()) {
      for (const auto& in : n.inputs) add_const(in);
      g.add_node(n.type, n.name, n.inputs, n.outputs, n.attrs);
      continue;
    }
    const node& bn = src.nodes()[it->second];
    const tensor& w = *src.constant(n.inputs[1]);
    const tensor* b = n.inputs.size() > 2 && !n.inputs[2].empty() ? src.constant(n.inputs[2]) : nullptr;
    const tensor& gamma = *src.constant(bn.inputs[1]);
    const tensor& beta = *src.constant(bn.inputs[2]);
    const tensor& mean = *src.constant(bn.inputs[3]);
    const tensor& var = *src.constant(bn.inputs[4]);
    const double eps = bn.attrs.get_float("epsilon", 1e-5);
    const std::int64_t m = w.shape()[0];
    const bool data =
        w.is_host() && gamma.is_host() && beta.is_host() && mean.is_host() && var.is_host() && (!b || b->is_host());
    tensor wf = data ? tensor(w.shape(), w.type()) : tensor::timing_only(w.shape(), w.type());
    tensor bf = data ? tensor({m}, w.type()) : tensor::timing_only({m}, w.type());
    if (data) {
      const std::int64_t per = w.elements() / m;
      for (std::int64_t c = 0; c < m; ++c) {
        const double s = gamma.get(c) / std::sqrt(var.get(c) + eps);
        for (std::int64_t k = 0; k < per; ++k) wf.set(c * per + k, w.get(c * per + k) * s);
        bf.set(c, ((b ? b->get(c) : 0.0) - mean.get(c)) * s + beta.get(c));
      }
    }
    // The folded values are products of several constants: none of them can be set alone.
    for (const std::string* in :
         {&n.inputs[1], b ? &n.inputs[2] : nullptr, &bn.inputs[1], &bn.inputs[2], &bn.inputs[3], &bn.inputs[4]})
      if (in)
        if (const std::string from = log.source_of(*in); !from.empty())
          log.consumed.emplace(from, "folded with BatchNormalization '" + bn.name + "' into Conv '" + n.name +
                                         "' (optimization_level 2 and above fold it; compile at level 1 to set it)");
    const std::string wn = n.name + "::folded_w", bn_name = n.name + "::folded_b";
    g.add_constant(wn, std::move(wf));
    g.add_constant(bn_name, std::move(bf));
    add_const(n.inputs[0]);
    g.add_node("Conv", n.name, {n.inputs[0], wn, bn_name}, bn.outputs, n.attrs);
    ++fused;
  }
  set_outputs(src, g);
  g.validate();
  return g;
}

// A rewrite's new graph: src's name and inputs, its nodes still to add.
graph with_inputs_of(const graph& src) {
  graph g(src.name());
  for (const auto& in : src.inputs()) g.add_input(in, src.value(in).shape, src.value(in).type);
  return g;
}

// The constants n reads that the rewrite has not carried into g yet (`added`).
void carry_constants(const graph& src, graph& g, const node& n, std::set<std::string>& added) {
  for (const auto& in : n.inputs)
    if (const tensor* c = src.constant(in); c && !added.count(in)) {
      added.insert(in);
      g.add_constant(in, c->is_host() ? c->clone() : tensor::timing_only(c->shape(), c->type()));
    }
}

// Gemm's beta scales C; the kernels add C unscaled, so a constant C is scaled here and a computed
// one by a Mul.
graph fold_gemm_beta(graph& src, refit_log& log) {
  bool any = false;
  for (const auto& n : src.nodes())
    if (n.type == "Gemm" && n.inputs.size() > 2 && !n.inputs[2].empty() && n.attrs.get_float("beta", 1.0) != 1.0)
      any = true;
  if (!any) return std::move(src);
  graph g = with_inputs_of(src);
  std::set<std::string> added;
  for (auto i : src.topological_order()) {
    node n = src.nodes()[i];
    carry_constants(src, g, n, added);
    if (n.type == "Gemm" && n.inputs.size() > 2 && !n.inputs[2].empty() && n.attrs.get_float("beta", 1.0) != 1.0) {
      const double beta = n.attrs.get_float("beta", 1.0);
      const tensor* c = src.constant(n.inputs[2]);
      if (!c) {
        // A C known only at run time is scaled by a Mul before the Gemm adds it.
        tensor b(shape{}, src.value(n.inputs[2]).type);
        b.set(0, beta);
        g.add_constant(n.name + "::beta", std::move(b));
        g.add_node("Mul", n.name + "::beta_c", {n.inputs[2], n.name + "::beta"}, {n.name + "::beta_c"}, {});
        n.inputs[2] = n.name + "::beta_c";
        n.attrs.set("beta", 1.0);
        g.add_node(n.type, n.name, n.inputs, n.outputs, n.attrs);
        continue;
      }
      tensor scaled = c->is_host() ? tensor(c->shape(), c->type()) : tensor::timing_only(c->shape(), c->type());
      if (c->is_host())
        for (std::int64_t k = 0; k < c->elements(); ++k) scaled.set(k, beta * c->get(k));
      const std::string name = n.name + "::beta_c";
      g.add_constant(name, std::move(scaled));
      // C is still the user's constant here (no rewrite before this one scales a value).
      if (const auto d = log.derived.find(n.inputs[2]); d != log.derived.end())
        log.derived[name] = {d->second.source, beta};
      n.inputs[2] = name;
      n.attrs.set("beta", 1.0);
    }
    g.add_node(n.type, n.name, n.inputs, n.outputs, n.attrs);
  }
  set_outputs(src, g);
  g.validate();
  return g;
}

bool is_empty(const shape& s) noexcept { return s.elements() == 0; }

// The value a reduction over no elements gives (onnx.ai's Reduce* operators, opset 18 on, which
// numpy's identities match): ReduceSum 0, ReduceProd 1, ReduceMax the least value of the dtype
// (-inf for floats, false for bool), ReduceMin the greatest. ReduceMean is 0 / 0, numpy's NaN
// for floats; for integers the spec leaves it undefined, and so has no value here.
std::optional<double> empty_reduction(std::string_view op, dtype t) noexcept {
  constexpr double inf = std::numeric_limits<double>::infinity();
  if (op == "ReduceSum") return 0.0;
  if (op == "ReduceProd") return 1.0;
  // Stored with saturation: -inf and +inf become an integer dtype's least and greatest values.
  if (op == "ReduceMax") return t == dtype::boolean ? 0.0 : -inf;
  if (op == "ReduceMin") return t == dtype::boolean ? 1.0 : inf;
  if (op == "ReduceMean" && is_float(t)) return std::numeric_limits<double>::quiet_NaN();
  return std::nullopt;
}

// A constant-mode Pad of an empty tensor is its fill value everywhere (numpy.pad); the other modes
// have nothing to repeat or reflect.
std::optional<double> empty_pad(const graph& g, const node& n) {
  if (n.type != "Pad") return std::nullopt;
  std::vector<const value_info*> in;
  std::vector<const tensor*> constants;
  for (const auto& i : n.inputs) {
    in.push_back(i.empty() ? nullptr : &g.value(i));
    constants.push_back(i.empty() ? nullptr : g.constant(i));
  }
  const graph_ops::padding p = graph_ops::pad_spec(n, in, constants);
  if (p.mode != kernels::pad_mode::constant) return std::nullopt;
  return p.value;
}

// Empty tensors (a dimension of 0). Shapes are static, so an operator with an empty operand is
// decided here rather than on the device:
//   - an output that is empty has nothing to compute: the step launches no kernel (lowering);
//   - Concat leaves its empty inputs out (numpy.concatenate);
//   - a reduction over an empty axis is a constant of the reduction's identity, and MatMul or
//     Gemm with an inner dimension of 0 is a constant 0 (numpy.matmul), Gemm's C then added;
//   - any other operator whose empty input would give a non-empty output is refused, naming it.
// So no kernel ever sees an empty tensor, and the kernels' validation keeps refusing one.
graph rewrite_empty(graph& src, refit_log& log) {
  // An empty constant operand after the first is a parameter list (Reshape's shape [] for a
  // scalar, empty axes, Resize's roi or scales left out as opsets 11 and 12 write it), not data.
  // Where one is data (a MatMul's B [0, N], a Concat's input), the first operand is empty too or
  // the output is, and Concat's lowering skips it.
  const auto empty_data = [&](const node& n, std::size_t k) {
    const std::string& i = n.inputs[k];
    if (i.empty() || !is_empty(src.value(i).shape)) return false;
    return k == 0 || !src.constant(i);
  };
  const auto reads_empty = [&](const node& n) {
    for (std::size_t k = 0; k < n.inputs.size(); ++k)
      if (empty_data(n, k)) return true;
    return false;
  };
  const auto writes_only_empty = [&](const node& n) {
    return std::all_of(n.outputs.begin(), n.outputs.end(),
                       [&](const std::string& o) { return o.empty() || is_empty(src.value(o).shape); });
  };
  if (std::none_of(src.nodes().begin(), src.nodes().end(),
                   [&](const node& n) { return reads_empty(n) && !writes_only_empty(n); }))
    return std::move(src);
  graph g = with_inputs_of(src);
  std::set<std::string> added;
  for (auto i : src.topological_order()) {
    node n = src.nodes()[i];
    carry_constants(src, g, n, added);
    if (!reads_empty(n) || writes_only_empty(n)) {
      g.add_node(n.type, n.name, n.inputs, n.outputs, n.attrs);
      continue;
    }
    // What replaces the operator is computed here from its operands (a Pad's fill value): only
    // Gemm's C stays an operand of what replaces it.
    for (std::size_t k = 0; k < n.inputs.size(); ++k)
      if (const std::string from = log.source_of(n.inputs[k]);
          !from.empty() && n.type != "Concat" && !(n.type == "Gemm" && k == 2))
        log.consumed.emplace(from, "read by " + n.type + " '" + n.name +
                                       "', which compile replaced by its value (it has an empty input)");
    const value_info& y = src.value(first_output(n));
    auto empty_input = n.inputs.begin();
    while (!empty_data(n, static_cast<std::size_t>(empty_input - n.inputs.begin()))) ++empty_input;
    if (n.type == "Concat") {
      std::erase_if(n.inputs, [&](const std::string& in) { return is_empty(src.value(in).shape); });
      g.add_node(n.type, n.name, n.inputs, n.outputs, n.attrs);
      continue;
    }
    tensor filled(y.shape, y.type);
    if (n.type == "MatMul" || n.type == "Gemm") {
      // An inner dimension of 0: each output element is an empty sum (Gemm's alpha scales 0).
      filled.fill(0.0);
      if (n.type == "Gemm" && n.inputs.size() > 2 && !n.inputs[2].empty()) {
        // beta was folded into C before this rewrite: y = C broadcast to [M, N].
        const std::string zeros = n.name + "::empty_product";
        g.add_constant(zeros, std::move(filled));
        g.add_node("Add", n.name, {zeros, n.inputs[2]}, n.outputs, {});
        continue;
      }
    } else if (const auto v = empty_reduction(n.type, y.type); v && n.inputs[0] == *empty_input) {
      filled.fill(*v);
    } else if (const auto pad = empty_pad(src, n); pad && n.inputs[0] == *empty_input) {
      filled.fill(*pad);
    } else {
      // No value: numpy raises for an argmax of an empty sequence, for ONNX's ReduceMean of an
      // empty integer set (0 / 0), and for an edge or reflect pad of an empty axis; anything
      // else is an operator this runtime does not compute from an empty input.
      const bool undefined = n.type == "ArgMax" || n.type == "ArgMin" || n.type == "ReduceMean" || n.type == "Pad";
      throw graph_error(make_error_code(undefined ? errc::invalid_argument : errc::not_supported), n.name, *empty_input,
                        n.type + " '" + n.name + "': the empty input '" + *empty_input + "' " +
                            shape_string(src.value(*empty_input).shape) + " would give the non-empty output " +
                            shape_string(y.shape) +
                            (undefined ? ", which has no value (nothing to take it from)"
                                       : ", which is not computed from an empty input"));
    }
    g.add_constant(n.outputs[0], std::move(filled));
  }
  set_outputs(src, g);
  g.validate();
  return g;
}

// Elementwise chains (level 2): runs of elementwise operators where each one's result is read
// by the next alone, is not a graph output, and has the chain's output shape and dtype (other
// operands may broadcast to it). Each chain becomes one fused_elementwise kernel, a chain longer
// than the kernel's stage limit several. `skip` holds operators already fused elsewhere.
// Returns the chains, each in execution order.
std::vector<std::vector<std::size_t>> eltwise_chains(const graph& g, const std::vector<std::size_t>& order,
                                                     const std::map<std::string, int, std::less<>>& uses,
                                                     const std::set<std::size_t>& skip) {
  const auto fusible = [&](std::size_t i) {
    const node& n = g.nodes()[i];
    const auto e = graph_ops::find_eltwise(n.type);
    // Max/Min with other than two inputs and Clip with bound inputs are not one stage.
    if (!e || skip.count(i) || n.outputs.size() != 1 || n.inputs.size() != (e->binary ? 2u : 1u)) return false;
    const value_info& y = g.value(n.outputs[0]);
    return is_float(y.type) &&
           ranges::all_of(n.inputs, [&](const std::string& in) { return !in.empty() && g.value(in).type == y.type; });
  };
  // next[i]: the operator continuing i's chain; a chain continues through one operand only.
  std::vector<int> next(g.nodes().size(), -1), prev(g.nodes().size(), -1);
  for (auto i : order) {
    if (!fusible(i)) continue;
    const node& n = g.nodes()[i];
    const shape& ys = g.value(n.outputs[0]).shape;
    for (const auto& in : n.inputs) {
      const value_info& x = g.value(in);
      if (x.producer < 0 || uses.at(in) != 1 || !(x.shape == ys)) continue;
      const auto p = static_cast<std::size_t>(x.producer);
      if (!fusible(p) || next[p] >= 0) continue;
      next[p] = static_cast<int>(i);
      prev[i] = static_cast<int>(p);
      break;
    }
  }
  std::vector<std::vector<std::size_t>> chains;
  for (auto head : order) {
    if (prev[head] >= 0 || next[head] < 0) continue;
    std::vector<std::size_t> chain;
    for (int i = static_cast<int>(head); i >= 0; i = next[static_cast<std::size_t>(i)])
      chain.push_back(static_cast<std::size_t>(i));
    // The kernel takes a bounded number of stages: a longer chain is several kernels, each
    // piece's last result a tensor again. A piece of one operator is that operator's own kernel.
    for (auto piece : chain | ranges::views::chunk(kernels::fused_elementwise::max_stages))
      if (ranges::distance(piece) > 1) chains.push_back(piece | ranges::to<std::vector>());
  }
  return chains;
}

bool has_branches(const graph& g) {
  for (const auto& [name, n] : use_counts(g))
    if (n > 1 && g.find(name) && g.find(name)->kind == value_kind::activation) return true;
  return false;
}

}  // namespace

std::string_view to_string(precision p) noexcept {
  switch (p) {
    case precision::fp32: return "fp32";
    case precision::fp16: return "fp16";
    case precision::bf16: return "bf16";
    case precision::mixed: return "mixed";
  }
  return "?";
}

std::string_view to_string(schedule s) noexcept {
  switch (s) {
    case schedule::sequential: return "sequential";
    case schedule::parallel: return "parallel";
    case schedule::pipeline: return "pipeline";
  }
  return "?";
}

namespace {

/// compile_options::all_reduce: checks the names, and orders every step that reads a reduced
/// output (or anything computed from one) after every other step, keeping the order within each
/// part. The reduced value is then what every reader sees, and the reductions overlap the steps
/// still to run before their first reader: in a training step the update operators wait, while
/// the rest of the backward pass runs beside the reductions. Independent steps never depend on
/// a later part's, so the order stays topological.
void order_for_all_reduce(compiled_graph::impl& c, const graph& src, const output_all_reduce& ar,
                          std::string_view call) {
  if (c.rep.schedule == schedule::pipeline)
    throw_error(
        make_error_code(errc::not_supported),
        std::string(call) + ": all_reduce with schedule::pipeline (a stage's batches would need one reduction each)");
  auto root_of = [&](int v) {
    while (c.values[static_cast<std::size_t>(v)].root != v) v = c.values[static_cast<std::size_t>(v)].root;
    return v;
  };
  const graph& G = c.g;
  std::vector<int> reduced_roots;
  std::vector<std::string_view> reduced_names;
  for (const auto& name : ar.outputs) {
    const auto at = std::find(G.outputs().begin(), G.outputs().end(), name);
    if (std::find(src.outputs().begin(), src.outputs().end(), name) == src.outputs().end() || at == G.outputs().end())
      throw graph_error(make_error_code(errc::invalid_argument), {}, name,
                        std::string(call) + ": all_reduce names '" + name +
                            "', which is not an output of the graph (mark it with graph::set_output)");
    const std::size_t i = static_cast<std::size_t>(at - G.outputs().begin());
    // Under fp16, bf16 or mixed precision an output computed in the compute type is a Cast of
    // that value, which the precision rewrite inserted: the operators read the compute-type
    // value, so that is the one reduced (in the type the step computes in), and the Cast, one of
    // its readers, gives the output.
    int target = c.outputs[i];
    if (const int k = c.values[static_cast<std::size_t>(target)].producer; k >= 0) {
      const cstep& st = c.steps[static_cast<std::size_t>(k)];
      if (st.n->type == "Cast" && st.n->name == name + "::cast" && st.in.size() == 1 && st.in[0] >= 0)
        target = st.in[0];
    }
    const int r = root_of(target);
    if (c.values[static_cast<std::size_t>(r)].kind != value_kind::activation)
      throw graph_error(make_error_code(errc::invalid_argument), {}, name,
                        std::string(call) + ": all_reduce names '" + name +
                            "', which no operator writes (an input or a constant of the graph)");
    if (std::find(reduced_roots.begin(), reduced_roots.end(), r) != reduced_roots.end())
      throw graph_error(make_error_code(errc::invalid_argument), {}, name,
                        std::string(call) + ": all_reduce names '" + name +
                            "' twice, or with another output that shares its memory (a view of it)");
    reduced_roots.push_back(r);
    reduced_names.push_back(name);
    creduction red;
    red.output = i;
    red.value = target;
    // Queued in the order of the list, whatever the schedule: every rank must call its
    // collectives in the same order, and two ranks compiled with different schedules (or
    // precisions) would otherwise pair gradients of the same size wrongly, without an error.
    if (c.values[static_cast<std::size_t>(c.outputs[i])].bytes() != 0) c.reductions.push_back(std::move(red));
  }
  // Which steps read a reduced value, directly or through what they compute.
  std::vector<char> tainted(c.values.size(), 0);
  for (int r : reduced_roots) tainted[static_cast<std::size_t>(r)] = 1;
  std::vector<char> dependent(c.steps.size(), 0);
  for (std::size_t k = 0; k < c.steps.size(); ++k) {
    const cstep& st = c.steps[k];
    for (int v : st.in)
      if (v >= 0 && tainted[static_cast<std::size_t>(root_of(v))]) dependent[k] = 1;
    if (!dependent[k]) continue;
    for (int v : st.out) {
      if (v < 0) continue;
      const int r = root_of(v);
      if (const auto at = std::find(reduced_roots.begin(), reduced_roots.end(), r); at != reduced_roots.end())
        throw graph_error(
            make_error_code(errc::not_supported), {}, std::string(reduced_names[at - reduced_roots.begin()]),
            std::string(call) + ": all_reduce names '" + std::string(reduced_names[at - reduced_roots.begin()]) +
                "', which is computed from another output it reduces (one reduction would wait for "
                "the other's readers)");
      tainted[static_cast<std::size_t>(r)] = 1;
    }
  }
  std::vector<cstep> ordered;
  ordered.reserve(c.steps.size());
  for (int part = 0; part < 2; ++part)
    for (std::size_t k = 0; k < c.steps.size(); ++k)
      if (dependent[k] == part) ordered.push_back(std::move(c.steps[k]));
  c.steps = std::move(ordered);
  for (std::size_t k = 0; k < c.steps.size(); ++k)
    for (int v : c.steps[k].out)
      if (v >= 0) c.values[static_cast<std::size_t>(v)].producer = static_cast<int>(k);
  c.rep.all_reduced = c.reductions.size();
  c.all_reduce = ar;
}

}  // namespace

// Builds everything but device memory. Shared by session::compile and plan_memory.
std::shared_ptr<compiled_graph::impl> build_plan(graph& src, const compile_options& o, precision prec,
                                                 const schedule_config& sc, const memory_config& mc, int level_default,
                                                 std::string_view call) {
  src.validate();
  auto p = std::make_shared<compiled_graph::impl>();
  compile_report& rep = p->rep;
  rep.optimization_level = o.optimization_level.value_or(level_default);
  if (rep.optimization_level < 0 || rep.optimization_level > 3)
    throw_error(make_error_code(errc::invalid_argument),
                std::string(call) + ": optimization_level " + std::to_string(rep.optimization_level) + " (0-3)");
  // Enumerations cast from integers: refused rather than run as something unnamed.
  if (const auto s = o.schedule.value_or(sc.strategy);
      static_cast<unsigned>(s) > static_cast<unsigned>(schedule::pipeline))
    throw_error(make_error_code(errc::invalid_argument),
                std::string(call) + ": schedule " + std::to_string(static_cast<unsigned>(s)) + " is not a schedule");
  if (static_cast<unsigned>(prec) > static_cast<unsigned>(precision::mixed))
    throw_error(
        make_error_code(errc::invalid_argument),
        std::string(call) + ": precision " + std::to_string(static_cast<unsigned>(prec)) + " is not a precision");
  const int level = rep.optimization_level;
  rep.memory_reuse = o.memory_reuse.value_or(mc.reuse);
  rep.schedule = o.schedule.value_or(sc.strategy);
  if (!o.schedule && level >= 3 && rep.schedule == schedule::sequential && has_branches(src))
    rep.schedule = schedule::parallel;
  const int max_par = o.max_parallelism.value_or(sc.max_parallelism);
  const int stages = o.pipeline_stages.value_or(sc.pipeline_stages);
  // As set_schedule_config: a value that cannot be meant is refused, not clamped.
  check_schedule_limits(call, max_par, stages);

  // Rewrites, each giving a validated graph.
  graph g = [&] {
    graph copy(src.name());
    for (const auto& in : src.inputs()) copy.add_input(in, src.value(in).shape, src.value(in).type);
    std::set<std::string> added;
    for (auto i : src.topological_order()) {
      const node& n = src.nodes()[i];
      for (const auto& in : n.inputs)
        if (const tensor* c = src.constant(in); c && !added.count(in)) {
          added.insert(in);
          copy.add_constant(in, c->is_host() ? c->clone() : tensor::timing_only(c->shape(), c->type()));
        }
      copy.add_node(n.type, n.name, n.inputs, n.outputs, n.attrs);
    }
    set_outputs(src, copy);
    for (const auto& v : src.outputs())
      if (src.constant(v)) added.insert(v);
    for (const auto& name : added) {
      const tensor& c = *copy.constant(name);
      p->refit.derived[name] = {name, std::nullopt};
      p->refit.sources[name] = {c.shape(), c.type()};
    }
    copy.validate();
    return copy;
  }();
  if (level >= 2) g = fold_batchnorm(g, rep.fused, p->refit);
  g = fold_gemm_beta(g, p->refit);
  g = rewrite_empty(g, p->refit);
  if (prec != precision::fp32) g = rewrite_precision(g, prec, rep.casts_inserted, p->refit);
  p->g = std::move(g);
  graph& G = p->g;
  for (const node& n : src.nodes())
    if (const chain_origin* o = src.origin(n.name)) p->origins.emplace(n.name, *o);

  bool timing_only = o.timing_only;
  for (const auto& n : G.nodes())
    for (const auto& in : n.inputs)
      if (const tensor* c = G.constant(in); c && !c->is_host()) timing_only = true;
  rep.timing_only = timing_only;

  // Values.
  std::map<std::string, int, std::less<>> vid;
  auto add_value = [&](const value_info& v) {
    if (auto it = vid.find(v.name); it != vid.end()) return it->second;
    cvalue c{v.name, v.shape, v.type, v.kind, -1, -1, false, G.constant(v.name)};
    const int id = static_cast<int>(p->values.size());
    c.root = id;
    p->values.push_back(std::move(c));
    vid[v.name] = id;
    return id;
  };
  for (const auto& in : G.inputs()) p->inputs.push_back(add_value(G.value(in)));
  const auto order = G.topological_order();
  const auto uses = use_counts(G);
  // Fusion into a cube operator's epilogue (level 2): an Add of a Conv/Gemm/MatMul output and a
  // tensor of the output's shape and dtype becomes the cube kernel's residual, and a Relu after
  // either is its activation. The fused tensor must be read by the fusing op alone, and a
  // residual must be computed before the cube operator runs. What remains of elementwise
  // operators then fuses into chains.
  std::map<std::string, std::string, std::less<>> renamed;  // fused-away output -> next output
  std::set<std::size_t> fused_away;                          // Add and Relu nodes absorbed
  std::map<std::size_t, std::string> residual_of;            // cube node -> residual tensor
  std::set<std::string> relu_outputs;                        // outputs of absorbed Relus
  // ConvGrad node -> the ReluGrad of its dX it absorbs: dX leaves the cube masked (the dgrad +
  // dReLU fusion of cuDNN's graph API), and the ReluGrad's mask rides along.
  std::map<std::size_t, std::size_t> relu_grad_of;
  if (level >= 2) {
    std::vector<std::size_t> position(G.nodes().size(), 0);
    for (std::size_t k = 0; k < order.size(); ++k) position[order[k]] = k;
    auto placed_before = [&](const std::string& v, std::size_t node_index) {
      const value_info& vi = G.value(v);
      return vi.producer < 0 || position[static_cast<std::size_t>(vi.producer)] < position[node_index];
    };
    for (auto i : order) {
      const node& r = G.nodes()[i];
      if (r.type == "Add" && r.inputs.size() == 2 && r.inputs[0] != r.inputs[1]) {
        const value_info& y = G.value(r.outputs[0]);
        for (int j = 0; j < 2; ++j) {
          const std::string& x = r.inputs[static_cast<std::size_t>(j)];
          const std::string& other = r.inputs[static_cast<std::size_t>(1 - j)];
          const value_info& xv = G.value(x);
          const value_info& ov = G.value(other);
          if (xv.producer < 0 || uses.at(x) != 1 || renamed.count(x)) continue;
          const auto prod = static_cast<std::size_t>(xv.producer);
          if (!is_cube(G.nodes()[prod].type) || residual_of.count(prod)) continue;
          if (!(ov.shape == y.shape) || !(xv.shape == y.shape) || ov.type != y.type || xv.type != y.type) continue;
          if (!placed_before(other, prod)) continue;
          residual_of[prod] = other;
          renamed[x] = r.outputs[0];
          fused_away.insert(i);
          break;
        }
        continue;
      }
      if (r.type == "ReluGrad" && r.inputs.size() == 2 && r.inputs[0] != r.inputs[1]) {
        const std::string& dx = r.inputs[0];
        const value_info& dxv = G.value(dx);
        if (dxv.producer < 0 || uses.at(dx) != 1 || renamed.count(dx)) continue;
        const auto prod = static_cast<std::size_t>(dxv.producer);
        const node& cg = G.nodes()[prod];
        if (cg.type != "ConvGrad" || cg.outputs.empty() || cg.outputs[0] != dx || relu_grad_of.count(prod)) continue;
        // One dtype and shape throughout, and the mask computed before the ConvGrad runs.
        const value_info& y = G.value(r.inputs[1]);
        const value_info& dz = G.value(r.outputs[0]);
        if (!(y.shape == dxv.shape) || !(dz.shape == dxv.shape) || y.type != dxv.type || dz.type != dxv.type ||
            !placed_before(r.inputs[1], prod))
          continue;
        relu_grad_of[prod] = i;
        renamed[dx] = r.outputs[0];
        fused_away.insert(i);
        continue;
      }
      if (r.type != "Relu") continue;
      const value_info& x = G.value(r.inputs[0]);
      if (x.producer < 0 || uses.at(r.inputs[0]) != 1) continue;
      const auto prod = static_cast<std::size_t>(x.producer);
      const std::string& pt = G.nodes()[prod].type;
      // An Add already absorbed into a cube operator passes its Relu on to that operator.
      const bool after_fused_add = fused_away.count(prod) != 0;
      if (!after_fused_add && !is_cube(pt)) continue;
      fused_away.insert(i);
      renamed[r.inputs[0]] = r.outputs[0];
      relu_outputs.insert(r.outputs[0]);
    }
  }
  std::set<std::size_t> chained;                          // chain members before the last
  std::map<std::size_t, std::vector<std::size_t>> chain_at;  // a chain's last operator -> chain
  if (level >= 2)
    for (auto& ch : eltwise_chains(G, order, uses, fused_away)) {
      chained.insert(ch.begin(), ch.end() - 1);
      chain_at[ch.back()] = std::move(ch);
    }
  auto resolve = [&](std::string name) {
    for (auto it = renamed.find(name); it != renamed.end(); it = renamed.find(name)) name = it->second;
    return name;
  };
  for (auto i : order) {
    const node& n = G.nodes()[i];
    if (fused_away.count(i) || chained.count(i)) {
      ++rep.fused;
      continue;
    }
    std::vector<int> in, out;
    std::vector<const node*> chain;
    std::vector<std::array<int, 2>> chain_operands;
    if (auto it = chain_at.find(i); it != chain_at.end()) {
      // The chain's inputs, each once, in order of first use; an operand produced inside the
      // chain is the previous stage's result.
      std::set<std::string> inside;
      for (auto k : it->second) {
        const node& m = G.nodes()[k];
        std::array<int, 2> ops{cstep::chain_value, cstep::chain_value};
        for (auto [j, name] : m.inputs | ranges::views::enumerate) {
          if (inside.count(name)) continue;
          const int v = add_value(G.value(resolve(name)));
          auto pos = std::find(in.begin(), in.end(), v);
          if (pos == in.end()) pos = in.insert(in.end(), v);
          ops[j] = static_cast<int>(pos - in.begin());
        }
        inside.insert(m.outputs[0]);
        chain.push_back(&m);
        chain_operands.push_back(ops);
      }
    } else {
      for (const auto& name : n.inputs) in.push_back(name.empty() ? -1 : add_value(G.value(resolve(name))));
    }
    int relu_mask = -1;
    if (auto it = relu_grad_of.find(i); it != relu_grad_of.end()) {
      relu_mask = add_value(G.value(resolve(G.nodes()[it->second].inputs[1])));
      in.push_back(relu_mask);  // read by this step: liveness and cross-stream waits see it
    }
    int residual = -1;
    if (auto it = residual_of.find(i); it != residual_of.end()) {
      residual = add_value(G.value(resolve(it->second)));
      in.push_back(residual);  // read by this step: liveness and cross-stream waits see it
    }
    bool relu = false;
    for (const auto& name : n.outputs) {
      if (name.empty()) {  // an optional output left out: nothing is written
        out.push_back(-1);
        continue;
      }
      const std::string final_name = resolve(name);
      relu = relu || relu_outputs.count(final_name) != 0;
      out.push_back(add_value(G.value(final_name)));
    }
    if (is_view(n.type)) {
      // A view: the output is the input's memory under another shape.
      p->values[static_cast<std::size_t>(out[0])].root = p->values[static_cast<std::size_t>(in[0])].root;
      ++rep.in_place;
      continue;
    }
    cstep s;
    s.n = &n;
    s.in = std::move(in);
    s.out = std::move(out);
    s.relu_after = relu;
    s.residual = residual;
    s.relu_mask = relu_mask;
    s.kernel_name = n.name;
    if (!chain.empty()) {
      // Named after every operator it computes, so traces and run results show what fused.
      s.kernel_name.clear();
      for (const node* m : chain) s.kernel_name += (s.kernel_name.empty() ? "" : "+") + m->name;
      s.chain = std::move(chain);
      s.chain_operands = std::move(chain_operands);
    }
    const int step = static_cast<int>(p->steps.size());
    for (int v : s.out)
      if (v >= 0) p->values[static_cast<std::size_t>(v)].producer = step;
    p->steps.push_back(std::move(s));
  }
  for (const auto& name : o.outputs_on_device)
    if (std::find(src.outputs().begin(), src.outputs().end(), name) == src.outputs().end())
      throw graph_error(
          make_error_code(errc::invalid_argument), {}, name,
          std::string(call) + ": outputs_on_device names '" + name + "', which is not an output of the graph");
  for (const auto& o2 : G.outputs()) {
    const int v = add_value(G.value(resolve(o2)));
    p->values[static_cast<std::size_t>(v)].output = true;
    p->outputs.push_back(v);
    const bool on_device = !timing_only && std::find(o.outputs_on_device.begin(), o.outputs_on_device.end(), o2) !=
                                               o.outputs_on_device.end();
    p->output_on_device.push_back(on_device);
    rep.outputs_on_device += on_device ? 1 : 0;
  }
  if (o.all_reduce) order_for_all_reduce(*p, src, *o.all_reduce, call);
  // Inputs and constants are never written by operators, so a view of them stays theirs.
  const int nsteps = static_cast<int>(p->steps.size());
  p->roots.assign(p->values.size(), {});
  auto root_of = [&](int v) {
    int r = v;
    while (p->values[static_cast<std::size_t>(r)].root != r) r = p->values[static_cast<std::size_t>(r)].root;
    return r;
  };
  auto is_act_root = [&](int r) { return p->values[static_cast<std::size_t>(r)].kind == value_kind::activation; };
  // Last reader and output flag per root, kept up to date as in-place merges roots.
  std::vector<int> last(p->values.size(), -1);
  std::vector<bool> pinned(p->values.size(), false);  // roots that hold a graph output
  for (std::size_t v = 0; v < p->values.size(); ++v)
    if (p->values[v].output) pinned[static_cast<std::size_t>(root_of(static_cast<int>(v)))] = true;
  std::vector<int> readers(p->values.size(), 0);
  for (int s = 0; s < nsteps; ++s)
    for (int v : p->steps[static_cast<std::size_t>(s)].in)
      if (v >= 0) {
        auto& l = last[static_cast<std::size_t>(root_of(v))];
        l = std::max(l, s);
        ++readers[static_cast<std::size_t>(root_of(v))];
      }
  // Under the parallel schedule an op that overwrites a tensor another branch reads would have
  // to wait for that branch: in place only for a tensor with one reader there.
  const bool single_reader_only = rep.schedule == schedule::parallel;
  for (int s = 0; s < nsteps && level >= 1; ++s) {
    cstep& st = p->steps[static_cast<std::size_t>(s)];
    const std::string& t = st.n->type;
    if (!(is_unary_eltwise(t) || is_binary_eltwise(t)) || st.in.empty() || st.in[0] < 0) continue;
    const int r = root_of(st.in[0]);
    const cvalue& x = p->values[static_cast<std::size_t>(st.in[0])];
    const int y = st.out[0];
    const cvalue& yv = p->values[static_cast<std::size_t>(y)];
    // Legal when nothing reads x's memory after this op, x is an activation that is not an
    // output, and y has x's shape and type (a broadcast would need more room).
    if (single_reader_only && readers[static_cast<std::size_t>(r)] != 1) continue;
    if (is_act_root(r) && !pinned[static_cast<std::size_t>(r)] && last[static_cast<std::size_t>(r)] == s &&
        x.shape == yv.shape && x.type == yv.type &&
        std::none_of(st.in.begin() + 1, st.in.end(), [&](int v) { return v >= 0 && root_of(v) == r; })) {
      p->values[static_cast<std::size_t>(y)].root = r;
      last[static_cast<std::size_t>(r)] =
          std::max(last[static_cast<std::size_t>(r)], last[static_cast<std::size_t>(y)]);
      readers[static_cast<std::size_t>(r)] = readers[static_cast<std::size_t>(y)];
      pinned[static_cast<std::size_t>(r)] = pinned[static_cast<std::size_t>(y)];
      st.in_place = true;
      ++rep.in_place;
    }
  }
  for (std::size_t v = 0; v < p->values.size(); ++v) p->values[v].root = root_of(static_cast<int>(v));
  for (int s = 0; s < nsteps; ++s) {
    const cstep& st = p->steps[static_cast<std::size_t>(s)];
    for (int v : st.in)
      if (v >= 0) p->roots[static_cast<std::size_t>(root_of(v))].accesses.emplace_back(s, false);
    for (int v : st.out)
      if (v >= 0) p->roots[static_cast<std::size_t>(root_of(v))].accesses.emplace_back(s, true);
  }
  if (o.all_reduce) {
    // Each reduction runs once its output's last writer has, and every reader waits for it: the
    // readers were ordered after every reduced output's writer above, so each reduction is queued
    // before its first reader is.
    for (auto& red : p->reductions) {
      for (auto [step, writes] :
           p->roots[static_cast<std::size_t>(p->values[static_cast<std::size_t>(red.value)].root)].accesses) {
        if (writes) red.after = std::max(red.after, step);
        else red.readers.push_back(step);
      }
    }
  }
  // Activation buffers for the planner.
  std::vector<memplan::buffer> bufs;
  std::vector<int> buf_root;
  constexpr std::uint64_t align = 512;  // the device allocator's granule
  for (std::size_t r = 0; r < p->values.size(); ++r) {
    const cvalue& v = p->values[r];
    if (v.root != static_cast<int>(r) || v.kind != value_kind::activation) continue;
    auto& ri = p->roots[r];
    if (ri.accesses.empty()) continue;
    ri.lower = nsteps;
    ri.upper = 0;
    for (auto [s, w] : ri.accesses) {
      ri.lower = std::min(ri.lower, s);
      ri.upper = std::max(ri.upper, s + 1);
    }
    if (pinned[r]) ri.upper = nsteps + 1;
    std::uint64_t size = 0;
    for (const auto& w : p->values)
      if (w.root == static_cast<int>(r)) size = std::max<std::uint64_t>(size, w.bytes());
    ri.size = std::max<std::uint64_t>(align, (size + align - 1) / align * align);
    bufs.push_back({static_cast<std::int64_t>(r), ri.lower, ri.upper, ri.size});
    buf_root.push_back(static_cast<int>(r));
  }
  rep.activation_no_reuse_bytes = bufs.empty() ? 0 : memplan::no_reuse_size(bufs);
  rep.activation_lower_bound = bufs.empty() ? 0 : memplan::lower_bound(bufs);
  if (!bufs.empty()) {
    if (rep.memory_reuse) {
      memplan::options mo;
      mo.alignment = align;
      if (level < 3) mo.search_work = 0;  // the local search is a level-3 effort
      const memplan::plan plan = memplan::make_plan(bufs, mo);
      for (std::size_t i = 0; i < bufs.size(); ++i)
        p->roots[static_cast<std::size_t>(buf_root[i])].offset = plan.offsets[i];
      rep.activation_bytes = plan.arena_size;
    } else {
      std::uint64_t off = 0;
      for (std::size_t i = 0; i < bufs.size(); ++i) {
        p->roots[static_cast<std::size_t>(buf_root[i])].offset = off;
        off += bufs[i].size;
      }
      rep.activation_bytes = off;
    }
  }
  p->arena_bytes = rep.activation_bytes;
  // Each tensor fits in memory, their sums need not: a wrapped total would be a report of a
  // graph that fits.
  const auto add_bytes = [&](std::uint64_t& to, std::uint64_t n, std::string_view what) {
    if (n > std::numeric_limits<std::uint64_t>::max() - to)
      throw_error(make_error_code(errc::size_overflow), std::string(call) + ": graph '" + src.name() + "': its " +
                                                            std::string(what) + " exceed 2^64 - 1 bytes");
    to += n;
  };
  for (const auto& v : p->values) {
    if (v.kind == value_kind::constant && v.root == static_cast<int>(&v - p->values.data()) &&
        !p->roots[static_cast<std::size_t>(&v - p->values.data())].accesses.empty())
      add_bytes(rep.weight_bytes, v.bytes(), "weights");
    if (v.kind == value_kind::input) add_bytes(rep.io_bytes, v.bytes(), "inputs and outputs");
    if (v.output && timing_only) add_bytes(rep.io_bytes, v.bytes(), "inputs and outputs");
  }
  std::uint64_t peak = rep.activation_bytes;
  add_bytes(peak, rep.weight_bytes, "activations, weights, inputs and outputs");
  add_bytes(peak, rep.io_bytes, "activations, weights, inputs and outputs");

  // Schedule: streams and cross-stream waits.
  std::vector<int> producer_step(p->values.size(), -1);
  for (int s = 0; s < nsteps; ++s)
    for (int v : p->steps[static_cast<std::size_t>(s)].out)
      if (v >= 0) producer_step[static_cast<std::size_t>(v)] = s;
  auto data_preds = [&](int s) {
    std::vector<int> preds;
    for (int v : p->steps[static_cast<std::size_t>(s)].in) {
      if (v < 0) continue;
      // A view's data comes from its root's last writer before s.
      int w = producer_step[static_cast<std::size_t>(v)];
      if (w < 0) {
        for (auto [as, wr] : p->roots[static_cast<std::size_t>(root_of(v))].accesses)
          if (wr && as < s) w = std::max(w, as);
      }
      if (w >= 0) preds.push_back(w);
    }
    // In place: the op also follows the previous writer of the memory it overwrites.
    return preds;
  };
  if (rep.schedule == schedule::parallel && max_par > 1) {
    std::vector<int> tail;  // last step per stream
    std::map<std::string, std::set<std::string>, std::less<>> apart;
    // The hints are the source graph's: the rewrites build new graphs without them, and they
    // keep the source's node names.
    for (const auto& [a, b] : src.parallel_hints()) {
      const std::string& na = src.nodes()[src.node_index(a)].name;
      const std::string& nb = src.nodes()[src.node_index(b)].name;
      apart[na].insert(nb);
      apart[nb].insert(na);
    }
    for (int s = 0; s < nsteps; ++s) {
      cstep& st = p->steps[static_cast<std::size_t>(s)];
      std::set<std::uint32_t> banned;
      if (auto it = apart.find(st.n->name); it != apart.end())
        for (int q = 0; q < s; ++q)
          if (it->second.count(p->steps[static_cast<std::size_t>(q)].n->name))
            banned.insert(p->steps[static_cast<std::size_t>(q)].stream);
      int chosen = -1;
      for (int pr : data_preds(s)) {
        const auto ps = p->steps[static_cast<std::size_t>(pr)].stream;
        if (tail[ps] == pr && !banned.count(ps)) {
          chosen = static_cast<int>(ps);
          break;
        }
      }
      if (chosen < 0) {
        if (static_cast<int>(tail.size()) < max_par) {
          chosen = static_cast<int>(tail.size());
          tail.push_back(-1);
        } else {
          // The stream whose last op came earliest.
          int best = -1;
          for (std::size_t k = 0; k < tail.size(); ++k)
            if (!banned.count(static_cast<std::uint32_t>(k)) &&
                (best < 0 || tail[k] < tail[static_cast<std::size_t>(best)]))
              best = static_cast<int>(k);
          chosen = best < 0 ? 0 : best;
        }
      }
      if (tail.empty()) tail.push_back(-1);
      st.stream = static_cast<std::uint32_t>(chosen);
      tail[static_cast<std::size_t>(chosen)] = s;
    }
    p->streams = static_cast<std::uint32_t>(std::max<std::size_t>(1, tail.size()));
  } else if (rep.schedule == schedule::pipeline) {
    // Stages: contiguous runs of the order with about equal numbers of operators.
    p->stages = std::min(stages, std::max(1, nsteps));
    for (int s = 0; s < nsteps; ++s) {
      cstep& st = p->steps[static_cast<std::size_t>(s)];
      st.stage = static_cast<int>(static_cast<std::int64_t>(s) * p->stages / std::max(1, nsteps));
      st.stream = static_cast<std::uint32_t>(st.stage);
    }
    // Inputs are copied in on a stream of their own, so the next batch's copy overlaps this
    // batch's first stage; the last stage copies the outputs out.
    p->streams = static_cast<std::uint32_t>(p->stages) + 1;
    p->copy_stream = static_cast<std::uint32_t>(p->stages);
    p->final_stream = static_cast<std::uint32_t>(p->stages) - 1;
  }
  // Waits: data dependencies, plus write-after-read and write-after-write on memory two values
  // share (in place, or reuse by the planner) when the accesses are on different streams.
  for (int s = 0; s < nsteps; ++s) {
    cstep& st = p->steps[static_cast<std::size_t>(s)];
    for (int pr : data_preds(s))
      if (p->steps[static_cast<std::size_t>(pr)].stream != st.stream) st.waits.insert(pr);
  }
  if (p->streams > 1) {
    std::vector<std::size_t> act;
    for (std::size_t r = 0; r < p->roots.size(); ++r)
      if (!p->roots[r].accesses.empty() && is_act_root(static_cast<int>(r)) && p->values[r].root == static_cast<int>(r))
        act.push_back(r);
    for (auto r2 : act) {
      const auto& b = p->roots[r2];
      for (auto [ws, writes] : b.accesses) {
        if (!writes) continue;
        for (auto r1 : act) {
          const auto& a = p->roots[r1];
          const bool overlap = r1 == r2 || (a.offset < b.offset + b.size && b.offset < a.offset + a.size);
          if (!overlap) continue;
          for (auto [as, aw] : a.accesses)
            if (as < ws &&
                p->steps[static_cast<std::size_t>(as)].stream != p->steps[static_cast<std::size_t>(ws)].stream)
              p->steps[static_cast<std::size_t>(ws)].waits.insert(as);
        }
      }
    }
  }
  // Prune waits: stream order already covers a wait on a step that an earlier step of the same
  // stream waited for (or a later one of the same producer stream); each wait costs the host a
  // launch.
  if (p->streams > 1) {
    std::vector<std::vector<int>> covered(p->streams, std::vector<int>(p->streams, -1));
    for (int s = 0; s < nsteps; ++s) {
      cstep& st = p->steps[static_cast<std::size_t>(s)];
      std::vector<int> latest(p->streams, -1);
      for (int w : st.waits) {
        const auto ws = p->steps[static_cast<std::size_t>(w)].stream;
        latest[ws] = std::max(latest[ws], w);
      }
      std::set<int> kept;
      for (std::uint32_t k = 0; k < p->streams; ++k)
        if (latest[k] > covered[st.stream][k]) {
          kept.insert(latest[k]);
          covered[st.stream][k] = latest[k];
        }
      st.waits = std::move(kept);
    }
  }
  // Which steps can overlap a step of another stream: neither is an ancestor of the other.
  if (p->streams > 1) {
    const std::size_t words = (static_cast<std::size_t>(nsteps) + 63) / 64;
    std::vector<std::vector<std::uint64_t>> anc(static_cast<std::size_t>(nsteps), std::vector<std::uint64_t>(words, 0));
    std::vector<int> prev_on_stream(p->streams, -1);
    for (int s = 0; s < nsteps; ++s) {
      auto& a = anc[static_cast<std::size_t>(s)];
      std::vector<int> deps(p->steps[static_cast<std::size_t>(s)].waits.begin(),
                            p->steps[static_cast<std::size_t>(s)].waits.end());
      for (int d : data_preds(s)) deps.push_back(d);
      if (prev_on_stream[p->steps[static_cast<std::size_t>(s)].stream] >= 0)
        deps.push_back(prev_on_stream[p->steps[static_cast<std::size_t>(s)].stream]);
      for (int d : deps) {
        const auto& ad = anc[static_cast<std::size_t>(d)];
        for (std::size_t k = 0; k < words; ++k) a[k] |= ad[k];
        a[static_cast<std::size_t>(d) / 64] |= 1ull << (d % 64);
      }
      prev_on_stream[p->steps[static_cast<std::size_t>(s)].stream] = s;
    }
    auto is_anc = [&](int a, int b) {
      return (anc[static_cast<std::size_t>(b)][static_cast<std::size_t>(a) / 64] >> (a % 64)) & 1u;
    };
    std::vector<std::set<std::uint32_t>> peer_streams(static_cast<std::size_t>(nsteps));
    for (int s = 0; s < nsteps; ++s)
      for (int t2 = s + 1; t2 < nsteps; ++t2) {
        auto& a = p->steps[static_cast<std::size_t>(s)];
        auto& b = p->steps[static_cast<std::size_t>(t2)];
        if (a.stream != b.stream && !is_anc(s, t2)) {
          a.concurrent = b.concurrent = true;
          peer_streams[static_cast<std::size_t>(s)].insert(b.stream);
          peer_streams[static_cast<std::size_t>(t2)].insert(a.stream);
        }
      }
    for (int s = 0; s < nsteps; ++s)
      p->steps[static_cast<std::size_t>(s)].peers =
          static_cast<std::uint32_t>(peer_streams[static_cast<std::size_t>(s)].size());
  }
  rep.operators = p->steps.size();
  rep.streams = p->streams;
  return p;
}

compile_report plan_memory(graph& g, const compile_options& opts, precision prec) {
  return build_plan(g, opts, prec, schedule_config{}, memory_config{}, 1, "npurt::plan_memory")->rep;
}

}  // namespace npurt

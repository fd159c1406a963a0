// The operators the graph computes as chains of its own (npurt/graph/detail/composite.hpp). Each
// chain computes what ONNX's definition of the operator does (onnx.ai/onnx/operators) with
// npurt's kernels.
#include <npurt/graph/detail/composite.hpp>

#include "conv_transpose.hpp"
#include "einsum.hpp"
#include "window.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace npurt::detail {

namespace {

[[noreturn]] void fail(errc e, const std::string& op, const std::string& tensor, const std::string& what) {
  throw graph_error(make_error_code(e), op, tensor, what);
}

/// An int64 vector constant named `name` (a Reshape's target shape, a Slice's bounds): dimensions
/// and bounds are far below 2^53, so the tensor's double setter holds them exactly.
std::string add_ints(graph& g, const std::string& name, std::span<const std::int64_t> v) {
  tensor t(shape{static_cast<std::int64_t>(v.size())}, dtype::i64);
  for (std::size_t i = 0; i < v.size(); ++i) t.set(static_cast<std::int64_t>(i), static_cast<double>(v[i]));
  return g.add_constant(name, std::move(t));
}

/// LayerNormalization with its Mean and InvStdDev outputs, as ONNX's function computes it: the
/// statistics over the axes from `axis` on, in the stash type (float: a half-precision X is cast
/// up first and its normalised values cast back before Scale and B), Mean and InvStdDev kept with
/// the reduced axes as 1.
template <class Step>
void add_layer_norm(graph& g, const std::string& node_name, const std::vector<std::string>& ins,
                    const std::vector<std::string>& outputs, const attributes& attrs,
                    const std::function<std::string(const std::string&)>& fresh, Step& step) {
  const std::string& y = outputs[0];
  if (ins.size() < 2 || ins[1].empty())
    fail(errc::parse_error, node_name, y, "LayerNormalization '" + node_name + "' needs the inputs X and Scale");
  // A copy: the steps added below grow the graph's table of values, which would leave a reference
  // into it dangling.
  const value_info x = g.value(ins[0]);
  if (x.type != dtype::f32 && x.type != dtype::f16 && x.type != dtype::bf16)
    fail(errc::invalid_dtype, node_name, ins[0],
         "LayerNormalization '" + node_name + "': X must be floating, got " + std::string(to_string(x.type)));
  const auto rank = static_cast<std::int64_t>(x.shape.rank());
  std::int64_t axis = attrs.get_int("axis", -1);
  if (axis < -rank || axis >= rank || rank == 0)
    fail(errc::invalid_argument, node_name, ins[0],
         "LayerNormalization '" + node_name + "': axis " + std::to_string(axis) + " is outside rank " +
             std::to_string(rank));
  if (axis < 0) axis += rank;
  // ONNX's stash_type is the element type of the statistics: 1 (float) is the default and what
  // the function's reference computes in; X's own type is the other meaningful choice.
  const std::int64_t stash = attrs.get_int("stash_type", 1);
  const bool cast_up = stash == 1 && x.type != dtype::f32;
  if (stash != 1 && !(stash == 10 && x.type == dtype::f16) && !(stash == 16 && x.type == dtype::bf16))
    fail(errc::not_supported, node_name, {},
         "LayerNormalization '" + node_name + "': stash_type " + std::to_string(stash) +
             " (float, or X's own type, is computed)");
  ints axes;
  for (std::int64_t d = axis; d < rank; ++d) axes.push_back(d);
  const attributes over{{"axes", axes}, {"keepdims", std::int64_t{1}}};
  const std::string mean_out = outputs.size() > 1 ? outputs[1] : std::string();
  const std::string inv_out = outputs.size() > 2 ? outputs[2] : std::string();
  // A named statistic is its own node, named after the operator (the node name is Y's step's).
  const auto stat = [&](const std::string& type, const std::string& tag, std::vector<std::string> from,
                        const std::string& to, attributes a = {}) {
    if (to.empty()) return step(type, tag, std::move(from), {}, std::move(a));
    g.add_node(type, fresh(node_name + "/" + tag), std::move(from), {to}, std::move(a));
    return to;
  };
  const std::string xs = cast_up ? step("Cast", "x_float", {ins[0]}, {}, {{"to", std::int64_t{1}}}) : ins[0];
  const std::string mean = stat("ReduceMean", "mean", {xs}, mean_out, over);
  const std::string centred = step("Sub", "centred", {xs, mean});
  const std::string var = step("ReduceMean", "var", {step("Mul", "square", {centred, centred})}, {}, over);
  // The epsilon in the stash type: a scalar of X's half type would round it (1e-5 is not a half).
  tensor eps_value(shape{}, cast_up ? dtype::f32 : x.type);
  eps_value.set(0, attrs.get_float("epsilon", 1e-5));
  const std::string eps = g.add_constant(fresh(y + "/epsilon"), std::move(eps_value));
  const std::string inv =
      stat("Reciprocal", "inv_std_dev", {step("Sqrt", "std_dev", {step("Add", "var_eps", {var, eps})})}, inv_out);
  std::string normed = step("Mul", "normalized", {centred, inv});
  if (cast_up)
    normed = step("Cast", "normalized_t", {normed}, {}, {{"to", std::int64_t{x.type == dtype::f16 ? 10 : 16}}});
  // Scale and B are X's trailing shape, or that many elements flat: reshaped to broadcast.
  const shape trailing(std::span<const std::int64_t>(x.shape.begin() + axis, x.shape.end()));
  const auto as_trailing = [&](const std::string& p, const std::string& tag) {
    const value_info& v = g.value(p);
    if (v.shape == trailing) return p;
    if (v.shape.rank() != 1 || v.shape[0] != trailing.elements())
      fail(errc::invalid_shape, node_name, p,
           "LayerNormalization '" + node_name + "': '" + p + "' must be " + shape_string(trailing) + ", got " +
               shape_string(v.shape));
    return step("Reshape", tag,
                {p, add_ints(g, fresh(y + "/" + tag + "_shape"),
                             std::span<const std::int64_t>(trailing.begin(), trailing.end()))});
  };
  const bool has_bias = ins.size() > 2 && !ins[2].empty();
  const std::string scaled =
      step("Mul", "scaled", {normed, as_trailing(ins[1], "scale")}, has_bias ? std::string() : y);
  if (has_bias) step("Add", "biased", {scaled, as_trailing(ins[2], "bias")}, y);
}

/// RNN, GRU and LSTM as the graph's one Recurrent node (its attribute "cell" the operator): the
/// kernel carries eight operands, so an LSTM's peepholes P ride after B (a Concat, B zeros when
/// absent) and the initial states in the Y_h and Y_c outputs, which the node therefore always
/// has; an output the model leaves out gets a fresh name nobody reads.
void add_recurrent(graph& g, const std::string& t, const std::string& node_name, const std::vector<std::string>& ins,
                   const std::vector<std::string>& outputs, const attributes& attrs,
                   const std::function<std::string(const std::string&)>& fresh) {
  const bool lstm = t == "LSTM";
  const std::size_t outs = lstm ? 3 : 2, most_in = lstm ? 8 : 6;
  if (outputs.size() > outs ||
      std::all_of(outputs.begin(), outputs.end(), [](const std::string& o) { return o.empty(); }))
    fail(errc::parse_error, node_name, {},
         t + " '" + node_name + "' has the outputs Y, Y_h" + (lstm ? ", Y_c" : "") + ", one of them named at least");
  if (ins.size() < 3 || ins[0].empty() || ins[1].empty() || ins[2].empty() || ins.size() > most_in)
    fail(errc::parse_error, node_name, {},
         t + " '" + node_name + "' takes X, W, R, B, sequence_lens, initial_h" + (lstm ? ", initial_c, P" : "") +
             ", the first three given");
  // The attributes ONNX defines for the three (graph.cpp's onnx_attributes lists them per operator).
  for (const auto& [name, value] : attrs.items()) {
    const bool common = name == "activation_alpha" || name == "activation_beta" || name == "activations" ||
                        name == "clip" || name == "direction" || name == "hidden_size" || name == "layout";
    if (!common && !(lstm && name == "input_forget") && !(t == "GRU" && name == "linear_before_reset"))
      fail(errc::not_supported, node_name, {}, t + " '" + node_name + "' has no attribute '" + name + "'");
  }
  const auto input = [&](std::size_t i) { return i < ins.size() ? ins[i] : std::string(); };
  std::vector<std::string> inner{ins[0], ins[1], ins[2], input(3), input(4), input(5), lstm ? input(6) : std::string()};
  const std::string label = outputs[0].empty() ? node_name : outputs[0];
  attributes a = attrs;
  a.set("cell", t);
  // activation_alpha and activation_beta ride after B (and P), 6 values per direction (the
  // kernel's descriptor has no room for them): a constant of X's dtype the graph concatenates.
  std::vector<double> params;
  if (attrs.has("activation_alpha") || attrs.has("activation_beta")) {
    const std::int64_t dirs = attrs.get_string("direction", "forward") == "bidirectional" ? 2 : 1;
    params = graph_ops::recurrent_activation_params(node{"Recurrent", node_name, ins, outputs, a}, dirs);
  }
  if (!params.empty()) {
    const value_info r = g.value(ins[2]);
    const dtype type = g.value(ins[0]).type;
    const std::int64_t dirs = static_cast<std::int64_t>(params.size()) / kernels::recurrent::param_columns;
    if (r.shape.rank() != 3 || r.shape[0] != dirs)
      fail(errc::invalid_shape, node_name, ins[2],
           t + " '" + node_name + "': R must be [" + std::to_string(dirs) +
               ", gates * hidden_size, hidden_size], got " + shape_string(r.shape));
    const std::int64_t gates = t == "RNN" ? 1 : t == "GRU" ? 3 : 4, hidden = r.shape[2];
    if (hidden > (std::int64_t{1} << 32))
      fail(errc::invalid_shape, node_name, ins[2], t + " '" + node_name + "': hidden_size must be at most 2^32");
    std::string b = input(3);
    if (b.empty()) {
      tensor zeros(shape{dirs, 2 * gates * hidden}, type);
      for (std::int64_t i = 0; i < zeros.elements(); ++i) zeros.set(i, 0.0);
      b = g.add_constant(fresh(label + "/B"), std::move(zeros));
    } else if (const value_info& bv = g.value(b); !(bv.shape == shape{dirs, 2 * gates * hidden})) {
      fail(errc::invalid_shape, node_name, b,
           t + " '" + node_name + "': B must be " + shape_string(shape{dirs, 2 * gates * hidden}) + ", got " +
               shape_string(bv.shape));
    }
    tensor table(shape{dirs, kernels::recurrent::param_columns}, type);
    for (std::size_t i = 0; i < params.size(); ++i) table.set(static_cast<std::int64_t>(i), params[i]);
    std::vector<std::string> parts{b};
    if (lstm && !input(7).empty()) parts.push_back(input(7));  // P, checked below
    parts.push_back(g.add_constant(fresh(label + "/activation_params"), std::move(table)));
    if (lstm && !input(7).empty()) {
      const value_info p = g.value(input(7));
      if (!(p.shape == shape{dirs, 3 * hidden}))
        fail(errc::invalid_shape, node_name, p.name,
             "LSTM '" + node_name + "': P must be " + shape_string(shape{dirs, 3 * hidden}) + ", got " +
                 shape_string(p.shape));
    }
    const std::string packed = fresh(label + "/B_params");
    g.add_node("Concat", packed, parts, {packed}, {{"axis", std::int64_t{1}}});
    inner[3] = packed;
    a.set("activation_params", std::int64_t{1});
  } else if (lstm && !input(7).empty()) {
    const value_info r = g.value(ins[2]);
    const value_info p = g.value(input(7));
    if (r.shape.rank() != 3)
      fail(errc::invalid_shape, node_name, ins[2],
           "LSTM '" + node_name + "': R must be [num_directions, 4 * hidden_size, hidden_size], got " +
               shape_string(r.shape));
    const std::int64_t dirs = r.shape[0], hidden = r.shape[2];
    if (hidden > (std::int64_t{1} << 32))  // so that 8 * hidden and 3 * hidden cannot overflow
      fail(errc::invalid_shape, node_name, ins[2], "LSTM '" + node_name + "': hidden_size must be at most 2^32");
    if (!(p.shape == shape{dirs, 3 * hidden}))
      fail(errc::invalid_shape, node_name, p.name,
           "LSTM '" + node_name + "': P must be " + shape_string(shape{dirs, 3 * hidden}) + ", got " +
               shape_string(p.shape));
    std::string b = input(3);
    if (b.empty()) {
      tensor zeros(shape{dirs, 8 * hidden}, g.value(ins[0]).type);
      for (std::int64_t i = 0; i < zeros.elements(); ++i) zeros.set(i, 0.0);
      b = g.add_constant(fresh(label + "/B"), std::move(zeros));
    } else if (const value_info& bv = g.value(b); !(bv.shape == shape{dirs, 8 * hidden})) {
      fail(errc::invalid_shape, node_name, b,
           "LSTM '" + node_name + "': B must be " + shape_string(shape{dirs, 8 * hidden}) + ", got " +
               shape_string(bv.shape));
    }
    const std::string packed = fresh(label + "/B_P");
    g.add_node("Concat", packed, {b, input(7)}, {packed}, {{"axis", std::int64_t{1}}});
    inner[3] = packed;
  }
  while (inner.size() > 3 && inner.back().empty()) inner.pop_back();
  std::vector<std::string> named;
  static constexpr std::array<std::string_view, 3> tags{"Y", "Y_h", "Y_c"};
  for (std::size_t i = 0; i < outs; ++i)
    named.push_back(i < outputs.size() && !outputs[i].empty() ? outputs[i] : fresh(label + "/" + std::string(tags[i])));
  g.add_node("Recurrent", node_name, std::move(inner), std::move(named), std::move(a));
}

/// One step of a chain with several outputs: `to` empty is a fresh intermediate named after the
/// step; an output of the operator is written by a node named after the operator, the first
/// one's node carrying the operator's own name (node names are unique), the others' a fresh one
/// after it. An output the model leaves unnamed is a fresh intermediate too.
class multi_output_steps {
 public:
  multi_output_steps(graph& g, const std::string& node_name,
                     const std::function<std::string(const std::string&)>& fresh)
      : g_(g), node_name_(node_name), fresh_(fresh) {}
  std::string operator()(const std::string& type, const std::string& tag, std::vector<std::string> from,
                         const std::string& to = {}, attributes a = {}) {
    const std::string out = to.empty() ? fresh_(node_name_ + "/" + tag) : to;
    std::string name = out;
    if (!to.empty()) {
      name = named_ ? fresh_(node_name_ + "/" + tag) : node_name_;
      named_ = true;
    }
    g_.add_node(type, name, std::move(from), {out}, std::move(a));
    return out;
  }
  /// A scalar constant of dtype t.
  std::string scalar(const std::string& tag, double v, dtype t) {
    tensor c(shape{}, t);
    c.set(0, v);
    return g_.add_constant(fresh_(node_name_ + "/" + tag), std::move(c));
  }
  std::string cast(const std::string& tag, const std::string& from, dtype to, const std::string& out = {}) {
    if (g_.value(from).type == to && out.empty()) return from;
    return (*this)("Cast", tag, {from}, out, {{"to", onnx_code(to)}});
  }
  /// The last step of a chain computed in `computed`, into `out` of dtype `to`: the step itself
  /// when the two agree, else the step then a Cast of its result (tag + "_cast").
  std::string last(const std::string& type, const std::string& tag, std::vector<std::string> from, dtype computed,
                   dtype to, const std::string& out) {
    if (computed == to) return (*this)(type, tag, std::move(from), out);
    return cast(tag + "_cast", (*this)(type, tag, std::move(from)), to, out);
  }

 private:
  static std::int64_t onnx_code(dtype t) {
    for (std::int64_t c = 1; c <= 16; ++c)
      if (dtype_from_onnx(c) == t) return c;
    throw graph_error(make_error_code(errc::not_supported), {}, {},
                      "no ONNX data type for dtype " + std::string(to_string(t)));
  }
  graph& g_;
  const std::string& node_name_;
  const std::function<std::string(const std::string&)>& fresh_;
  bool named_ = false;
};

/// Pow whose exponent's dtype differs from the base's (onnx.ai/onnx/operators/onnx__Pow.html:
/// T for the base, T1 for the exponent, the output of T). ONNX's reference
/// (onnx/reference/ops/op_pow.py) is np.power(a, b).astype(a.dtype): NumPy computes in the
/// promoted type, float64 for a float base with any other exponent and for an integer base with
/// a float or uint64 exponent (uint64 and a signed type promote to float64), int64 for two
/// integers otherwise. The chain computes there and casts back: a float to an integer base
/// truncates toward zero, as astype does (beyond the range it saturates, where NumPy's result is
/// undefined), and an int64 power wraps into int32 as astype's two's complement does.
void add_mixed_pow(graph& g, const std::string& node_name, const std::vector<std::string>& ins, const std::string& y,
                   const std::function<std::string(const std::string&)>& fresh) {
  multi_output_steps step(g, node_name, fresh);
  const dtype a = g.value(ins[0]).type, b = g.value(ins[1]).type;
  const bool base_ok = is_float(a) || a == dtype::i32 || a == dtype::i64;
  if (!base_ok || (!is_float(b) && !is_integer(b)))
    fail(errc::invalid_dtype, node_name, base_ok ? ins[1] : ins[0],
         "Pow '" + node_name + "': the base must be float, int32 or int64 and the exponent a number, got " +
             std::string(to_string(a)) + " and " + std::string(to_string(b)));
  const bool integers = is_integer(a) && is_integer(b) && b != dtype::u64;
  const dtype wide = integers ? dtype::i64 : dtype::f64;
  const std::string p =
      step("Pow", "power", {step.cast("base_wide", ins[0], wide), step.cast("exponent_wide", ins[1], wide)},
           a == wide ? y : std::string());
  if (a == wide) return;
  if (integers) {
    // int64 to int32 as two's complement: ((p + 2^31) mod 2^32) - 2^31 is p's low 32 bits as a
    // signed value (the add may wrap in int64, which keeps every residue mod 2^32), then exact.
    const std::string low = step("Sub", "low_bits",
                                 {step("Mod", "residue",
                                       {step("Add", "offset", {p, step.scalar("half_range", 2147483648.0, wide)}),
                                        step.scalar("range", 4294967296.0, wide)}),
                                  step.scalar("half_range_back", 2147483648.0, wide)});
    step.cast("narrow", low, a, y);
    return;
  }
  step.cast("narrow", p, a, y);
}

/// The checks the training operators share: R a float scalar, T an int64 scalar, then `groups`
/// lists of n tensors each, the i-th of every list of the i-th X's shape and type; the outputs
/// are `outs` lists of n. Returns n.
std::size_t optimizer_groups(const graph& g, const std::string& t, const std::string& node_name,
                             const std::vector<std::string>& ins, const std::vector<std::string>& outputs,
                             std::size_t groups, std::size_t outs, const char* names) {
  const std::size_t n = ins.size() > 2 ? (ins.size() - 2) / groups : 0;
  if (n == 0 || ins.size() != 2 + groups * n)
    fail(errc::parse_error, node_name, {},
         t + " '" + node_name + "' takes R, T and " + names + ", " + std::to_string(groups) +
             " lists of one tensor per optimized tensor; got " + std::to_string(ins.size()) + " inputs");
  if (outputs.size() != outs * n)
    fail(errc::parse_error, node_name, {},
         t + " '" + node_name + "' has " + std::to_string(outs * n) + " outputs for its " + std::to_string(n) +
             " optimized tensors, got " + std::to_string(outputs.size()));
  for (const auto& i : ins)
    if (i.empty()) fail(errc::parse_error, node_name, {}, t + " '" + node_name + "': every input is required");
  const value_info& r = g.value(ins[0]);
  if (!is_float(r.type) || r.shape.elements() != 1)
    fail(r.shape.elements() != 1 ? errc::invalid_shape : errc::invalid_dtype, node_name, ins[0],
         t + " '" + node_name + "': R, the learning rate, must be a float scalar, got " +
             std::string(to_string(r.type)) + " " + shape_string(r.shape));
  const value_info& it = g.value(ins[1]);
  if (it.type != dtype::i64 || it.shape.elements() != 1)
    fail(it.shape.elements() != 1 ? errc::invalid_shape : errc::invalid_dtype, node_name, ins[1],
         t + " '" + node_name + "': T, the update count, must be an int64 scalar, got " +
             std::string(to_string(it.type)) + " " + shape_string(it.shape));
  for (std::size_t i = 0; i < n; ++i) {
    const value_info& x = g.value(ins[2 + i]);
    if (!is_float(x.type))
      fail(errc::invalid_dtype, node_name, x.name,
           t + " '" + node_name + "': the optimized tensor must be float, got " + std::string(to_string(x.type)));
    for (std::size_t k = 1; k < groups; ++k) {
      const value_info& v = g.value(ins[2 + k * n + i]);
      if (v.type != x.type || !(v.shape == x.shape))
        fail(v.type != x.type ? errc::invalid_dtype : errc::invalid_shape, node_name, v.name,
             t + " '" + node_name + "': '" + v.name + "' (" + std::string(to_string(v.type)) + " " +
                 shape_string(v.shape) + ") must have the type and shape of '" + x.name + "' (" +
                 std::string(to_string(x.type)) + " " + shape_string(x.shape) + ")");
    }
  }
  return n;
}

/// ONNX's training optimizers (domain ai.onnx.preview.training; onnx.ai/onnx/operators/
/// onnx_aionnxpreviewtraining_Adagrad.html, _Adam.html, _Momentum.html), each optimized tensor's
/// update a chain of elementwise steps written as the spec's formulas and ONNX's reference
/// (onnx/reference/ops/aionnxpreviewtraining/op_adagrad.py, op_adam.py, op_momentum.py) compute
/// them. The scalars derived from R and T (the decayed or bias-corrected learning rate) are
/// computed in float64, as the reference's NumPy promotes them, and cast to each X's type once.
void add_optimizer(graph& g, const std::string& t, const std::string& node_name, const std::vector<std::string>& ins,
                   const std::vector<std::string>& outputs, const attributes& attrs,
                   const std::function<std::string(const std::string&)>& fresh) {
  multi_output_steps step(g, node_name, fresh);
  const bool adam = t == "Adam", adagrad = t == "Adagrad";
  const std::size_t groups = adam ? 4 : 3, outs = adam ? 3 : 2;
  const std::size_t n = optimizer_groups(g, t, node_name, ins, outputs, groups, outs,
                                         adam      ? "X, G, V and H"
                                         : adagrad ? "X, G and H"
                                                   : "X, G and V");
  const auto attr = [&](const char* name, double fallback) {
    // Momentum's four attributes have no defaults in the spec.
    if (t == "Momentum" && !attrs.has(name))
      fail(errc::invalid_argument, node_name, {},
           "Momentum '" + node_name + "' needs the attribute '" + std::string(name) + "'");
    return attrs.get_float(name, fallback);
  };
  const double norm = attr("norm_coefficient", 0.0);
  const std::string mode = t == "Momentum" ? attrs.get_string("mode", "") : std::string();
  if (t == "Momentum" && mode != "standard" && mode != "nesterov")
    fail(errc::invalid_argument, node_name, {},
         "Momentum '" + node_name + "': mode must be \"standard\" or \"nesterov\", got \"" + mode + "\"");
  // R and T in float64.
  const std::string r64 = step.cast("r_f64", ins[0], dtype::f64);
  const std::string t64 = step.cast("t_f64", ins[1], dtype::f64);
  // T > 0, which Adam's bias correction and Momentum's gradient weight test.
  const std::string positive =
      adagrad ? std::string() : step("Greater", "t_positive", {ins[1], step.scalar("t_zero", 0.0, dtype::i64)});
  const auto d = [&](const std::string& tag, double v) { return step.scalar(tag, v, dtype::f64); };
  std::string rate;  // the learning rate this step applies, float64
  double alpha = 0, beta = 0, epsilon = 0;
  if (adagrad) {
    // r = R / (1 + T * decay_factor)
    const std::string decayed =
        step("Add", "decay_denominator",
             {d("one", 1.0), step("Mul", "t_decay", {t64, d("decay", attr("decay_factor", 0.0))})});
    rate = step("Div", "rate", {r64, decayed});
    epsilon = attrs.get_float("epsilon", 1e-6);
  } else if (adam) {
    // T > 0: R * sqrt(1 - beta^T) / (1 - alpha^T) (bias correction); T = 0: R.
    alpha = attrs.get_float("alpha", 0.9);
    beta = attrs.get_float("beta", 0.999);
    epsilon = attrs.get_float("epsilon", 1e-6);
    const std::string beta_t = step("Pow", "beta_t", {d("beta", beta), t64});
    const std::string alpha_t = step("Pow", "alpha_t", {d("alpha", alpha), t64});
    const std::string corrected = step(
        "Div", "corrected_rate",
        {step("Mul", "rate_sqrt", {r64, step("Sqrt", "sqrt_beta", {step("Sub", "one_beta", {d("one", 1.0), beta_t})})}),
         step("Sub", "one_alpha", {d("one_a", 1.0), alpha_t})});
    rate = step("Where", "rate", {positive, corrected, r64});
  } else {
    alpha = attr("alpha", 0.0);
    beta = attr("beta", 0.0);
    rate = r64;
  }
  // Momentum's gradient weight: beta once T > 0, 1 on the first update.
  const std::string beta_adjusted =
      t == "Momentum" ? step("Where", "beta_adjusted", {positive, d("beta", beta), d("one_b", 1.0)}) : std::string();
  for (std::size_t i = 0; i < n; ++i) {
    const std::string& x = ins[2 + i];
    const std::string& grad = ins[2 + n + i];
    const dtype xt = g.value(x).type;
    const std::string tag = std::to_string(i);
    const auto c = [&](const std::string& name, double v) { return step.scalar(name + tag, v, xt); };
    const auto out = [&](std::size_t k) { return outputs[k * n + i]; };
    // G_regularized = norm_coefficient * X + G
    const std::string gr =
        step("Add", "g_regularized" + tag, {step("Mul", "x_norm" + tag, {c("norm", norm), x}), grad});
    const std::string r = step.cast("rate_x" + tag, rate, xt);
    if (adagrad) {
      // H_new = H + G_r * G_r; X_new = X - r * G_r / (sqrt(H_new) + epsilon)
      const std::string& h = ins[2 + 2 * n + i];
      const std::string h_new = step("Add", "h_new" + tag, {h, step("Mul", "g_square" + tag, {gr, gr})}, out(1));
      const std::string h_adaptive =
          step("Add", "h_adaptive" + tag, {step("Sqrt", "h_sqrt" + tag, {h_new}), c("eps", epsilon)});
      step("Sub", "x_new" + tag, {x, step("Div", "x_step" + tag, {step("Mul", "rate_g" + tag, {r, gr}), h_adaptive})},
           out(0));
    } else if (adam) {
      // V_new = alpha * V + (1 - alpha) * G_r; H_new = beta * H + (1 - beta) * G_r^2;
      // X_new = (1 - norm_coefficient_post) * (X - r * V_new / (sqrt(H_new) + epsilon))
      const std::string& v = ins[2 + 2 * n + i];
      const std::string& h = ins[2 + 3 * n + i];
      const std::string v_new = step("Add", "v_new" + tag,
                                     {step("Mul", "v_alpha" + tag, {c("alpha", alpha), v}),
                                      step("Mul", "g_alpha" + tag, {c("one_alpha", 1.0 - alpha), gr})},
                                     out(1));
      const std::string h_new =
          step("Add", "h_new" + tag,
               {step("Mul", "h_beta" + tag, {c("beta", beta), h}),
                step("Mul", "g2_beta" + tag, {c("one_beta", 1.0 - beta), step("Mul", "g_square" + tag, {gr, gr})})},
               out(2));
      const std::string h_sqrt =
          step("Add", "h_sqrt_eps" + tag, {step("Sqrt", "h_sqrt" + tag, {h_new}), c("eps", epsilon)});
      const std::string x_new =
          step("Sub", "x_new" + tag, {x, step("Mul", "x_step" + tag, {r, step("Div", "v_h" + tag, {v_new, h_sqrt})})});
      step("Mul", "x_final" + tag, {c("post", 1.0 - attrs.get_float("norm_coefficient_post", 0.0)), x_new}, out(0));
    } else {
      // V_new = alpha * V + beta_adjusted * G_r; standard: X_new = X - R * V_new; nesterov:
      // X_new = X - R * (G_r + alpha * V_new).
      const std::string& v = ins[2 + 2 * n + i];
      const std::string v_new = step("Add", "v_new" + tag,
                                     {step("Mul", "v_alpha" + tag, {c("alpha", alpha), v}),
                                      step("Mul", "g_beta" + tag, {step.cast("beta_x" + tag, beta_adjusted, xt), gr})},
                                     out(1));
      const std::string dir =
          mode == "standard"
              ? v_new
              : step("Add", "nesterov" + tag, {gr, step("Mul", "v_new_alpha" + tag, {c("alpha_n", alpha), v_new})});
      step("Sub", "x_new" + tag, {x, step("Mul", "x_step" + tag, {r, dir})}, out(0));
    }
  }
}

/// BatchNormalization with training_mode = 1 (onnx.ai/onnx/operators/onnx__BatchNormalization.html,
/// opset 14 on; onnx/reference/ops/op_batch_normalization.py's _batchnorm_training_mode): the
/// batch's mean and population variance over every axis but the channel axis 1,
/// Y = scale * (X - mean) / sqrt(var + epsilon) + B, and the outputs running_mean =
/// input_mean * momentum + mean * (1 - momentum), running_var likewise with the variance.
void add_batchnorm_training(graph& g, const std::string& node_name, const std::vector<std::string>& ins,
                            const std::vector<std::string>& outputs, const attributes& attrs,
                            const std::function<std::string(const std::string&)>& fresh) {
  multi_output_steps step(g, node_name, fresh);
  if (ins.size() != 5 || std::any_of(ins.begin(), ins.end(), [](const std::string& s) { return s.empty(); }))
    fail(errc::parse_error, node_name, {},
         "BatchNormalization '" + node_name + "' takes X, scale, B, input_mean and input_var");
  if (outputs.empty() || outputs.size() > 3 || outputs[0].empty())
    fail(errc::parse_error, node_name, {},
         "BatchNormalization '" + node_name +
             "' in training mode has the outputs Y, running_mean and running_var, Y named");
  const value_info x = g.value(ins[0]);
  if (!is_float(x.type))
    fail(errc::invalid_dtype, node_name, ins[0],
         "BatchNormalization '" + node_name + "': X must be float, got " + std::string(to_string(x.type)));
  const std::size_t rank = x.shape.rank();
  if (rank < 2)
    fail(errc::invalid_shape, node_name, ins[0],
         "BatchNormalization '" + node_name + "': X must be [N, C, ...], got " + shape_string(x.shape));
  for (std::size_t i = 1; i < 5; ++i) {
    const value_info& p = g.value(ins[i]);
    if (p.type != x.type)
      fail(errc::invalid_dtype, node_name, p.name,
           "BatchNormalization '" + node_name + "': '" + p.name + "' must be " + std::string(to_string(x.type)) +
               " as X, got " + std::string(to_string(p.type)));
    if (!(p.shape == shape{x.shape[1]}))
      fail(errc::invalid_shape, node_name, p.name,
           "BatchNormalization '" + node_name + "': '" + p.name + "' must be [" + std::to_string(x.shape[1]) +
               "], got " + shape_string(p.shape));
  }
  const double momentum = attrs.get_float("momentum", 0.9), epsilon = attrs.get_float("epsilon", 1e-5);
  ints axes{0};
  for (std::size_t a = 2; a < rank; ++a) axes.push_back(static_cast<std::int64_t>(a));
  const attributes over{{"axes", axes}, {"keepdims", std::int64_t{1}}};
  const auto c = [&](const std::string& tag, double v) { return step.scalar(tag, v, x.type); };
  const std::string mean = step("ReduceMean", "mean", {ins[0]}, {}, over);
  const std::string centred = step("Sub", "centred", {ins[0], mean});
  const std::string var = step("ReduceMean", "var", {step("Mul", "square", {centred, centred})}, {}, over);
  // scale, B: [C] as [C, 1, ...], broadcasting over the axes after the channel's.
  std::vector<std::int64_t> per_channel(rank - 1, 1);
  per_channel[0] = -1;
  const std::string channel_shape = add_ints(g, fresh(node_name + "/channel_shape"), per_channel);
  const std::string scale = step("Reshape", "scale", {ins[1], channel_shape});
  const std::string bias = step("Reshape", "bias", {ins[2], channel_shape});
  const std::string std_dev = step("Sqrt", "std", {step("Add", "var_eps", {var, c("eps", epsilon)})});
  step("Add", "y", {step("Div", "normed", {step("Mul", "scaled", {scale, centred}), std_dev}), bias}, outputs[0]);
  const std::string flat = add_ints(g, fresh(node_name + "/flat_shape"), std::vector<std::int64_t>{x.shape[1]});
  for (std::size_t k = 1; k < outputs.size(); ++k) {
    if (outputs[k].empty()) continue;
    const std::string& running = ins[2 + k];
    const std::string stat = step("Reshape", k == 1 ? "mean_c" : "var_c", {k == 1 ? mean : var, flat});
    step("Add", k == 1 ? "running_mean" : "running_var",
         {step("Mul", k == 1 ? "kept_mean" : "kept_var", {running, c("momentum", momentum)}),
          step("Mul", k == 1 ? "batch_mean" : "batch_var", {stat, c("one_momentum", 1.0 - momentum)})},
         outputs[k]);
  }
}

/// The gradient operators of a transformer's layers, npurt's own after onnxruntime's training
/// operators of the same names: SoftmaxGrad(dY, Y) -> dX, GeluGrad(dY, X) -> dX and
/// LayerNormalizationGrad(dY, X, Scale[, Mean, InvStdDev]) -> (dX, dScale, dBias), each a chain
/// of elementwise steps and reductions. Everything is checked before the first step, so that a
/// refusal names the operator the user wrote rather than one of its steps.
void check_grad_operand(const std::string& what, const std::string& node_name, const value_info& dy,
                        const value_info& x, const char* x_word) {
  if (!is_float(x.type))
    fail(errc::invalid_dtype, node_name, x.name,
         what + x_word + " must be floating, got " + std::string(to_string(x.type)));
  if (dy.type != x.type)
    fail(errc::invalid_dtype, node_name, dy.name,
         what + "dY is " + std::string(to_string(dy.type)) + ", " + x_word + " " + std::string(to_string(x.type)));
  if (!(dy.shape == x.shape))
    fail(errc::invalid_shape, node_name, dy.name,
         what + "dY " + shape_string(dy.shape) + " is not " + x_word + "'s shape " + shape_string(x.shape));
}

// An axis attribute in [-rank, rank - 1], made non-negative.
std::int64_t grad_axis(const std::string& what, const std::string& node_name, const std::string& x, std::int64_t axis,
                       std::size_t rank) {
  const auto r = static_cast<std::int64_t>(rank);
  if (r == 0) fail(errc::invalid_shape, node_name, x, what + "'" + x + "' is a scalar, which has no axis");
  if (axis < -r || axis >= r)
    fail(errc::invalid_argument, node_name, x,
         what + "axis " + std::to_string(axis) + " is outside [" + std::to_string(-r) + ", " + std::to_string(r - 1) +
             "] for rank " + std::to_string(r));
  return axis < 0 ? axis + r : axis;
}

// The type a gradient chain of X's type computes in: float for float16 and bfloat16, whose
// intermediate sums and products would each round to the half type, as onnxruntime's and
// PyTorch's half kernels accumulate in float (PyTorch's at::opmath_type of Half and BFloat16);
// the result is cast back once.
dtype grad_compute_type(dtype x) { return x == dtype::f16 || x == dtype::bf16 ? dtype::f32 : x; }

// dX = Y ⊙ (dY − Σ_axis dY ⊙ Y): the Jacobian of softmax along the axis, diag(y) − y yᵀ, applied
// to dY (onnxruntime's SoftmaxGrad_13, opset 13's single axis). In float for half Y: Σ dY ⊙ Y
// rounded to the half type is off by up to half its ulp, which dY − Σ can cancel to far less.
void add_softmax_grad(graph& g, const std::string& node_name, const std::vector<std::string>& ins,
                      const std::vector<std::string>& outputs, const attributes& attrs,
                      const std::function<std::string(const std::string&)>& fresh) {
  const std::string what = "SoftmaxGrad '" + node_name + "': ";
  if (ins.size() != 2 || ins[0].empty() || ins[1].empty())
    fail(errc::invalid_argument, node_name, {}, what + "takes the inputs dY and Y (Softmax's output)");
  if (outputs.size() != 1 || outputs[0].empty())
    fail(errc::invalid_argument, node_name, {}, what + "has one output, dX, named");
  const value_info dy = g.value(ins[0]), y = g.value(ins[1]);
  check_grad_operand(what, node_name, dy, y, "Y");
  const std::int64_t axis = grad_axis(what, node_name, ins[1], attrs.get_int("axis", -1), y.shape.rank());
  const dtype ct = grad_compute_type(y.type);
  multi_output_steps step(g, node_name, fresh);
  const std::string dys = step.cast("dy_float", ins[0], ct), ys = step.cast("y_float", ins[1], ct);
  const std::string dot = step("ReduceSum", "dot", {step("Mul", "dy_y", {dys, ys})}, {},
                               {{"axes", ints{axis}}, {"keepdims", std::int64_t{1}}});
  step.last("Mul", "dx", {ys, step("Sub", "centred", {dys, dot})}, ct, y.type, outputs[0]);
}

// The derivative of Gelu times dY (onnxruntime's GeluGrad and, for approximate = "tanh",
// FastGeluGrad). Exact: Φ(x) + x·φ(x) with Φ(x) = (1 + erf(x/√2))/2 and φ(x) = e^(−x²/2)/√(2π).
// The tanh form differentiates the kernel library's 0.5·x·(1 + tanh(u)), u = k·(x + c·x³) with
// k = √(2/π) and c = 0.044715: 0.5·(1 + t) + 0.5·x·(1 − t²)·k·(1 + 3c·x²), t = tanh(u). In float
// for half X: near x = −0.75 both forms are two terms near 0.23 that cancel, each rounded to the
// half type off by far more than their difference's ulp.
void add_gelu_grad(graph& g, const std::string& node_name, const std::vector<std::string>& ins,
                   const std::vector<std::string>& outputs, const attributes& attrs,
                   const std::function<std::string(const std::string&)>& fresh) {
  const std::string what = "GeluGrad '" + node_name + "': ";
  if (ins.size() != 2 || ins[0].empty() || ins[1].empty())
    fail(errc::invalid_argument, node_name, {}, what + "takes the inputs dY and X (Gelu's input)");
  if (outputs.size() != 1 || outputs[0].empty())
    fail(errc::invalid_argument, node_name, {}, what + "has one output, dX, named");
  const value_info dy = g.value(ins[0]), x = g.value(ins[1]);
  const std::string mode = attrs.get_string("approximate", "none");
  if (mode != "none" && mode != "tanh")
    fail(errc::invalid_argument, node_name, ins[1], what + "approximate is \"none\" or \"tanh\", not \"" + mode + "\"");
  check_grad_operand(what, node_name, dy, x, "X");
  const dtype ct = grad_compute_type(x.type);
  multi_output_steps step(g, node_name, fresh);
  const auto c = [&](const std::string& tag, double v) { return step.scalar(tag, v, ct); };
  const std::string xn = step.cast("x_float", ins[1], ct);
  const std::string one = c("one", 1.0), half = c("half", 0.5), square = step("Mul", "square", {xn, xn});
  std::string slope;
  if (mode == "none") {
    const std::string erf = step("Erf", "erf", {step("Div", "scaled", {xn, c("sqrt2", std::sqrt(2.0))})});
    const std::string cdf = step("Mul", "cdf", {half, step("Add", "one_plus_erf", {one, erf})});
    const std::string gauss = step("Exp", "gauss", {step("Mul", "minus_half_square", {square, c("minus_half", -0.5)})});
    const std::string pdf = step("Mul", "pdf", {gauss, c("inv_sqrt_2pi", 1.0 / std::sqrt(2.0 * std::acos(-1.0)))});
    slope = step("Add", "slope", {cdf, step("Mul", "x_pdf", {xn, pdf})});
  } else {
    constexpr double k = 0.7978845608028654, cc = 0.044715;
    const std::string u = step("Mul", "u",
                               {step("Mul", "k_x", {xn, c("k", k)}),
                                step("Add", "one_plus_cx2", {one, step("Mul", "cx2", {square, c("c", cc)})})});
    const std::string t = step("Tanh", "tanh", {u});
    const std::string left = step("Mul", "half_one_plus_t", {half, step("Add", "one_plus_t", {one, t})});
    const std::string sech2 = step("Sub", "sech2", {one, step("Mul", "t2", {t, t})});
    const std::string du = step(
        "Mul", "du", {c("k", k), step("Add", "one_plus_3cx2", {one, step("Mul", "3cx2", {square, c("3c", 3 * cc)})})});
    const std::string right =
        step("Mul", "right", {step("Mul", "half_x", {half, xn}), step("Mul", "sech2_du", {sech2, du})});
    slope = step("Add", "slope", {left, right});
  }
  step.last("Mul", "dx", {step.cast("dy_float", ins[0], ct), slope}, ct, x.type, outputs[0]);
}

// LayerNormalization's gradient over the axes from `axis` on (D elements per row), in the stash
// type as the forward chain computes (float unless stash_type is X's own type). With x̂ = (x − μ)·r,
// r = 1/√(var + ε), and g = dY ⊙ Scale (the standard derivation, e.g. Ba, Kiros and Hinton,
// "Layer Normalization", 2016, differentiated by the chain rule):
//   dX = r · (g − mean(g) − x̂ · mean(g ⊙ x̂)), the means over the row;
//   dScale = Σ dY ⊙ x̂ and dBias = Σ dY over the leading axes.
// Mean and InvStdDev are the forward's outputs (both or neither: without them the chain
// recomputes them from X with epsilon). Any output may be left out (""), not all.
void add_layer_norm_grad(graph& g, const std::string& node_name, const std::vector<std::string>& ins,
                         const std::vector<std::string>& outputs, const attributes& attrs,
                         const std::function<std::string(const std::string&)>& fresh) {
  const std::string what = "LayerNormalizationGrad '" + node_name + "': ";
  const auto given = [&](std::size_t i) { return i < ins.size() && !ins[i].empty(); };
  if (ins.size() < 3 || ins.size() > 5 || !given(0) || !given(1) || !given(2))
    fail(errc::invalid_argument, node_name, {},
         what + "takes the inputs dY, X, Scale and optionally Mean and InvStdDev");
  if (given(3) != given(4))
    fail(errc::invalid_argument, node_name, given(3) ? ins[3] : ins[4],
         what + "takes Mean and InvStdDev together (or neither, to recompute them from X)");
  if (outputs.empty() || outputs.size() > 3 ||
      std::all_of(outputs.begin(), outputs.end(), [](const std::string& o) { return o.empty(); }))
    fail(errc::invalid_argument, node_name, {},
         what + "has the outputs dX, dScale and dBias (\"\" for one not wanted), one of them named at least");
  const value_info dy = g.value(ins[0]), x = g.value(ins[1]), scale = g.value(ins[2]);
  if (x.type != dtype::f32 && x.type != dtype::f16 && x.type != dtype::bf16)
    fail(errc::invalid_dtype, node_name, ins[1],
         what + "X must be float, float16 or bfloat16, got " + std::string(to_string(x.type)));
  check_grad_operand(what, node_name, dy, x, "X");
  const std::int64_t axis = grad_axis(what, node_name, ins[1], attrs.get_int("axis", -1), x.shape.rank());
  const double epsilon = attrs.get_float("epsilon", 1e-5);
  if (!(epsilon >= 0))
    fail(errc::invalid_argument, node_name, ins[1],
         what + "epsilon must not be negative, got " + std::to_string(epsilon));
  const std::int64_t stash = attrs.get_int("stash_type", 1);
  if (stash != 1 && !(stash == 10 && x.type == dtype::f16) && !(stash == 16 && x.type == dtype::bf16))
    fail(errc::not_supported, node_name, {},
         what + "stash_type " + std::to_string(stash) + " (float, or X's own type, is computed)");
  const dtype ct = stash == 1 ? dtype::f32 : x.type;
  const shape trailing(std::span<const std::int64_t>(x.shape.begin() + axis, x.shape.end()));
  if (scale.type != x.type)
    fail(errc::invalid_dtype, node_name, ins[2],
         what + "Scale is " + std::string(to_string(scale.type)) + ", X " + std::string(to_string(x.type)));
  if (!(scale.shape == trailing) && !(scale.shape.rank() == 1 && scale.shape[0] == trailing.elements()))
    fail(errc::invalid_shape, node_name, ins[2],
         what + "Scale must be " + shape_string(trailing) + " (X's shape from axis " + std::to_string(axis) +
             ") or its " + std::to_string(trailing.elements()) + " elements flat, got " + shape_string(scale.shape));
  // The statistics keep the normalised axes as 1, as the forward's Mean and InvStdDev outputs do.
  shape stats = x.shape;
  for (std::size_t d = static_cast<std::size_t>(axis); d < stats.rank(); ++d) stats[d] = 1;
  for (std::size_t i = 3; i < 5 && given(i); ++i) {
    const value_info& s = g.value(ins[i]);
    if (s.type != ct)
      fail(errc::invalid_dtype, node_name, ins[i],
           what + (i == 3 ? "Mean" : "InvStdDev") + " must be " + std::string(to_string(ct)) +
               " (the stash type), got " + std::string(to_string(s.type)));
    if (!(s.shape == stats))
      fail(errc::invalid_shape, node_name, ins[i],
           what + (i == 3 ? "Mean" : "InvStdDev") + " must be " + shape_string(stats) + ", got " +
               shape_string(s.shape));
  }
  const auto out = [&](std::size_t k) { return k < outputs.size() ? outputs[k] : std::string(); };
  multi_output_steps step(g, node_name, fresh);
  ints row, leading;
  for (std::int64_t d = 0; d < static_cast<std::int64_t>(x.shape.rank()); ++d) (d < axis ? leading : row).push_back(d);
  const attributes over_row{{"axes", row}, {"keepdims", std::int64_t{1}}};
  const std::string xs = step.cast("x_stash", ins[1], ct), dys = step.cast("dy_stash", ins[0], ct);
  std::string mean = given(3) ? ins[3] : step("ReduceMean", "mean", {xs}, {}, over_row);
  const std::string centred = step("Sub", "centred", {xs, mean});
  std::string inv = given(4) ? ins[4] : std::string();
  if (inv.empty()) {
    const std::string var = step("ReduceMean", "var", {step("Mul", "square", {centred, centred})}, {}, over_row);
    inv = step("Reciprocal", "inv_std_dev",
               {step("Sqrt", "std_dev", {step("Add", "var_eps", {var, step.scalar("epsilon", epsilon, ct)})})});
  }
  const std::string normed = step("Mul", "normalized", {centred, inv});
  if (!out(0).empty()) {
    std::string sc = step.cast("scale_stash", ins[2], ct);
    if (!(scale.shape == trailing))
      sc = step("Reshape", "scale",
                {sc, add_ints(g, fresh(node_name + "/scale_shape"),
                              std::span<const std::int64_t>(trailing.begin(), trailing.end()))});
    const std::string gy = step("Mul", "dy_scale", {dys, sc});
    const std::string m1 = step("ReduceMean", "dy_scale_mean", {gy}, {}, over_row);
    const std::string m2 =
        step("ReduceMean", "dy_scale_normed_mean", {step("Mul", "dy_scale_normed", {gy, normed})}, {}, over_row);
    const std::string inner =
        step("Sub", "inner", {step("Sub", "dy_scale_centred", {gy, m1}), step("Mul", "normed_m2", {normed, m2})});
    step.last("Mul", "dx", {inv, inner}, ct, x.type, out(0));
  }
  // dScale and dBias: summed over the leading axes to X's trailing shape, then Scale's shape and
  // dtype. With no leading axis (axis 0) there is nothing to sum.
  const auto per_parameter = [&](const std::string& tag, const std::string& v, const std::string& to) {
    const bool reshape = !(scale.shape == trailing), cast = ct != scale.type;
    std::string r = v;
    if (!leading.empty())
      r = step("ReduceSum", tag + "_sum", {v}, reshape || cast ? std::string() : to,
               {{"axes", leading}, {"keepdims", std::int64_t{0}}});
    else if (!reshape && !cast) r = step("Identity", tag, {v}, to);
    if (reshape)
      r = step(
          "Reshape", tag + "_flat",
          {r, add_ints(g, fresh(node_name + "/" + tag + "_shape"), std::vector<std::int64_t>{trailing.elements()})},
          cast ? std::string() : to);
    if (cast) step.cast(tag + "_cast", r, scale.type, to);
  };
  if (!out(1).empty()) per_parameter("dscale", step("Mul", "dy_normed", {dys, normed}), out(1));
  if (!out(2).empty()) per_parameter("dbias", dys, out(2));
}

/// QLinearMatMul and QLinearConv as onnx/reference/ops/op_qlinear_matmul.py and op_qlinear_conv.py
/// compute them: the integer product (MatMulInteger, ConvInteger, with ConvInteger's bias B added
/// in int32), the multiplier a_scale * b_scale / y_scale in the scales' float type, then
/// Requantize: round half to even of the product times the multiplier plus y_zero_point,
/// saturated to y_zero_point's dtype (a's when it is absent).
template <class Step>
void add_qlinear(graph& g, const std::string& t, const std::string& node_name, const std::vector<std::string>& ins,
                 const std::string& y, const attributes& attrs, Step&& step,
                 const std::function<std::string(const std::string&)>& fresh) {
  const bool conv = t == "QLinearConv";
  const auto input = [&](std::size_t i) { return i < ins.size() ? ins[i] : std::string(); };
  if (ins.size() < 8 || ins.size() > (conv ? 9u : 8u))
    fail(errc::parse_error, node_name, y,
         t + " '" + node_name + "' has the inputs a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, " +
             "y_zero_point" + (conv ? ", B" : ""));
  for (std::size_t i : {0u, 1u, 3u, 4u, 6u})
    if (input(i).empty())
      fail(errc::parse_error, node_name, y, t + " '" + node_name + "': input " + std::to_string(i) + " is required");
  // Copies: every step adds values to the graph, which may move the ones it holds.
  const dtype a_type = g.value(ins[0]).type;
  const bool a_per_axis = g.value(ins[1]).shape.elements() != 1, b_per_axis = g.value(ins[4]).shape.elements() != 1;
  attributes integer = attrs;
  std::string acc = step(conv ? "ConvInteger" : "MatMulInteger", "integer", {ins[0], ins[3], input(2), input(5)},
                         std::string(), std::move(integer));
  const shape out = g.value(acc).shape;
  const std::size_t rank = out.rank();
  // Each scale is one value or 1-D along the axis it quantizes: a's rows, b's columns, w's output
  // channels; y_scale is one value.
  const auto scale_shape = [&](std::size_t i, std::int64_t extent, std::string_view what) {
    const value_info v = g.value(ins[i]);
    if (!is_float(v.type) || v.type == dtype::f64)
      fail(errc::invalid_dtype, node_name, ins[i],
           t + " '" + node_name + "': scale '" + ins[i] + "' must be float, float16 or bfloat16, got " +
               std::string(to_string(v.type)));
    if (v.shape.elements() == 1 || (extent > 0 && v.shape.rank() == 1 && v.shape[0] == extent)) return;
    fail(errc::invalid_shape, node_name, ins[i],
         t + " '" + node_name + "': scale '" + ins[i] + "' " + shape_string(v.shape) + " must be one value" +
             (extent > 0 ? " or [" + std::to_string(extent) + "] (" + std::string(what) + ")" : std::string()));
  };
  scale_shape(1, conv ? 0 : out[rank - 2], "per row");
  scale_shape(4, conv ? out[1] : out[rank - 1], conv ? "per output channel" : "per column");
  scale_shape(6, 0, {});
  std::int64_t axis = 1;
  if (conv) {
    if (!input(8).empty()) {
      const value_info bias = g.value(ins[8]);
      const std::int64_t m = out[1];
      if (bias.type != dtype::i32 || !(bias.shape == shape{m}))
        fail(bias.type != dtype::i32 ? errc::invalid_dtype : errc::invalid_shape, node_name, ins[8],
             t + " '" + node_name + "': B '" + ins[8] + "' must be int32 [" + std::to_string(m) + "], got " +
                 std::string(to_string(bias.type)) + " " + shape_string(bias.shape));
      const std::int64_t per_channel[] = {1, m, 1, 1};
      const std::string shaped =
          step("Reshape", "bias_shaped", {ins[8], add_ints(g, fresh(y + "/bias_shape"), per_channel)});
      acc = step("Add", "biased", {acc, shaped});
    }
  } else {
    // A per-row a_scale and a per-column b_scale make a 2-D multiplier, which Requantize (one
    // value or one axis) does not take.
    if (a_per_axis && b_per_axis)
      fail(errc::not_supported, node_name, ins[1],
           t + " '" + node_name + "': a per-row a_scale '" + ins[1] + "' with a per-column b_scale '" + ins[4] +
               "' is not supported (a 2-D multiplier)");
    axis = static_cast<std::int64_t>(rank) - (a_per_axis ? 2 : 1);
  }
  const std::string multiplier = step("Div", "multiplier", {step("Mul", "scales", {ins[1], ins[4]}), ins[6]});
  std::string zp = input(7);
  if (zp.empty()) {
    tensor zero(shape{}, a_type);
    zero.set(0, 0.0);
    zp = g.add_constant(fresh(y + "/y_zero_point"), std::move(zero));
  }
  step("Requantize", "requantize", {acc, multiplier, zp}, y, attributes{{"axis", axis}});
}

}  // namespace

// The reductions the kernels lack as ReduceSum or ReduceMax with elementwise steps, Sum and Mean
// as Adds, PRelu, Tan and Cosh as elementwise steps, the two normalizations as ReduceMeans.
std::span<const std::string_view> composite_ops() noexcept {
  static constexpr std::string_view ops[] = {"ReduceSumSquare",
                                             "ReduceL1",
                                             "ReduceL2",
                                             "ReduceLogSum",
                                             "ReduceLogSumExp",
                                             "Sum",
                                             "Mean",
                                             "PRelu",
                                             "GlobalMaxPool",
                                             "Tan",
                                             "Cosh",
                                             "InstanceNormalization",
                                             "MeanVarianceNormalization",
                                             "Sinh",
                                             "Asinh",
                                             "Acosh",
                                             "Atanh",
                                             "Shrink",
                                             "DepthToSpace",
                                             "SpaceToDepth",
                                             "Hardmax",
                                             "Squeeze",
                                             "Unsqueeze",
                                             "SoftmaxCrossEntropyLoss",
                                             "DynamicQuantizeLinear",
                                             "EyeLike",
                                             "OneHot",
                                             "Einsum",
                                             "RNN",
                                             "GRU",
                                             "LSTM",
                                             "Adagrad",
                                             "Adam",
                                             "Momentum",
                                             "MaxUnpool",
                                             "QLinearMatMul",
                                             "QLinearConv",
                                             "SoftmaxGrad",
                                             "GeluGrad",
                                             "LayerNormalizationGrad"};
  return ops;
}

bool is_composite_op(std::string_view type) noexcept {
  const auto ops = composite_ops();
  return std::find(ops.begin(), ops.end(), type) != ops.end();
}

namespace {

// ReduceSum, ReduceMean, ReduceMax, ReduceMin or ReduceProd with noop_with_empty_axes = 1 and no
// axes (no attribute, and no axes input or a constant one of no elements): onnx.ai says the
// input is then not reduced and the output is the input, as ONNX's reference returns it.
bool reduces_nothing(const graph& g, std::string_view type, std::span<const std::string> inputs,
                     const attributes& attrs) {
  if (type != "ReduceSum" && type != "ReduceMean" && type != "ReduceMax" && type != "ReduceMin" && type != "ReduceProd")
    return false;
  if (attrs.get_int("noop_with_empty_axes", 0) == 0 || !attrs.get_ints("axes").empty()) return false;
  if (inputs.size() < 2 || inputs[1].empty()) return true;
  const tensor* axes = g.constant(inputs[1]);
  return axes && axes->elements() == 0;
}

}  // namespace

namespace {

// The begin and end pads of each spatial axis of a Conv (X [N, C, spatial...], W [M, C/g,
// kernel...]): its pads, or what auto_pad asks for (onnx.ai: an output extent of ceil(in /
// stride), the odd pad at the end for SAME_UPPER, at the start for SAME_LOWER). Null when the
// attributes are no geometry: the Conv node refuses them with its own message.
std::optional<ints> conv_pads(const attributes& attrs, const shape& x, const shape& w) try {
  if (x.rank() < 3 || w.rank() != x.rank()) return std::nullopt;
  const std::size_t r = x.rank() - 2;
  const ints strides = attrs.get_ints("strides", ints(r, 1)), dilations = attrs.get_ints("dilations", ints(r, 1));
  if (strides.size() != r || dilations.size() != r) return std::nullopt;
  constexpr std::int64_t window_max = std::numeric_limits<std::int32_t>::max();
  for (std::size_t i = 0; i < r; ++i)
    if (strides[i] < 1 || dilations[i] < 1 || w[2 + i] < 1 || strides[i] > window_max || dilations[i] > window_max ||
        w[2 + i] > window_max)
      return std::nullopt;
  const std::string auto_pad = attrs.get_string("auto_pad", "NOTSET");
  if (auto_pad == "VALID") return ints(2 * r, 0);
  if (auto_pad == "NOTSET") {
    ints pads = attrs.get_ints("pads", ints(2 * r, 0));
    if (pads.size() != 2 * r || std::any_of(pads.begin(), pads.end(), [](std::int64_t e) { return e < 0; }))
      return std::nullopt;
    return pads;
  }
  if (auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER") return std::nullopt;
  ints pads(2 * r);
  for (std::size_t i = 0; i < r; ++i) {
    const std::int64_t in = x[2 + i], s = strides[i];
    const std::int64_t total =
        std::max<std::int64_t>(((in + s - 1) / s - 1) * s + (w[2 + i] - 1) * dilations[i] + 1 - in, 0);
    pads[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
    pads[r + i] = total - pads[i];
  }
  return pads;
} catch (const error&) {
  return std::nullopt;  // an attribute of the wrong type
}

// Pads past the kernels' 32-bit windows, refused naming the node before a step is built (a Pad
// of 2^40 rows would otherwise fail later, as an internal step's allocation).
void check_pads(const ints& pads, const std::string& t, const std::string& node_name, const std::string& x) {
  constexpr std::int64_t window_max = std::numeric_limits<std::int32_t>::max();
  for (const std::int64_t p : pads)
    if (p > window_max)
      fail(errc::invalid_argument, node_name, x,
           t + " '" + node_name + "': pad " + std::to_string(p) + " of '" + x +
               "' is past 2^31 - 1, the largest the kernels take");
}

}  // namespace

bool added_as_chain(const graph& g, std::string_view type, std::span<const std::string> inputs,
                    std::span<const std::string> outputs, const attributes& attrs) {
  if (is_composite_op(type)) return true;
  if (type == "ConvTranspose") {
    // Only a geometry the checks accept, with both operands known: anything else is the node's
    // own to refuse, with its own message.
    const value_info* x = inputs.size() > 1 ? g.find(inputs[0]) : nullptr;
    const value_info* w = inputs.size() > 1 ? g.find(inputs[1]) : nullptr;
    if (!x || !w || !x->known || !w->known) return false;
    // 1-D and 3-D are chains around the 2-D kernel; the chain checks the operands.
    if (x->shape.rank() == 3 || x->shape.rank() == 5) return true;
    if (x->shape.rank() != 4 || w->shape.rank() != 4) return false;
    try {
      return graph_ops::conv_transpose_geom(
                 attrs, x->shape, w->shape,
                 [](errc e, const std::string& what) { throw graph_error(make_error_code(e), {}, {}, what); })
          .needs_crop();
    } catch (const graph_error&) { return false; }
  }
  if (type == "Conv") {
    // 1-D and 3-D are chains around the 2-D kernel; other ranks are the node's own to accept or
    // refuse.
    const value_info* x = inputs.size() > 1 ? g.find(inputs[0]) : nullptr;
    const value_info* w = inputs.size() > 1 ? g.find(inputs[1]) : nullptr;
    if (!x || !w || !x->known || !w->known) return false;
    if (x->shape.rank() == 3 || x->shape.rank() == 5) return true;
    // 2-D with pads the kernel cannot take (it pads both ends of an axis alike): a Pad first.
    const auto pads = x->shape.rank() == 4 ? conv_pads(attrs, x->shape, w->shape) : std::nullopt;
    return pads && ((*pads)[0] != (*pads)[2] || (*pads)[1] != (*pads)[3]);
  }
  if (type == "ConvInteger") {
    // 2-D with pads the kernel cannot take: a Pad first, as for Conv.
    const value_info* x = inputs.size() > 1 ? g.find(inputs[0]) : nullptr;
    const value_info* w = inputs.size() > 1 ? g.find(inputs[1]) : nullptr;
    if (!x || !w || !x->known || !w->known || x->shape.rank() != 4 || w->shape.rank() != 4) return false;
    const auto pads = conv_pads(attrs, x->shape, w->shape);
    return pads && ((*pads)[0] != (*pads)[2] || (*pads)[1] != (*pads)[3]);
  }
  if (type == "Dropout") return outputs.size() > 1 && !outputs[1].empty();  // its mask
  // The kernel computes the tanh approximation; the exact form (the default) is a chain of Erf.
  if (type == "Gelu") return attrs.get_string("approximate", "none") != "tanh";
  if (reduces_nothing(g, type, inputs, attrs)) return true;
  if (type == "Pow" && inputs.size() == 2) {
    // An exponent of another dtype than the base's: computed in NumPy's promoted type and cast.
    const value_info* a = g.find(inputs[0]);
    const value_info* b = g.find(inputs[1]);
    return a && b && a->known && b->known && a->type != b->type;
  }
  if (type == "BatchNormalization") return attrs.get_int("training_mode", 0) != 0;
  if (type == "LayerNormalization")
    return outputs.size() > 1 &&
           std::any_of(outputs.begin() + 1, outputs.end(), [](const std::string& o) { return !o.empty(); });
  if (type != "Clip" || inputs.empty()) return false;
  // The kernel's bounds are floats, which do not hold every int32 or int64: an integer Clip is
  // the exact integer Max and Min whatever its bounds.
  if (const value_info* x = g.find(inputs[0]); x && is_integer(x->type)) return true;
  return std::any_of(inputs.begin() + 1, inputs.end(),
                     [&g](const std::string& b) { return !b.empty() && g.find(b) && !g.constant(b); });
}

namespace {

/// ConvTranspose over 1 or 3 spatial axes (onnx.ai/onnx/operators/onnx__ConvTranspose.html) as a
/// chain around the 2-D one. The 2-D steps compute the full scatter (no pads, no output_padding),
/// of extent (in - 1) * stride + (k - 1) * dilation + 1 per axis; one Pad and one Slice then keep
/// ONNX's window [pad_begin, pad_begin + out) of it, zeros where the window passes its ends (an
/// output_padding, an output_shape larger than the scatter). So any pads, auto_pad or output_shape
/// ONNX allows is computed.
///   1-D: x [N, C, L] is [N, C, 1, L] and w [C, M/g, k] is [C, M/g, 1, k].
///   3-D: depth becomes batch, x [N, C, D, H, W] -> [N·D, C, H, W], and the depth taps become
///   output channels, w [C, M/g, kD, kH, kW] -> [C, (M/g)·kD, kH, kW] (a plain reshape, so that
///   with groups channel m·kD + kd is output channel m's tap kd). Tap kd of input depth d lands
///   at depth d·sD + kd·dD: each tap's slice is spread sD apart (a Pad after each depth), shifted
///   by kd·dD (a Pad before) and the taps are added.
template <class Step>
void add_conv_transpose_nd(graph& g, const std::string& node_name, const std::vector<std::string>& ins,
                           const std::string& y, const attributes& attrs,
                           const std::function<std::string(const std::string&)>& fresh, Step& step) {
  const std::string what = "ConvTranspose '" + node_name + "': ";
  if (ins.size() < 2 || ins[1].empty()) fail(errc::parse_error, node_name, y, what + "needs the inputs X and W");
  // Copies: the steps grow the graph's table of values.
  const value_info x = g.value(ins[0]), w = g.value(ins[1]);
  if (x.type != dtype::f32 && x.type != dtype::f16 && x.type != dtype::bf16 && x.type != dtype::f64)
    fail(errc::invalid_dtype, node_name, ins[0], what + "X must be floating, got " + std::string(to_string(x.type)));
  if (w.type != x.type)
    fail(errc::invalid_dtype, node_name, ins[1],
         what + "W is " + std::string(to_string(w.type)) + ", X " + std::string(to_string(x.type)));
  const std::int64_t group = attrs.get_int("group", 1);
  const std::size_t rank = x.shape.rank();
  if (w.shape.rank() != rank || group < 1 || x.shape[1] % group || w.shape[0] != x.shape[1])
    fail(errc::invalid_shape, node_name, ins[1],
         what + "weight must be [C, M/group, k...] for input " + shape_string(x.shape) + " and group " +
             std::to_string(group) + ", got " + shape_string(w.shape));
  const auto geo = graph_ops::conv_transpose_geom(
      attrs, x.shape, w.shape, [&](errc e, const std::string& why) { fail(e, node_name, ins[0], what + why); });
  const std::int64_t n = x.shape[0], c = x.shape[1], mg = w.shape[1], m = mg * group;
  std::string bias;
  if (ins.size() > 2 && !ins[2].empty()) {
    bias = ins[2];
    const value_info& b = g.value(bias);
    if (b.type != x.type || b.shape.rank() != 1 || b.shape[0] != m)
      fail(b.type != x.type ? errc::invalid_dtype : errc::invalid_shape, node_name, bias,
           what + "bias must be [" + std::to_string(m) + "] of X's dtype, got " + shape_string(b.shape) + " " +
               std::string(to_string(b.type)));
  }
  const auto ints_of = [&](const std::string& tag, std::vector<std::int64_t> v) {
    return add_ints(g, fresh(y + "/" + tag), v);
  };
  const auto reshape = [&](const std::string& tag, const std::string& from, std::vector<std::int64_t> to) {
    return step("Reshape", tag, {from, ints_of(tag + "_shape", std::move(to))});
  };
  const auto full = [&](std::size_t i) {
    return (x.shape[2 + i] - 1) * geo.stride[i] + (geo.kernel[i] - 1) * geo.dilation[i] + 1;
  };
  // The 2-D steps' attributes: strides, dilations and group over H and W, nothing cropped.
  const auto inner = [&](std::int64_t sh, std::int64_t sw, std::int64_t dh, std::int64_t dw) {
    return attributes{{"strides", ints{sh, sw}}, {"dilations", ints{dh, dw}}, {"group", group}};
  };
  std::string scattered;               // [N, M, extents...]: the full scatter, before ONNX's window
  std::vector<std::int64_t> extents;  // its spatial extents
  if (rank == 3) {
    const std::int64_t len = x.shape[2], k = w.shape[2];
    const std::string z = step("ConvTranspose", "scatter",
                               {reshape("x_2d", ins[0], {n, c, 1, len}), reshape("w_2d", ins[1], {c, mg, 1, k})}, {},
                               inner(1, geo.stride[0], 1, geo.dilation[0]));
    extents = {full(0)};
    scattered = reshape("scatter_1d", z, {n, m, full(0)});
  } else {
    const std::int64_t d = x.shape[2], h = x.shape[3], wd = x.shape[4];
    const std::int64_t kd = w.shape[2], kh = w.shape[3], kw = w.shape[4];
    const std::int64_t sd = geo.stride[0], dd = geo.dilation[0];
    const std::int64_t fh = full(1), fw = full(2);
    const std::string depth_major = step("Transpose", "depth_major", {ins[0]}, {}, {{"perm", ints{0, 2, 1, 3, 4}}});
    const std::string z =
        step("ConvTranspose", "scatter",
             {reshape("x_2d", depth_major, {n * d, c, h, wd}), reshape("w_2d", ins[1], {c, mg * kd, kh, kw})}, {},
             inner(geo.stride[1], geo.stride[2], geo.dilation[1], geo.dilation[2]));
    // z is [N, D, M, kD, fH·fW]; the depth scatter has extent D·sD + (kD − 1)·dD (a zero tail
    // of sD − 1 past the full scatter's).
    const std::int64_t plane = m * fh * fw, len = d * sd + (kd - 1) * dd;
    const std::string taps = reshape("taps", z, {n, d, m, kd, fh * fw});
    std::string sum;
    for (std::int64_t k = 0; k < kd; ++k) {
      const std::string tag = "tap" + std::to_string(k);
      std::string t = taps;
      if (kd > 1)
        t = step("Slice", tag,
                 {taps, ints_of(tag + "_start", {k}), ints_of(tag + "_end", {k + 1}), ints_of(tag + "_axis", {3})});
      t = reshape(tag + "_planes", t, {n, d, 1, plane});
      if (sd > 1) t = step("Pad", tag + "_spread", {t, ints_of(tag + "_spread_pads", {0, 0, 0, 0, 0, 0, sd - 1, 0})});
      t = reshape(tag + "_depth", t, {n, d * sd, plane});
      if (len != d * sd)
        t = step("Pad", tag + "_shift", {t, ints_of(tag + "_shift_pads", {0, k * dd, 0, 0, len - d * sd - k * dd, 0})});
      sum = sum.empty() ? t : step("Add", tag + "_sum", {sum, t});
    }
    scattered = step("Transpose", "channel_major", {reshape("depth_planes", sum, {n, len, m, fh, fw})}, {},
                     {{"perm", ints{0, 2, 1, 3, 4}}});
    extents = {len, fh, fw};
  }
  // ONNX's window [pad_begin, pad_begin + out) of each axis, zeros where it leaves the scatter.
  const std::size_t r = rank - 2;
  std::vector<std::int64_t> pads(2 * rank, 0), starts, ends, axes;
  bool padded = false, cropped = false;
  for (std::size_t i = 0; i < r; ++i) {
    const std::int64_t before = std::max<std::int64_t>(0, -geo.pad_begin[i]);
    const std::int64_t after = std::max<std::int64_t>(0, geo.pad_begin[i] + geo.out[i] - extents[i]);
    pads[2 + i] = before;
    pads[rank + 2 + i] = after;
    padded = padded || before > 0 || after > 0;
    const std::int64_t start = geo.pad_begin[i] + before;
    starts.push_back(start);
    ends.push_back(start + geo.out[i]);
    axes.push_back(static_cast<std::int64_t>(2 + i));
    cropped = cropped || start != 0 || geo.out[i] != extents[i] + before + after;
  }
  std::string out = scattered;
  if (padded) out = step("Pad", "window_pad", {out, ints_of("window_pads", pads)});
  const std::string last = bias.empty() ? y : std::string();
  if (cropped)
    out =
        step("Slice", "window",
             {out, ints_of("window_starts", starts), ints_of("window_ends", ends), ints_of("window_axes", axes)}, last);
  else if (bias.empty()) out = step("Identity", "window", {out}, y);
  if (!bias.empty()) {
    std::vector<std::int64_t> per_channel(rank - 1, 1);
    per_channel[0] = m;
    step("Add", "bias", {out, reshape("bias_channels", bias, per_channel)}, y);
  }
}

void add_steps(graph& g, std::string_view type, const std::string& node_name, const std::vector<std::string>& ins,
               const std::vector<std::string>& outputs, const attributes& attrs,
               const std::function<std::string(const std::string&)>& fresh) {
  const std::string t(type);
  if (t == "RNN" || t == "GRU" || t == "LSTM") {
    add_recurrent(g, t, node_name, ins, outputs, attrs, fresh);
    return;
  }
  if (t == "Adagrad" || t == "Adam" || t == "Momentum") {
    add_optimizer(g, t, node_name, ins, outputs, attrs, fresh);
    return;
  }
  if (t == "BatchNormalization") {
    add_batchnorm_training(g, node_name, ins, outputs, attrs, fresh);
    return;
  }
  if (t == "SoftmaxGrad") {
    add_softmax_grad(g, node_name, ins, outputs, attrs, fresh);
    return;
  }
  if (t == "GeluGrad") {
    add_gelu_grad(g, node_name, ins, outputs, attrs, fresh);
    return;
  }
  if (t == "LayerNormalizationGrad") {
    add_layer_norm_grad(g, node_name, ins, outputs, attrs, fresh);
    return;
  }
  if (t == "Pow") {
    if (outputs.size() != 1 || outputs[0].empty() || ins.size() != 2)
      fail(errc::parse_error, node_name, {}, "Pow '" + node_name + "' takes X and Y and has one output Z");
    if (!attrs.items().empty()) fail(errc::not_supported, node_name, {}, "Pow '" + node_name + "' has no attributes");
    add_mixed_pow(g, node_name, ins, outputs[0], fresh);
    return;
  }
  if (t == "LayerNormalization") {
    if (outputs.empty() || outputs.size() > 3 || outputs[0].empty())
      fail(errc::parse_error, node_name, {},
           "LayerNormalization '" + node_name + "' has the outputs Y, Mean and InvStdDev, Y named");
  } else if (t == "SoftmaxCrossEntropyLoss") {
    if (outputs.empty() || outputs.size() > 2 || outputs[0].empty())
      fail(errc::parse_error, node_name, {},
           "SoftmaxCrossEntropyLoss '" + node_name + "' has the outputs output and log_prob, output named");
  } else if (t == "Dropout") {
    if (outputs.size() != 2 || outputs[0].empty() || outputs[1].empty())
      fail(errc::parse_error, node_name, {}, "Dropout '" + node_name + "' has the outputs output and mask, both named");
  } else if (t == "DynamicQuantizeLinear") {
    if (outputs.empty() || outputs.size() > 3 || outputs[0].empty())
      fail(errc::parse_error, node_name, {},
           "DynamicQuantizeLinear '" + node_name + "' has the outputs y, y_scale and y_zero_point, y named");
  } else if (outputs.size() != 1 || outputs[0].empty()) {
    fail(errc::parse_error, node_name, {}, t + " '" + node_name + "' needs exactly one named output");
  }
  const std::string& y = outputs[0];
  if (ins.empty() || ins[0].empty()) fail(errc::parse_error, node_name, y, t + " '" + node_name + "' has no input");
  // One step of the chain: `to` empty is a fresh intermediate, named after the step. The step
  // writing the output carries the model's node name, so its errors name the node the user wrote.
  auto step = [&](const std::string& type, const std::string& tag, std::vector<std::string> from,
                  const std::string& to = {}, attributes a = {}) {
    const std::string out = to.empty() ? fresh(y + "/" + tag) : to;
    g.add_node(type, to.empty() ? out : node_name, std::move(from), {out}, std::move(a));
    return out;
  };
  if (t == "Einsum") {
    add_einsum(g, node_name, ins, y, attrs,
               {[&](const std::string& type, const std::string& tag, std::vector<std::string> from,
                    const std::string& to, attributes a) { return step(type, tag, std::move(from), to, std::move(a)); },
                [&](const std::string& tag, std::span<const std::int64_t> v) {
                  return add_ints(g, fresh(y + "/" + tag), v);
                }});
    return;
  }
  if (t == "Dropout") {
    // The output is the Dropout node's (which refuses what it cannot compute: training mode with
    // a nonzero ratio drops at random); what it computes drops nothing, so the mask is all true,
    // as ONNX's reference returns it: a true scalar expanded to X's shape.
    step("Dropout", "dropout", ins, y, attrs);
    tensor yes(shape{}, dtype::boolean);
    yes.set(0, 1);
    const std::string one = g.add_constant(fresh(y + "/true"), std::move(yes));
    const shape xs = g.value(ins[0]).shape;
    const std::string dims = add_ints(g, fresh(y + "/shape"), xs);
    g.add_node("Expand", fresh(node_name + "/mask"), {one, dims}, {outputs[1]});
    return;
  }
  if (t == "QLinearMatMul" || t == "QLinearConv") {
    add_qlinear(g, t, node_name, ins, y, attrs, step, fresh);
    return;
  }
  if (t == "Clip") {
    // The kernel's bounds are scalars fixed when it is compiled; bounds known only at run time
    // are the broadcasting Max and Min, which clip alike (numpy.clip is the same pair).
    const bool has_min = ins.size() > 1 && !ins[1].empty(), has_max = ins.size() > 2 && !ins[2].empty();
    for (std::size_t i = 1; i < std::min<std::size_t>(ins.size(), 3); ++i)
      if (!ins[i].empty() && g.value(ins[i]).shape.elements() != 1)
        fail(errc::invalid_shape, node_name, ins[i],
             "Clip '" + node_name + "': bound '" + ins[i] + "' has shape " + shape_string(g.value(ins[i]).shape) +
                 ", not one element");
    std::string acc = ins[0];
    if (has_min) acc = step("Max", "min", {acc, ins[1]}, has_max ? std::string() : y, attrs);
    if (has_max) step("Min", "max", {acc, ins[2]}, y, attrs);
    if (!has_min && !has_max) step("Identity", "unbounded", {acc}, y, attrs);  // an integer Clip without bounds
    return;
  }
  // A scalar of x's dtype, for the steps that scale or compare with a number.
  auto scalar = [&](const std::string& tag, double v) {
    tensor c(shape{}, g.value(ins[0]).type);
    c.set(0, v);
    return g.add_constant(fresh(y + "/" + tag), std::move(c));
  };
  if (reduces_nothing(g, t, ins, attrs)) {
    // Only the input is read; the (empty) axes are not an operand of the Identity.
    step("Identity", "noop", {ins[0]}, y);
    return;
  }
  if (t == "Gelu") {
    // approximate = "none": 0.5 · x · (1 + erf(x / √2)), in the order of ONNX's reference
    // (onnx/reference/ops/op_gelu.py), each step rounded to x's dtype.
    const std::string mode = attrs.get_string("approximate", "none");
    if (mode != "none")
      fail(errc::invalid_argument, node_name, ins[0],
           "Gelu '" + node_name + "': approximate is \"none\" or \"tanh\", not \"" + mode + "\"");
    if (!is_float(g.value(ins[0]).type))
      fail(
          errc::invalid_dtype, node_name, ins[0],
          "Gelu '" + node_name + "' needs a floating-point input, got " + std::string(to_string(g.value(ins[0]).type)));
    const std::string e = step("Erf", "erf", {step("Div", "scaled", {ins[0], scalar("sqrt2", std::sqrt(2.0))})});
    step("Mul", "gelu",
         {step("Mul", "half_x", {scalar("half", 0.5), ins[0]}), step("Add", "one_plus", {scalar("one", 1), e})}, y);
    return;
  }
  if (t == "Sum" || t == "Mean") {
    // Neither has attributes: any the model gives reach Add (or Identity), which refuses them.
    const std::string to = t == "Sum" ? y : std::string();
    std::string acc = ins.size() == 1 ? step("Identity", "identity", ins, to, attrs) : ins[0];
    for (std::size_t i = 1; i < ins.size(); ++i)
      acc = step("Add", "add" + std::to_string(i), {acc, ins[i]}, i + 1 == ins.size() ? to : std::string(), attrs);
    if (t == "Mean") step("Div", "mean", {acc, scalar("count", static_cast<double>(ins.size()))}, y);
    return;
  }
  if (t == "PRelu") {
    // x where x > 0, slope * x elsewhere, slope broadcast to X.
    if (ins.size() != 2 || ins[1].empty())
      fail(errc::parse_error, node_name, y, "PRelu '" + node_name + "' needs the inputs X and slope");
    // ONNX's PRelu broadcasts slope to X unidirectionally (onnx.ai, Broadcasting.md): aligned on
    // the right, each of slope's dimensions is 1 or X's, and slope has no more dimensions than X.
    // Checked before the chain, whose Mul would otherwise refuse a per-channel slope of the wrong
    // size under the name of one of its own steps.
    const value_info& xv = g.value(ins[0]);
    const value_info& sv = g.value(ins[1]);
    const shape& xs = xv.shape;
    const shape& ss = sv.shape;
    bool fits = !xv.known || !sv.known || ss.rank() <= xs.rank();
    for (std::size_t i = 0; fits && xv.known && sv.known && i < ss.rank(); ++i) {
      const auto sd = ss[ss.rank() - 1 - i], xd = xs[xs.rank() - 1 - i];
      fits = sd == 1 || sd == xd;
    }
    if (!fits)
      fail(errc::invalid_shape, node_name, ins[1],
           "PRelu '" + node_name + "': slope '" + ins[1] + "' of shape " + shape_string(ss) +
               " does not broadcast to X '" + ins[0] + "' of shape " + shape_string(xs) +
               " (ONNX broadcasts slope to X only: aligned on the right, each of its dimensions must be 1 or "
               "X's, and it has at most X's rank)");
    const std::string neg = step("Mul", "scaled", {step("Min", "negative", {ins[0], scalar("zero", 0)}), ins[1]});
    step("Add", "prelu", {step("Relu", "positive", {ins[0]}), neg}, y, attrs);
    return;
  }
  if (t == "GlobalMaxPool") {
    const auto rank = g.value(ins[0]).shape.rank();
    if (rank < 3)
      fail(errc::invalid_shape, node_name, ins[0],
           "GlobalMaxPool '" + node_name + "' needs N, C and a spatial dimension, got rank " + std::to_string(rank));
    ints axes;
    for (std::size_t d = 2; d < rank; ++d) axes.push_back(static_cast<std::int64_t>(d));
    attributes a = attrs;
    a.set("axes", axes);
    a.set("keepdims", std::int64_t{1});
    step("ReduceMax", "max", {ins[0]}, y, std::move(a));
    return;
  }
  if (t == "InstanceNormalization" || t == "MeanVarianceNormalization") {
    const bool instance = t == "InstanceNormalization";
    for (const auto& [name, value] : attrs.items())
      if (name != (instance ? "epsilon" : "axes"))
        fail(errc::not_supported, node_name, {},
             t + " '" + node_name + "': attribute '" + name + "' is not one of " + t + "'s");
    const auto rank = g.value(ins[0]).shape.rank();
    if (instance && (rank < 3 || ins.size() != 3 || ins[1].empty() || ins[2].empty()))
      fail(rank < 3 ? errc::invalid_shape : errc::parse_error, node_name, ins[0],
           "InstanceNormalization '" + node_name + "' needs input, scale and B, the input of rank 3 or more");
    ints axes = attrs.get_ints("axes", instance ? ints{} : ints{0, 2, 3});
    if (instance)
      for (std::size_t d = 2; d < rank; ++d) axes.push_back(static_cast<std::int64_t>(d));
    const attributes over{{"axes", axes}, {"keepdims", std::int64_t{1}}};
    const std::string centred = step("Sub", "centred", {ins[0], step("ReduceMean", "mean", {ins[0]}, {}, over)});
    const std::string var = step("ReduceMean", "var", {step("Mul", "square", {centred, centred})}, {}, over);
    if (!instance) {
      // ONNX's function adds its epsilon to the deviation, not to the variance.
      step("Div", "mvn", {centred, step("Add", "std_eps", {step("Sqrt", "std", {var}), scalar("eps", 1e-9)})}, y);
      return;
    }
    const std::string std_dev =
        step("Sqrt", "std", {step("Add", "var_eps", {var, scalar("eps", attrs.get_float("epsilon", 1e-5))})});
    const std::string normed = step("Div", "normed", {centred, std_dev});
    // scale and B are per channel: [C] as [C, 1, ...] broadcasts over the spatial axes.
    std::vector<std::int64_t> per_channel(rank - 1, 1);
    per_channel[0] = -1;
    const std::string channel_shape = add_ints(g, fresh(y + "/channel_shape"), per_channel);
    const std::string scale = step("Reshape", "scale", {ins[1], channel_shape});
    const std::string bias = step("Reshape", "bias", {ins[2], channel_shape});
    step("Add", "instance_norm", {step("Mul", "scaled", {normed, scale}), bias}, y);
    return;
  }
  if (t == "LayerNormalization") {
    add_layer_norm(g, node_name, ins, outputs, attrs, fresh, step);
    return;
  }
  if (t == "SoftmaxCrossEntropyLoss") {
    // onnx.ai's function: log_prob = LogSoftmax(scores) over the class axis 1, then
    // NegativeLogLikelihoodLoss of it with the labels and weights, which checks the reduction
    // and ignore_index it is given.
    if (ins.size() < 2 || ins[1].empty())
      fail(errc::parse_error, node_name, y, "SoftmaxCrossEntropyLoss '" + node_name + "' needs scores and labels");
    const bool named = outputs.size() > 1 && !outputs[1].empty();
    const std::string log_prob = named ? outputs[1] : fresh(y + "/log_prob");
    g.add_node("LogSoftmax", named ? fresh(y + "/log_prob") : log_prob, {ins[0]}, {log_prob},
               {{"axis", std::int64_t{1}}});
    std::vector<std::string> nll{log_prob, ins[1]};
    if (ins.size() > 2 && !ins[2].empty()) nll.push_back(ins[2]);
    step("NegativeLogLikelihoodLoss", "loss", nll, y, attrs);
    return;
  }
  if (t == "Tan") {
    step("Div", "tan", {step("Sin", "sin", {ins[0]}), step("Cos", "cos", {ins[0]})}, y, attrs);
    return;
  }
  // cosh(x) as 0.5·e^(x/2)·e^(x/2) + 0.5·e^(−x/2)·e^(−x/2): the same value as (e^x + e^−x) / 2,
  // but each exponential is at most the square root of the result, so nothing overflows before
  // cosh itself does (e^x alone overflows from x ≈ 88.7 in float, cosh only from x ≈ 89.4).
  // The two terms add, so nothing cancels.
  auto cosh_of = [&](const std::string& tag, const std::string& x) {
    const std::string e = step("Exp", tag + "_exp", {step("Mul", tag + "_halfx", {x, scalar(tag + "_h", 0.5)})});
    const std::string f =
        step("Exp", tag + "_exp_neg", {step("Mul", tag + "_neg_halfx", {x, scalar(tag + "_nh", -0.5)})});
    const std::string half = scalar(tag + "_half", 0.5);
    return std::pair{step("Mul", tag + "_hi", {step("Mul", tag + "_e_half", {e, half}), e}),
                     step("Mul", tag + "_lo", {step("Mul", tag + "_f_half", {f, half}), f})};
  };
  if (t == "Cosh") {
    const auto [hi, lo] = cosh_of("cosh", ins[0]);
    step("Add", "sum", {hi, lo}, y, attrs);
    return;
  }
  if (t == "Sinh") {
    // cosh(x) · tanh(x): the difference of the exponentials loses every digit near 0, where this
    // product keeps each factor's relative precision.
    const auto [hi, lo] = cosh_of("cosh", ins[0]);
    step("Mul", "sinh", {step("Add", "cosh", {hi, lo}), step("Tanh", "tanh", {ins[0]})}, y, attrs);
    return;
  }
  // log(1 + u) without losing u's low digits where 1 + u rounds them away (Kahan's log1p:
  // u · log(w) / (w − 1) with w the rounded 1 + u; see D. Goldberg, "What every computer
  // scientist should know about floating-point arithmetic", 1991, theorem 4). Where w rounds
  // to 1 the result is u itself; the two cases are selected with masks, the chain having no
  // branch: Sign(|w − 1|) is 1 where w differs from 1, 0 where it does not.
  auto log1p = [&](const std::string& tag, const std::string& u) {
    const std::string one = scalar(tag + "_one", 1);
    const std::string w = step("Add", tag + "_w", {one, u});
    const std::string w_minus_one = step("Sub", tag + "_w_minus_one", {w, one});
    const std::string moved = step("Sign", tag + "_moved", {step("Abs", tag + "_abs", {w_minus_one})});
    const std::string stayed = step("Sub", tag + "_stayed", {one, moved});
    const std::string ratio =
        step("Div", tag + "_ratio", {step("Log", tag + "_log", {w}), step("Add", tag + "_den", {w_minus_one, stayed})});
    const std::string kahan = step("Mul", tag + "_kahan", {step("Mul", tag + "_scaled", {u, ratio}), moved});
    return step("Add", tag, {kahan, step("Mul", tag + "_small", {u, stayed})});
  };
  // Where u = x + ... is past the largest finite value while the result is not (x within a
  // factor 2 of it), log(1 + u) = log(x) + log 2 to the type's precision: chosen by mask.
  // log1p(u) for u = |x| + ... ≥ |x|: where u is past the largest finite value while the
  // result is not (|x| within a factor 2 of it), log(1 + u) = log|x| + log 2 to the type's
  // precision, chosen by mask.
  auto log1p_of_sum = [&](const std::string& u, const std::string& x, const std::string& to, attributes a) {
    // An infinite x too: its u may be NaN (∞/∞ inside), its result is the far branch's.
    const std::string big = step("Or", "big", {step("IsInf", "u_inf", {u}), step("IsInf", "x_inf", {x})});
    const std::string far = step("Add", "log_2x", {step("Log", "log_x", {x}), scalar("ln2", std::log(2.0))});
    return step("Where", "log", {big, far, log1p("log1p", u)}, to, std::move(a));
  };
  if (t == "Asinh") {
    // sign(x) · log1p(|x| + x² / (1 + sqrt(1 + x²))): odd by construction, so negative x does
    // not cancel, and log1p keeps the precision near 0. x² / (1 + sqrt(1 + x²)) is computed as
    // |x| · (|x| / (1 + r)) with r = m · sqrt((1/m)² + (|x|/m)²), m = max(|x|, 1) (hypot's
    // scaling), so that nothing squares a large |x| into overflow.
    const std::string a = step("Abs", "abs", {ins[0]});
    const std::string one = scalar("one", 1);
    const std::string m = step("Max", "scale", {a, one});
    const std::string inv = step("Div", "inv", {one, m}), q = step("Div", "scaled", {a, m});
    const std::string r =
        step("Mul", "root",
             {m, step("Sqrt", "sqrt",
                      {step("Add", "sum_sq", {step("Mul", "inv_sq", {inv, inv}), step("Mul", "q_sq", {q, q})})})});
    const std::string tail = step("Mul", "tail", {a, step("Div", "ratio", {a, step("Add", "den", {one, r})})});
    const std::string l = log1p_of_sum(step("Add", "u", {a, tail}), a, {}, {});
    step("Mul", "asinh", {step("Sign", "sign", {ins[0]}), l}, y, attrs);
    return;
  }
  if (t == "Acosh") {
    // log1p((x − 1) + sqrt(x − 1) · sqrt(x + 1)): x − 1 is exact near 1 (Sterbenz), where
    // log(x + sqrt(x² − 1)) loses digits, and nothing squares a large x into overflow. Below 1
    // the root is NaN, as acosh is there.
    const std::string one = scalar("one", 1);
    const std::string tm = step("Sub", "minus_one", {ins[0], one});
    const std::string root =
        step("Mul", "root",
             {step("Sqrt", "sqrt_lo", {tm}), step("Sqrt", "sqrt_hi", {step("Add", "plus_one", {ins[0], one})})});
    log1p_of_sum(step("Add", "u", {tm, root}), ins[0], y, attrs);
    return;
  }
  if (t == "Atanh") {
    // (log1p(x) − log1p(−x)) / 2: the two terms have opposite signs, so nothing cancels near 0;
    // ±1 give ±inf (log1p(−1) is −inf) and beyond NaN, as atanh does.
    const std::string diff =
        step("Sub", "diff", {log1p("log1p_x", ins[0]), log1p("log1p_neg", step("Neg", "neg", {ins[0]}))});
    step("Mul", "atanh", {diff, scalar("half", 0.5)}, y, attrs);
    return;
  }
  if (t == "Conv" && g.value(ins[0]).shape.rank() == 5) {
    // Over three spatial axes (onnx.ai's Conv on X [N, C, D, H, W]): output depth od sums, over
    // the depth taps kd, the 2-D convolutions of input depth od·sD + kd·dD (after the depth pads)
    // with W's tap kd. Depth goes into the batch: for each tap a strided Slice of the depths it
    // reads, [N, OD, C, H, W] as [N·OD, C, H, W], convolved with W[:, :, kd] as [M, C/g, kH, kW]
    // (the bias with the first tap only), the taps added, and [N·OD, M, OH, OW] read back as
    // [N, M, OD, OH, OW].
    const std::string what = "Conv '" + node_name + "': ";
    if (ins.size() < 2 || ins[1].empty()) fail(errc::parse_error, node_name, y, what + "needs the inputs X and W");
    const value_info x = g.value(ins[0]), w = g.value(ins[1]);  // copies: the steps grow the table
    if (w.shape.rank() != 5)
      fail(errc::invalid_shape, node_name, ins[1],
           what + "W '" + ins[1] + "' must be [M, C/group, kD, kH, kW] for the 3-D input " + shape_string(x.shape) +
               ", got " + shape_string(w.shape));
    for (std::size_t i = 2; i < 5; ++i)
      if (w.shape[i] > std::numeric_limits<std::int32_t>::max())
        fail(errc::invalid_shape, node_name, ins[1],
             what + "W '" + ins[1] + "' " + shape_string(w.shape) + " has a kernel extent past 2^31 - 1");
    const auto per_axis = [&](const char* name, std::size_t want, std::int64_t fallback) {
      ints v = attrs.get_ints(name);
      if (!attrs.has(name)) v.assign(want, fallback);
      if (v.size() != want)
        fail(errc::invalid_argument, node_name, ins[0],
             what + name + " has " + std::to_string(v.size()) + " values, the 3-D input '" + ins[0] + "' " +
                 shape_string(x.shape) + " takes " + std::to_string(want));
      // Bounded as the 2-D kernel bounds them, so that the depth arithmetic below cannot overflow.
      constexpr std::int64_t most = std::numeric_limits<std::int32_t>::max();
      for (auto e : v)
        if (e > most || (std::string_view(name) == "pads" ? e < 0 : e < 1))
          fail(errc::invalid_argument, node_name, ins[0],
               what + name + " of '" + ins[0] + "' has the value " + std::to_string(e) + " (outside [" +
                   (std::string_view(name) == "pads" ? "0" : "1") + ", " + std::to_string(most) + "])");
      return v;
    };
    const ints strides = per_axis("strides", 3, 1), dilations = per_axis("dilations", 3, 1);
    ints pads = per_axis("pads", 6, 0);
    const std::int64_t kd = w.shape[2], n = x.shape[0], c = x.shape[1];
    const std::string auto_pad = attrs.get_string("auto_pad", "NOTSET");
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      // onnx.ai: the output extent is ceil(in / stride), the total pad what that needs, its odd
      // one at the end (upper) or the start (lower).
      for (std::size_t i = 0; i < 3; ++i) {
        const std::int64_t in = x.shape[2 + i], s = strides[i];
        const std::int64_t total =
            std::max<std::int64_t>(((in + s - 1) / s - 1) * s + (w.shape[2 + i] - 1) * dilations[i] + 1 - in, 0);
        pads[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
        pads[3 + i] = total - pads[i];
      }
    } else if (auto_pad == "VALID") {
      pads.assign(6, 0);
    } else if (auto_pad != "NOTSET") {
      fail(errc::invalid_argument, node_name, ins[0], what + "unknown auto_pad \"" + auto_pad + "\"");
    }
    attributes inner;
    for (const auto& [name, value] : attrs.items())
      if (name != "kernel_shape" && name != "strides" && name != "dilations" && name != "pads" && name != "auto_pad")
        inner.set(name, value);
    inner.set("strides", ints{strides[1], strides[2]});
    inner.set("dilations", ints{dilations[1], dilations[2]});
    // The 2-D kernel pads both ends of H and of W alike: unequal ones join the depth's Pad.
    const bool plane_pads_in_pad = pads[1] != pads[4] || pads[2] != pads[5];
    inner.set("pads", plane_pads_in_pad ? ints{0, 0, 0, 0} : ints{pads[1], pads[2], pads[4], pads[5]});
    if (attrs.has("kernel_shape")) {
      const ints k = per_axis("kernel_shape", 3, 1);
      if (k[0] != kd) fail(errc::invalid_shape, node_name, ins[1], what + "kernel_shape does not match W's depth");
      inner.set("kernel_shape", ints{k[1], k[2]});
    }
    const auto ints_of = [&](const std::string& tag, std::vector<std::int64_t> v) {
      return add_ints(g, fresh(y + "/" + tag), v);
    };
    const auto reshape = [&](const std::string& tag, const std::string& from, std::vector<std::int64_t> to,
                             const std::string& out = {}) {
      return step("Reshape", tag, {from, ints_of(tag + "_shape", std::move(to))}, out);
    };
    std::string xp = ins[0];
    const std::int64_t ph0 = plane_pads_in_pad ? pads[1] : 0, pw0 = plane_pads_in_pad ? pads[2] : 0,
                       ph1 = plane_pads_in_pad ? pads[4] : 0, pw1 = plane_pads_in_pad ? pads[5] : 0;
    if (pads[0] || pads[3] || plane_pads_in_pad)
      xp = step("Pad", "depth_pads",
                {xp, ints_of("depth_pads_value", {0, 0, pads[0], ph0, pw0, 0, 0, pads[3], ph1, pw1})});
    const std::int64_t xh = x.shape[3] + ph0 + ph1, xw = x.shape[4] + pw0 + pw1;  // the planes as padded
    const std::int64_t depth = x.shape[2] + pads[0] + pads[3], reach = (kd - 1) * dilations[0] + 1;
    if (depth < reach)
      fail(errc::invalid_shape, node_name, ins[0],
           what + "the padded depth " + std::to_string(depth) + " of '" + ins[0] +
               "' is smaller than the kernel's reach " + std::to_string(reach));
    const std::int64_t od = (depth - reach) / strides[0] + 1;
    const std::string depth_major = step("Transpose", "depth_major", {xp}, {}, {{"perm", ints{0, 2, 1, 3, 4}}});
    std::string sum;
    for (std::int64_t k = 0; k < kd; ++k) {
      const std::string tag = "tap" + std::to_string(k);
      const std::int64_t first = k * dilations[0];
      const std::string rows = step(
          "Slice", tag + "_depths",
          {depth_major, ints_of(tag + "_start", {first}), ints_of(tag + "_end", {first + (od - 1) * strides[0] + 1}),
           ints_of(tag + "_axis", {1}), ints_of(tag + "_step", {strides[0]})});
      const shape tap_shape{w.shape[0], w.shape[1], w.shape[3], w.shape[4]};
      std::string wk;
      if (const tensor* wc = g.constant(ins[1]); wc && wc->is_host()) {
        // Weights with data: each tap's slice is a constant of its own, cut once here rather than
        // by a Slice kernel on every run.
        tensor tap(tap_shape, w.type);
        const std::size_t plane = static_cast<std::size_t>(w.shape[3] * w.shape[4]) * size_of(w.type);
        const auto* src = static_cast<const std::byte*>(wc->data());
        auto* dst = static_cast<std::byte*>(tap.data());
        for (std::int64_t mc = 0; mc < w.shape[0] * w.shape[1]; ++mc)
          std::memcpy(dst + static_cast<std::size_t>(mc) * plane, src + static_cast<std::size_t>(mc * kd + k) * plane,
                      plane);
        wk = g.add_constant(fresh(y + "/" + tag + "_w"), std::move(tap));
      } else {
        wk = reshape(tag + "_w",
                     step("Slice", tag + "_w_tap",
                          {ins[1], ints_of(tag + "_w_start", {k}), ints_of(tag + "_w_end", {k + 1}),
                           ints_of(tag + "_w_axis", {2})}),
                     {tap_shape[0], tap_shape[1], tap_shape[2], tap_shape[3]});
      }
      std::vector<std::string> conv_in{reshape(tag + "_x", rows, {n * od, c, xh, xw}), wk};
      if (k == 0) conv_in.insert(conv_in.end(), ins.begin() + 2, ins.end());  // the bias [M], if any
      const std::string z = step("Conv", tag + "_conv", std::move(conv_in), {}, inner);
      sum = k == 0 ? z : step("Add", tag + "_sum", {sum, z});
    }
    const shape zs = g.value(sum).shape;
    step("Transpose", "channel_major", {reshape("depth_batch", sum, {n, od, zs[1], zs[2], zs[3]})}, y,
         {{"perm", ints{0, 2, 1, 3, 4}}});
    return;
  }
  if (t == "Conv" && g.value(ins[0]).shape.rank() == 4) {
    // 2-D with unequal pads at the two ends of an axis (explicit, or auto_pad SAME with an odd
    // total, as TensorFlow's exports of stride-2 layers have): a zero Pad, then the Conv without
    // pads.
    const value_info x = g.value(ins[0]), w = g.value(ins[1]);  // copies: the steps grow the table
    const ints pads = *conv_pads(attrs, x.shape, w.shape);
    check_pads(pads, t, node_name, ins[0]);
    attributes inner;
    for (const auto& [name, value] : attrs.items())
      if (name != "pads" && name != "auto_pad") inner.set(name, value);
    const std::string padded =
        step("Pad", "pads",
             {ins[0], add_ints(g, fresh(y + "/pads_value"),
                               std::vector<std::int64_t>{0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]})});
    std::vector<std::string> conv_in{padded};
    conv_in.insert(conv_in.end(), ins.begin() + 1, ins.end());
    step("Conv", "conv", std::move(conv_in), y, std::move(inner));
    return;
  }
  if (t == "ConvInteger") {
    // 2-D with unequal pads at the two ends of an axis (a quantized TensorFlow export's stride-2
    // SAME layers): a Pad, then ConvInteger without pads. ONNX's reference subtracts x_zero_point
    // before it pads with zeros, so the border holds the zero point in x's own values.
    const value_info x = g.value(ins[0]), w = g.value(ins[1]);  // copies: the steps grow the table
    const ints pads = *conv_pads(attrs, x.shape, w.shape);
    check_pads(pads, t, node_name, ins[0]);
    std::vector<std::string> pad_in{
        ins[0], add_ints(g, fresh(y + "/pads_value"),
                         std::vector<std::int64_t>{0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]})};
    if (ins.size() > 2 && !ins[2].empty()) {
      const tensor* zp = g.constant(ins[2]);
      if (!zp || !zp->is_host())
        fail(errc::not_supported, node_name, ins[2],
             "ConvInteger '" + node_name + "': unequal pads at the two ends of an axis need x_zero_point '" + ins[2] +
                 "' to be a constant (the border holds it)");
      pad_in.push_back(ins[2]);
    }
    attributes inner;
    for (const auto& [name, value] : attrs.items())
      if (name != "pads" && name != "auto_pad") inner.set(name, value);
    std::vector<std::string> conv_in{step("Pad", "pads", std::move(pad_in))};
    conv_in.insert(conv_in.end(), ins.begin() + 1, ins.end());
    step("ConvInteger", "conv", std::move(conv_in), y, std::move(inner));
    return;
  }
  if (t == "Conv") {
    // Over one spatial axis (onnx.ai's Conv on X [N, C, L]): the 2-D kernel over [N, C, 1, L]
    // with W [M, C/group, k] as [M, C/group, 1, k]; each per-axis attribute gains a leading axis
    // of extent 1 (kernel, stride and dilation 1, no pads, so auto_pad pads only L) and the
    // output [N, M, 1, L'] is read as [N, M, L'].
    const std::string what = "Conv '" + node_name + "': ";
    if (ins.size() < 2 || ins[1].empty()) fail(errc::parse_error, node_name, y, what + "needs the inputs X and W");
    const value_info x = g.value(ins[0]), w = g.value(ins[1]);  // copies: the steps grow the table
    if (w.shape.rank() != 3)
      fail(errc::invalid_shape, node_name, ins[1],
           what + "W '" + ins[1] + "' must be [M, C/group, k] for the 1-D input " + shape_string(x.shape) + ", got " +
               shape_string(w.shape));
    attributes inner;
    ints pads;
    for (const auto& [name, value] : attrs.items()) {
      if (name != "kernel_shape" && name != "strides" && name != "dilations" && name != "pads") {
        inner.set(name, value);
        continue;
      }
      const ints v = attrs.get_ints(name);
      const std::size_t want = name == "pads" ? 2 : 1;
      if (v.size() != want)
        fail(errc::invalid_argument, node_name, ins[0],
             what + name + " has " + std::to_string(v.size()) + " values, the 1-D input '" + ins[0] + "' " +
                 shape_string(x.shape) + " takes " + std::to_string(want));
      if (name == "pads" && (v[0] < 0 || v[1] < 0))
        fail(errc::invalid_argument, node_name, ins[0],
             what + "pads " + std::to_string(v[0]) + " and " + std::to_string(v[1]) + " of '" + ins[0] +
                 "': a pad is not negative");
      if (name == "pads") pads = v;
      else inner.set(name, ints{1, v[0]});
    }
    const auto reshape = [&](const std::string& tag, const std::string& from, std::vector<std::int64_t> to,
                             const std::string& out = {}) {
      return step("Reshape", tag, {from, add_ints(g, fresh(y + "/" + tag + "_shape"), to)}, out);
    };
    std::string x2 = reshape("x_2d", ins[0], {x.shape[0], x.shape[1], 1, x.shape[2]});
    // auto_pad's pads, as explicit ones (an unknown auto_pad stays for the kernel to refuse).
    if (const auto same = conv_pads(attrs, x.shape, w.shape); same && attrs.has("auto_pad")) {
      pads = *same;
      attributes rest;
      for (const auto& [name, value] : inner.items())
        if (name != "auto_pad") rest.set(name, value);
      inner = std::move(rest);
    }
    check_pads(pads, t, node_name, ins[0]);
    // The 2-D kernel pads each axis alike at both ends; unequal pads are a zero Pad of L first.
    if (!pads.empty() && pads[0] != pads[1])
      x2 = step(
          "Pad", "pads",
          {x2, add_ints(g, fresh(y + "/pads_value"), std::vector<std::int64_t>{0, 0, 0, pads[0], 0, 0, 0, pads[1]})});
    else if (!pads.empty()) inner.set("pads", ints{0, pads[0], 0, pads[1]});
    std::vector<std::string> conv_in{x2, reshape("w_2d", ins[1], {w.shape[0], w.shape[1], 1, w.shape[2]})};
    conv_in.insert(conv_in.end(), ins.begin() + 2, ins.end());  // the bias [M], if any
    const std::string z = step("Conv", "conv_2d", std::move(conv_in), {}, std::move(inner));
    const shape zs = g.value(z).shape;
    reshape("y_1d", z, {zs[0], zs[1], zs[3]}, y);
    return;
  }
  if (t == "ConvTranspose" && g.value(ins[0]).shape.rank() != 4) {
    add_conv_transpose_nd(g, node_name, ins, y, attrs, fresh, step);
    return;
  }
  if (t == "ConvTranspose") {
    // The kernel's geometry ends at most output_padding past the start pad: the node computes
    // that larger output and a Slice keeps the part ONNX's pads leave.
    const value_info x = g.value(ins[0]), w = g.value(ins[1]);
    const auto geo = graph_ops::conv_transpose_geom(attrs, x.shape, w.shape, [&](errc e, const std::string& what) {
      fail(e, node_name, ins[0], "ConvTranspose '" + node_name + "': " + what);
    });
    attributes inner;
    for (const auto& [name, value] : attrs.items())
      if (name != "pads" && name != "auto_pad" && name != "output_shape") inner.set(name, value);
    ints pads{geo.pad_begin[0], geo.pad_begin[1], geo.pad_end[0], geo.pad_end[1]};
    for (std::size_t i = 0; i < 2; ++i)
      if (geo.crop[i]) pads[2 + i] = geo.pad_begin[i] + geo.output_padding[i];
    inner.set("pads", pads);
    const std::string full = step("ConvTranspose", "uncropped", ins, {}, std::move(inner));
    const auto i64 = [&](const std::string& tag, std::int64_t a, std::int64_t b) {
      const std::array<std::int64_t, 2> v{a, b};
      return add_ints(g, fresh(y + "/" + tag), v);
    };
    step("Slice", "crop", {full, i64("starts", 0, 0), i64("ends", geo.out[0], geo.out[1]), i64("axes", 2, 3)}, y);
    return;
  }
  if (t == "Squeeze" || t == "Unsqueeze") {
    // Both only rename dimensions: a Reshape to the shape ONNX defines, from `axes` (an
    // attribute before opset 13, a constant input from it on).
    const bool squeeze = t == "Squeeze";
    const value_info x = g.value(ins[0]);  // a copy: the steps grow the table it is in
    const bool axes_input = ins.size() > 1 && !ins[1].empty();
    if (ins.size() > 2) fail(errc::parse_error, node_name, y, t + " '" + node_name + "' has at most two inputs");
    if (axes_input && attrs.has("axes"))
      fail(errc::invalid_argument, node_name, ins[1],
           t + " '" + node_name + "': axes given twice (input and attribute)");
    ints axes = attrs.get_ints("axes");
    if (axes_input) {
      const tensor* c = g.constant(ins[1]);
      if (!c || !c->is_host())
        fail(errc::not_supported, node_name, ins[1],
             t + " '" + node_name + "': axes '" + ins[1] + "' must be a constant");
      for (std::int64_t i = 0; i < c->elements(); ++i) axes.push_back(c->get_int(i));
    }
    if (!squeeze && axes.empty())
      fail(errc::invalid_argument, node_name, {}, "Unsqueeze '" + node_name + "' needs axes");
    const auto in_rank = static_cast<std::int64_t>(x.shape.rank());
    const std::int64_t out_rank = squeeze ? in_rank : in_rank + static_cast<std::int64_t>(axes.size());
    std::vector<bool> marked(static_cast<std::size_t>(std::max<std::int64_t>(out_rank, 0)));
    for (std::int64_t a : axes) {
      // Squeeze's axes index the input, Unsqueeze's the output.
      const std::int64_t r = squeeze ? in_rank : out_rank;
      if (a < -r || a >= r)
        fail(errc::invalid_argument, node_name, {},
             t + " '" + node_name + "': axis " + std::to_string(a) + " is outside rank " + std::to_string(r));
      if (a < 0) a += r;
      if (marked[static_cast<std::size_t>(a)])
        fail(errc::invalid_argument, node_name, {},
             t + " '" + node_name + "': axis " + std::to_string(a) + " repeated");
      marked[static_cast<std::size_t>(a)] = true;
    }
    std::vector<std::int64_t> dims;
    if (squeeze) {
      for (std::int64_t d = 0; d < in_rank; ++d) {
        const std::int64_t v = x.shape[static_cast<std::size_t>(d)];
        const bool drop = axes.empty() ? v == 1 : marked[static_cast<std::size_t>(d)];
        if (drop && v != 1)
          fail(errc::invalid_shape, node_name, ins[0],
               "Squeeze '" + node_name + "': dimension " + std::to_string(d) + " of " + shape_string(x.shape) +
                   " is not 1");
        if (!drop) dims.push_back(v);
      }
    } else {
      if (out_rank > static_cast<std::int64_t>(shape::max_rank))
        fail(errc::not_supported, node_name, ins[0],
             "Unsqueeze '" + node_name + "': rank " + std::to_string(out_rank) + " is above 8");
      std::size_t next = 0;
      for (std::int64_t d = 0; d < out_rank; ++d)
        dims.push_back(marked[static_cast<std::size_t>(d)] ? 1 : x.shape[next++]);
    }
    step("Reshape", squeeze ? "squeeze" : "unsqueeze", {ins[0], add_ints(g, fresh(y + "/shape"), dims)}, y);
    return;
  }
  if (t == "Hardmax") {
    // 1 at the first largest element along `axis`, 0 elsewhere: ArgMax (the first of equal
    // maxima, as ONNX's Hardmax takes), then equality with the positions 0 .. D−1 as
    // 1 − Sign(|position − index|), in float, where every index up to 2^24 is exact. X's value
    // info is copied: the steps grow the graph's table of values, which would leave a reference
    // into it dangling.
    const value_info x = g.value(ins[0]);
    const auto rank = static_cast<std::int64_t>(x.shape.rank());
    std::int64_t axis = attrs.get_int("axis", -1);
    if (rank == 0 || axis < -rank || axis >= rank)
      fail(errc::invalid_argument, node_name, ins[0],
           "Hardmax '" + node_name + "': axis " + std::to_string(axis) + " is outside rank " + std::to_string(rank));
    if (axis < 0) axis += rank;
    const std::int64_t d = x.shape[static_cast<std::size_t>(axis)];
    if (d > (std::int64_t{1} << 24))
      fail(errc::not_supported, node_name, ins[0],
           "Hardmax '" + node_name + "': " + std::to_string(d) + " positions along the axis (at most 2^24)");
    const std::string index = step("ArgMax", "index", {ins[0]}, {}, {{"axis", axis}, {"keepdims", std::int64_t{1}}});
    const std::string index_f = step("Cast", "index_float", {index}, {}, {{"to", std::int64_t{1}}});
    std::vector<std::int64_t> iota_dims(static_cast<std::size_t>(rank), 1);
    iota_dims[static_cast<std::size_t>(axis)] = d;
    tensor iota{shape(std::span<const std::int64_t>(iota_dims)), dtype::f32};
    for (std::int64_t i = 0; i < d; ++i) iota.set(i, static_cast<double>(i));
    const std::string positions = g.add_constant(fresh(y + "/positions"), std::move(iota));
    const std::string other =
        step("Sign", "other", {step("Abs", "distance", {step("Sub", "offset", {positions, index_f})})});
    tensor one_value(shape{}, dtype::f32);
    one_value.set(0, 1);
    const std::string one = g.add_constant(fresh(y + "/one"), std::move(one_value));
    if (x.type == dtype::f32) {
      step("Sub", "hardmax", {one, other}, y);
      return;
    }
    const std::int64_t to = x.type == dtype::f16 ? 10 : 16;
    step("Cast", "hardmax_t", {step("Sub", "hardmax", {one, other})}, y, {{"to", to}});
    return;
  }
  if (t == "DepthToSpace" || t == "SpaceToDepth") {
    // ONNX's definitions are a Reshape to six dimensions, a Transpose and a Reshape back
    // (onnx.ai/onnx/operators/onnx__DepthToSpace.html): the same three steps here.
    const bool to_space = t == "DepthToSpace";
    const value_info x = g.value(ins[0]);  // a copy: the steps grow the table it is in
    if (ins.size() != 1) fail(errc::parse_error, node_name, y, t + " '" + node_name + "' has one input");
    if (x.shape.rank() != 4)
      fail(errc::invalid_shape, node_name, ins[0],
           t + " '" + node_name + "' needs an input [N, C, H, W], got " + shape_string(x.shape));
    if (!attrs.has("blocksize"))
      fail(errc::invalid_argument, node_name, {}, t + " '" + node_name + "' needs the attribute blocksize");
    const std::int64_t b = attrs.get_int("blocksize", 0);
    const std::string mode = attrs.get_string("mode", "DCR");
    if (to_space && mode != "DCR" && mode != "CRD")
      fail(errc::invalid_argument, node_name, {},
           "DepthToSpace '" + node_name + "': mode '" + mode + "' is neither DCR nor CRD");
    const std::int64_t n = x.shape[0], c = x.shape[1], h = x.shape[2], w = x.shape[3];
    // b · b is formed only below 2^31: no product here can overflow.
    if (b < 1 || b > (std::int64_t{1} << 31))
      fail(errc::invalid_argument, node_name, {},
           t + " '" + node_name + "': blocksize " + std::to_string(b) + " must be at least 1");
    if (to_space ? c % (b * b) != 0 : h % b != 0 || w % b != 0)
      fail(errc::invalid_shape, node_name, ins[0],
           t + " '" + node_name + "': " + (to_space ? "C" : "H and W") + " of " + shape_string(x.shape) +
               " must be multiples of " + (to_space ? "blocksize squared" : "blocksize") + " (" + std::to_string(b) +
               ")");
    const auto dims = [&](const std::string& tag, std::initializer_list<std::int64_t> v) {
      return add_ints(g, fresh(y + "/" + tag), std::span<const std::int64_t>(v.begin(), v.size()));
    };
    std::string six;
    ints perm;
    if (to_space && mode == "CRD") {
      six = step("Reshape", "blocks", {ins[0], dims("blocks_shape", {n, c / (b * b), b, b, h, w})});
      perm = {0, 1, 4, 2, 5, 3};
    } else if (to_space) {
      six = step("Reshape", "blocks", {ins[0], dims("blocks_shape", {n, b, b, c / (b * b), h, w})});
      perm = {0, 3, 4, 1, 5, 2};
    } else {
      six = step("Reshape", "blocks", {ins[0], dims("blocks_shape", {n, c, h / b, b, w / b, b})});
      perm = {0, 3, 5, 1, 2, 4};
    }
    const std::string moved = step("Transpose", "moved", {six}, {}, {{"perm", perm}});
    const std::string out_shape =
        to_space ? dims("shape", {n, c / (b * b), h * b, w * b}) : dims("shape", {n, c * b * b, h / b, w / b});
    step("Reshape", to_space ? "depth_to_space" : "space_to_depth", {moved, out_shape}, y);
    return;
  }
  if (t == "EyeLike") {
    // onnx.ai EyeLike: a 2-D tensor of x's shape, 1 where column - row == k, 0 elsewhere, of the
    // dtype attribute's type (x's when absent). It depends on x's shape only: a constant.
    const value_info x = g.value(ins[0]);
    if (x.shape.rank() != 2)
      fail(errc::invalid_shape, node_name, ins[0],
           "EyeLike '" + node_name + "': x must be 2-D, got " + shape_string(x.shape));
    dtype out = x.type;
    if (attrs.has("dtype")) {
      const auto d = dtype_from_onnx(attrs.get_int("dtype", 1));
      if (!d)
        fail(errc::not_supported, node_name, y,
             "EyeLike '" + node_name + "': dtype " + std::to_string(attrs.get_int("dtype", 1)) +
                 " is not a dtype npurt holds");
      out = *d;
    }
    const std::int64_t k = attrs.get_int("k", 0);
    tensor eye(x.shape, out);
    for (std::int64_t r = 0; r < x.shape[0]; ++r)
      for (std::int64_t c = 0; c < x.shape[1]; ++c)
        if (c - r == k) eye.set(r * x.shape[1] + c, 1.0);
    step("Identity", "eye", {g.add_constant(fresh(y + "/eye"), std::move(eye))}, y);
    return;
  }
  if (t == "MaxUnpool") {
    // onnx.ai MaxUnpool (onnx/reference/ops/op_max_unpool.py): Y zero but where the flat indices
    // I (MaxPool's Indices, into the shape its input had: (in - 1) * stride - pads + kernel per
    // spatial axis) put X's values; with output_shape, that tensor at the start of a larger zero
    // one. As steps: X and I flattened, scattered into zeros along their one axis, reshaped, and
    // padded at the end to output_shape.
    if (ins.size() < 2 || ins[1].empty())
      fail(errc::parse_error, node_name, y, "MaxUnpool '" + node_name + "' needs the inputs X and I");
    const value_info x = g.value(ins[0]);  // copies: the steps grow the table they are in
    const value_info idx = g.value(ins[1]);
    const std::string what = "MaxUnpool '" + node_name + "': ";
    const std::size_t rank = x.shape.rank();
    if (rank < 3 || rank > 5)
      fail(rank < 3 ? errc::invalid_shape : errc::not_supported, node_name, ins[0],
           what + "X must be [N, C, D1, ...] with 1 to 3 spatial dimensions, got " + shape_string(x.shape));
    if (idx.type != dtype::i64)
      fail(errc::invalid_dtype, node_name, ins[1], what + "I must be int64, got " + std::string(to_string(idx.type)));
    if (!(idx.shape == x.shape))
      fail(errc::invalid_shape, node_name, ins[1],
           what + "I " + shape_string(idx.shape) + " must have X's shape " + shape_string(x.shape));
    const std::size_t r = rank - 2;
    constexpr std::int64_t limit = std::int64_t{1} << 31;
    const auto per_dim = [&](std::string_view attr, std::size_t count, std::int64_t def, std::int64_t lo) {
      const ints v = attrs.has(attr) ? attrs.get_ints(attr) : ints(count, def);
      if (v.size() != count)
        fail(errc::invalid_argument, node_name, ins[0],
             what + std::string(attr) + " must have " + std::to_string(count) + " values, got " +
                 std::to_string(v.size()));
      for (const std::int64_t e : v)
        if (e < lo || e >= limit)
          fail(errc::invalid_argument, node_name, ins[0],
               what + std::string(attr) + " must be in [" + std::to_string(lo) + ", 2^31), got " + std::to_string(e));
      return v;
    };
    if (!attrs.has("kernel_shape")) fail(errc::invalid_argument, node_name, ins[0], what + "kernel_shape is required");
    const ints ks = per_dim("kernel_shape", r, 1, 1), st = per_dim("strides", r, 1, 1);
    const ints pads = per_dim("pads", 2 * r, 0, 0);
    std::vector<std::int64_t> inferred{x.shape[0], x.shape[1]};
    std::int64_t total = x.shape[0] * x.shape[1];
    for (std::size_t i = 0; i < r; ++i) {
      // Every term is below 2^31 and the extents below 2^62: no overflow.
      const std::int64_t d = (x.shape[i + 2] - 1) * st[i] - pads[i] - pads[i + r] + ks[i];
      if (d < 1)
        fail(errc::invalid_shape, node_name, ins[0],
             what + "the unpooled extent of spatial axis " + std::to_string(i) + " is " + std::to_string(d));
      inferred.push_back(d);
      if (__builtin_mul_overflow(total, d, &total) || total > (std::int64_t{1} << 40))
        fail(errc::size_overflow, node_name, y, what + "the unpooled tensor is too large");
    }
    std::vector<std::int64_t> out = inferred;
    if (ins.size() > 2 && !ins[2].empty()) {
      const tensor* os = g.constant(ins[2]);
      if (!os || !os->is_host()) fail(errc::not_supported, node_name, ins[2], what + "output_shape must be a constant");
      if (os->shape().rank() != 1 || static_cast<std::size_t>(os->elements()) != rank)
        fail(errc::invalid_shape, node_name, ins[2],
             what + "output_shape must hold " + std::to_string(rank) + " values, got " + shape_string(os->shape()));
      for (std::size_t i = 0; i < rank; ++i) {
        const double v = os->get(static_cast<std::int64_t>(i));
        // The unpooled tensor sits at the start of Y: Y is at least as large, N and C the same.
        if (!(v >= static_cast<double>(inferred[i])) || v >= static_cast<double>(limit) ||
            (i < 2 && v != static_cast<double>(inferred[i])))
          fail(errc::invalid_shape, node_name, ins[2],
               what + "output_shape " + std::to_string(static_cast<long long>(v)) + " at axis " + std::to_string(i) +
                   " cannot hold the unpooled shape " + shape_string(shape(std::span<const std::int64_t>(inferred))));
        out[i] = static_cast<std::int64_t>(v);
      }
    }
    tensor zeros(shape{total}, x.type);
    for (std::int64_t i = 0; i < total; ++i) zeros.set(i, 0.0);
    const std::int64_t minus_one[] = {-1};
    const std::string x_flat = step("Reshape", "x_flat", {ins[0], add_ints(g, fresh(y + "/flat"), minus_one)});
    const std::string i_flat = step("Reshape", "i_flat", {ins[1], add_ints(g, fresh(y + "/flat"), minus_one)});
    const std::string scattered =
        step("ScatterElements", "scatter", {g.add_constant(fresh(y + "/zeros"), std::move(zeros)), i_flat, x_flat}, {},
             {{"axis", std::int64_t{0}}});
    const std::string shape_name = add_ints(g, fresh(y + "/shape"), inferred);
    if (out == inferred) {
      step("Reshape", "max_unpool", {scattered, shape_name}, y);
      return;
    }
    std::vector<std::int64_t> ends(2 * rank, 0);
    for (std::size_t i = 0; i < rank; ++i) ends[rank + i] = out[i] - inferred[i];
    step("Pad", "max_unpool",
         {step("Reshape", "unpooled", {scattered, shape_name}), add_ints(g, fresh(y + "/pads"), ends)}, y);
    return;
  }
  if (t == "OneHot") {
    // onnx.ai OneHot: out[..., j at axis, ...] = on_value where indices (wrapped once by depth
    // when negative) equal j, off_value elsewhere; an index outside [-depth, depth - 1] gives an
    // all-off row. Computed as Equal of the wrapped indices, with a 1 inserted at axis, against
    // the constant 0 .. depth - 1 along axis, then Where(on, off).
    const value_info idx = g.value(ins[0]);
    if (!is_integer(idx.type) && !is_float(idx.type))
      fail(errc::not_supported, node_name, ins[0],
           "OneHot '" + node_name + "': indices must be numbers, got " + std::string(to_string(idx.type)));
    if (ins.size() < 3 || ins[1].empty() || ins[2].empty())
      fail(errc::parse_error, node_name, y, "OneHot '" + node_name + "' needs the inputs indices, depth and values");
    const tensor* depth_t = g.constant(ins[1]);
    const tensor* values_t = g.constant(ins[2]);
    if (!depth_t || !depth_t->is_host())
      fail(errc::not_supported, node_name, ins[1], "OneHot '" + node_name + "': depth must be a constant");
    if (!values_t || !values_t->is_host())
      fail(errc::not_supported, node_name, ins[2], "OneHot '" + node_name + "': values must be a constant");
    if (depth_t->elements() != 1)
      fail(errc::invalid_shape, node_name, ins[1], "OneHot '" + node_name + "': depth must hold one value");
    if (values_t->elements() != 2)
      fail(errc::invalid_shape, node_name, ins[2],
           "OneHot '" + node_name + "': values must be [off_value, on_value], got " + shape_string(values_t->shape()));
    // ONNX casts a float depth to int64.
    const double dv = depth_t->get(0);
    if (!(dv >= 1 && dv <= 1 << 30))
      fail(errc::invalid_argument, node_name, ins[1],
           "OneHot '" + node_name + "': depth must be in [1, 2^30], got " + std::to_string(dv));
    const auto depth = static_cast<std::int64_t>(dv);
    const auto rank = static_cast<std::int64_t>(idx.shape.rank());
    std::int64_t axis = attrs.get_int("axis", -1);
    if (axis < -rank - 1 || axis > rank)
      fail(errc::invalid_argument, node_name, ins[0],
           "OneHot '" + node_name + "': axis " + std::to_string(axis) + " is outside [" + std::to_string(-rank - 1) +
               ", " + std::to_string(rank) + "]");
    if (axis < 0) axis += rank + 1;
    // The indices' own type when int32 or int64; int64 for floats and for int8 and uint8, which
    // could not hold depth (index + depth wraps harmlessly in int32: depth is below 2^30 and only
    // a negative index's sum is kept).
    const dtype int_type = idx.type == dtype::i32 ? dtype::i32 : dtype::i64;
    const auto int_scalar = [&](const std::string& tag, std::int64_t v) {
      tensor c(shape{}, int_type);
      c.set(0, static_cast<double>(v));
      return g.add_constant(fresh(y + "/" + tag), std::move(c));
    };
    std::string indices = ins[0];
    if (idx.type != int_type) {
      // onnx.ai: indices of a non-integer type are cast to int64, which truncates toward zero as
      // numpy's astype does (an infinity saturates, out of range). A NaN has no integer: it is
      // made depth, out of range, so its row is all off like any other index outside the range.
      indices = step("Cast", "indices_int", {ins[0]}, {}, {{"to", onnx_dtype_code(int_type)}});
      if (is_float(idx.type))
        indices = step("Where", "indices_nan",
                       {step("IsNaN", "indices_is_nan", {ins[0]}), int_scalar("nan_index", depth), indices});
    }
    const std::string wrapped = step("Where", "wrapped",
                                     {step("Less", "negative", {indices, int_scalar("zero", 0)}),
                                      step("Add", "plus_depth", {indices, int_scalar("depth", depth)}), indices});
    std::vector<std::int64_t> at_axis, positions;
    for (std::int64_t d = 0, s = 0; d <= rank; ++d) {
      at_axis.push_back(d == axis ? 1 : idx.shape[static_cast<std::size_t>(s)]);
      positions.push_back(d == axis ? depth : 1);
      if (d != axis) ++s;
    }
    const std::string column = step("Reshape", "column", {wrapped, add_ints(g, fresh(y + "/column_shape"), at_axis)});
    tensor range(shape(std::span<const std::int64_t>(positions)), int_type);
    for (std::int64_t j = 0; j < depth; ++j) range.set(j, static_cast<double>(j));
    const std::string hit = step("Equal", "hit", {column, g.add_constant(fresh(y + "/positions"), std::move(range))});
    const auto value_scalar = [&](const std::string& tag, std::int64_t i) {
      tensor c(shape{}, values_t->type());
      c.set(0, values_t->get(i));
      return g.add_constant(fresh(y + "/" + tag), std::move(c));
    };
    step("Where", "one_hot", {hit, value_scalar("on", 1), value_scalar("off", 0)}, y);
    return;
  }
  if (t == "DynamicQuantizeLinear") {
    // onnx/reference/ops/op_dynamic_quantize_linear.py: the range [min(0, min x), max(0, max x)]
    // over 255 steps (a scale of 1 when every element is 0), the zero point -min / scale clipped
    // to [0, 255] and rounded half to even, then QuantizeLinear of x to uint8 with both.
    const value_info& x = g.value(ins[0]);
    if (x.type != dtype::f32)
      fail(errc::not_supported, node_name, ins[0],
           "DynamicQuantizeLinear '" + node_name + "': x must be float32, got " + std::string(to_string(x.type)));
    const std::string scale_out = outputs.size() > 1 ? outputs[1] : std::string();
    const std::string zp_out = outputs.size() > 2 ? outputs[2] : std::string();
    // A named output besides y is its own node, named after the operator.
    const auto named = [&](const std::string& type, const std::string& tag, std::vector<std::string> from,
                           const std::string& to, attributes a = {}) {
      if (to.empty()) return step(type, tag, std::move(from), {}, std::move(a));
      g.add_node(type, fresh(node_name + "/" + tag), std::move(from), {to}, std::move(a));
      return to;
    };
    const attributes whole{{"keepdims", std::int64_t{0}}};
    const std::string zero = scalar("zero", 0.0);
    const std::string maxx = step("Max", "max_x", {step("ReduceMax", "reduce_max", {ins[0]}, {}, whole), zero});
    const std::string minx = step("Min", "min_x", {step("ReduceMin", "reduce_min", {ins[0]}, {}, whole), zero});
    const std::string steps = step("Div", "step", {step("Sub", "range", {maxx, minx}), scalar("levels", 255.0)});
    const std::string scale =
        named("Where", "scale", {step("Equal", "all_zero", {maxx, minx}), scalar("one", 1.0), steps}, scale_out);
    const std::string zp =
        step("Round", "zero_point_rounded",
             {step("Min", "zero_point_high",
                   {step("Max", "zero_point_low",
                         {step("Neg", "zero_point_float", {step("Div", "min_steps", {minx, scale})}), zero}),
                    scalar("top", 255.0)})});
    const std::string zp_u8 = named("Cast", "zero_point", {zp}, zp_out, {{"to", std::int64_t{2}}});
    step("QuantizeLinear", "quantize", {ins[0], scale, zp_u8}, y);
    return;
  }
  if (t == "Shrink") {
    // x − bias where x > lambd, x + bias where x < −lambd, 0 between. The steps select with
    // Sign(Relu(·)), which is 1 past the threshold and 0 up to it.
    const std::string lambd = scalar("lambd", attrs.get_float("lambd", 0.5));
    const std::string bias = scalar("bias", attrs.get_float("bias", 0.0));
    const std::string above =
        step("Sign", "above", {step("Relu", "over", {step("Sub", "x_minus_lambd", {ins[0], lambd})})});
    const std::string below =
        step("Sign", "below",
             {step("Relu", "under", {step("Sub", "neg_minus_lambd", {step("Neg", "neg", {ins[0]}), lambd})})});
    const std::string hi = step("Mul", "high", {above, step("Sub", "minus_bias", {ins[0], bias})});
    const std::string lo = step("Mul", "low", {below, step("Add", "plus_bias", {ins[0], bias})});
    step("Add", "shrink", {hi, lo}, y);
    return;
  }
  // noop_with_empty_axes on the reductions computed as chains: what ONNX's reference returns then
  // (the input itself, not the chain's first step applied) is not what the chain would give.
  if (t.starts_with("Reduce") && attrs.get_int("noop_with_empty_axes", 0) != 0 && attrs.get_ints("axes").empty() &&
      (ins.size() < 2 || ins[1].empty() || (g.constant(ins[1]) && g.constant(ins[1])->elements() == 0)))
    fail(errc::not_supported, node_name, ins[0], t + " '" + node_name + "': noop_with_empty_axes=1 without axes");
  // The reduction's own inputs (data and, from opset 18, axes) follow the first step's result.
  auto reduce = [&](const std::string& type, const std::string& tag, const std::string& x, const std::string& to,
                    attributes a) {
    std::vector<std::string> from = ins;
    from[0] = x;
    return step(type, tag, std::move(from), to, std::move(a));
  };
  if (t == "ReduceSumSquare") {
    reduce("ReduceSum", "sum", step("Mul", "square", {ins[0], ins[0]}), y, attrs);
  } else if (t == "ReduceL1") {
    reduce("ReduceSum", "sum", step("Abs", "abs", {ins[0]}), y, attrs);
  } else if (t == "ReduceL2") {
    step("Sqrt", "sqrt", {reduce("ReduceSum", "sum", step("Mul", "square", {ins[0], ins[0]}), {}, attrs)}, y);
  } else if (t == "ReduceLogSum") {
    step("Log", "log", {reduce("ReduceSum", "sum", ins[0], {}, attrs)}, y);
  } else {
    // log(sum(exp(x))) = max + log(sum(exp(x - max))): exp of the raw values overflows from 89 on.
    attributes keep = attrs;
    keep.set("keepdims", std::int64_t{1});
    const std::string max_kept = reduce("ReduceMax", "max_kept", ins[0], {}, keep);
    const std::string max_out =
        attrs.get_int("keepdims", 1) != 0 ? max_kept : reduce("ReduceMax", "max", ins[0], {}, attrs);
    const std::string e = step("Exp", "exp", {step("Sub", "shift", {ins[0], max_kept})});
    step("Add", "add_max", {step("Log", "log", {reduce("ReduceSum", "sum", e, {}, attrs)}), max_out}, y);
  }
}

}  // namespace

void add_composite(graph& g, std::string_view type, const std::string& node_name, const std::vector<std::string>& ins,
                   const std::vector<std::string>& outputs, const attributes& attrs,
                   const std::function<std::string(const std::string&)>& fresh) {
  const std::size_t first = g.nodes().size();
  try {
    add_steps(g, type, node_name, ins, outputs, attrs, fresh);
  } catch (const graph_error&) { throw; } catch (const caller_error& e) {
    // An attribute of the wrong type read by the chain (attributes::get_ints and the like): a
    // graph_error naming the operator, as a single operator's is. what() already ends in the
    // code's message, which graph_error appends again.
    std::string why = e.what();
    if (const std::string tail = ": " + e.code().message(); why.ends_with(tail)) why.resize(why.size() - tail.size());
    throw graph_error(e.code(), node_name, {}, "node '" + node_name + "' (" + std::string(type) + "): " + why);
  }
  // Each step's errors, at run time too, name the operator the user wrote.
  g.set_origin(first, type, node_name);
}

}  // namespace npurt::detail

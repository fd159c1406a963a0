// ONNX control flow resolved at import (see control_flow.hpp).
#include "control_flow.hpp"

#include <algorithm>
#include <map>
#include <vector>

namespace npurt::onnx::control_flow {

namespace {

using name_map = std::map<std::string, std::string, std::less<>>;

[[noreturn]] void fail(errc e, const std::string& node_name, const std::string& tensor, const std::string& what) {
  throw graph_error(make_error_code(e), node_name, tensor, "onnx: " + what);
}

const ::onnx::AttributeProto* find_attr(const ::onnx::NodeProto& n, std::string_view key) {
  for (const auto& a : n.attribute())
    if (a.name() == key) return &a;
  return nullptr;
}

// The node as its errors name it: "Loop 'body_loop'".
std::string label(const ::onnx::NodeProto& n, const std::string& node_name) {
  return n.op_type() + " '" + node_name + "'";
}

const ::onnx::GraphProto& graph_attr(const ::onnx::NodeProto& n, const std::string& node_name, std::string_view key) {
  const auto* a = find_attr(n, key);
  if (!a || a->type() != ::onnx::AttributeProto::GRAPH)
    fail(errc::parse_error, node_name, {}, label(n, node_name) + " has no graph attribute '" + std::string(key) + "'");
  return a->g();
}

std::int64_t int_attr(const ::onnx::NodeProto& n, const std::string& node_name, std::string_view key,
                      std::int64_t fallback) {
  const auto* a = find_attr(n, key);
  if (!a) return fallback;
  if (a->type() != ::onnx::AttributeProto::INT)
    fail(errc::invalid_argument, node_name, {}, label(n, node_name) + ": attribute '" + a->name() + "' is not an INT");
  return a->i();
}

// An INTS attribute of `count` values, `count` zeros when absent (Scan's axes and directions).
ints ints_attr(const ::onnx::NodeProto& n, const std::string& node_name, std::string_view key, std::size_t count) {
  const auto* a = find_attr(n, key);
  if (!a) return ints(count, 0);
  if (a->type() != ::onnx::AttributeProto::INTS)
    fail(errc::invalid_argument, node_name, {}, label(n, node_name) + ": attribute '" + a->name() + "' is not INTS");
  if (static_cast<std::size_t>(a->ints_size()) != count)
    fail(errc::invalid_argument, node_name, {},
         label(n, node_name) + ": attribute '" + a->name() + "' has " + std::to_string(a->ints_size()) +
             " values for " + std::to_string(count));
  return ints(a->ints().begin(), a->ints().end());
}

// Sequences and optionals are no tensors: npurt's graphs hold tensors only.
void require_tensor(const ::onnx::NodeProto& n, const std::string& node_name, const ::onnx::ValueInfoProto& v) {
  if (v.type().has_sequence_type() || v.type().has_optional_type() || v.type().has_map_type())
    fail(errc::not_supported, node_name, v.name(),
         label(n, node_name) + ": '" + v.name() + "' is a " +
             (v.type().has_sequence_type()   ? "sequence"
              : v.type().has_optional_type() ? "optional"
                                             : "map") +
             "; npurt's graphs hold tensors only");
}

void collect(const ::onnx::GraphProto& g, std::set<std::string>& names) {
  for (const auto& t : g.initializer()) names.insert(t.name());
  for (const auto& v : g.input()) names.insert(v.name());
  for (const auto& v : g.output()) names.insert(v.name());
  for (const auto& n : g.node()) {
    names.insert(n.name());
    names.insert(n.input().begin(), n.input().end());
    names.insert(n.output().begin(), n.output().end());
    for (const auto& a : n.attribute()) {
      if (a.has_g()) collect(a.g(), names);
      for (const auto& sub : a.graphs()) collect(sub, names);
    }
  }
}

// Within a nested graph being copied, the names of `outer` it reads from its enclosing scope
// are renamed; those it defines itself are its own (a definition hides the outer one).
void rename_free(::onnx::GraphProto& g, const name_map& outer) {
  std::set<std::string> own;
  for (const auto& t : g.initializer()) own.insert(t.name());
  for (const auto& v : g.input()) own.insert(v.name());
  for (const auto& n : g.node()) own.insert(n.output().begin(), n.output().end());
  name_map free;
  for (const auto& [from, to] : outer)
    if (!own.contains(from)) free.emplace(from, to);
  if (free.empty()) return;
  const auto rename = [&free](std::string* s) {
    if (const auto it = free.find(*s); it != free.end()) *s = it->second;
  };
  for (auto& n : *g.mutable_node()) {
    for (auto& in : *n.mutable_input()) rename(&in);
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) rename_free(*a.mutable_g(), free);
      for (auto& sub : *a.mutable_graphs()) rename_free(sub, free);
    }
  }
  for (auto& o : *g.mutable_output()) rename(o.mutable_name());
}

// The importer of one control-flow node: its parent, and the node for names and errors.
struct expander {
  const ::onnx::NodeProto& n;
  const std::string& node_name;
  const parent& p;

  void emit(const ::onnx::NodeProto& node) const {
    if (p.added && ++*p.added > max_unrolled_nodes)
      fail(errc::not_supported, node_name, {},
           label(n, node_name) + ": its control flow adds more than " + std::to_string(max_unrolled_nodes) +
               " nodes, npurt's bound on what it unrolls");
    p.emit(node);
  }

  // A Constant node holding `t`, named after `base`; returns its output.
  std::string constant(const std::string& base, ::onnx::TensorProto t) const {
    const std::string name = p.fresh(base);
    emit(constant_node(name, std::move(t)));
    return name;
  }

  std::string int64_constant(const std::string& base, std::int64_t v, bool vector) const {
    ::onnx::TensorProto t;
    t.set_data_type(::onnx::TensorProto::INT64);
    if (vector) t.add_dims(1);
    t.add_int64_data(v);
    return constant(base, std::move(t));
  }

  std::string true_constant(const std::string& base) const {
    ::onnx::TensorProto t;
    t.set_data_type(::onnx::TensorProto::BOOL);
    t.add_int32_data(1);
    return constant(base, std::move(t));
  }

  // Copies `body` into the parent under fresh names: `bound` maps its inputs to the parent's
  // values; names it does not define are the enclosing scope's and stay as they are. Returns the
  // parent's name of each of the body's values.
  name_map inline_graph(const ::onnx::GraphProto& body, name_map bound, const std::string& prefix) const {
    name_map names = std::move(bound);
    for (const auto& t : body.initializer())
      if (!names.contains(t.name())) names.emplace(t.name(), p.fresh(prefix + t.name()));
    for (const auto& node : body.node())
      for (const auto& o : node.output())
        if (!o.empty()) names.insert_or_assign(o, p.fresh(prefix + o));
    const auto rename = [&names](const std::string& s) {
      const auto it = names.find(s);
      return it == names.end() ? s : it->second;
    };
    for (const auto& t : body.initializer()) emit(constant_node(rename(t.name()), t));
    for (const auto& node : body.node()) {
      ::onnx::NodeProto copy = node;
      copy.set_name(p.fresh(prefix + (node.name().empty() ? node.op_type() : node.name())));
      for (auto& in : *copy.mutable_input())
        if (!in.empty()) in = rename(in);
      for (auto& o : *copy.mutable_output())
        if (!o.empty()) o = rename(o);
      for (auto& a : *copy.mutable_attribute()) {
        if (a.has_g()) rename_free(*a.mutable_g(), names);
        for (auto& sub : *a.mutable_graphs()) rename_free(sub, names);
      }
      emit(copy);
    }
    return names;
  }

  void identity(const std::string& from, const std::string& to) const {
    emit(make_node("Identity", p.fresh(node_name + "/" + to), {from}, to));
  }

  // Stacks `parts` along a new axis `axis` into `out`: each Unsqueezed there, then Concatenated
  // (the axis counts in the stacked rank, as both Unsqueeze's axes and Concat's axis do).
  void stack(const std::vector<std::string>& parts, std::int64_t axis, const std::string& out) const {
    std::vector<std::string> rows;
    rows.reserve(parts.size());
    for (const auto& part : parts) {
      const std::string row = p.fresh(node_name + "/" + out + "/row");
      // Unsqueeze takes its axes as an input from opset 13, as an attribute before.
      if (p.opset >= 13) {
        emit(make_node("Unsqueeze", row, {part, int64_constant(row + "/axes", axis, true)}, row));
      } else {
        auto u = make_node("Unsqueeze", row, {part}, row);
        auto* a = u.add_attribute();
        a->set_name("axes");
        a->set_type(::onnx::AttributeProto::INTS);
        a->add_ints(axis);
        emit(u);
      }
      rows.push_back(row);
    }
    auto c = make_node("Concat", p.fresh(node_name + "/" + out), rows, out);
    set_int(c, "axis", axis);
    emit(c);
  }

  // The one value of a control input known at import; null when it waits on an unsupported node.
  const tensor* known_scalar(const std::string& name, const std::string& role, const std::string& why) const {
    const tensor* t = p.constant(name);
    if (!t || !t->is_host() || !t->data())
      fail(errc::not_supported, node_name, name,
           label(n, node_name) + ": its " + role + " '" + name + "' is computed at run time; " + why);
    if (t->elements() != 1)
      fail(errc::invalid_argument, node_name, name,
           label(n, node_name) + ": its " + role + " '" + name + "' has " + std::to_string(t->elements()) +
               " elements, not one");
    return t;
  }

  // Refuses an unroll of `iterations` copies of `body` beyond the bound, before any is added.
  void check_unroll(std::int64_t iterations, const ::onnx::GraphProto& body) const {
    const std::int64_t per = std::max<std::int64_t>(1, body.node_size() + body.initializer_size());
    if (iterations > max_unrolled_nodes / per)
      fail(errc::not_supported, node_name, {},
           label(n, node_name) + ": " + std::to_string(iterations) + " iterations of a body of " + std::to_string(per) +
               " nodes exceed " + std::to_string(max_unrolled_nodes) + " nodes, npurt's bound on what it unrolls");
  }

  // The value a scan output takes when the body never runs: no step gives its shape, so it comes
  // from the type the body declares for that output (as onnxruntime takes it), with a 0-length
  // axis where the steps would have been stacked (`axis`, counted in the stacked rank).
  void empty_scan_output(const ::onnx::ValueInfoProto& v, std::int64_t axis, const std::string& out,
                         const std::string& why) const {
    const auto& tt = v.type().tensor_type();
    bool known = v.type().has_tensor_type() && tt.elem_type() != ::onnx::TensorProto::UNDEFINED && tt.has_shape();
    if (known)
      for (const auto& d : tt.shape().dim()) known = known && d.has_dim_value() && d.dim_value() >= 0;
    if (!known)
      fail(errc::not_supported, node_name, v.name(),
           label(n, node_name) + why + ": its scan output '" + v.name() +
               "' would take its shape from a body that never runs, and the body declares no static shape and "
               "element type for it");
    const int rank = tt.shape().dim_size();
    if (axis < -(rank + 1) || axis > rank)
      fail(errc::invalid_argument, node_name, v.name(),
           label(n, node_name) + ": scan output axis " + std::to_string(axis) + " is outside the rank " +
               std::to_string(rank + 1) + " of the stacked '" + v.name() + "'");
    if (axis < 0) axis += rank + 1;
    ::onnx::TensorProto t;
    t.set_data_type(tt.elem_type());
    for (int d = 0; d <= rank; ++d) {
      if (d == axis) t.add_dims(0);
      if (d < rank) t.add_dims(tt.shape().dim(d).dim_value());
    }
    identity(constant(out + "/empty", std::move(t)), out);
  }

  bool expand_if() const {
    if (n.input_size() != 1 || n.input(0).empty())
      fail(errc::parse_error, node_name, {}, label(n, node_name) + " needs exactly one input, its condition");
    const std::string& cond = n.input(0);
    if (p.pending(cond)) return false;
    const tensor* c = known_scalar(
        cond, "condition",
        "npurt inlines an If only when its condition is known at import (an initializer, a Constant or a value "
        "folded from them), since its graphs are static");
    const bool then = c->get(0) != 0;
    const auto& branch = graph_attr(n, node_name, then ? "then_branch" : "else_branch");
    if (branch.output_size() != n.output_size())
      fail(errc::parse_error, node_name, {},
           label(n, node_name) + ": its " + (then ? "then" : "else") + " branch has " +
               std::to_string(branch.output_size()) + " outputs for the node's " + std::to_string(n.output_size()));
    const name_map names = inline_graph(branch, {}, node_name + (then ? "/then/" : "/else/"));
    for (int i = 0; i < n.output_size(); ++i) {
      if (n.output(i).empty()) continue;
      const auto it = names.find(branch.output(i).name());
      identity(it == names.end() ? branch.output(i).name() : it->second, n.output(i));
    }
    return true;
  }

  bool expand_loop() const {
    const auto& body = graph_attr(n, node_name, "body");
    if (n.input_size() < 2)
      fail(errc::parse_error, node_name, {},
           label(n, node_name) + " needs at least two inputs, its trip count M and condition (either may be empty)");
    const int carried = n.input_size() - 2;
    if (body.input_size() != carried + 2 || body.output_size() < carried + 1)
      fail(errc::parse_error, node_name, {},
           label(n, node_name) + ": its body has " + std::to_string(body.input_size()) + " inputs and " +
               std::to_string(body.output_size()) + " outputs for " + std::to_string(carried) +
               " loop-carried values (the body takes the iteration number, the condition and each; it gives the "
               "condition, each and the scan outputs)");
    const int scanned = body.output_size() - 1 - carried;
    if (n.output_size() > carried + scanned)
      fail(errc::parse_error, node_name, {},
           label(n, node_name) + " has " + std::to_string(n.output_size()) + " outputs; its body gives " +
               std::to_string(carried + scanned));
    // Loop-carried values may be sequences and optionals (the importer holds them); the iteration
    // number, the condition and the scan outputs, which are stacked, are tensors.
    for (int k = 0; k < 2; ++k) require_tensor(n, node_name, body.input(k));
    require_tensor(n, node_name, body.output(0));
    for (int k = 1 + carried; k < body.output_size(); ++k) require_tensor(n, node_name, body.output(k));
    const std::string& trip = n.input(0);
    const std::string& cond = n.input(1);
    if (trip.empty())
      fail(errc::not_supported, node_name, {},
           label(n, node_name) +
               " has no trip count M: its iterations depend on data, and npurt unrolls only a Loop "
               "whose trip count is known at import");
    if (p.pending(trip) || (!cond.empty() && p.pending(cond))) return false;
    const std::string why = "npurt unrolls only a Loop whose iterations are known at import";
    const tensor* m = known_scalar(trip, "trip count M", why);
    if (!is_integer(m->type()))
      fail(errc::invalid_dtype, node_name, trip,
           label(n, node_name) + ": its trip count M '" + trip + "' is no integer");
    // The spec's pseudo-code: `for (i = 0; i < M && cond; ++i)`; a negative M runs nothing.
    std::int64_t iterations = std::max<std::int64_t>(0, m->get_int(0));
    if (!cond.empty() && known_scalar(cond, "condition", why)->get(0) == 0) iterations = 0;
    check_unroll(iterations, body);
    std::vector<std::string> values(n.input().begin() + 2, n.input().end());
    std::vector<std::vector<std::string>> scans(static_cast<std::size_t>(scanned));
    std::string cond_in = cond;
    for (std::int64_t i = 0; i < iterations; ++i) {
      const std::string prefix = node_name + "/iteration_" + std::to_string(i) + "/";
      if (cond_in.empty()) cond_in = true_constant(prefix + "cond");
      name_map bound;
      // Each copy's iteration number is a constant, so what the body computes from it folds.
      bound.emplace(body.input(0).name(), int64_constant(prefix + body.input(0).name(), i, false));
      bound.emplace(body.input(1).name(), cond_in);
      for (int j = 0; j < carried; ++j) bound.emplace(body.input(2 + j).name(), values[static_cast<std::size_t>(j)]);
      const name_map names = inline_graph(body, std::move(bound), prefix);
      const auto out = [&](int k) {
        const auto it = names.find(body.output(k).name());
        return it == names.end() ? body.output(k).name() : it->second;
      };
      for (int j = 0; j < carried; ++j) values[static_cast<std::size_t>(j)] = out(1 + j);
      for (int k = 0; k < scanned; ++k) scans[static_cast<std::size_t>(k)].push_back(out(1 + carried + k));
      const std::string cond_out = out(0);
      if (p.pending(cond_out)) return false;
      const tensor* c = p.constant(cond_out);
      if (!c || !c->is_host() || !c->data())
        fail(errc::not_supported, node_name, cond_out,
             label(n, node_name) + ": its body's condition output '" + body.output(0).name() +
                 "' is computed at run time, so when the loop ends depends on data; " + why);
      // The body's condition false ends the loop after this iteration, its values and scan outputs
      // included.
      if (c->get(0) == 0) break;
      cond_in = cond_out;
    }
    for (int j = 0; j < carried && j < n.output_size(); ++j)
      if (!n.output(j).empty()) identity(values[static_cast<std::size_t>(j)], n.output(j));
    for (int k = 0; k < scanned && carried + k < n.output_size(); ++k) {
      const std::string& o = n.output(carried + k);
      if (o.empty()) continue;
      if (iterations == 0) empty_scan_output(body.output(1 + carried + k), 0, o, " runs no iteration");
      else stack(scans[static_cast<std::size_t>(k)], 0, o);
    }
    return true;
  }

  // The steps of a Scan, one copy of `body` each (named `prefix` + "step_<t>/"): step t reads
  // slice t of each scan input in `xs` along its axis (slice length-1-t where its direction is 1)
  // and the previous step's states, starting from `states`. Returns the last states and each scan
  // output's values, step by step.
  struct scan_steps {
    std::vector<std::string> states;
    std::vector<std::vector<std::string>> scans;
  };
  scan_steps unroll_scan(const ::onnx::GraphProto& body, std::vector<std::string> values,
                         const std::vector<std::string>& xs, const ints& axes, const ints& directions,
                         std::int64_t length, const std::string& prefix) const {
    const auto states = static_cast<int>(values.size());
    const int scanned = body.output_size() - states;
    std::vector<std::vector<std::string>> scans(static_cast<std::size_t>(scanned));
    for (std::int64_t t = 0; t < length; ++t) {
      const std::string step = prefix + "step_" + std::to_string(t) + "/";
      name_map bound;
      for (int j = 0; j < states; ++j) bound.emplace(body.input(j).name(), values[static_cast<std::size_t>(j)]);
      for (std::size_t j = 0; j < xs.size(); ++j) {
        // Gather with a scalar index takes the slice and drops the axis, as the body expects.
        const std::string& in = body.input(states + static_cast<int>(j)).name();
        const std::int64_t index = directions[j] ? length - 1 - t : t;
        const std::string slice = p.fresh(step + in);
        auto g = make_node("Gather", slice, {xs[j], int64_constant(slice + "/index", index, false)}, slice);
        set_int(g, "axis", axes[j]);
        emit(g);
        bound.emplace(in, slice);
      }
      const name_map names = inline_graph(body, std::move(bound), step);
      const auto out = [&](int k) {
        const auto it = names.find(body.output(k).name());
        return it == names.end() ? body.output(k).name() : it->second;
      };
      for (int j = 0; j < states; ++j) values[static_cast<std::size_t>(j)] = out(j);
      for (int k = 0; k < scanned; ++k) scans[static_cast<std::size_t>(k)].push_back(out(states + k));
    }
    return {std::move(values), std::move(scans)};
  }

  // Slice `index` of `x` along axis 0, the axis dropped.
  std::string batch_slice(const std::string& x, std::int64_t index, const std::string& base) const {
    const std::string slice = p.fresh(base);
    auto g = make_node("Gather", slice, {x, int64_constant(slice + "/index", index, false)}, slice);
    set_int(g, "axis", 0);
    emit(g);
    return slice;
  }

  // What a Scan's inputs, outputs and body must agree on; `leading` inputs before the states are
  // the node's own (Scan-8's sequence_lens).
  struct scan_signature {
    const ::onnx::GraphProto& body;
    std::size_t inputs;  // num_scan_inputs
    int states;
    int scanned;  // scan outputs the body gives
  };
  scan_signature check_scan(int leading) const {
    const auto& body = graph_attr(n, node_name, "body");
    const int given = std::max(0, n.input_size() - leading);
    const std::string after = leading != 0 ? " inputs after sequence_lens" : " inputs";
    const std::int64_t scan_inputs = int_attr(n, node_name, "num_scan_inputs", -1);
    if (scan_inputs < 1 || scan_inputs > given)
      fail(errc::invalid_argument, node_name, {},
           label(n, node_name) + ": num_scan_inputs is " + std::to_string(scan_inputs) + " for " +
               std::to_string(given) + after);
    const auto states = static_cast<int>(given - scan_inputs);
    if (body.input_size() != given || body.output_size() < states)
      fail(errc::parse_error, node_name, {},
           label(n, node_name) + ": its body has " + std::to_string(body.input_size()) + " inputs and " +
               std::to_string(body.output_size()) + " outputs for the node's " + std::to_string(given) + after + ", " +
               std::to_string(states) + " of them states");
    const int scanned = body.output_size() - states;
    if (n.output_size() > states + scanned)
      fail(errc::parse_error, node_name, {},
           label(n, node_name) + " has " + std::to_string(n.output_size()) + " outputs; its body gives " +
               std::to_string(states + scanned));
    for (const auto& v : body.input()) require_tensor(n, node_name, v);
    for (const auto& v : body.output()) require_tensor(n, node_name, v);
    return {body, static_cast<std::size_t>(scan_inputs), states, scanned};
  }

  void check_directions(const ints& directions, const char* key) const {
    for (auto d : directions)
      if (d != 0 && d != 1)
        fail(errc::invalid_argument, node_name, {},
             label(n, node_name) + ": a " + key + " value is " + std::to_string(d) + ", not 0 or 1");
  }

  // Scan of opset 8 (onnx.ai Scan-8): every state and scan input carries a batch axis 0 and the
  // scan inputs their sequence axis 1; each batch entry is scanned on its own and the outputs
  // stacked along the batch axis again. The optional first input, sequence_lens, must be absent
  // or say every sequence has the full length: shorter ones would give outputs padded past their
  // end, which an unrolled graph of static shapes has no way to tell apart.
  bool expand_scan8() const {
    const scan_signature sig = check_scan(1);
    const auto& body = sig.body;
    const int states = sig.states, scanned = sig.scanned;
    const std::size_t count = sig.inputs;
    const ints directions = ints_attr(n, node_name, "directions", count);
    check_directions(directions, "directions");
    std::int64_t batch = -1, length = -1;
    for (int j = 0; j < n.input_size() - 1; ++j) {
      const std::string& x = n.input(1 + j);
      if (p.pending(x)) return false;
      const value_info* info = p.find(x);
      const bool scan = j >= states;
      if (!info || !info->known)
        fail(errc::not_supported, node_name, x,
             label(n, node_name) + ": '" + x + "' has no static shape, which its batch " +
                 (scan ? "and sequence length need" : "size needs"));
      if (info->shape.rank() < (scan ? 2U : 1U))
        fail(errc::invalid_shape, node_name, x,
             label(n, node_name) + ": '" + x + "' has rank " + std::to_string(info->shape.rank()) +
                 (scan ? "; a scan input needs a batch and a sequence axis" : "; a state needs a batch axis"));
      const std::int64_t b = info->shape[0];
      if (batch >= 0 && b != batch)
        fail(errc::invalid_shape, node_name, x,
             label(n, node_name) + ": '" + x + "' has a batch of " + std::to_string(b) + ", another input " +
                 std::to_string(batch));
      batch = b;
      if (!scan) continue;
      const std::int64_t l = info->shape[1];
      if (length >= 0 && l != length)
        fail(errc::invalid_shape, node_name, x,
             label(n, node_name) + ": scan input '" + x + "' has " + std::to_string(l) + " steps, another " +
                 std::to_string(length));
      length = l;
    }
    if (const std::string& lens = n.input(0); !lens.empty()) {
      if (p.pending(lens)) return false;
      const tensor* t = p.constant(lens);
      if (!t || !t->is_host() || !t->data())
        fail(errc::not_supported, node_name, lens,
             label(n, node_name) + ": its sequence_lens '" + lens +
                 "' is computed at run time; npurt unrolls a Scan only over lengths known at import");
      for (std::int64_t i = 0; i < t->elements(); ++i)
        if (t->get_int(i) != length)
          fail(errc::not_supported, node_name, lens,
               label(n, node_name) + ": its sequence_lens gives a sequence " + std::to_string(t->get_int(i)) +
                   " steps long in a scan input of " + std::to_string(length) +
                   "; npurt unrolls Scan-8 only over sequences of the full length");
    }
    if (batch == 0 || length == 0)
      fail(errc::not_supported, node_name, {},
           label(n, node_name) +
               ": a batch or sequence of length 0 runs no step, and Scan-8's outputs would take "
               "their shape from a body that never runs");
    if (batch > 0 && length > max_unrolled_nodes / batch)
      fail(errc::not_supported, node_name, {},
           label(n, node_name) + ": " + std::to_string(batch) + " sequences of " + std::to_string(length) +
               " steps exceed " + std::to_string(max_unrolled_nodes) + " nodes, npurt's bound on what it unrolls");
    check_unroll(batch * length, body);
    std::vector<std::vector<std::string>> finals(static_cast<std::size_t>(states));
    std::vector<std::vector<std::string>> rows(static_cast<std::size_t>(scanned));
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::string prefix = node_name + "/batch_" + std::to_string(b) + "/";
      std::vector<std::string> values, xs;
      for (int j = 0; j < states; ++j) values.push_back(batch_slice(n.input(1 + j), b, prefix + "state"));
      for (int j = states; j < n.input_size() - 1; ++j) xs.push_back(batch_slice(n.input(1 + j), b, prefix + "input"));
      auto [last, scans] = unroll_scan(body, std::move(values), xs, ints(count, 0), directions, length, prefix);
      for (int j = 0; j < states; ++j) finals[static_cast<std::size_t>(j)].push_back(last[static_cast<std::size_t>(j)]);
      for (int k = 0; k < scanned; ++k) {
        if (states + k >= n.output_size() || n.output(states + k).empty()) continue;
        const std::string row = p.fresh(prefix + n.output(states + k));
        stack(scans[static_cast<std::size_t>(k)], 0, row);
        rows[static_cast<std::size_t>(k)].push_back(row);
      }
    }
    for (int j = 0; j < states && j < n.output_size(); ++j)
      if (!n.output(j).empty()) stack(finals[static_cast<std::size_t>(j)], 0, n.output(j));
    for (int k = 0; k < scanned && states + k < n.output_size(); ++k)
      if (!n.output(states + k).empty()) stack(rows[static_cast<std::size_t>(k)], 0, n.output(states + k));
    return true;
  }

  bool expand_scan() const {
    // Scan-8 scans a batch, its first input the sequence lengths.
    if (p.opset < 9) return expand_scan8();
    const scan_signature sig = check_scan(0);
    const auto& body = sig.body;
    const int states = sig.states, scanned = sig.scanned;
    const std::size_t count = sig.inputs;
    ints axes = ints_attr(n, node_name, "scan_input_axes", count);
    const ints directions = ints_attr(n, node_name, "scan_input_directions", count);
    const ints out_axes = ints_attr(n, node_name, "scan_output_axes", static_cast<std::size_t>(scanned));
    const ints out_directions = ints_attr(n, node_name, "scan_output_directions", static_cast<std::size_t>(scanned));
    check_directions(directions, "scan_input_directions");
    check_directions(out_directions, "scan_output_directions");
    std::int64_t length = -1;
    for (std::size_t j = 0; j < count; ++j) {
      const std::string& x = n.input(states + static_cast<int>(j));
      if (p.pending(x)) return false;
      const value_info* info = p.find(x);
      if (!info || !info->known)
        fail(errc::not_supported, node_name, x,
             label(n, node_name) + ": scan input '" + x + "' has no static shape, which its sequence length needs");
      const auto rank = static_cast<std::int64_t>(info->shape.rank());
      std::int64_t& a = axes[j];
      if (a < -rank || a >= rank)
        fail(errc::invalid_argument, node_name, x,
             label(n, node_name) + ": scan input axis " + std::to_string(a) + " is outside the rank " +
                 std::to_string(rank) + " of '" + x + "'");
      if (a < 0) a += rank;
      const std::int64_t l = info->shape[static_cast<std::size_t>(a)];
      if (length >= 0 && l != length)
        fail(errc::invalid_shape, node_name, x,
             label(n, node_name) + ": scan input '" + x + "' has " + std::to_string(l) + " steps, another " +
                 std::to_string(length));
      length = l;
    }
    check_unroll(length, body);
    std::vector<std::string> xs(n.input().begin() + states, n.input().end());
    auto [values, scans] = unroll_scan(body, std::vector<std::string>(n.input().begin(), n.input().begin() + states),
                                       xs, axes, directions, length, node_name + "/");
    for (int j = 0; j < states && j < n.output_size(); ++j)
      if (!n.output(j).empty()) identity(values[static_cast<std::size_t>(j)], n.output(j));
    for (int k = 0; k < scanned && states + k < n.output_size(); ++k) {
      if (n.output(states + k).empty()) continue;
      if (length == 0) {
        empty_scan_output(body.output(states + k), out_axes[static_cast<std::size_t>(k)], n.output(states + k),
                          " scans no step");
        continue;
      }
      auto parts = scans[static_cast<std::size_t>(k)];
      // Reversed, the last step's value comes first.
      if (out_directions[static_cast<std::size_t>(k)]) std::reverse(parts.begin(), parts.end());
      stack(parts, out_axes[static_cast<std::size_t>(k)], n.output(states + k));
    }
    return true;
  }
};

}  // namespace

::onnx::NodeProto make_node(const std::string& op, const std::string& name, std::vector<std::string> ins,
                            const std::string& out) {
  ::onnx::NodeProto n;
  n.set_op_type(op);
  n.set_name(name);
  for (auto& i : ins) n.add_input(std::move(i));
  n.add_output(out);
  return n;
}

void set_int(::onnx::NodeProto& n, const char* key, std::int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(key);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(v);
}

::onnx::NodeProto constant_node(const std::string& name, ::onnx::TensorProto t) {
  t.set_name(name);
  ::onnx::NodeProto c;
  c.set_op_type("Constant");
  c.set_name(name);
  c.add_output(name);
  auto* a = c.add_attribute();
  a->set_name("value");
  a->set_type(::onnx::AttributeProto::TENSOR);
  *a->mutable_t() = std::move(t);
  return c;
}

bool is_control_flow(std::string_view op_type) noexcept {
  return op_type == "If" || op_type == "Loop" || op_type == "Scan";
}

void collect_subgraph_names(const ::onnx::GraphProto& g, std::set<std::string>& names) {
  for (const auto& n : g.node())
    for (const auto& a : n.attribute()) {
      if (a.has_g()) collect(a.g(), names);
      for (const auto& sub : a.graphs()) collect(sub, names);
    }
}

void stack(const ::onnx::NodeProto& n, const std::string& node_name, const parent& p,
           const std::vector<std::string>& parts, std::int64_t axis, const std::string& out) {
  const expander e{n, node_name, p};
  e.stack(parts, axis, out);
}

std::vector<std::string> inline_body(const ::onnx::NodeProto& n, const std::string& node_name, const parent& p,
                                     const ::onnx::GraphProto& body,
                                     const std::map<std::string, std::string, std::less<>>& bound,
                                     const std::string& prefix) {
  const expander e{n, node_name, p};
  const name_map names = e.inline_graph(body, bound, prefix);
  std::vector<std::string> outs;
  outs.reserve(static_cast<std::size_t>(body.output_size()));
  for (const auto& o : body.output()) {
    const auto it = names.find(o.name());
    outs.push_back(it == names.end() ? o.name() : it->second);
  }
  return outs;
}

bool expand(const ::onnx::NodeProto& n, const std::string& node_name, const parent& p) {
  const expander e{n, node_name, p};
  if (n.op_type() == "If") return e.expand_if();
  if (n.op_type() == "Loop") return e.expand_loop();
  return e.expand_scan();
}

}  // namespace npurt::onnx::control_flow

// ONNX sequences and optionals resolved at import (see sequences.hpp).
#include "sequences.hpp"

#include <algorithm>
#include <array>
#include <utility>

namespace npurt::onnx::sequences {

std::vector<std::string> tensor_list::to_vector() const {
  std::vector<std::string> r;
  r.reserve(size());
  for (std::size_t i = 0; i < size(); ++i) r.push_back((*this)[i]);
  return r;
}

void tensor_list::unshare() {
  auto own = std::make_shared<storage>();
  for (std::size_t i = 0; i < size(); ++i) own->items.push_back((*this)[i]);
  last_ = static_cast<std::int64_t>(size());
  first_ = 0;
  store_ = std::move(own);
}

void tensor_list::push_back(std::string t) {
  // Another list that grew the storage's back owns what lies past last_: copy instead.
  if (!store_ || last_ != store_->first + static_cast<std::int64_t>(store_->items.size())) unshare();
  store_->items.push_back(std::move(t));
  ++last_;
}

void tensor_list::insert(std::size_t at, std::string t) {
  if (at == size()) {
    push_back(std::move(t));
    return;
  }
  if (at != 0 || first_ != store_->first) unshare();
  if (at == 0) {
    store_->items.push_front(std::move(t));
    --store_->first;
    --first_;
    return;
  }
  store_->items.insert(store_->items.begin() + static_cast<std::ptrdiff_t>(at), std::move(t));
  ++last_;
}

void tensor_list::erase(std::size_t at) {
  // At either end the list only narrows: the storage, which other lists may see, stays.
  if (at == 0) {
    ++first_;
  } else if (at + 1 == size()) {
    --last_;
  } else {
    unshare();
    store_->items.erase(store_->items.begin() + static_cast<std::ptrdiff_t>(at));
    --last_;
  }
}

namespace {

const std::string why_constant =
    "npurt resolves sequences at import, so a sequence's length and the positions in it must be known at import "
    "(an initializer, a Constant or a value folded from them)";

// The resolution of one node: the node for names and errors, the importer, the store.
struct resolver {
  const ::onnx::NodeProto& n;
  const std::string& node_name;
  const control_flow::parent& p;
  store& s;

  [[noreturn]] void fail(errc e, const std::string& tensor, const std::string& what) const {
    throw graph_error(make_error_code(e), node_name, tensor, "onnx: " + n.op_type() + " '" + node_name + "': " + what);
  }

  const ::onnx::AttributeProto* attr(std::string_view key) const {
    for (const auto& a : n.attribute())
      if (a.name() == key) return &a;
    return nullptr;
  }

  std::int64_t int_attr(std::string_view key, std::int64_t fallback) const {
    const auto* a = attr(key);
    if (!a) return fallback;
    if (a->type() != ::onnx::AttributeProto::INT)
      fail(errc::invalid_argument, {}, "attribute '" + a->name() + "' is not an INT");
    return a->i();
  }

  // Input i, or "" when the node has none there.
  const std::string& input(int i) const {
    static const std::string none;
    return i < n.input_size() ? n.input(i) : none;
  }

  void set(const std::string& out, value v) const {
    if (!out.empty()) s.insert_or_assign(out, std::move(v));
  }

  // The sequence input `name` (role says which, for messages).
  const value& sequence(const std::string& name, const std::string& role) const {
    if (name.empty()) fail(errc::invalid_argument, {}, "its " + role + " is missing");
    const auto it = s.find(name);
    if (it == s.end() || it->second.optional || !it->second.sequence)
      fail(errc::invalid_argument, name,
           "its " + role + " '" + name + "' is " +
               (it == s.end()         ? std::string(p.find(name) ? "a tensor" : "no value of the model")
                : it->second.optional ? "an optional"
                                      : "a tensor") +
               ", not a sequence");
    return it->second;
  }

  // The tensor input `name`: no sequence or optional.
  const std::string& tensor_input(const std::string& name, const std::string& role) const {
    if (name.empty()) fail(errc::invalid_argument, {}, "its " + role + " is missing");
    if (const auto it = s.find(name); it != s.end())
      fail(errc::not_supported, name,
           "its " + role + " '" + name + "' is " + (it->second.optional ? "an optional" : "a sequence") +
               "; npurt's sequences hold tensors only");
    return name;
  }

  // The dtype of tensor `name` when the graph knows it.
  std::optional<dtype> type_of(const std::string& name) const {
    if (const tensor* c = p.constant(name)) return c->type();
    if (const value_info* v = p.find(name); v && v->known) return v->type;
    return std::nullopt;
  }

  // ONNX: every tensor of a sequence has the same dtype.
  void add_element_type(value& v, const std::string& t) const {
    const auto type = type_of(t);
    if (!type) return;
    if (v.element_type && *v.element_type != *type)
      fail(errc::invalid_dtype, t,
           "'" + t + "' is " + std::string(to_string(*type)) + ", the sequence's tensors " +
               std::string(to_string(*v.element_type)) + " (a sequence's tensors share one dtype)");
    v.element_type = type;
  }

  // A position or split given as an input: a constant of an integer dtype, else refused.
  const tensor& constant_input(const std::string& name, const std::string& role) const {
    const tensor* t = p.constant(name);
    if (!t || !t->is_host() || !t->data())
      fail(errc::not_supported, name, "its " + role + " '" + name + "' is computed at run time; " + why_constant);
    if (t->type() != dtype::i64 && t->type() != dtype::i32)
      fail(errc::invalid_dtype, name,
           "its " + role + " '" + name + "' is " + std::string(to_string(t->type())) + ", not int32 or int64");
    return *t;
  }

  // A position in a sequence of `size` tensors, in [-size, size - 1], or [-size, size] where
  // `at_end` (SequenceInsert may insert after the last), made non-negative.
  std::size_t position(const std::string& name, std::size_t size, bool at_end) const {
    const tensor& t = constant_input(name, "position");
    // The spec says a scalar; ONNX's own node tests (test_sequence_insert_at_front) and reference
    // take a one-element 1-D position too, as ONNX Runtime does.
    if (t.elements() != 1 || t.shape().rank() > 1)
      fail(errc::invalid_shape, name,
           "its position '" + name + "' has shape " + shape_string(t.shape()) + "; a position is a scalar");
    const std::int64_t pos = t.get_int(0);
    const auto n_size = static_cast<std::int64_t>(size);
    const std::int64_t last = at_end ? n_size : n_size - 1;
    if (pos < -n_size || pos > last)
      fail(errc::invalid_argument, name,
           "its position '" + name + "' is " + std::to_string(pos) + ", outside [" + std::to_string(-n_size) + ", " +
               std::to_string(last) + "] for a sequence of " + std::to_string(size) + " tensors");
    return static_cast<std::size_t>(pos < 0 ? pos + n_size : pos);
  }

  void emit(const ::onnx::NodeProto& node) const {
    if (p.added && ++*p.added > control_flow::max_unrolled_nodes)
      fail(errc::not_supported, {},
           "its sequences add more than " + std::to_string(control_flow::max_unrolled_nodes) +
               " nodes, npurt's bound on what import adds");
    p.emit(node);
  }

  // A node named `name`, or a fresh name after it unless `exact` (the one node `n` becomes keeps
  // its name, so errors of the run name the model's node).
  ::onnx::NodeProto node(const std::string& op, const std::string& name, std::vector<std::string> ins,
                         const std::string& out, bool exact = false) const {
    return control_flow::make_node(op, exact ? name : p.fresh(name), std::move(ins), out);
  }

  // A Constant node whose output is `out` (or a fresh name after it), holding `t`.
  std::string constant(const std::string& out, ::onnx::TensorProto t, bool exact) const {
    const std::string name = exact ? out : p.fresh(out);
    emit(control_flow::constant_node(name, std::move(t)));
    return name;
  }

  std::string ints_constant(const std::string& out, const std::vector<std::int64_t>& v, bool scalar,
                            bool exact = false) const {
    ::onnx::TensorProto t;
    t.set_data_type(::onnx::TensorProto::INT64);
    if (!scalar) t.add_dims(static_cast<std::int64_t>(v.size()));
    for (auto x : v) t.add_int64_data(x);
    return constant(out, std::move(t), exact);
  }

  void identity(const std::string& from, const std::string& to) const {
    if (!to.empty()) emit(node("Identity", node_name, {from}, to, true));
  }

  // --- the operators --------------------------------------------------------------------------

  void sequence_empty() const {
    value v;
    // SequenceEmpty's dtype defaults to float (onnx.ai SequenceEmpty).
    const std::int64_t code = int_attr("dtype", ::onnx::TensorProto::FLOAT);
    v.element_type = dtype_from_onnx(code);
    set(n.output(0), std::move(v));
  }

  void sequence_construct() const {
    if (n.input_size() < 1) fail(errc::invalid_argument, {}, "it needs at least one tensor");
    value v;
    for (const auto& t : n.input()) {
      v.tensors.push_back(tensor_input(t, "input"));
      add_element_type(v, t);
    }
    set(n.output(0), std::move(v));
  }

  void sequence_insert() const {
    value v = sequence(input(0), "input sequence");
    const std::string& t = tensor_input(input(1), "tensor");
    // Without a position the tensor goes at the back (onnx.ai SequenceInsert).
    const std::size_t at = input(2).empty() ? v.tensors.size() : position(input(2), v.tensors.size(), true);
    add_element_type(v, t);
    v.tensors.insert(at, t);
    set(n.output(0), std::move(v));
  }

  void sequence_erase() const {
    value v = sequence(input(0), "input sequence");
    // Without a position the last tensor goes; an empty sequence has none to erase.
    if (input(1).empty() && v.tensors.empty())
      fail(errc::invalid_argument, input(0),
           "its input sequence '" + input(0) + "' is empty: it has no tensor to erase");
    const std::size_t at = input(1).empty() ? v.tensors.size() - 1 : position(input(1), v.tensors.size(), false);
    v.tensors.erase(at);
    set(n.output(0), std::move(v));
  }

  void sequence_at() const {
    const value& v = sequence(input(0), "input sequence");
    if (input(1).empty()) fail(errc::invalid_argument, {}, "it needs a position (input 1)");
    const std::size_t at = position(input(1), v.tensors.size(), false);
    identity(v.tensors[at], n.output(0));
  }

  void sequence_length() const {
    const value& v = sequence(input(0), "input sequence");
    if (!n.output(0).empty())
      (void)ints_constant(n.output(0), {static_cast<std::int64_t>(v.tensors.size())}, true, true);
  }

  // The rank of tensor `t`, when the graph knows its shape.
  std::optional<std::int64_t> rank_of(const std::string& t) const {
    if (const tensor* c = p.constant(t)) return static_cast<std::int64_t>(c->shape().rank());
    if (const value_info* v = p.find(t); v && v->known) return static_cast<std::int64_t>(v->shape.rank());
    return std::nullopt;
  }

  void concat_from_sequence() const {
    const value& v = sequence(input(0), "input sequence");
    if (!attr("axis")) fail(errc::invalid_argument, {}, "it needs the attribute 'axis'");
    std::int64_t axis = int_attr("axis", 0);
    const std::int64_t new_axis = int_attr("new_axis", 0);
    if (new_axis != 0 && new_axis != 1)
      fail(errc::invalid_argument, {}, "new_axis is " + std::to_string(new_axis) + ", not 0 or 1");
    // np.concatenate and np.stack of no array raise (onnx/reference/ops/op_concat_from_sequence.py).
    if (v.tensors.empty())
      fail(errc::invalid_argument, input(0),
           "its input sequence '" + input(0) + "' is empty: it has nothing to concatenate");
    // The axis counts in the inputs' rank, or in the stacked rank one higher with new_axis.
    if (const auto r = rank_of(v.tensors.front())) {
      const std::int64_t rank = *r + new_axis;
      if (axis < -rank || axis >= rank)
        fail(errc::invalid_argument, {},
             "axis " + std::to_string(axis) + " is outside [" + std::to_string(-rank) + ", " +
                 std::to_string(rank - 1) + "] for tensors of rank " + std::to_string(*r) +
                 (new_axis ? " stacked on a new axis" : ""));
      if (axis < 0) axis += rank;
    }
    if (n.output(0).empty()) return;
    if (new_axis) {
      // numpy.stack: each tensor Unsqueezed at the axis, then Concatenated, as a Loop's scan
      // outputs are.
      control_flow::stack(n, node_name, p, v.tensors.to_vector(), axis, n.output(0));
      return;
    }
    auto c = node("Concat", node_name, v.tensors.to_vector(), n.output(0), true);
    control_flow::set_int(c, "axis", axis);
    emit(c);
  }

  void split_to_sequence() const {
    const std::string& x = tensor_input(input(0), "input");
    const value_info* info = p.find(x);
    const tensor* xc = p.constant(x);
    const shape xs = xc ? xc->shape() : info && info->known ? info->shape : shape{};
    if (!xc && !(info && info->known))
      fail(errc::not_supported, x, "the shape of its input '" + x + "' is not known at import; " + why_constant);
    const auto rank = static_cast<std::int64_t>(xs.rank());
    std::int64_t axis = int_attr("axis", 0);
    if (axis < -rank || axis >= rank)
      fail(errc::invalid_argument, {},
           "axis " + std::to_string(axis) + " is outside [" + std::to_string(-rank) + ", " + std::to_string(rank - 1) +
               "] for its input '" + x + "' of shape " + shape_string(xs));
    if (axis < 0) axis += rank;
    const std::int64_t keepdims = int_attr("keepdims", 1);
    if (keepdims != 0 && keepdims != 1)
      fail(errc::invalid_argument, {}, "keepdims is " + std::to_string(keepdims) + ", not 0 or 1");
    const std::int64_t dim = xs[static_cast<std::size_t>(axis)];
    // The lengths of the parts (onnx.ai SplitToSequence, onnx/reference/ops/op_split_to_sequence.py):
    // no split, parts of 1; a scalar, parts of that length with a shorter last one; a 1-D split,
    // its lengths, which must add up to the axis.
    std::vector<std::int64_t> lengths;
    const std::string& split = input(1);
    if (split.empty()) {
      if (dim > control_flow::max_unrolled_nodes)
        fail(errc::not_supported, x,
             "it splits '" + x + "' into " + std::to_string(dim) + " tensors, more than " +
                 std::to_string(control_flow::max_unrolled_nodes) + ", npurt's bound on what import adds");
      lengths.assign(static_cast<std::size_t>(dim), 1);
    } else {
      const tensor& t = constant_input(split, "split");
      if (t.shape().rank() == 0) {
        const std::int64_t length = t.get_int(0);
        if (length < 1)
          fail(errc::invalid_argument, split,
               "its split '" + split + "' is " + std::to_string(length) + ", not positive");
        const std::int64_t whole = dim / length;
        if (whole > control_flow::max_unrolled_nodes)
          fail(errc::not_supported, x,
               "it splits '" + x + "' into more than " + std::to_string(control_flow::max_unrolled_nodes) +
                   " tensors, npurt's bound on what import adds");
        lengths.assign(static_cast<std::size_t>(whole), length);
        if (dim % length) lengths.push_back(dim % length);
      } else if (t.shape().rank() == 1) {
        std::int64_t sum = 0;
        for (std::int64_t i = 0; i < t.elements(); ++i) {
          const std::int64_t l = t.get_int(i);
          if (l < 0 || __builtin_add_overflow(sum, l, &sum))
            fail(errc::invalid_argument, split,
                 "its split '" + split + "' has the length " + std::to_string(l) +
                     (l < 0 ? ", which is negative" : ", whose sum overflows"));
          lengths.push_back(l);
        }
        if (sum != dim)
          fail(errc::invalid_argument, split,
               "its split '" + split + "' adds up to " + std::to_string(sum) + ", not the " + std::to_string(dim) +
                   " of axis " + std::to_string(axis) + " of '" + x + "'");
      } else {
        fail(errc::invalid_shape, split,
             "its split '" + split + "' has shape " + shape_string(t.shape()) + "; it is a scalar or 1-D");
      }
    }
    value v;
    add_element_type(v, x);
    // keepdims = 0 drops the axis, only when no split is given (each part is then of length 1).
    const bool squeeze = keepdims == 0 && split.empty();
    std::int64_t start = 0;
    for (std::size_t k = 0; k < lengths.size(); ++k) {
      const std::string part =
          p.fresh(n.output(0).empty() ? node_name + "/part" : n.output(0) + "/" + std::to_string(k));
      if (squeeze) {
        // Gather with a scalar index takes the slice and drops the axis.
        auto g = node("Gather", part, {x, ints_constant(part + "/index", {start}, true)}, part);
        control_flow::set_int(g, "axis", axis);
        emit(g);
      } else {
        emit(node(
            "Slice", part,
            {x, ints_constant(part + "/starts", {start}, false),
             ints_constant(part + "/ends", {start + lengths[k]}, false), ints_constant(part + "/axes", {axis}, false)},
            part));
      }
      start += lengths[k];
      v.tensors.push_back(part);
    }
    set(n.output(0), std::move(v));
  }

  void optional() const {
    value v;
    v.optional = true;
    if (input(0).empty()) {
      // No input: an empty optional of the type the attribute says.
      const auto* type = attr("type");
      if (!type || type->type() != ::onnx::AttributeProto::TYPE_PROTO)
        fail(errc::invalid_argument, {}, "it has no input and no attribute 'type'");
      v.present = false;
      v.sequence = type->tp().has_sequence_type();
      set(n.output(0), std::move(v));
      return;
    }
    const auto it = s.find(input(0));
    if (it != s.end()) {
      if (it->second.optional)
        fail(errc::invalid_argument, input(0),
             "its input '" + input(0) + "' is an optional; an optional holds a tensor or a sequence");
      v.tensors = it->second.tensors;
      v.element_type = it->second.element_type;
    } else {
      v.sequence = false;
      v.tensors.push_back(input(0));
    }
    set(n.output(0), std::move(v));
  }

  void optional_has_element() const {
    // An omitted input is an empty optional; a tensor or a sequence has its element (opset 18).
    bool has = !input(0).empty();
    if (const auto it = s.find(input(0)); has && it != s.end() && it->second.optional) has = it->second.present;
    if (n.output(0).empty()) return;
    ::onnx::TensorProto t;
    t.set_data_type(::onnx::TensorProto::BOOL);
    t.add_int32_data(has ? 1 : 0);
    (void)constant(n.output(0), std::move(t), true);
  }

  void optional_get_element() const {
    const std::string& in = input(0);
    if (in.empty()) fail(errc::invalid_argument, {}, "it needs an input");
    const auto it = s.find(in);
    if (it == s.end()) {
      // A tensor is its own element (opset 18).
      identity(in, n.output(0));
      return;
    }
    value v = it->second;
    if (v.optional && !v.present)
      fail(errc::invalid_argument, in, "its input '" + in + "' is an empty optional: it has no element to get");
    if (v.optional && !v.sequence) {
      identity(v.tensors.front(), n.output(0));
      return;
    }
    v.optional = false;
    v.present = true;
    set(n.output(0), std::move(v));
  }

  // SequenceMap: the body once per position of the sequences, each copy reading that position's
  // tensors (and the additional tensors whole); output k is the sequence of each copy's output k
  // (onnx.ai SequenceMap).
  void sequence_map() const {
    const ::onnx::AttributeProto* b = attr("body");
    if (!b || b->type() != ::onnx::AttributeProto::GRAPH)
      fail(errc::parse_error, {}, "it has no graph attribute 'body'");
    const ::onnx::GraphProto& body = b->g();
    if (body.input_size() != n.input_size() || body.output_size() != n.output_size())
      fail(errc::parse_error, {},
           "its body has " + std::to_string(body.input_size()) + " inputs and " + std::to_string(body.output_size()) +
               " outputs for the node's " + std::to_string(n.input_size()) + " and " + std::to_string(n.output_size()));
    const std::size_t length = sequence(input(0), "input sequence").tensors.size();
    for (int i = 1; i < n.input_size(); ++i)
      if (const auto it = s.find(n.input(i)); it != s.end()) {
        if (it->second.optional || !it->second.sequence)
          fail(errc::not_supported, n.input(i),
               "its input '" + n.input(i) + "' is an optional; it takes tensors and sequences");
        if (it->second.tensors.size() != length)
          fail(errc::invalid_argument, n.input(i),
               "its input sequences differ in length: '" + n.input(i) + "' has " +
                   std::to_string(it->second.tensors.size()) + " tensors, '" + input(0) + "' " +
                   std::to_string(length));
      }
    const std::int64_t per = std::max<std::int64_t>(1, body.node_size() + body.initializer_size());
    if (static_cast<std::int64_t>(length) > control_flow::max_unrolled_nodes / per)
      fail(errc::not_supported, {},
           std::to_string(length) + " copies of a body of " + std::to_string(per) + " nodes exceed " +
               std::to_string(control_flow::max_unrolled_nodes) + " nodes, npurt's bound on what it unrolls");
    std::vector<value> outs(static_cast<std::size_t>(n.output_size()));
    for (std::size_t k = 0; k < length; ++k) {
      std::map<std::string, std::string, std::less<>> bound;
      for (int i = 0; i < n.input_size(); ++i) {
        const auto it = s.find(n.input(i));
        bound.emplace(body.input(i).name(), it == s.end() ? n.input(i) : it->second.tensors[k]);
      }
      const std::vector<std::string> results =
          control_flow::inline_body(n, node_name, p, body, bound, node_name + "/element_" + std::to_string(k) + "/");
      for (std::size_t o = 0; o < outs.size(); ++o) {
        if (s.contains(results[o]))
          fail(errc::not_supported, results[o],
               "its body's output '" + body.output(static_cast<int>(o)).name() +
                   "' is a sequence or optional; npurt's sequences hold tensors only");
        if (!p.pending(results[o])) add_element_type(outs[o], results[o]);
        outs[o].tensors.push_back(results[o]);
      }
    }
    for (std::size_t o = 0; o < outs.size(); ++o) set(n.output(static_cast<int>(o)), std::move(outs[o]));
  }
};

using handler = void (resolver::*)() const;
constexpr std::array<std::pair<std::string_view, handler>, 12> handlers{{
    {"SequenceEmpty", &resolver::sequence_empty},
    {"SequenceConstruct", &resolver::sequence_construct},
    {"SequenceInsert", &resolver::sequence_insert},
    {"SequenceErase", &resolver::sequence_erase},
    {"SequenceAt", &resolver::sequence_at},
    {"SequenceLength", &resolver::sequence_length},
    {"ConcatFromSequence", &resolver::concat_from_sequence},
    {"SplitToSequence", &resolver::split_to_sequence},
    {"SequenceMap", &resolver::sequence_map},
    {"Optional", &resolver::optional},
    {"OptionalHasElement", &resolver::optional_has_element},
    {"OptionalGetElement", &resolver::optional_get_element},
}};

handler find_handler(std::string_view op_type) noexcept {
  const auto it = std::find_if(handlers.begin(), handlers.end(), [&](const auto& h) { return h.first == op_type; });
  return it == handlers.end() ? nullptr : it->second;
}

}  // namespace

bool is_sequence_op(std::string_view op_type) noexcept { return find_handler(op_type) != nullptr; }

const std::string* reads_sequence(const ::onnx::NodeProto& n, const store& s) {
  for (const auto& in : n.input())
    if (!in.empty() && s.contains(in)) return &in;
  return nullptr;
}

bool handles(const ::onnx::NodeProto& n, const store& s) {
  return is_sequence_op(n.op_type()) || (n.op_type() == "Identity" && reads_sequence(n, s));
}

bool import(const ::onnx::NodeProto& n, const std::string& node_name, const control_flow::parent& p, store& s) {
  const resolver r{n, node_name, p, s};
  if (n.output_size() < 1) r.fail(errc::parse_error, {}, "it needs an output");
  // What waits on a node the importer could not add waits too: the sequence would hold it.
  for (const auto& in : n.input())
    if (!in.empty() && p.pending(in)) return false;
  if (const handler h = find_handler(n.op_type())) {
    (r.*h)();
    return true;
  }
  // An Identity of a sequence or optional is the same value.
  if (n.input_size() != 1 || !s.contains(n.input(0))) r.fail(errc::parse_error, {}, "it takes exactly one input");
  r.set(n.output(0), s.at(n.input(0)));
  return true;
}

}  // namespace npurt::onnx::sequences

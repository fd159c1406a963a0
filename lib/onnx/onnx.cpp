// ONNX import (see npurt/onnx.hpp), on the protobuf classes of Debian's libonnx-dev.
#include <npurt/onnx.hpp>

#include <npurt/graph/detail/composite.hpp>

#include "control_flow.hpp"
#include "fold.hpp"
#include "sequences.hpp"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <system_error>

namespace npurt::onnx {

namespace {

[[noreturn]] void fail(errc e, const std::string& op, const std::string& tensor, const std::string& what) {
  throw graph_error(make_error_code(e), op, tensor, what);
}

// A file that cannot be read carries the system's reason as its code (std::errc in the generic
// category, as std::filesystem and checkpoint::load report it), so a caller can tell a missing
// file from a forbidden one without parsing the message.
std::string read_file(const std::string& path) {
  std::error_code fs_ec;
  if (std::filesystem::is_directory(path, fs_ec))
    throw graph_error(std::make_error_code(std::errc::is_a_directory), {}, {}, "onnx: cannot read '" + path + "'");
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int e = errno;
    if (e == 0) fail(errc::invalid_argument, {}, {}, "onnx: cannot open '" + path + "'");
    // what() ends in the code's message, the reason.
    throw graph_error(std::error_code(e, std::generic_category()), {}, {}, "onnx: cannot open '" + path + "'");
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad())
    throw graph_error(std::make_error_code(std::errc::io_error), {}, {}, "onnx: cannot read '" + path + "'");
  return ss.str();
}

tensor to_tensor(const ::onnx::TensorProto& t) {
  const auto type = dtype_from_onnx(t.data_type());
  if (!type)
    fail(errc::not_supported, {}, t.name(),
         "onnx: tensor '" + t.name() + "' has data type " + std::to_string(t.data_type()) +
             ", which npurt does not compute in");
  if (t.has_data_location() && t.data_location() == ::onnx::TensorProto::EXTERNAL)
    fail(errc::not_supported, {}, t.name(), "onnx: tensor '" + t.name() + "' has external data");
  shape s;
  if (t.dims_size() > static_cast<int>(shape::max_rank))
    fail(errc::not_supported, {}, t.name(), "onnx: tensor '" + t.name() + "' has rank above 8");
  // The dims come from the file: their product may overflow, and a tensor sized by them before
  // its data is counted would let a few bytes of model ask for terabytes.
  std::int64_t n = 1;
  for (auto d : t.dims()) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      fail(errc::invalid_shape, {}, t.name(),
           "onnx: tensor '" + t.name() + "' has dimension " + std::to_string(d) +
               (d < 0 ? ", which is negative" : ", which makes its element count overflow"));
    s.push_back(d);
  }
  std::size_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<std::size_t>(n), size_of(*type), &bytes))
    fail(errc::invalid_shape, {}, t.name(),
         "onnx: tensor '" + t.name() + "' has " + std::to_string(n) + " elements, whose size in bytes overflows");
  if (!t.raw_data().empty()) {
    if (t.raw_data().size() != bytes)
      fail(errc::parse_error, {}, t.name(),
           "onnx: tensor '" + t.name() + "' has " + std::to_string(t.raw_data().size()) + " bytes of raw data for " +
               std::to_string(bytes));
    tensor r(s, *type);
    std::memcpy(r.data(), t.raw_data().data(), bytes);
    // ONNX stores a bool as one byte: any nonzero byte is true, held as 1 as npurt's bools are.
    if (*type == dtype::boolean)
      for (auto& b : std::span(static_cast<std::byte*>(r.data()), bytes)) b = b != std::byte{0} ? std::byte{1} : b;
    return r;
  }
  // 16-bit floats travel as their bit patterns in int32_data, with the narrow integers (int16 and
  // uint16 too) and bools (set() makes any nonzero value true); doubles in double_data, uint32 and
  // uint64 in uint64_data (onnx.proto's TensorProto).
  const int have = *type == dtype::f32                          ? t.float_data_size()
                   : *type == dtype::i64                        ? t.int64_data_size()
                   : *type == dtype::f64                        ? t.double_data_size()
                   : *type == dtype::u32 || *type == dtype::u64 ? t.uint64_data_size()
                                                                : t.int32_data_size();
  if (static_cast<std::int64_t>(have) != n)
    fail(errc::parse_error, {}, t.name(),
         "onnx: tensor '" + t.name() + "' has " + std::to_string(have) + " values for " + std::to_string(n) +
             " elements");
  tensor r(s, *type);
  switch (*type) {
    case dtype::f32:
      for (int i = 0; i < have; ++i) r.set(i, t.float_data(i));
      break;
    case dtype::i64:
      // Through the bits, not set(double): a double holds integers exactly only up to 2^53, and
      // models use INT64_MAX as "to the end" (Slice's ends).
      if (have) std::memcpy(r.data(), t.int64_data().data(), static_cast<std::size_t>(have) * sizeof(std::int64_t));
      break;
    case dtype::f16:
    case dtype::bf16: {
      auto* p = static_cast<std::uint16_t*>(r.data());
      for (int i = 0; i < have; ++i) p[i] = static_cast<std::uint16_t>(t.int32_data(i));
      break;
    }
    case dtype::f64:
      if (have) std::memcpy(r.data(), t.double_data().data(), static_cast<std::size_t>(have) * sizeof(double));
      break;
    case dtype::u64:
      if (have) std::memcpy(r.data(), t.uint64_data().data(), static_cast<std::size_t>(have) * sizeof(std::uint64_t));
      break;
    case dtype::u32: {
      auto* p = static_cast<std::uint32_t*>(r.data());
      for (int i = 0; i < have; ++i) {
        if (t.uint64_data(i) > UINT32_MAX)
          fail(errc::parse_error, {}, t.name(),
               "onnx: uint32 tensor '" + t.name() + "' has uint64_data[" + std::to_string(i) +
                   "] = " + std::to_string(t.uint64_data(i)) + ", which is no uint32");
        p[i] = static_cast<std::uint32_t>(t.uint64_data(i));
      }
      break;
    }
    default:
      for (int i = 0; i < have; ++i) r.set(i, t.int32_data(i));
  }
  return r;
}

attribute to_attribute(const ::onnx::NodeProto& n, const ::onnx::AttributeProto& a) {
  switch (a.type()) {
    case ::onnx::AttributeProto::INT: return static_cast<std::int64_t>(a.i());
    case ::onnx::AttributeProto::FLOAT: return static_cast<double>(a.f());
    case ::onnx::AttributeProto::STRING: return a.s();
    case ::onnx::AttributeProto::INTS: return ints(a.ints().begin(), a.ints().end());
    case ::onnx::AttributeProto::FLOATS: return floats(a.floats().begin(), a.floats().end());
    case ::onnx::AttributeProto::STRINGS:
      // RNN, GRU and LSTM's activations: the graph's attributes hold no list of strings, so the
      // names travel as one string, comma-separated (no ONNX activation name has a comma).
      if ((n.op_type() == "RNN" || n.op_type() == "GRU" || n.op_type() == "LSTM") && a.name() == "activations") {
        std::string joined;
        for (const auto& s : a.strings()) {
          if (s.find(',') != std::string::npos)
            fail(errc::invalid_argument, n.name(), {},
                 "onnx: " + n.op_type() + " '" + n.name() + "': activation '" + s + "' is no activation's name");
          if (!joined.empty()) joined += ',';
          joined += s;
        }
        return joined;
      }
      [[fallthrough]];
    default:
      fail(errc::not_supported, n.name(), {},
           "onnx: " + n.op_type() + " '" + n.name() + "': attribute '" + a.name() + "' of type " +
               std::to_string(static_cast<int>(a.type())) + " is not supported");
  }
}

// A Constant node's value: exactly one of its value attributes (ONNX's Constant, opset 12 on).
folding::host_value constant_value(const ::onnx::NodeProto& n, const std::string& node_name) {
  const ::onnx::AttributeProto* v = nullptr;
  for (const auto& a : n.attribute()) {
    if (a.name().rfind("value", 0) != 0 && a.name() != "sparse_value") continue;
    if (v)
      fail(errc::parse_error, node_name, n.output(0),
           "onnx: Constant '" + node_name + "' has both '" + v->name() + "' and '" + a.name() +
               "'; it takes exactly one value");
    v = &a;
  }
  if (!v) fail(errc::parse_error, node_name, n.output(0), "onnx: Constant '" + node_name + "' has no value");
  const auto wrong_type = [&] {
    fail(errc::parse_error, node_name, n.output(0),
         "onnx: Constant '" + node_name + "': attribute '" + v->name() + "' has type " +
             std::to_string(static_cast<int>(v->type())) + ", not the one its name says");
  };
  const std::string& k = v->name();
  if (k == "value") {
    if (v->type() != ::onnx::AttributeProto::TENSOR) wrong_type();
    return folding::to_host_value(v->t());
  }
  if (k == "value_float" || k == "value_floats") {
    const bool one = k == "value_float";
    if (v->type() != (one ? ::onnx::AttributeProto::FLOAT : ::onnx::AttributeProto::FLOATS)) wrong_type();
    const auto count = one ? 1 : v->floats_size();
    tensor r(one ? shape{} : shape{count}, dtype::f32);
    for (int i = 0; i < count; ++i) r.set(i, one ? v->f() : v->floats(i));
    return {std::move(r)};
  }
  if (k == "value_int" || k == "value_ints") {
    const bool one = k == "value_int";
    if (v->type() != (one ? ::onnx::AttributeProto::INT : ::onnx::AttributeProto::INTS)) wrong_type();
    const auto count = one ? 1 : v->ints_size();
    tensor r(one ? shape{} : shape{count}, dtype::i64);
    // Through the bits: set(double) would round integers above 2^53.
    auto* p = static_cast<std::int64_t*>(r.data());
    for (int i = 0; i < count; ++i) p[i] = one ? v->i() : v->ints(i);
    return {std::move(r)};
  }
  // value_string(s) and sparse_value: npurt computes in neither strings nor sparse tensors.
  fail(errc::not_supported, node_name, n.output(0),
       "onnx: Constant '" + node_name + "': '" + k +
           "' is not supported (npurt takes value, value_float, value_floats, value_int and value_ints)");
}

std::int64_t opset_of(const ::onnx::ModelProto& m) {
  for (const auto& o : m.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") return o.version();
  return 1;
}

// Attributes of opsets before 7 (BatchNormalization's spatial: before 9) that ask for what the
// later form does without them, per onnx.ai's operator changelog: dropped, so an old export (the
// pytorch-converted models of ONNX's test data) imports as its later form. consumed_inputs
// (opsets 1 to 5) was a memory hint; Gemm-6's broadcast allowed what Gemm-7's C broadcasting
// does; is_test = 1 is inference, spatial = 1 per-channel statistics; an arithmetic or logical
// operator's broadcast aligned B with the trailing axes of A, as NumPy does, unless `axis` moved
// it (broadcast_axis_reshape handles that). Anything else (is_test = 0: training) is kept, and
// the graph refuses it naming the attribute.
bool legacy_broadcast_op(const std::string& op) {
  return op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow" || op == "And" || op == "Or" ||
         op == "Xor" || op == "Equal" || op == "Greater" || op == "Less";
}

bool legacy_default(const ::onnx::NodeProto& n, const ::onnx::AttributeProto& a, std::int64_t opset) {
  const std::string& op = n.op_type();
  const std::string& k = a.name();
  if (k == "spatial") return op == "BatchNormalization" && opset < 9 && a.i() == 1;
  if (opset >= 7) return false;
  if (k == "consumed_inputs") return true;
  if (k == "is_test") return (op == "BatchNormalization" || op == "Dropout") && a.i() == 1;
  if (k == "broadcast") return op == "Gemm" || legacy_broadcast_op(op);
  return false;
}

// Opset 6's broadcast with `axis`: B's dimensions sit in A's from `axis` on. NumPy's rule aligns
// them with A's last ones, so B is reshaped with a 1 for each of A's axes after its own. Returns
// the tensor to read as B (itself when no reshape is needed); empty when the shapes are not known.
std::string broadcast_axis_reshape(graph& g, const ::onnx::NodeProto& n, std::int64_t axis,
                                   const std::string& node_name,
                                   const std::function<std::string(const std::string&)>& fresh) {
  const value_info* a = n.input_size() == 2 ? g.find(n.input(0)) : nullptr;
  const value_info* b = a ? g.find(n.input(1)) : nullptr;
  if (!a || !b || !a->known || !b->known) return {};
  const auto ra = static_cast<std::int64_t>(a->shape.rank()), rb = static_cast<std::int64_t>(b->shape.rank());
  if (axis < 0) axis += ra;
  if (axis < 0 || axis + rb > ra)
    fail(errc::invalid_argument, node_name, n.input(1),
         "onnx: " + n.op_type() + " '" + node_name + "': broadcast axis " + std::to_string(axis) +
             " does not fit B of rank " + std::to_string(rb) + " into A of rank " + std::to_string(ra));
  if (axis + rb == ra) return n.input(1);
  shape target = b->shape;
  for (std::int64_t i = axis + rb; i < ra; ++i) target.push_back(1);
  tensor dims(shape{static_cast<std::int64_t>(target.rank())}, dtype::i64);
  for (std::size_t i = 0; i < target.rank(); ++i) {
    const std::int64_t d = target[i];
    std::memcpy(static_cast<char*>(dims.data()) + i * sizeof d, &d, sizeof d);
  }
  const std::string dims_name = fresh(node_name + "/broadcast_shape");
  g.add_constant(dims_name, std::move(dims));
  const std::string reshaped = fresh(node_name + "/broadcast_b");
  g.add_node("Reshape", reshaped, {n.input(1), dims_name}, {reshaped});
  return reshaped;
}

// Slice-1 (opsets 1 to 9) takes starts, ends and the optional axes as attributes, each element
// meaning what the same element of Slice-10's inputs does (an index past the end is the end, a
// negative one counts from it; axes default to the first ones): they become constant int64 inputs
// of the graph's Slice. Any other attribute is left for the Slice to refuse by name.
void slice_attributes_as_inputs(graph& g, const std::string& node_name, std::vector<std::string>& ins,
                                attributes& attrs, const std::function<std::string(const std::string&)>& fresh) {
  if (ins.size() != 1)
    fail(
        errc::parse_error, node_name, {},
        "onnx: Slice '" + node_name + "' before opset 10 takes one input, data (starts, ends and axes are attributes)");
  for (const char* key : {"starts", "ends", "axes"}) {
    if (!attrs.has(key)) {
      if (key[0] == 'a') break;
      fail(errc::invalid_argument, node_name, ins[0],
           "onnx: Slice '" + node_name + "' before opset 10 needs the attribute " + key);
    }
    const ints v = attrs.get_ints(key);
    tensor t(shape{static_cast<std::int64_t>(v.size())}, dtype::i64);
    if (!v.empty()) std::memcpy(t.data(), v.data(), v.size() * sizeof(std::int64_t));
    const std::string name = fresh(node_name + "/" + key);
    g.add_constant(name, std::move(t));
    ins.push_back(name);
  }
  attributes rest;
  for (const auto& [key, value] : attrs.items())
    if (key != "starts" && key != "ends" && key != "axes") rest.set(key, value);
  attrs = std::move(rest);
}

// Softmax, LogSoftmax and Hardmax before opset 13 coerce X to 2-D at `axis` (default 1):
// [d0 ... d(axis-1), d(axis) ... d(r-1)] with each part's extents multiplied, normalise each row
// over all of its elements, and give the result X's shape (onnx.ai's Softmax-1 and Softmax-11;
// opset 13 normalises along the one axis instead). The two agree when the axis is the last, and
// the node is then the graph's operator; otherwise it is a chain: Flatten at the axis, the
// operator along axis 1, and a Reshape to X's shape that carries the node's name and output.
void add_coerced_2d(graph& g, const ::onnx::NodeProto& n, const std::string& node_name,
                    const std::vector<std::string>& ins, attributes attrs,
                    const std::function<std::string(const std::string&)>& fresh) {
  const std::string& op = n.op_type();
  const value_info* x = ins.size() == 1 && n.output_size() == 1 ? g.find(ins[0]) : nullptr;
  if (!x || !x->known || x->shape.rank() == 0) {
    // The graph's operator refuses what is not one input and one output, or a scalar, by name.
    g.add_node(op, node_name, ins, {n.output().begin(), n.output().end()}, std::move(attrs));
    return;
  }
  const auto rank = static_cast<std::int64_t>(x->shape.rank());
  std::int64_t axis = attrs.get_int("axis", 1);
  if (axis < -rank || axis >= rank)
    fail(errc::invalid_argument, node_name, ins[0],
         "onnx: " + op + " '" + node_name + "': axis " + std::to_string(axis) + " is outside [" +
             std::to_string(-rank) + ", " + std::to_string(rank - 1) + "] for '" + ins[0] + "' of shape " +
             shape_string(x->shape));
  if (axis < 0) axis += rank;
  if (axis == rank - 1) {
    attrs.set("axis", axis);
    g.add_node(op, node_name, ins, {n.output(0)}, std::move(attrs));
    return;
  }
  tensor dims(shape{rank}, dtype::i64);
  for (std::int64_t i = 0; i < rank; ++i) {
    const std::int64_t d = x->shape[static_cast<std::size_t>(i)];
    std::memcpy(static_cast<char*>(dims.data()) + i * static_cast<std::int64_t>(sizeof d), &d, sizeof d);
  }
  const std::size_t first = g.nodes().size();
  const std::string flat = fresh(node_name + "/flatten");
  g.add_node("Flatten", flat, {ins[0]}, {flat}, {{"axis", axis}});
  const std::string rows = fresh(node_name + "/" + op);
  attrs.set("axis", std::int64_t{1});
  const std::vector<std::string> step_in{flat}, step_out{rows};
  if (detail::added_as_chain(g, op, step_in, step_out, attrs))
    detail::add_composite(g, op, rows, step_in, step_out, attrs, fresh);
  else g.add_node(op, rows, step_in, step_out, std::move(attrs));
  const std::string shape_name = fresh(node_name + "/shape");
  g.add_constant(shape_name, std::move(dims));
  g.add_node("Reshape", node_name, {rows, shape_name}, {n.output(0)});
  g.set_origin(first, op, node_name);
}

// A graph input of the model: a tensor of a dtype npurt computes in, with fixed dimensions or
// symbolic ones that opts.dims sizes; a constant of the graph when opts.constant_inputs binds it.
void add_input(graph& g, const ::onnx::ValueInfoProto& in, const load_options& opts) {
  // The importer resolves sequences and optionals inside a model (sequences.hpp); one fed at run
  // time would have a length only the run decides.
  if (in.type().has_sequence_type() || in.type().has_optional_type())
    fail(errc::not_supported, {}, in.name(),
         "onnx: input '" + in.name() + "' is " + (in.type().has_sequence_type() ? "a sequence" : "an optional") +
             "; npurt's graphs take tensors only (sequences and optionals are resolved at import, within the model)");
  if (!in.type().has_tensor_type())
    fail(errc::not_supported, {}, in.name(), "onnx: input '" + in.name() + "' is not a tensor");
  const auto& tt = in.type().tensor_type();
  const auto type = dtype_from_onnx(tt.elem_type());
  if (!type)
    fail(errc::not_supported, {}, in.name(),
         "onnx: input '" + in.name() + "' has data type " + std::to_string(tt.elem_type()));
  // npurt's shapes hold at most 8 dimensions: the initializers' limit, and error, applies.
  if (tt.shape().dim_size() > static_cast<int>(shape::max_rank))
    fail(errc::not_supported, {}, in.name(), "onnx: input '" + in.name() + "' has rank above 8");
  if (!tt.has_shape())
    fail(errc::invalid_shape, {}, in.name(), "onnx: input '" + in.name() + "' has no shape (its rank is unknown)");
  shape s;
  for (const auto& d : tt.shape().dim()) {
    if (d.has_dim_value()) {
      s.push_back(d.dim_value());
      continue;
    }
    if (d.dim_param().empty())
      fail(errc::invalid_shape, {}, in.name(),
           "onnx: input '" + in.name() + "' has a dimension of unknown size (neither a value nor a name)");
    const auto it = opts.dims.find(d.dim_param());
    if (it == opts.dims.end())
      fail(errc::invalid_shape, {}, in.name(),
           "onnx: input '" + in.name() + "' has the symbolic dimension '" + d.dim_param() +
               "' (give it a value with load_options::dims)");
    s.push_back(it->second);
  }
  if (const auto bound = opts.constant_inputs.find(in.name()); bound != opts.constant_inputs.end()) {
    const tensor& v = *bound->second;
    if (v.type() != *type)
      fail(errc::invalid_dtype, {}, in.name(),
           "onnx: the constant for input '" + in.name() + "' is " + std::string(to_string(v.type())) + ", the input " +
               std::string(to_string(*type)));
    if (!(v.shape() == s))
      fail(errc::invalid_shape, {}, in.name(),
           "onnx: the constant for input '" + in.name() + "' has shape " + shape_string(v.shape()) + ", the input " +
               shape_string(s));
    g.add_constant(in.name(), v.clone());
    return;
  }
  g.add_input(in.name(), s, *type);
}

// What the importer knows of tensor names beyond the graph, as it walks the nodes in order.
struct import_state {
  // Outputs of nodes that were neither added nor folded (an unsupported operator, or one reading
  // such an output); `would_fold` marks those that would fold were their producers supported.
  std::set<std::string, std::less<>> pending, would_fold;
  // The model's sequences and optionals, known at import: lists of tensor names, never values of
  // the graph.
  sequences::store sequences;
};

// Keeps a known value as a constant of the graph.
void keep(graph& g, const std::string& name, folding::host_value v) { g.add_constant(name, std::move(v.value)); }

// What became of an operator whose output's shape depends on data (folding::shape_depends_on_data).
struct data_shaped {
  enum { added, waiting, unsupported } what = added;
  bool would_fold = false;  // waiting: every input would be known
  std::string why;          // unsupported: why, for the list of unsupported operators
};

// NonZero, Compress, Unique and NonMaxSuppression: folded when their inputs are constants; Compress
// with a constant condition and data fed at run time selects a static number of slices, so it is
// added as a Gather of those indices (of the flattened data when it has no axis). Anything else has
// an output shape only the run-time data decides, which npurt's static shapes cannot hold.
data_shaped add_data_shaped(graph& g, const import_state& st, const ::onnx::NodeProto& n, const std::string& node_name,
                            std::span<const folding::operand> known,
                            const std::function<std::string(const std::string&)>& fresh) {
  const std::string& t = n.op_type();
  if (n.output_size() < 1 || n.output(0).empty())
    throw graph_error(make_error_code(errc::invalid_argument), node_name, {},
                      "onnx: " + t + " '" + node_name + "' needs a named first output");
  data_shaped r;
  bool any_pending = false, all_would_fold = true, all_constant = true;
  std::string not_constant;
  int not_constants = 0;
  for (int i = 0; i < n.input_size(); ++i) {
    const std::string& in = n.input(i);
    const auto k = static_cast<std::size_t>(i);
    if (in.empty() || known[k].value) continue;
    all_constant = false;
    const bool pending = st.pending.count(in) != 0, would_fold = st.would_fold.count(in) != 0;
    any_pending = any_pending || pending;
    all_would_fold = all_would_fold && would_fold;
    if (folding::decides_shape(t, k) && !would_fold) {
      not_constant += (not_constant.empty() ? "'" : ", '") + in + "'";
      ++not_constants;
    }
  }
  if (!not_constant.empty()) {
    r.what = data_shaped::unsupported;
    const bool one = not_constants == 1;
    r.why = t + " (" +
            (t == "Compress" ? "its condition "
             : one           ? "its input "
                             : "its inputs ") +
            not_constant +
            (one ? " must be a constant: the output's shape depends on its values"
                 : " must be constants: the output's shape depends on their values") +
            ", and npurt's shapes are static)";
    return r;
  }
  if (any_pending) {
    r.what = data_shaped::waiting;
    r.would_fold = all_would_fold;
    return r;
  }
  // A Compress whose data is a constant without data (a timing-only weight) is the Gather below.
  if (all_constant && (t != "Compress" || !known[0].value || known[0].value->is_host())) {
    auto values = folding::fold_shape_from_data(n, node_name, known);
    if (!values) {
      r.what = data_shaped::unsupported;
      r.why = t + " (folding more than 2^24 elements)";
      return r;
    }
    for (int o = 0; o < n.output_size(); ++o)
      if (!n.output(o).empty()) keep(g, n.output(o), std::move((*values)[static_cast<std::size_t>(o)]));
    return r;
  }
  // Compress of data fed at run time (or a constant without data) under a constant condition.
  const value_info* data = g.find(n.input(0));
  if (!data || !data->known)
    throw graph_error(make_error_code(errc::invalid_shape), node_name, n.input(0),
                      "onnx: Compress '" + node_name + "': the shape of '" + n.input(0) + "' is unknown");
  if (known.size() < 2 || !known[1].value)
    throw graph_error(make_error_code(errc::invalid_argument), node_name, {},
                      "onnx: Compress '" + node_name + "' needs a condition (input 1)");
  if (!known[1].value->is_host())
    throw graph_error(make_error_code(errc::not_supported), node_name, n.input(1),
                      "onnx: Compress '" + node_name + "': the condition '" + n.input(1) + "' has no data");
  // By value: adding constants below may move the graph's value records (and `known`'s tensors).
  const shape data_shape = data->shape;
  const folding::compress_selection sel = folding::select_compressed(n, node_name, *known[1].value, data_shape);
  tensor indices(shape{static_cast<std::int64_t>(sel.indices.size())}, dtype::i64);
  if (!sel.indices.empty()) std::memcpy(indices.data(), sel.indices.data(), indices.bytes());
  const std::string index_name = fresh(node_name + "/indices");
  g.add_constant(index_name, std::move(indices));
  std::string from = n.input(0);
  if (!sel.axis && data_shape.rank() != 1) {
    // numpy.compress without an axis works on the flattened input.
    tensor flat(shape{1}, dtype::i64);
    const std::int64_t elements = data_shape.elements();
    std::memcpy(flat.data(), &elements, sizeof elements);
    const std::string flat_shape = fresh(node_name + "/flat_shape");
    g.add_constant(flat_shape, std::move(flat));
    from = fresh(node_name + "/flat");
    g.add_node("Reshape", from, {n.input(0), flat_shape}, {from});
  }
  attributes attrs;
  attrs.set("axis", static_cast<std::int64_t>(sel.axis.value_or(0)));
  g.add_node("Gather", node_name, {from, index_name}, {n.output(0)}, std::move(attrs));
  return r;
}

graph build(const ::onnx::ModelProto& m, const std::string& name, const load_options& opts) {
  const auto& gp = m.graph();
  const std::int64_t opset = opset_of(m);
  for (const auto& [dim, value] : opts.dims)
    if (value < 1)
      fail(errc::invalid_argument, {}, {},
           "onnx: load_options::dims gives '" + dim + "' the value " + std::to_string(value) +
               ": a dimension is at least 1");
  for (const auto& [input, value] : opts.constant_inputs) {
    const bool is_input = std::any_of(gp.input().begin(), gp.input().end(), [&](const auto& in) {
      return in.name() == input && std::none_of(gp.initializer().begin(), gp.initializer().end(),
                                                [&](const auto& t) { return t.name() == input; });
    });
    if (!is_input)
      fail(errc::invalid_argument, {}, input,
           "onnx: load_options::constant_inputs names '" + input + "', which is no graph input of '" + name + "'");
    if (!value || !value->is_host())
      fail(errc::invalid_argument, {}, input,
           "onnx: load_options::constant_inputs gives '" + input + "' " +
               (value ? "a device tensor (a host tensor is copied into the graph)" : "no tensor"));
  }
  graph g(gp.name().empty() ? name : gp.name());
  import_state st;
  // Every unsupported operator is listed at once, so a user sees the whole gap, not the first
  // hole. Whether a fold-only operator (Shape, Range, ...) is supported depends on what it
  // reads, known only in order; so the model is walked once, an error of an initializer, input or
  // node is held until the walk ends, and the list of unsupported operators, if any, is the error
  // reported. What reads a tensor whose error is held waits on it and is not listed.
  std::set<std::string> unsupported;
  std::exception_ptr first_error;
  const auto hold = [&](const std::string& tensor_name) {
    if (!first_error) first_error = std::current_exception();
    st.pending.insert(tensor_name);
    st.would_fold.insert(tensor_name);
  };
  std::set<std::string> inits;
  for (const auto& t : gp.initializer()) {
    inits.insert(t.name());
    try {
      keep(g, t.name(), folding::to_host_value(t));
    } catch (const graph_error&) { hold(t.name()); }
  }
  std::set<std::string, std::less<>> symbolic_dims;
  for (const auto& in : gp.input()) {
    if (inits.count(in.name())) continue;
    for (const auto& d : in.type().tensor_type().shape().dim())
      if (!d.has_dim_value()) symbolic_dims.insert(d.dim_param());
    try {
      add_input(g, in, opts);
    } catch (const graph_error&) { hold(in.name()); }
  }
  // A value for a dimension the model does not have is a misspelling more often than not: the
  // dimension it was meant for would otherwise be refused with a message about the other name.
  for (const auto& [dim, value] : opts.dims)
    if (!symbolic_dims.contains(dim))
      fail(errc::invalid_argument, {}, {},
           "onnx: load_options::dims names '" + dim + "', which is no symbolic dimension of the inputs of '" + name +
               "'");
  // Names for unnamed nodes, never one a named node of the model has (in any order).
  std::set<std::string> named;
  for (const auto& n : gp.node())
    if (!n.name().empty()) named.insert(n.name());
  std::size_t unnamed = 0;
  // Every name the model uses, for the intermediates of expanded operators to avoid.
  std::set<std::string> taken = named;
  for (const auto& t : gp.initializer()) taken.insert(t.name());
  for (const auto& in : gp.input()) taken.insert(in.name());
  for (const auto& n : gp.node()) {
    taken.insert(n.input().begin(), n.input().end());
    taken.insert(n.output().begin(), n.output().end());
  }
  control_flow::collect_subgraph_names(gp, taken);
  const auto fresh = [&taken](const std::string& base) {
    std::string r = base;
    for (std::size_t k = 1; taken.count(r); ++k) r = base + "_" + std::to_string(k);
    taken.insert(r);
    return r;
  };
  const auto set_pending = [&st](const ::onnx::NodeProto& n, bool would_fold) {
    for (const auto& o : n.output()) {
      st.pending.insert(o);
      if (would_fold) st.would_fold.insert(o);
    }
  };
  // Control flow (If, Loop, Scan) is replaced by the nodes it amounts to, each imported as the
  // model's own are: so import_node is called again from within itself.
  std::int64_t control_flow_added = 0;
  std::function<void(const ::onnx::NodeProto&)> import_node;
  const control_flow::parent scope{.opset = opset,
                                   .constant = [&g](const std::string& v) { return g.constant(v); },
                                   .find = [&g](const std::string& v) { return g.find(v); },
                                   .pending = [&st](const std::string& v) { return st.pending.count(v) != 0; },
                                   .fresh = fresh,
                                   .emit = [&import_node](const ::onnx::NodeProto& n) { import_node(n); },
                                   .added = &control_flow_added};
  import_node = [&](const ::onnx::NodeProto& n) {
    std::string node_name = n.name();
    while (node_name.empty() || (n.name().empty() && named.count(node_name)))
      node_name = n.op_type() + "_" + std::to_string(unnamed++);
    const bool onnx_domain = n.domain().empty() || n.domain() == "ai.onnx";
    std::string label = onnx_domain ? n.op_type() : n.domain() + "." + n.op_type();
    // Adagrad, Adam and Momentum are operators of the domain ai.onnx.preview.training only.
    const bool training_op = n.op_type() == "Adagrad" || n.op_type() == "Adam" || n.op_type() == "Momentum";
    bool graph_op =
        training_op ? n.domain() == "ai.onnx.preview.training" : onnx_domain && is_supported_op(n.op_type());
    // Softmax, LogSoftmax and Hardmax before opset 13 flatten to 2-D around the axis (see
    // add_coerced_2d).
    const bool coerced_2d = graph_op && onnx_domain &&
                            (n.op_type() == "Softmax" || n.op_type() == "LogSoftmax" || n.op_type() == "Hardmax") &&
                            opset < 13;
    // Slice before opset 10 takes starts, ends and axes as attributes: the folder reads them so,
    // the graph's Slice as inputs (see slice_attributes_as_inputs).
    const bool old_slice = onnx_domain && n.op_type() == "Slice" && opset < 10;
    const bool foldable = onnx_domain && folding::is_foldable(n.op_type());
    try {
      if (onnx_domain && sequences::handles(n, st.sequences)) {
        if (!sequences::import(n, node_name, scope, st.sequences)) set_pending(n, false);
        return;
      }
      // An operator the graph has or folds takes tensors: a sequence given to it is the model's
      // error. Any other is listed as unsupported below.
      if (const std::string* seq = sequences::reads_sequence(n, st.sequences);
          seq && !(onnx_domain && control_flow::is_control_flow(n.op_type())) && (graph_op || foldable))
        fail(errc::invalid_argument, node_name, *seq,
             "onnx: " + label + " '" + node_name + "': its input '" + *seq + "' is " +
                 (st.sequences.at(*seq).optional ? "an optional" : "a sequence") + ", where it takes a tensor");
      if (onnx_domain && control_flow::is_control_flow(n.op_type())) {
        if (!control_flow::expand(n, node_name, scope)) set_pending(n, false);
        return;
      }
      if (n.op_type() == "Constant" && onnx_domain) {
        // The output names the constant. protobuf's output(0) on an empty list is a FatalException,
        // not an error a caller of load() expects.
        if (n.output_size() != 1 || n.output(0).empty())
          fail(errc::parse_error, node_name, {},
               "onnx: Constant '" + node_name + "' needs exactly one named output, the name of its value");
        keep(g, n.output(0), constant_value(n, node_name));
        return;
      }
      // What each input is: a known value, a static shape (Shape and Size read nothing more), or
      // neither.
      std::vector<tensor> shapes_only;
      shapes_only.reserve(static_cast<std::size_t>(n.input_size()));
      std::vector<folding::operand> known;
      bool all_known = true, any_pending = false, all_would_fold = true;
      for (int i = 0; i < n.input_size(); ++i) {
        const std::string& in = n.input(i);
        folding::operand v;
        if (in.empty()) {
          known.push_back(v);
          continue;
        }
        if (const tensor* c = g.constant(in)) v.value = c;
        else if (const value_info* info = g.find(in);
                 info && info->known && i == 0 && folding::reads_shape_only(n.op_type()))
          v.value = &shapes_only.emplace_back(tensor::timing_only(info->shape, info->type));
        const bool p = st.pending.count(in) != 0;
        any_pending = any_pending || p;
        all_would_fold = all_would_fold && (v.value || st.would_fold.count(in) ||
                                            (p && i == 0 && folding::reads_shape_only(n.op_type())));
        all_known = all_known && v.value;
        known.push_back(v);
      }
      if (onnx_domain && folding::shape_depends_on_data(n.op_type())) {
        const data_shaped r = add_data_shaped(g, st, n, node_name, known, fresh);
        if (r.what == data_shaped::unsupported) unsupported.insert(r.why);
        if (r.what != data_shaped::added) set_pending(n, r.would_fold);
        return;
      }
      // Opset 6's broadcast along an axis is not NumPy's, which the folder computes: such a node
      // is added (its B reshaped) and computed on the device.
      const bool legacy_axis_broadcast =
          opset < 7 && legacy_broadcast_op(n.op_type()) &&
          std::any_of(n.attribute().begin(), n.attribute().end(), [](const auto& a) { return a.name() == "axis"; });
      if (foldable && all_known && !legacy_axis_broadcast) {
        if (auto r = folding::fold(n, node_name, opset, known)) {
          keep(g, n.output(0), std::move(*r));
          return;
        }
        // Too large to fold: a graph operator is added as a node, another is unsupported.
        if (!graph_op) label += " (folding more than 2^24 elements)";
      }
      if (any_pending) {
        // This node waits on one npurt cannot add: it is listed itself only if it could be
        // neither added nor folded were its producers supported.
        const bool would_fold = foldable && all_would_fold;
        if (!graph_op && !would_fold) unsupported.insert(label);
        set_pending(n, would_fold);
        return;
      }
      // The signal operators npurt only folds: their inputs decide the output's shape.
      if (!graph_op && foldable && folding::needs_constant_inputs(n.op_type()))
        label += " (its inputs are not constants; they decide the output's shape, and npurt's shapes are static)";
      if (!graph_op) {
        unsupported.insert(label);
        set_pending(n, false);
        return;
      }
      attributes attrs;
      std::optional<std::int64_t> legacy_axis;
      for (const auto& a : n.attribute()) {
        if (legacy_default(n, a, opset)) continue;
        if (opset < 7 && a.name() == "axis" && a.type() == ::onnx::AttributeProto::INT &&
            legacy_broadcast_op(n.op_type())) {
          legacy_axis = a.i();
          continue;
        }
        attrs.set(a.name(), to_attribute(n, a));
      }
      // PRelu before opset 7 has no broadcasting rule: its slope is one value or one per channel
      // (axis 1, Caffe2's PRelu, which PyTorch's exports of nn.PReLU(C) targeted), where opset 7's
      // unidirectional broadcast would align it with X's last axis.
      if (opset < 7 && n.op_type() == "PRelu" && n.input_size() == 2)
        if (const value_info *x = g.find(n.input(0)), *slope = g.find(n.input(1));
            x && slope && x->known && slope->known && x->shape.rank() > 2 && slope->shape.rank() == 1 &&
            slope->shape[0] != 1)
          legacy_axis = 1;
      std::vector<std::string> ins(n.input().begin(), n.input().end());
      if (old_slice) slice_attributes_as_inputs(g, node_name, ins, attrs, fresh);
      if (legacy_axis) {
        const std::string b = broadcast_axis_reshape(g, n, *legacy_axis, node_name, fresh);
        if (b.empty())
          fail(errc::not_supported, node_name, n.input(1),
               "onnx: " + n.op_type() + " '" + node_name + "': opset " + std::to_string(opset) +
                   "'s broadcast along axis needs the shapes of A and B");
        ins[1] = b;
      }
      if (coerced_2d) {
        add_coerced_2d(g, n, node_name, ins, std::move(attrs), fresh);
        return;
      }
      // DFT's axis: an attribute defaulting to 1 in opset 17, an input defaulting to -2 from 20.
      if (n.op_type() == "DFT" && opset >= 20 && !attrs.has("axis") && (n.input_size() < 3 || n.input(2).empty()))
        attrs.set("axis", std::int64_t{-2});
      // RoiAlign before opset 16 has no coordinate_transformation_mode and does not shift by half a
      // pixel: opset 16's output_half_pixel (onnx.ai's Changelog, RoiAlign-16).
      if (n.op_type() == "RoiAlign" && opset < 16 && !attrs.has("coordinate_transformation_mode"))
        attrs.set("coordinate_transformation_mode", std::string("output_half_pixel"));
      const std::vector<std::string> all_outs(n.output().begin(), n.output().end());
      if (detail::added_as_chain(g, n.op_type(), ins, all_outs, attrs)) {
        detail::add_composite(g, n.op_type(), node_name, ins, all_outs, attrs, fresh);
        return;
      }
      std::vector<std::string> outs(n.output().begin(), n.output().end());
      // Optional trailing outputs nobody reads (BatchNormalization's, MaxPool's Indices) drop.
      while (outs.size() > 1 && outs.back().empty()) outs.pop_back();
      g.add_node(n.op_type(), node_name, ins, outs, std::move(attrs));
    } catch (const graph_error&) {
      if (!first_error) first_error = std::current_exception();
      for (const auto& o : n.output()) hold(o);
    }
  };
  for (const auto& n : gp.node()) import_node(n);
  if (!unsupported.empty()) {
    std::string list;
    for (const auto& u : unsupported) list += (list.empty() ? "" : ", ") + u;
    fail(errc::not_supported, *unsupported.begin(), {},
         "onnx: model '" + name + "' uses unsupported operators: " + list);
  }
  if (first_error) std::rethrow_exception(first_error);
  for (const auto& o : gp.output()) {
    if (const auto it = st.sequences.find(o.name()); it != st.sequences.end())
      fail(errc::not_supported, {}, o.name(),
           "onnx: output '" + o.name() + "' of '" + name + "' is " +
               (it->second.optional ? "an optional" : "a sequence") +
               "; npurt's graphs give tensors only (sequences and optionals are resolved at import, within the "
               "model)");
    g.set_output(o.name());
  }
  g.validate();
  return g;
}

}  // namespace

namespace folding {

host_value to_host_value(const ::onnx::TensorProto& t) { return {to_tensor(t)}; }

}  // namespace folding

graph load_from_bytes(const std::string& bytes, const std::string& name) { return load_from_bytes(bytes, name, {}); }

graph load_from_bytes(const std::string& bytes, const std::string& name, const load_options& opts) {
  ::onnx::ModelProto m;
  if (!m.ParseFromString(bytes)) fail(errc::parse_error, {}, {}, "onnx: '" + name + "' is not a serialized ONNX model");
  // An empty file parses as an empty model: say so rather than that its graph has no output.
  if (!m.has_graph())
    fail(errc::parse_error, {}, {},
         "onnx: '" + name + "' is not an ONNX model (" +
             (bytes.empty() ? std::string("the file is empty") : "it has no graph") + ")");
  return build(m, name, opts);
}

graph load(const std::string& path) { return load_from_bytes(read_file(path), path, {}); }

graph load(const std::string& path, const load_options& opts) { return load_from_bytes(read_file(path), path, opts); }

tensor load_tensor(const std::string& path) {
  ::onnx::TensorProto t;
  // Protobuf parses most byte strings as some message: a model file reads as a TensorProto whose
  // fields are garbage. Every real tensor has a data type, so one without is not a tensor file.
  if (!t.ParseFromString(read_file(path)) || t.data_type() == ::onnx::TensorProto::UNDEFINED)
    fail(errc::parse_error, {}, {},
         "onnx: '" + path + "' is not a serialized TensorProto" +
             (t.data_type() == ::onnx::TensorProto::UNDEFINED ? " (it has no data type)" : ""));
  return to_tensor(t);
}

}  // namespace npurt::onnx

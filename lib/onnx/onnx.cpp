// ONNX import (see npurt/onnx.hpp), on the protobuf classes of Debian's libonnx-dev.
#include <npurt/onnx.hpp>

#include <npurt/graph/detail/composite.hpp>

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
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
    return r;
  }
  // 16-bit floats travel as their bit patterns in int32_data, with the narrow integers.
  const int have = *type == dtype::f32   ? t.float_data_size()
                   : *type == dtype::i64 ? t.int64_data_size()
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
    default:
      fail(errc::not_supported, n.name(), {},
           "onnx: " + n.op_type() + " '" + n.name() + "': attribute '" + a.name() + "' of type " +
               std::to_string(static_cast<int>(a.type())) + " is not supported");
  }
}

// A Constant node's value: exactly one of its value attributes (ONNX's Constant, opset 12 on).
tensor constant_value(const ::onnx::NodeProto& n, const std::string& node_name) {
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
    return to_tensor(v->t());
  }
  if (k == "value_float" || k == "value_floats") {
    const bool one = k == "value_float";
    if (v->type() != (one ? ::onnx::AttributeProto::FLOAT : ::onnx::AttributeProto::FLOATS)) wrong_type();
    const auto count = one ? 1 : v->floats_size();
    tensor r(one ? shape{} : shape{count}, dtype::f32);
    for (int i = 0; i < count; ++i) r.set(i, one ? v->f() : v->floats(i));
    return r;
  }
  if (k == "value_int" || k == "value_ints") {
    const bool one = k == "value_int";
    if (v->type() != (one ? ::onnx::AttributeProto::INT : ::onnx::AttributeProto::INTS)) wrong_type();
    const auto count = one ? 1 : v->ints_size();
    tensor r(one ? shape{} : shape{count}, dtype::i64);
    // Through the bits: set(double) would round integers above 2^53.
    auto* p = static_cast<std::int64_t*>(r.data());
    for (int i = 0; i < count; ++i) p[i] = one ? v->i() : v->ints(i);
    return r;
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

graph build(const ::onnx::ModelProto& m, const std::string& name, const load_options& opts) {
  const auto& gp = m.graph();
  const std::int64_t opset = opset_of(m);
  // Every unsupported operator, listed at once.
  std::set<std::string> unsupported;
  for (const auto& n : gp.node()) {
    if (n.op_type() == "Constant") continue;
    if (!n.domain().empty() && n.domain() != "ai.onnx") unsupported.insert(n.domain() + "." + n.op_type());
    else if (!is_supported_op(n.op_type())) unsupported.insert(n.op_type());
    // Softmax, LogSoftmax and Hardmax before opset 13 flatten to 2-D around the axis: a different
    // operator.
    else if ((n.op_type() == "Softmax" || n.op_type() == "LogSoftmax" || n.op_type() == "Hardmax") && opset < 13)
      unsupported.insert(n.op_type() + " (opset " + std::to_string(opset) + ")");
  }
  if (!unsupported.empty()) {
    std::string list;
    for (const auto& u : unsupported) list += (list.empty() ? "" : ", ") + u;
    fail(errc::not_supported, *unsupported.begin(), {},
         "onnx: model '" + name + "' uses unsupported operators: " + list);
  }
  for (const auto& [dim, value] : opts.dims)
    if (value < 1)
      fail(errc::invalid_argument, {}, {},
           "onnx: load_options::dims gives '" + dim + "' the value " + std::to_string(value) +
               ": a dimension is at least 1");
  std::set<std::string, std::less<>> used_dims;
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
  std::set<std::string> inits;
  for (const auto& t : gp.initializer()) {
    inits.insert(t.name());
    g.add_constant(t.name(), to_tensor(t));
  }
  for (const auto& in : gp.input()) {
    if (inits.count(in.name())) continue;
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
      used_dims.insert(d.dim_param());
      s.push_back(it->second);
    }
    if (const auto bound = opts.constant_inputs.find(in.name()); bound != opts.constant_inputs.end()) {
      const tensor& v = *bound->second;
      if (v.type() != *type)
        fail(errc::invalid_dtype, {}, in.name(),
             "onnx: the constant for input '" + in.name() + "' is " + std::string(to_string(v.type())) +
                 ", the input " + std::string(to_string(*type)));
      if (!(v.shape() == s))
        fail(errc::invalid_shape, {}, in.name(),
             "onnx: the constant for input '" + in.name() + "' has shape " + shape_string(v.shape()) + ", the input " +
                 shape_string(s));
      g.add_constant(in.name(), v.clone());
      continue;
    }
    g.add_input(in.name(), s, *type);
  }
  // A value for a dimension the model does not have is a misspelling more often than not: the
  // dimension it was meant for would otherwise be refused with a message about the other name.
  for (const auto& [dim, value] : opts.dims)
    if (!used_dims.contains(dim))
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
  const auto fresh = [&taken](const std::string& base) {
    std::string r = base;
    for (std::size_t k = 1; taken.count(r); ++k) r = base + "_" + std::to_string(k);
    taken.insert(r);
    return r;
  };
  for (const auto& n : gp.node()) {
    std::string node_name = n.name();
    while (node_name.empty() || (n.name().empty() && named.count(node_name)))
      node_name = n.op_type() + "_" + std::to_string(unnamed++);
    if (n.op_type() == "Constant") {
      // The output names the constant. protobuf's output(0) on an empty list is a FatalException,
      // not an error a caller of load() expects.
      if (n.output_size() != 1 || n.output(0).empty())
        fail(errc::parse_error, node_name, {},
             "onnx: Constant '" + node_name + "' needs exactly one named output, the name of its value");
      g.add_constant(n.output(0), constant_value(n, node_name));
      continue;
    }
    attributes attrs;
    for (const auto& a : n.attribute()) attrs.set(a.name(), to_attribute(n, a));
    const std::vector<std::string> ins(n.input().begin(), n.input().end());
    const std::vector<std::string> all_outs(n.output().begin(), n.output().end());
    if (detail::added_as_chain(g, n.op_type(), ins, all_outs)) {
      detail::add_composite(g, n.op_type(), node_name, ins, all_outs, attrs, fresh);
      continue;
    }
    std::vector<std::string> outs(n.output().begin(), n.output().end());
    // Optional trailing outputs nobody reads (BatchNormalization's, MaxPool's Indices) drop.
    while (outs.size() > 1 && outs.back().empty()) outs.pop_back();
    g.add_node(n.op_type(), node_name, {n.input().begin(), n.input().end()}, outs, std::move(attrs));
  }
  for (const auto& o : gp.output()) g.set_output(o.name());
  g.validate();
  return g;
}

}  // namespace

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

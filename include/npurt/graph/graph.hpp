// npurt/graph/graph.hpp — a dataflow graph of ONNX-named operators over named tensors.
//
// A graph is built by name: add_input() and add_constant() declare tensors, add_op() adds an
// operator reading named tensors and returns the name of what it writes, set_output() marks what
// a run returns. Operator types and attributes are ONNX's (Conv with strides/pads/dilations/
// group, Gemm with alpha/beta/transA/transB, Softmax with axis, ...), so a model exported to
// ONNX and one built by hand mean the same thing. Shapes and dtypes are inferred as operators are
// added; an operator whose inputs are not known yet (an importer may add nodes in any order) is
// inferred when the graph is validated.
//
// Every mistake is a graph_error naming the operator and the tensor: an unknown operator type, a
// shape or dtype mismatch, an input nothing produces, a cycle, a duplicate name, a missing
// output. validate() also has an error_code form.
//
// Thread safety: a graph is a plain value; build it from one thread.
#pragma once

#include <npurt/error.hpp>
#include <npurt/graph/tensor.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <variant>
#include <vector>

namespace npurt {

using ints = std::vector<std::int64_t>;
using floats = std::vector<double>;
/// An ONNX attribute value: INT, FLOAT, INTS, FLOATS or STRING.
using attribute = std::variant<std::int64_t, double, ints, floats, std::string>;

/// Operator attributes by ONNX name: `{{"strides", npurt::ints{2, 2}}, {"group", std::int64_t{1}}}`.
class attributes {
 public:
  attributes() = default;
  attributes(std::initializer_list<std::pair<const std::string, attribute>> l) : map_(l) {}
  void set(std::string name, attribute v) { map_[std::move(name)] = std::move(v); }
  [[nodiscard]] bool has(std::string_view name) const { return map_.find(name) != map_.end(); }
  /// The attribute or `fallback`; caller_error when present with another type.
  [[nodiscard]] std::int64_t get_int(std::string_view name, std::int64_t fallback) const;
  [[nodiscard]] double get_float(std::string_view name, double fallback) const;
  [[nodiscard]] ints get_ints(std::string_view name, ints fallback = {}) const;
  [[nodiscard]] std::string get_string(std::string_view name, std::string fallback = {}) const;
  [[nodiscard]] const std::map<std::string, attribute, std::less<>>& items() const noexcept { return map_; }

 private:
  std::map<std::string, attribute, std::less<>> map_;
};

/// A graph mistake: code() says which kind (not_supported for an unknown operator or attribute,
/// invalid_shape, invalid_dtype, invalid_argument for structure), op() and tensor() say where.
class graph_error : public caller_error {
 public:
  graph_error(std::error_code ec, std::string op, std::string tensor, const std::string& what)
      : caller_error(ec, printable(what)), op_(std::move(op)), tensor_(std::move(tensor)) {}
  [[nodiscard]] const std::string& op() const noexcept { return op_; }
  [[nodiscard]] const std::string& tensor() const noexcept { return tensor_; }

 private:
  // Messages quote names from models and callers as they are; a NUL in one would end what()
  // there and drop the rest of the message, other control bytes garble a terminal. op() and
  // tensor() keep the names as given.
  static std::string printable(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (const char ch : s) {
      const auto c = static_cast<unsigned char>(ch);
      if (c >= 0x20 && c != 0x7f) {
        out += ch;
        continue;
      }
      static constexpr char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
    return out;
  }
  std::string op_, tensor_;
};

/// What a tensor of the graph is.
enum class value_kind : std::uint8_t { input, constant, activation };

struct value_info {
  std::string name;
  npurt::shape shape{};
  npurt::dtype type = dtype::f32;
  value_kind kind = value_kind::activation;
  int producer = -1;   ///< node index for activations
  bool known = false;  ///< shape and dtype inferred
};

struct node {
  std::string type;  ///< ONNX operator type, e.g. "Conv"
  std::string name;  ///< unique in the graph
  std::vector<std::string> inputs, outputs;  ///< tensor names; "" is an omitted optional input or output
  npurt::attributes attrs;
  bool inferred = false;
};

/// The operator the user added that a node computes part of, when the graph computes that
/// operator as a chain of its own (SoftmaxCrossEntropyLoss as LogSoftmax and
/// NegativeLogLikelihoodLoss, OneHot as Equal and Where, ...): its type and node name, which
/// messages about the step name.
struct chain_origin {
  std::string type;
  std::string name;
};

/// The operator types the graph accepts (ONNX names), sorted: the kernels' own, and those it adds
/// as chains of them (ReduceL2, PRelu, InstanceNormalization, ...; see graph::add_op).
[[nodiscard]] std::span<const std::string_view> supported_ops() noexcept;
[[nodiscard]] bool is_supported_op(std::string_view type) noexcept;

class graph {
 public:
  explicit graph(std::string name = "graph") : name_(std::move(name)) {}

  [[nodiscard]] const std::string& name() const noexcept { return name_; }

  /// A tensor fed at run time. Returns its name.
  std::string add_input(std::string name, npurt::shape s, npurt::dtype t);
  /// A constant or weight: its value (a host tensor), or a timing-only tensor for full-size
  /// models without data.
  std::string add_constant(std::string name, tensor value);
  std::string add_weight(std::string name, tensor value) { return add_constant(std::move(name), std::move(value)); }
  /// Replaces a constant's value (a weight after a training step): same shape and dtype, or
  /// graph_error (invalid_shape / invalid_dtype); not a constant: invalid_argument. Graphs
  /// compiled before keep the value they copied.
  void set_constant(std::string_view name, tensor value);
  /// An operator with one output; the output is named `name` (default: "<type>_<n>") and the
  /// node "<output>". Returns the output's name. An operator computed as a chain adds its steps,
  /// the last one named so, the others "<output>/<step>"; its inputs must be added first.
  std::string add_op(std::string_view type, std::vector<std::string> inputs, npurt::attributes attrs = {},
                     std::string name = {});
  /// An operator with explicit node and output names (what an importer uses). An optional output
  /// the caller does not want is "" where the operator allows it, as ONNX writes it (ConvGrad's
  /// and BatchNormalizationGrad's outputs); elsewhere an empty output name is invalid_argument.
  void add_node(std::string_view type, std::string name, std::vector<std::string> inputs,
                std::vector<std::string> outputs, npurt::attributes attrs = {});
  /// Marks a tensor as an output of the graph.
  void set_output(std::string name);
  /// Execution hint: these two operators (by output name or node name) may run at the same time.
  /// The parallel schedule puts them on different streams when their data allows it.
  void hint_parallel(std::string a, std::string b);

  [[nodiscard]] const std::vector<node>& nodes() const noexcept { return nodes_; }
  [[nodiscard]] const std::vector<std::string>& inputs() const noexcept { return inputs_; }
  [[nodiscard]] const std::vector<std::string>& outputs() const noexcept { return outputs_; }
  [[nodiscard]] const std::vector<std::pair<std::string, std::string>>& parallel_hints() const noexcept {
    return hints_;
  }
  /// The tensor of this name, or null.
  [[nodiscard]] const value_info* find(std::string_view name) const;
  [[nodiscard]] const value_info& value(std::string_view name) const;
  /// The value of a constant (null for other tensors).
  [[nodiscard]] const tensor* constant(std::string_view name) const;
  [[nodiscard]] std::size_t node_index(std::string_view name) const;
  /// The operator node `name` is a step of when the graph computes it as a chain; null for a
  /// node that is the operator it was added as.
  [[nodiscard]] const chain_origin* origin(std::string_view node_name) const;
  /// Records the nodes from index `first` on as the steps of operator `type` named `name` (what
  /// adding a chain does; an importer that adds one itself calls it through detail::add_composite).
  void set_origin(std::size_t first, std::string_view type, std::string_view name);

  /// Checks the whole graph and infers what is still unknown: every input produced, no cycle
  /// (each one is named with its own operators), at least one output and each output produced,
  /// shapes and dtypes consistent.
  void validate();
  std::error_code validate(std::string& message) noexcept;
  /// Node indices in a topological order (stable: among ready nodes, the one added first).
  [[nodiscard]] std::vector<std::size_t> topological_order() const;

 private:
  void check_new_name(std::string_view name, std::string_view op) const;
  /// add_node of an operator computed as a chain (detail/composite.hpp), all or nothing.
  void add_composite(std::string_view type, std::string name, const std::vector<std::string>& inputs,
                     const std::vector<std::string>& outputs, const npurt::attributes& attrs);
  bool try_infer(std::size_t n);
  /// The nodes of each cycle, given a topological_order() that left them out.
  [[nodiscard]] std::vector<std::vector<std::size_t>> find_cycles(const std::vector<std::size_t>& order) const;

  std::string name_;
  std::vector<node> nodes_;
  std::vector<value_info> values_;
  std::map<std::string, std::size_t, std::less<>> value_index_;
  std::map<std::string, std::size_t, std::less<>> node_index_;
  std::map<std::string, tensor, std::less<>> constants_;
  std::vector<std::string> inputs_, outputs_;
  std::vector<std::pair<std::string, std::string>> hints_;
  std::size_t auto_names_ = 0;
  std::map<std::string, chain_origin, std::less<>> origins_;  ///< by node name
};

/// Shape and dtype inference for one operator, given its inputs (null for an omitted optional
/// input) and the values of constant inputs where known. Throws graph_error.
struct inferred_output {
  npurt::shape shape{};
  npurt::dtype type = dtype::f32;
};
[[nodiscard]] std::vector<inferred_output> infer_op(const node& n, std::span<const value_info* const> inputs,
                                                    std::span<const tensor* const> constants);

/// "[2,3,4]": how messages print a shape.
[[nodiscard]] std::string shape_string(const shape& s);

/// ONNX TensorProto.DataType codes (Cast's "to").
[[nodiscard]] std::optional<dtype> dtype_from_onnx(std::int64_t code) noexcept;
[[nodiscard]] std::int64_t onnx_dtype_code(dtype t) noexcept;

}  // namespace npurt

// npurt/onnx.hpp — load an ONNX model into an npurt::graph (optional: the Meson feature `onnx`,
// built on Debian's libonnx-dev and protobuf; NPURT_HAS_ONNX is 1 when it is available).
//
// Initializers become constants, Constant nodes become constants, the other graph inputs become
// inputs, and every node becomes an operator of the same ONNX type with the same attributes
// (ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp, Sum, Mean, PRelu,
// GlobalMaxPool, Tan, Cosh, Sinh, Asinh, Acosh, Atanh, Shrink, InstanceNormalization,
// MeanVarianceNormalization, DepthToSpace, SpaceToDepth, Hardmax, Squeeze, Unsqueeze, a Clip
// whose bounds are not constants and a LayerNormalization that names its Mean or InvStdDev
// output: a chain of npurt's, as graph::add_op builds it).
// Small integer subgraphs that exporters write to compute shapes are folded at import, as
// onnxruntime and onnx-simplifier do: a Shape or Size of a tensor whose shape is static, and an
// Add, Sub, Mul, Div, Cast, Concat, ConstantOfShape, Equal, Expand, Gather, Identity, Range,
// Reshape, Slice, Squeeze, Unsqueeze or Where whose inputs are all constants (initializers,
// Constant nodes or folded results), is evaluated on the host with ONNX's semantics and becomes a
// constant. Results above 2^24 elements are not folded. A fold that would go wrong is a
// graph_error naming the node (invalid_argument for an index or axis out of range, a Range delta
// or an integer divisor of 0; size_overflow for a shape whose element count overflows). ONNX's
// BOOL is dtype::boolean everywhere: inputs, outputs, initializers, Constant nodes and folded
// results (a folded Equal is a bool constant of the graph). A Gather, Slice or Split that cannot fold (an input is
// computed or fed at run time: a Gather of the embedding table by the input_ids) is the graph's
// operator of that name.
// An operator outside supported_ops() that does not fold is an error (graph_error,
// errc::not_supported) that lists every unsupported operator type of the model at once, so a user
// sees the whole gap, not the first hole.
#pragma once

#include <npurt/graph/graph.hpp>
#include <npurt/graph/tensor.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace npurt::onnx {

/// How load() reads a model.
struct load_options {
  /// Values for the graph inputs' symbolic dimensions, by name ("batch" -> 8), as onnxruntime's
  /// free-dimension overrides give them: models exported with a dynamic batch or sequence length
  /// name those dimensions instead of sizing them. Every value must be at least 1, and every name
  /// must be one of the model's symbolic dimensions (a misspelt name is refused, not ignored).
  std::map<std::string, std::int64_t, std::less<>> dims{};
  /// Graph inputs given a fixed value: each becomes a constant holding a copy of it (shape and
  /// dtype must be the input's), so operators that need constant operands (Reshape's shape,
  /// Squeeze's axes, a Clip's bounds as kernel scalars) accept it, as a model that was exported
  /// with the value frozen would load. A name that is no graph input of the model is refused.
  std::map<std::string, const tensor*, std::less<>> constant_inputs{};
};

/// Reads a .onnx file into a graph. Throws graph_error (not_supported listing the unsupported
/// operators, or for a rank above 8; parse_error for a file that is not an ONNX model or is
/// malformed: an initializer whose data does not match its dimensions, a Constant without one
/// named output; invalid_shape for a symbolic input dimension (see load_options), or an initializer dimension that
/// is negative or overflows the element count; invalid_argument or size_overflow naming a node
/// whose fold would go wrong). A file that cannot be read throws graph_error
/// whose code is the system's reason in std::generic_category (std::errc::no_such_file_or_directory,
/// permission_denied, is_a_directory), as checkpoint::load reports it.
[[nodiscard]] graph load(const std::string& path);
/// The same with `opts`: a symbolic input dimension takes its value from opts.dims (one it does
/// not name is invalid_shape, naming the input and the dimension); a value below 1 or a name that
/// is no symbolic dimension of the model is invalid_argument. An input of opts.constant_inputs
/// becomes a constant: a null or device tensor, or a name that is no input, is invalid_argument;
/// another shape or dtype than the input's is invalid_shape or invalid_dtype.
[[nodiscard]] graph load(const std::string& path, const load_options& opts);
/// The same from the serialized bytes.
[[nodiscard]] graph load_from_bytes(const std::string& bytes, const std::string& name = "onnx");
[[nodiscard]] graph load_from_bytes(const std::string& bytes, const std::string& name, const load_options& opts);
/// Reads a serialized TensorProto (the backend tests' input_N.pb / output_N.pb) into a host tensor;
/// the same errors as load() for a file that cannot be read, parse_error for one that is not a
/// TensorProto.
[[nodiscard]] tensor load_tensor(const std::string& path);

}  // namespace npurt::onnx

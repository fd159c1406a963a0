// Import-time constant folding for the ONNX importer: the small integer subgraphs exporters write
// to compute shapes (Shape -> Gather -> Unsqueeze -> Concat -> Reshape, Range, ConstantOfShape,
// ...) evaluated on the host when their inputs are constants or, for Shape and Size, when their
// input's shape is static. Semantics are ONNX's (onnx.ai/onnx/operators and the reference
// implementation in onnx/reference/ops).
#pragma once

#include <npurt/graph/graph.hpp>
#include <npurt/graph/tensor.hpp>

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace npurt::onnx::folding {

/// A value known at import time (ONNX bools are dtype::boolean tensors, as everywhere in npurt).
struct host_value {
  tensor value;
};

/// An input of a fold: a value (null for an omitted optional input). The importer's values stay
/// where they are (the graph's constants): weights are not copied.
struct operand {
  const tensor* value = nullptr;
};

/// The largest output a fold produces, in elements. Folding copies the result into the model's
/// constants at load time: without a bound a few bytes of model (a ConstantOfShape of
/// [65536, 65536]) would ask for gigabytes of host memory before anything runs. A larger result
/// is not folded: an operator the graph has (Reshape, Concat, Add, ...) is then added as a node,
/// whose constant inputs the compiler folds itself; one it lacks (ConstantOfShape, Range, ...) is
/// listed as unsupported.
inline constexpr std::int64_t max_fold_elements = std::int64_t{1} << 24;

/// The operator types folded (ai.onnx domain).
[[nodiscard]] bool is_foldable(std::string_view op_type) noexcept;
/// The window functions and MelWeightMatrix: folded, never graph operators, since their inputs
/// decide their output's shape.
[[nodiscard]] bool needs_constant_inputs(std::string_view op_type) noexcept;
/// Shape and Size: they read only their input's shape, so a static shape suffices.
[[nodiscard]] bool reads_shape_only(std::string_view op_type) noexcept;

/// Evaluates `n` on its inputs (for Shape and Size the input may be a timing-only tensor carrying
/// the shape). Returns the single output, or nullopt when it
/// would hold more than max_fold_elements. Throws graph_error naming the node: invalid_argument
/// for an index or axis out of range, a Range with delta 0, an integer division by zero, a Cast
/// of a float outside the integer type's range;
/// size_overflow for a shape whose element count overflows; invalid_shape / invalid_dtype for
/// mismatched operands; not_supported for a dtype npurt does not hold.
[[nodiscard]] std::optional<host_value> fold(const ::onnx::NodeProto& n, const std::string& node_name,
                                             std::int64_t opset, std::span<const operand> inputs);

/// A TensorProto as a host value (onnx.cpp's reader).
[[nodiscard]] host_value to_host_value(const ::onnx::TensorProto& t);

/// NonZero, Compress, Unique and NonMaxSuppression: an output dimension of each is decided by
/// its inputs' values (onnx.ai leaves it unknown to shape inference), and npurt's shapes are
/// static. They are folded when the inputs that decide the shape are constants; Compress with a
/// constant condition but data fed at run time becomes a Gather (compress_selection).
[[nodiscard]] bool shape_depends_on_data(std::string_view op_type) noexcept;
/// Whether input `i` of such an operator decides its output's shape: Compress's condition (input
/// 1) alone, every input of the others.
[[nodiscard]] bool decides_shape(std::string_view op_type, std::size_t i) noexcept;

/// Evaluates one of them on constants: one value per output of `n`, in order (Unique's Y,
/// indices, inverse_indices and counts; an unnamed output is computed too). Returns nullopt when
/// an output would hold more than max_fold_elements. Throws graph_error naming the node:
/// invalid_shape for operands of the wrong rank or shape (NonMaxSuppression's boxes not
/// [N, B, 4], a Compress condition longer than its axis), invalid_dtype for the wrong dtype,
/// invalid_argument for an axis out of range, an attribute out of its set or a NaN score.
[[nodiscard]] std::optional<std::vector<host_value>> fold_shape_from_data(const ::onnx::NodeProto& n,
                                                                          const std::string& node_name,
                                                                          std::span<const operand> inputs);

/// What a constant Compress condition keeps of data of shape `data`: the indices along the axis
/// (of the flattened data when the node has no axis), and that axis made non-negative. Throws as
/// fold_shape_from_data.
struct compress_selection {
  std::optional<std::size_t> axis;
  std::vector<std::int64_t> indices;
};
[[nodiscard]] compress_selection select_compressed(const ::onnx::NodeProto& n, const std::string& node_name,
                                                   const tensor& condition, const shape& data);

}  // namespace npurt::onnx::folding

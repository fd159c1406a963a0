// npurt/graph/detail/composite.hpp — ONNX operators the graph computes as chains of its own
// operators (ReduceL2 as Mul → ReduceSum → Sqrt, InstanceNormalization as ReduceMeans, ...).
// graph::add_node expands them; the ONNX importer calls add_composite itself, so that the chain's
// intermediates avoid every name of the model, not only those already added.
#pragma once

#include <npurt/graph/graph.hpp>

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace npurt::detail {

/// The operators the graph expands into chains.
[[nodiscard]] std::span<const std::string_view> composite_ops() noexcept;
/// Whether `type` is one of them.
[[nodiscard]] bool is_composite_op(std::string_view type) noexcept;
/// Whether an operator `type` reading `inputs` of `g` and writing `outputs` with `attrs` is added
/// as a chain: one of the above, a Clip with a bound in the graph that is not a constant (the
/// kernel takes constant bounds; a bound not added yet keeps the Clip node, as any operator may
/// name a later tensor) or with an integer input (the kernel's float bounds are not exact), a LayerNormalization that
/// names its Mean or InvStdDev output (the kernel writes Y alone), or a ConvTranspose whose end pad exceeds its start
/// pad plus output_padding (computed larger and cropped by a Slice).
[[nodiscard]] bool added_as_chain(const graph& g, std::string_view type, std::span<const std::string> inputs,
                                  std::span<const std::string> outputs = {}, const attributes& attrs = {});

/// Adds operator `type` (a composite, a Clip whose bounds are not constants or whose input is an integer, or a
/// LayerNormalization with its statistics) to `g` as its chain: the step writing `outputs[0]` is
/// the node `node_name`, the others are named `fresh("<output>/<step>")`. Every input must be in the graph with its
/// shape known. Throws graph_error; on a throw the steps already added stay (graph::add_node takes them back).
void add_composite(graph& g, std::string_view type, const std::string& node_name,
                   const std::vector<std::string>& inputs, const std::vector<std::string>& outputs,
                   const attributes& attrs, const std::function<std::string(const std::string&)>& fresh);

}  // namespace npurt::detail

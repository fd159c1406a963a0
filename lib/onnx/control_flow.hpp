// ONNX control flow (If) resolved at import: an If whose condition is known takes its branch's
// nodes into the parent graph. npurt's graphs are static, so a condition known only at run time
// stays not_supported. Semantics are ONNX's (onnx.ai/onnx/operators/onnx__If.html).
#pragma once

#include <npurt/graph/graph.hpp>
#include <npurt/graph/tensor.hpp>

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <string_view>

namespace npurt::onnx::control_flow {

/// The most nodes the control flow of one model may add, counted as they are added: inlining
/// copies subgraphs, and a bound keeps what a few bytes of model ask the importer to build small.
inline constexpr std::int64_t max_unrolled_nodes = std::int64_t{1} << 16;

/// If (ai.onnx domain).
[[nodiscard]] bool is_control_flow(std::string_view op_type) noexcept;

/// Adds every value and node name that the subgraphs of `g`'s nodes use, at any depth, so names
/// made for inlined values avoid them.
void collect_subgraph_names(const ::onnx::GraphProto& g, std::set<std::string>& names);

/// What expand needs of the importer's parent graph.
struct parent {
  std::int64_t opset = 0;
  /// A value known at import (a constant of the graph), or null.
  std::function<const tensor*(const std::string&)> constant;
  /// A value's shape, when the graph knows it statically.
  std::function<const value_info*(const std::string&)> find;
  /// Whether a value waits on a node the importer could not add (its error is reported).
  std::function<bool(const std::string&)> pending;
  /// A name no other value or node has.
  std::function<std::string(const std::string&)> fresh;
  /// Imports a node into the parent graph, as a node of the model is (folded, added or held).
  std::function<void(const ::onnx::NodeProto&)> emit;
  /// Nodes added so far by control flow, against max_unrolled_nodes.
  std::int64_t* added = nullptr;
};

/// Replaces the If `n` by the nodes of the branch its condition picks, emitted through `p`.
/// Returns false when the condition waits on a node the importer could not add: the caller marks
/// n's outputs as waiting too. Throws graph_error: not_supported when the condition is computed at
/// run time, the inlining would exceed max_unrolled_nodes, or an output is a sequence or optional;
/// parse_error when the node and its branch disagree on their outputs.
[[nodiscard]] bool expand(const ::onnx::NodeProto& n, const std::string& node_name, const parent& p);

}  // namespace npurt::onnx::control_flow

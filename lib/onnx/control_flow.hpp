// ONNX control flow (If, Loop, Scan) resolved at import: an If whose condition is known takes its
// branch's nodes into the parent graph; a Loop whose trip count and termination are known, and a
// Scan over statically shaped inputs, are unrolled. npurt's graphs are static, so what the
// control flow decides at run time stays not_supported. Semantics are ONNX's
// (onnx.ai/onnx/operators/onnx__If.html, onnx__Loop.html, onnx__Scan.html).
#pragma once

#include <npurt/graph/graph.hpp>
#include <npurt/graph/tensor.hpp>

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace npurt::onnx::control_flow {

/// The most nodes the control flow of one model may add by inlining and unrolling. Unrolling
/// copies a Loop's body once per iteration: without a bound a trip count of 2^40 read from a few
/// bytes of model would ask for that many nodes before anything runs. A Loop or Scan whose
/// iterations times body nodes exceed it is refused up front (not_supported); nested control flow
/// counts against the same budget as it is added.
inline constexpr std::int64_t max_unrolled_nodes = std::int64_t{1} << 16;

/// If, Loop and Scan (ai.onnx domain).
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
  /// Nodes added so far by control flow and sequences (sequences.hpp), against max_unrolled_nodes.
  std::int64_t* added = nullptr;
};

/// Replaces the If, Loop or Scan `n` by the nodes it amounts to, emitted through `p`. Returns
/// false when what decides it (a condition, a trip count) waits on a node the importer could not
/// add: the caller marks n's outputs as waiting too. Throws graph_error: not_supported when the
/// control flow depends on values computed at run time, the unroll would exceed
/// max_unrolled_nodes, or a value that must be a tensor (a condition, a scan input or output) is
/// a sequence or optional; parse_error when the node and its subgraphs disagree on their inputs or
/// outputs; invalid_argument for a bad attribute. An If's outputs and a Loop's carried values may
/// be sequences and optionals: they pass through `p.emit` as Identity nodes, which the importer
/// resolves (sequences.hpp).
[[nodiscard]] bool expand(const ::onnx::NodeProto& n, const std::string& node_name, const parent& p);

/// The nodes expand emits, for the importer's other expansions (sequences.cpp): a node of type
/// `op` named `name` reading `ins` and writing `out`; an INT attribute; a Constant node whose name
/// and output are `name`, holding `t`.
[[nodiscard]] ::onnx::NodeProto make_node(const std::string& op, const std::string& name, std::vector<std::string> ins,
                                          const std::string& out);
void set_int(::onnx::NodeProto& n, const char* key, std::int64_t v);
[[nodiscard]] ::onnx::NodeProto constant_node(const std::string& name, ::onnx::TensorProto t);

/// Stacks `parts` along a new axis `axis` (counted in the stacked rank, negative from the back)
/// into `out`, as a Loop's scan outputs are: each Unsqueezed there, then Concatenated; the nodes
/// are emitted through `p` and counted against max_unrolled_nodes.
void stack(const ::onnx::NodeProto& n, const std::string& node_name, const parent& p,
           const std::vector<std::string>& parts, std::int64_t axis, const std::string& out);

/// Copies `body` into the parent under fresh names starting with `prefix`, its nodes emitted
/// through `p` and counted against max_unrolled_nodes as expand's are: `bound` maps the body's
/// inputs to the parent's values, and names it does not define are the enclosing scope's. Returns
/// the parent's name of each of the body's outputs, in order (SequenceMap's unrolling). `n` and
/// `node_name` name the node in errors.
[[nodiscard]] std::vector<std::string> inline_body(const ::onnx::NodeProto& n, const std::string& node_name,
                                                   const parent& p, const ::onnx::GraphProto& body,
                                                   const std::map<std::string, std::string, std::less<>>& bound,
                                                   const std::string& prefix);

}  // namespace npurt::onnx::control_flow

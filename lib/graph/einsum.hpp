// Einsum as a chain of the graph's operators (Transpose, Reshape, Gather, ReduceSum, Mul and a
// batched MatMul), built by composite.cpp's add_composite.
#pragma once

#include <npurt/graph/graph.hpp>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace npurt::detail {

/// How a chain adds its steps: `step(type, tag, inputs, to, attrs)` adds one operator writing `to`
/// (a fresh intermediate named after `tag` when empty) and returns its output; `ints(tag, values)`
/// adds an int64 vector constant and returns its name.
struct chain_builder {
  std::function<std::string(const std::string&, const std::string&, std::vector<std::string>, const std::string&,
                            attributes)>
      step;
  std::function<std::string(const std::string&, std::span<const std::int64_t>)> ints;
};

/// ONNX Einsum (onnx.ai/onnx/operators/onnx__Einsum.html; its reference is numpy.einsum) of `ins`
/// into `y` as a chain: each operand's repeated letters become a diagonal (Gather), the letters no
/// other operand and not the output has are summed (ReduceSum), and the operands are contracted
/// left to right, each pair as one batched MatMul [batch, free_a, contracted] x [batch,
/// contracted, free_b] (a broadcasting Mul when nothing is contracted), as numpy's tensordot does.
/// Everything is checked before the first step is added. Throws graph_error: invalid_argument for
/// a malformed equation or an operand count that does not match it, invalid_shape for a letter
/// whose sizes disagree or an operand whose rank does not match its term, invalid_dtype for mixed
/// element types, not_supported for an element type MatMul does not take or more than
/// shape::max_rank axes.
void add_einsum(graph& g, const std::string& node_name, const std::vector<std::string>& ins, const std::string& y,
                const attributes& attrs, const chain_builder& chain);

}  // namespace npurt::detail

// Recomputation (activation checkpointing) as a graph rewrite. Private to the graph library.
#pragma once

#include <npurt/graph/graph.hpp>

#include <optional>
#include <string>
#include <vector>

namespace npurt {

/// An activation read early (the forward pass) and again much later (the backward pass) that
/// can be recomputed just before its late readers from tensors that are alive there anyway
/// (inputs, constants, or activations read at or after that point), through a chain of at most
/// three operators.
struct recompute_candidate {
  std::string value;
  std::vector<std::size_t> chain;  ///< node indices to clone, in topological order
  std::size_t first_late = 0;      ///< node index of the first late reader
  std::size_t bytes = 0;
};

[[nodiscard]] std::vector<recompute_candidate> recompute_candidates(const graph& g);

/// g with every candidate's chain cloned ("<output>.recompute") just before its first late
/// reader, and the late readers reading the clones.
[[nodiscard]] graph apply_recompute(const graph& g, const std::vector<recompute_candidate>& cs);

}  // namespace npurt

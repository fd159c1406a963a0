// ONNX sequences and optionals resolved at import. npurt's graphs hold tensors only, so a
// sequence whose length is known at import (SequenceConstruct of named tensors, SplitToSequence
// of a static shape, a SequenceInsert at a constant position, ...) is held by the importer as the
// ordered list of its tensors' names, and an optional as its element or none: never a value of
// the graph. What reads them becomes tensor nodes (SequenceAt an Identity, ConcatFromSequence a
// Concat, SequenceLength a constant). Semantics are ONNX's (onnx.ai/onnx/operators/
// onnx__SequenceAt.html and its neighbours, onnx/reference/ops/op_sequence_*.py,
// op_split_to_sequence.py, op_concat_from_sequence.py, op_optional*.py).
#pragma once

#include "control_flow.hpp"

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace npurt::onnx::sequences {

/// The tensors of a sequence, in order. Values made from one another share their storage: a
/// copy (an Identity, an Optional, the input of an edit) costs nothing, and an edit at either end
/// of a list whose end no other value has grown (a chain of SequenceInserts, each on the previous
/// one's output) adds or drops one name, so a chain of n edits costs O(n), not the O(n^2) of a
/// copy per edit while the store keeps every step's value. Anything else (an edit in the middle,
/// or at an end another value grew first) copies the names once. Elements a list can reach are
/// never changed: storage only grows at its ends.
class tensor_list {
 public:
  [[nodiscard]] std::size_t size() const noexcept { return static_cast<std::size_t>(last_ - first_); }
  [[nodiscard]] bool empty() const noexcept { return first_ == last_; }
  [[nodiscard]] const std::string& operator[](std::size_t i) const {
    return store_->items[static_cast<std::size_t>(first_ - store_->first) + i];
  }
  [[nodiscard]] const std::string& front() const { return (*this)[0]; }
  [[nodiscard]] std::vector<std::string> to_vector() const;

  void push_back(std::string t);
  /// Inserts `t` before position `at` (<= size()).
  void insert(std::size_t at, std::string t);
  /// Drops the name at position `at` (< size()).
  void erase(std::size_t at);

 private:
  struct storage {
    std::deque<std::string> items;
    std::int64_t first = 0;  // the index items[0] has in every list that shares it
  };
  // Copies the names into storage of this list's own, leaving room for nothing more.
  void unshare();

  std::shared_ptr<storage> store_;
  std::int64_t first_ = 0, last_ = 0;  // [first_, last_) in the storage's indices
};

/// A sequence or an optional of the model, known at import.
struct value {
  /// An optional: `present` says whether it holds its element. Otherwise a sequence.
  bool optional = false;
  bool present = true;
  /// Whether the value (an optional's element) is a sequence: `tensors` are then its tensors in
  /// order; otherwise `tensors` holds the one tensor an optional holds.
  bool sequence = true;
  tensor_list tensors;
  /// The dtype of a sequence's tensors, when known (SequenceEmpty's dtype, its first tensor's).
  std::optional<dtype> element_type;
};

/// The importer's sequences and optionals, by name.
using store = std::map<std::string, value, std::less<>>;

/// SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceErase, SequenceAt, SequenceLength,
/// ConcatFromSequence, SplitToSequence, SequenceMap, Optional, OptionalHasElement and
/// OptionalGetElement (ai.onnx domain).
[[nodiscard]] bool is_sequence_op(std::string_view op_type) noexcept;

/// Whether `n` is one of them, or an Identity of a value in `s` (which copies it).
[[nodiscard]] bool handles(const ::onnx::NodeProto& n, const store& s);

/// The first input of `n` that names a value of `s`, or null.
[[nodiscard]] const std::string* reads_sequence(const ::onnx::NodeProto& n, const store& s);

/// Resolves `n`: its sequence and optional outputs go into `s`, its tensor outputs are emitted
/// through `p` as nodes (Identity, Concat, Slice, Gather, Constant, ...). Returns false when an
/// input waits on a node the importer could not add: the caller marks n's outputs as waiting
/// too. Throws graph_error naming the node: not_supported when a position or split is computed
/// at run time (a sequence's length must be known at import) or a sequence holds sequences;
/// invalid_argument for a position out of range, an empty optional's element, a split that does
/// not cover its axis, a sequence where a tensor is expected or the reverse; invalid_dtype for
/// tensors of different dtypes in one sequence or a position that is no integer; invalid_shape
/// for a position that is not a scalar.
[[nodiscard]] bool import(const ::onnx::NodeProto& n, const std::string& node_name, const control_flow::parent& p,
                          store& s);

}  // namespace npurt::onnx::sequences

// npurt/models/memory_trace.hpp — the device-memory allocation trace of a simulated training step.
//
// Time is the kernel index in resnet50::training_step(). A tensor of the step lives on
// [first kernel that writes it, last kernel that touches it + 1): what a framework's allocator
// sees when it allocates a tensor at its producer's launch and frees it after its last consumer
// (PyTorch frees a saved activation when the backward node holding it has run). Inputs are
// copied in before the step, so they live from 0. Parameters, momentum, compute-dtype weight
// copies and BN running statistics outlive the step: [0, kernels), flagged `persistent`.
//
// The buffers are MiniMalloc's / memplan's CSV columns (id, lower, upper, size); `events` is the
// same thing as an alloc/free stream, frees before allocs at equal times, which is how an online
// allocator replays it.
#pragma once

#include <npurt/models/resnet50.hpp>

#include <cstdint>
#include <iosfwd>
#include <vector>

namespace npurt::models {

/// One tensor's buffer: live on kernel steps [lower, upper), `size` bytes.
struct trace_buffer {
  std::int64_t id = 0;  ///< the tensor's index in resnet50::tensors()
  std::int64_t lower = 0;
  std::int64_t upper = 0;
  std::uint64_t size = 0;
  bool persistent = false;  ///< lives across steps (parameters, optimizer state, module buffers)
};

/// An allocation or a free. `buffer` indexes the buffers of the trace it came from (for a
/// multi-step stream, see repeated_events()).
struct trace_event {
  std::int64_t time = 0;
  bool alloc = false;
  std::uint32_t buffer = 0;
  std::uint64_t size = 0;
};

struct allocation_trace {
  std::int64_t kernels = 0;            ///< kernels in the step: times run over [0, kernels]
  std::vector<trace_buffer> buffers;   ///< one per tensor, in resnet50::tensors() order
  std::vector<trace_event> events;     ///< by time; frees first at equal times, then by buffer
  std::uint64_t peak_live = 0;         ///< most bytes live at one step: the lower bound of any allocator
  std::int64_t peak_time = 0;          ///< the first step where peak_live is reached
  std::uint64_t persistent_bytes = 0;  ///< bytes that live across steps
};

/// The trace of one training step of `model`.
[[nodiscard]] allocation_trace training_step_trace(const resnet50& model);
/// The same for a freshly built model at a batch size.
[[nodiscard]] allocation_trace training_step_trace(std::int64_t batch, dtype compute = dtype::f16);

/// The event stream of `steps` consecutive steps: persistent buffers allocated once at time 0
/// (and freed at the end if `free_persistent`), every other buffer once per step at times shifted
/// by step x kernels. In step s a transient buffer i is numbered i + s x buffers.size(); a
/// persistent one keeps its index. Frees come before allocs at equal times.
[[nodiscard]] std::vector<trace_event> repeated_events(const allocation_trace& trace, int steps,
                                                       bool free_persistent = true);

/// Writes `id,lower,upper,size` (the memplan / MiniMalloc CSV form).
void write_csv(std::ostream& out, const allocation_trace& trace);

}  // namespace npurt::models

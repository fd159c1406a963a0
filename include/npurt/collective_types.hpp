// npurt/collective_types.hpp — what a collective call is, as the runtime hands it to a backend:
// the operations, reduce operators and algorithms of HCCL, one rank's call, and the state a
// communicator shares between its handle and the backend that runs its operations.
#pragma once

#include <npurt/backend.hpp>
#include <npurt/error.hpp>
#include <npurt/tensor.hpp>
#include <npurt/time.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace npurt {

/// `avg` is NCCL's ncclAvg (NCCL 2.10): the sum over the ranks, then one division by the rank
/// count in the element type (integers truncate toward zero). The enumerators keep their values:
/// new ones go at the end.
enum class reduce_op : std::uint8_t { sum, prod, max, min, avg };

enum class collective_op : std::uint8_t {
  all_reduce,
  all_gather,
  reduce_scatter,
  broadcast,
  reduce,
  all_to_all,
  all_to_allv,
  send,
  recv,
  barrier,
};

/// HCCL's algorithms. `automatic` chooses by topology and size (docs/collectives.md).
enum class collective_algorithm : std::uint8_t { automatic, ring, mesh, rhd, hierarchical };

constexpr std::string_view to_string(reduce_op r) noexcept {
  switch (r) {
    case reduce_op::sum: return "sum";
    case reduce_op::prod: return "prod";
    case reduce_op::max: return "max";
    case reduce_op::min: return "min";
    case reduce_op::avg: return "avg";
  }
  return "?";
}

constexpr std::string_view to_string(collective_op o) noexcept {
  switch (o) {
    case collective_op::all_reduce: return "all_reduce";
    case collective_op::all_gather: return "all_gather";
    case collective_op::reduce_scatter: return "reduce_scatter";
    case collective_op::broadcast: return "broadcast";
    case collective_op::reduce: return "reduce";
    case collective_op::all_to_all: return "all_to_all";
    case collective_op::all_to_allv: return "all_to_allv";
    case collective_op::send: return "send";
    case collective_op::recv: return "recv";
    case collective_op::barrier: return "barrier";
  }
  return "?";
}

constexpr std::string_view to_string(collective_algorithm a) noexcept {
  switch (a) {
    case collective_algorithm::automatic: return "auto";
    case collective_algorithm::ring: return "ring";
    case collective_algorithm::mesh: return "mesh";
    case collective_algorithm::rhd: return "rhd";
    case collective_algorithm::hierarchical: return "hierarchical";
  }
  return "?";
}

/// One rank's part of one operation. Counts are elements of `type`:
///  - all_reduce, broadcast, reduce, send, recv: the whole vector (send and recv hold `count`;
///    broadcast reads send on the root only, reduce writes recv on the root only);
///  - all_gather: the rank's input (recv holds size * count);
///  - reduce_scatter: the rank's output shard (send holds size * count);
///  - all_to_all: the block for each peer (send and recv hold size * count);
///  - all_to_allv: the per-peer counts and displacements below;
///  - barrier: none.
struct collective_call {
  collective_op op = collective_op::all_reduce;
  reduce_op red = reduce_op::sum;
  dtype type = dtype::f32;
  std::size_t count = 0;
  const void* send = nullptr;
  void* recv = nullptr;
  std::int32_t root = 0;  // broadcast / reduce: the root rank; send / recv: the peer rank
  collective_algorithm algorithm = collective_algorithm::automatic;  // per-call override
  std::vector<std::size_t> send_counts, send_displs, recv_counts, recv_displs;  // all_to_allv
};

/// What happened to one operation instance, for inspection (the seed case's waits).
struct collective_record {
  std::uint64_t sequence = 0;             // per-communicator call number (p2p: per pair)
  collective_op op = collective_op::all_reduce;
  collective_algorithm algorithm = collective_algorithm::ring;
  std::size_t bytes = 0;                  // the vector size the formulas call n
  std::vector<sim_time> arrival;          // by rank: when the rank's task reached the device
  sim_time start{};                       // when the last rank arrived and data began to move
  sim_time end{};
  std::error_code error;
};

/// State a communicator shares with the backend that runs its operations.
struct collective_comm_state {
  std::uint64_t id = 0;
  std::string name;
  std::vector<device_id> devices;         // rank -> device
  collective_algorithm algorithm = collective_algorithm::automatic;
  std::size_t buffer_bytes = 200'000'000; // HCCL_BUFFSIZE: messages larger than this run in chunks
  std::optional<picoseconds> exec_timeout;     // no_timeout: never
  std::optional<picoseconds> connect_timeout;  // bounds the rendezvous of the first operation
  bool connected = false;                      // an operation has started: the links are set up
  // Per-rank sequence numbers of collective calls, and per (src, dst) pair of point-to-point ones.
  std::vector<std::uint64_t> next_seq;
  std::vector<std::uint64_t> next_send, next_recv;  // index src * size + dst
  // HcclGetCommAsyncError: the first error an operation of this communicator hit.
  std::error_code async_error;
  std::string message;
  bool aborted = false;
  // Why it was aborted, when not by abort(): calls refused from then on say it.
  std::string abort_reason;
  bool keep_records = false;
  std::vector<collective_record> records;
  [[nodiscard]] std::uint32_t size() const noexcept { return static_cast<std::uint32_t>(devices.size()); }
  /// The call number `c` takes on `rank`, consumed: the engine matches the ranks' parts by it.
  std::uint64_t take_sequence(std::uint32_t rank, const collective_call& c) { return counter(rank, c)++; }
  /// Undoes take_sequence, for a call that was never enqueued after all.
  void give_back_sequence(std::uint32_t rank, const collective_call& c) { --counter(rank, c); }

 private:
  std::uint64_t& counter(std::uint32_t rank, const collective_call& c) {
    const std::uint32_t p = size();
    const auto peer = static_cast<std::uint32_t>(c.root);
    if (c.op == collective_op::send) return next_send[rank * p + peer];
    if (c.op == collective_op::recv) return next_recv[peer * p + rank];
    return next_seq[rank];
  }
};

/// The communicator's settings one call was enqueued under. A later set_algorithm or
/// set_buffer_size must not reach calls already queued (HCCL reads HCCL_ALGO and HCCL_BUFFSIZE
/// when the operation is issued), so the call carries its own copy.
struct collective_settings {
  /// The call's own algorithm, or the communicator's when the call left it automatic.
  collective_algorithm algorithm = collective_algorithm::automatic;
  std::size_t buffer_bytes = 200'000'000;
};

/// One rank's task: one call, or several batched by group_start / group_end.
struct collective_desc {
  std::shared_ptr<collective_comm_state> comm;
  std::uint32_t rank = 0;
  std::vector<collective_call> calls;
  std::vector<std::uint64_t> sequence;          // per call
  std::vector<collective_settings> settings;    // per call
  /// A node of a stream capture: its calls take their numbers at each launch of the graph, in
  /// the order of the graph's nodes, so the ranks' graphs match as their launches do (as NCCL's
  /// calls captured in a CUDA graph), and `sequence` holds zeros until then.
  bool captured = false;
  /// Set by the backend when this rank's task fails: what it found wrong, as async_error's
  /// message says it. The backend sees the desc const once it is queued, hence mutable; the
  /// scheduler copies it into the failure a synchronize reports.
  mutable std::string failure;
};

}  // namespace npurt

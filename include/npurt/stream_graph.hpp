// npurt/stream_graph.hpp — graphs captured from a stream, launched as often as needed.
//
// A stream's capture (stream::begin_capture ... stream::end_capture, as aclmdlRICaptureBegin and
// cudaStreamBeginCapture) records its work as a graph instead of running it. Launching the graph
// enqueues that work again on any stream of the same device, checked once at the capture: the
// host lane pays system_options::launch_overhead for the launch and graph_node_overhead for
// each node after the first, where launching the nodes one by one pays launch_overhead each
// (aclmdlRIExecuteAsync, cudaGraphLaunch). On the device each node runs as it would have. The
// work of streams that joined the capture (fork and join through events) runs on streams of the
// graph's own, made at its first launch, with the dependencies the capture recorded. A
// communicator's calls captured on a stream become nodes that take their call numbers at each
// launch: every rank captures and launches its own graph, as with NCCL's calls in CUDA graphs.
//
// A graph is a move-only handle. It keeps what its nodes need (shared kernel descriptors, host
// callbacks, the user events it records) until it is destroyed; the memory its nodes read and
// write stays the caller's to keep alive, as for any queued work. A launch refuses a copy node
// whose pinned host buffer was freed since; device memory freed since fails its node when it
// runs, with the stream's sticky error. Resetting the graph's device destroys its nodes, and the
// graph launches no more (errc::invalid_graph).
//
// Graph memory: a pool allocation on a capturing stream (mem_pool::malloc_async) is the graph's,
// at one address for every launch, as CUDA's allocation nodes are; a free of it in the same
// capture (mem_pool::free_async) ends each launch's use of it. Without one, a launch leaves it
// allocated for the work after the graph, and the graph launches again only once the program
// has freed it (mem_pool::free_async, device::free), or, made with
// graph_flags::auto_free_on_launch, frees it itself at its next launch. Another graph's capture
// may free it too: a free node of that graph, which each of its launches performs. The graph's destruction gives its
// memory back when its launched work is done.
//
// Task groups: tasks marked in a capture (stream::begin_task_group ... end_task_group) can be
// replaced in the graph by a task update on a stream (stream::begin_task_update ...
// end_task_update) that enqueues their new kernels, pointers and values, as CANN's
// aclmdlRICaptureTaskGrpBegin and aclmdlRICaptureTaskUpdateBegin do; stream_graph::update
// replaces every node from a capture of the same shape instead.
#pragma once

#include <npurt/backend.hpp>
#include <npurt/config.hpp>
#include <npurt/detail/async_op.hpp>
#include <npurt/detail/runtime.hpp>
#include <npurt/error.hpp>
#include <npurt/event.hpp>
#include <npurt/stream.hpp>

#include <boost/asio/async_result.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace npurt {

class stream_graph;

namespace detail {
/// For npurt's own components: the task ids the latest launch of a graph gave its collective
/// nodes, in node order (empty for a null graph or one never launched). A session names the
/// all-reduces of a captured run by them, as it names those of a run made call by call.
struct stream_graph_access {
  NPURT_DECL static std::vector<std::uint64_t> collective_task_ids(const stream_graph& g);
};
}  // namespace detail

/// A node of a stream_graph, as stream_graph::nodes() describes it (cudaGraphGetNodes,
/// cudaGraphNodeGetType, cudaGraphNodeGetDependencies).
struct graph_node {
  task_kind kind = task_kind::kernel;
  std::string name;  // the kernel's, or the kind's
  /// The capture's stream it runs on: 0 the stream that began the capture (at a launch, the
  /// launch's stream), 1... those that joined it, in the order they joined.
  std::uint32_t stream = 0;
  /// The nodes it runs after: the one before it on its stream, and for a wait between streams
  /// the record it waits for. Indices into nodes(), each less than the node's own.
  std::vector<std::size_t> dependencies;
  std::size_t bytes = 0;  // a copy's or a memset's
};

/// A task group of a capture (aclrtTaskGrp): what stream::begin_task_group and end_task_group
/// marked, and what stream::begin_task_update and end_task_update replace. A copyable handle,
/// valid while its graph is (the capture ended well, the graph not destroyed or lost).
class task_group {
 public:
  /// A null group: an update of it is refused (errc::invalid_graph).
  task_group() noexcept = default;
  /// Whether its graph exists and can be launched.
  [[nodiscard]] NPURT_DECL bool valid() const noexcept;
  /// Its tasks, as many as an update enqueues; errc::invalid_graph when not valid().
  [[nodiscard]] NPURT_DECL std::size_t size() const;
  /// Its tasks' indices among its graph's nodes (stream_graph::nodes()); errc::invalid_graph
  /// when not valid().
  [[nodiscard]] NPURT_DECL std::vector<std::size_t> nodes() const;

 private:
  friend class stream;
  task_group(detail::runtime& rt, std::uint64_t id) noexcept : rt_(&rt), id_(id) {}
  /// The group's state when its graph is live, else null with the words.
  NPURT_DECL const detail::task_group_state* state(std::string& why) const;

  detail::runtime_ref rt_;  // null once the system is gone
  std::uint64_t id_ = 0;
};

class stream_graph {
 public:
  using default_token = detail::default_token;

  /// A null graph: every call reports errc::invalid_graph.
  stream_graph() noexcept = default;
  stream_graph(stream_graph&& o) noexcept : rt_(std::move(o.rt_)), id_(std::exchange(o.id_, 0)) {}
  NPURT_DECL stream_graph& operator=(stream_graph&& o) noexcept;
  stream_graph(const stream_graph&) = delete;
  stream_graph& operator=(const stream_graph&) = delete;
  NPURT_DECL ~stream_graph();

  /// Whether the graph can be launched (not null, not destroyed with its system or its device's reset).
  [[nodiscard]] NPURT_DECL bool valid() const noexcept;
  /// Its nodes: one per captured task.
  [[nodiscard]] NPURT_DECL std::size_t size() const;
  /// The device whose stream captured it; it launches on streams of that device.
  [[nodiscard]] NPURT_DECL device_id device() const;
  /// Its nodes in captured order, which orders every dependency (see graph_node).
  [[nodiscard]] NPURT_DECL std::vector<graph_node> nodes() const;
  /// The graph in Graphviz's DOT language, a cluster per stream, for a look at what a capture
  /// recorded (cudaGraphDebugDotPrint, aclmdlRIDebugPrint).
  [[nodiscard]] NPURT_DECL std::string to_dot() const;

  /// Enqueues the graph's nodes in captured order, those of the capturing stream on `s`, and
  /// returns the last such node's event (a null event for an empty graph). The other streams'
  /// nodes run on streams the graph owns, made at its first launch with the priority and flags
  /// their capturing streams had (but stop_on_failure). A failure there is reported on `s` too,
  /// as a failure of its own work: its synchronize, query and async_launch's completion see it
  /// (nobody can synchronize the graph's own streams). A collective node (a call or a group of a communicator)
  /// takes its rank's next call numbers at each launch, in the order of the graph's nodes: the
  /// ranks' graphs, and any calls made around them, match as their launches and calls are
  /// ordered, as NCCL's captured calls do. Into a capturing
  /// stream, the nodes of a graph of one stream join its capture (a null event); a graph of
  /// several is refused there (errc::capture_unsupported). Refused, with nothing enqueued: a
  /// null or lost graph (errc::invalid_graph), a stream
  /// of another system or null (errc::invalid_stream), of another device
  /// (errc::stream_device_mismatch), a lost device (errc::device_lost), a copy node's pinned
  /// host buffer freed since the capture (errc::invalid_pointer), a collective node's
  /// communicator aborted (errc::operation_aborted), an allocation the previous launch left
  /// allocated and nobody has freed (errc::invalid_argument; a graph made with
  /// graph_flags::auto_free_on_launch frees it instead), another graph's allocation this graph
  /// frees and nothing has left allocated (errc::invalid_pointer before that graph's first
  /// launch or once the memory is gone, errc::double_free after a free), a graph that allocates
  /// or frees graph memory
  /// launched into a capture (errc::capture_unsupported).
  NPURT_DECL event launch(stream& s);
  NPURT_DECL event launch(stream& s, std::error_code& ec);
  /// Takes the nodes of `from`, a graph of the same shape, in place of its own, as
  /// cudaGraphExecUpdate and aclmdlRICaptureTaskUpdateBegin/End change a captured graph's tasks
  /// without instantiating a new one: later launches run `from`'s kernels, copies (pointers and
  /// sizes), memset values and callbacks; launches already made run what they were. The graph
  /// keeps its own streams, with their priorities and flags, and `from` becomes a null graph.
  /// The same shape: the same device and number of nodes and streams and, node by node, the same
  /// kind, stream and dependencies; a copy between the same memories (kind, devices, pinned host
  /// ends); a collective call of the same communicator, operation, type, count and root (its
  /// buffers may change); a record of the same event. Refused, with both graphs unchanged: a
  /// graph of another shape, or one with graph memory in either (errc::graph_update_mismatch,
  /// naming the first difference); a null or lost graph, on either side, or one of another system
  /// (errc::invalid_graph); the graph itself (errc::invalid_argument).
  NPURT_DECL void update(stream_graph&& from);
  NPURT_DECL void update(stream_graph&& from, std::error_code& ec);
  /// launch(s), then completes as s.async_synchronize does: when the graph's work (and whatever
  /// was enqueued on s before it) has run, with the stream's first unread failure. A capturing
  /// stream refuses it (errc::stream_captured), as any awaited call.
  template <class Token = default_token>
  auto async_launch(stream& s, Token&& token = {});

 private:
  friend class stream;
  friend struct detail::stream_graph_access;
  stream_graph(detail::runtime& rt, std::uint64_t id) noexcept : rt_(&rt), id_(id) {}
  /// The graph's state, or null with the code (invalid_graph, wrong_thread) and the words.
  NPURT_DECL const detail::graph_state* state(std::error_code& ec, std::string& why) const;
  /// launch's work, its refusal's words in `words`.
  NPURT_DECL event launch(stream& s, std::error_code& ec, std::string& words);
  /// update's work, its refusal's words in `words`.
  NPURT_DECL void update(stream_graph& from, std::error_code& ec, std::string& words);

  detail::runtime_ref rt_;  // null once the system is gone
  std::uint64_t id_ = 0;
};

template <class Token>
auto stream_graph::async_launch(stream& s, Token&& token) {
  return boost::asio::async_initiate<Token, void(async_error_code)>(
      [this, &s](auto handler) {
        if (!rt_) {
          detail::post_null_handle_error(std::move(handler), make_error_code(errc::invalid_graph));
          return;
        }
        if (rt_->wrong_thread()) [[unlikely]] {
          detail::refuse_foreign(&rt_->io(), std::move(handler), -1, "npurt::stream_graph::async_launch");
          return;
        }
        if (detail::stream_state* ss = s.rt_ == rt_ ? rt_->find_stream(s.id()) : nullptr; ss && ss->capture) {
          s.refuse_captured(std::move(handler), *ss, "npurt::stream_graph::async_launch", detail::awaited_in_capture);
          return;
        }
        std::error_code ec;
        std::string words;
        (void)launch(s, ec, words);
        if (ec) {
          detail::post_refusal(*rt_, std::move(handler), ec, s.device_or_none(), words, {});
          return;
        }
        s.async_synchronize(std::move(handler));
      },
      token);
}

}  // namespace npurt

#if NPURT_INCLUDE_IMPL
#include <npurt/impl/stream_graph.ipp>
#endif

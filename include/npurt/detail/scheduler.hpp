// npurt/detail/scheduler.hpp — the scheduling layer of one npurt::system.
//
// Owns one invariant: work runs in stream order, after the events it waits for, and no failure
// of fire-and-forget work is lost. Its state is stream FIFOs, task records, events, host lanes
// (the virtual time at which the host enqueues), dependencies between stream positions and
// sticky errors. It decides when a task reaches the backend and hears when it is done; the loop
// that drives time (detail::runtime) and the parts it lends (loop_parts) are separate owners.
// Single-threaded: called only from the thread that runs the system.
#pragma once

#include <npurt/backend.hpp>
#include <npurt/config.hpp>
#include <npurt/detail/device_queue.hpp>
#include <npurt/detail/host_heap.hpp>
#include <npurt/detail/memory_registry.hpp>
#include <npurt/detail/object_pool.hpp>
#include <npurt/detail/timer_queue.hpp>
#include <npurt/error.hpp>
#include <npurt/kernel.hpp>
#include <npurt/observer.hpp>
#include <npurt/system_options.hpp>
#include <npurt/time.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace npurt::detail {

/// A host-side operation waiting for a completion (an awaited launch, a sync, an event wait).
/// Type-erased so that tasks stay plain records; concrete ops hold the Asio handler.
struct op_base {
  void (*complete_fn)(op_base*, std::error_code) = nullptr;
  // When completed with a timeout: which timer fired and its value in picoseconds, for the
  // timeout_error of a throwing await (an error_code cannot carry them).
  std::int64_t timeout_limit = 0;
  timeout_kind timer = timeout_kind::sync;
  // Where the awaiter keeps the exception the operation's throwing form would raise (the
  // npurt::use_task await rethrows it), or null for a handler that receives the code alone: an
  // error_code cannot say which task failed, on what data, or what a host callback threw.
  std::exception_ptr* thrown_to = nullptr;
  void complete(std::error_code ec) { complete_fn(this, ec); }
};

/// What only some kinds of task carry: copies and memsets their copy, event waits and records
/// their event links, host callbacks their function. A side record from its own pool, so that a
/// queued kernel pays for none of it.
struct task_side {
  copy_desc copy{};  // memcpy / memset
  // event_wait: the stream position waited for; event_record: the event id recorded.
  std::uint32_t target_stream = 0;
  std::uint64_t target_seq = 0;
  std::uint64_t event_id = 0;
  std::uint64_t record_task = 0;  // event_wait: the task waited for (a record, or a task event's task); 0: unknown
  std::int64_t wait_limit = 0;  // a user event wait: the event-wait timeout in force at its enqueue (0: none)
  std::function<void()>* callback = nullptr;  // host_callback (owned by the scheduler, see own_callback)
  // A fire-and-forget copy from pageable host memory reads this snapshot, taken at the call, as
  // cudaMemcpyAsync stages pageable memory before it returns: the caller may reuse or free its
  // buffer at once.
  host_bytes staged;
  // A captured copy (a stream_graph node): which ends were pinned host memory at the capture,
  // checked again at every launch (bit 0 the source, bit 1 the destination).
  std::uint8_t pinned_ends = 0;
  // value_write: the word written; value_wait: the operand its word is compared with, and how.
  // Both keep their word's address in copy.dst (8 bytes of copy.dst_device).
  wait_condition condition = wait_condition::geq;
  std::uint64_t operand = 0;
};

/// One enqueued unit of stream work, as it waits in its stream: only what dispatching it needs.
/// What the backend sees (task_info) and how the task ends are filled in when it starts, in its
/// stream's running_task: only a stream's head is ever started, so queued work (possibly millions
/// of records) carries none of it. Its position in the stream is not kept either: a stream runs
/// its tasks in order, so the head's is always one past the stream's last completed.
struct task {
  /// What a task made from a descriptor points at.
  struct described {
    const kernel_desc* kernel = nullptr;  // kind == kernel
    std::shared_ptr<const void> ref;      // keeps a shared descriptor or a collective's calls alive
  };

  task* next = nullptr;       // stream FIFO
  op_base* waiter = nullptr;  // host op completed with the task's outcome
  std::uint64_t id = 0;       // global sequence number
  sim_time submitted{};       // when the host enqueued it
  std::string_view name{};    // interned (see scheduler::intern) or a literal
  // A kernels::fixed launch carries its cost, any other kernel (and a collective) what it points
  // at; never both, so they share storage, keyed by `has_desc`.
  union {
    kernels::fixed fixed;
    described desc;
  };
  task_side* extra = nullptr;  // see task_side; null for kernels and collectives
  std::uint32_t stream = 0;
  std::uint32_t block_dim = 0;  // kind == kernel: AI cores requested, 0 = all
  task_kind kind = task_kind::kernel;
  engine_kind engine = engine_kind::none;
  bool has_desc = false;     // `desc` is the live member of the union
  bool owns_kernel = false;  // desc.kernel is a copy from the scheduler's pool, freed with the task
  bool blocked = false;      // an event or value wait not yet satisfied
  bool orphan = false;       // its device was reset while a completion was on its way: free it then

  task() : fixed{} {}
  ~task() {
    if (has_desc) desc.~described();
  }
  task(const task&) = delete;
  task& operator=(const task&) = delete;
  /// Makes `desc` the live member (once, right after the record is made).
  void describe(const kernel_desc* k, std::shared_ptr<const void> ref) noexcept {
    ::new (static_cast<void*>(&desc)) described{k, std::move(ref)};
    has_desc = true;
  }
  /// kind == kernel: the descriptor, or null for a kernels::fixed launch.
  [[nodiscard]] const kernel_desc* kernel() const noexcept { return has_desc ? desc.kernel : nullptr; }
  [[nodiscard]] const collective_desc* collective() const noexcept {
    return kind == task_kind::collective && has_desc ? static_cast<const collective_desc*>(desc.ref.get()) : nullptr;
  }
};

/// A stream's started head: what the backend sees of it (it holds this task_info between submit
/// and complete) and how it ended. Filled from the task record when the task starts.
struct running_task : task_info {
  task* rec = nullptr;           // the record in its stream's FIFO
  std::uint64_t seq = 0;         // its position in the stream (1-based)
  std::error_code error;         // set when the task failed or was aborted
  std::exception_ptr exception;  // host_callback only: what the callback threw
  timeout_kind timer = timeout_kind::sync;  // error is a timeout: which timer fired
  // error is a timeout: the timer's value (ps). A user event wait carries the event-wait timeout
  // in force when it was enqueued (0: none).
  std::int64_t timeout_limit = 0;
  // What the backend said made it fail with why_ec (backend_host::describe_failure): the
  // failure's detail while the outcome is still why_ec.
  std::string why;
  std::error_code why_ec;
};

/// The first failure of fire-and-forget work on a stream or device, kept until read (CUDA's and
/// CANN's sticky error): which task failed, how, and for a host callback what it threw.
struct failure {
  std::error_code ec;
  std::uint64_t task = 0;          // task id
  std::uint32_t stream = 0;
  std::uint64_t seq = 0;           // its position in the stream
  std::string name;                // the task's name, owned
  std::exception_ptr exception;
  timeout_kind timer = timeout_kind::sync;  // ec is a timeout: which timer fired
  std::int64_t timeout_limit = 0;           // and its value in picoseconds
  std::string detail;  // what the backend found wrong, e.g. how a collective's ranks disagreed
  explicit operator bool() const noexcept { return static_cast<bool>(ec); }
  /// "task 7 (add) on stream 3 failed", with the timer of a timeout, the backend's detail and what
  /// a callback threw: the start of an exception's what(), to which std::system_error appends
  /// ": <message>".
  [[nodiscard]] std::string describe() const;
};

/// Throws the failure as the throwing overloads report it: a timeout_error that names its
/// timer and limit, or the error class's exception.
/// `device`: the device the failure is about, when the raiser knows it.
[[noreturn]] inline void throw_failure(const failure& f, const std::string& what, std::int32_t device = -1) {
  if (is_timeout(f.ec)) throw timeout_error(f.ec, what, f.timer, f.timeout_limit);
  throw_error_on(device, f.ec, what);
}

/// The exception an awaited synchronize or event wait (npurt::use_task) raises for a failure, as
/// the blocking forms raise it: a host callback's own exception, else throw_failure's.
[[nodiscard]] NPURT_DECL std::exception_ptr failure_exception(const failure& f, const std::string& what,
                                                              std::int32_t device = -1);

/// A waiter on a stream position: runs fn(self, ctx, ec) when the stream completes task `seq` (or
/// with an error when it never will).
struct position_waiter {
  void (*fn)(void* self, void* ctx, std::error_code) = nullptr;
  void* self = nullptr;  // who waits (e.g. the scheduler for a stream's event wait)
  void* ctx = nullptr;   // on what (e.g. the waiting task)
};

/// stream_flags::stop_on_failure: after a failure the stream fails its later tasks with
/// errc::operation_aborted until the failure is read (aclrtSetStreamFailureMode).
inline constexpr std::uint32_t stop_on_failure_flag = 0x10;

/// A capture in progress (aclmdlRICaptureBegin, cudaStreamBeginCapture): the tasks enqueued on
/// its streams since, held as the nodes of a graph rather than run. It begins on one stream (the
/// origin, lane 0); another stream of the device joins it, as a lane of its own, by waiting for an
/// event recorded in it, and must be waited for in turn before the origin ends it (CUDA's fork
/// and join). Shared by the streams that take part.
struct capture_state {
  std::uint32_t origin = 0;           // the stream that began it, which ends it
  device_id device = 0;
  bool relaxed = false;               // capture_mode::relaxed: only the capturing streams are guarded
  std::error_code invalidated;        // what ended it early; end_capture reports it
  std::string why;                    // in words
  std::vector<task*> nodes;           // in capture order, which orders every dependency; never enqueued
  std::vector<std::uint32_t> lanes;   // each node's lane
  std::vector<std::uint32_t> lane_streams;  // each lane's stream (0: destroyed since it joined)
  std::vector<std::pair<std::uint8_t, std::uint32_t>> lane_modes;  // each lane's stream's (priority, flags)
  std::vector<std::uint64_t> events;  // user events recorded in it, retained until the graph dies
  std::vector<std::pair<std::uint64_t, std::size_t>> records;  // (event, node) of each record, in order
  std::vector<std::uint64_t> allocs;  // the graph allocations it made (graph_allocation), in call order
  std::vector<std::uint64_t> freed;   // allocations its frees ended: no node captured later may touch them
  std::vector<std::uint64_t> frees;   // other graphs' allocations its free nodes end, in call order
  std::vector<std::uint64_t> groups;  // the task groups begun in it (task_group_state), in order
  std::vector<std::pair<std::uint32_t, std::uint64_t>> open_groups;  // (lane, group) of groups not yet ended
  std::uint64_t updating = 0;  // a task update (stream::begin_task_update): the group its nodes replace
};

/// A captured graph (the stream_graph a capture made): its nodes, cloned into streams on each
/// launch. Kernels are shared with the clones, never copied. A node of kind event_wait is a
/// dependency between lanes: extra->target_stream is the lane, extra->target_seq the node.
struct graph_state {
  device_id device = 0;
  std::vector<task*> nodes;
  std::vector<std::uint32_t> lanes;
  std::uint32_t lane_count = 1;
  std::vector<std::pair<std::uint8_t, std::uint32_t>> lane_modes;  // (priority, flags) the lanes' streams had
  std::vector<std::uint32_t> lane_streams;  // lanes 1...: the graph's own streams, made at its first launch
  std::vector<std::uint64_t> events;  // retained: a replayed record needs its event alive
  std::vector<std::uint64_t> last_ids;  // the task ids of the latest launch's clones, by node
  bool collectives = false;             // some node is a collective's (numbered at each launch)
  bool lost = false;                  // its device was reset: the nodes are gone
  std::vector<std::uint64_t> allocs;  // its allocations (graph_allocation), by address
  // Graphs with allocations: (stream, position) where each stream's share of its launches ends,
  // which its memory outlives when the graph is destroyed first.
  std::vector<std::pair<std::uint32_t, std::uint64_t>> in_flight;
  std::vector<std::uint64_t> groups;  // its task groups (task_group_state)
  std::vector<std::uint64_t> frees;   // other graphs' allocations each launch frees (free nodes)
  bool auto_free = false;             // graph_flags::auto_free_on_launch
  [[nodiscard]] bool has_memory() const noexcept { return !allocs.empty() || !frees.empty(); }
};

/// Why a task update refuses a pool allocation or free.
inline constexpr std::string_view task_update_memory =
    "a task update replaces a group's tasks, and cannot allocate or free graph memory";

/// A task group (aclmdlRICaptureTaskGrpBegin/End): nodes one stream of a capture captured
/// between the group's begin and end, which a task update replaces in place. Event records and
/// waits are the graph's structure, not tasks, and are no part of a group.
struct task_group_state {
  std::uint64_t graph = 0;                 // its graph: 0 while its capture is open
  const capture_state* capture = nullptr;  // its capture, while open
  std::uint32_t lane = 0;                  // the capture's stream it marks
  std::vector<std::size_t> nodes;          // its nodes' indices in the graph
};

/// Memory a capture allocated: mem_pool::malloc_async on a capturing stream, cudaMallocAsync
/// captured as an allocation node. As CUDA's graph allocations, its address is fixed for the
/// graph's life and every launch hands out the same memory. A free on a stream of the same
/// capture (a free node) ends it at the end of each launch, and nothing else may free it;
/// without one the launch leaves it allocated, for work after the graph, until the program frees
/// it outside a capture (mem_pool::free_async, device::free), and the graph may not be launched
/// again before then. The address stays reserved (live in the memory registry) from the capture
/// to the graph's destruction and the end of its launched work, or to the program's free of an
/// allocation left outstanding by a graph destroyed since.
struct graph_allocation {
  std::uint64_t graph = 0;                 // its graph: 0 while the capture is open or once the graph is gone
  const capture_state* capture = nullptr;  // its capture, while open
  device_id device = 0;
  std::size_t bytes = 0;
  bool freed_in_graph = false;  // a free node of its own capture ends it
  bool outstanding = false;     // a launch allocated it, and nobody has freed it since
  bool launched = false;        // some launch allocated it
};

/// Whether an event wait is a pool's reuse wait (scheduler::enqueue_wait): it waits for neither
/// an event nor a task's event.
inline bool is_pool_wait(const task_side& x) noexcept { return x.event_id == 0 && x.record_task == 0; }

struct stream_state {
  std::uint32_t id = 0;
  device_id device = 0;
  std::uint8_t priority = 4;
  std::uint32_t flags = 0;
  task* head = nullptr;            // oldest not-yet-completed task
  task* tail = nullptr;
  bool head_started = false;
  bool wake_pending = false;       // a timer will start the head when its submit time comes
  bool destroyed = false;          // handle gone: free the state once drained
  bool invalidated = false;        // its device was reset: the handle no longer works
  bool stopped = false;            // stop_on_failure and a failure not yet read
  std::uint64_t enqueued = 0;      // seq of the last enqueued task
  std::uint64_t completed = 0;     // seq of the last completed task
  // When the task at position skip_at completes, the stream has reached skip_to: an abort
  // dropped the positions after it while the backend could not take it back (0: none).
  std::uint64_t skip_at = 0;
  std::uint64_t skip_to = 0;
  // Ranges of positions (from, to] a device reset or an abort dropped, oldest first: they
  // count as reached, but a wait on one fails with errc::operation_aborted rather than pass as
  // if its work had run.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> aborted;
  sim_time host_cursor{};          // host lane time of this stream's enqueues
  core_limits limits{};            // in force: its own where set, else its device's
  core_limits own_limits{};        // set on the stream itself (0: its device's)
  failure sticky;                  // first unread failure of fire-and-forget work
  running_task run;                // the head, once started (head_started)
  std::multimap<std::uint64_t, position_waiter> waiters;
  // (other stream, latest position) for each stream this one waits for in stream order: its event
  // waits without a time limit and the pool's own waits, by stream id. A pool block freed at or
  // before such a position may be reused here without another wait
  // (cudaMemPoolReuseFollowEventDependencies).
  std::vector<std::pair<std::uint32_t, std::uint64_t>> waits_for;
  boost::asio::strand<boost::asio::io_context::executor_type> strand;
  std::shared_ptr<capture_state> capture;  // set while the stream takes part in a capture
  std::uint32_t capture_lane = 0;          // its lane there
  // A graph's own lane stream: for each launch with nodes here, oldest first, its last position
  // here, the stream that launched it and the launch's last position there. Nobody synchronizes
  // a graph's lane, so its failures are reported on the launching stream too (record_failure).
  struct launch_mark {
    std::uint64_t upto = 0;
    std::uint32_t stream = 0;
    std::uint64_t at = 0;
  };
  std::vector<launch_mark> launched_by;

  explicit stream_state(boost::asio::io_context& ioc) : strand(boost::asio::make_strand(ioc)) {}
};

struct event_state {
  std::uint64_t id = 0;
  device_id device = 0;
  std::uint32_t refs = 0;         // handles alive
  bool wait_for_record = false;     // a stream wait before the first record holds until it
  std::vector<struct task*> unbound; // such waits, blocked until the first record
  std::uint64_t records = 0;        // how many times it was recorded
  std::uint32_t stream = 0;         // the latest record's stream position
  std::uint64_t seq = 0;
  std::uint64_t record_task = 0;
  bool has_time = false;            // the latest record completed
  sim_time time{};
  const capture_state* captured_in = nullptr;  // recorded by this open capture (the record runs at a launch)
};

/// What the loop owns and lends to the scheduler: the options, the backend, the host's
/// io_context, the clock, the memory registry, the observer, and the accounting of handlers
/// handed to the host side (the loop polls the io_context only when some were posted).
struct loop_parts {
  NPURT_DECL loop_parts(std::unique_ptr<npurt::backend> b, const system_options& opts);

  /// Posts a completion handler to its executor, and counts it so the loop knows to poll: the
  /// only way the runtime's side hands work to the host side.
  template <class Executor, class Handler>
  void post(const Executor& ex, Handler&& h) {
    ++posts_;
    boost::asio::post(ex, std::forward<Handler>(h));
  }

  system_options opts_;
  std::unique_ptr<npurt::backend> backend_;
  // Storage for the records of awaited operations whose handlers bring no allocator, and for the
  // handlers posted to the system's strands. Before the io_context, so that it outlives it: the
  // io_context destroys the handlers still posted when the system dies, and they give their
  // storage back here.
  block_recycler op_memory_;
  // One thread runs everything (determinism), so nothing here needs locks.
  boost::asio::io_context ioc_{BOOST_ASIO_CONCURRENCY_HINT_UNSAFE};
  timer_queue clock_;
  observer* trace_ = nullptr;  // the observers' fanout while any is attached
  memory_registry memory_;
  std::uint64_t posts_ = 0;  // handlers posted since the loop last polled
};

class scheduler {
 public:
  scheduler(const scheduler&) = delete;
  scheduler& operator=(const scheduler&) = delete;

  // --- streams ---
  NPURT_DECL std::uint32_t create_stream(device_id dev, int priority, std::uint32_t flags);
  NPURT_DECL void release_stream(std::uint32_t id) noexcept;  // handle destroyed: drain, then free
  [[nodiscard]] stream_state* find_stream(std::uint32_t id) noexcept {
    return id < streams_.size() ? streams_[id].get() : nullptr;
  }
  [[nodiscard]] NPURT_DECL bool stream_idle(std::uint32_t id) const noexcept;
  [[nodiscard]] NPURT_DECL bool position_reached(std::uint32_t stream, std::uint64_t seq) const noexcept;
  /// Whether a device reset dropped the task at this position instead of running it.
  [[nodiscard]] NPURT_DECL bool position_aborted(std::uint32_t stream, std::uint64_t seq) const noexcept;
  /// Calls w when the stream completes `seq` (at once, in the loop, if it already has).
  NPURT_DECL void wait_position(std::uint32_t stream, std::uint64_t seq, const position_waiter& w);
  /// The position of the stream's next enqueue minus one: where a synchronize waits.
  [[nodiscard]] NPURT_DECL std::uint64_t last_enqueued(std::uint32_t stream) const noexcept;

  // --- tasks ---
  NPURT_HOT_DECL task* new_task(stream_state& s, task_kind kind);
  /// The side record of a copy, event or callback task (made on first use).
  NPURT_DECL task_side& extra(task* t);
  /// Charges the host lane, stamps the task and appends it to its stream; returns its position
  /// (0: the stream captures, and the task became a node of its capture).
  NPURT_HOT_DECL std::uint64_t enqueue(stream_state& s, task* t);
  /// enqueue charging `overhead` to the host lane instead (a graph's nodes after the first).
  NPURT_HOT_DECL std::uint64_t enqueue(stream_state& s, task* t, picoseconds overhead);
  /// Enqueues on `stream` a wait for position `seq` of `target` (a pool's reuse fence), unless
  /// it is reached already.
  NPURT_DECL void enqueue_wait(std::uint32_t stream, std::uint32_t target, std::uint64_t seq, std::string_view name);
  /// `s` now waits, in stream order, for position `seq` of `target` (a wait that cannot time out).
  NPURT_DECL void note_wait(stream_state& s, std::uint32_t target, std::uint64_t seq);
  /// Whether `stream`'s work enqueued from now on runs after position `seq` of `target`: the same
  /// stream, or one of its waits (note_wait) is for that position or a later one.
  [[nodiscard]] NPURT_DECL bool stream_waits_for(std::uint32_t stream, std::uint32_t target,
                                                 std::uint64_t seq) const noexcept;
  NPURT_DECL void free_task(task* t) noexcept;
  /// system::host_free: pinned memory that queued copies still read or write is released when
  /// the last of them has completed (or was aborted), never while a copy may still touch it.
  NPURT_DECL void free_host(void* p, std::error_code& ec);
  /// A host callback's function, owned by the scheduler until free_task: one whose task is still
  /// posted when the system dies (the io_context drops the handler unrun) is freed with it.
  std::function<void()>* own_callback(std::function<void()> fn) {
    auto* f = new std::function<void()>(std::move(fn));
    callbacks_.insert(f);
    return f;
  }
  NPURT_DECL kernel_desc* new_kernel(const kernel_desc& k);
  /// A copy of `name` that lives as long as the runtime (task names outlive their callers'
  /// strings: traces read them after the run).
  // Forced inline: left to itself the compiler calls it, and the call costs more than the test.
  [[nodiscard, gnu::always_inline]] std::string_view intern(std::string_view name) {
    // Launch loops repeat one name: compare with the last one before hashing. Only this test is
    // inline at every launch site; longer or different names take the call.
    const std::size_t n = name.size();
    if (n == last_name_.size() && n >= 4 && n <= 16) [[likely]] {
      const char* a = name.data();
      const char* b = last_name_.data();
      // Two overlapping loads cover any length in range, without a memcmp call.
      if (n >= 8 ? load<std::uint64_t>(a) == load<std::uint64_t>(b) &&
                       load<std::uint64_t>(a + n - 8) == load<std::uint64_t>(b + n - 8)
                 : load<std::uint32_t>(a) == load<std::uint32_t>(b) &&
                       load<std::uint32_t>(a + n - 4) == load<std::uint32_t>(b + n - 4))
        return last_name_;
    }
    return intern_slow(name);
  }
  /// The backend finished `t` with outcome ec (backend_host::complete).
  NPURT_DECL void task_completed(task_info& t, std::error_code ec);

  // --- sticky errors ---
  /// Reads (and clears) the first unread failure of a stream's fire-and-forget work.
  NPURT_DECL failure take_stream_failure(std::uint32_t stream) noexcept;
  /// The stream's first unread failure without clearing it, or null.
  [[nodiscard]] NPURT_DECL const failure* peek_stream_failure(std::uint32_t stream) const noexcept;
  /// Reads (and clears) the description of the most recent task failure, fire-and-forget or
  /// awaited ("" when none since the last read): aclGetRecentErrMsg's text.
  NPURT_DECL std::string take_recent_error() noexcept;
  /// Makes `what` the recent error: a refusal no task reports (a pool allocation's), for code
  /// that hears it as an error_code alone.
  void note_recent_error(std::string what) noexcept { recent_error_ = std::move(what); }
  /// Reads (and clears) the first unread failure of any stream of a device.
  NPURT_DECL failure take_device_failure(device_id dev) noexcept;
  /// Clears the device's unread failure when it is errc::deadlock: a blocking synchronize that
  /// reports a deadlock has reported the failed waits that broke it, and a later failure must
  /// not find the slot taken.
  NPURT_DECL void read_device_deadlock(device_id dev) noexcept;
  /// aclrtResetDevice: every pending task of the device is dropped (its waiter completes with
  /// errc::operation_aborted), without waiting for it.
  NPURT_DECL void abort_device(device_id dev);
  /// aclrtStreamAbort: the stream's tasks not yet started are dropped, and its running task
  /// too when the backend can take it back (else it runs to its end); their waiters complete
  /// with errc::operation_aborted. The stream goes on with the work enqueued after.
  NPURT_DECL void abort_stream(stream_state& s);
  /// aclrtDeviceTaskAbort: abort_stream for every stream of the device that is not capturing,
  /// in stream order (a graph's own streams among them); drained streams whose handle is gone
  /// are freed.
  NPURT_DECL void abort_device_tasks(device_id dev);
  /// The stream's waiters on positions after `from`, which an abort dropped, hear
  /// errc::operation_aborted.
  NPURT_DECL void abort_waiters_after(stream_state& s, std::uint64_t from);
  /// The kept task of an abort completed: the stream reaches the positions dropped behind it.
  [[gnu::cold]] NPURT_DECL void end_skip(stream_state& s);
  /// Whether the stream has work it cannot drop (a running task the backend cannot take back).
  [[nodiscard]] bool abort_pending(const stream_state& s) const noexcept { return s.skip_at != 0; }

  // --- events ---
  NPURT_DECL std::uint64_t create_event(device_id dev, bool wait_for_record = false);
  /// stream::record: enqueues a record of `e` at the end of `s`, points the event at it, and
  /// lets waits made before the first record wait for it.
  void record_event(stream_state& s, event_state& e) { record_event(s, e, parts_.opts_.launch_overhead); }
  NPURT_DECL void record_event(stream_state& s, event_state& e, picoseconds overhead);
  /// Handle counting of user events: a user event dies with its last handle.
  NPURT_DECL void retain_event(std::uint64_t id) noexcept;
  NPURT_DECL void release_event(std::uint64_t id) noexcept;
  [[nodiscard]] NPURT_DECL event_state* find_event(std::uint64_t id) noexcept;

  // --- devices ---
  /// (stream, last enqueued seq) of every live stream of a device with pending work.
  [[nodiscard]] NPURT_DECL std::vector<std::pair<std::uint32_t, std::uint64_t>> device_positions(device_id dev) const;
  /// Device reset: streams and events of the device stop working (handles report invalid).
  NPURT_DECL void invalidate_device(device_id dev) noexcept;
  /// A communicator whose call numbers no longer line up (a call of it was dropped): its queued
  /// calls fail at once and later calls at the call, with `reason`.
  NPURT_DECL void break_communicator(collective_comm_state& comm, const std::string& reason);
  /// Whether the stream's device was reset while the stream existed: its task events then stand
  /// for work that may have been aborted, not completed.
  [[nodiscard]] bool stream_was_reset(std::uint32_t id) const noexcept {
    return !reset_streams_.empty() && reset_streams_.count(id) != 0;
  }

  // --- capture and graphs (aclmdlRICaptureBegin/End, aclmdlRIExecuteAsync) ---
  /// From now on the stream's enqueues become nodes of a graph instead of running.
  NPURT_DECL void begin_capture(stream_state& s, bool relaxed);
  /// A wait of `s` for `e`, recorded in an open capture: `s` joins that capture if it takes part
  /// in none, and the wait becomes a dependency between lanes (none within a lane). Refused
  /// (capture_unsupported, with words) for a stream of another device or of another capture.
  NPURT_DECL std::error_code capture_wait(stream_state& s, const event_state& e, std::string& why);
  /// Ends the origin's capture: the new graph's id, or 0 with the code (and words) that refuse
  /// it (a stream that joined: capture_unmatched, the capture goes on) or ended it (invalidated,
  /// a lane not joined back).
  /// `auto_free`: graph_flags::auto_free_on_launch.
  NPURT_DECL std::uint64_t end_capture(stream_state& s, bool auto_free, std::error_code& ec, std::string& why);
  /// A capture rule was broken: the capture goes on, and end_capture reports the first such error.
  NPURT_DECL void invalidate_capture(stream_state& s, std::error_code ec, std::string why);
  /// A capture of `dev`'s streams (any device: -1) that guards the system, not relaxed; or null.
  [[nodiscard]] NPURT_DECL stream_state* strict_capture(device_id dev) noexcept;
  [[nodiscard]] NPURT_DECL const graph_state* find_graph(std::uint64_t id) const noexcept;
  /// Enqueues a clone of every node of the graph: lane 0 on `s`, the other lanes on the graph's
  /// own streams, as one host call (the first node charged launch_overhead, the others
  /// graph_node_overhead). The last node's (position, task id) on `s`, or zeros for an empty
  /// graph or a capturing `s`, whose capture takes the clones. A collective node's clone takes
  /// its rank's next call numbers. ec (nothing enqueued, `why` says which node): a pinned host
  /// buffer of a copy node was freed; a collective node's communicator was aborted
  /// (operation_aborted); a graph of several lanes into a capture (capture_unsupported).
  NPURT_DECL std::pair<std::uint64_t, std::uint64_t> launch_graph(std::uint64_t id, stream_state& s,
                                                                  std::error_code& ec, std::string& why);
  NPURT_DECL void release_graph(std::uint64_t id) noexcept;
  /// Graph `id` takes the nodes and events of graph `from` in place of its own, when the two
  /// have the same shape (see stream_graph::update); `from` keeps none. Else graph_update_mismatch,
  /// `why` naming the first difference, and neither changes.
  NPURT_DECL void update_graph(std::uint64_t id, std::uint64_t from, std::error_code& ec, std::string& why);

  // --- task groups and task updates (aclmdlRICaptureTaskGrpBegin/End, TaskUpdateBegin/End) ---
  /// Opens a group on `s`'s lane of its capture. Refused (the capture goes on): no capture
  /// (stream_not_captured), a task update (stream_captured), a group open there already
  /// (invalid_argument).
  NPURT_DECL void begin_task_group(stream_state& s, std::error_code& ec, std::string& why);
  /// Ends the group open on `s`'s lane: its id, or 0 with the code (stream_not_captured,
  /// invalid_argument: none open).
  NPURT_DECL std::uint64_t end_task_group(stream_state& s, std::error_code& ec, std::string& why);
  [[nodiscard]] const task_group_state* find_task_group(std::uint64_t id) const noexcept {
    const auto it = task_groups_.find(id);
    return it == task_groups_.end() ? nullptr : &it->second;
  }
  /// Puts `s` in a task update of `group`: its enqueues become the update's nodes (a relaxed
  /// capture that no stream joins). Refused: `s` capturing (stream_captured), a group of a
  /// destroyed or lost graph (invalid_graph) or of an open capture (invalid_argument), of another
  /// device (stream_device_mismatch), of a graph with graph memory (graph_update_mismatch).
  NPURT_DECL void begin_task_update(stream_state& s, std::uint64_t group, std::error_code& ec, std::string& why);
  /// Ends `s`'s task update: its nodes replace the group's when they have its shape (count, and
  /// node by node as stream_graph::update checks), else graph_update_mismatch; an invalidated
  /// update is capture_invalidated. The update ends either way but for stream_not_captured (no
  /// update) and capture_unmatched (a capture, not an update).
  NPURT_DECL void end_task_update(stream_state& s, std::error_code& ec, std::string& why);

  // --- graph memory (cudaMallocAsync and cudaFreeAsync in a capture) ---
  /// Allocates `bytes` of `s`'s device for the capture `s` takes part in (see graph_allocation).
  /// Refused with the registry's code (zero_size, size_overflow, out_of_memory), which also
  /// invalidates the capture: its later work would have no memory to use.
  NPURT_DECL void* capture_malloc(stream_state& s, std::size_t bytes, std::error_code& ec, std::string& why);
  /// A free on the capturing `s`: a free node for an allocation of the same capture. Refused,
  /// invalidating the capture: memory the capture did not allocate (capture_unsupported), a
  /// second free (double_free). A null pointer is null_pointer, and leaves the capture alone.
  NPURT_DECL void capture_free(stream_state& s, void* p, std::error_code& ec, std::string& why);
  /// Whether `p` is the start of a graph allocation.
  [[nodiscard]] bool is_graph_allocation(const void* p) const noexcept {
    return !graph_memory_.empty() && graph_memory_.count(reinterpret_cast<std::uint64_t>(p)) != 0;
  }
  /// Frees the graph allocation `p` outside a capture, once `stream`'s work enqueued so far has
  /// run (stream 0: now, as device::free). Refused: an allocation of an open capture
  /// (capture_unsupported), one its graph frees itself (invalid_pointer), one no launch has
  /// allocated since it was last freed (double_free; invalid_pointer before the first launch).
  NPURT_DECL void free_graph_allocation(const void* p, std::uint32_t stream, std::error_code& ec, std::string& why);

  // --- core limits (aclrtSetDeviceResLimit, aclrtSetStreamResLimit) ---
  /// The device's limits: every stream of it without a limit of its own, now and later, takes them.
  NPURT_DECL void set_device_core_limits(device_id dev, core_limits l);
  [[nodiscard]] core_limits device_core_limits(device_id dev) const noexcept {
    return static_cast<std::size_t>(dev) < device_limits_.size() ? device_limits_[static_cast<std::size_t>(dev)]
                                                                 : core_limits{};
  }
  /// The stream's own limits (0: its device's), and so the ones in force.
  NPURT_DECL void set_stream_core_limits(stream_state& s, core_limits own) noexcept;

  // --- memory-value sync (aclrtValueWrite, aclrtValueWait) ---
  /// The 64-bit word at device address `p` of `dev` as stream work sees it, or nullopt when the
  /// memory is gone. Functional mode reads the memory; timing-only mode, whose memory holds no
  /// data, keeps the words value writes stored (0 where none did).
  [[nodiscard]] NPURT_DECL std::optional<std::uint64_t> read_word(device_id dev, const void* p);
  /// Where that word lives: the memory's bytes (functional mode) or the word kept for it
  /// (timing-only mode); both null when the memory is gone.
  struct word_ref {
    std::byte* bytes = nullptr;
    std::uint64_t* kept = nullptr;
  };
  [[nodiscard]] NPURT_DECL word_ref word_at(device_id dev, const void* p);

  // --- event-wait timeout (aclrtSetOpWaitTimeout) ---
  /// The limit of a user event wait enqueued from now on (0: none, the default).
  void set_event_wait_timeout(std::int64_t limit_ps) noexcept { event_wait_limit_ = limit_ps; }
  [[nodiscard]] std::int64_t event_wait_timeout() const noexcept { return event_wait_limit_; }

  /// Tasks in streams (a capture's or a graph's nodes are not: they wait for no one).
  [[nodiscard]] std::size_t live_tasks() const noexcept { return tasks_.live() - held_nodes_; }
  [[nodiscard]] std::uint64_t next_task_id() const noexcept { return next_task_id_; }

 protected:
  NPURT_DECL explicit scheduler(loop_parts& parts);
  NPURT_DECL virtual ~scheduler();

  /// A stream's head became a blocked event wait: the loop checks whether it closed a cycle.
  virtual void wait_blocked(stream_state& s) = 0;
  /// Fails a blocked wait at the head of `s` with `ec` (deadlock resolution), at this instant.
  NPURT_DECL void fail_blocked_wait(stream_state& s, std::error_code ec);
  /// The system is going away: whoever still waits hears errc::operation_aborted.
  NPURT_DECL void abort_all() noexcept;
  [[nodiscard]] const std::vector<std::unique_ptr<stream_state>>& streams() const noexcept { return streams_; }
  /// The devices' execution queues (the deadlock report names the task a queue holds a head behind).
  [[nodiscard]] const device_queue& queue() const noexcept { return queue_; }

 private:
  template <class Word>
  static Word load(const char* p) noexcept {
    Word w;
    std::memcpy(&w, p, sizeof w);
    return w;
  }
  [[nodiscard]] sim_time now() const noexcept { return parts_.clock_.now(); }
  NPURT_DECL std::string_view intern_slow(std::string_view name);
  NPURT_DECL void try_start(stream_state& s);
  /// enqueue's second half, once the host lane is charged: stamps the task, appends it.
  [[gnu::always_inline]] std::uint64_t append(stream_state& s, task* t) {
    t->submitted = s.host_cursor;
    const std::uint64_t seq = ++s.enqueued;
    if (s.tail) s.tail->next = t;
    else s.head = t;
    s.tail = t;
    queue_.on_enqueue(s.device, s.priority, t->id, s.id, (s.flags & device_queue::bypass_flags) != 0);
    if (s.head == t) try_start(s);
    return seq;
  }
  /// Appends `t` to its stream's open capture instead of the stream (see begin_capture).
  NPURT_DECL void capture_task(stream_state& s, task* t);
  /// A launch's copy of a collective node's calls, each with the next call number of its rank.
  NPURT_DECL static std::shared_ptr<const void> numbered(const collective_desc& node);
  /// Frees a capture's or a graph's nodes and lets go of its events.
  NPURT_DECL void drop_nodes(std::vector<task*>& nodes, std::vector<std::uint64_t>& events) noexcept;
  /// Ends a capture without a graph (its origin was destroyed, its device reset, the system is
  /// going): every stream leaves it, its nodes are freed.
  NPURT_DECL void abandon_capture(const std::shared_ptr<capture_state>& c) noexcept;
  /// Every stream of the capture leaves it, and its events are no longer recorded in it.
  NPURT_DECL void leave_capture(capture_state& c) noexcept;
  /// Gives the allocations of a capture that made no graph back to the device.
  NPURT_DECL void drop_allocations(std::vector<std::uint64_t>& allocs) noexcept;
  /// Gives a graph allocation's memory back to its device once every (stream, position) of
  /// `after` is reached, and forgets it.
  NPURT_DECL void release_graph_memory(std::uint64_t addr,
                                       const std::vector<std::pair<std::uint32_t, std::uint64_t>>& after) noexcept;
  /// A node captured after a free node: refused (invalidating the capture) if it touches that memory.
  NPURT_DECL void check_freed(capture_state& c, const task& t);
  NPURT_HOT_DECL task* clone_node(stream_state& s, const task& n);
  NPURT_DECL void start_task(stream_state& s, task* t);
  /// The stream's running_task for its head `t`, as it starts.
  NPURT_DECL void fill_running(stream_state& s, task* t);
  NPURT_DECL void finish_task(stream_state& s, task* t);
  NPURT_DECL void perform_copy(running_task& r);
  NPURT_DECL void record_failure(const running_task& r, std::error_code ec);
  /// An awaited task failed: its awaiter gets the exception the blocking form would raise, and
  /// the system's recent error message says what happened.
  NPURT_DECL void report_awaited_failure(const running_task& r, std::error_code ec, op_base& w);
  NPURT_DECL void detach_wait(task* t) noexcept;
  /// Starts a value write or wait (out of start_task's way: the launch path pays nothing for it).
  [[gnu::cold]] NPURT_DECL void start_value_task(stream_state& s, task* t);
  /// value_write: stores the word; value_wait: true when its condition holds. Either fails the
  /// task (run.error) when its memory is gone.
  NPURT_DECL bool run_value_task(stream_state& s, task* t);
  /// Fails `t`, the value task at the head of `s`, whose word was freed, with words that say so.
  NPURT_DECL void fail_value_task(stream_state& s, const task& t, std::string_view what);
  /// A task completed: the blocked value waits whose words now meet their conditions end, in the
  /// order they blocked. Cold: finish_task only tests whether any wait is blocked.
  [[gnu::cold]] NPURT_DECL void recheck_value_waits();
  /// A user event wait blocked with an event-wait timeout: its timer, taken back when the wait
  /// ends otherwise.
  NPURT_DECL void arm_wait_timer(task* t);
  NPURT_DECL void disarm_wait_timer(task* t) noexcept;
  NPURT_DECL void on_wait_timeout(std::uint64_t task_id);
  NPURT_DECL void wake_stream(std::uint64_t stream_id);
  NPURT_DECL void task_done_now(task* t);
  static NPURT_DECL void on_wait_satisfied(void* self, void* ctx, std::error_code ec);
  /// Runs `t`'s completion at this instant, through the due-now queue (long chains of
  /// completions must not recurse).
  void done_now(task* t) {
    parts_.clock_.call_at(parts_.clock_.now(), timer_action::member<&scheduler::task_done_now>(this, t));
  }

  loop_parts& parts_;
  std::uint64_t next_task_id_ = 1;
  std::unordered_set<std::string> names_;  // interned task names (node-based: views stay valid)
  std::string_view last_name_;
  std::vector<failure> device_failures_;  // by device
  std::string recent_error_;              // see take_recent_error
  // A destroyed stream's unread failure, with its device: its events still report it (stream ids
  // are not reused) until the device is reset.
  std::unordered_map<std::uint32_t, std::pair<device_id, failure>> released_failures_;
  std::unordered_set<std::uint32_t> reset_streams_;  // see stream_was_reset (ids are never reused)
  NPURT_DECL void free_stream(std::uint32_t id) noexcept;
  object_pool<task, 4096> tasks_;
  object_pool<task_side, 256> extras_;
  object_pool<kernel_desc, 256> kernels_;
  std::vector<std::unique_ptr<stream_state>> streams_;  // index = stream id; ids are never reused
  std::vector<std::unique_ptr<event_state>> events_;    // index = event id
  device_queue queue_;
  std::unordered_set<std::function<void()>*> callbacks_;  // see own_callback
  std::int64_t event_wait_limit_ = 0;
  struct wait_timer {
    task* t;
    std::uint64_t ticket;
  };
  std::unordered_map<std::uint64_t, wait_timer> wait_timers_;  // by task id
  std::vector<task*> value_waits_;  // blocked value waits, in the order they blocked
  std::vector<core_limits> device_limits_;  // by device (empty until a device limit is set)
  // Timing-only mode: the words value writes stored, by (device, address).
  std::map<std::pair<device_id, std::uint64_t>, std::uint64_t> value_words_;
  std::map<std::uint64_t, graph_state> graphs_;  // by id; ids are never reused
  std::uint64_t next_graph_ = 1;
  std::size_t held_nodes_ = 0;  // task records held as nodes by captures and graphs
  std::map<std::uint64_t, graph_allocation> graph_memory_;  // by address
  std::map<std::uint64_t, task_group_state> task_groups_;    // by id; ids are never reused
  std::uint64_t next_task_group_ = 1;
  /// Forgets the groups (a failed or abandoned capture's, a destroyed graph's).
  NPURT_DECL void drop_task_groups(std::vector<std::uint64_t>& ids) noexcept;
  /// launch_graph's checks of a graph with graph memory: true, with the code and words, when
  /// the launch is refused.
  NPURT_DECL bool graph_memory_refused(const graph_state& g, const stream_state& s, std::error_code& ec,
                                       std::string& why);
  /// After a launch of a graph with graph memory on `s`: its allocations handed out, the
  /// allocations it frees freed, and where the launch's work ends (which the memory outlives).
  NPURT_DECL void graph_memory_launched(graph_state& g, const stream_state& s);
};

}  // namespace npurt::detail

#if NPURT_INCLUDE_IMPL
#include <npurt/impl/scheduler.ipp>
#endif

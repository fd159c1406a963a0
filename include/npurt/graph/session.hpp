// npurt/graph/session.hpp — a session owns a device's streams and memory for graphs: it
// compiles a graph (order, schedule, activation memory, precision, fusion) and runs it.
//
//   npurt::session s{sys, {.device_id = 0, .precision = npurt::precision::fp32}};
//   npurt::graph g = s.make_graph("mlp");
//   auto x = g.add_input("x", {8, 64}, npurt::dtype::f32);
//   ...
//   auto c = s.compile(g, {.schedule = npurt::schedule::parallel, .memory_reuse = true});
//   npurt::run_result r = s.run(c, {{"x", x_tensor}});   // r.outputs, r.latency, r.ops
//
// compile():
//  - a topological order (stable: the order operators were added when that order is valid);
//  - precision: fp16 / bf16 cast every floating-point input and constant to the compute type
//    and the outputs back to fp32 (Cast operators are inserted); mixed casts only the inputs
//    of Conv, MatMul and Gemm (autocast's rule);
//  - optimization_level (the seed's enable_auto_schedule(level)): 0 as written; 1 adds
//    in-place operators where legal (an elementwise op writes over an input nothing else reads
//    later; Reshape, Flatten and Identity are views); 2 adds fusion (BatchNormalization folded
//    into the preceding Conv's weights and bias, a Relu after a Conv or after an elementwise op
//    applied in the same kernel); 3 also picks the parallel schedule when the graph has
//    independent branches;
//  - activation memory: one arena planned with the static planner (memplan.hpp) over the
//    operators' lifetimes when memory_reuse is on, every activation in its own place when off.
//    Under the parallel schedule, two activations that share memory are ordered by an event
//    from the last reader of the first to the writer of the second;
//  - the schedule: sequential (one stream), parallel (independent branches on up to
//    max_parallelism streams, joined by events), pipeline (run_batches() overlaps the stages of
//    consecutive batches on their own streams, with one arena per batch in flight).
//
// A graph whose constants all have data runs functionally (real results); a graph with a
// timing-only constant, or compiled with timing_only, runs timing-only (no data, simulated
// time only). Inputs are copied to the device and outputs back inside the measured run.
//
// Thread safety: a session is used from the thread that drives its system.
#pragma once

#include <npurt/collective.hpp>
#include <npurt/detail/async_op.hpp>
#include <npurt/graph/graph.hpp>
#include <npurt/graph/tensor.hpp>
#include <npurt/memory.hpp>
#include <npurt/recovery.hpp>
#include <npurt/system.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace npurt {

/// Precision modes (ACL's precision_mode): what the graph computes in.
enum class precision : std::uint8_t { fp32, fp16, bf16, mixed };
enum class schedule : std::uint8_t { sequential, parallel, pipeline };
[[nodiscard]] std::string_view to_string(precision p) noexcept;
[[nodiscard]] std::string_view to_string(schedule s) noexcept;

struct session_config {
  npurt::device_id device_id = 0;
  npurt::precision precision = precision::fp32;
  /// Per-operator timing in run results (the operators' kernels seen by an observer).
  bool profiling = true;
};

/// The seed's memory configuration. pool_size caps the session's device memory (0: the device's
/// capacity); auto_growth false makes the whole pool_size reserved when a graph is compiled.
struct memory_config {
  std::size_t pool_size = 0;
  bool reuse = true;
  bool auto_growth = true;
};

struct schedule_config {
  npurt::schedule strategy = schedule::sequential;
  int max_parallelism = 4;
  /// Pipeline stages (each on its own stream) for schedule::pipeline.
  int pipeline_stages = 2;
};

/// Outputs whose value is their all-reduce across the ranks of a communicator: for what the run
/// returns and for every operator that reads them (a training step's updates apply the reduced
/// gradients). Each is reduced in place once its writer has run, on a communication stream of
/// the session, and compile orders the operators that read reduced values after all others, so
/// the reduction of one gradient overlaps the rest of the backward pass, as the bucketed
/// all-reduce of PyTorch's DistributedDataParallel (Li et al., VLDB 2020) and Horovod do. Each
/// rank compiles the same graph with its own session (on a device of `comm`) and the same list.
struct output_all_reduce {
  npurt::communicator comm{};
  /// Graph outputs reduced in place, queued in this order on every rank; each must be written by
  /// an operator (not an input or a constant), hold memory of its own (not a view of another
  /// reduced output) and not be computed from another reduced output.
  std::vector<std::string> outputs{};
  npurt::reduce_op op = reduce_op::sum;
  /// The communication stream's priority (0 highest .. 7 lowest). High by default: a reduction
  /// queued behind the step's own kernels for the AI cores is a priority inversion that delays
  /// every rank (docs/runtime.md, bench/priority_inversion).
  int priority = npurt::priority::high;
};

/// Options of one compile; unset fields take the session's configuration.
struct compile_options {
  std::optional<npurt::schedule> schedule{};
  std::optional<bool> memory_reuse{};
  std::optional<int> optimization_level{};
  std::optional<int> max_parallelism{};
  std::optional<int> pipeline_stages{};
  /// Run without data even if every constant has it.
  bool timing_only = false;
  /// Outputs (by name) a run returns as device tensors on the session's device instead of host
  /// tensors: a gradient handed to a collective, or a value fed to the next run, without a round
  /// trip through the host. A name that is not an output of the graph is a graph_error
  /// (invalid_argument). Timing-only graphs return no data either way.
  std::vector<std::string> outputs_on_device{};
  /// Outputs all-reduced across ranks inside the run (not with schedule::pipeline).
  std::optional<output_all_reduce> all_reduce{};
  /// Runs launch the operators as one captured stream_graph (ONNX Runtime's enable_cuda_graph,
  /// torch_npu's NPU graphs): the first run captures them (its all-reduces too) and launches the
  /// graph, later runs launch it again, paying system_options::graph_node_overhead for each
  /// kernel after the first instead of launch_overhead. The copies in and out stay calls, so
  /// feeds and outputs are as without it, and outputs are bit for bit the same. With
  /// enable_overlap() each of the two slots has its graph, launched between the slot's copies on
  /// the io streams. Not with schedule::pipeline (not_supported at compile).
  bool capture_graph = false;
};

/// A tensor fed to a run, by input name. Made from a named tensor (an lvalue), a feed refers to
/// it: the tensor must outlive the feed's use. Made from a temporary (`{"x", tensor(...)}`,
/// `std::move(t)`), it keeps the tensor, shared by its copies: `std::vector<feed> in{{"x",
/// tensor(...)}}` stays valid after its statement, where a reference would dangle, and a device
/// tensor moved into a feed lives until the run that took it completes.
struct feed {
  feed(std::string n, const tensor& t) noexcept : name(std::move(n)), value(t) {}
  feed(std::string n, tensor&& t)
      : name(std::move(n)), owned_(std::make_shared<const tensor>(std::move(t))), value(*owned_) {}

  std::string name;

 private:
  std::shared_ptr<const tensor> owned_;  // before `value`, which may refer to it

 public:
  const tensor& value;
};

/// One operator of a run: when its kernels ran, relative to the run's start.
/// An all-reduce of compile_options::all_reduce appears as an operator named
/// "all_reduce(<output>)" of type "AllReduce", on stream index report().streams - 1.
struct op_timing {
  std::string name;
  std::string type;
  std::uint32_t stream = 0;  ///< index of the session stream it ran on
  picoseconds start{0};
  picoseconds end{0};
  picoseconds busy{0};  ///< sum of its kernels' durations
};

struct run_result {
  /// Host tensors (timing-only runs: no data), or device tensors of the session's device for the
  /// outputs compile_options::outputs_on_device names; the caller owns them either way.
  std::map<std::string, tensor> outputs;
  /// From the call (the host starting to queue the copies in, so the first copy's launch latency
  /// is included) to the completion of the run's last task (the last copy out).
  picoseconds latency{0};
  std::vector<op_timing> ops;             ///< in execution order of starts
  /// async_run: empty, or what failed, as the blocking run's exception says it, under async_run's name (the
  /// completion's error_code alone cannot name the feed or operator). A failed async_run also leaves these words in
  /// system::recent_error_message(), for tokens that drop the result (use_awaitable).
  std::string error;
};

struct batches_result {
  std::vector<std::map<std::string, tensor>> outputs;  ///< per batch
  picoseconds latency{0};                              ///< all batches
  double batches_per_second = 0;
  /// async_run_batches: empty, or what failed, as run_batches' exception says it (also left in
  /// system::recent_error_message()).
  std::string error;
};

/// What compile decided, for reports and tests.
struct compile_report {
  npurt::schedule schedule = schedule::sequential;
  int optimization_level = 1;
  bool memory_reuse = true;
  bool timing_only = false;
  bool overlap = false;            ///< inputs copied on their own stream into alternating slots
  std::size_t operators = 0;       ///< after fusion, including inserted casts
  std::size_t kernels = 0;         ///< kernels one run launches (its copies in and out not counted)
  std::size_t streams = 1;
  std::size_t fused = 0;           ///< operators removed by fusion
  std::size_t in_place = 0;        ///< operators writing over an input, plus views
  std::size_t casts_inserted = 0;
  std::size_t outputs_on_device = 0;  ///< outputs a run returns as device tensors
  std::size_t all_reduced = 0;        ///< outputs a run all-reduces across ranks
  bool graph = false;                 ///< compile_options::capture_graph: runs launch a captured graph
  std::uint64_t activation_bytes = 0;  ///< the arena
  std::uint64_t activation_no_reuse_bytes = 0;
  std::uint64_t activation_lower_bound = 0;  ///< peak live activation bytes
  std::uint64_t weight_bytes = 0;
  std::uint64_t io_bytes = 0;        ///< inputs and outputs on the device
  [[nodiscard]] std::uint64_t peak_bytes() const noexcept { return activation_bytes + weight_bytes + io_bytes; }
};

class session;

/// A compiled graph: cheap to move, bound to the session that compiled it.
class compiled_graph {
 public:
  struct impl;
  compiled_graph() = default;
  explicit compiled_graph(std::shared_ptr<impl> p) : p_(std::move(p)) {}
  [[nodiscard]] bool valid() const noexcept { return p_ != nullptr; }
  [[nodiscard]] const compile_report& report() const;
  /// Operator names in execution order with the stream each runs on.
  [[nodiscard]] std::vector<std::pair<std::string, std::uint32_t>> schedule_order() const;
  [[nodiscard]] impl& get() const { return *p_; }
  /// The compute stream a run ends on (its outputs are copied out there, or on the session's
  /// io_stream(1) when the graph was compiled with overlap). With compile_options::capture_graph
  /// it is the stream inputs are copied in on, which launches the graph (with overlap, the first
  /// compute stream launches it).
  [[nodiscard]] std::uint32_t final_stream() const;

 private:
  std::shared_ptr<impl> p_;
};

struct memory_usage_mb {
  double allocated_mb = 0;
  double reserved_mb = 0;
  double peak_mb = 0;
};

/// The configuration the optimizer settled on and what it measured.
struct optimizer_report {
  compile_options options;
  compile_report compiled;
  picoseconds latency_before{0}, latency_after{0};
  std::uint64_t peak_bytes_before = 0, peak_bytes_after = 0;
  double memory_efficiency = 0;   ///< activation lower bound / arena
  double compute_efficiency = 0;  ///< sum of operator busy time / (latency x streams)
};

class session {
 public:
  explicit session(npurt::system& sys, const session_config& cfg = {});
  ~session();
  session(const session&) = delete;
  session& operator=(const session&) = delete;

  [[nodiscard]] std::uint64_t id() const noexcept { return id_; }
  [[nodiscard]] const session_config& config() const noexcept { return cfg_; }
  [[nodiscard]] npurt::device& device() noexcept { return *dev_; }
  [[nodiscard]] npurt::system& system() noexcept { return *sys_; }
  /// How many compute streams, and how many pipeline stage streams, a session may have: the
  /// stream count of a device in CANN's C-model driver. stream(i) and stage_stream(i) with a
  /// larger index are invalid_argument, and so are a max_parallelism above it and
  /// pipeline_stages at or above it (a pipeline's copy-in stream takes one more) in
  /// set_schedule_config and compile: each stream made costs memory, so an index is never
  /// trusted blindly.
  static constexpr std::size_t max_streams = 1024;
  /// The session's compute streams (created on demand, up to the schedule's needs).
  [[nodiscard]] npurt::stream& stream(std::size_t i);
  /// The copy streams of overlapped runs: 0 copies inputs in, 1 copies outputs out. They submit
  /// directly (stream_flags::direct_submit), so under the default shared execution queue a copy
  /// waiting for its batch never holds another batch's operators, nor they it.
  [[nodiscard]] npurt::stream& io_stream(std::size_t i);
  /// The streams of pipelined runs, one per stage (and the copy-in stream). They submit directly
  /// too: under the shared execution queue a later stage of batch k, waiting for its producer,
  /// would otherwise hold batch k+1's first stage behind it, and the pipeline would run as a
  /// sequence.
  [[nodiscard]] npurt::stream& stage_stream(std::size_t i);
  /// The stream the all-reduces of compile_options::all_reduce run on, one per priority (0 ..
  /// 7; invalid_argument otherwise). It submits directly, as the copy streams do: under the
  /// shared execution queue a reduction waiting for its peers would otherwise hold the step's
  /// operators behind it.
  [[nodiscard]] npurt::stream& comm_stream(int priority = npurt::priority::high);
  /// Every stream the session owns (compute, copy and communication streams).
  [[nodiscard]] std::size_t stream_count() const noexcept { return streams_.size(); }

  [[nodiscard]] graph make_graph(std::string name) const { return graph(std::move(name)); }

  compiled_graph compile(graph& g, const compile_options& opts = {});
  /// Runs once (blocking: call outside system::run; inside it, as from another thread, compile,
  /// run and run_batches throw before they queue anything). Feeds must match the inputs' shapes
  /// and dtypes (graph_error naming the input otherwise).
  run_result run(const compiled_graph& c, const std::vector<feed>& inputs);
  /// Runs a stream of batches; under schedule::pipeline consecutive batches overlap. Every
  /// batch's feeds are checked before the first is queued. The first failure of any batch (an
  /// operator's, or an all-reduce's of compile_options::all_reduce) is thrown once every batch
  /// queued has ended.
  batches_result run_batches(const compiled_graph& c, const std::vector<std::vector<feed>>& batches);
  /// As run_batches, completing through `token` with void(async_error_code, batches_result).
  /// Every batch is queued at the call (for a deferred token, when it is launched): batches
  /// overlap as in run_batches with schedule::pipeline or enable_overlap(), and otherwise each
  /// batch's streams wait for the previous batch's end, as consecutive async_runs do. So every
  /// rank of a data-parallel loop (compile_options::all_reduce) can queue its batches before any
  /// of them waits, from one thread. Feeds are read as async_run reads them.
  template <class Token>
  auto async_run_batches(const compiled_graph& c, const std::vector<std::vector<feed>>& batches, Token&& token);
  /// Refits a constant of a compiled graph without compiling it again (TensorRT's IRefitter):
  /// `name` is a constant of the graph as the user built it, `value` a host tensor of its shape
  /// and dtype. The new value is derived as compile derived the old one (cast to the compute
  /// precision, Gemm's beta folded in) and copied into the graph's device copies, stream-ordered
  /// as a run is: runs of `c` queued before it read the old value, runs queued after it the new
  /// one. It does not block (the value is staged before it returns) and may be called inside
  /// system::run. Refused with nothing changed (graph_error naming the constant): not a constant
  /// of the compiled graph, or a device or timing-only value (invalid_argument), another shape
  /// (invalid_shape) or dtype (invalid_dtype), a graph compiled timing-only, a constant whose
  /// value compile folded into others (BatchNormalization folding at optimization_level 2 and
  /// above) or one that decides an output's shape (not_supported); a reset or lost device as
  /// every call of the session. See docs/graph.md.
  void set_constant(const compiled_graph& c, std::string_view name, const tensor& value);
  /// As set_constant; a refusal sets `ec` (its words in system::recent_error_message()).
  void set_constant(const compiled_graph& c, std::string_view name, const tensor& value, std::error_code& ec);
  /// As set_constant, completing through `token` with void(async_error_code) once the new value
  /// is on the device (a refusal: at once, with its code). `value` is read when the operation is
  /// initiated (at the call, or when a deferred operation is launched).
  template <class Token = detail::default_token>
  auto async_set_constant(const compiled_graph& c, std::string_view name, const tensor& value, Token&& token = {});
  /// As run, completing through `token` with void(async_error_code, run_result). Host feeds are
  /// read when the operation starts, at the call (for a deferred token such as
  /// boost::asio::deferred, when it is launched: the feeds' tensors must live until then), and
  /// copied, so they may go at once; a device tensor fed is read when the run's copy in runs, so
  /// it must live until the run completes. The run holds its compiled graph: `c` may be dropped
  /// or reassigned once the call returns.
  template <class Token>
  auto async_run(const compiled_graph& c, const std::vector<feed>& inputs, Token&& token);

  // --- the seed's knobs ---
  /// Throws caller_error (errc::invalid_argument) for a pool_size beyond the device's memory
  /// without auto_growth (it would all count as reserved), and keeps the configuration it had.
  void set_memory_config(const memory_config& m);
  void set_schedule_config(const schedule_config& s);
  [[nodiscard]] const memory_config& get_memory_config() const noexcept { return mem_; }
  [[nodiscard]] const schedule_config& get_schedule_config() const noexcept { return sched_; }
  /// Bytes the session holds on its device (weights, arenas, inputs and outputs), in MB:
  /// allocated and peak are what the session asked its pool for; reserved is what the pool
  /// took from the device (at least pool_size when auto_growth is off).
  [[nodiscard]] memory_usage_mb memory_usage() const noexcept;
  /// Forgets compiled graphs that are no longer referenced and returns the pool's cached
  /// memory (blocks nobody holds) to the device.
  void trigger_gc();
  /// The session's own stream-ordered caching pool (created on first use with the session's
  /// allocation strategy and pool_size): every device buffer of the session comes from it.
  [[nodiscard]] npurt::mem_pool& pool();
  /// optimization level 0-3 for later compiles (level 3 also chooses the schedule).
  void enable_auto_schedule(int level);
  void enable_memory_reuse(bool on = true) { mem_.reuse = on; }
  /// The pool's strategy (segmented: PyTorch-like segments; compact: one growable arena per
  /// stream). Takes effect at once when the session holds no device memory, otherwise the next
  /// time it holds none (the pool is rebuilt then).
  void set_allocation_strategy(allocation_strategy s);
  [[nodiscard]] allocation_strategy get_allocation_strategy() const noexcept { return alloc_; }
  /// Overlap copies with compute in run_batches: graphs compiled afterwards copy inputs in on a
  /// stream of their own into two alternating input and arena slots, so batch k+1's copy runs
  /// while batch k computes (at the cost of a second slot of activation and I/O memory).
  void enable_overlap(bool on = true) { overlap_ = on; }
  [[nodiscard]] bool overlap() const noexcept { return overlap_; }
  /// Size of the buffer reserved for collective communication (held, unused by a single device).
  /// A size that cannot be had throws (out_of_memory_error, size_overflow) and keeps the buffer
  /// held before.
  void set_comm_buffer_size(std::size_t bytes);
  [[nodiscard]] int optimization_level() const noexcept { return level_; }
  /// Applies every knob (reuse, level 3, overlap), compiles g before and after, runs both once
  /// and reports what it chose and measured.
  optimizer_report optimize(graph& g, const std::vector<feed>& inputs);

  // --- fault recovery (npurt/recovery.hpp) ---
  /// Throws caller_error (errc::invalid_argument) for a strategy recovery_strategy::validate
  /// refuses, and keeps the one it had.
  void set_recovery_strategy(const recovery_strategy& r) {
    std::string what;
    if (const std::error_code ec = r.validate(&what)) throw_error(ec, what);
    recovery_ = r;
  }
  [[nodiscard]] const recovery_strategy& get_recovery_strategy() const noexcept { return recovery_; }
  /// run() under the recovery strategy. A failed attempt's error takes the action the strategy
  /// gives its class; a retrying one reruns the graph whole (a run holds no state between runs)
  /// after backoff_for(attempt), gc_and_retry first calling trigger_gc() and retry_with_timeout
  /// running the next attempt under retry_timeout as the op-execute watchdog (the one in force
  /// before is put back after that attempt, whatever its outcome). At most max_retries retries
  /// per call, whichever errors they follow. The error is rethrown at once when the device is
  /// lost or the action does not retry: restart would reset the device and free the session's
  /// compiled graphs, so restart, failover, degrade and abort (a caller error's action too) are
  /// the caller's to carry out (a training loop with checkpoints resumes instead:
  /// npurt/models/dp_training.hpp). A run allocates nothing (compile took it all), so memory
  /// errors of compile are not covered (docs/faults.md). Every error met lands in
  /// recovered_errors() or unrecovered_errors().
  run_result run_with_recovery(const compiled_graph& c, const std::vector<feed>& inputs);
  /// The errors the session's run_with_recovery calls recovered from, oldest first: those of
  /// runs that a retry then completed.
  [[nodiscard]] const std::vector<std::error_code>& recovered_errors() const noexcept { return recovered_; }
  /// The errors of run_with_recovery calls that failed in the end, oldest first: the ones their
  /// retries did not get past and the one each rethrew. With recovered_errors(), every error the
  /// calls met.
  [[nodiscard]] const std::vector<std::error_code>& unrecovered_errors() const noexcept { return unrecovered_; }

  /// Internal bookkeeping of device memory the session holds (used by compiled graphs).
  void* acquire(std::size_t bytes);
  void give_back(void* p, std::size_t bytes) noexcept;

 private:
  struct pending_run;
  /// Host feeds are read before it returns (stream::memcpy stages pageable memory), so an
  /// asynchronous run need not keep them.
  std::shared_ptr<pending_run> start_run(const compiled_graph& c, const std::vector<feed>& inputs,
                                         std::string_view call);
  run_result finish_run(pending_run& p);
  /// Queues every batch (feeds read as start_run reads them). With `wait_each`, the blocking
  /// run_batches without overlap, waits for each batch before queueing the next.
  std::shared_ptr<pending_run> start_batches(const compiled_graph& c, const std::vector<std::vector<feed>>& batches,
                                             bool wait_each, std::string_view call);
  std::shared_ptr<pending_run> start_queued_batches(const compiled_graph& c,
                                                    const std::vector<std::vector<feed>>& batches,
                                                    std::string_view call) {
    return start_batches(c, batches, false, call);
  }
  batches_result finish_batches(pending_run& p);
  /// async_run's and async_run_batches' initiation: `start` queues the work with the feeds and
  /// the call's name `what` (throwing what the blocking call would) and `finish` makes the result once every stream of
  /// the run has reached its last task with no failure. The feeds live until the completion.
  template <class Result, class Handler, class Feeds>
  void initiate_run(Handler handler, compiled_graph cg, const char* what,
                    std::shared_ptr<pending_run> (session::*start)(const compiled_graph&, const Feeds&,
                                                                   std::string_view),
                    Result (session::*finish)(pending_run&), Feeds keep);
  /// An async call made on a thread that does not run the system: completes `handler` with
  /// errc::wrong_thread on its own executor (detail::refuse_foreign), touching nothing of the
  /// session or its system; `Result` is the completion's value (void: none). Out of line: only
  /// the refused call builds the words.
  template <class Result, class Handler>
  [[gnu::noinline]] void refuse_foreign(Handler&& handler, const char* call);
  void abandon_run(pending_run& p) noexcept;
  void drain() noexcept;
  void rebuild_pool_if_idle();
  /// Refuses a blocking call that could not wait for what it queues (inside system::run, or
  /// from a thread that does not drive the system) before it queues anything.
  void check_can_block(std::string_view what) const;
  /// Throws invalid_argument when the system is gone.
  void check_alive(std::string_view what) const;
  /// check_alive, then invalid_argument for an empty compiled graph or another session's.
  void check_compiled(const compiled_graph& cg, std::string_view call) const;
  /// acquire for the call `call` (whose name begins a refusal's words), counting `freeing` bytes
  /// of what the session holds as already given back against pool_size (a buffer replaced once
  /// its successor is had).
  void* acquire(std::size_t bytes, std::size_t freeing, std::string_view call);
  /// The stream a run of `c` ends on: its outputs are copied out there.
  npurt::stream& end_stream(const compiled_graph& c);
  /// Every stream a run of `c` queues work on, the stream it ends on last, each with the position
  /// of the last task queued on it.
  std::vector<std::pair<std::uint32_t, std::uint64_t>> run_positions(const compiled_graph& c);
  /// set_constant's work: the event of its last copy (invalid when there was none to queue).
  event refit(const compiled_graph& c, std::string_view name, const tensor& value, std::string_view call);
  /// The first failure of a run of `c`, as the blocking run raises it (naming the node whose
  /// kernel failed), or null; every failure of the run is read. Without `upto` it drains the
  /// run's streams (blocking); with the run's run_positions, reached, it reads the failures at or
  /// before them and leaves those of runs queued since (async_run's completion). With `run`, a
  /// failed all-reduce of compile_options::all_reduce names its output.
  std::exception_ptr take_run_failure(const compiled_graph& c, std::string_view what,
                                      const std::vector<std::pair<std::uint32_t, std::uint64_t>>* upto = nullptr,
                                      const pending_run* run = nullptr);

  npurt::system* sys_;
  npurt::device* dev_;
  // Null once the system is gone: every call then fails with invalid_argument instead of
  // reaching into it (sys_ and dev_ dangle).
  detail::runtime_ref rt_;
  session_config cfg_;
  std::uint64_t id_;
  std::vector<std::unique_ptr<npurt::stream>> streams_;  // every stream; [0] is stream(0)
  std::vector<std::size_t> compute_;  // stream(i) is streams_[compute_[i]]
  std::array<std::size_t, 2> io_{};  // io_stream(i); 0: not created yet
  std::vector<std::size_t> stage_;  // stage_stream(i) is streams_[stage_[i]]
  std::array<std::size_t, 8> comm_{};  // comm_stream(p); 0: not created yet
  memory_config mem_{};
  schedule_config sched_{};
  allocation_strategy alloc_ = allocation_strategy::segmented;
  int level_ = 1;
  bool overlap_ = false;
  std::size_t held_ = 0, peak_ = 0, reserved_extra_ = 0;
  void* comm_buffer_ = nullptr;
  std::size_t comm_bytes_ = 0;
  std::vector<std::weak_ptr<compiled_graph::impl>> compiled_;
  recovery_strategy recovery_{};
  // Expires with the session: an async_run still in flight when the session is destroyed inside
  // system::run (where its destructor cannot wait for it) completes without touching it.
  std::shared_ptr<const bool> alive_ = std::make_shared<const bool>(true);
  std::vector<std::error_code> recovered_, unrecovered_;
  std::unique_ptr<npurt::mem_pool> pool_;  // last member: destroyed before the streams it orders
};

// ---- async_run, async_run_batches ----

template <class Result, class Handler>
void session::refuse_foreign(Handler&& handler, const char* call) {
  if constexpr (std::is_void_v<Result>) {
    detail::refuse_foreign(&rt_->io(), std::forward<Handler>(handler), -1, call);
  } else {
    // A callback that reads the result rather than the code finds the words there, as with every
    // other refusal of a run.
    Result r;
    r.error = std::string(call) + ": " + make_error_code(errc::wrong_thread).message();
    detail::refuse_foreign(&rt_->io(), std::forward<Handler>(handler), -1, call, std::move(r));
  }
}

template <class Result, class Handler, class Feeds>
void session::initiate_run(Handler handler, compiled_graph cg, const char* what,
                           std::shared_ptr<pending_run> (session::*start)(const compiled_graph&, const Feeds&,
                                                                          std::string_view),
                           Result (session::*finish)(pending_run&), Feeds keep) {
  // Before anything is read or queued: the session's state and its system's loop are the loop
  // thread's.
  if (rt_ && rt_->wrong_thread()) [[unlikely]] {
    refuse_foreign<Result>(std::move(handler), what);
    return;
  }
  // An awaiter that rethrows (npurt::use_task) gets the exception the blocking call raises,
  // naming the feed or node and keeping a timeout's timer, not one rebuilt from the code.
  using detail::thrown_slot;
  std::exception_ptr* thrown = thrown_slot(handler);
  std::shared_ptr<pending_run> p;
  std::error_code ec;
  Result failed;
  try {
    p = (this->*start)(cg, keep, what);
  } catch (const error& e) {
    ec = e.code();
    failed.error = e.what();
    if (thrown) *thrown = std::current_exception();
  }
  if (ec) {
    // use_awaitable and plain handlers that throw on the code drop the result, so its words
    // are also the system's recent error message, as for any awaited failure (runtime.md).
    if (rt_) rt_->note_recent_error(failed.error);
    auto post_error = [&](const auto& ex) {
      boost::asio::post(ex, [h = std::move(handler), ec, r = std::move(failed)]() mutable {
        std::move(h)(async_error_code(ec), std::move(r));
      });
    };
    // Without its system, the handler's own executor (Asio's system executor if it has none).
    if (rt_) post_error(boost::asio::get_associated_executor(handler, sys_->get_executor()));
    else post_error(boost::asio::get_associated_executor(handler));
    return;
  }
  // Completes once every stream of the run has reached its last task, not only the stream
  // that copies the outputs out: a kernel that failed on another stream of a parallel
  // schedule is this run's failure (the event waits between streams do not pass it on), and
  // must not be left for a later run to report. The wait peeks at the end stream's failure
  // (upto != 0) and leaves it unread, so take_run_failure reads every failure with the task
  // it came from and names the node, as the blocking call does.
  const auto pos = run_positions(cg);
  detail::runtime& rt = *rt_;
  // The feeds ride along: a device tensor moved into one is read by the run until it ends.
  detail::cancellable_op* user = detail::make_op(
      rt, [this, h = std::move(handler), p, cg = std::move(cg), pos, keep = std::move(keep), thrown, what, finish,
           alive = std::weak_ptr<const bool>(alive_), rtp = &rt](async_error_code wait_ec) mutable {
        Result r;
        std::error_code ec;
        if (alive.expired()) {
          // Destroyed inside system::run, the session could not wait: its memory went back
          // under the run, whose results are gone with it (the device reports what failed).
          ec = make_error_code(errc::operation_aborted);
          r.error = std::string(what) + ": the session was destroyed before the run completed";
          rtp->note_recent_error(r.error);
          if (thrown) {
            try {
              throw_error(ec, r.error);
            } catch (...) { *thrown = std::current_exception(); }
          }
          std::move(h)(async_error_code(ec), std::move(r));
          return;
        }
        try {
          // Not reached: the wait itself failed (a deadlock broken by failing it).
          if (wait_ec && !rt_->position_reached(pos.back().first, pos.back().second)) throw_error(wait_ec, what);
          if (std::exception_ptr failed = take_run_failure(cg, what, &pos, p.get())) std::rethrow_exception(failed);
          r = (this->*finish)(*p);
        } catch (const error& e) {
          abandon_run(*p);
          ec = e.code();
          r = Result{};
          r.error = e.what();
          rt_->note_recent_error(r.error);
          if (thrown) *thrown = std::current_exception();
        }
        std::move(h)(async_error_code(ec), std::move(r));
      });
  detail::op_base* op = detail::sticky_op::create(rt, user, pos.back().first, dev_->id(), pos.back().second);
  detail::start_multi_wait(rt, op, pos, std::nullopt, user);
}

template <class Token>
auto session::async_run(const compiled_graph& c, const std::vector<feed>& inputs, Token&& token) {
  return boost::asio::async_initiate<Token, void(async_error_code, run_result)>(
      // The compiled graph is taken by value (a shared handle): the caller may drop or reassign
      // its own once the call returns, and a failed run still names the node from it.
      [this](auto handler, compiled_graph cg, std::vector<feed> in) {
        initiate_run<run_result>(std::move(handler), std::move(cg), "npurt::session::async_run", &session::start_run,
                                 &session::finish_run, std::move(in));
      },
      token, c, inputs);
}

template <class Token>
auto session::async_run_batches(const compiled_graph& c, const std::vector<std::vector<feed>>& batches, Token&& token) {
  return boost::asio::async_initiate<Token, void(async_error_code, batches_result)>(
      [this](auto handler, compiled_graph cg, std::vector<std::vector<feed>> in) {
        initiate_run<batches_result>(std::move(handler), std::move(cg), "npurt::session::async_run_batches",
                                     &session::start_queued_batches, &session::finish_batches, std::move(in));
      },
      token, c, batches);
}

// ---- async_set_constant ----

template <class Token>
auto session::async_set_constant(const compiled_graph& c, std::string_view name, const tensor& value, Token&& token) {
  return boost::asio::async_initiate<Token, void(async_error_code)>(
      [this](auto handler, compiled_graph cg, std::string n, std::reference_wrapper<const tensor> v) {
        if (rt_ && rt_->wrong_thread()) [[unlikely]] {
          refuse_foreign<void>(std::move(handler), "npurt::session::async_set_constant");
          return;
        }
        event done;
        try {
          done = refit(cg, n, v.get(), "npurt::session::async_set_constant");
        } catch (const error& e) {
          if (std::exception_ptr* thrown = detail::thrown_slot(handler)) *thrown = std::current_exception();
          const std::error_code ec = e.code();
          if (rt_) rt_->note_recent_error(e.what());
          auto post_error = [&](const auto& ex) {
            boost::asio::post(ex, [h = std::move(handler), ec]() mutable { std::move(h)(async_error_code(ec)); });
          };
          if (rt_) post_error(boost::asio::get_associated_executor(handler, sys_->get_executor()));
          else post_error(boost::asio::get_associated_executor(handler));
          return;
        }
        if (done.valid()) {
          done.async_wait(std::move(handler));
          return;
        }
        // Nothing to copy (the constant is empty, or no operator reads it on the device).
        auto ex = boost::asio::get_associated_executor(handler, sys_->get_executor());
        boost::asio::post(ex, [h = std::move(handler)]() mutable { std::move(h)(async_error_code()); });
      },
      token, c, std::string(name), std::cref(value));
}

/// Memory-saving opportunities of a graph, each with its estimated saving.
struct memory_suggestion {
  enum class kind : std::uint8_t { enable_reuse, in_place, lower_precision, recomputation };
  kind what = kind::enable_reuse;
  std::string description;
  double saving_mb = 0;
  /// The compile options (and session precision) that apply it.
  compile_options options;
  std::optional<npurt::precision> precision;
  /// Recomputation: the graph to compile instead (the recomputed operators cloned before their
  /// late readers). Its saving is measured against the original graph under the same
  /// `options` (reuse and fusion on), not against the baseline.
  std::shared_ptr<graph> rewritten{};
};

class graph_optimizer {
 public:
  explicit graph_optimizer(graph& g, npurt::precision p = precision::fp32) : g_(&g), precision_(p) {}
  /// Opportunities against the baseline (no reuse, level 0, the given precision), largest
  /// saving first; recomputation (when an activation is read again long after it was written,
  /// as in a training step) against the plan with reuse and fusion.
  [[nodiscard]] std::vector<memory_suggestion> memory_suggestions() const;

 private:
  graph* g_;
  npurt::precision precision_;
};

/// What compile would allocate, without a device (the planner run alone).
[[nodiscard]] compile_report plan_memory(graph& g, const compile_options& opts, npurt::precision p = precision::fp32);

}  // namespace npurt

// npurt/stream.hpp — streams: in-order queues of device work, and coroutine executors.
//
// A stream runs its tasks one after another. Every enqueue has a fire-and-forget form that
// returns an event (a plain record is queued; no coroutine is involved) and an async_ form that
// takes any Asio completion token (use_awaitable, deferred, a callback). Each stream is also an
// Asio strand: host callbacks run on it in stream order, and coroutines may be spawned on it.
//
// Errors: a bad call fails at once (nothing is enqueued). Work that fails later (a kernel whose
// memory was freed while it was queued, a host callback that throws) completes an awaiting
// caller with the error; fire-and-forget work records the first such failure on the stream and
// its device, and the next synchronize(), query() or async_synchronize() of the stream reports it
// (once: reporting reads it), as cudaStreamSynchronize and aclrtSynchronizeStream do.
//
// Thread safety: a stream belongs to its system's loop thread. Handles may be moved between
// threads while the system is idle; every call must come from the thread that runs the system
// (errc::wrong_thread when system_options::check_thread is set, always in debug builds).
#pragma once

#include <npurt/backend.hpp>
#include <npurt/config.hpp>
#include <npurt/detail/async_op.hpp>
#include <npurt/detail/launch_args.hpp>
#include <npurt/detail/runtime.hpp>
#include <npurt/error.hpp>
#include <npurt/event.hpp>
#include <npurt/kernel.hpp>
#include <npurt/time.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace npurt {

/// Stream priorities: 0 is the highest, 7 the lowest, as in CANN. Out-of-range values clamp.
namespace priority {
inline constexpr int high = 0;
inline constexpr int normal = 4;
inline constexpr int low = 7;
}  // namespace priority

/// Stream creation flags, after aclrtCreateStreamWithConfig; combine with |. fast_launch and
/// fast_sync change no timing today. overflow_edge (aclrtSetStreamOverFlowEdge) and
/// direct_submit (aclrtSubmitTaskWithStream) take the stream's tasks out of the device's shared
/// execution queue (detail/device_queue.hpp): they dispatch as soon as they are ready.
enum class stream_flags : std::uint32_t {
  none = 0,
  fast_launch = 0x1,
  fast_sync = 0x2,
  overflow_edge = 0x4,
  direct_submit = 0x8,
  /// Failure mode (aclrtSetStreamFailureMode): after a task fails, the stream's later tasks
  /// fail with errc::operation_aborted without running, until the failure is read (synchronize,
  /// query). Without it the stream continues on failure, the default.
  stop_on_failure = 0x10
};
constexpr stream_flags operator|(stream_flags a, stream_flags b) noexcept {
  return static_cast<stream_flags>(static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b));
}
constexpr stream_flags operator&(stream_flags a, stream_flags b) noexcept {
  return static_cast<stream_flags>(static_cast<std::uint32_t>(a) & static_cast<std::uint32_t>(b));
}
static_assert(detail::stop_on_failure_flag == static_cast<std::uint32_t>(stream_flags::stop_on_failure));
static_assert(detail::device_queue::bypass_flags ==
              static_cast<std::uint32_t>(stream_flags::overflow_edge | stream_flags::direct_submit));

struct stream_options {
  int priority = priority::normal;
  stream_flags flags = stream_flags::none;
};

/// How much of the system a stream capture guards while it is open (aclmdlRICaptureMode,
/// cudaStreamCaptureMode). Every mode refuses what cannot run on the capturing stream itself
/// (its synchronize and query, awaited calls on it).
enum class capture_mode : std::uint8_t {
  /// Also refuses a synchronize of the capturing stream's device, which would wait for work the
  /// capture holds back (errc::capture_unsupported). CANN's and CUDA's thread-local mode is this
  /// one here: a system's calls all come from one thread.
  global,
  /// Guards the capturing stream alone.
  relaxed,
};

/// How end_capture makes its graph (cudaGraphInstantiateWithFlags).
enum class graph_flags : std::uint32_t {
  none = 0,
  /// A launch frees what the graph's previous launch left allocated (graph memory without a
  /// free node), in the launching stream's order, where it would otherwise be refused: for a
  /// result the work after each launch reads and the program never frees
  /// (cudaGraphInstantiateFlagAutoFreeOnLaunch).
  auto_free_on_launch = 1,
};

/// Where a stream's capture stands (aclmdlRICaptureGetInfo, cudaStreamIsCapturing).
enum class capture_status : std::uint8_t {
  none,         // not capturing
  active,       // capturing
  invalidated,  // capturing, but an error ended it: end_capture reports the error
};

class stream;
class stream_graph;
class task_group;
class tensor;

namespace detail {
/// Why a capturing stream refuses an awaited call, and its synchronize or query.
inline constexpr std::string_view awaited_in_capture =
    "an awaited call completes when its work has run, which a capture defers to the graph's launch: enqueue it "
    "fire-and-forget, or await stream_graph::async_launch";
inline constexpr std::string_view sync_in_capture =
    "its captured work runs only when the graph is launched, so there is nothing to wait for or ask about until "
    "end_capture";
inline constexpr std::string_view abort_in_capture =
    "a capturing stream's work is the graph's nodes, which run only when the graph is launched: there is nothing "
    "to abort (end_capture, then abort the stream the graph runs on)";
inline constexpr std::string_view abort_in_report =
    "called from an observer's report, which the abort would pull the reported work from under: abort from a "
    "host callback, a coroutine or after run() returns";
inline constexpr std::string_view capture_dependency_words =
    "a captured wait may only wait for a record of a user event made earlier in the same capture, and this event's "
    "record (or a launch's event) is outside it";
inline constexpr std::string_view awaited_captured_event =
    "the event was recorded in an open capture, and its record runs only when the graph is launched: an awaited "
    "wait for it would never end (wait for it fire-and-forget to join the capture, or after a launch)";
inline constexpr std::string_view record_in_update =
    "a task update replaces a group's tasks, and a record would be a dependency of the graph, which an update "
    "cannot change";
inline constexpr std::string_view pageable_in_capture =
    "a copy from pageable host memory cannot be captured: a launch would need the bytes as they were at the call "
    "(copy from pinned memory, system::host_malloc, which a launch reads then)";

/// A copy's ends and rows: a plain copy is one row of `width` bytes (pitches = width).
struct copy_shape {
  void* dst = nullptr;
  std::size_t dst_max = 0;  // what dst may take of one row (the plain copy's destMax)
  std::size_t dst_pitch = 0;
  const void* src = nullptr;
  std::size_t src_pitch = 0;
  std::size_t width = 0;
  std::size_t height = 1;
  const char* call = "";  // the refusing call, for a capture's words
};

/// For npurt's own components: a blocking synchronize that hands back the failure it read, for
/// a caller that reports it in its own terms (a session names the graph node that failed).
struct stream_access {
  NPURT_DECL static void synchronize(stream& s, std::error_code& ec, failure* f);
  /// The stream's device for an exception to name, or -1 when the stream is gone.
  static std::int32_t device_or_none(const stream& s) noexcept;
};
}  // namespace detail

class stream {
 public:
  using executor_type = boost::asio::strand<boost::asio::io_context::executor_type>;
  using default_token = detail::default_token;

  /// A null handle: every call reports errc::invalid_stream (async ones through the handler's
  /// executor, never inside the call). A handle whose system was destroyed becomes one.
  stream() noexcept = default;
  stream(detail::runtime& rt, std::uint32_t id) noexcept : rt_(&rt), id_(id) {}
  stream(stream&& o) noexcept : rt_(std::exchange(o.rt_, nullptr)), id_(std::exchange(o.id_, 0)) {}
  NPURT_DECL stream& operator=(stream&& o) noexcept;
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
  /// Drains the stream: outside system::run the call blocks (in virtual time) until the stream
  /// is empty; inside it, the queued work still runs and the stream is freed afterwards.
  NPURT_DECL ~stream();

  [[nodiscard]] NPURT_DECL bool valid() const noexcept;
  [[nodiscard]] std::uint32_t id() const noexcept { return id_; }
  [[nodiscard]] NPURT_DECL device_id device() const;
  [[nodiscard]] NPURT_DECL int priority() const;
  [[nodiscard]] NPURT_DECL executor_type get_executor() const;

  // --- fire and forget: enqueue and return the task's event ---------------------------------
  NPURT_DECL event launch(const kernel_desc& k);
  NPURT_DECL event launch(const kernel_desc& k, std::error_code& ec);
  /// Launches a shared descriptor: the queued task references it rather than copying it (the
  /// launch path of models that launch one layer table on many devices). Same checks, same
  /// result and timeline as launching *k; a null pointer is errc::null_pointer.
  NPURT_DECL event launch(const shared_kernel& k);
  NPURT_DECL event launch(const shared_kernel& k, std::error_code& ec);
  /// Copies `count` bytes; `dst_max` is how much the destination holds (aclrtMemcpy's destMax):
  /// count > dst_max is errc::size_overflow, never a write out of bounds. A pageable host source
  /// is read at the call (staged, as cudaMemcpyAsync does), so it may be changed or freed as soon
  /// as this returns; a pageable host destination is written when the copy runs and must stay
  /// alive until it has completed. Pinned memory (system::host_malloc) is read and written when
  /// the copy runs, and kept allocated until then.
  NPURT_DECL event memcpy(void* dst, std::size_t dst_max, const void* src, std::size_t count,
                          memcpy_kind kind = memcpy_kind::default_kind);
  NPURT_DECL event memcpy(void* dst, std::size_t dst_max, const void* src, std::size_t count, memcpy_kind kind,
                          std::error_code& ec);
  /// A 2-D copy, as one task (cudaMemcpy2DAsync, aclrtMemcpy2dAsync): `height` rows of `width`
  /// bytes, row i from src + i * src_pitch to dst + i * dst_pitch, e.g. a tile of a row-major
  /// matrix, or a packed image into a padded one. Each end must hold its extent, pitch *
  /// (height - 1) + width bytes, as memcpy's must hold count; ends, kinds, staging of a pageable
  /// source (row by row, packed) and stream rules as memcpy. Refused: a row wider than either
  /// pitch (invalid_argument), a zero width or height (zero_size), an extent past its
  /// allocation or past a size_t (size_overflow). The modelled engine moves width * height bytes
  /// as one transfer: rows cost no more than a plain copy of the same bytes.
  NPURT_DECL event memcpy2d(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch, std::size_t width,
                            std::size_t height, memcpy_kind kind = memcpy_kind::default_kind);
  NPURT_DECL event memcpy2d(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch, std::size_t width,
                            std::size_t height, memcpy_kind kind, std::error_code& ec);
  NPURT_DECL event memset(void* dst, std::size_t dst_max, int value, std::size_t count);
  NPURT_DECL event memset(void* dst, std::size_t dst_max, int value, std::size_t count, std::error_code& ec);
  /// Records a user event of this stream's device at the current end of the stream. A handle is a
  /// shared reference to its event, and a record changes the event, not the handle: every copy
  /// sees it, so a temporary copy (a handle returned by value) records the event its other
  /// handles name, as cudaEventRecord(e, s) does with a copied cudaEvent_t. A temporary that is
  /// the event's last handle (s.record(dev.make_event())) is still recorded in stream order (an
  /// event_record task, in traces too), but nothing can wait for, query or time that record:
  /// the event is destroyed with the handle, as cudaEventDestroy on a recorded event is allowed.
  NPURT_DECL void record(const event& e);
  NPURT_DECL void record(const event& e, std::error_code& ec);
  /// Makes later work of this stream wait until `e` completes (aclrtStreamWaitEvent).
  NPURT_DECL void wait(const event& e);
  NPURT_DECL void wait(const event& e, std::error_code& ec);
  /// Runs fn on this stream's strand when the stream reaches it.
  NPURT_DECL event launch_callback(std::function<void()> fn);
  NPURT_DECL event launch_callback(std::function<void()> fn, std::error_code& ec);

  // --- core limits (aclrtSetStreamResLimit / aclrtGetStreamResLimit / aclrtResetStreamResLimit) --
  /// A kernel of this stream holds at most `cores` cores of `kind` (see device::set_core_limit),
  /// whatever its device's limit: kernels the stream starts from then on. errc::invalid_argument
  /// for 0 cores, more than the device has of that kind, or an unknown kind.
  NPURT_DECL void set_core_limit(core_kind kind, std::uint32_t cores);
  NPURT_DECL void set_core_limit(core_kind kind, std::uint32_t cores, std::error_code& ec);
  /// Back to the device's limits.
  NPURT_DECL void reset_core_limits();
  NPURT_DECL void reset_core_limits(std::error_code& ec);
  /// The limit of `kind` in force: the stream's own, else its device's, else the device's core
  /// count of that kind.
  [[nodiscard]] NPURT_DECL std::uint32_t core_limit(core_kind kind) const;

  // --- memory-value sync (aclrtValueWrite / aclrtValueWait, cuStreamWriteValue64 / WaitValue64) --
  // Control tasks of the stream's own scheduler, as event records and waits are: they take no
  // engine time. The word is 8 bytes at an 8-byte aligned address in live device memory of any
  // device of the system. Refused: a null address (errc::null_pointer), memory npurt did not
  // allocate or that is freed (errc::invalid_pointer), a misaligned address or an unknown
  // condition (errc::invalid_argument), a word that runs past the bytes its allocation asked
  // for (errc::size_overflow), a lost device (errc::device_lost). Captured as nodes, whose
  // address, value and condition a task update or stream_graph::update may change.
  /// Stores `value` in the 64-bit word at `dst` when the stream reaches it; its event completes
  /// then. Memory freed before the write runs fails it (errc::invalid_pointer).
  NPURT_DECL event write_value(void* dst, std::uint64_t value);
  NPURT_DECL event write_value(void* dst, std::uint64_t value, std::error_code& ec);
  /// Holds the stream's later work until the 64-bit word at `addr` meets `cond` against `value`
  /// (see wait_condition). The word is read when the wait reaches the head of the stream and
  /// again whenever a task of the system completes (a write to it is stream work: a value write,
  /// a copy, a memset, a kernel, a collective). A wait that no work can end any more fails with
  /// errc::deadlock when nothing else can run; the event-wait timeout (set_event_wait_timeout)
  /// bounds it as it bounds an event wait (errc::event_wait_timeout); memory freed meanwhile
  /// fails it (errc::invalid_pointer). In timing-only mode, whose memory holds no data, the word
  /// is the last value a value write stored there (0 before any).
  NPURT_DECL void wait_value(const void* addr, std::uint64_t value, wait_condition cond = wait_condition::geq);
  NPURT_DECL void wait_value(const void* addr, std::uint64_t value, wait_condition cond, std::error_code& ec);

  // --- capture (aclmdlRICaptureBegin/End, cudaStreamBeginCapture/EndCapture) -----------------
  /// From now on the stream's fire-and-forget work (launches, copies from device or pinned
  /// memory, memsets, records of user events, callbacks, waits for events recorded in the
  /// capture) is recorded instead of run, until end_capture() makes it a stream_graph. Another
  /// stream of the device joins the capture by waiting for an event recorded in it, and must be
  /// waited for again before end_capture (errc::capture_unjoined)
  /// (<npurt/stream_graph.hpp>) to launch as often as needed. A captured call returns a null
  /// event: its work has no place in a stream until a launch. Refused while capturing, and
  /// invalidating the capture (end_capture then fails with the reason): an awaited call, the
  /// stream's synchronize or query (errc::stream_captured), a wait for work outside the capture
  /// (errc::capture_dependency), a copy from pageable host memory, a pool allocation or free on
  /// the stream, and with capture_mode::global a synchronize of the stream's device
  /// (errc::capture_unsupported). Collectives and groups of them are captured as nodes that take
  /// their call numbers at each launch (see stream_graph::launch). A call refused for its arguments is not
  /// recorded and leaves the capture as it was. errc::stream_captured when already capturing.
  NPURT_DECL void begin_capture(capture_mode mode = capture_mode::global);
  NPURT_DECL void begin_capture(capture_mode mode, std::error_code& ec);
  /// Ends the capture and returns its graph (empty when nothing was captured);
  /// errc::stream_not_captured when the stream is not capturing, errc::capture_unmatched when it
  /// joined a capture another stream began (which goes on), else ended either way: with
  /// errc::capture_invalidated (the words of the call that broke it in the exception and
  /// recent_error_message) or errc::capture_unjoined.
  NPURT_DECL stream_graph end_capture();
  NPURT_DECL stream_graph end_capture(std::error_code& ec);
  /// end_capture(), the graph made as `flags` say.
  NPURT_DECL stream_graph end_capture(graph_flags flags);
  NPURT_DECL stream_graph end_capture(graph_flags flags, std::error_code& ec);
  [[nodiscard]] NPURT_DECL capture_status capture_info() const;

  // --- task groups and task updates (aclmdlRICaptureTaskGrpBegin/End, TaskUpdateBegin/End) ----
  // Defined with stream_graph (<npurt/stream_graph.hpp>), whose tasks they mark and change.
  /// Marks the start of a task group on this capturing stream: the kernels, copies, memsets,
  /// value writes and waits, callbacks and collectives it captures until end_task_group() are
  /// the group's, which a task
  /// update can later replace in the graph without capturing it again. Event records and waits
  /// are the graph's dependencies and no part of a group. Refused, leaving the capture as it
  /// was: no capture (errc::stream_not_captured), a task update (errc::stream_captured), a group
  /// open on the stream already (errc::invalid_argument).
  NPURT_DECL void begin_task_group();
  NPURT_DECL void begin_task_group(std::error_code& ec);
  /// Ends the stream's open group and returns it (a group the capture's end finds open is
  /// dropped). errc::stream_not_captured without a capture, errc::invalid_argument without an
  /// open group.
  NPURT_DECL task_group end_task_group();
  NPURT_DECL task_group end_task_group(std::error_code& ec);
  /// Starts an update of `g` on this stream, which must not be capturing: its fire-and-forget
  /// work until end_task_update() is recorded, not run, as a capture's is, and replaces the
  /// group's tasks there. The update enqueues as many tasks as the group holds, of the same
  /// kinds in the same order, each of the shape stream_graph::update asks of a node (a copy
  /// between the same memories, a collective call of the same communicator and counts); a
  /// kernel, a copy's pointers and size, a memset's value, a value write's or wait's word, value
  /// and condition, and a callback may change. A record
  /// of an event or a pool allocation in an update is refused (errc::capture_unsupported) and
  /// fails the update; so does what fails a capture (an awaited call, a wait for work outside
  /// it). Refused: a capturing stream (errc::stream_captured), a null group or one whose graph is
  /// gone or lost (errc::invalid_graph), a group whose capture is still open
  /// (errc::invalid_argument), of another device (errc::stream_device_mismatch), of a graph with
  /// graph memory (errc::graph_update_mismatch).
  NPURT_DECL void begin_task_update(const task_group& g);
  NPURT_DECL void begin_task_update(const task_group& g, std::error_code& ec);
  /// Ends the update: launches of the graph from now on run the new tasks, launches made before
  /// run the old ones. The update ends either way, leaving the group as it was when it fails:
  /// errc::graph_update_mismatch (another count, kind or shape, naming the first task that
  /// differs), errc::capture_invalidated (a refused call ended it), errc::invalid_graph (the
  /// graph was destroyed meanwhile). errc::stream_not_captured when no update is open, and
  /// errc::capture_unmatched when a capture is (end it with end_capture; end_capture likewise
  /// refuses an update).
  NPURT_DECL void end_task_update();
  NPURT_DECL void end_task_update(std::error_code& ec);

  // --- asynchronous: complete through an Asio completion token --------------------------------
  template <class Token = default_token>
  auto async_launch(const kernel_desc& k, Token&& token = {});
  template <class Token = default_token>
  auto async_memcpy(void* dst, std::size_t dst_max, const void* src, std::size_t count, memcpy_kind kind,
                    Token&& token = {});
  /// memcpy2d, completing when the rows are copied.
  template <class Token = default_token>
  auto async_memcpy2d(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch, std::size_t width,
                      std::size_t height, memcpy_kind kind, Token&& token = {});
  template <class Token = default_token>
  auto async_memset(void* dst, std::size_t dst_max, int value, std::size_t count, Token&& token = {});
  /// Enqueues a wait on `e` and completes when the stream has passed it.
  template <class Token = default_token>
  auto async_wait(const event& e, Token&& token = {});
  template <class Token = default_token>
  auto async_callback(std::function<void()> fn, Token&& token = {});
  /// write_value, completing when the word is written.
  template <class Token = default_token>
  auto async_write_value(void* dst, std::uint64_t value, Token&& token = {});
  /// wait_value, completing when the stream has passed the wait.
  template <class Token = default_token>
  auto async_wait_value(const void* addr, std::uint64_t value, wait_condition cond, Token&& token = {});
  /// Completes when everything enqueued so far has finished, with the stream's first unread
  /// failure if its fire-and-forget work failed; with a timeout, completes with
  /// errc::wait_timeout if it passes first (aclrtSynchronizeStreamWithTimeout).
  template <class Token = default_token>
    requires(!std::is_convertible_v<Token, std::optional<picoseconds>>)
  auto async_synchronize(Token&& token = {});
  template <class Token = default_token>
  auto async_synchronize(std::optional<picoseconds> timeout, Token&& token = {});

  // --- host side ------------------------------------------------------------------------------
  /// True when every enqueued task has completed (aclrtStreamQuery). Throws (and so reads) the
  /// stream's first unread failure.
  [[nodiscard]] NPURT_DECL bool query() const;
  NPURT_DECL bool query(std::error_code& ec) const noexcept;
  /// Blocking waits, for code outside system::run (they drive the simulation). When they return,
  /// the completion handlers of the work they waited for have run. They report (and read) the
  /// stream's first unread failure: the throwing form rethrows what a host callback threw, or
  /// raises the error class's exception naming the task that failed. A wait that ends (this and
  /// async_synchronize) trims the device's pool to its release threshold, as CUDA's does.
  NPURT_DECL void synchronize(std::optional<picoseconds> timeout = no_timeout);
  NPURT_DECL void synchronize(std::optional<picoseconds> timeout, std::error_code& ec);
  /// synchronize(no_timeout, ec): the error_code form without a timeout.
  void synchronize(std::error_code& ec) { synchronize(no_timeout, ec); }

  /// aclrtStreamAbort: drops the stream's work not yet done, without waiting for it, and the
  /// stream goes on with what is enqueued after. Queued tasks never run; the running one stops
  /// at this instant when the backend can take it back (the simulator stops kernels, copies and
  /// memsets; a collective, whose peers hold their parts, runs to its end, and its
  /// communicator is broken when a later call of it was dropped). Dropped work completes its
  /// awaiting callers with errc::operation_aborted, and so do events recorded there and waits
  /// on them (other streams' waits fail); it is no failure of the stream, which keeps the
  /// failures read or unread before the call. Refused: errc::invalid_stream, errc::wrong_thread,
  /// errc::stream_captured on a capturing stream (the capture is invalidated), and
  /// errc::not_supported from an observer's report (as device::reset).
  NPURT_DECL void abort();
  NPURT_DECL void abort(std::error_code& ec);

 private:
  friend struct detail::stream_access;
  friend class communicator;  // checks that a stream belongs to the communicator's system
  friend class device;        // its blocking memcpy needs no staging
  friend class tensor;        // its async copy is refused under its own name (async_memcpy_as)
  friend class stream_graph;  // launches into a stream

  NPURT_DECL void release() noexcept;
  NPURT_DECL stream_graph end_capture(graph_flags flags, std::error_code& ec, std::string& words);
  NPURT_DECL void synchronize(std::optional<picoseconds> timeout, std::error_code& ec, detail::failure* f);
  NPURT_DECL detail::stream_state* state(std::error_code& ec) const noexcept;
  // The stream's device for an exception to name, or -1 when the stream is gone.
  NPURT_DECL std::int32_t device_or_none() const noexcept;
  /// The task of a kernels::fixed launch when nothing about it can fail (a live stream on its
  /// own thread, a block_dim the backend accepts); null otherwise: the general path reports why.
  NPURT_HOT_DECL detail::task* live_fixed_launch(const kernel_desc& k);
  NPURT_DECL detail::task* make_launch(const kernel_desc& k, std::error_code& ec, std::string* what = nullptr);
  /// make_launch for a descriptor the task may reference (`shared`, when set, owns `k`).
  NPURT_DECL detail::task* make_launch(const kernel_desc& k, const shared_kernel* shared, std::error_code& ec,
                                       std::string* what);
  NPURT_HOT_DECL detail::task* make_launch(const detail::launch_args& a, std::error_code& ec,
                                           std::string* what = nullptr);
  NPURT_DECL detail::task* make_fixed_launch(const kernels::fixed& f, std::string_view name, std::uint32_t block_dim,
                                             std::error_code& ec, std::string* what = nullptr);
  /// The stream a kernels::fixed launch goes to, or null with the code (and, given `what`, the
  /// words) that refuse it: a negative duration, a block_dim the backend rejects.
  NPURT_DECL detail::stream_state* fixed_stream(const kernels::fixed& f, std::uint32_t block_dim, std::error_code& ec,
                                                std::string* what);
  /// Whether the backend reports `dev` lost (a fatal error, until reset).
  [[nodiscard]] NPURT_DECL bool lost(device_id dev) const noexcept;
  /// stage: a pageable host source is copied at the call (see memcpy); device::memcpy, which
  /// blocks until the copy is done, reads it in place.
  NPURT_DECL detail::task* make_copy(void* dst, std::size_t dst_max, const void* src, std::size_t count,
                                     memcpy_kind kind, std::error_code& ec, bool stage = true);
  /// make_copy for any shape; `what` gets the words of a refusal of the shape itself.
  NPURT_DECL detail::task* make_copy(const detail::copy_shape& c, memcpy_kind kind, std::error_code& ec, bool stage,
                                     std::string* what);
  /// memcpy2d's copy_shape.
  static detail::copy_shape shape_2d(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                                     std::size_t width, std::size_t height) noexcept {
    return {dst, ~std::size_t{0}, dst_pitch, src, src_pitch, width, height, "npurt::stream::memcpy2d"};
  }
  NPURT_DECL detail::task* make_memset(void* dst, std::size_t dst_max, int value, std::size_t count,
                                       std::error_code& ec);
  NPURT_DECL detail::task* make_wait(const event& e, std::error_code& ec);
  /// Whether `e`'s latest record is a node of an open capture.
  [[nodiscard]] NPURT_DECL bool recorded_in_capture(const event& e) const noexcept;
  /// What is wrong with a copy's or memset's pointer when `ec` says one is not live device
  /// memory (which one, and why: freed, of another system, ...); empty for other codes.
  [[nodiscard]] NPURT_DECL std::string pointer_problem(std::error_code ec, const void* dst, const void* src) const;
  /// What a throwing form raises for a refusal: `call`, then `why` or, for errc::invalid_stream,
  /// which way this handle stopped naming a stream (null, destroyed, its device reset).
  [[nodiscard]] NPURT_DECL std::string refusal(std::string_view call, std::error_code ec, std::string_view why) const;
  /// What is wrong with the event of a failed record or wait (`ec`), in words for the throwing
  /// forms: the code alone says "invalid or destroyed event" whether the handle is null, a
  /// launch's event, of another system or gone. Empty when the failure is not the event's.
  [[nodiscard]] NPURT_DECL std::string event_problem(const event& e, std::error_code ec, bool record) const;
  /// An error_code form's refusal: the words its throwing form raises go to the system's
  /// recent_error_message (aclGetRecentErrMsg), as an async form's do. Only on the refusal path.
  NPURT_DECL void note_refusal(std::string_view call, std::error_code ec, std::string_view why) const;
  /// The four task-group calls, which share task_group_call.
  enum class group_op : std::uint8_t { begin_group, end_group, begin_update, end_update };
  /// The work of a task-group call (`g`: begin_update's group): the group a successful
  /// end_group ended, or 0; a refusal's code in `ec` and its words in `words`.
  NPURT_DECL std::uint64_t task_group_call(group_op op, const task_group* g, std::error_code& ec, std::string& words);
  /// record(e, ec) without the words of a refusal (the throwing form builds its own).
  NPURT_DECL void record_event(const event& e, std::error_code& ec);
  NPURT_DECL detail::task* make_callback(std::function<void()> fn, std::error_code& ec);
  /// set_core_limit's work; `why` says what is wrong with a refused limit.
  NPURT_DECL void set_core_limit(core_kind kind, std::uint32_t cores, std::error_code& ec, std::string& why);
  /// The task of a value write (`kind` value_write) or wait, or null with the code and words.
  NPURT_DECL detail::task* make_value_task(task_kind kind, const void* addr, std::uint64_t value, wait_condition cond,
                                           std::error_code& ec, std::string& why);
  /// Enqueues a prepared task and returns its event.
  NPURT_DECL event submit(detail::task* t);
  /// Enqueues a prepared task whose completion a handler awaits: no event handle is made (each
  /// one joins and leaves the system's handle list).
  NPURT_HOT_DECL void submit_awaited(detail::task* t);

  /// The common shape of every async_ enqueue: prepare (errors complete at once, nothing is
  /// enqueued, and the words of the throwing form go with them), attach the handler, enqueue.
  /// `make(s, ec, why)` prepares the task, or returns null with the code and, in `why`, the
  /// words the throwing form adds; `call` names the async_ function. `foreign`: the call was
  /// made on a thread that does not run the system, which built `make` without touching it (no
  /// interned name, no handle copied); it is refused wherever it is initiated.
  template <class Token, class Make>
  auto async_enqueue(Token&& token, const char* call, Make make, bool foreign = false);
  /// async_memcpy for another async_ function `call` that checked its own arguments first: a
  /// `refused` code completes with it and the words `why`, as the throwing form of `call` says.
  template <class Token>
  auto async_memcpy_as(const char* call, std::error_code refused, std::string why, void* dst, std::size_t dst_max,
                       const void* src, std::size_t count, memcpy_kind kind, Token&& token);
  /// Whether a call now comes from a thread that does not run this stream's system.
  [[nodiscard]] bool foreign_thread() const noexcept { return rt_ && rt_->wrong_thread(); }
  /// async_enqueue's refusal: the words its preparation left in the runtime's refusal_words go
  /// to the handler (see detail::post_refusal). Out of line, so that the accepted path, which
  /// every awaited launch takes, stays small enough to inline into the await.
  template <class Handler>
  [[gnu::noinline]] void refuse_enqueue(Handler&& handler, std::error_code ec, const char* call);
  /// async_synchronize's refusal at the call (a gone stream, a negative timeout), with the words
  /// of the throwing synchronize. Out of line, as refuse_enqueue.
  template <class Handler>
  [[gnu::noinline]] void refuse_synchronize(Handler&& handler, std::error_code ec, std::optional<picoseconds> timeout);
  /// A call that cannot run on a capturing stream: invalidates the capture (its reason is these
  /// words) and returns them, for the caller's refusal.
  NPURT_DECL std::string refuse_in_capture(detail::stream_state& s, std::string_view call, std::error_code ec,
                                           std::string_view why);
  /// An async_ call on a capturing stream: refused through the handler (see refuse_in_capture).
  template <class Handler>
  [[gnu::noinline]] void refuse_captured(Handler&& handler, detail::stream_state& s, const char* call,
                                         std::string_view why);

  detail::runtime_ref rt_;  // null once the system is gone: the handle then is a null handle
  std::uint32_t id_ = 0;
};

template <class Handler>
void stream::refuse_enqueue(Handler&& handler, std::error_code ec, const char* call) {
  std::string& why = rt_->refusal_words();
  std::string words = refusal(call, ec, why);
  why.clear();
  detail::post_refusal(*rt_, std::forward<Handler>(handler), ec, device_or_none(), words, {});
}

template <class Handler>
void stream::refuse_synchronize(Handler&& handler, std::error_code ec, std::optional<picoseconds> timeout) {
  const std::string why = ec == errc::invalid_argument && timeout ? detail::timeout_problem(*timeout) : std::string();
  const std::string words = refusal("npurt::stream::async_synchronize", ec, why);
  detail::post_refusal(*rt_, std::forward<Handler>(handler), ec, device_or_none(), words, {});
}

template <class Handler>
void stream::refuse_captured(Handler&& handler, detail::stream_state& s, const char* call, std::string_view why) {
  const std::error_code ec = make_error_code(errc::stream_captured);
  const std::string words = refuse_in_capture(s, call, ec, why);
  detail::post_refusal(*rt_, std::forward<Handler>(handler), ec, s.device, words, {});
}

template <class Token, class Make>
auto stream::async_enqueue(Token&& token, const char* call, Make make, bool foreign) {
  return boost::asio::async_initiate<Token, void(async_error_code)>(
      [this, call, foreign](auto handler, Make mk) {
        if (!rt_) {
          detail::post_null_handle_error(std::move(handler), make_error_code(errc::invalid_stream));
          return;
        }
        // Before the preparation, which writes the runtime's refusal words.
        if (foreign || rt_->wrong_thread()) [[unlikely]] {
          detail::refuse_foreign(&rt_->io(), std::move(handler), -1, call);
          return;
        }
        if (detail::stream_state* cs = rt_->find_stream(id_); cs && cs->capture) [[unlikely]] {
          refuse_captured(std::move(handler), *cs, call, detail::awaited_in_capture);
          return;
        }
        std::error_code ec;
        std::string& why = rt_->refusal_words();  // on a refusal, the words the throwing form raises
        detail::task* t = mk(*this, ec, why);
        if (!t) [[unlikely]] {
          refuse_enqueue(std::move(handler), ec, call);
          return;
        }
        detail::cancellable_op* op = detail::make_op(*rt_, std::move(handler));
        t->waiter = op;
        op->arm(&detail::cancel_enqueued, t, detail::enqueue_cancel_types);
        submit_awaited(t);
      },
      token, std::move(make));
}

template <class Token>
auto stream::async_launch(const kernel_desc& k, Token&& token) {
  // Another thread's call interns no name: the name table is the loop thread's.
  const bool foreign = foreign_thread();
  return async_enqueue(
      std::forward<Token>(token), "npurt::stream::async_launch",
      [a = detail::launch_args(k, foreign ? nullptr : rt_.get())](stream& s, std::error_code& ec, std::string& why) {
        return s.make_launch(a, ec, &why);
      },
      foreign);
}

template <class Token>
auto stream::async_memcpy(void* dst, std::size_t dst_max, const void* src, std::size_t count, memcpy_kind kind,
                          Token&& token) {
  return async_memcpy_as("npurt::stream::async_memcpy", {}, {}, dst, dst_max, src, count, kind,
                         std::forward<Token>(token));
}

template <class Token>
auto stream::async_memcpy_as(const char* call, std::error_code refused, std::string why, void* dst, std::size_t dst_max,
                             const void* src, std::size_t count, memcpy_kind kind, Token&& token) {
  return async_enqueue(std::forward<Token>(token), call,
                       [=, w = std::move(why)](stream& s, std::error_code& ec, std::string& words) -> detail::task* {
                         if (refused) {
                           ec = refused;
                           words = w;
                           return nullptr;
                         }
                         detail::task* t = s.make_copy(dst, dst_max, src, count, kind, ec);
                         if (!t) words = s.pointer_problem(ec, dst, src);
                         return t;
                       });
}

template <class Token>
auto stream::async_memcpy2d(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch, std::size_t width,
                            std::size_t height, memcpy_kind kind, Token&& token) {
  return async_enqueue(std::forward<Token>(token), "npurt::stream::async_memcpy2d",
                       [=](stream& s, std::error_code& ec, std::string& why) -> detail::task* {
                         detail::task* t =
                             s.make_copy(shape_2d(dst, dst_pitch, src, src_pitch, width, height), kind, ec, true, &why);
                         if (!t && why.empty()) why = s.pointer_problem(ec, dst, src);
                         return t;
                       });
}

template <class Token>
auto stream::async_memset(void* dst, std::size_t dst_max, int value, std::size_t count, Token&& token) {
  return async_enqueue(std::forward<Token>(token), "npurt::stream::async_memset",
                       [=](stream& s, std::error_code& ec, std::string& why) {
                         detail::task* t = s.make_memset(dst, dst_max, value, count, ec);
                         if (!t) why = s.pointer_problem(ec, dst, nullptr);
                         return t;
                       });
}

template <class Token>
auto stream::async_wait(const event& e, Token&& token) {
  // Another thread's call copies no handle: a copy joins the system's handle list and counts.
  const bool foreign = foreign_thread();
  return async_enqueue(
      std::forward<Token>(token), "npurt::stream::async_wait",
      [e = foreign ? event() : e](stream& s, std::error_code& ec, std::string& why) -> detail::task* {
        if (s.recorded_in_capture(e)) [[unlikely]] {
          ec = make_error_code(errc::capture_unsupported);
          why = detail::awaited_captured_event;
          return nullptr;
        }
        detail::task* t = s.make_wait(e, ec);
        if (!t) why = s.event_problem(e, ec, false);
        return t;
      },
      foreign);
}

template <class Token>
auto stream::async_callback(std::function<void()> fn, Token&& token) {
  return async_enqueue(std::forward<Token>(token), "npurt::stream::async_callback",
                       [fn = std::move(fn)](stream& s, std::error_code& ec, std::string&) mutable {
                         return s.make_callback(std::move(fn), ec);
                       });
}

template <class Token>
auto stream::async_write_value(void* dst, std::uint64_t value, Token&& token) {
  return async_enqueue(std::forward<Token>(token), "npurt::stream::async_write_value",
                       [=](stream& s, std::error_code& ec, std::string& why) {
                         return s.make_value_task(task_kind::value_write, dst, value, wait_condition::geq, ec, why);
                       });
}

template <class Token>
auto stream::async_wait_value(const void* addr, std::uint64_t value, wait_condition cond, Token&& token) {
  return async_enqueue(std::forward<Token>(token), "npurt::stream::async_wait_value",
                       [=](stream& s, std::error_code& ec, std::string& why) {
                         return s.make_value_task(task_kind::value_wait, addr, value, cond, ec, why);
                       });
}

template <class Token>
  requires(!std::is_convertible_v<Token, std::optional<picoseconds>>)
auto stream::async_synchronize(Token&& token) {
  return async_synchronize(no_timeout, std::forward<Token>(token));
}

template <class Token>
auto stream::async_synchronize(std::optional<picoseconds> timeout, Token&& token) {
  return boost::asio::async_initiate<Token, void(async_error_code)>(
      [this](auto handler, std::optional<picoseconds> tmo) {
        if (!rt_) {
          detail::post_null_handle_error(std::move(handler), make_error_code(errc::invalid_stream));
          return;
        }
        std::error_code ec;
        detail::stream_state* s = state(ec);
        if (!s || (ec = detail::check_timeout(tmo))) [[unlikely]] {
          refuse_synchronize(std::move(handler), ec, tmo);
          return;
        }
        if (s->capture) [[unlikely]] {
          refuse_captured(std::move(handler), *s, "npurt::stream::async_synchronize", detail::sync_in_capture);
          return;
        }
        std::exception_ptr* thrown = detail::thrown_slot(handler);
        detail::cancellable_op* user = detail::make_op(*rt_, std::move(handler));
        detail::op_base* op = detail::sticky_op::create(*rt_, user, s->id, s->device, 0, thrown);
        const std::pair<std::uint32_t, std::uint64_t> pos[1] = {{s->id, s->enqueued}};
        detail::start_multi_wait(*rt_, op, pos, tmo, user);
      },
      token, timeout);
}

inline std::int32_t detail::stream_access::device_or_none(const stream& s) noexcept { return s.device_or_none(); }

}  // namespace npurt

#if NPURT_INCLUDE_IMPL
#include <npurt/impl/stream.ipp>
#endif

// npurt/collective.hpp — communicators and HCCL-style collectives.
//
// A communicator spans devices of one system, one rank per device (HcclCommInitAll). Every
// operation is one rank's part: it is enqueued on a stream of that rank's device — the stream
// says which rank calls — and runs when the stream reaches it, like any other task; the
// operation moves data when every rank has reached its part (docs/collectives.md). Each
// operation comes in the runtime's three forms: fire-and-forget returning the task's event,
// the same with an error_code, and async_ with any Asio completion token:
//
//   auto comm = npurt::communicator::init_all(sys);             // ranks 0..n-1 = devices 0..n-1
//   for (auto& d : sys.devices()) {
//     auto& s = streams[d.id()];
//     comm.all_reduce(grad[d.id()], grad[d.id()], count, npurt::dtype::f16, npurt::reduce_op::sum, s);
//   }
//   co_await comm.async_all_reduce(buf, buf, n, dtype::f32, reduce_op::sum, s, asio::use_awaitable);
//
// Buffers are device memory of the calling rank's device; in timing-only mode they may be null.
// Errors: a bad argument is a caller error at the call (nothing is enqueued); the error_code and
// async_ forms leave the throwing form's words in system::recent_error_message(). Ranks that disagree
// (another operation, count, dtype, reduce op or root at the same call number, or another
// algorithm or buffer size in force at their calls) fail the operation on every rank with
// errc::collective_mismatch; an operation whose peers do not arrive within the execution
// timeout fails with errc::task_timeout. async_error() tells which, with a message naming the
// ranks, calls, timer and communicator.
#pragma once

#include <npurt/collective_types.hpp>
#include <npurt/config.hpp>
#include <npurt/detail/async_op.hpp>
#include <npurt/detail/runtime.hpp>
#include <npurt/error.hpp>
#include <npurt/event.hpp>
#include <npurt/stream.hpp>
#include <npurt/tensor.hpp>
#include <npurt/time.hpp>

#include <boost/asio/async_result.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace npurt {

class system;

/// The default of a communicator timeout: the preset's (Interconnect.hccl_connect_timeout /
/// hccl_exec_timeout, HCCL's 120 s and 1836 s; a preset value of 0 means never).
struct preset_timeout_t {};
inline constexpr preset_timeout_t preset_timeout{};
/// A communicator timeout as an option: preset_timeout, or what the runtime's waits take — a
/// duration of virtual time, or no_timeout to wait as long as it takes.
using timeout_option = std::variant<preset_timeout_t, std::optional<picoseconds>>;

/// The smallest buffer a communicator takes: HCCL_BUFFSIZE counts in MB from 1. A message
/// larger than the buffer runs in ceil(bytes / buffer) chunks, each simulated; a buffer of a few
/// bytes would make a large message millions of chunks, a simulation that never ends in practice.
inline constexpr std::size_t min_collective_buffer_size = std::size_t{1} << 20;

/// HCCL_BUFFSIZE defaults to 200 MB; at least min_collective_buffer_size.
struct communicator_options {
  collective_algorithm algorithm = collective_algorithm::automatic;
  std::size_t buffer_size = 200'000'000;
  /// How long the first rank of an operation waits for the others (HCCL_EXEC_TIMEOUT).
  timeout_option exec_timeout = preset_timeout;
  /// How long the first rank of the communicator's first operation waits for the others: HCCL
  /// sets up its links at the first operation, so a rank that never gets there is a connect
  /// failure (HCCL_CONNECT_TIMEOUT). That operation fails at the earlier of the two timers.
  timeout_option connect_timeout = preset_timeout;
  std::string name{};
  /// Keep a collective_record of every finished operation (records()).
  bool keep_records = false;
};

class communicator {
 public:
  communicator() = default;

  /// One communicator over `devices` (rank i = devices[i]), like HcclCommInitAll. Caller
  /// errors, each named in the words (the error_code forms leave them in
  /// system::recent_error_message()): no devices, a device the system does not have
  /// (invalid_device), a device twice, a buffer size below 1 MiB, an algorithm outside the
  /// enumeration, a negative timeout; a call from another thread is wrong_thread.
  [[nodiscard]] static NPURT_DECL communicator init_all(system& sys, std::span<const device_id> devices,
                                                        const communicator_options& opts = {});
  [[nodiscard]] static NPURT_DECL communicator init_all(system& sys, std::span<const device_id> devices,
                                                        const communicator_options& opts, std::error_code& ec);
  /// Over every device of the system.
  [[nodiscard]] static NPURT_DECL communicator init_all(system& sys, const communicator_options& opts = {});
  [[nodiscard]] static NPURT_DECL communicator init_all(system& sys, const communicator_options& opts,
                                                        std::error_code& ec);

  /// False for an empty handle and once its system is destroyed (every call then fails with
  /// errc::invalid_argument: the operations, split, the setters, abort and group_start).
  [[nodiscard]] bool valid() const noexcept { return state_ != nullptr && rt_ != nullptr; }
  [[nodiscard]] std::uint64_t id() const noexcept { return state_ ? state_->id : 0; }
  // An empty handle (default-constructed, not yet given an init_all result) has no state to
  // read: its accessors answer as a communicator of no ranks.
  [[nodiscard]] const std::string& name() const noexcept { return state_ ? state_->name : empty_state().name; }
  [[nodiscard]] std::uint32_t size() const noexcept { return state_ ? state_->size() : 0; }
  /// The rank of a device, or -1 when the device is not in the communicator.
  [[nodiscard]] NPURT_DECL int rank_of(device_id dev) const noexcept;
  [[nodiscard]] NPURT_DECL device_id device_of(std::uint32_t rank) const;
  [[nodiscard]] const std::vector<device_id>& devices() const noexcept {
    return state_ ? state_->devices : empty_state().devices;
  }

  /// Sub-communicators (ncclCommSplit / HcclCreateSubComm): colors[r] for each rank r; ranks of
  /// one color form one communicator, in parent rank order; a negative color takes no part.
  /// Returned in increasing color order. Refused (errc::invalid_argument) with a color count other
  /// than size(); the error_code form returns no communicators then.
  [[nodiscard]] NPURT_DECL std::vector<communicator> split(std::span<const int> colors) const;
  [[nodiscard]] NPURT_DECL std::vector<communicator> split(std::span<const int> colors, std::error_code& ec) const;
  /// ncclCommSplit's key too: keys[r] for each rank r orders the ranks of a color (lower key,
  /// lower rank; equal keys keep parent rank order).
  [[nodiscard]] NPURT_DECL std::vector<communicator> split(std::span<const int> colors,
                                                           std::span<const int> keys) const;
  [[nodiscard]] NPURT_DECL std::vector<communicator> split(std::span<const int> colors, std::span<const int> keys,
                                                           std::error_code& ec) const;

  // Per-communicator settings (HCCL_ALGO, HCCL_BUFFSIZE / set_comm_buffer_size, timeouts). An
  // algorithm that is no collective_algorithm, a buffer under min_collective_buffer_size and a
  // negative timeout are errc::invalid_argument, and the setting in force stays. The error_code
  // forms report that, and what every call reports (see valid()), instead of throwing; as the
  // stream's do, they leave the throwing form's words in system::recent_error_message().
  NPURT_DECL void set_algorithm(collective_algorithm a);
  NPURT_DECL void set_algorithm(collective_algorithm a, std::error_code& ec);
  NPURT_DECL void set_buffer_size(std::size_t bytes);
  NPURT_DECL void set_buffer_size(std::size_t bytes, std::error_code& ec);
  NPURT_DECL void set_exec_timeout(std::optional<picoseconds> t);
  NPURT_DECL void set_exec_timeout(std::optional<picoseconds> t, std::error_code& ec);
  NPURT_DECL void set_connect_timeout(std::optional<picoseconds> t);
  NPURT_DECL void set_connect_timeout(std::optional<picoseconds> t, std::error_code& ec);
  [[nodiscard]] collective_algorithm algorithm() const noexcept {
    return state_ ? state_->algorithm : collective_algorithm::automatic;
  }
  [[nodiscard]] std::size_t buffer_size() const noexcept { return state_ ? state_->buffer_bytes : 0; }
  /// The timeouts in force: a duration, or no_timeout (never).
  [[nodiscard]] std::optional<picoseconds> exec_timeout() const noexcept {
    return state_ ? state_->exec_timeout : no_timeout;
  }
  [[nodiscard]] std::optional<picoseconds> connect_timeout() const noexcept {
    return state_ ? state_->connect_timeout : no_timeout;
  }

  /// HcclGetCommAsyncError: the first error an operation of this communicator hit (empty if
  /// none); `message` receives every error's explanation, one per line.
  [[nodiscard]] NPURT_DECL std::error_code async_error(std::string* message = nullptr) const;
  /// HcclCommAbort: fails every pending operation with errc::operation_aborted; later calls fail
  /// at once. Their messages say communicator::abort() was called. The error_code form reports
  /// an empty handle, a destroyed system or another thread instead of throwing.
  NPURT_DECL void abort();
  NPURT_DECL void abort(std::error_code& ec);
  [[nodiscard]] bool aborted() const noexcept { return state_ && state_->aborted; }
  /// Finished operations, when communicator_options::keep_records is set.
  [[nodiscard]] const std::vector<collective_record>& records() const noexcept {
    return state_ ? state_->records : empty_state().records;
  }

  /// HcclGroupStart / HcclGroupEnd: calls in between are batched into one task per stream
  /// (so a send and a recv on one stream cannot deadlock each other). Fire-and-forget calls in a
  /// group return an empty event; async_ calls are not allowed there (errc::not_supported).
  /// group_start on an aborted communicator is errc::operation_aborted (the group could only end
  /// in that error); its error_code form reports it, with the words in recent_error_message().
  NPURT_DECL void group_start();
  NPURT_DECL void group_start(std::error_code& ec);
  NPURT_DECL void group_end();
  NPURT_DECL void group_end(std::error_code& ec);

  // --- the generic forms ------------------------------------------------------------------------
  NPURT_DECL event enqueue(const collective_call& c, stream& s);
  NPURT_DECL event enqueue(const collective_call& c, stream& s, std::error_code& ec);
  template <class Token = stream::default_token>
  auto async_enqueue(collective_call c, stream& s, Token&& token = {});

  // --- named operations ------------------------------------------------------------------------
  static collective_call all_reduce_call(const void* send, void* recv, std::size_t count, dtype t, reduce_op r) {
    collective_call c;
    c.op = collective_op::all_reduce, c.send = send, c.recv = recv, c.count = count, c.type = t, c.red = r;
    return c;
  }
  static collective_call all_gather_call(const void* send, void* recv, std::size_t count, dtype t) {
    collective_call c;
    c.op = collective_op::all_gather, c.send = send, c.recv = recv, c.count = count, c.type = t;
    return c;
  }
  static collective_call reduce_scatter_call(const void* send, void* recv, std::size_t count, dtype t, reduce_op r) {
    collective_call c;
    c.op = collective_op::reduce_scatter, c.send = send, c.recv = recv, c.count = count, c.type = t, c.red = r;
    return c;
  }
  static collective_call broadcast_call(void* buf, std::size_t count, dtype t, int root) {
    collective_call c;
    c.op = collective_op::broadcast, c.send = buf, c.recv = buf, c.count = count, c.type = t, c.root = root;
    return c;
  }
  static collective_call reduce_call(const void* send, void* recv, std::size_t count, dtype t, reduce_op r, int root) {
    collective_call c;
    c.op = collective_op::reduce, c.send = send, c.recv = recv, c.count = count, c.type = t, c.red = r;
    c.root = root;
    return c;
  }
  static collective_call all_to_all_call(const void* send, void* recv, std::size_t count, dtype t) {
    collective_call c;
    c.op = collective_op::all_to_all, c.send = send, c.recv = recv, c.count = count, c.type = t;
    return c;
  }
  static collective_call all_to_allv_call(const void* send, std::vector<std::size_t> send_counts,
                                          std::vector<std::size_t> send_displs, void* recv,
                                          std::vector<std::size_t> recv_counts, std::vector<std::size_t> recv_displs,
                                          dtype t) {
    collective_call c;
    c.op = collective_op::all_to_allv, c.send = send, c.recv = recv, c.type = t;
    c.send_counts = std::move(send_counts), c.send_displs = std::move(send_displs);
    c.recv_counts = std::move(recv_counts), c.recv_displs = std::move(recv_displs);
    return c;
  }
  static collective_call send_call(const void* buf, std::size_t count, dtype t, int peer) {
    collective_call c;
    c.op = collective_op::send, c.send = buf, c.count = count, c.type = t, c.root = peer;
    return c;
  }
  static collective_call recv_call(void* buf, std::size_t count, dtype t, int peer) {
    collective_call c;
    c.op = collective_op::recv, c.recv = buf, c.count = count, c.type = t, c.root = peer;
    return c;
  }
  static collective_call barrier_call() {
    collective_call c;
    c.op = collective_op::barrier;
    return c;
  }

// Each named operation in the three forms: NAME(args..., stream), NAME(args..., stream, ec),
// async_NAME(args..., stream, token).
#define NPURT_COLLECTIVE_FORMS(NAME, ARGS, ...)                                                                      \
  event NAME(__VA_ARGS__ __VA_OPT__(, ) stream& s) { return enqueue(NAME##_call ARGS, s); }                          \
  event NAME(__VA_ARGS__ __VA_OPT__(, ) stream& s, std::error_code& ec) { return enqueue(NAME##_call ARGS, s, ec); } \
  template <class Token = stream::default_token>                                                                     \
  auto async_##NAME(__VA_ARGS__ __VA_OPT__(, ) stream& s, Token&& token = {}) {                                      \
    return async_enqueue(NAME##_call ARGS, s, std::forward<Token>(token));                                           \
  }
  NPURT_COLLECTIVE_FORMS(all_reduce, (send, recv, count, t, r), const void* send, void* recv, std::size_t count,
                         dtype t, reduce_op r)
  NPURT_COLLECTIVE_FORMS(all_gather, (send, recv, count, t), const void* send, void* recv, std::size_t count, dtype t)
  NPURT_COLLECTIVE_FORMS(reduce_scatter, (send, recv, count, t, r), const void* send, void* recv, std::size_t count,
                         dtype t, reduce_op r)
  NPURT_COLLECTIVE_FORMS(broadcast, (buf, count, t, root), void* buf, std::size_t count, dtype t, int root)
  NPURT_COLLECTIVE_FORMS(reduce, (send, recv, count, t, r, root), const void* send, void* recv, std::size_t count,
                         dtype t, reduce_op r, int root)
  NPURT_COLLECTIVE_FORMS(all_to_all, (send, recv, count, t), const void* send, void* recv, std::size_t count, dtype t)
  NPURT_COLLECTIVE_FORMS(send, (buf, count, t, peer), const void* buf, std::size_t count, dtype t, int peer)
  NPURT_COLLECTIVE_FORMS(recv, (buf, count, t, peer), void* buf, std::size_t count, dtype t, int peer)
  NPURT_COLLECTIVE_FORMS(barrier, ())
#undef NPURT_COLLECTIVE_FORMS

 private:
  // init_all's one body: the communicator, or a refusal with its code and the words that say
  // which argument was wrong (built on the refusal path only).
  static NPURT_DECL communicator init_all_checked(system& sys, std::span<const device_id> devices,
                                                  const communicator_options& opts, std::error_code& ec,
                                                  std::string& why);
  NPURT_DECL detail::task* prepare(const collective_call& c, stream& s, std::error_code& ec);
  /// `why`, when given, receives what is wrong with a buffer or a size (the throwing forms'
  /// messages): which buffer, how many bytes it has and how many the call needs.
  NPURT_DECL std::error_code check(const collective_call& c, device_id dev, std::uint32_t rank,
                                   std::string* why = nullptr) const;
  /// What check() refused as invalid_argument, for the throwing forms' messages.
  [[nodiscard]] NPURT_DECL std::string describe_invalid(const collective_call& c, const stream& s) const;
  /// The words of an operation's refusal `ec` (the throwing form's message): the call, named
  /// async_NAME for an async form, and what is wrong. Built only on the refusal path.
  [[nodiscard]] NPURT_DECL std::string refusal_words(const collective_call& c, const stream& s, std::error_code ec,
                                                     bool async) const;
  /// An error_code or async form's refusal: its words become the system's recent_error_message,
  /// and the returned exception is what an awaiting npurt::task throws (detail::note_refusal).
  /// Null, and nothing written, without a system or from another thread than the system's.
  NPURT_DECL std::exception_ptr note_refused_call(const collective_call& c, const stream& s, std::error_code ec,
                                                  bool async) const;
  /// async_enqueue's refusal, with its words (see detail::post_refusal). Out of line, so that the
  /// accepted path stays small.
  template <class Handler>
  [[gnu::noinline]] void refuse_async(Handler&& handler, const collective_call& c, const stream& s,
                                      std::error_code ec) const;
  /// async_enqueue's refusal from a thread that does not run the system: errc::wrong_thread on
  /// the handler's own executor, touching nothing (detail::refuse_foreign), with the words the
  /// stream's refusals give, naming the call. Out of line, as refuse_async.
  template <class Handler>
  [[gnu::noinline]] void refuse_foreign(Handler&& handler, collective_op op) const;
  /// Enqueues a prepared task on `s` and returns its event.
  NPURT_DECL event submit(detail::task* t, stream& s);
  /// Whether this handle can take a call from this thread: invalid_argument for an empty
  /// handle or a destroyed system, wrong_thread under system_options::check_thread.
  [[nodiscard]] NPURT_DECL std::error_code usable() const noexcept;
  /// usable() for the throwing calls: the error names `what` and the cause.
  void require_usable(std::string_view what) const { (void)admit(what, nullptr); }
  /// A refusal of `call`, in the words `npurt::communicator::<call>: <why>`: thrown when `out` is
  /// null (the throwing forms), else stored in *out with the words in the system's
  /// recent_error_message (the error_code forms). One path, so both forms say the same.
  NPURT_DECL void refuse(std::string_view call, std::error_code ec, std::string_view why, std::error_code* out) const;
  /// usable() refused through refuse(): whether the handle can take `call`; clears *out if so.
  NPURT_DECL bool admit(std::string_view call, std::error_code* out) const;
  // The bodies of the calls with two forms: `out` null throws, else reports there.
  NPURT_DECL std::vector<communicator> do_split(std::span<const int> colors, const std::span<const int>* keys,
                                                std::error_code* out) const;
  NPURT_DECL void do_set_algorithm(collective_algorithm a, std::error_code* out);
  NPURT_DECL void do_set_buffer_size(std::size_t bytes, std::error_code* out);
  NPURT_DECL void do_set_timeout(std::string_view call, std::optional<picoseconds> collective_comm_state::* field,
                                 std::optional<picoseconds> t, std::error_code* out);
  NPURT_DECL void do_group_start(std::error_code* out);
  NPURT_DECL void do_group_end(std::error_code* out);
  static const collective_comm_state& empty_state() noexcept {
    static const collective_comm_state empty{};
    return empty;
  }

  struct group_state {
    int depth = 0;
    std::map<std::uint32_t, std::shared_ptr<collective_desc>> pending;  // by stream id
  };

  system* sys_ = nullptr;
  detail::runtime_ref rt_;  // null once the system is gone
  std::shared_ptr<collective_comm_state> state_;
  std::shared_ptr<group_state> group_;
};

template <class Handler>
void communicator::refuse_async(Handler&& handler, const collective_call& c, const stream& s,
                                std::error_code ec) const {
  using detail::thrown_slot;
  if (std::exception_ptr e = note_refused_call(c, s, ec, true))
    if (std::exception_ptr* slot = thrown_slot(handler)) *slot = std::move(e);
  detail::post_error(*rt_, std::forward<Handler>(handler), ec);
}

template <class Handler>
void communicator::refuse_foreign(Handler&& handler, collective_op op) const {
  const std::string call = "npurt::communicator::async_" + std::string(to_string(op));
  detail::refuse_foreign(&rt_->io(), std::forward<Handler>(handler), -1, call);
}

template <class Token>
auto communicator::async_enqueue(collective_call c, stream& s, Token&& token) {
  return boost::asio::async_initiate<Token, void(async_error_code)>(
      [this, &s](auto handler, collective_call call) {
        if (!rt_) {  // an empty handle, or its system is gone: no loop to complete through
          detail::post_null_handle_error(std::move(handler), make_error_code(errc::invalid_argument));
          return;
        }
        // First: an open group's depth, as all of the communicator's state, is the loop thread's.
        if (rt_->wrong_thread()) [[unlikely]] {
          refuse_foreign(std::move(handler), call.op);
          return;
        }
        std::error_code ec;
        if (detail::stream_state* cs = s.rt_ == rt_ && s.valid() ? rt_->find_stream(s.id()) : nullptr;
            cs && cs->capture) [[unlikely]] {
          // Its completion could come only at a launch of the graph, after the capture has ended.
          ec = make_error_code(errc::stream_captured);
          rt_->invalidate_capture(*cs, ec,
                                  "npurt::communicator::async_" + std::string(to_string(call.op)) + ": " +
                                      std::string(detail::awaited_in_capture));
          refuse_async(std::move(handler), call, s, ec);
          return;
        }
        detail::task* t = group_ && group_->depth > 0 ? nullptr : prepare(call, s, ec);
        if (!t && !ec) ec = make_error_code(errc::not_supported);
        if (!t) [[unlikely]] {
          refuse_async(std::move(handler), call, s, ec);
          return;
        }
        // As the stream's awaits: a cancellation ends the await, and the call, which its peers
        // may already be part of, stays queued and runs.
        detail::cancellable_op* op = detail::make_op(*rt_, std::move(handler));
        t->waiter = op;
        op->arm(&detail::cancel_enqueued, t, detail::enqueue_cancel_types);
        rt_->enqueue(*rt_->find_stream(s.id()), t);
      },
      token, std::move(c));
}

}  // namespace npurt

#if NPURT_INCLUDE_IMPL
#include <npurt/impl/collective.ipp>
#endif

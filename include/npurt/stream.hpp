// npurt/stream.hpp — streams: in-order queues of device work, and coroutine executors.
//
// A stream runs its tasks one after another. Every enqueue has a fire-and-forget form that
// returns an event (a plain record is queued; no coroutine is involved) and an async_ form that
// takes any Asio completion token (use_awaitable, deferred, a callback). Each stream is also an
// Asio strand: host callbacks run on it in stream order, and coroutines may be spawned on it.
#pragma once

#include <npurt/backend.hpp>
#include <npurt/config.hpp>
#include <npurt/detail/async_op.hpp>
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
#include <string_view>
#include <utility>

namespace npurt {

namespace detail {
/// What an async_launch carries from the call to its initiation. A kernel_desc is about 750
/// bytes and Asio's initiation layers move their arguments several times over; a fixed-cost
/// kernel (the common case in schedules and benchmarks) travels as a few words, any other as
/// one shared copy.
struct launch_args {
  kernels::fixed fixed{};
  std::string_view name{};
  std::uint32_t block_dim = 0;
  std::shared_ptr<const kernel_desc> full;  // set unless the op is kernels::fixed

  explicit launch_args(const kernel_desc& k) : name(k.display_name()), block_dim(k.block_dim) {
    if (const auto* f = std::get_if<kernels::fixed>(&k.op))
      fixed = *f;
    else
      full = std::make_shared<const kernel_desc>(k);
  }
};
}  // namespace detail

/// Stream priorities: 0 is the highest, 7 the lowest, as in CANN. Out-of-range values clamp.
namespace priority {
inline constexpr int high = 0;
inline constexpr int normal = 4;
inline constexpr int low = 7;
}  // namespace priority

/// Stream creation flags, after aclrtCreateStreamWithConfig. fast_launch and fast_sync change no
/// timing today. overflow_edge (aclrtSetStreamOverFlowEdge) and direct_submit
/// (aclrtSubmitTaskWithStream) take the stream's tasks out of the device's shared execution
/// queue (detail/device_queue.hpp): they dispatch as soon as they are ready.
enum stream_flags : std::uint32_t { fast_launch = 0x1, fast_sync = 0x2, overflow_edge = 0x4, direct_submit = 0x8 };

struct stream_options {
  int priority = priority::normal;
  std::uint32_t flags = 0;
};

class stream {
 public:
  using executor_type = boost::asio::strand<boost::asio::io_context::executor_type>;
  using default_token = boost::asio::default_completion_token_t<boost::asio::io_context::executor_type>;

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
  /// Copies `count` bytes; `dst_max` is how much the destination holds (aclrtMemcpy's destMax):
  /// count > dst_max is errc::size_overflow, never a write out of bounds.
  NPURT_DECL event memcpy(void* dst, std::size_t dst_max, const void* src, std::size_t count,
                          memcpy_kind kind = memcpy_kind::default_kind);
  NPURT_DECL event memcpy(void* dst, std::size_t dst_max, const void* src, std::size_t count, memcpy_kind kind,
                          std::error_code& ec);
  NPURT_DECL event memset(void* dst, std::size_t dst_max, int value, std::size_t count);
  NPURT_DECL event memset(void* dst, std::size_t dst_max, int value, std::size_t count, std::error_code& ec);
  /// Records a user event of this stream's device at the current end of the stream.
  NPURT_DECL void record(event& e);
  NPURT_DECL void record(event& e, std::error_code& ec);
  /// Makes later work of this stream wait until `e` completes (aclrtStreamWaitEvent).
  NPURT_DECL void wait(const event& e);
  NPURT_DECL void wait(const event& e, std::error_code& ec);
  /// Runs fn on this stream's strand when the stream reaches it.
  NPURT_DECL event launch_callback(std::function<void()> fn);
  NPURT_DECL event launch_callback(std::function<void()> fn, std::error_code& ec);

  // --- asynchronous: complete through an Asio completion token --------------------------------
  template <class Token = default_token>
  auto async_launch(const kernel_desc& k, Token&& token = {});
  template <class Token = default_token>
  auto async_memcpy(void* dst, std::size_t dst_max, const void* src, std::size_t count, memcpy_kind kind,
                    Token&& token = {});
  template <class Token = default_token>
  auto async_memset(void* dst, std::size_t dst_max, int value, std::size_t count, Token&& token = {});
  /// Enqueues a wait on `e` and completes when the stream has passed it.
  template <class Token = default_token>
  auto async_wait(const event& e, Token&& token = {});
  template <class Token = default_token>
  auto async_callback(std::function<void()> fn, Token&& token = {});
  /// Completes when everything enqueued so far has finished; with a timeout, completes with
  /// errc::wait_timeout if it passes first (aclrtSynchronizeStreamWithTimeout).
  template <class Token = default_token>
  auto async_synchronize(Token&& token = {});
  template <class Token = default_token>
  auto async_synchronize(picoseconds timeout, Token&& token = {});

  // --- host side ------------------------------------------------------------------------------
  /// True when every enqueued task has completed (aclrtStreamQuery).
  [[nodiscard]] NPURT_DECL bool query() const;
  /// Blocking waits, for code outside system::run (they drive the simulation).
  NPURT_DECL void synchronize();
  NPURT_DECL void synchronize(picoseconds timeout);
  NPURT_DECL void synchronize(picoseconds timeout, std::error_code& ec);

 private:
  NPURT_DECL detail::stream_state* state(std::error_code& ec) const noexcept;
  /// A kernel spread over more cores than the device has is the caller's error.
  NPURT_DECL bool block_dim_fits(const detail::stream_state& s, std::uint32_t block_dim, std::error_code& ec) const;
  NPURT_DECL detail::task* make_launch(const kernel_desc& k, std::error_code& ec);
  NPURT_DECL detail::task* make_launch(const detail::launch_args& a, std::error_code& ec);
  NPURT_DECL detail::task* make_fixed_launch(const kernels::fixed& f, std::string_view name,
                                             std::uint32_t block_dim, std::error_code& ec);
  NPURT_DECL detail::task* make_copy(void* dst, std::size_t dst_max, const void* src, std::size_t count,
                                     memcpy_kind kind, std::error_code& ec);
  NPURT_DECL detail::task* make_memset(void* dst, std::size_t dst_max, int value, std::size_t count,
                                       std::error_code& ec);
  NPURT_DECL detail::task* make_wait(const event& e, std::error_code& ec);
  NPURT_DECL detail::task* make_callback(std::function<void()> fn, std::error_code& ec);
  /// Enqueues a prepared task and returns its event.
  NPURT_DECL event submit(detail::task* t);

  /// The common shape of every async_ enqueue: prepare (errors complete at once, nothing is
  /// enqueued), attach the handler, enqueue.
  template <class Token, class Make>
  auto async_enqueue(Token&& token, Make make);

  detail::runtime* rt_ = nullptr;
  std::uint32_t id_ = 0;
};

template <class Token, class Make>
auto stream::async_enqueue(Token&& token, Make make) {
  return boost::asio::async_initiate<Token, void(async_error_code)>(
      [this](auto handler, Make mk) {
        using handler_t = decltype(handler);
        if (!rt_) {
          std::move(handler)(async_error_code(make_error_code(errc::invalid_stream)));
          return;
        }
        std::error_code ec;
        detail::task* t = mk(*this, ec);
        if (!t) {
          detail::post_error(*rt_, std::move(handler), ec);
          return;
        }
        t->waiter = detail::handler_op<handler_t>::create(*rt_, std::move(handler));
        submit(t);
      },
      token, std::move(make));
}

template <class Token>
auto stream::async_launch(const kernel_desc& k, Token&& token) {
  return async_enqueue(std::forward<Token>(token), [a = detail::launch_args(k)](stream& s, std::error_code& ec) {
    return s.make_launch(a, ec);
  });
}

template <class Token>
auto stream::async_memcpy(void* dst, std::size_t dst_max, const void* src, std::size_t count, memcpy_kind kind,
                          Token&& token) {
  return async_enqueue(std::forward<Token>(token), [=](stream& s, std::error_code& ec) {
    return s.make_copy(dst, dst_max, src, count, kind, ec);
  });
}

template <class Token>
auto stream::async_memset(void* dst, std::size_t dst_max, int value, std::size_t count, Token&& token) {
  return async_enqueue(std::forward<Token>(token), [=](stream& s, std::error_code& ec) {
    return s.make_memset(dst, dst_max, value, count, ec);
  });
}

template <class Token>
auto stream::async_wait(const event& e, Token&& token) {
  return async_enqueue(std::forward<Token>(token),
                       [e](stream& s, std::error_code& ec) { return s.make_wait(e, ec); });
}

template <class Token>
auto stream::async_callback(std::function<void()> fn, Token&& token) {
  return async_enqueue(std::forward<Token>(token), [fn = std::move(fn)](stream& s, std::error_code& ec) mutable {
    return s.make_callback(std::move(fn), ec);
  });
}

template <class Token>
auto stream::async_synchronize(Token&& token) {
  return async_synchronize(picoseconds{-1}, std::forward<Token>(token));
}

template <class Token>
auto stream::async_synchronize(picoseconds timeout, Token&& token) {
  return boost::asio::async_initiate<Token, void(async_error_code)>(
      [this](auto handler, picoseconds tmo) {
        using handler_t = decltype(handler);
        if (!rt_) {
          std::move(handler)(async_error_code(make_error_code(errc::invalid_stream)));
          return;
        }
        std::error_code ec;
        detail::stream_state* s = state(ec);
        if (!s) {
          detail::post_error(*rt_, std::move(handler), ec);
          return;
        }
        detail::op_base* op = detail::handler_op<handler_t>::create(*rt_, std::move(handler));
        const std::pair<std::uint32_t, std::uint64_t> pos[1] = {{s->id, s->enqueued}};
        detail::start_multi_wait(*rt_, op, pos, tmo);
      },
      token, timeout);
}

}  // namespace npurt

#if NPURT_INCLUDE_IMPL
#include <npurt/impl/stream.ipp>
#endif

// npurt/device.hpp — one simulated NPU: its properties, streams, events, memory and lifecycle.
//
// Thread safety: a device belongs to its system's loop thread; every call must come from the
// thread that runs the system (see system_options::check_thread).
#pragma once

#include <npurt/backend.hpp>
#include <npurt/config.hpp>
#include <npurt/detail/async_op.hpp>
#include <npurt/detail/owned_buffer.hpp>
#include <npurt/detail/runtime.hpp>
#include <npurt/error.hpp>
#include <npurt/event.hpp>
#include <npurt/memory.hpp>
#include <npurt/stream.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace npurt {

/// Free and total device memory, as aclrtGetMemInfo reports them.
struct mem_info {
  std::size_t free = 0;
  std::size_t total = 0;
  /// Host memory behind the device's memory in functional mode (0 when timing-only): raw
  /// allocations and pool segments whole, compact pool arenas only in the 2 MiB chunks that
  /// copies, kernels and collectives have reached.
  std::size_t host_backing = 0;
};

class device {
 public:
  using executor_type = boost::asio::strand<boost::asio::io_context::executor_type>;
  using default_token = detail::default_token;

  device(detail::runtime& rt, device_id id) : rt_(&rt), id_(id), strand_(boost::asio::make_strand(rt.io())) {}
  NPURT_DECL ~device();

  [[nodiscard]] device_id id() const noexcept { return id_; }
  [[nodiscard]] const device_properties& properties() const { return rt_->backend().properties(id_); }
  /// A strand for host coroutines that drive this device.
  [[nodiscard]] executor_type get_executor() const noexcept { return strand_; }

  /// A new stream; priority 0 (highest) .. 7 (lowest), out-of-range values clamp. Flags outside
  /// stream_flags are errc::invalid_argument (as aclrtCreateStreamWithConfig refuses them), a
  /// call from another thread (system_options::check_thread) errc::wrong_thread; the throwing
  /// form raises caller_error, the other returns a null stream.
  [[nodiscard]] NPURT_DECL stream make_stream(const stream_options& opts = {});
  [[nodiscard]] NPURT_DECL stream make_stream(const stream_options& opts, std::error_code& ec);
  /// A new user event of this device, to be placed with stream::record. errc::wrong_thread from
  /// another thread (the error_code form returns a null event).
  [[nodiscard]] NPURT_DECL event make_event(const event_options& opts = {});
  [[nodiscard]] NPURT_DECL event make_event(const event_options& opts, std::error_code& ec);

  /// Device memory, like aclrtMalloc: `bytes` rounded up to 512 B; out_of_memory_error when the
  /// device cannot hold it, caller_error(errc::size_overflow) when rounding `bytes` up would
  /// overflow size_t (as mem_pool::malloc_async answers both). The caching pool (memory.hpp) is
  /// the fast path; this is the raw one.
  [[nodiscard]] NPURT_DECL void* malloc(std::size_t bytes);
  [[nodiscard]] NPURT_DECL void* malloc(std::size_t bytes, std::error_code& ec) noexcept;
  /// Frees what malloc returned, at once, and a graph's allocation that a launch left allocated
  /// (as cudaFree frees graph memory; see stream_graph).
  NPURT_DECL void free(void* p);
  NPURT_DECL void free(void* p, std::error_code& ec) noexcept;
  [[nodiscard]] NPURT_DECL mem_info memory_info() const;

  /// The device's default stream-ordered pool (created on first use), and its shortcuts:
  /// `void* p = co_await dev.async_malloc(64 << 20, s, use_awaitable);`
  [[nodiscard]] NPURT_DECL npurt::mem_pool& mem_pool();
  /// Gives the default pool these options: the memory of its old allocator is released, and the
  /// pool object (every mem_pool& to it) stays. Invalid options throw and change nothing, as do a
  /// call from another thread (errc::wrong_thread) and one from an observer's report
  /// (errc::not_supported).
  NPURT_DECL npurt::mem_pool& configure_mem_pool(const mem_pool_options& opts);
  /// The error_code form: null and the code on a refusal (its words in
  /// system::recent_error_message), the pool otherwise.
  NPURT_DECL npurt::mem_pool* configure_mem_pool(const mem_pool_options& opts, std::error_code& ec);
  template <class Token = default_token>
  auto async_malloc(std::size_t bytes, stream& s, Token&& token = {});
  template <class Token = default_token>
  auto async_free(void* p, stream& s, Token&& token = {});
  /// cudaMallocAsync and cudaFreeAsync on the default pool, without a completion token (the pool's
  /// malloc_async and free_async; async_malloc and async_free above take a token, and without
  /// one return a deferred operation, as every async call does).
  [[nodiscard]] void* malloc_async(std::size_t bytes, stream& s) { return mem_pool().malloc_async(bytes, s); }
  [[nodiscard]] void* malloc_async(std::size_t bytes, stream& s, std::error_code& ec) {
    return mem_pool().malloc_async(bytes, s, ec);
  }
  void free_async(void* p, stream& s) { mem_pool().free_async(p, s); }
  void free_async(void* p, stream& s, std::error_code& ec) { mem_pool().free_async(p, s, ec); }
  /// The default pool's usage: allocated_mb, reserved_mb, peak_mb.
  /// The pool's figures (mem_pool::memory_usage); refused on another thread with check_thread.
  [[nodiscard]] NPURT_DECL memory_usage_report memory_usage();

  /// aclrtMemcpy: copies `count` bytes and returns when the copy is done (and reports failed
  /// fire-and-forget work of this device first, as a device synchronize would). On an internal
  /// stream of the device; outside system::run only.
  NPURT_DECL void memcpy(void* dst, std::size_t dst_max, const void* src, std::size_t count,
                         memcpy_kind kind = memcpy_kind::default_kind);
  NPURT_DECL void memcpy(void* dst, std::size_t dst_max, const void* src, std::size_t count, memcpy_kind kind,
                         std::error_code& ec);
  /// aclrtMemcpy2d, cudaMemcpy2D: stream::memcpy2d's rows, returning when they are copied, with
  /// memcpy's rules (the source read in place, the device's failures reported first).
  NPURT_DECL void memcpy2d(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch, std::size_t width,
                           std::size_t height, memcpy_kind kind = memcpy_kind::default_kind);
  NPURT_DECL void memcpy2d(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch, std::size_t width,
                           std::size_t height, memcpy_kind kind, std::error_code& ec);

  /// Waits until every stream of this device is empty, and reports (and reads) the device's first
  /// unread failure of fire-and-forget work. Blocking forms drive the simulation and are for
  /// code outside system::run; with a timeout they throw timeout_error. A wait that ends (this and
  /// async_synchronize) trims the device's pool to its release threshold, as CUDA's does.
  NPURT_DECL void synchronize(std::optional<picoseconds> timeout = no_timeout);
  NPURT_DECL void synchronize(std::optional<picoseconds> timeout, std::error_code& ec);
  /// synchronize(no_timeout, ec): the error_code form without a timeout.
  void synchronize(std::error_code& ec) { synchronize(no_timeout, ec); }
  template <class Token = default_token>
    requires(!std::is_convertible_v<Token, std::optional<picoseconds>>)
  auto async_synchronize(Token&& token = {}) {
    return async_synchronize(no_timeout, std::forward<Token>(token));
  }
  template <class Token = default_token>
  auto async_synchronize(std::optional<picoseconds> timeout, Token&& token = {});

  /// Core limits (aclrtSetDeviceResLimit / aclrtGetDeviceResLimit / aclrtResetDeviceResLimit):
  /// a kernel of this device's streams holds at most `cores` cores of `kind`, so that work on
  /// other streams finds the rest free (a kernel asking for more runs on fewer, and takes longer
  /// as the backend's cost model says). Every stream of the device without a limit of its own
  /// (stream::set_core_limit) takes it, now and later; it applies to the kernels a stream starts
  /// from then on. errc::invalid_argument for 0 cores, more cores than the device has of that
  /// kind, or an unknown kind; errc::wrong_thread from another thread. A reset clears them.
  NPURT_DECL void set_core_limit(core_kind kind, std::uint32_t cores);
  NPURT_DECL void set_core_limit(core_kind kind, std::uint32_t cores, std::error_code& ec);
  /// Lifts the device's limits (streams' own ones stay).
  NPURT_DECL void reset_core_limits();
  NPURT_DECL void reset_core_limits(std::error_code& ec);
  /// The device's limit of `kind`: its core count of that kind when none is set.
  [[nodiscard]] NPURT_DECL std::uint32_t core_limit(core_kind kind) const;

  /// aclrtResetDevice: aborts the device's pending work without waiting for it (whoever awaits
  /// it completes with errc::operation_aborted), frees the device's memory, and invalidates its
  /// streams and events. Fire-and-forget failures not yet read are dropped. A host callback or
  /// coroutine may reset the device whose work it is part of; an observer's report may not
  /// (errc::not_supported: the reported task is among the work the reset drops).
  NPURT_DECL void reset();
  NPURT_DECL void reset(std::error_code& ec);
  /// aclrtDeviceTaskAbort: stream::abort on every stream of the device that is not capturing
  /// (a graph's branches included), without waiting. Memory, streams and events stay valid, and
  /// the streams go on with what is enqueued after; dropped work completes its awaiting callers
  /// with errc::operation_aborted. errc::wrong_thread from another thread, errc::not_supported
  /// from an observer's report (as reset).
  NPURT_DECL void abort_tasks();
  NPURT_DECL void abort_tasks(std::error_code& ec);
  /// How many resets this device has had (reset() calls that went ahead): what a holder of its
  /// memory compares to tell that the memory went with a reset (tensor::storage_lost).
  [[nodiscard]] std::uint64_t reset_count() const noexcept { return resets_; }

 private:
  /// set_core_limit's work; `why` says what is wrong with a refused limit.
  NPURT_DECL void set_core_limit(core_kind kind, std::uint32_t cores, std::error_code& ec, std::string& why);
  /// free's work; `why` has the words of a graph allocation's refusal.
  NPURT_DECL void free(void* p, std::error_code& ec, std::string& why) noexcept;
  NPURT_DECL void synchronize(std::optional<picoseconds> timeout, std::error_code& ec, detail::failure* out);
  /// A synchronize while a stream of this device captures in capture_mode::global: refused
  /// (errc::capture_unsupported, the words noted), and the capture invalidated; else no error.
  NPURT_DECL std::error_code refuse_in_capture(std::string_view call);
  [[nodiscard]] NPURT_DECL std::string capture_words(const detail::stream_state& s);
  NPURT_DECL void memcpy(void* dst, std::size_t dst_max, const void* src, std::size_t count, memcpy_kind kind,
                         std::error_code& ec, detail::failure* out);
  /// The blocking copy of any shape; `what` gets the words of a refusal of the shape itself.
  NPURT_DECL void copy_blocking(const detail::copy_shape& c, memcpy_kind kind, std::error_code& ec,
                                detail::failure* out, std::string* what);
  /// The throwing forms' report of a blocking copy's outcome.
  NPURT_DECL void throw_copy_error(const char* call, const char* async_form, std::error_code ec, detail::failure& f,
                                   const void* dst, const void* src, const std::string& what);
  NPURT_DECL std::vector<std::pair<std::uint32_t, std::uint64_t>> pending_positions() const;
  // async_synchronize's refusal at the call (a negative timeout, another thread than the
  // system's), with the words of the throwing synchronize (see detail::post_refusal). Out of
  // line, so that the accepted path stays small.
  template <class Handler>
  [[gnu::noinline]] void refuse_synchronize(Handler&& handler, std::error_code ec, std::optional<picoseconds> timeout) {
    detail::post_refusal(*rt_, std::forward<Handler>(handler), ec, id_, "npurt::device::async_synchronize",
                         ec == errc::invalid_argument && timeout ? detail::timeout_problem(*timeout) : std::string());
  }
  NPURT_DECL void finish_reset() noexcept;
  // Makes pool_ the one the runtime trims when a synchronize on this device ends.
  NPURT_DECL void register_pool();
  friend detail::runtime& detail::runtime_of(device& dev) noexcept;

  detail::runtime* rt_;
  device_id id_;
  executor_type strand_;
  std::unique_ptr<npurt::mem_pool> pool_;
  std::unique_ptr<stream> copy_stream_;  // device::memcpy's, made on first use
  std::uint64_t resets_ = 0;
};

inline detail::runtime& detail::runtime_of(device& dev) noexcept { return *dev.rt_; }

/// Device memory owned by a scope, like a std::unique_ptr for device::malloc: freed when the
/// buffer dies, so a throwing step leaks nothing. `npurt::device_buffer b(dev, bytes); b.data()`.
/// A buffer that outlives its system is empty (the memory went with the system).
using device_buffer = detail::owned_buffer<device, &device::malloc, &device::free>;

// The refusal from another thread comes first and goes through the handler: mem_pool() would
// make the pool on first use, which only the loop thread may, and throw from the initiation.
template <class Token>
auto device::async_malloc(std::size_t bytes, stream& s, Token&& token) {
  return boost::asio::async_initiate<Token, void(async_error_code, void*)>(
      [this, &s](auto handler, std::size_t n) {
        if (rt_->wrong_thread()) [[unlikely]] {
          detail::refuse_foreign(&rt_->io(), std::move(handler), id_, "npurt::device::async_malloc",
                                 static_cast<void*>(nullptr));
          return;
        }
        mem_pool().async_malloc(n, s, std::move(handler));
      },
      token, bytes);
}

template <class Token>
auto device::async_free(void* p, stream& s, Token&& token) {
  return boost::asio::async_initiate<Token, void(async_error_code)>(
      [this, &s](auto handler, void* ptr) {
        if (rt_->wrong_thread()) [[unlikely]] {
          detail::refuse_foreign(&rt_->io(), std::move(handler), id_, "npurt::device::async_free");
          return;
        }
        mem_pool().async_free(ptr, s, std::move(handler));
      },
      token, p);
}

template <class Token>
auto device::async_synchronize(std::optional<picoseconds> timeout, Token&& token) {
  return boost::asio::async_initiate<Token, void(async_error_code)>(
      [this](auto handler, std::optional<picoseconds> tmo) {
        // As the blocking synchronize: the loop is single-threaded.
        if (rt_->wrong_thread()) [[unlikely]] {
          refuse_synchronize(std::move(handler), make_error_code(errc::wrong_thread), tmo);
          return;
        }
        if (const std::error_code ec = detail::check_timeout(tmo)) [[unlikely]] {
          refuse_synchronize(std::move(handler), ec, tmo);
          return;
        }
        if (const detail::stream_state* cs = rt_->strict_capture(id_)) [[unlikely]] {
          const std::error_code ec = make_error_code(errc::capture_unsupported);
          std::string words = "npurt::device::async_synchronize: " + capture_words(*cs);
          rt_->invalidate_capture(*rt_->find_stream(cs->id), ec, words);
          detail::post_refusal(*rt_, std::move(handler), ec, id_, words, {});
          return;
        }
        std::exception_ptr* thrown = detail::thrown_slot(handler);
        detail::cancellable_op* user = detail::make_op(*rt_, std::move(handler));
        detail::op_base* op = detail::sticky_op::create(*rt_, user, 0, id_, 0, thrown);
        detail::start_multi_wait(*rt_, op, pending_positions(), tmo, user);
      },
      token, timeout);
}

}  // namespace npurt

#if NPURT_INCLUDE_IMPL
#include <npurt/impl/device.ipp>
#endif

// npurt/system.hpp — the root object: the simulated clock, the event loop, and the devices
// built from a hardware preset or a backend.
//
// Thread safety: a system is single-threaded. Everything (host coroutines, handlers, device
// completions) runs on the thread that calls run() or a blocking wait, in an order fixed by
// virtual time; no member may be called concurrently. Another thread may own a system while no
// call is in progress, but calls from a second thread while the loop runs are a race: with
// system_options::check_thread (always on in builds without NDEBUG) they fail with
// errc::wrong_thread instead.
#pragma once

#include <npurt/backend.hpp>
#include <npurt/config.hpp>
#include <npurt/detail/owned_buffer.hpp>
#include <npurt/detail/runtime.hpp>
#include <npurt/detail/trace_hook.hpp>
#include <npurt/device.hpp>
#include <npurt/error.hpp>
#include <npurt/observer.hpp>
#include <npurt/system_options.hpp>
#include <npurt/time.hpp>

#include <boost/asio/io_context.hpp>

#include <concepts>
#include <cstddef>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace npurt {

class profiler;

/// Anything make_backend(p) (found by argument-dependent lookup) turns into a backend: the
/// simulator's presets are.
template <class P>
concept backend_preset = requires(const P& p) {
  { make_backend(p) } -> std::convertible_to<std::unique_ptr<backend>>;
};

class system;
namespace detail {
/// The runtime behind a system, for npurt's own components and tests (not a user API).
inline detail::runtime& runtime_of(system& sys) noexcept;
}  // namespace detail

class system {
 public:
  using executor_type = boost::asio::io_context::executor_type;

  /// A system on a hardware preset: `npurt::system sys{npurt::sim::presets::ascend910(8)};`
  template <backend_preset P>
  explicit system(const P& preset, const system_options& opts = {}) : system(make_backend(preset), opts) {}
  /// A system on any backend.
  NPURT_DECL explicit system(std::unique_ptr<backend> b, const system_options& opts = {});
  NPURT_DECL ~system();
  system(const system&) = delete;
  system& operator=(const system&) = delete;

  [[nodiscard]] std::size_t device_count() const noexcept { return devices_.size(); }
  /// The device with this id; caller_error (errc::invalid_device) for an invalid id.
  [[nodiscard]] NPURT_DECL npurt::device& device(device_id id);
  [[nodiscard]] NPURT_DECL npurt::device* find_device(device_id id, std::error_code& ec) noexcept;
  [[nodiscard]] std::deque<npurt::device>& devices() noexcept { return devices_; }
  /// aclrtSetDevice / aclrtGetDevice: the device that current_device() names (initially 0).
  NPURT_DECL void set_device(device_id id);
  [[nodiscard]] npurt::device& current_device() noexcept { return devices_[static_cast<std::size_t>(current_)]; }

  /// Host coroutines run on this executor (or on a device's or stream's strand).
  [[nodiscard]] executor_type get_executor() noexcept { return rt_->io().get_executor(); }

  /// Drives virtual time until all work is done. A deadlock (work waits and nothing can ever
  /// run) throws deadlock_error at once, naming who waits on what; the blocked waits complete
  /// with errc::deadlock first, so awaiting coroutines see the error too. Called from inside the
  /// loop (a handler, callback or coroutine that run() is running) it is errc::not_supported:
  /// the running loop already drives the work, which such code awaits with an async_ form.
  NPURT_DECL void run();
  NPURT_DECL void run(std::error_code& ec);
  [[nodiscard]] sim_time now() const noexcept { return rt_->now(); }
  /// The last deadlock's report (empty if none): it stays until a later deadlock replaces it or
  /// clear_deadlock_report() empties it, so a run that succeeds afterwards does not lose it.
  [[nodiscard]] const std::string& deadlock_report() const noexcept { return rt_->last_deadlock_report(); }
  void clear_deadlock_report() noexcept { rt_->clear_deadlock_report(); }
  /// What the most recent task failure was, in the words a throwing synchronize would use
  /// ("task 5 (emb) on stream 1 failed (indices[1] = 3 is outside [-3, 2] ...): invalid
  /// argument"), and clears it; "" when no task failed since the last call. As CANN's
  /// aclGetRecentErrMsg: for code that hears a failure as an error_code alone (an await with
  /// boost::asio::use_awaitable, a completion handler), which cannot carry the text.
  [[nodiscard]] std::string recent_error_message() noexcept { return rt_->take_recent_error(); }

  /// Pinned host memory from a mimalloc heap, zeroed. Copies from it are bounds-checked.
  [[nodiscard]] NPURT_DECL void* host_malloc(std::size_t bytes);
  [[nodiscard]] NPURT_DECL void* host_malloc(std::size_t bytes, std::error_code& ec) noexcept;
  NPURT_DECL void host_free(void* p);
  NPURT_DECL void host_free(void* p, std::error_code& ec) noexcept;

  /// What npurt knows of the memory `p` points into (cudaPointerGetAttributes,
  /// aclrtPointerGetAttributes): device memory (device::malloc, a pool's block) with its device,
  /// pinned host memory, or host memory npurt did not allocate (memory_type::unregistered, no
  /// error, as CUDA 11 answers). An interior pointer gives its allocation's base, size and the
  /// offset. Refused: a null pointer (errc::null_pointer), a device address that is not live
  /// memory of this system (errc::invalid_pointer, saying whether it was freed, never allocated,
  /// cached in a pool or another system's), another thread (errc::wrong_thread).
  [[nodiscard]] NPURT_DECL npurt::pointer_attributes pointer_attributes(const void* p) const;
  [[nodiscard]] NPURT_DECL npurt::pointer_attributes pointer_attributes(const void* p, std::error_code& ec) const;

  /// What joins devices a and b (aclrtGetDevicesTopo): the same device's HBM, a direct HCCS
  /// link, PCIe through the host, or the RoCE network between servers, with what an uncontended
  /// device-to-device copy over it costs (latency + bytes / bandwidth, as the backend times it).
  /// invalid_device for an id outside [0, device_count()).
  [[nodiscard]] NPURT_DECL link_properties topology(device_id a, device_id b) const;
  [[nodiscard]] NPURT_DECL link_properties topology(device_id a, device_id b, std::error_code& ec) const;
  /// cudaDeviceCanAccessPeer, aclrtDeviceCanAccessPeer: whether a and b are two devices joined
  /// by a direct device link (HCCS). A device is not its own peer. Copies between any two
  /// devices need no such link (they cross whatever topology() reports). invalid_device as
  /// topology().
  [[nodiscard]] NPURT_DECL bool can_access_peer(device_id a, device_id b) const;
  [[nodiscard]] NPURT_DECL bool can_access_peer(device_id a, device_id b, std::error_code& ec) const;

  /// The system's own profiler, created and attached on first use: `sys.profiler()
  /// .write_chrome_trace("trace.json")`. With NPURT_TRACE=PATH in the environment it exists from
  /// the start and writes PATH when the system is destroyed. Defined with the profiler: include
  /// <npurt/profiler.hpp> (or npurt.hpp) to call it.
  NPURT_DECL npurt::profiler& profiler();

  NPURT_DECL void add_observer(observer& o);
  NPURT_DECL void remove_observer(observer& o);

  /// msproftx-style annotations from host code, at the current virtual time.
  NPURT_DECL void mark(std::string_view name, std::uint32_t lane = 0);
  NPURT_DECL void push_range(std::string_view name, std::uint32_t lane = 0);
  NPURT_DECL void pop_range(std::uint32_t lane = 0);

  /// The event-wait timeout (aclrtSetOpWaitTimeout): a stream wait on an event (stream::wait,
  /// async_wait) enqueued from now on that stays blocked this long after it reaches the device
  /// (under shared_fifo, after the device's earlier work has been dispatched) fails with
  /// errc::event_wait_timeout, reported as the stream's sticky error (timeout_error with timer()
  /// event_wait). no_timeout, the default, waits as long as it takes. A duration must be
  /// positive: invalid_argument otherwise (CANN's 0 for "never" is no_timeout here).
  NPURT_DECL void set_event_wait_timeout(std::optional<picoseconds> limit);
  NPURT_DECL void set_event_wait_timeout(std::optional<picoseconds> limit, std::error_code& ec) noexcept;
  [[nodiscard]] std::optional<picoseconds> event_wait_timeout() const noexcept {
    const std::int64_t ps = rt_->event_wait_timeout();
    return ps > 0 ? std::optional<picoseconds>(picoseconds{ps}) : std::nullopt;
  }

  [[nodiscard]] const system_options& options() const noexcept { return rt_->options(); }
  [[nodiscard]] npurt::backend& get_backend() noexcept { return rt_->backend(); }

 private:
  friend detail::runtime& detail::runtime_of(system& sys) noexcept;

  std::unique_ptr<detail::runtime> rt_;
  std::deque<npurt::device> devices_;
  device_id current_ = 0;
  std::unique_ptr<observer> profiler_;  // a profiler; its type is known only where profiler() is defined
};

inline detail::runtime& detail::runtime_of(system& sys) noexcept { return *sys.rt_; }

/// Pinned host memory owned by a scope (system::host_malloc / host_free), freed when it dies;
/// empty if it outlives its system.
using host_buffer = detail::owned_buffer<system, &system::host_malloc, &system::host_free>;

}  // namespace npurt

#if NPURT_INCLUDE_IMPL
#include <npurt/impl/system.ipp>
#endif

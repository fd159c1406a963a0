// npurt/error.hpp — npurt's error category, its codes, and the exception types that the throwing
// overloads raise.
//
// Codes follow CANN's three ranges: 1070xx for caller errors (bad input; the runtime stays
// usable), 2070xx for resource errors (memory, queues), 5070xx for device errors (a device or
// link failed; the device is lost until reset).
#pragma once

#include <npurt/config.hpp>

#include <boost/system/error_code.hpp>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

namespace npurt {

enum class errc : int {
  // Caller errors: the call was wrong. Nothing happened; the runtime is unchanged.
  invalid_argument = 107000,
  invalid_device = 107001,
  invalid_stream = 107002,
  stream_device_mismatch = 107003,  // a stream, event or pointer of another device
  invalid_event = 107004,
  event_not_recorded = 107005,
  null_pointer = 107006,
  invalid_pointer = 107007,  // never allocated by npurt, or already freed
  double_free = 107008,
  zero_size = 107009,
  size_overflow = 107010,     // more bytes than the destination holds (aclrtMemcpy's destMax)
  invalid_copy_kind = 107011, // the pointers do not match the copy kind
  invalid_shape = 107012,
  invalid_dtype = 107013,
  invalid_layout = 107014,
  invalid_config = 107015,    // a malformed preset, option or file
  parse_error = 107016,
  collective_mismatch = 107017,
  not_supported = 107018,
  wait_timeout = 107019,      // a host wait ran past its timeout
  task_timeout = 107020,
  deadlock = 107021,          // work is waiting and nothing can ever run
  operation_aborted = 107023,
  callback_failed = 107024,   // a host callback threw; the exception is kept with the error
  wrong_thread = 107025,      // a call from a thread that does not run the system's loop
  collective_timeout = 107026, // a collective ran past its communicator's exec timeout (HCCL_EXEC_TIMEOUT)
  time_overflow = 107027,     // a time or duration past the end of virtual time (2^63 ps)
  event_wait_timeout = 107028, // a stream's event wait ran past the event-wait timeout (aclrtSetOpWaitTimeout)
  event_not_complete = 107029, // recorded, but the recorded work has not completed (cudaErrorNotReady)
  // Stream capture (aclmdlRICaptureBegin, cudaStreamBeginCapture). CANN's codes for these are
  // 107024-107036 and 507903; ours sit in the free caller slots, all caller errors.
  stream_captured = 107030,      // the stream is capturing: the call cannot run there (ACL_ERROR_RT_STREAM_CAPTURED)
  stream_not_captured = 107031,  // end_capture on a stream that is not capturing (ACL_ERROR_RT_STREAM_NOT_CAPTURED)
  capture_unsupported = 107032,  // not permitted while a stream captures (ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT)
  capture_dependency = 107033,   // a captured wait for work outside the capture (ACL_ERROR_RT_CAPTURE_DEPENDENCY)
  capture_invalidated = 107034,  // an error ended the capture; end_capture reports it (..._CAPTURE_INVALIDATED)
  invalid_graph = 107035,        // a null, destroyed or lost stream_graph
  capture_unmatched = 107036,    // end_capture on a stream that joined a capture (..._STREAM_CAPTURE_UNMATCHED)
  capture_unjoined = 107037,     // a stream joined a capture and was not waited for (ACL_ERROR_RT_STREAM_UNJOINED)
  graph_update_mismatch =
      107038,  // stream_graph::update from a graph of another shape (cudaErrorGraphExecUpdateFailure)
  corrupt_file = 107040,      // a file failed its checksums or layout rules (truncated, damaged)
  // Resource errors: the call was right but the resources were not there.
  out_of_memory = 207001,
  pool_limit = 207002,
  resource_exhausted = 207003,
  // Device errors: the (simulated) hardware failed.
  device_error = 507000,
  device_lost = 507001,
  link_failure = 507002,
  kernel_fault = 507003,      // an AI core exception in a kernel (ACL_ERROR_RT_AICORE_EXCEPTION)
  lost_heartbeat = 507010,    // the device stopped answering (ACL_ERROR_RT_LOST_HEARTBEAT)
  hbm_ecc_error = 507054,     // uncorrectable (multi-bit) ECC error in device memory
  remote_error = 507057,      // a collective peer failed (ACL_ERROR_RT_SUSPECT_REMOTE_ERROR)
};

/// The three classes, as error conditions: `ec == npurt::error_class::caller`.
enum class error_class : int { caller = 1, resource = 2, device = 5 };

/// npurt's category as <system_error> sees it (the std face of a Boost.System category).
NPURT_DECL const std::error_category& error_category() noexcept;
NPURT_DECL const std::error_category& error_class_category() noexcept;
/// The same categories as Boost.System sees them.
NPURT_DECL const boost::system::error_category& boost_error_category() noexcept;
NPURT_DECL const boost::system::error_category& boost_error_class_category() noexcept;

inline std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), error_category()}; }
inline std::error_condition make_error_condition(error_class c) noexcept {
  return {static_cast<int>(c), error_class_category()};
}

/// Base of every exception npurt throws. code() is the npurt error code.
class error : public std::system_error {
 public:
  error(std::error_code ec, const std::string& what) : std::system_error(ec, what) {}
};

class caller_error : public error {
  using error::error;
};

/// What a device is doing, as a device_error reports it.
enum class device_status : std::uint8_t {
  healthy,    // working (a task may still have failed on it: a non-fatal error)
  throttled,  // working, slower (thermal throttling)
  lost,       // a fatal error: every call fails with errc::device_lost until the device is reset
};

constexpr std::string_view to_string(device_status s) noexcept {
  switch (s) {
    case device_status::healthy: return "healthy";
    case device_status::throttled: return "throttled";
    case device_status::lost: return "lost";
  }
  return "?";
}

/// Which timer of the documented hierarchy fired (docs/faults.md): the per-task watchdogs
/// (op execute, collective exec), the event wait of a stream, the host's sync waits, and a
/// communicator's connect timeout, which bounds its first rendezvous when it is the earlier
/// (HCCL_CONNECT_TIMEOUT; HCCL sets links up at the first operation).
enum class timeout_kind : std::uint8_t { op_execute, collective_exec, event_wait, sync, collective_connect };

constexpr std::string_view to_string(timeout_kind k) noexcept {
  switch (k) {
    case timeout_kind::op_execute: return "op_execute";
    case timeout_kind::collective_exec: return "collective_exec";
    case timeout_kind::event_wait: return "event_wait";
    case timeout_kind::sync: return "sync";
    case timeout_kind::collective_connect: return "collective_connect";
  }
  return "?";
}

/// The timer a timeout code stands for: task_timeout is the op-execute watchdog,
/// collective_timeout a communicator's exec timeout, event_wait_timeout a stream's event wait,
/// wait_timeout a host sync wait.
inline timeout_kind timeout_kind_of(std::error_code ec) noexcept {
  if (ec.category() != error_category()) return timeout_kind::sync;
  if (ec.value() == static_cast<int>(errc::task_timeout)) return timeout_kind::op_execute;
  if (ec.value() == static_cast<int>(errc::collective_timeout)) return timeout_kind::collective_exec;
  if (ec.value() == static_cast<int>(errc::event_wait_timeout)) return timeout_kind::event_wait;
  return timeout_kind::sync;
}

/// Whether ec is one of the timeout codes (a timeout_error when thrown).
inline bool is_timeout(std::error_code ec) noexcept {
  // The value first: asking the category is an out-of-line call, and the scheduler asks this of
  // every task's outcome, successes included.
  const auto e = static_cast<errc>(ec.value());
  return (e == errc::wait_timeout || e == errc::task_timeout || e == errc::collective_timeout ||
          e == errc::event_wait_timeout) &&
         ec.category() == error_category();
}

/// The status a device is left in by an error: the fatal device errors lose the device.
inline device_status status_after(std::error_code ec) noexcept {
  if (ec.category() != error_category()) return device_status::healthy;
  const auto e = static_cast<errc>(ec.value());
  return e == errc::device_lost || e == errc::lost_heartbeat || e == errc::hbm_ecc_error ? device_status::lost
                                                                                         : device_status::healthy;
}
class resource_error : public error {
  using error::error;
};
/// A device failed. status() says whether the device is still usable (healthy: the task
/// failed, the device did not) or lost until reset; device() is -1 when the raiser could not
/// tell which device.
class device_error : public error {
 public:
  device_error(std::error_code ec, const std::string& what) : error(ec, what), status_(status_after(ec)) {}
  device_error(std::error_code ec, const std::string& what, std::int32_t device, device_status status)
      : error(ec, what), device_(device), status_(status) {}
  [[nodiscard]] std::int32_t device() const noexcept { return device_; }
  [[nodiscard]] device_status status() const noexcept { return status_; }

 private:
  std::int32_t device_ = -1;
  device_status status_ = device_status::healthy;
};

/// A timer ran out. timer() says which one (the hierarchy of docs/faults.md), limit() its value
/// in picoseconds (0 only when the exception was built from a bare code, without its limit).
class timeout_error : public error {
 public:
  timeout_error(std::error_code ec, const std::string& what) : error(ec, what), timer_(timeout_kind_of(ec)) {}
  timeout_error(std::error_code ec, const std::string& what, timeout_kind timer, std::int64_t limit_ps)
      : error(ec, what), timer_(timer), limit_(limit_ps) {}
  [[nodiscard]] timeout_kind timer() const noexcept { return timer_; }
  [[nodiscard]] std::int64_t limit() const noexcept { return limit_; }

 private:
  timeout_kind timer_;
  std::int64_t limit_ = 0;
};
class deadlock_error : public error {
  using error::error;
};

/// Raised when the device memory cannot satisfy a request after the allocator has tried
/// everything it may (free cached blocks, collect garbage, synchronise and release all). The
/// fields are what a user needs to decide what to do, as PyTorch's message gives them.
class out_of_memory_error : public resource_error {
 public:
  struct info {
    std::size_t requested = 0;
    int device = 0;
    std::size_t total = 0;
    std::size_t free = 0;
    std::size_t allocated = 0;
    std::size_t reserved = 0;  // reserved by the pool; reserved - allocated is cached but unused
  };
  out_of_memory_error(const info& i, const std::string& what)
      : resource_error(make_error_code(errc::out_of_memory), what), info_(i) {}
  /// With the code the refusal had: errc::pool_limit when a pool's size limit refused it.
  out_of_memory_error(std::error_code ec, const info& i, const std::string& what)
      : resource_error(ec, what), info_(i) {}
  [[nodiscard]] const info& details() const noexcept { return info_; }
  [[nodiscard]] std::size_t requested() const noexcept { return info_.requested; }
  [[nodiscard]] int device() const noexcept { return info_.device; }

 private:
  info info_;
};

/// " (sync timer, limit 1.5 ms)": how a timeout's message names its timer and value.
[[nodiscard]] NPURT_DECL std::string timeout_detail(timeout_kind timer, std::int64_t limit_ps);

/// Throws the exception type that matches the code's class (timeout_error for timeouts,
/// deadlock_error for deadlocks, caller/resource/device_error otherwise). `what` should say
/// which argument was wrong.
[[noreturn]] NPURT_DECL void throw_error(std::error_code ec, std::string_view what = {});
/// As throw_error, with the value of the timer that fired when ec is a timeout (timeout_error's
/// limit(), in picoseconds; a positive one is named in the message too).
[[noreturn]] NPURT_DECL void throw_error(std::error_code ec, std::string_view what, std::int64_t timeout_limit_ps);
/// As throw_error, from a raiser that knows which device the error is about: a device_error
/// names it in device().
[[noreturn]] NPURT_DECL void throw_error_on(std::int32_t device, std::error_code ec, std::string_view what = {},
                                            std::int64_t timeout_limit_ps = 0);

/// The error type of async completion signatures: Asio's. npurt's category is a Boost.System
/// category whose std::error_category face is the one error_category() returns, so the same
/// error has one identity either way: value() 107007 and category name "npurt" as a
/// boost::system::error_code and as a std::error_code, and each converts to the other and
/// compares equal to npurt::errc::invalid_pointer.
using async_error_code = boost::system::error_code;

/// Throws if ec is set: the bridge from the error_code& overloads to the throwing ones.
inline void throw_if(std::error_code ec, std::string_view what = {}) {
  if (ec) throw_error(ec, what);
}
/// throw_if, naming the device the error is about.
inline void throw_if_on(std::int32_t device, std::error_code ec, std::string_view what = {}) {
  if (ec) throw_error_on(device, ec, what);
}

}  // namespace npurt

template <>
struct std::is_error_code_enum<npurt::errc> : std::true_type {};
// Async operations complete with boost::system::error_code, as Asio's own do, so that
// `co_await op(use_awaitable)` throws on failure; npurt codes compare equal in it.
template <>
struct boost::system::is_error_code_enum<npurt::errc> : std::true_type {};
template <>
struct std::is_error_condition_enum<npurt::error_class> : std::true_type {};

#if NPURT_INCLUDE_IMPL
#include <npurt/impl/error.ipp>
#endif

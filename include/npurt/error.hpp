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
  time_overflow = 107026,     // a time or duration past the end of virtual time (2^63 ps)
  corrupt_file = 107040,      // a file failed its checksums or layout rules (truncated, damaged)
  // Resource errors: the call was right but the resources were not there.
  out_of_memory = 207001,
  pool_limit = 207002,
  resource_exhausted = 207003,
  // Device errors: the (simulated) hardware failed.
  device_error = 507000,
  device_lost = 507001,
  link_failure = 507002,
  kernel_fault = 507003,
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
class resource_error : public error {
  using error::error;
};
class device_error : public error {
  using error::error;
};
class timeout_error : public error {
  using error::error;
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
  [[nodiscard]] const info& details() const noexcept { return info_; }
  [[nodiscard]] std::size_t requested() const noexcept { return info_.requested; }
  [[nodiscard]] int device() const noexcept { return info_.device; }

 private:
  info info_;
};

/// Throws the exception type that matches the code's class (timeout_error for timeouts,
/// deadlock_error for deadlocks, caller/resource/device_error otherwise). `what` should say
/// which argument was wrong.
[[noreturn]] NPURT_DECL void throw_error(std::error_code ec, std::string_view what = {});

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

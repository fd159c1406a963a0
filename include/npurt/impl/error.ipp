// npurt/impl/error.ipp
#pragma once

#include <npurt/error.hpp>
#include <npurt/time.hpp>

#include <sstream>

namespace npurt {
namespace detail {

// Boost.System categories: Boost gives each one a std::error_category face, and converting a
// std::error_code with that face back to Boost recovers the original category, so an npurt
// error keeps its value and name across async completions (a plain std category would be
// wrapped with a synthesised value and the name "std:...").
class npurt_category final : public boost::system::error_category {
 public:
  npurt_category() noexcept : boost::system::error_category(0x6e70757274000001ULL) {}
  using boost::system::error_category::message;
  const char* name() const noexcept override { return "npurt"; }
  std::string message(int ev) const override {
    switch (static_cast<errc>(ev)) {
      case errc::invalid_argument: return "invalid argument";
      case errc::invalid_device: return "invalid device id";
      case errc::invalid_stream: return "invalid or destroyed stream";
      case errc::stream_device_mismatch: return "stream, event or memory belongs to another device";
      case errc::invalid_event: return "invalid or destroyed event";
      case errc::event_not_recorded: return "event was never recorded";
      case errc::event_not_complete: return "event was recorded, but the recorded work has not completed";
      case errc::null_pointer: return "null pointer";
      case errc::invalid_pointer:
        return "pointer is not live device memory (never allocated by npurt, freed, or host memory)";
      case errc::double_free: return "pointer was already freed";
      case errc::zero_size: return "size is zero";
      case errc::size_overflow:
        return "size overflow: a size or range does not fit (past the end of an allocation or destination, or more "
               "than the device holds)";
      case errc::invalid_copy_kind: return "copy kind does not match the pointers";
      case errc::invalid_shape: return "invalid tensor shape";
      case errc::invalid_dtype: return "unsupported data type";
      case errc::invalid_layout: return "unsupported layout";
      case errc::invalid_config: return "invalid configuration";
      case errc::parse_error: return "malformed input";
      case errc::collective_mismatch: return "mismatched collective across ranks";
      case errc::not_supported: return "not supported";
      case errc::wait_timeout: return "wait timed out";
      case errc::task_timeout: return "task timed out";
      case errc::deadlock: return "deadlock: work is waiting and nothing can run";
      case errc::operation_aborted: return "operation aborted";
      case errc::callback_failed: return "a host callback threw";
      case errc::wrong_thread: return "called from a thread that does not run the system (npurt is single-threaded)";
      case errc::time_overflow:
        return "virtual time overflow: the time or duration runs past the end of the simulated clock (2^63 ps)";
      case errc::stream_captured: return "the stream is capturing (until end_capture)";
      case errc::stream_not_captured: return "the stream is not capturing";
      case errc::capture_unsupported: return "operation not permitted while a stream is capturing";
      case errc::capture_dependency: return "a captured wait depends on work outside the capture";
      case errc::capture_invalidated: return "an error has invalidated the stream capture";
      case errc::invalid_graph: return "invalid, destroyed or lost stream graph";
      case errc::capture_unmatched: return "the capture was not begun on this stream";
      case errc::capture_unjoined: return "a stream that joined the capture was not joined back";
      case errc::graph_update_mismatch: return "the graph update differs from the graph in its shape";
      case errc::corrupt_file: return "corrupt file: checksum mismatch, truncation or inconsistent layout";
      case errc::out_of_memory: return "out of memory (the device's, or pinned host memory)";
      case errc::pool_limit: return "memory pool size limit reached";
      case errc::resource_exhausted: return "resource exhausted";
      case errc::device_error: return "device error";
      case errc::device_lost: return "device lost; reset it";
      case errc::link_failure: return "link failure";
      case errc::kernel_fault: return "kernel fault (AI core exception)";
      case errc::collective_timeout: return "collective timed out (exec timeout)";
      case errc::event_wait_timeout: return "event wait timed out (the stream's event-wait timeout)";
      case errc::lost_heartbeat: return "device lost its heartbeat (stopped answering)";
      case errc::hbm_ecc_error: return "uncorrectable HBM ECC error";
      case errc::remote_error: return "a collective peer failed";
    }
    return "unknown npurt error " + std::to_string(ev);
  }
  boost::system::error_condition default_error_condition(int ev) const noexcept override {
    return {ev / 100000 == 1 ? 1 : ev / 100000 == 2 ? 2 : 5, boost_error_class_category()};
  }
};

class npurt_class_category final : public boost::system::error_category {
 public:
  npurt_class_category() noexcept : boost::system::error_category(0x6e70757274000002ULL) {}
  using boost::system::error_category::message;
  const char* name() const noexcept override { return "npurt.class"; }
  std::string message(int ev) const override {
    switch (ev) {
      case 1: return "caller error";
      case 2: return "resource error";
      case 5: return "device error";
    }
    return "unknown error class";
  }
};

}  // namespace detail

NPURT_DECL const boost::system::error_category& boost_error_category() noexcept {
  static const detail::npurt_category cat;
  return cat;
}

NPURT_DECL const boost::system::error_category& boost_error_class_category() noexcept {
  static const detail::npurt_class_category cat;
  return cat;
}

NPURT_DECL const std::error_category& error_category() noexcept {
  static const std::error_category& cat = static_cast<const std::error_category&>(boost_error_category());
  return cat;
}

NPURT_DECL const std::error_category& error_class_category() noexcept {
  static const std::error_category& cat = static_cast<const std::error_category&>(boost_error_class_category());
  return cat;
}

NPURT_DECL std::string timeout_detail(timeout_kind timer, std::int64_t limit_ps) {
  std::ostringstream os;
  os << " (" << to_string(timer) << " timer, limit " << to_ms(picoseconds{limit_ps}) << " ms)";
  return os.str();
}

NPURT_DECL void throw_error(std::error_code ec, std::string_view what) { throw_error(ec, what, 0); }

NPURT_DECL void throw_error(std::error_code ec, std::string_view what, std::int64_t timeout_limit_ps) {
  throw_error_on(-1, ec, what, timeout_limit_ps);
}

NPURT_DECL void throw_error_on(std::int32_t device, std::error_code ec, std::string_view what,
                               std::int64_t timeout_limit_ps) {
  std::string msg{what};
  if (is_timeout(ec)) {
    const timeout_kind timer = timeout_kind_of(ec);
    if (timeout_limit_ps > 0) msg += timeout_detail(timer, timeout_limit_ps);
    throw timeout_error(ec, msg, timer, timeout_limit_ps);
  }
  if (ec == errc::deadlock) throw deadlock_error(ec, msg);
  if (ec == error_class::resource) throw resource_error(ec, msg);
  if (ec == error_class::device) throw device_error(ec, msg, device, status_after(ec));
  throw caller_error(ec, msg);
}

}  // namespace npurt

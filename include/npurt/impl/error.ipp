// npurt/impl/error.ipp
#pragma once

#include <npurt/error.hpp>

namespace npurt {
namespace detail {

class npurt_category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "npurt"; }
  std::string message(int ev) const override {
    switch (static_cast<errc>(ev)) {
      case errc::invalid_argument: return "invalid argument";
      case errc::invalid_device: return "invalid device id";
      case errc::invalid_stream: return "invalid or destroyed stream";
      case errc::stream_device_mismatch: return "stream, event or memory belongs to another device";
      case errc::invalid_event: return "invalid or destroyed event";
      case errc::event_not_recorded: return "event was never recorded";
      case errc::null_pointer: return "null pointer";
      case errc::invalid_pointer: return "pointer was not allocated by npurt or was already freed";
      case errc::double_free: return "pointer was already freed";
      case errc::zero_size: return "size is zero";
      case errc::size_overflow: return "size exceeds the destination or the device";
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
      case errc::corrupt_file: return "corrupt file: checksum mismatch, truncation or inconsistent layout";
      case errc::out_of_memory: return "out of device memory";
      case errc::pool_limit: return "memory pool size limit reached";
      case errc::resource_exhausted: return "resource exhausted";
      case errc::device_error: return "device error";
      case errc::device_lost: return "device lost; reset it";
      case errc::link_failure: return "link failure";
      case errc::kernel_fault: return "kernel fault";
    }
    return "unknown npurt error " + std::to_string(ev);
  }
  std::error_condition default_error_condition(int ev) const noexcept override {
    return {ev / 100000 == 1 ? 1 : ev / 100000 == 2 ? 2 : 5, error_class_category()};
  }
};

class npurt_class_category final : public std::error_category {
 public:
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

NPURT_DECL const std::error_category& error_category() noexcept {
  static const detail::npurt_category cat;
  return cat;
}

NPURT_DECL const std::error_category& error_class_category() noexcept {
  static const detail::npurt_class_category cat;
  return cat;
}

NPURT_DECL void throw_error(std::error_code ec, std::string_view what) {
  std::string msg{what};
  if (ec == errc::wait_timeout || ec == errc::task_timeout) throw timeout_error(ec, msg);
  if (ec == errc::deadlock) throw deadlock_error(ec, msg);
  if (ec == error_class::resource) throw resource_error(ec, msg);
  if (ec == error_class::device) throw device_error(ec, msg);
  throw caller_error(ec, msg);
}

}  // namespace npurt

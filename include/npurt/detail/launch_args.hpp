// npurt/detail/launch_args.hpp — what an async_launch carries from the call to its initiation.
#pragma once

#include <npurt/detail/runtime.hpp>
#include <npurt/kernel.hpp>

#include <cstdint>
#include <memory>
#include <string_view>
#include <variant>

namespace npurt::detail {

/// A kernel_desc is about 750 bytes and Asio's initiation layers move their arguments several
/// times over; a fixed-cost kernel (the common case in schedules and benchmarks) travels as a
/// few words, any other as one shared copy. The name is interned at once: a deferred launch may
/// start after the caller's string is gone.
struct launch_args {
  kernels::fixed fixed{};
  std::string_view name{};
  std::uint32_t block_dim = 0;
  std::shared_ptr<const kernel_desc> full;  // set unless the op is kernels::fixed

  launch_args(const kernel_desc& k, runtime* rt) : block_dim(k.block_dim) {
    if (rt) name = rt->intern(k.display_name());
    if (const auto* f = std::get_if<kernels::fixed>(&k.op)) {
      fixed = *f;
    } else {
      auto copy = std::make_shared<kernel_desc>(k);
      copy->name = name;
      full = std::move(copy);
    }
  }
};

}  // namespace npurt::detail

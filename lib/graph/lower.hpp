// Lowering a compiled operator to kernels and copies. Private to the graph library.
#pragma once

#include "compiled.hpp"

#include <npurt/kernel.hpp>

#include <functional>
#include <optional>
#include <vector>

namespace npurt {

struct copy_task {
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;
};

struct lowered_task {
  std::optional<kernel_desc> kernel;
  copy_task copy;  ///< a device-to-device copy when there is no kernel
};

/// The work of one step; `ptr(value)` is the value's device address (null: timing-only).
std::vector<lowered_task> lower_step(const cstep& st, const std::vector<cvalue>& values,
                                     const std::function<void*(int)>& ptr);

}  // namespace npurt

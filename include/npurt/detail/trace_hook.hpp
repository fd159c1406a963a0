// npurt/detail/trace_hook.hpp — how a system finds the profiler without including it. The core
// keeps only this pointer; <npurt/profiler.hpp> sets it, so a program that never includes the
// profiler does not compile or link the trace writers, and NPURT_TRACE works in any program that
// does (npurt.hpp includes it).
#pragma once

#include <memory>

namespace npurt {

class observer;
class system;

namespace detail {

/// Makes the profiler that NPURT_TRACE asks for, with the system's clock, or null when the
/// variable is unset. The caller attaches and owns it.
using trace_env_factory = std::unique_ptr<observer> (*)(system&);

inline trace_env_factory trace_from_environment = nullptr;

}  // namespace detail
}  // namespace npurt

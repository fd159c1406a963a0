// npurt/detail/trace_reader.hpp — moved: the trace reader is public, in
// <npurt/profiler/trace_reader.hpp>. Kept so that code including the old path still builds.
#pragma once

#include <npurt/profiler/trace_reader.hpp>

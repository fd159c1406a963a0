// npurt/impl/src_profiler.hpp — the bodies of the profiler, trace tools, memory planner and
// checkpoints, the other part of the separately compiled library (see impl/src_core.hpp).
#pragma once

#if !defined(NPURT_SEPARATE_COMPILATION)
#error "impl/src_profiler.hpp is for the separately compiled library: define NPURT_SEPARATE_COMPILATION"
#endif

#include <npurt/impl/checkpoint.ipp>
#include <npurt/impl/chrome_trace.ipp>
#include <npurt/impl/memplan.ipp>
#include <npurt/impl/profiler.ipp>
#include <npurt/impl/summary.ipp>
#include <npurt/impl/summary_output.ipp>
#include <npurt/impl/svg_timeline.ipp>
#include <npurt/impl/trace_data.ipp>

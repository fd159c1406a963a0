// npurt/impl/src.hpp — include exactly once, in one translation unit, to compile the runtime's
// non-template bodies (lib/ compiles the same bodies in parts). The Asio equivalent is asio/impl/src.hpp.
#pragma once

#if !defined(NPURT_SEPARATE_COMPILATION)
#error "impl/src.hpp is for the separately compiled library: define NPURT_SEPARATE_COMPILATION"
#endif
#define NPURT_BUILDING_LIBRARY 1

#include <npurt/npurt.hpp>

#include <npurt/impl/allocator_arena.ipp>
#include <npurt/impl/allocator_free_index.ipp>
#include <npurt/impl/allocator_release.ipp>
#include <npurt/impl/allocator_stats.ipp>
#include <npurt/impl/caching_allocator.ipp>
#include <npurt/impl/checkpoint.ipp>
#include <npurt/impl/chrome_trace.ipp>
#include <npurt/impl/collective.ipp>
#include <npurt/impl/deadlock_detector.ipp>
#include <npurt/impl/device.ipp>
#include <npurt/impl/error.ipp>
#include <npurt/impl/event.ipp>
#include <npurt/impl/fault.ipp>
#include <npurt/impl/memory.ipp>
#include <npurt/impl/memory_registry.ipp>
#include <npurt/impl/memplan.ipp>
#include <npurt/impl/profiler.ipp>
#include <npurt/impl/runtime.ipp>
#include <npurt/impl/scheduler.ipp>
#include <npurt/impl/segment_provider.ipp>
#include <npurt/impl/stream.ipp>
#include <npurt/impl/summary.ipp>
#include <npurt/impl/summary_output.ipp>
#include <npurt/impl/svg_timeline.ipp>
#include <npurt/impl/system.ipp>
#include <npurt/impl/trace_data.ipp>

// npurt/impl/src_core.hpp — the runtime's core bodies (system, devices, streams, events, memory,
// collectives, faults), one part of the separately compiled library. impl/src.hpp includes both
// parts in one translation unit; lib/ compiles each in its own, side by side. Every impl/*.ipp is
// listed in exactly one part (scripts/check-impl.sh checks it).
#pragma once

#if !defined(NPURT_SEPARATE_COMPILATION)
#error "impl/src_core.hpp is for the separately compiled library: define NPURT_SEPARATE_COMPILATION"
#endif

#include <npurt/impl/allocator_arena.ipp>
#include <npurt/impl/allocator_free_index.ipp>
#include <npurt/impl/allocator_release.ipp>
#include <npurt/impl/allocator_stats.ipp>
#include <npurt/impl/caching_allocator.ipp>
#include <npurt/impl/collective.ipp>
#include <npurt/impl/deadlock_detector.ipp>
#include <npurt/impl/device.ipp>
#include <npurt/impl/error.ipp>
#include <npurt/impl/event.ipp>
#include <npurt/impl/fault.ipp>
#include <npurt/impl/memory.ipp>
#include <npurt/impl/memory_registry.ipp>
#include <npurt/impl/runtime.ipp>
#include <npurt/impl/scheduler.ipp>
#include <npurt/impl/segment_provider.ipp>
#include <npurt/impl/stream.ipp>
#include <npurt/impl/stream_graph.ipp>
#include <npurt/impl/system.ipp>

// The separately compiled runtime, its core (system, devices, streams, events, memory, collectives, faults): every
// non-template body of these files, once. lib/ compiles the runtime in parts that build side by side; impl/src.hpp is
// the one-file way.
#if !defined(NPURT_SEPARATE_COMPILATION)
#error "lib/ is the separately compiled runtime: define NPURT_SEPARATE_COMPILATION"
#endif
#define NPURT_BUILDING_LIBRARY 1
#define NPURT_LIBRARY_PART 1

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
#include <npurt/impl/system.ipp>

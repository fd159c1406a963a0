// npurt/impl/src.hpp — include exactly once, in one translation unit, to compile the runtime's
// non-template bodies (lib/ compiles the same bodies in parts). The Asio equivalent is asio/impl/src.hpp.
#pragma once

#if !defined(NPURT_SEPARATE_COMPILATION)
#error "impl/src.hpp is for the separately compiled library: define NPURT_SEPARATE_COMPILATION"
#endif
#define NPURT_BUILDING_LIBRARY 1

#include <npurt/npurt.hpp>

#include <npurt/impl/src_core.hpp>
#include <npurt/impl/src_profiler.hpp>

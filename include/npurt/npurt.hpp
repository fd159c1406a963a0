// npurt/npurt.hpp — the umbrella header: includes the public components, nothing else.
#pragma once

#include <npurt/backend.hpp>
#include <npurt/checkpoint.hpp>
#include <npurt/collective.hpp>
#include <npurt/collective_types.hpp>
#include <npurt/config.hpp>
#include <npurt/device.hpp>
#include <npurt/error.hpp>
#include <npurt/event.hpp>
#include <npurt/fault.hpp>
#include <npurt/kernel.hpp>
#include <npurt/memory.hpp>
#include <npurt/memplan.hpp>
#include <npurt/numeric.hpp>
#include <npurt/observer.hpp>
#include <npurt/pool_types.hpp>
#include <npurt/profiler.hpp>
#include <npurt/recovery.hpp>
#include <npurt/simple_backend.hpp>
#include <npurt/stream.hpp>
#include <npurt/stream_graph.hpp>
#include <npurt/system.hpp>
#include <npurt/system_options.hpp>
#include <npurt/task.hpp>
#include <npurt/tensor.hpp>
#include <npurt/time.hpp>

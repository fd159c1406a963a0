// npurt/sim/sim.hpp — the simulator's public headers: presets, the cost model, the device model
// and backend.
#pragma once

#include <npurt/sim/backend.hpp>
#include <npurt/sim/cost_model.hpp>
#include <npurt/sim/device_model.hpp>
#include <npurt/sim/preset.hpp>
#include <npurt/sim/topology.hpp>

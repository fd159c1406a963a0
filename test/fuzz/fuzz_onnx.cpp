// libFuzzer target: ONNX import and the graph layer behind it (shape and dtype inference of every
// operator, validation, compilation). Properties, beyond "no crash, no UB, no hang, no huge
// allocation": a model is refused only with npurt's typed errors, each with a message; an
// accepted model validates again, and compiling and running it (timing only) on a small device
// either succeed or are refused with a typed error, never anything else.
//
// The seeds are node models of ONNX's conformance suite (onnx/backend/test/data/node, Apache-2.0),
// one per family of supported operators; the *_constant ones have their test inputs made
// initializers, so that the importer folds them.
#include <npurt/graph/session.hpp>
#include <npurt/onnx.hpp>
#include <npurt/simple_backend.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace {

void check_message(const npurt::error& e) {
  const std::string what = e.what();
  if (what.empty() || !e.code()) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  npurt::graph g("unloaded");
  try {
    g = npurt::onnx::load_from_bytes(bytes, "fuzz");
  } catch (const npurt::error& e) {
    check_message(e);
    return 0;
  }
  std::string why;
  if (g.validate(why)) __builtin_trap();  // load() validated it: a second look must agree
  // Compiling plans memory and lowers every operator to kernels: the device is small, so a
  // model that needs more is a typed out-of-memory, not an allocation of what the file asks.
  npurt::simple_config cfg;
  cfg.properties.memory_bytes = std::size_t{64} << 20;
  cfg.functional = false;
  npurt::system sys{std::make_unique<npurt::simple_backend>(cfg)};
  try {
    npurt::session s{sys};
    auto c = s.compile(g);
    // A timing-only run (the device computes nothing): every output comes back, at a latency
    // that is not negative.
    std::vector<npurt::tensor> values;
    std::vector<npurt::feed> feeds;
    values.reserve(g.inputs().size());
    for (const auto& name : g.inputs()) {
      const auto& v = g.value(name);
      values.push_back(npurt::tensor::timing_only(v.shape, v.type));
    }
    for (std::size_t i = 0; i < values.size(); ++i) feeds.push_back({g.inputs()[i], values[i]});
    const npurt::run_result r = s.run(c, feeds);
    if (r.outputs.size() != g.outputs().size() || r.latency.count() < 0) __builtin_trap();
  } catch (const npurt::error& e) { check_message(e); }
  return 0;
}

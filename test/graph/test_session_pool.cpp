// The session's own stream-ordered caching pool, its allocation strategy, trigger_gc, and
// enable_overlap in run_batches.
#include <npurt/graph/session.hpp>

#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>

using namespace npurt;

namespace {

constexpr std::size_t mib = 1024 * 1024;

// x[4,768] -> MatMul W1[768,1024] -> MatMul W2[1024,768] -> MatMul W3[768,1024]: three weights
// of exactly 3 MiB and a few small buffers.
graph three_weights() {
  graph g("w3");
  auto x = g.add_input("x", {4, 768}, dtype::f32);
  auto w1 = g.add_constant("w1", test::random_tensor({768, 1024}, 31, 0.05));
  auto w2 = g.add_constant("w2", test::random_tensor({1024, 768}, 32, 0.05));
  auto w3 = g.add_constant("w3", test::random_tensor({768, 1024}, 33, 0.05));
  auto h = g.add_op("MatMul", {g.add_op("MatMul", {x, w1}), w2});
  g.set_output(g.add_op("MatMul", {h, w3}, {}, "y"));
  return g;
}

std::size_t reserved_bytes(session& s) {
  return static_cast<std::size_t>(s.pool().stats().reserved_bytes[stat_all].current);
}

}  // namespace

TEST_CASE("a session allocates from its own stream-ordered pool, not the device's", "[graph][memory][pool]") {
  auto sys = test::make_system();
  graph g = three_weights();
  auto st = sys.device(0).make_stream();
  void* p = sys.device(0).mem_pool().malloc_async(4096, st);  // a block of the default pool
  const auto default_before = sys.device(0).mem_pool().stats().allocation[stat_all].current;
  {
    session s{sys};
    auto c = s.compile(g, {.memory_reuse = true, .optimization_level = 1});
    // Three weights, one input, one arena (the output lives in the arena): five blocks.
    CHECK(s.pool().stats().allocation[stat_all].current == 5);
    CHECK(sys.device(0).mem_pool().stats().allocation[stat_all].current == default_before);
    // allocated is what the session asked for; the pool holds at least that.
    const auto u = s.memory_usage();
    CHECK(u.allocated_mb * mib >= 9.0 * mib);
    CHECK(u.reserved_mb * mib == static_cast<double>(reserved_bytes(s)));
    CHECK(u.reserved_mb >= u.allocated_mb);
    auto r = s.run(c, {{"x", test::random_tensor({4, 768}, 34)}});
    CHECK(r.outputs.at("y").shape() == shape{4, 1024});
  }
  // A session's pool going away leaves the device's default pool and its live blocks usable.
  std::vector<float> host(1024, 1.0f);
  std::error_code ec;
  st.memcpy(p, 4096, host.data(), 4096, memcpy_kind::host_to_device, ec);
  CHECK_FALSE(ec);
  st.synchronize();
  sys.device(0).mem_pool().free_async(p, st);
}

TEST_CASE("set_allocation_strategy changes what the session's pool reserves", "[graph][memory][pool]") {
  auto sys = test::make_system();
  graph g = three_weights();
  session seg{sys};
  auto c1 = seg.compile(g, {.optimization_level = 1});
  session comp{sys};
  comp.set_allocation_strategy(allocation_strategy::compact);
  auto c2 = comp.compile(g, {.optimization_level = 1});
  CHECK(seg.memory_usage().allocated_mb == comp.memory_usage().allocated_mb);
  // Segmented (PyTorch's rules): requests of 1-10 MiB share 20 MiB segments (the three 3 MiB
  // weights fit one), requests up to 1 MiB share 2 MiB segments.
  CHECK(reserved_bytes(seg) == 20 * mib + 2 * mib);
  // Compact: one arena for the stream, mapped in 2 MiB granules: 9 MiB and change -> 10 MiB.
  CHECK(reserved_bytes(comp) == 10 * mib);
  CHECK(comp.pool().options().strategy == allocation_strategy::compact);
  // Results do not depend on the strategy.
  const tensor x = test::random_tensor({4, 768}, 35);
  CHECK(seg.run(c1, {{"x", x}}).outputs.at("y").to_vector() == comp.run(c2, {{"x", x}}).outputs.at("y").to_vector());
}

TEST_CASE("a strategy set while the session holds memory applies once it holds none", "[graph][memory][pool]") {
  auto sys = test::make_system();
  graph g = three_weights();
  session s{sys};
  {
    auto c = s.compile(g, {.optimization_level = 1});
    s.set_allocation_strategy(allocation_strategy::compact);
    CHECK(s.pool().options().strategy == allocation_strategy::segmented);  // still in use
  }
  auto c = s.compile(g, {.optimization_level = 1});
  CHECK(s.pool().options().strategy == allocation_strategy::compact);
  CHECK(reserved_bytes(s) == 10 * mib);
}

TEST_CASE("trigger_gc returns the pool's cached memory to the device", "[graph][memory][pool]") {
  auto sys = test::make_system();
  graph g = three_weights();
  session s{sys};
  auto keep = s.compile(g, {.optimization_level = 1});
  const std::size_t held = reserved_bytes(s);
  {
    // Two more copies of the weights do not fit the first 20 MiB segment's free 11 MiB.
    auto tmp1 = s.compile(g, {.optimization_level = 1});
    auto tmp2 = s.compile(g, {.optimization_level = 1});
  }
  // Their blocks were freed but stay cached in the pool.
  CHECK(reserved_bytes(s) > held);
  s.trigger_gc();
  CHECK(reserved_bytes(s) == held);
}

TEST_CASE("enable_overlap copies the next batch in while the current one computes", "[graph][run][overlap]") {
  // Under the default shared execution queue too: the copy streams submit directly, so batch k's
  // copy out (submitted before batch k+1's operators) does not hold them.
  auto sys = test::make_system();
  // Timing-only: a 64 MiB input and a MatMul whose time is of the same order as the copy.
  graph g("ov");
  auto x = g.add_input("x", {8192, 2048}, dtype::f16);
  auto w = g.add_constant("w", tensor::timing_only({2048, 2048}, dtype::f16));
  g.set_output(g.add_op("Relu", {g.add_op("MatMul", {x, w})}, {}, "y"));
  const tensor in = tensor::timing_only({8192, 2048}, dtype::f16);
  const std::vector<std::vector<feed>> batches(4, std::vector<feed>{{"x", in}});
  session plain{sys};
  auto c0 = plain.compile(g);
  session ov{sys};
  ov.enable_overlap();
  auto c1 = ov.compile(g);
  CHECK_FALSE(c0.report().overlap);
  CHECK(c1.report().overlap);
  CHECK(c1.report().streams == c0.report().streams + 2);  // a copy stream in, one out
  // Two input and arena slots: the price of overlap is a second copy of them.
  CHECK(c1.report().io_bytes == 2 * c0.report().io_bytes);
  const auto one = plain.run(c0, batches[0]);
  const auto compute = [&] {
    picoseconds t{0};
    for (const auto& op : one.ops) t += op.busy;
    return t;
  }();
  const picoseconds copies = one.latency - compute;  // copy in, copy out, host overheads
  REQUIRE(copies > picoseconds{0});
  const auto r0 = plain.run_batches(c0, batches);
  const auto r1 = ov.run_batches(c1, batches);
  // Without overlap every batch pays copies and compute in turn.
  CHECK(r0.latency >= 4 * compute + 4 * copies - picoseconds{4 * 1000000});
  // With it, three of the four batches hide most of the shorter of the two.
  const picoseconds hidden = std::min(compute, copies);
  CHECK(r1.latency <= r0.latency - 2 * hidden);
  CHECK(r1.latency >= 4 * compute);
  CHECK(r1.batches_per_second > r0.batches_per_second);
}

TEST_CASE("overlap hides as much under the shared execution queue as with independently dispatched streams",
          "[graph][run][overlap]") {
  // Two operators per batch (the MatMul and, at level 1, its Relu): under a shared queue a copy
  // out waiting for its batch, submitted before the next batch's operators, would hold them.
  graph g("ov");
  auto x = g.add_input("x", {2048, 2048}, dtype::f16);
  auto w = g.add_constant("w", tensor::timing_only({2048, 2048}, dtype::f16));
  g.set_output(g.add_op("Relu", {g.add_op("MatMul", {x, w})}, {}, "y"));
  const tensor in = tensor::timing_only({2048, 2048}, dtype::f16);
  const std::vector<std::vector<feed>> batches(4, std::vector<feed>{{"x", in}});
  auto batches_latency = [&](dispatch_model d) {
    npurt::system sys{sim::presets::ascend910(1), system_options{.dispatch = d}};
    session s{sys};
    s.enable_overlap();
    auto c = s.compile(g, {.optimization_level = 1});
    return s.run_batches(c, batches).latency;
  };
  const picoseconds fifo = batches_latency(dispatch_model::shared_fifo);
  const picoseconds independent = batches_latency(dispatch_model::per_stream);
  CHECK(fifo <= independent + picoseconds{1000000});
}

TEST_CASE("run_batches with overlap gives every batch the outputs of a plain run", "[graph][run][overlap]") {
  auto sys = test::make_system();
  graph g = three_weights();
  session plain{sys};
  auto c0 = plain.compile(g);
  session ov{sys, {.profiling = false}};
  ov.enable_overlap();
  auto c1 = ov.compile(g);
  std::vector<tensor> xs;
  for (std::uint64_t i = 0; i < 5; ++i) xs.push_back(test::random_tensor({4, 768}, 40 + i));
  std::vector<std::vector<feed>> batches;
  for (const auto& x : xs) batches.push_back({{"x", x}});
  const auto r = ov.run_batches(c1, batches);
  REQUIRE(r.outputs.size() == 5);
  for (std::size_t i = 0; i < 5; ++i) {
    INFO("batch " << i);
    CHECK(r.outputs[i].at("y").to_vector() == plain.run(c0, batches[i]).outputs.at("y").to_vector());
  }
  // Consecutive batches really differ (slots are not mixed up by accident).
  CHECK(r.outputs[0].at("y").to_vector() != r.outputs[1].at("y").to_vector());
}

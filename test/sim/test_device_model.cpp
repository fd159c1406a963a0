#include <npurt/sim/backend.hpp>

#include "fake_host.hpp"

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <deque>
#include <string>
#include <tuple>
#include <vector>

using namespace npurt;
using namespace npurt::sim;
using npurt::sim::test::fake_host;
using npurt::sim::test::task_factory;

namespace {

kernel_desc fixed_kernel(std::int64_t ns, std::uint32_t blocks = 0) {
  return kernel_desc{kernels::fixed{picoseconds{ns * 1000}}, "fixed", blocks};
}

kernel_desc add_kernel(std::int64_t elems, std::uint32_t blocks = 0) {
  const tensor_desc t{nullptr, shape{elems}, dtype::f16};
  return kernel_desc{kernels::elementwise{kernels::eltwise_fn::add, t, t, t}, "add", blocks};
}

kernel_desc gemm_kernel(std::int64_t m, std::int64_t n, std::int64_t k, std::uint32_t blocks = 0) {
  return kernel_desc{
      kernels::matmul{
          {nullptr, shape{m, k}, dtype::f16}, {nullptr, shape{k, n}, dtype::f16}, {nullptr, shape{m, n}, dtype::f16}},
      "gemm", blocks};
}

struct rig {
  explicit rig(const preset& p = presets::ascend910(), sim_options o = {}) : be(p, o) {
    host.flush_into(be);
    be.attach(host);
  }
  fake_host host;
  sim_backend be;
  task_factory tasks;
};

}  // namespace

TEST_CASE("a fixed kernel takes its duration plus the launch latency", "[sim][device]") {
  rig r;
  const auto k = fixed_kernel(5000);
  task_info& t = r.tasks.kernel(k);
  r.be.submit(t);
  r.host.run();
  REQUIRE(r.host.done.size() == 1);
  CHECK(t.start == sim_time{});
  CHECK(t.end - t.start == picoseconds{5'000'000} + r.be.config().kernel_launch_latency);
}

TEST_CASE("an uncontended copy costs latency plus bytes over bandwidth, exactly", "[sim][device]") {
  rig r{presets::ascend910(8)};
  const preset& p = r.be.config();
  const std::size_t bytes = 123457;
  // 25 GB/s is 40 ps per byte, 30 GB/s 100/3 ps, 600 GB/s 5/3 ps.
  struct expect {
    engine_kind e;
    device_id src, dst;
    picoseconds time;
  };
  const std::vector<expect> cases{
      {engine_kind::copy_h2d, -1, 0, p.pcie_latency + picoseconds{bytes * 40}},
      {engine_kind::copy_d2h, 0, -1, p.pcie_latency + picoseconds{bytes * 40}},
      {engine_kind::copy_d2d, 0, 0, p.d2d_latency + picoseconds{(bytes * 5 + 2) / 3}},
      {engine_kind::copy_d2d, 0, 3, p.hccs_latency + picoseconds{(bytes * 100 + 2) / 3}},  // same HCCS group
      {engine_kind::copy_d2d, 0, 5, p.pcie_latency + picoseconds{bytes * 40}},             // across groups: PCIe
  };
  for (const auto& c : cases) {
    task_info& t = r.tasks.copy(c.e, bytes, c.src, c.dst, c.src < 0 ? c.dst : c.src);
    r.be.submit(t);
    r.host.run();
    CHECK(t.end - t.start == c.time);
    CHECK(copy_time(p, task_kind::memcpy, t.copy, t.engine) == c.time);
  }
}

TEST_CASE("copies over the same link share its bandwidth", "[sim][device]") {
  preset p = presets::ascend910(8);
  p.copy_engine_channels = 2;
  rig r{p};
  const std::size_t bytes = 30'000'000;  // 1 ms at 30 GB/s
  task_info& a = r.tasks.copy(engine_kind::copy_d2d, bytes, 0, 1);
  task_info& b = r.tasks.copy(engine_kind::copy_d2d, bytes, 0, 1);
  task_info& c = r.tasks.copy(engine_kind::copy_d2d, bytes, 2, 3, 2);  // another link: unaffected
  r.be.submit(a);
  r.be.submit(b);
  r.be.submit(c);
  r.host.run();
  const picoseconds solo = p.hccs_latency + transfer_time(static_cast<double>(bytes), p.hccs_bandwidth);
  CHECK(c.end - c.start == solo);
  // Both share 30 GB/s for their whole transfer: each takes twice the transfer time.
  const picoseconds shared = p.hccs_latency + transfer_time(2.0 * bytes, p.hccs_bandwidth);
  CHECK(std::abs((a.end - a.start - shared).count()) <= 2);
  CHECK(std::abs((b.end - b.start - shared).count()) <= 2);
}

TEST_CASE("two memory-bound kernels at once each run slower than alone", "[sim][device]") {
  const auto k1 = add_kernel(1 << 26, 16);
  const auto k2 = add_kernel(1 << 26, 16);
  rig alone;
  task_info& solo = alone.tasks.kernel(k1);
  alone.be.submit(solo);
  alone.host.run();
  const picoseconds t_alone = solo.end - solo.start;
  CHECK(t_alone == estimate(alone.be.config(), k1, 16).total);

  rig both;
  task_info& a = both.tasks.kernel(k1);
  task_info& b = both.tasks.kernel(k2);
  both.be.submit(a);
  both.be.submit(b);
  both.host.run();
  CHECK(a.start == b.start);  // side by side: 16 + 16 cores of 32
  CHECK(a.end - a.start > t_alone);
  CHECK(b.end - b.start > t_alone);
  // Together they cannot move their bytes faster than the HBM does.
  const double bytes = 2.0 * 3 * (1 << 26) * 2;
  CHECK(to_us(a.end - a.start) * 1e-6 >= bytes / both.be.config().hbm_bandwidth);
  auto x = both.be.explain(a.id);
  REQUIRE(x);
  CHECK(x->contention > picoseconds{0});
}

TEST_CASE("compute-bound kernels side by side do not slow each other", "[sim][device]") {
  const auto k1 = gemm_kernel(2048, 2048, 2048, 16);
  const auto k2 = gemm_kernel(2048, 2048, 2048, 16);
  rig r;
  task_info& a = r.tasks.kernel(k1);
  task_info& b = r.tasks.kernel(k2);
  r.be.submit(a);
  r.be.submit(b);
  r.host.run();
  const picoseconds solo = estimate(r.be.config(), k1, 16).total;
  CHECK(a.end - a.start == solo);
  CHECK(b.end - b.start == solo);
}

TEST_CASE("ready kernels wait for cores in priority order, then by task id", "[sim][device]") {
  rig r;
  const auto blocker = fixed_kernel(1000);
  const auto k = fixed_kernel(10);
  task_info& first = r.tasks.kernel(blocker, 4);
  r.be.submit(first);
  r.host.settle();  // dispatched before the others arrive
  std::vector<task_info*> waiting;
  for (std::uint8_t prio : {5, 1, 3, 1, 7, 0}) {
    waiting.push_back(&r.tasks.kernel(k, prio));
    r.be.submit(*waiting.back());
  }
  r.host.run();
  std::vector<std::uint64_t> order;
  for (const auto& c : r.host.done) order.push_back(c.id);
  // Blocker first, then priority 0, the two priority 1s by id, 3, 5, 7.
  const std::vector<std::uint64_t> expected{first.id,       waiting[5]->id, waiting[1]->id, waiting[3]->id,
                                            waiting[2]->id, waiting[0]->id, waiting[4]->id};
  CHECK(order == expected);
  // Non-preemptive and one at a time (each takes all cores): back to back.
  for (std::size_t i = 1; i < r.host.done.size(); ++i) CHECK(r.host.done[i].start == r.host.done[i - 1].end);
}

TEST_CASE("kernels that reach a busy engine out of id order still start by priority, then id", "[sim][device]") {
  rig r;
  const auto blocker = fixed_kernel(1000);
  const auto k = fixed_kernel(10);
  task_info& first = r.tasks.kernel(blocker, 4);
  r.be.submit(first);
  r.host.settle();  // dispatched before the others arrive
  // Ids in creation order; submitted as 7i mod 40 (a permutation mixing rising runs with
  // stragglers that arrive after larger ids), over four priorities.
  std::vector<task_info*> made;
  for (int i = 0; i < 40; ++i) made.push_back(&r.tasks.kernel(k, static_cast<std::uint8_t>((i * 3) % 4)));
  for (int i = 0; i < 40; ++i) r.be.submit(*made[static_cast<std::size_t>((i * 7) % 40)]);
  r.host.run();
  std::vector<std::pair<std::uint8_t, std::uint64_t>> expected;
  for (const task_info* t : made) expected.emplace_back(t->priority, t->id);
  std::sort(expected.begin(), expected.end());
  REQUIRE(r.host.done.size() == 41);
  CHECK(r.host.done[0].id == first.id);
  for (std::size_t i = 1; i < r.host.done.size(); ++i) {
    CHECK(r.host.done[i].id == expected[i - 1].second);
    CHECK(r.host.done[i].start == r.host.done[i - 1].end);
  }
}

TEST_CASE("kernels that fit the free cores run side by side", "[sim][device]") {
  rig r;
  const auto k16 = fixed_kernel(100, 16);
  const auto k8 = fixed_kernel(100, 8);
  const auto k32 = fixed_kernel(100, 0);
  task_info& a = r.tasks.kernel(k16);
  task_info& b = r.tasks.kernel(k8);
  task_info& c = r.tasks.kernel(k8);
  task_info& d = r.tasks.kernel(k32);
  task_info& e = r.tasks.kernel(k8);  // behind d: the head of the queue is never overtaken
  for (task_info* t : {&a, &b, &c, &d, &e}) r.be.submit(*t);
  r.host.run();
  CHECK(a.start == sim_time{});
  CHECK(b.start == sim_time{});
  CHECK(c.start == sim_time{});
  CHECK(d.start == a.end);
  CHECK(e.start == d.end);
}

TEST_CASE("copy engines run beside the AI cores", "[sim][device]") {
  rig r;
  const auto k = fixed_kernel(1000);
  task_info& kt = r.tasks.kernel(k);
  task_info& h2d = r.tasks.copy(engine_kind::copy_h2d, 1 << 20, -1, 0);
  task_info& h2d2 = r.tasks.copy(engine_kind::copy_h2d, 1 << 20, -1, 0);
  r.be.submit(kt);
  r.be.submit(h2d);
  r.be.submit(h2d2);
  r.host.run();
  CHECK(h2d.start == sim_time{});
  CHECK(h2d2.start == h2d.end);  // one channel per copy engine
  CHECK(kt.start == sim_time{});
}

TEST_CASE("link transfers are reported to the tracer", "[sim][device]") {
  struct rec : observer {
    std::vector<link_transfer_info> seen;
    void on_link_transfer(const link_transfer_info& i) override { seen.push_back(i); }
  } obs;
  rig r{presets::ascend910(8)};
  r.host.set_tracer(&obs);
  task_info& a = r.tasks.copy(engine_kind::copy_h2d, 4096, -1, 2, 2);
  task_info& b = r.tasks.copy(engine_kind::copy_d2d, 4096, 1, 2, 1);
  r.be.submit(a);
  r.be.submit(b);
  r.host.run();
  REQUIRE(obs.seen.size() == 2);
  // HCCS has the lower latency: b finishes first.
  CHECK(obs.seen[0].link == "hccs");
  CHECK(obs.seen[0].src == 1);
  CHECK(obs.seen[0].end == b.end);
  CHECK(obs.seen[1].link == "pcie");
  CHECK(obs.seen[1].src == -1);
  CHECK(obs.seen[1].dst == 2);
  CHECK(obs.seen[1].bytes == 4096);
  CHECK(obs.seen[1].end == a.end);
}

TEST_CASE("validate rejects what cannot run on the preset", "[sim][device]") {
  rig r;
  CHECK_FALSE(r.be.validate(0, gemm_kernel(64, 64, 64, 32)));
  CHECK(r.be.validate(0, gemm_kernel(64, 64, 64, 33)) == errc::invalid_argument);
  CHECK(r.be.validate(1, gemm_kernel(64, 64, 64)) == errc::invalid_device);
#if __has_include(<npurt/sim/reference_kernels.hpp>)
  const tensor_desc t{nullptr, shape{64, 64}, dtype::bf16};
  const kernel_desc bf{kernels::matmul{t, t, t}};
  CHECK(r.be.validate(0, bf) == errc::invalid_dtype);
  rig b{presets::ascend910b()};
  CHECK_FALSE(b.be.validate(0, bf));
#endif
}

TEST_CASE("explain() gives the breakdown of a finished kernel", "[sim][device]") {
  rig r;
  const auto g = gemm_kernel(4096, 4096, 4096);
  task_info& t = r.tasks.kernel(g);
  r.be.submit(t);
  r.host.run();
  auto x = r.be.explain(t.id);
  REQUIRE(x);
  CHECK(x->cost.bound == unit::cube);
  CHECK(x->cost.cores == 32);
  CHECK(x->cost.tiles > 0);
  CHECK(x->contention == picoseconds{0});
  CHECK(x->end - x->start == x->cost.total);
  CHECK(x->body_start - x->start == r.be.config().kernel_launch_latency);
  CHECK(t.flops == 2ull * 4096 * 4096 * 4096);
  CHECK_FALSE(r.be.explain(t.id + 100));
}

TEST_CASE("the same tasks give the same timeline, always", "[sim][device]") {
  auto run = [] {
    rig r{presets::ascend910(8)};
    std::deque<kernel_desc> ks;
    std::vector<std::tuple<std::uint64_t, std::int64_t, std::int64_t>> out;
    for (int i = 0; i < 40; ++i) {
      const std::uint32_t blocks = (i % 3 == 0) ? 0u : 8u * (1 + i % 4);
      ks.push_back(i % 2 ? add_kernel(1000 + 977 * i, blocks) : gemm_kernel(64 + 32 * i, 128 + 16 * i, 256, blocks));
      r.be.submit(r.tasks.kernel(ks.back(), static_cast<std::uint8_t>(i % 8), i % 2));
      r.be.submit(r.tasks.copy(engine_kind::copy_d2d, 1 << (10 + i % 8), i % 2, (i + 1) % 4, i % 2));
    }
    r.host.run();
    for (const auto& c : r.host.done)
      out.emplace_back(c.id, c.start.time_since_epoch().count(), c.end.time_since_epoch().count());
    return out;
  };
  const auto a = run();
  const auto b = run();
  CHECK(a.size() == 80);
  CHECK(a == b);
}

#if __has_include(<npurt/sim/reference_kernels.hpp>)
TEST_CASE("a functional kernel computes its result when it starts", "[sim][device]") {
  rig r;
  float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, c[4] = {};
  const kernel_desc k{
      kernels::matmul{{a, shape{2, 2}, dtype::f32}, {b, shape{2, 2}, dtype::f32}, {c, shape{2, 2}, dtype::f32}}};
  REQUIRE_FALSE(r.be.validate(0, k));
  task_info& t = r.tasks.kernel(k);
  r.be.submit(t);
  r.host.run();
  REQUIRE(r.host.done.size() == 1);
  CHECK_FALSE(r.host.done[0].ec);
  CHECK(c[0] == 19);
  CHECK(c[1] == 22);
  CHECK(c[2] == 43);
  CHECK(c[3] == 50);
}
#endif

TEST_CASE("a task for a device the preset does not have fails with invalid_device", "[sim][device]") {
  rig r;
  const auto k = fixed_kernel(10);
  task_info& a = r.tasks.kernel(k, 4, 3);
  task_info& b = r.tasks.copy(engine_kind::copy_d2d, 64, 0, 5);
  r.be.submit(a);
  r.be.submit(b);
  r.host.run();
  REQUIRE(r.host.done.size() == 2);
  CHECK(r.host.done[0].ec == errc::invalid_device);
  CHECK(r.host.done[1].ec == errc::invalid_device);
  // And the device is still usable.
  task_info& c = r.tasks.kernel(k);
  r.be.submit(c);
  r.host.run();
  CHECK_FALSE(r.host.done.back().ec);
}

TEST_CASE("tasks that arrive in one instant start by priority; a host without flush starts each at once",
          "[sim][device]") {
  // Each takes every core, so only one runs at a time and the start order is visible.
  const auto k = fixed_kernel(100);
  auto order_of = [&](fake_host& host, sim_backend& be) {
    task_factory tasks;
    std::vector<task_info*> made;
    for (std::uint8_t prio : {6, 2, 4}) {
      made.push_back(&tasks.kernel(k, prio));
      be.submit(*made.back());
    }
    host.run();
    std::vector<std::uint64_t> ids;
    for (const auto& c : host.done) ids.push_back(c.id);
    return std::tuple{ids, std::vector<std::uint64_t>{made[0]->id, made[1]->id, made[2]->id}};
  };
  SECTION("the system's host: the backend decides at the end of the instant") {
    fake_host host;
    sim_backend be{presets::ascend910(), {}};
    host.flush_into(be);
    be.attach(host);
    const auto [ids, made] = order_of(host, be);
    CHECK(ids == std::vector<std::uint64_t>{made[1], made[2], made[0]});  // priority 2, 4, 6
  }
  SECTION("a host that never flushes: the first to arrive takes the engine") {
    fake_host host{fake_host::unbuffered};
    sim_backend be{presets::ascend910(), {}};
    host.flush_into(be);  // ignored: this host never calls flush()
    be.attach(host);
    const auto [ids, made] = order_of(host, be);
    CHECK(ids == std::vector<std::uint64_t>{made[0], made[1], made[2]});  // 6 first, then 2, 4
  }
}

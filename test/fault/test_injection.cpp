// Fault injection and detection: every fault kind is injected where the plan says, reaches the
// stream, the awaiting handler and the exception callbacks as the right typed error, and leaves
// the device in the right status.
#include "common.hpp"

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <cmath>

using namespace fault_test;
using npurt::errc;
using npurt::fault_plan;
using npurt::fault_spec;

namespace {

const picoseconds launch_latency = npurt::sim::presets::ascend910(1).kernel_launch_latency;

// Runs `check` on what s.synchronize() throws as E; fails with `missing` when it throws nothing.
template <class E, class Check>
void check_sync_throws(npurt::stream& s, const char* missing, Check check) {
  try {
    s.synchronize();
    FAIL(missing);
  } catch (const E& e) { check(e); }
}

// Launches one kernel on `s` and synchronizes: what the synchronize reported.
std::error_code launch_and_sync(npurt::stream& s, picoseconds d, const char* name) {
  (void)s.launch(fixed_kernel(d, name));
  std::error_code ec;
  s.synchronize(npurt::no_timeout, ec);
  return ec;
}

}  // namespace

TEST_CASE("an AI core exception fails the Nth task of a stream and reaches the sync, the handler and the callback",
          "[fault][injection][aicore]") {
  npurt::system probe{npurt::sim::presets::ascend910(1)};
  auto s0 = probe.device(0).make_stream();
  const std::uint32_t sid = s0.id();  // stream ids are deterministic: the same in the next system

  npurt::system sys{preset(1, fault_plan{}.add(fault_spec::aicore_exception(0).at_task(sid, 3)))};
  auto& faults = npurt::sim::faults_of(sys);
  std::vector<npurt::exception_info> seen;
  faults.add_exception_callback([&](const npurt::exception_info& i) { seen.push_back(i); });
  recorder rec;
  sys.add_observer(rec);
  auto s = sys.device(0).make_stream();
  REQUIRE(s.id() == sid);
  for (int i = 1; i <= 5; ++i) (void)s.launch(fixed_kernel(ms(1), numbered("k", i)));
  check_sync_throws<npurt::device_error>(s, "the failed kernel was not reported", [](const auto& e) {
    CHECK(e.code() == errc::kernel_fault);
    CHECK(e.status() == npurt::device_status::healthy);  // an exception does not lose the device
    CHECK_THAT(e.what(), Catch::Matchers::ContainsSubstring("k3"));
  });
  const task_row* k3 = rec.named("k3");
  REQUIRE(k3 != nullptr);
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].device == 0);
  CHECK(seen[0].stream == sid);
  CHECK(seen[0].task == k3->id);
  CHECK(seen[0].error == errc::kernel_fault);
  CHECK(faults.injected().size() == 1);
  CHECK(faults.injected()[0].task == k3->id);
  // The stream goes on (continue-on-failure): k4 and k5 ran after k3.
  REQUIRE(rec.named("k5") != nullptr);
  CHECK(rec.named("k5")->start >= k3->end);
  // An awaited launch after that hears of its own outcome only.
  std::error_code got = make_error_code(errc::invalid_argument);
  s.async_launch(fixed_kernel(ms(1), "k6"), [&](npurt::async_error_code ec) { got = ec; });
  sys.run();
  CHECK(!got);
  CHECK(faults.status(0) == npurt::device_status::healthy);
}

TEST_CASE("a hanging kernel is ended by the op-execute watchdog at exactly the preset's 68 s",
          "[fault][injection][hang][timeout]") {
  npurt::system sys{preset(1, fault_plan{}.add(fault_spec::kernel_hang(0).at_time(at(ms(5)))))};
  auto& faults = npurt::sim::faults_of(sys);
  REQUIRE(faults.op_execute_timeout() == sec(68));
  recorder rec;
  sys.add_observer(rec);
  auto s = sys.device(0).make_stream();
  (void)s.launch(fixed_kernel(ms(10), "before"));  // starts at ~0: the fault is not armed yet
  (void)s.launch(fixed_kernel(ms(1), "hung"));      // the first kernel at or after 5 ms
  std::error_code awaited;
  s.async_launch(fixed_kernel(ms(1), "after"), [&](npurt::async_error_code ec) { awaited = ec; });
  check_sync_throws<npurt::timeout_error>(s, "the hang was not reported", [](const auto& e) {
    CHECK(e.code() == errc::task_timeout);
    CHECK(e.timer() == npurt::timeout_kind::op_execute);
    CHECK_THAT(e.what(), Catch::Matchers::ContainsSubstring("hung"));
  });
  const task_row* hung = rec.named("hung");
  REQUIRE(hung != nullptr);
  CHECK(hung->end - hung->start == sec(68));
  CHECK(!awaited);  // the next kernel ran once the watchdog freed the stream
  REQUIRE(rec.named("after") != nullptr);
  CHECK(rec.named("after")->start >= hung->end);

  SECTION("a shorter watchdog fires sooner") {
    npurt::system sys2{preset(1, fault_plan{}.add(fault_spec::kernel_hang(0).at_time(at(ms(0)))))};
    npurt::sim::faults_of(sys2).set_op_execute_timeout(sec(2));
    recorder rec2;
    sys2.add_observer(rec2);
    auto s2 = sys2.device(0).make_stream();
    CHECK(launch_and_sync(s2, ms(1), "hung") == errc::task_timeout);
    CHECK(rec2.rows.at(0).end - rec2.rows.at(0).start == sec(2));
  }
}

TEST_CASE("a hung kernel holds its AI cores until the watchdog ends it: the device's next kernel waits",
          "[fault][injection][hang][timeout]") {
  npurt::system probe{npurt::sim::presets::ascend910(1)};
  const std::uint32_t sid = probe.device(0).make_stream().id();
  npurt::system sys{preset(1, fault_plan{}.add(fault_spec::kernel_hang(0).at_task(sid, 1)))};
  npurt::sim::faults_of(sys).set_op_execute_timeout(ms(100));
  recorder rec;
  sys.add_observer(rec);
  auto s = sys.device(0).make_stream();
  auto other = sys.device(0).make_stream();
  REQUIRE(s.id() == sid);
  // Both take every AI core (block_dim 0): without the hang, "next" starts when "hung" ends.
  (void)s.launch(fixed_kernel(ms(1), "hung"));
  (void)other.launch(fixed_kernel(ms(1), "next"));
  sys.run();
  const task_row* hung = rec.named("hung");
  const task_row* next = rec.named("next");
  REQUIRE(hung != nullptr);
  REQUIRE(next != nullptr);
  CHECK(hung->end - hung->start == ms(100));
  // The watchdog frees the cores at start + limit; the kernel queued behind runs from then on,
  // for the launch latency plus its 1 ms.
  CHECK(next->start == hung->end);
  CHECK(next->end - next->start == launch_latency + ms(1));
  std::error_code ec;
  s.synchronize(ec);
  CHECK(ec == errc::task_timeout);
  other.synchronize(ec);
  CHECK(!ec);

  SECTION("a hung kernel with a descriptor reports that descriptor, not the stand-in that held its cores") {
    npurt::system sys2{preset(1, fault_plan{}.add(fault_spec::kernel_hang(0).at_task(sid, 1)))};
    npurt::sim::faults_of(sys2).set_op_execute_timeout(ms(100));
    struct seen final : npurt::observer {
      void on_task(const npurt::task_info& t) override {
        if (t.kind == npurt::task_kind::kernel) kernels.push_back(t.kernel);
      }
      std::vector<const npurt::kernel_desc*> kernels;
    } obs;
    sys2.add_observer(obs);
    auto s2 = sys2.device(0).make_stream();
    npurt::device_buffer x(sys2.device(0), 64 * sizeof(float)), y(sys2.device(0), 64 * sizeof(float));
    const npurt::shape shp{64};
    const npurt::kernels::elementwise relu{
        npurt::kernels::eltwise_fn::relu, {x.data(), shp, npurt::dtype::f32}, {}, {y.data(), shp, npurt::dtype::f32}};
    (void)s2.launch(relu);
    s2.synchronize(ec);
    CHECK(ec == errc::task_timeout);
    REQUIRE(obs.kernels.size() == 1);
    CHECK(obs.kernels[0] != nullptr);
  }
}

TEST_CASE("a hung vector kernel holds vector cores only: a cube kernel beside it runs", "[fault][injection][hang]") {
  // ascend910b separates cube (AIC) and vector (AIV) cores: a hung elementwise kernel holds the
  // vector cores, and a matmul of another stream runs on the cube cores meanwhile.
  npurt::system probe{npurt::sim::presets::ascend910b(1)};
  const std::uint32_t sid = probe.device(0).make_stream().id();
  npurt::system sys{npurt::sim::with_faults(npurt::sim::presets::ascend910b(1),
                                            fault_plan{}.add(fault_spec::kernel_hang(0).at_task(sid, 1)))};
  npurt::sim::faults_of(sys).set_op_execute_timeout(ms(100));
  recorder rec;
  sys.add_observer(rec);
  auto vec = sys.device(0).make_stream();
  auto cube = sys.device(0).make_stream();
  REQUIRE(vec.id() == sid);
  auto& dev = sys.device(0);
  constexpr std::int64_t n = 64;
  npurt::device_buffer x(dev, n * n * 2), y(dev, n * n * 2), z(dev, n * n * 2);
  const npurt::shape sq{n, n};
  const npurt::tensor_desc tx{x.data(), sq, npurt::dtype::f16}, ty{y.data(), sq, npurt::dtype::f16},
      tz{z.data(), sq, npurt::dtype::f16};
  const npurt::kernels::elementwise relu{npurt::kernels::eltwise_fn::relu, tx, {}, ty};
  npurt::kernels::matmul mm;
  mm.a = tx;
  mm.b = tx;
  mm.c = tz;
  (void)vec.launch(npurt::kernel_desc{relu, "hung", 0});
  (void)cube.launch(npurt::kernel_desc{mm, "mm", 0});
  sys.run();
  const task_row* hung = rec.named("hung");
  const task_row* matmul = rec.named("mm");
  REQUIRE(hung != nullptr);
  REQUIRE(matmul != nullptr);
  CHECK(hung->end - hung->start == ms(100));
  CHECK(matmul->end < hung->end);  // it did not wait for the watchdog
}

TEST_CASE("an uncorrectable ECC error in a region loses the device until it is reset",
          "[fault][injection][ecc][lost]") {
  constexpr std::size_t n = 4096;
  // Each system has its own device address space, and a damaged region is an offset range in it:
  // the probe's second allocation names the region that the second allocation of sys falls in.
  npurt::system probe{npurt::sim::presets::ascend910(1)};
  void* first = probe.device(0).malloc(n);
  void* second = probe.device(0).malloc(n);

  npurt::system sys{preset(1, fault_plan{}.add(fault_spec::hbm_ecc(0, second, n).at_time(at(ms(0)))))};
  auto& faults = npurt::sim::faults_of(sys);
  auto& dev = sys.device(0);
  void* a = dev.malloc(n);
  void* b = dev.malloc(n);
  REQUIRE(a != first);  // another system's address
  REQUIRE(b != second);
  auto s = dev.make_stream();
  std::vector<std::byte> host(n, std::byte{7});
  (void)s.memcpy(a, n, host.data(), n);  // outside the damaged region: fine
  s.synchronize();
  CHECK(faults.status(0) == npurt::device_status::healthy);
  (void)s.memcpy(b, n, host.data(), n);  // touches it
  check_sync_throws<npurt::device_error>(s, "the ECC error was not reported", [](const auto& e) {
    CHECK(e.code() == errc::hbm_ecc_error);
    CHECK(e.status() == npurt::device_status::lost);
  });
  CHECK(faults.status(0) == npurt::device_status::lost);
  // Every later call fails with device_lost: launches, at the call...
  std::error_code ec;
  (void)s.launch(fixed_kernel(ms(1), "later"), ec);
  CHECK(ec == errc::device_lost);
  CHECK_THROWS_AS((void)s.launch(fixed_kernel(ms(1), "later")), npurt::device_error);
  // ...copies, at the call too...
  (void)s.memcpy(a, n, host.data(), n, npurt::memcpy_kind::host_to_device, ec);
  CHECK(ec == errc::device_lost);
  CHECK_THROWS_AS((void)s.memcpy(a, n, host.data(), n), npurt::device_error);
  // ...and allocations.
  CHECK_THROWS_AS((void)dev.malloc(n), npurt::device_error);
  dev.reset();
  CHECK(faults.status(0) == npurt::device_status::healthy);
  auto s2 = dev.make_stream();
  void* c = dev.malloc(n);
  (void)s2.memcpy(c, n, host.data(), n);
  s2.synchronize();  // repaired: no error
}

TEST_CASE("a device that stops answering is noticed by the heartbeat monitor within one interval",
          "[fault][injection][heartbeat][detection]") {
  const sim_time silent_at = at(ms(2500));
  const fault_plan silence = fault_plan{}.add(fault_spec::lost_heartbeat(0).at_time(silent_at));
  SECTION("with the monitor, at the first tick after the silence") {
    npurt::system sys{preset(1, silence)};
    auto& faults = npurt::sim::faults_of(sys);
    faults.enable_fault_detection(sec(1));
    recorder rec;
    sys.add_observer(rec);
    auto s = sys.device(0).make_stream();
    CHECK(launch_and_sync(s, sec(10), "long") == errc::lost_heartbeat);
    REQUIRE(rec.rows.size() == 1);
    CHECK(rec.rows[0].end == at(sec(3)));  // 2.5 s + at most one interval, on the tick
    CHECK(rec.rows[0].end - silent_at <= sec(1));
    CHECK(faults.status(0) == npurt::device_status::lost);
    std::error_code ec;
    (void)s.launch(fixed_kernel(ms(1), "later"), ec);
    CHECK(ec == errc::device_lost);
  }
  SECTION("without it, the op-execute watchdog reports the silent task") {
    npurt::system sys{preset(1, silence)};
    recorder rec;
    sys.add_observer(rec);
    auto s = sys.device(0).make_stream();
    CHECK(launch_and_sync(s, sec(10), "long") == errc::task_timeout);
    REQUIRE(rec.rows.size() == 1);
    CHECK(rec.rows[0].end - rec.rows[0].start == sec(68));
    CHECK(npurt::sim::faults_of(sys).status(0) == npurt::device_status::lost);
  }
}

TEST_CASE("a transient out-of-memory refuses the next allocations and then clears", "[fault][injection][oom]") {
  npurt::system sys{preset(1, fault_plan{}.add(fault_spec::transient_oom(0, 2).at_time(at(ms(0)))))};
  auto& dev = sys.device(0);
  const std::size_t total = dev.properties().memory_bytes;
  for (int i = 0; i < 2; ++i) {
    try {
      (void)dev.malloc(1 << 20);
      FAIL("the allocation was not refused");
    } catch (const npurt::out_of_memory_error& e) {
      CHECK(e.code() == errc::out_of_memory);
      CHECK(e.details().total == total);
      CHECK(e.details().free == total);  // nothing is allocated: the shortage is transient
      // The message says so, rather than reading as a full device.
      CHECK(std::string(e.what()).find("a refusal not for lack of memory") != std::string::npos);
    }
  }
  void* p = dev.malloc(1 << 20);
  CHECK(p != nullptr);
  CHECK(npurt::sim::faults_of(sys).injected().size() == 1);
}

TEST_CASE("a pool refused by a transient out-of-memory says the device had room, not that it was full",
          "[fault][injection][oom][pool]") {
  // With nothing cached, the pool's retry chain asks the device twice (first, then after
  // synchronising and freeing everything): two refusals reach the caller.
  npurt::system sys{preset(1, fault_plan{}.add(fault_spec::transient_oom(0, 2).at_time(at(ms(0)))))};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  const std::size_t total = dev.properties().memory_bytes;
  try {
    (void)dev.mem_pool().malloc_async(4096, s);
    FAIL("the allocation was not refused");
  } catch (const npurt::out_of_memory_error& e) {
    CHECK(e.code() == errc::out_of_memory);
    CHECK(e.details().free == total);
    const std::string m = e.what();
    // A small request takes a 2 MiB segment of the small pool.
    CHECK(m.find("The device refused a new 2.00 MiB segment although 32.00 GiB is free: a refusal not for lack "
                 "of memory") != std::string::npos);
  }
  void* p = dev.mem_pool().malloc_async(4096, s);  // the fault has cleared
  CHECK(p != nullptr);
  dev.mem_pool().free_async(p, s);
}

TEST_CASE("thermal throttling stretches the device's tasks by its factor while it lasts",
          "[fault][injection][throttle]") {
  const picoseconds k = ms(3);
  npurt::system sys{preset(2, fault_plan{}.add(fault_spec::thermal_throttle(1, 2.5, ms(20)).at_time(at(ms(0)))))};
  auto& faults = npurt::sim::faults_of(sys);
  recorder rec;
  sys.add_observer(rec);
  auto s0 = sys.device(0).make_stream();
  auto s1 = sys.device(1).make_stream();
  (void)s0.launch(fixed_kernel(k, "cool"));
  (void)s1.launch(fixed_kernel(k, "hot"));
  sys.run();
  CHECK(faults.status(1) == npurt::device_status::throttled);  // the 20 ms window is still open
  CHECK(faults.status(0) == npurt::device_status::healthy);
  const picoseconds base = k + launch_latency;
  REQUIRE(rec.named("cool") != nullptr);
  REQUIRE(rec.named("hot") != nullptr);
  CHECK(rec.named("cool")->end - rec.named("cool")->start == base);
  CHECK(rec.named("hot")->end - rec.named("hot")->start == picoseconds{base.count() * 5 / 2});
  // After the window, full speed again.
  while (sys.now() < at(ms(25))) (void)s1.launch(fixed_kernel(ms(5), "filler")), sys.run();
  (void)s1.launch(fixed_kernel(k, "cooled"));
  sys.run();
  CHECK(rec.named("cooled")->end - rec.named("cooled")->start == base);
}

TEST_CASE("a throttled kernel holds its AI cores for its stretched time: the device's next kernel waits",
          "[fault][injection][throttle]") {
  const picoseconds k = ms(10);
  npurt::system sys{preset(1, fault_plan{}.add(fault_spec::thermal_throttle(0, 2.0, ms(100)).at_time(at(ms(0)))))};
  recorder rec;
  sys.add_observer(rec);
  auto s = sys.device(0).make_stream();
  auto other = sys.device(0).make_stream();
  // Both take every AI core (block_dim 0), so they run one after the other.
  (void)s.launch(fixed_kernel(k, "first"));
  (void)other.launch(fixed_kernel(k, "second"));
  sys.run();
  const task_row* first = rec.named("first");
  const task_row* second = rec.named("second");
  REQUIRE(first != nullptr);
  REQUIRE(second != nullptr);
  const picoseconds base = k + launch_latency;
  CHECK(first->end - first->start == 2 * base);
  CHECK(second->start == first->end);  // not once the unthrottled kernel would have ended
  CHECK(second->end - second->start == 2 * base);

  SECTION("a throttled copy holds its channel for its stretched time") {
    constexpr std::size_t n = 1 << 24;
    npurt::system cool{npurt::sim::presets::ascend910(1)};
    npurt::system hot{preset(1, fault_plan{}.add(fault_spec::thermal_throttle(0, 2.0, sec(1)).at_time(at(ms(0)))))};
    std::vector<std::byte> host(n);
    auto copy_span = [&](npurt::system& y) {
      recorder r;
      y.add_observer(r);
      npurt::device_buffer b(y.device(0), n);
      auto s1 = y.device(0).make_stream();
      auto s2 = y.device(0).make_stream();
      (void)s1.memcpy(b.data(), n, host.data(), n, npurt::memcpy_kind::host_to_device);
      (void)s2.memcpy(b.data(), n, host.data(), n, npurt::memcpy_kind::host_to_device);
      y.run();
      y.remove_observer(r);
      REQUIRE(r.rows.size() == 2);
      return std::pair{r.rows[0], r.rows[1]};
    };
    const auto [c1, c2] = copy_span(cool);
    const auto [h1, h2] = copy_span(hot);
    // Alone on the channel, a copy at half the bandwidth with twice the latency takes twice as
    // long (to the picosecond rounding of each phase).
    const auto alone = (c1.end - c1.start).count();
    CHECK(std::abs((h1.end - h1.start).count() - 2 * alone) <= 2);
    CHECK(h2.start >= h1.end);
  }
}

TEST_CASE("a throttled rank's collective holds its links and reductions for the stretched time, not its wait",
          "[fault][injection][throttle][collective]") {
  // Two ranks over one HCCS link, ring all-reduce: HCCL's formula 2(p-1)a + 2(p-1)/p nb +
  // (p-1)/p ng at p = 2 is 2a + nb + ng/2, in two phases (reduce-scatter, all-gather). Rank 1 runs
  // at half speed: every transfer has it at one end and so takes twice as long, and its
  // reductions twice as long, so each phase, and the operation on both ranks, takes twice the
  // formula. Its wait for the other rank is not work and is not stretched.
  constexpr std::size_t count = 1 << 20;  // f32
  const auto base = npurt::sim::presets::ascend910(2);
  const double n = count * 4.0;
  const double a = static_cast<double>(base.hccs_latency.count()) * 1e-12;
  // gamma (docs/collectives.md): two HBM reads and a write per byte, or 256 B per vector cycle
  // per core, whichever is slower.
  const double g = 1 / std::min(base.ai_core_count * 256.0 * base.clock_hz, base.hbm_bandwidth / 3);
  const double formula = 2 * a + n / base.hccs_bandwidth + n / 2 * g;
  const double slow = 2 * formula * 1e12;  // picoseconds
  npurt::sim::sim_options timing_only;
  timing_only.functional = false;
  npurt::system sys{npurt::sim::with_faults(
      base, fault_plan{}.add(fault_spec::thermal_throttle(1, 2.0, sec(10)).at_time(at(ms(0)))), timing_only)};
  recorder rec;
  sys.add_observer(rec);
  auto comm =
      npurt::communicator::init_all(sys, {.algorithm = npurt::collective_algorithm::ring, .keep_records = true});
  auto s0 = sys.device(0).make_stream();
  auto s1 = sys.device(1).make_stream();
  auto all_reduce = [&] {
    for (auto* s : {&s0, &s1})
      (void)comm.all_reduce(nullptr, nullptr, count, npurt::dtype::f32, npurt::reduce_op::sum, *s);
  };
  auto all_reduce_rows = [&] {
    std::vector<task_row> out;
    for (const auto& r : rec.rows)
      if (r.name == "all_reduce") out.push_back(r);
    return out;
  };

  all_reduce();
  sys.run();
  REQUIRE(comm.records().size() == 1);
  const auto& first = comm.records()[0];
  CHECK(std::abs(static_cast<double>((first.end - first.start).count()) - slow) <= 8);
  auto rows = all_reduce_rows();
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].end == first.end);  // the healthy rank waits for the slowed transfers too
  CHECK(rows[1].end == first.end);

  // The healthy rank arrives 5 ms late: the throttled one waits for it, then works at half speed.
  (void)s0.launch(fixed_kernel(ms(5), "late"));
  all_reduce();
  sys.run();
  REQUIRE(comm.records().size() == 2);
  const auto& second = comm.records()[1];
  REQUIRE(rec.named("late") != nullptr);
  CHECK(second.start == rec.named("late")->end);
  CHECK(std::abs(static_cast<double>((second.end - second.start).count()) - slow) <= 8);
  rows = all_reduce_rows();
  REQUIRE(rows.size() == 4);
  CHECK(rows[2].end == second.end);
  CHECK(rows[3].end == second.end);
}

TEST_CASE("a link that is down, flaps or a network interruption fails the collectives it carries, on every rank",
          "[fault][injection][link][collective]") {
  auto run_all_reduce = [](npurt::system& sys, const std::vector<npurt::device_id>& devs) {
    auto comm = npurt::communicator::init_all(sys, devs);
    std::vector<npurt::stream> streams;
    std::vector<std::error_code> out(devs.size());
    for (auto d : devs) streams.push_back(sys.device(d).make_stream());
    for (std::size_t r = 0; r < devs.size(); ++r)
      comm.async_all_reduce(nullptr, nullptr, 1024, npurt::dtype::f32, npurt::reduce_op::sum, streams[r],
                            [&out, r](npurt::async_error_code ec) { out[r] = ec; });
    sys.run();
    return out;
  };
  SECTION("link down for a while") {
    npurt::sim::sim_options timing_only;
    timing_only.functional = false;
    npurt::system sys{npurt::sim::with_faults(npurt::sim::presets::ascend910(4),
                                              fault_plan{}.add(fault_spec::link_down(2, ms(10)).at_time(at(ms(0)))),
                                              timing_only)};
    for (const auto& ec : run_all_reduce(sys, {0, 1, 2, 3})) CHECK(ec == errc::link_failure);
    for (const auto& ec : run_all_reduce(sys, {0, 1})) CHECK(!ec);  // the link of device 2 is not in it
    while (sys.now() < at(ms(11))) {
      auto s = sys.device(0).make_stream();
      (void)s.launch(fixed_kernel(ms(4), "wait"));
      sys.run();
    }
    for (const auto& ec : run_all_reduce(sys, {0, 1, 2, 3})) CHECK(!ec);  // back up
  }
  SECTION("network interruption between servers") {
    npurt::sim::sim_options timing_only;
    timing_only.functional = false;
    npurt::system sys{npurt::sim::with_faults(
        npurt::sim::presets::ascend910(16),
        fault_plan{}.add(fault_spec::network_interruption(0, ms(50), 8).at_time(at(ms(0)))), timing_only)};
    for (const auto& ec : run_all_reduce(sys, {0, 1, 2, 3, 4, 5, 6, 7})) CHECK(!ec);  // inside one server
    for (const auto& ec : run_all_reduce(sys, {0, 8})) CHECK(ec == errc::link_failure);
  }
}

TEST_CASE("a link flap alternates failures and successes with its period", "[fault][injection][link][flap]") {
  npurt::sim::sim_options timing_only;
  timing_only.functional = false;
  npurt::system sys{npurt::sim::with_faults(
      npurt::sim::presets::ascend910(2), fault_plan{}.add(fault_spec::link_flap(0, ms(10), ms(100)).at_time(at(ms(0)))),
      timing_only)};
  auto comm = npurt::communicator::init_all(sys, std::vector<npurt::device_id>{0, 1});
  auto s0 = sys.device(0).make_stream();
  auto s1 = sys.device(1).make_stream();
  std::vector<std::pair<std::int64_t, bool>> outcomes;  // (phase, failed)
  for (int i = 0; i < 8; ++i) {
    const sim_time t = at(ms(5 + 10 * i));
    for (auto* s : {&s0, &s1}) {
      auto wait = t - sys.now();
      if (wait.count() > 0) (void)s->launch(fixed_kernel(wait - launch_latency, "gap"));
    }
    sys.run();
    std::error_code e0, e1;
    comm.async_all_reduce(nullptr, nullptr, 16, npurt::dtype::f32, npurt::reduce_op::sum, s0,
                          [&](npurt::async_error_code ec) { e0 = ec; });
    comm.async_all_reduce(nullptr, nullptr, 16, npurt::dtype::f32, npurt::reduce_op::sum, s1,
                          [&](npurt::async_error_code ec) { e1 = ec; });
    const std::int64_t phase = sys.now().time_since_epoch().count() / ms(10).count();
    sys.run();
    CHECK(e0 == e1);  // both ranks agree
    outcomes.emplace_back(phase, static_cast<bool>(e0));
  }
  for (const auto& [phase, failed] : outcomes) CHECK(failed == (phase % 2 == 0));
}

TEST_CASE("fault plans are validated with a message naming the fault and the field", "[fault][plan][errors]") {
  std::string what;
  CHECK(npurt::validate(fault_plan{}.add(fault_spec::aicore_exception(3)), 2, &what) == errc::invalid_config);
  CHECK_THAT(what, Catch::Matchers::ContainsSubstring("device 3"));
  CHECK(npurt::validate(fault_plan{}.add(fault_spec::aicore_exception(0).random(1.5)), 2, &what) ==
        errc::invalid_config);
  CHECK_THAT(what, Catch::Matchers::ContainsSubstring("rate"));
  CHECK(npurt::validate(fault_plan{}.add(fault_spec::thermal_throttle(0, 0.5, ms(1))), 2, &what) ==
        errc::invalid_config);
  CHECK_THAT(what, Catch::Matchers::ContainsSubstring("factor"));
  CHECK(npurt::validate(fault_plan{}.add(fault_spec::link_flap(0, picoseconds{0}, ms(1))), 2, &what) ==
        errc::invalid_config);
  CHECK(npurt::validate(fault_plan{}.add(fault_spec::aicore_exception(0).at_task(0, 1)), 2, &what) ==
        errc::invalid_config);
  CHECK_FALSE(npurt::validate(fault_plan{}.add(fault_spec::kernel_hang(1).random(0.5)), 2, &what));
  CHECK_THROWS_AS(npurt::system(preset(1, fault_plan{}.add(fault_spec::hbm_ecc(5)))), npurt::caller_error);
}

TEST_CASE("random faults are a function of the seed: the same plan twice injects the same faults at the same tasks",
          "[fault][determinism]") {
  auto run = [](std::uint64_t seed) {
    fault_plan plan;
    plan.seed = seed;
    plan.add(fault_spec::aicore_exception(0).random(0.1, 0));
    plan.add(fault_spec::thermal_throttle(1, 2, ms(3)).random(0.05, 0));
    npurt::system sys{preset(2, plan)};
    recorder rec;
    sys.add_observer(rec);
    auto s0 = sys.device(0).make_stream();
    auto s1 = sys.device(1).make_stream();
    for (int i = 0; i < 200; ++i) {
      (void)s0.launch(fixed_kernel(picoseconds{100'000'000}, "a"));
      (void)s1.launch(fixed_kernel(picoseconds{100'000'000}, "b"));
    }
    std::error_code ec;
    s0.synchronize(npurt::no_timeout, ec);
    s1.synchronize(npurt::no_timeout, ec);
    std::vector<std::tuple<std::size_t, std::uint64_t, std::int64_t>> inj;
    for (const auto& r : npurt::sim::faults_of(sys).injected())
      inj.emplace_back(r.spec, r.task, r.time.time_since_epoch().count());
    return std::make_pair(inj, rec.rows);
  };
  const auto a = run(42);
  const auto b = run(42);
  const auto c = run(43);
  CHECK(a == b);
  CHECK(a.first != c.first);
  // About 10% of 200 kernels on device 0 (a loose binomial bound: 20 +- 5 sigma).
  std::size_t on0 = 0;
  for (const auto& [spec, task, t] : a.first) on0 += spec == 0;
  CHECK(on0 >= 5);
  CHECK(on0 <= 40);
}

TEST_CASE("a stop-on-failure stream skips its later tasks until the failure is read", "[fault][detection][stream]") {
  npurt::system probe{npurt::sim::presets::ascend910(1)};
  const std::uint32_t sid = probe.device(0).make_stream({.flags = npurt::stream_flags::stop_on_failure}).id();
  npurt::system sys{preset(1, fault_plan{}.add(fault_spec::aicore_exception(0).at_task(sid, 2)))};
  recorder rec;
  sys.add_observer(rec);
  auto s = sys.device(0).make_stream({.flags = npurt::stream_flags::stop_on_failure});
  REQUIRE(s.id() == sid);
  for (int i = 1; i <= 4; ++i) (void)s.launch(fixed_kernel(ms(1), numbered("k", i)));
  std::error_code awaited;
  s.async_launch(fixed_kernel(ms(1), "k5"), [&](npurt::async_error_code ec) { awaited = ec; });
  std::error_code ec;
  s.synchronize(npurt::no_timeout, ec);
  CHECK(ec == errc::kernel_fault);  // the first failure, not the skipped tasks'
  CHECK(awaited == errc::operation_aborted);
  for (const char* skipped : {"k3", "k4", "k5"}) {
    REQUIRE(rec.named(skipped) != nullptr);
    CHECK(rec.named(skipped)->end == rec.named(skipped)->start);  // never ran
  }
  CHECK(rec.named("k1")->end - rec.named("k1")->start == ms(1) + launch_latency);
  // Read: the stream runs again.
  (void)s.launch(fixed_kernel(ms(1), "k6"));
  s.synchronize(npurt::no_timeout, ec);
  CHECK(!ec);
  CHECK(rec.named("k6")->end - rec.named("k6")->start == ms(1) + launch_latency);

  SECTION("the default stream mode continues") {
    npurt::system sys2{preset(1, fault_plan{}.add(fault_spec::aicore_exception(0).at_task(sid, 2)))};
    recorder rec2;
    sys2.add_observer(rec2);
    auto s2 = sys2.device(0).make_stream();
    REQUIRE(s2.id() == sid);
    for (int i = 1; i <= 4; ++i) (void)s2.launch(fixed_kernel(ms(1), numbered("k", i)));
    s2.synchronize(npurt::no_timeout, ec);
    CHECK(ec == errc::kernel_fault);
    CHECK(rec2.named("k4")->end - rec2.named("k4")->start == ms(1) + launch_latency);
  }
}

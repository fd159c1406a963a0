// The runtime driving the simulator end to end: what a launch carries between the call and
// the moment it starts.
#include <npurt/npurt.hpp>
#include <npurt/sim/fault_backend.hpp>
#include <npurt/sim/reference_kernels.hpp>
#include <npurt/sim/sim.hpp>
#include <npurt/task.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

namespace {

namespace asio = boost::asio;
using Catch::Matchers::ContainsSubstring;

TEST_CASE("a deferred launch keeps its kernel after the descriptor it was made from is gone", "[sim][runtime][asio]") {
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  npurt::device& dev = sys.device(0);
  auto s = dev.make_stream();
  constexpr std::int64_t n = 4096;
  constexpr std::size_t bytes = n * sizeof(float);
  std::vector<float> a(n), b(n), out(n, -1.0f);
  for (std::int64_t i = 0; i < n; ++i) {
    a[static_cast<std::size_t>(i)] = static_cast<float>(i);
    b[static_cast<std::size_t>(i)] = 0.25f * static_cast<float>(i % 7);
  }
  void* da = dev.malloc(bytes);
  void* db = dev.malloc(bytes);
  void* dc = dev.malloc(bytes);
  s.memcpy(da, bytes, a.data(), bytes, npurt::memcpy_kind::host_to_device);
  s.memcpy(db, bytes, b.data(), bytes, npurt::memcpy_kind::host_to_device);

  auto make_op = [&] {
    // The descriptor is a temporary of this scope; the operation outlives it.
    const npurt::shape shp{n};
    return s.async_launch(npurt::kernel_desc{npurt::kernels::elementwise{npurt::kernels::eltwise_fn::add,
                                                                         {da, shp, npurt::dtype::f32},
                                                                         {db, shp, npurt::dtype::f32},
                                                                         {dc, shp, npurt::dtype::f32}}},
                          asio::deferred);
  };
  auto op = make_op();
  // Overwrite the stack the descriptor lived in before the operation starts.
  auto scribble = [] {
    volatile unsigned char junk[2048];
    for (auto& c : junk) c = 0xA5;
  };
  scribble();
  bool done = false;
  asio::co_spawn(
      s.get_executor(),
      [&]() -> asio::awaitable<void> {
        co_await std::move(op)(asio::use_awaitable);
        co_await s.async_memcpy(out.data(), bytes, dc, bytes, npurt::memcpy_kind::device_to_host, asio::use_awaitable);
        done = true;
      },
      asio::detached);
  sys.run();
  REQUIRE(done);
  for (std::size_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == a[i] + b[i]);
  dev.free(da);
  dev.free(db);
  dev.free(dc);
}

TEST_CASE("an awaited launch of an invalid kernel fails when it starts, and the stream goes on",
          "[sim][runtime][asio]") {
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  npurt::device& dev = sys.device(0);
  auto s = dev.make_stream();
  void* d = dev.malloc(1024);
  const npurt::shape small{16};
  const npurt::shape big{64};
  std::error_code first, second;
  asio::co_spawn(
      s.get_executor(),
      [&]() -> asio::awaitable<void> {
    // Shapes that do not broadcast: validation rejects the kernel and nothing is enqueued.
        const npurt::kernel_desc bad{npurt::kernels::elementwise{npurt::kernels::eltwise_fn::add,
                                                                 {d, small, npurt::dtype::f32},
                                                                 {d, big, npurt::dtype::f32},
                                                                 {d, small, npurt::dtype::f32}}};
        try {
          co_await s.async_launch(bad, asio::use_awaitable);
        } catch (const boost::system::system_error& e) { first = e.code(); }
        const npurt::kernel_desc good{npurt::kernels::fixed{npurt::picoseconds{1'000'000}}, "ok"};
        try {
          co_await s.async_launch(good, asio::use_awaitable);
        } catch (const boost::system::system_error& e) { second = e.code(); }
      },
      asio::detached);
  sys.run();
  CHECK(first == npurt::errc::invalid_shape);
  CHECK(!second);
  CHECK(s.query());
  dev.free(d);
}

// A real kernel over n floats at a, b -> c.
npurt::kernel_desc add_kernel(void* a, void* b, void* c, std::int64_t n, std::string_view name = {}) {
  const npurt::shape shp{n};
  return npurt::kernel_desc{npurt::kernels::elementwise{npurt::kernels::eltwise_fn::add,
                                                        {a, shp, npurt::dtype::f32},
                                                        {b, shp, npurt::dtype::f32},
                                                        {c, shp, npurt::dtype::f32}},
                            name};
}

TEST_CASE("kernel operands are checked at launch like copies: freed, host, overrun, other device",
          "[sim][runtime][error]") {
  npurt::system sys{npurt::sim::presets::ascend910(2)};
  npurt::device& dev = sys.device(0);
  auto s = dev.make_stream();
  constexpr std::int64_t n = 256;
  void* a = dev.malloc(n * 4);
  void* b = dev.malloc(n * 4);
  void* c = dev.malloc(n * 4);
  void* small = dev.malloc(64);
  void* gone = dev.malloc(n * 4);
  dev.free(gone);
  void* other = sys.device(1).malloc(n * 4);
  std::vector<float> host(n);
  auto failure = [&](const npurt::kernel_desc& k) -> std::pair<std::error_code, std::string> {
    try {
      s.launch(k);
    } catch (const npurt::error& e) { return {e.code(), e.what()}; }
    return {{}, {}};
  };
  const auto freed = failure(add_kernel(a, gone, c, n));
  CHECK(freed.first == npurt::errc::invalid_pointer);
  CHECK_THAT(freed.second, ContainsSubstring("operand b") && ContainsSubstring("freed"));
  const auto on_host = failure(add_kernel(host.data(), b, c, n));
  CHECK(on_host.first == npurt::errc::invalid_pointer);
  CHECK_THAT(on_host.second, ContainsSubstring("operand a") && ContainsSubstring("host memory"));
  const auto overrun = failure(add_kernel(a, b, small, n));
  CHECK(overrun.first == npurt::errc::size_overflow);
  CHECK_THAT(overrun.second, ContainsSubstring("operand y") && ContainsSubstring("overruns"));
  const auto foreign = failure(add_kernel(a, b, other, n));
  CHECK(foreign.first == npurt::errc::stream_device_mismatch);
  CHECK_THAT(foreign.second, ContainsSubstring("device 1"));
  // Nothing was enqueued, and a correct launch still runs.
  CHECK(s.query());
  CHECK_NOTHROW(s.launch(add_kernel(a, b, c, n)));
  CHECK_NOTHROW(s.synchronize());
}

TEST_CASE("an invalid shape names the tensor and the dimension", "[sim][runtime][error]") {
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  auto s = sys.device(0).make_stream();
  npurt::kernels::conv2d conv;
  conv.x = {nullptr, {1, 3, 32, 32}, npurt::dtype::f16};
  conv.w = {nullptr, {8, 3, 0, 3}, npurt::dtype::f16};
  conv.y = {nullptr, {1, 8, 30, 30}, npurt::dtype::f16};
  try {
    s.launch(npurt::kernel_desc{conv});
    FAIL("an invalid conv2d was accepted");
  } catch (const npurt::caller_error& e) {
    CHECK(e.code() == npurt::errc::invalid_shape);
    CHECK_THAT(std::string(e.what()), ContainsSubstring("'w'") && ContainsSubstring("dimension 2 is 0"));
  }
}

// The descriptor cannot know a gather's index values: one out of range fails the task when it
// runs, reported by the wait like any failed kernel, with y left as it was; the stream goes on.
namespace {
void check_gather_out_of_range(npurt::system& sys) {
  npurt::device& dev = sys.device(0);
  auto s = dev.make_stream();
  const std::vector<float> table{10, 11, 12, 20, 21, 22, 30, 31, 32};  // [3, 3]
  void* data = dev.malloc(table.size() * sizeof(float));
  void* idx = dev.malloc(2 * sizeof(std::int64_t));
  void* y = dev.malloc(6 * sizeof(float));
  s.memcpy(data, 36, table.data(), 36, npurt::memcpy_kind::host_to_device);
  const std::vector<float> sentinel(6, -1.0f);
  s.memcpy(y, 24, sentinel.data(), 24, npurt::memcpy_kind::host_to_device);
  const npurt::kernel_desc k{npurt::kernels::gather{{data, npurt::shape{3, 3}, npurt::dtype::f32},
                                                    {idx, npurt::shape{2}, npurt::dtype::i64},
                                                    {y, npurt::shape{2, 3}, npurt::dtype::f32},
                                                    0},
                             "lookup"};
  const std::int64_t bad[2] = {1, 3};  // 3 is past the 3 rows
  s.memcpy(idx, 16, bad, 16, npurt::memcpy_kind::host_to_device);
  s.launch(k);
  try {
    s.synchronize();
    FAIL("a gather of row 3 of 3 succeeded");
  } catch (const npurt::caller_error& e) {
    CHECK(e.code() == npurt::errc::invalid_argument);
    CHECK_THAT(std::string(e.what()), ContainsSubstring("lookup"));
    // Which index, its value and the range it had to lie in: what the code alone cannot say.
    CHECK_THAT(std::string(e.what()),
               ContainsSubstring("(indices[1] = 3 is outside [-3, 2] (data axis 0 has 3 entries))"));
  }
  std::vector<float> out(6, 0.0f);
  s.memcpy(out.data(), 24, y, 24, npurt::memcpy_kind::device_to_host);
  s.synchronize();
  CHECK(out == sentinel);
  // Negative indices count from the end: -1 is the last row.
  const std::int64_t good[2] = {-1, 0};
  s.memcpy(idx, 16, good, 16, npurt::memcpy_kind::host_to_device);
  s.launch(k);
  s.memcpy(out.data(), 24, y, 24, npurt::memcpy_kind::device_to_host);
  CHECK_NOTHROW(s.synchronize());
  CHECK(out == std::vector<float>{30, 31, 32, 10, 11, 12});
  dev.free(data);
  dev.free(idx);
  dev.free(y);
}
}  // namespace

TEST_CASE("a gather index out of range fails its task at synchronize and leaves y unwritten",
          "[sim][runtime][error][gather]") {
  SECTION("on the simulator") {
    npurt::system sys{npurt::sim::presets::ascend910(1)};
    check_gather_out_of_range(sys);
  }
  SECTION("through the fault layer, which passes the failure's words on") {
    npurt::system sys{npurt::sim::with_faults(npurt::sim::presets::ascend910(1), {})};
    check_gather_out_of_range(sys);
  }
}

// An awaited launch hears its failure itself (nothing is sticky): a use_task await throws what
// the blocking form would, with the data's words; a use_awaitable await gets the code, and the
// system's recent error message the words.
namespace {
struct awaited_gather {
  npurt::device& dev;
  npurt::stream s;
  void* data;
  void* idx;
  void* y;
  npurt::kernel_desc k;
  explicit awaited_gather(npurt::system& sys)
      : dev(sys.device(0)),
        s(dev.make_stream()),
        data(dev.malloc(9 * sizeof(float))),
        idx(dev.malloc(2 * sizeof(std::int64_t))),
        y(dev.malloc(6 * sizeof(float))),
        k(npurt::kernels::gather{{data, npurt::shape{3, 3}, npurt::dtype::f32},
                                 {idx, npurt::shape{2}, npurt::dtype::i64},
                                 {y, npurt::shape{2, 3}, npurt::dtype::f32},
                                 0},
          "lookup") {
    const std::int64_t bad[2] = {1, 3};  // 3 is past the 3 rows
    s.memcpy(idx, 16, bad, 16, npurt::memcpy_kind::host_to_device);
    s.synchronize();
  }
  ~awaited_gather() {
    dev.free(data);
    dev.free(idx);
    dev.free(y);
  }
};

npurt::task<void> launch_bad_gather_task(awaited_gather& g, std::string& what, std::error_code& code) {
  try {
    co_await g.s.async_launch(g.k, npurt::use_task);
  } catch (const npurt::caller_error& e) {
    what = e.what();
    code = e.code();
  }
}

npurt::task<void> throwing_callback_task(npurt::stream& s, std::string& what) {
  try {
    co_await s.async_callback([] { throw std::length_error("callback says no"); }, npurt::use_task);
  } catch (const std::length_error& e) { what = e.what(); }
}

asio::awaitable<void> launch_bad_gather_asio(awaited_gather& g, std::error_code& code) {
  try {
    co_await g.s.async_launch(g.k, asio::use_awaitable);
  } catch (const boost::system::system_error& e) { code = e.code(); }
}
}  // namespace

TEST_CASE(
    "an awaited launch that fails on its data says why: use_task throws the words, use_awaitable's "
    "code is explained by recent_error_message",
    "[sim][runtime][error][task]") {
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  awaited_gather g{sys};
  CHECK(sys.recent_error_message().empty());
  SECTION("use_task") {
    std::string what;
    std::error_code code;
    npurt::spawn(sys, launch_bad_gather_task(g, what, code));
    sys.run();
    INFO(what);
    CHECK(code == npurt::errc::invalid_argument);
    CHECK(what.starts_with("npurt::stream::async_launch: task "));
    CHECK_THAT(what, ContainsSubstring("(lookup) on stream " + std::to_string(g.s.id()) + " failed"));
    CHECK_THAT(what, ContainsSubstring("(indices[1] = 3 is outside [-3, 2] (data axis 0 has 3 entries))"));
  }
  SECTION("use_awaitable") {
    std::error_code code;
    asio::co_spawn(g.s.get_executor(), launch_bad_gather_asio(g, code), asio::detached);
    sys.run();
    CHECK(code == npurt::errc::invalid_argument);
    const std::string msg = sys.recent_error_message();
    INFO(msg);
    CHECK(msg.starts_with("npurt::stream::async_launch: task "));
    CHECK_THAT(msg, ContainsSubstring("(indices[1] = 3 is outside [-3, 2]"));
    CHECK_THAT(msg, ContainsSubstring(npurt::make_error_code(npurt::errc::invalid_argument).message()));
    CHECK(sys.recent_error_message().empty());  // read once
  }
  // The awaiter heard it: nothing is left for the stream's next synchronize.
  CHECK_NOTHROW(g.s.synchronize());
}

TEST_CASE("an awaited host callback that throws rethrows its own exception from the await",
          "[sim][runtime][error][task][callback]") {
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  auto s = sys.device(0).make_stream();
  std::string what;
  npurt::spawn(sys, throwing_callback_task(s, what));
  sys.run();
  CHECK(what == "callback says no");
  CHECK_THAT(sys.recent_error_message(), ContainsSubstring("callback says no"));
  CHECK_NOTHROW(s.synchronize());
}

TEST_CASE("a fire-and-forget failure is the recent error message too, as the synchronize that reports it words it",
          "[sim][runtime][error]") {
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  awaited_gather g{sys};
  g.s.launch(g.k);
  std::error_code ec;
  g.s.synchronize(ec);
  CHECK(ec == npurt::errc::invalid_argument);
  const std::string msg = sys.recent_error_message();
  CHECK(msg.starts_with("task "));
  CHECK_THAT(msg, ContainsSubstring("(lookup) on stream"));
  CHECK_THAT(msg, ContainsSubstring("indices[1] = 3"));
}

TEST_CASE("on the simulator, priority wins a tie between kernels ready at the same instant",
          "[sim][runtime][priority]") {
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  npurt::device& dev = sys.device(0);
  auto low = dev.make_stream({.priority = npurt::priority::low});
  auto high = dev.make_stream({.priority = npurt::priority::high});
  const npurt::picoseconds long_k{500'000'000}, short_k{10'000'000};
  auto e_low = low.launch(npurt::kernel_desc{npurt::kernels::fixed{long_k}, "long_low"});
  auto e_high = high.launch(npurt::kernel_desc{npurt::kernels::fixed{short_k}, "short_high"});
  bool low_done_first = false;
  e_high.async_wait([&](npurt::async_error_code) { low_done_first = e_low.query(); });
  sys.run();
  const auto& p = npurt::sim::as_sim(sys.get_backend())->config();
  // Both reach the device at one launch overhead; the short one takes every core first.
  const auto start = sys.options().launch_overhead;
  CHECK_FALSE(low_done_first);
  CHECK(sys.now() == npurt::sim_time{start + (p.kernel_launch_latency + short_k) + (p.kernel_launch_latency + long_k)});
}

TEST_CASE("host-to-host copies on the simulator take the preset's host memcpy time", "[sim][runtime][copy]") {
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  auto s = sys.device(0).make_stream();
  std::vector<std::byte> a(1 << 20), b(1 << 20);
  s.memcpy(b.data(), b.size(), a.data(), a.size(), npurt::memcpy_kind::host_to_host);
  s.synchronize();
  const auto& p = npurt::sim::as_sim(sys.get_backend())->config();
  const auto expected = p.host_memcpy_latency + npurt::sim::transfer_time(double(1 << 20), p.host_memcpy_bandwidth);
  CHECK(sys.now() == npurt::sim_time{sys.options().launch_overhead + expected});
}

TEST_CASE("a fixed kernel's block_dim is checked against the cube cores, never clamped", "[sim][runtime][error]") {
  npurt::system sys{npurt::sim::presets::ascend910b(1)};
  auto s = sys.device(0).make_stream();
  const auto& props = sys.device(0).properties();
  REQUIRE(props.vector_core_count > props.ai_core_count);
  std::error_code ec;
  s.launch(npurt::kernel_desc{npurt::kernels::fixed{npurt::picoseconds{1'000'000}}, "wide", props.vector_core_count},
           ec);
  CHECK(ec == npurt::errc::invalid_argument);
  s.launch(npurt::kernel_desc{npurt::kernels::fixed{npurt::picoseconds{1'000'000}}, "fits", props.ai_core_count}, ec);
  CHECK(!ec);
}

// What a new user checks first: the breakdown of the kernel just launched, found through the
// launch's own event, against the roofline worked out by hand from the preset's documented
// figures (docs/simulator.md: 32 cores x 4096 FP16 MAC per cycle at 1 GHz, HBM 1.2 TB/s).
TEST_CASE("a launch's event names the task explain() breaks down, which meets the hand-computed roofline",
          "[sim][runtime][explain]") {
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  auto s = sys.device(0).make_stream();
  const std::int64_t n = 4096, elems = std::int64_t{64} << 20;
  const npurt::tensor_desc sq{nullptr, {n, n}, npurt::dtype::f16};
  const npurt::tensor_desc vec{nullptr, {elems}, npurt::dtype::f16};
  const npurt::event mm = s.launch(npurt::kernels::matmul{sq, sq, sq});
  const npurt::event add = s.launch(npurt::kernels::elementwise{npurt::kernels::eltwise_fn::add, vec, vec, vec});
  s.synchronize();
  REQUIRE(mm.task_id() != 0);
  REQUIRE(add.task_id() > mm.task_id());
  auto* be = npurt::sim::as_sim(sys.get_backend());
  const auto xm = be->explain(mm.task_id());
  const auto xa = be->explain(add.task_id());
  REQUIRE(xm);
  REQUIRE(xa);
  CHECK(xm->cost.op == "matmul");
  CHECK(xa->cost.op == "add");
  const npurt::picoseconds launch{2'000'000};
  // Compute-bound: 2 n^3 FLOPs at 32 x 8192 FLOP per cycle at 1 GHz is 524,288 ns, and the
  // cube floor is ceil(n/16)^3 fractals over 32 cores.
  CHECK(xm->cost.flops == 2ull * n * n * n);
  CHECK(std::abs(xm->cost.roofline.count() - 524'288'000) <= 1);
  CHECK(xm->cost.cube_floor_cycles == 256ull * 256 * 256 / 32);
  CHECK(xm->cost.bound == npurt::sim::unit::cube);
  CHECK(xm->cost.total >= xm->cost.roofline + launch);
  // Memory-bound: a, b read and y written, 3 x 64 Mi x 2 bytes at 1.2e12 B/s is 335,544.32 ns.
  CHECK(xa->cost.hbm_bytes == 3ull * elems * 2);
  CHECK(std::abs(xa->cost.roofline.count() - 335'544'320) <= 1);
  CHECK(xa->cost.bound == npurt::sim::unit::hbm);
  CHECK(xa->cost.total >= xa->cost.roofline + launch);
  // A streaming pass runs close to the bandwidth: within 2 % of the roofline, plus the launch.
  CHECK(xa->cost.total.count() <= xa->cost.roofline.count() * 102 / 100 + launch.count());
  // Alone on the device, the kernel takes exactly its uncontended cost.
  CHECK(xa->end - xa->start == xa->cost.total);
  // Events that are no launch's name no task.
  auto ev = sys.device(0).make_event();
  s.record(ev);
  s.synchronize();
  CHECK(ev.task_id() == 0);
  CHECK(npurt::event{}.task_id() == 0);
}

// docs/simulator.md: HBM is shared by max-min fair rates, each kernel capped at the rate it has
// alone (its HBM bytes over its uncontended body). The finishing times below follow from that
// by hand; an equal or proportional split would miss them by microseconds.
TEST_CASE("two memory-bound kernels on two streams finish when max-min fair sharing says",
          "[sim][runtime][contention]") {
  const auto add_of = [](std::int64_t elems, std::uint32_t cores) {
    const npurt::tensor_desc t{nullptr, {elems}, npurt::dtype::f16};
    return npurt::kernel_desc{npurt::kernels::elementwise{npurt::kernels::eltwise_fn::add, t, t, t}, "add", cores};
  };
  struct outcome {
    npurt::sim::task_explanation a, b;
  };
  const auto run_pair = [](const npurt::kernel_desc& ka, const npurt::kernel_desc& kb) {
    npurt::system sys{npurt::sim::presets::ascend910(1)};
    auto s1 = sys.device(0).make_stream();
    auto s2 = sys.device(0).make_stream();
    const npurt::event ea = s1.launch(ka);
    const npurt::event eb = s2.launch(kb);
    sys.device(0).synchronize();
    auto* be = npurt::sim::as_sim(sys.get_backend());
    return outcome{*be->explain(ea.task_id()), *be->explain(eb.task_id())};
  };
  const double bw = npurt::sim::presets::ascend910(1).hbm_bandwidth;
  const std::int64_t elems = std::int64_t{32} << 20;
  const double bytes = 3.0 * static_cast<double>(elems) * 2;  // a and b read, y written, f16
  const auto ends_at = [](const npurt::sim::task_explanation& x, double seconds) {
    const double got = static_cast<double>((x.end - x.body_start).count());
    return std::abs(got - seconds * 1e12) <= 2000;  // 2 ns of rounding in picoseconds
  };
  const auto alone_rate = [](const npurt::sim::task_explanation& x) {
    return static_cast<double>(x.cost.hbm_bytes) / (static_cast<double>(x.cost.body.count()) * 1e-12);
  };
  SECTION("equal kernels on 16 cores each: half the bandwidth each, both end together") {
    const auto r = run_pair(add_of(elems, 16), add_of(elems, 16));
    CHECK(r.a.body_start == r.b.body_start);
    CHECK(ends_at(r.a, bytes / (bw / 2)));
    CHECK(ends_at(r.b, bytes / (bw / 2)));
  }
  SECTION("a kernel of half the bytes ends first; the other then runs at its own rate alone") {
    const auto r = run_pair(add_of(elems, 16), add_of(elems / 2, 16));
    const double b_end = (bytes / 2) / (bw / 2);
    CHECK(ends_at(r.b, b_end));
    CHECK(ends_at(r.a, b_end + (bytes / 2) / alone_rate(r.a)));
  }
  SECTION("a kernel on 8 cores cannot use half the bandwidth: it keeps its own rate, the other takes the rest") {
    const auto r = run_pair(add_of(elems, 24), add_of(elems, 8));
    const double rate_b = alone_rate(r.b);
    REQUIRE(rate_b < bw / 2);  // 8 cores x 64 bytes per cycle at 1 GHz: 512 GB/s
    CHECK(r.b.contention == npurt::picoseconds{0});
    CHECK(ends_at(r.a, bytes / (bw - rate_b)));
  }
}

// A shape that does not fit names the operand and what it must be, so the caller can fix it
// without reading the validator.
TEST_CASE("a kernel whose operands do not fit together says which and what they must be", "[sim][runtime][error]") {
  npurt::system sys{npurt::sim::presets::ascend910b(1)};
  auto s = sys.device(0).make_stream();
  const auto t = [](npurt::shape sh, npurt::dtype d = npurt::dtype::f32) { return npurt::tensor_desc{nullptr, sh, d}; };
  const auto refusal = [&](const npurt::kernel_desc& k) {
    try {
      s.launch(k);
    } catch (const npurt::caller_error& e) { return std::pair{std::error_code(e.code()), std::string(e.what())}; }
    return std::pair{std::error_code{}, std::string("accepted")};
  };
  using npurt::errc;
  namespace k = npurt::kernels;
  auto [ec, what] = refusal(k::matmul{t({8, 16}), t({17, 8}), t({8, 8})});
  CHECK(ec == errc::invalid_shape);
  CHECK_THAT(what, ContainsSubstring("a [8,16] has K = 16, b [17,8] has K = 17"));
  std::tie(ec, what) = refusal(k::matmul{t({16, 8}), t({16, 4}), t({16, 4}), true});
  CHECK(ec == errc::invalid_shape);
  CHECK_THAT(what, ContainsSubstring("c [16,4] must be [8,4]"));
  std::tie(ec, what) = refusal(k::matmul{t({8, 16}), t({16, 8}, npurt::dtype::f16), t({8, 8})});
  CHECK(ec == errc::invalid_dtype);
  CHECK_THAT(what, ContainsSubstring("a is f32, b f16"));
  std::tie(ec, what) = refusal(k::matmul{t({2, 8, 16}), t({3, 16, 8}), t({2, 8, 8})});
  CHECK(ec == errc::invalid_shape);
  CHECK_THAT(what, ContainsSubstring("b's batch 3 is not c's batch 2"));
  std::tie(ec, what) = refusal(k::elementwise{k::eltwise_fn::add, t({3, 4}), t({5}), t({3, 4})});
  CHECK(ec == errc::invalid_shape);
  CHECK_THAT(what, ContainsSubstring("a [3,4] and b [5] do not broadcast"));
  std::tie(ec, what) = refusal(k::elementwise{k::eltwise_fn::add, t({3, 1}), t({4}), t({3, 1})});
  CHECK(ec == errc::invalid_shape);
  CHECK_THAT(what, ContainsSubstring("y [3,1] must be [3,4]"));
  std::tie(ec, what) = refusal(k::elementwise{k::eltwise_fn::mul, t({4}), {}, t({4})});
  CHECK(ec == errc::invalid_shape);
  CHECK_THAT(what, ContainsSubstring("mul is binary: b is missing"));
  std::tie(ec, what) =
      refusal(k::elementwise{k::eltwise_fn::sqrt, t({4}, npurt::dtype::i32), {}, t({4}, npurt::dtype::i32)});
  CHECK(ec == errc::invalid_dtype);
  CHECK_THAT(what, ContainsSubstring("sqrt does not take i32 operands"));
  std::tie(ec, what) = refusal(k::softmax{t({4, 4}), t({4, 4}), 2});
  CHECK(ec == errc::invalid_argument);
  CHECK_THAT(what, ContainsSubstring("axis 2 is outside [-2, 1] for x [4,4]"));
  std::tie(ec, what) = refusal(k::layernorm{t({4, 8}), t({4}), t({8}), t({4, 8})});
  CHECK(ec == errc::invalid_shape);
  CHECK_THAT(what, ContainsSubstring("gamma [4] must be x's shape from axis -1, [8]"));
  std::tie(ec, what) = refusal(k::conv2d{t({1, 3, 8, 8}), t({4, 2, 3, 3}), t({1, 4, 6, 6})});
  CHECK(ec == errc::invalid_shape);
  CHECK_THAT(what, ContainsSubstring("w [4,2,3,3] has 2 input channels per group"));
  std::tie(ec, what) = refusal(k::conv2d{t({1, 3, 8, 8}), t({4, 3, 3, 3}), t({1, 4, 8, 8}), {1, 1}, {0, 0}});
  CHECK(ec == errc::invalid_shape);
  CHECK_THAT(what, ContainsSubstring("y [1,4,8,8] must be [1,4,6,6]"));
  std::tie(ec, what) = refusal(k::conv2d{t({1, 4, 8, 8}), t({4, 2, 3, 3}), t({1, 4, 6, 6}), {1, 1}, {0, 0}, {1, 1}, 3});
  CHECK(ec == errc::invalid_shape);
  CHECK_THAT(what, ContainsSubstring("x's 4 channels do not divide into 3 groups"));
  // Functional or timing-only as a whole: which operands have data and which do not.
  npurt::device_buffer buf(sys.device(0), 4096);
  std::tie(ec, what) =
      refusal(k::matmul{t({8, 16}), {buf.data(), {16, 8}, npurt::dtype::f32}, {buf.data(), {8, 8}, npurt::dtype::f32}});
  CHECK(ec == errc::invalid_argument);
  CHECK_THAT(what, ContainsSubstring("data pointers on b, c but none on a"));
  // A fixed kernel's block_dim: the cores it may use, counted.
  std::tie(ec, what) = refusal(npurt::kernel_desc{k::fixed{npurt::picoseconds{1000}}, "wide", 48});
  CHECK(ec == errc::invalid_argument);
  CHECK_THAT(what, ContainsSubstring("block_dim 48 is more than device 0's 24 AI cores"));
}

// std::system_error appends the code's message to the words it is given: the words themselves
// must not carry it, or the message says it twice.
TEST_CASE("a kernel refusal says the code's words once, at the end", "[sim][runtime][error]") {
  npurt::system sys{npurt::sim::presets::ascend910b(1)};
  auto s = sys.device(0).make_stream();
  const auto t = [](npurt::shape sh, npurt::dtype d = npurt::dtype::f32) { return npurt::tensor_desc{nullptr, sh, d}; };
  npurt::device_buffer buf(sys.device(0), 4096);
  namespace k = npurt::kernels;
  constexpr std::int64_t big = std::int64_t{1} << 21;
  const npurt::kernel_desc cases[] = {
      k::matmul{t({8, 16}), t({17, 8}), t({8, 8})},                        // the op's own sentence
      k::conv2d{t({1, 3, 8, 8}), t({8, 3, 0, 3}), t({1, 8, 6, 6})},        // one tensor's dimension
      k::matmul{t({8, 16}), {buf.data(), {16, 8}, npurt::dtype::f32}, {buf.data(), {8, 8}, npurt::dtype::f32}},
      k::matmul{t({big, big}), t({big, big}), t({big, big})},              // 2^63 multiply-accumulates
      k::elementwise{k::eltwise_fn::add, t({4}), t({4}, npurt::dtype::f16), t({4})},
      k::reduce{k::reduce_fn::sum, t({2, 3}), t({5}), 1},
      k::transpose{t({2, 3}), t({2, 3}, npurt::dtype::f16)},
  };
  for (const npurt::kernel_desc& kd : cases) {
    std::string what;
    std::error_code ec;
    try {
      s.launch(kd);
    } catch (const npurt::caller_error& e) {
      what = e.what();
      ec = e.code();
    }
    INFO(what);
    REQUIRE(ec);
    const std::string tail = ": " + ec.message();
    CHECK(what.starts_with("npurt::stream::launch: "));
    CHECK(what.ends_with(tail));
    CHECK(what.find(ec.message()) == what.size() - ec.message().size());  // and nowhere before
  }
  // The whole message of the first, by hand: the call, the op, its rule, the code.
  try {
    s.launch(cases[0]);
    FAIL("a matmul whose K differ was accepted");
  } catch (const npurt::caller_error& e) {
    CHECK(std::string(e.what()) ==
          "npurt::stream::launch: matmul: a [8,16] has K = 16, b [17,8] has K = 17: they must be equal: invalid "
          "tensor shape");
  }
  // validate()'s words, which the launch wraps, carry no code.
  std::string why;
  CHECK(npurt::sim::validate(cases[0], &why) == npurt::errc::invalid_shape);
  CHECK(why == "matmul: a [8,16] has K = 16, b [17,8] has K = 17: they must be equal");
  CHECK(s.query());  // nothing was queued
}

}  // namespace

TEST_CASE("a kernel queued before the stream-ordered free of its operands runs on them", "[sim][runtime][pool]") {
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  auto& dev = sys.device(0);
  auto& pool = dev.mem_pool();
  auto s = dev.make_stream();
  std::vector<float> in{-2, -1, 0, 1, 2, 3, -4, 5}, out(in.size(), 7.0f);
  const std::size_t bytes = in.size() * sizeof(float);
  void* x = pool.malloc_async(bytes, s);
  void* y = pool.malloc_async(bytes, s);
  s.memcpy(x, bytes, in.data(), bytes, npurt::memcpy_kind::host_to_device);
  const npurt::shape shp{static_cast<std::int64_t>(in.size())};
  s.launch(npurt::kernels::elementwise{
      npurt::kernels::eltwise_fn::relu, {x, shp, npurt::dtype::f32}, {}, {y, shp, npurt::dtype::f32}});
  s.memcpy(out.data(), bytes, y, bytes, npurt::memcpy_kind::device_to_host);
  pool.free_async(x, s);
  pool.free_async(y, s);
  REQUIRE_NOTHROW(s.synchronize());
  for (std::size_t i = 0; i < in.size(); ++i) CHECK(out[i] == std::max(in[i], 0.0f));
}

namespace {

TEST_CASE("a graph replayed on the simulator computes what the same calls compute, at the same device cost",
          "[sim][runtime][capture]") {
  struct durations final : npurt::observer {
    std::vector<std::pair<std::string, npurt::picoseconds>> rows;
    void on_task(const npurt::task_info& t) override { rows.emplace_back(std::string(t.name), t.end - t.start); }
  };
  constexpr std::int64_t n = 1 << 16;
  constexpr std::size_t bytes = n * sizeof(float);
  auto run = [&](bool graph, std::vector<float>& out) {
    durations d;
    npurt::system sys{npurt::sim::presets::ascend910(1)};
    sys.add_observer(d);
    auto& dev = sys.device(0);
    auto s = dev.make_stream();
    npurt::host_buffer ha(sys, bytes), hb(sys, bytes), hc(sys, bytes);
    npurt::device_buffer a(dev, bytes), b(dev, bytes), c(dev, bytes);
    auto* pa = static_cast<float*>(ha.data());
    auto* pb = static_cast<float*>(hb.data());
    auto enqueue = [&] {
      s.memcpy(a.data(), bytes, ha.data(), bytes);
      s.memcpy(b.data(), bytes, hb.data(), bytes);
      s.launch(add_kernel(a.data(), b.data(), c.data(), n, "add"));
      s.launch(add_kernel(c.data(), c.data(), c.data(), n, "double"));
      s.memcpy(hc.data(), bytes, c.data(), bytes);
    };
    npurt::stream_graph g;
    if (graph) {
      s.begin_capture();
      enqueue();
      g = s.end_capture();
    }
    for (int round = 0; round < 2; ++round) {
      for (std::int64_t i = 0; i < n; ++i) {
        pa[i] = static_cast<float>(i % 97) * 0.5f + static_cast<float>(round);
        pb[i] = static_cast<float>(i % 13) - 3.0f * static_cast<float>(round);
      }
      if (graph) g.launch(s);
      else enqueue();
      s.synchronize();
      const auto* pc = static_cast<const float*>(hc.data());
      out.insert(out.end(), pc, pc + n);
    }
    return d.rows;
  };
  std::vector<float> eager_out, graph_out;
  const auto eager = run(false, eager_out);
  const auto replay = run(true, graph_out);
  REQUIRE(eager_out.size() == 2 * static_cast<std::size_t>(n));
  CHECK(graph_out == eager_out);
  for (std::int64_t i = 0; i < n; ++i) {
    const float want = 2.0f * ((static_cast<float>(i % 97) * 0.5f + 1.0f) + (static_cast<float>(i % 13) - 3.0f));
    REQUIRE(graph_out[static_cast<std::size_t>(n + i)] == want);
  }
  // Only the host's cost differs: each node takes on the device what its call took.
  CHECK(replay == eager);
}

}  // namespace

namespace {

TEST_CASE("the branches of a forked capture run side by side when launched", "[sim][runtime][capture]") {
  struct spans final : npurt::observer {
    std::vector<std::tuple<std::string, npurt::sim_time, npurt::sim_time>> rows;
    void on_task(const npurt::task_info& t) override { rows.emplace_back(std::string(t.name), t.start, t.end); }
    [[nodiscard]] std::pair<npurt::sim_time, npurt::sim_time> of(const std::string& name) const {
      for (const auto& [n, b, e] : rows)
        if (n == name) return {b, e};
      return {};
    }
  };
  spans rec;
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  sys.add_observer(rec);
  auto& dev = sys.device(0);
  const std::uint32_t half = dev.properties().ai_core_count / 2;
  auto k = [&](std::int64_t us, const char* name) {
    return npurt::kernel_desc{npurt::kernels::fixed{npurt::picoseconds{us * 1'000'000}}, name, half};
  };
  auto s = dev.make_stream();
  auto side = dev.make_stream();
  npurt::event fork = dev.make_event();
  npurt::event join = dev.make_event();
  s.begin_capture();
  s.launch(k(1, "a"));
  s.record(fork);
  side.wait(fork);
  side.launch(k(50, "b"));
  // Before the join's record: the device's shared queue takes tasks in submission order, and a
  // record behind b would hold c back until b ends, as it would launched call by call.
  s.launch(k(50, "c"));
  side.record(join);
  s.wait(join);
  s.launch(k(1, "d"));
  npurt::stream_graph g = s.end_capture();
  g.launch(s);
  s.synchronize();
  const auto [b0, b1] = rec.of("b");
  const auto [c0, c1] = rec.of("c");
  const auto [d0, d1] = rec.of("d");
  CHECK(b0 < c1);  // each half of the cores runs one branch
  CHECK(c0 < b1);
  CHECK(d0 >= std::max(b1, c1));
  CHECK(d1 - b0 < npurt::picoseconds{100'000'000});  // less than the branches one after the other
}

}  // namespace

// Core limits (aclrtSetDeviceResLimit, aclrtSetStreamResLimit): a stream's kernels hold no more
// AI cores than its limit, so kernels of two streams share a device side by side, and a kernel on
// fewer cores takes as long as the cost model says for that many.
#include <npurt/npurt.hpp>
#include <npurt/sim/sim.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

namespace {

using Catch::Matchers::ContainsSubstring;
using npurt::core_kind;
using npurt::errc;

struct row {
  std::string name;
  std::uint32_t stream;
  npurt::sim_time start, end;
};

class rows final : public npurt::observer {
 public:
  void on_task(const npurt::task_info& t) override {
    if (t.kind == npurt::task_kind::kernel) all.push_back({std::string(t.name), t.stream, t.start, t.end});
  }
  [[nodiscard]] row one(std::string_view name) const {
    std::vector<row> out;
    for (const auto& r : all)
      if (r.name == name) out.push_back(r);
    REQUIRE(out.size() == 1);
    return out[0];
  }
  std::vector<row> all;
};

npurt::system timing_only(const char* preset) {
  npurt::sim::sim_options o;
  o.functional = false;
  return npurt::system{npurt::sim::make_backend(npurt::sim::presets::by_name(preset, 1), o)};
}

npurt::kernel_desc fixed_all_cores(std::string_view name) {
  return npurt::kernel_desc{npurt::kernels::fixed{npurt::picoseconds{100'000'000}}, name};  // 100 us, block_dim 0
}

npurt::errc code_of(const std::error_code& ec) { return static_cast<npurt::errc>(ec.value()); }

/// One ran after the other (whichever the device's queues chose first).
bool one_after_other(const row& x, const row& y) { return x.end <= y.start || y.end <= x.start; }

}  // namespace

TEST_CASE("two streams limited to half the AI cores each run whole-device kernels side by side", "[sim][core_limit]") {
  rows rec;
  npurt::system sys = timing_only("ascend910");
  sys.add_observer(rec);
  auto& dev = sys.device(0);
  REQUIRE(dev.properties().ai_core_count == 32);
  auto a = dev.make_stream();
  auto b = dev.make_stream({.priority = 2});  // its own queue: nothing but cores holds it back
  a.launch(fixed_all_cores("a0"));
  b.launch(fixed_all_cores("b0"));
  sys.run();
  // Each asks for all 32 cores: one waits for the other.
  CHECK(one_after_other(rec.one("a0"), rec.one("b0")));
  a.set_core_limit(core_kind::cube, 16);
  b.set_core_limit(core_kind::cube, 16);
  CHECK(a.core_limit(core_kind::cube) == 16);
  a.launch(fixed_all_cores("a1"));
  b.launch(fixed_all_cores("b1"));
  sys.run();
  CHECK(rec.one("a1").start == rec.one("b1").start);
  // A fixed kernel's time does not depend on its cores.
  CHECK(rec.one("a1").end - rec.one("a1").start == rec.one("a0").end - rec.one("a0").start);
  // 16 + 17 do not fit in 32: the second waits again.
  b.set_core_limit(core_kind::cube, 17);
  a.launch(fixed_all_cores("a2"));
  b.launch(fixed_all_cores("b2"));
  sys.run();
  CHECK(one_after_other(rec.one("a2"), rec.one("b2")));
}

TEST_CASE("a GEMM on fewer cores takes longer, and no less than the cube floor on those cores", "[sim][core_limit]") {
  rows rec;
  npurt::system sys = timing_only("ascend910");
  sys.add_observer(rec);
  auto& dev = sys.device(0);
  const std::int64_t m = 4096, n = 4096, k = 4096;
  npurt::device_buffer a(dev, m * k * 2), b(dev, k * n * 2), c(dev, m * n * 2);
  const npurt::kernel_desc gemm{npurt::kernels::matmul{{a.data(), npurt::shape{m, k}, npurt::dtype::f16},
                                                       {b.data(), npurt::shape{k, n}, npurt::dtype::f16},
                                                       {c.data(), npurt::shape{m, n}, npurt::dtype::f16}},
                                "gemm"};
  auto s = dev.make_stream();
  auto gemm_ps = [&](const char* name) {
    npurt::kernel_desc g = gemm;
    g.name = name;
    s.launch(g);
    s.synchronize();
    const row r = rec.one(name);
    return static_cast<double>((r.end - r.start).count());
  };
  // The cube floor: 2 m n k flops at cores x flops-per-cycle x clock, in picoseconds.
  const auto& p = dev.properties();
  const auto floor_ps = [&](double cores) {
    return 2.0 * m * n * k / (cores * p.cube_flops_per_cycle * p.clock_hz) * 1e12;
  };
  const double whole = gemm_ps("whole");
  s.set_core_limit(core_kind::cube, 8);
  const double eighth = gemm_ps("eight cores");
  CHECK(whole >= floor_ps(32));
  CHECK(eighth >= floor_ps(8));
  CHECK(eighth > 2 * whole);  // a quarter of the cores: well over twice the time
  // The device's limit does not reach a stream with a limit of its own; reset, it does.
  dev.set_core_limit(core_kind::cube, 16);
  CHECK(s.core_limit(core_kind::cube) == 8);
  s.reset_core_limits();
  CHECK(s.core_limit(core_kind::cube) == 16);
  const double sixteen = gemm_ps("sixteen cores");
  CHECK(sixteen >= floor_ps(16));
  CHECK(sixteen > whole);
  CHECK(sixteen < eighth);
  dev.reset_core_limits();
  CHECK(s.core_limit(core_kind::cube) == 32);
  CHECK(gemm_ps("whole again") == whole);
}

TEST_CASE("on separated cores the vector limit caps vector kernels and the cube limit does not", "[sim][core_limit]") {
  rows rec;
  npurt::system sys = timing_only("ascend910b");
  sys.add_observer(rec);
  auto& dev = sys.device(0);
  REQUIRE(dev.properties().separated_cores);
  REQUIRE(dev.core_limit(core_kind::vector) == 48);
  REQUIRE(dev.core_limit(core_kind::cube) == 24);
  const std::int64_t n = 1 << 22;
  npurt::device_buffer x(dev, n * 2), y(dev, n * 2), z(dev, n * 2);
  const npurt::tensor_desc tx{x.data(), {n}, npurt::dtype::f16}, ty{y.data(), {n}, npurt::dtype::f16},
      tz{z.data(), {n}, npurt::dtype::f16};
  auto add = [&](const char* name) {
    return npurt::kernel_desc{npurt::kernels::elementwise{npurt::kernels::eltwise_fn::add, tx, ty, tz}, name};
  };
  auto a = dev.make_stream();
  auto b = dev.make_stream({.priority = 2});
  dev.set_core_limit(core_kind::cube, 12);  // cube kernels only: the adds still want all 48
  a.launch(add("a0"));
  b.launch(add("b0"));
  sys.run();
  CHECK(one_after_other(rec.one("a0"), rec.one("b0")));
  dev.set_core_limit(core_kind::vector, 24);
  a.launch(add("a1"));
  b.launch(add("b1"));
  sys.run();
  CHECK(rec.one("a1").start == rec.one("b1").start);
}

TEST_CASE("core limits refuse what the device cannot give, and a reset clears the device's", "[sim][core_limit]") {
  npurt::system sys = timing_only("ascend910");
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  std::error_code ec;
  for (const std::uint32_t bad : {0u, 33u, 1u << 31}) {
    dev.set_core_limit(core_kind::cube, bad, ec);
    CHECK(code_of(ec) == errc::invalid_argument);
    s.set_core_limit(core_kind::vector, bad, ec);
    CHECK(code_of(ec) == errc::invalid_argument);
  }
  s.set_core_limit(static_cast<core_kind>(7), 4, ec);
  CHECK(code_of(ec) == errc::invalid_argument);
  CHECK(s.core_limit(core_kind::cube) == 32);  // nothing refused took effect
  CHECK(dev.core_limit(core_kind::vector) == 32);
  try {
    dev.set_core_limit(core_kind::cube, 33);
    FAIL("no throw");
  } catch (const npurt::error& e) { CHECK_THAT(e.what(), ContainsSubstring("33 cube cores, where the device has 32")); }
  npurt::stream gone;
  gone.set_core_limit(core_kind::cube, 4, ec);
  CHECK(code_of(ec) == errc::invalid_stream);
  // A stream made after the device's limit takes it.
  dev.set_core_limit(core_kind::cube, 4);
  auto later = dev.make_stream();
  CHECK(later.core_limit(core_kind::cube) == 4);
  CHECK(later.core_limit(core_kind::vector) == 32);
  dev.reset();
  CHECK(dev.core_limit(core_kind::cube) == 32);
  CHECK(dev.make_stream().core_limit(core_kind::cube) == 32);
}

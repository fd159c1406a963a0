// system::topology and can_access_peer on the simulator: the link kinds of the preset's
// interconnect (HCCS groups within a server, PCIe between the groups, RoCE between servers) with
// the preset's own rates, and a peer copy costs what the reported link says it costs.
#include <npurt/npurt.hpp>
#include <npurt/sim/sim.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

namespace {

struct topology_copy_recorder final : npurt::observer {
  std::vector<npurt::picoseconds> copies;
  void on_task(const npurt::task_info& t) override {
    if (t.kind == npurt::task_kind::memcpy) copies.push_back(t.end - t.start);
  }
};

}  // namespace

TEST_CASE("topology reports the preset's links between devices, and peers are the HCCS ones", "[sim][topology]") {
  // ascend910: servers of 8 devices, each two full-mesh HCCS groups of 4.
  const npurt::sim::preset p = npurt::sim::presets::ascend910(16);
  npurt::system sys{p};
  struct expected {
    npurt::device_id a, b;
    npurt::link_kind kind;
    double bandwidth;
    npurt::picoseconds latency;
  };
  const std::vector<expected> cases{
      {5, 5, npurt::link_kind::same_device, p.d2d_bandwidth, p.d2d_latency},
      {0, 3, npurt::link_kind::hccs, p.hccs_bandwidth, p.hccs_latency},
      {4, 7, npurt::link_kind::hccs, p.hccs_bandwidth, p.hccs_latency},
      {3, 4, npurt::link_kind::pcie, p.pcie_bandwidth, p.pcie_latency},
      {0, 8, npurt::link_kind::roce, p.roce_bandwidth, p.roce_latency},
      {15, 7, npurt::link_kind::roce, p.roce_bandwidth, p.roce_latency},
  };
  for (const auto& c : cases) {
    INFO("devices " << c.a << " and " << c.b);
    for (const auto& [x, y] : {std::pair{c.a, c.b}, std::pair{c.b, c.a}}) {
      const npurt::link_properties l = sys.topology(x, y);
      CHECK(l.kind == c.kind);
      CHECK(l.bandwidth == c.bandwidth);
      CHECK(l.latency == c.latency);
      CHECK(sys.can_access_peer(x, y) == (c.kind == npurt::link_kind::hccs));
    }
  }
  // A device is not its own peer, as cudaDeviceCanAccessPeer answers.
  CHECK_FALSE(sys.can_access_peer(2, 2));

  // ascend910b: one 8-device HCCS full mesh a server.
  npurt::system mesh{npurt::sim::presets::ascend910b(16)};
  for (npurt::device_id b = 1; b < 8; ++b) CHECK(mesh.can_access_peer(0, b));
  CHECK(mesh.topology(7, 8).kind == npurt::link_kind::roce);
}

TEST_CASE("a peer copy takes the latency and rate topology reports for its two devices", "[sim][topology][copy]") {
  // 3,000,000 bytes: a whole number of picoseconds at each link's rate, so the oracle is exact.
  constexpr std::size_t bytes = 3'000'000;
  for (const npurt::device_id peer : {1, 4, 8}) {
    INFO("device 0 to device " << peer);
    topology_copy_recorder rec;
    npurt::system sys{npurt::sim::presets::ascend910(16)};
    sys.add_observer(rec);
    void* src = sys.device(0).malloc(bytes);
    void* dst = sys.device(peer).malloc(bytes);
    npurt::stream s = sys.device(0).make_stream();
    s.memcpy(dst, bytes, src, bytes, npurt::memcpy_kind::device_to_device);
    s.synchronize();
    REQUIRE(rec.copies.size() == 1);
    const npurt::link_properties l = sys.topology(0, peer);
    const double seconds = static_cast<double>(bytes) / l.bandwidth;
    CHECK(rec.copies[0] == l.latency + npurt::picoseconds{static_cast<std::int64_t>(seconds * 1e12 + 0.5)});
  }
}

TEST_CASE("topology and can_access_peer refuse an id that is not a device", "[sim][topology][errors]") {
  npurt::system sys{npurt::sim::presets::ascend910(2)};
  for (const auto& [a, b] : {std::pair{0, 2}, std::pair{-1, 0}, std::pair{2, 9}}) {
    INFO("devices " << a << " and " << b);
    std::error_code ec;
    (void)sys.topology(a, b, ec);
    CHECK(ec == npurt::errc::invalid_device);
    ec.clear();
    CHECK_FALSE(sys.can_access_peer(a, b, ec));
    CHECK(ec == npurt::errc::invalid_device);
  }
  CHECK_THROWS_WITH(sys.topology(0, 2),
                    Catch::Matchers::ContainsSubstring("npurt::system::topology: no device 2 (the system has 2)"));
  CHECK_THROWS_WITH(sys.can_access_peer(-1, 5), Catch::Matchers::ContainsSubstring(
                                                    "npurt::system::can_access_peer: no device -1 (the system has 2)"));
  std::error_code ok;
  CHECK(sys.topology(0, 1, ok).kind == npurt::link_kind::hccs);
  CHECK_FALSE(ok);
}

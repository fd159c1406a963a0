// A 2-D copy on the simulator: one transfer of its rows' bytes on the copy's link, so it takes
// exactly as long as a plain copy of the same bytes, whatever the pitches; and its bytes land
// where the rows say.
#include <npurt/npurt.hpp>
#include <npurt/sim/sim.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>

namespace {

struct copy_rows_recorder final : npurt::observer {
  std::vector<std::pair<std::string, npurt::picoseconds>> rows;
  void on_task(const npurt::task_info& t) override {
    if (t.kind == npurt::task_kind::memcpy) rows.emplace_back(std::string(t.name), t.end - t.start);
  }
};

}  // namespace

TEST_CASE("a 2-D copy on the simulator takes what a plain copy of its bytes takes", "[sim][copy][memcpy2d]") {
  constexpr std::size_t width = 3000, height = 40, pitch = 4096;
  for (const auto kind : {npurt::memcpy_kind::host_to_device, npurt::memcpy_kind::device_to_device}) {
    copy_rows_recorder rec;
    npurt::system sys{npurt::sim::presets::ascend910(1)};
    sys.add_observer(rec);
    npurt::device& dev = sys.device(0);
    npurt::stream s = dev.make_stream();
    npurt::host_buffer h{sys, pitch * height};
    void* src = dev.malloc(pitch * height);
    void* dst = dev.malloc(width * height);
    const void* from = kind == npurt::memcpy_kind::host_to_device ? h.data() : src;
    s.memcpy(dst, width * height, from, width * height, kind);
    s.synchronize();
    s.memcpy2d(dst, width, from, pitch, width, height, kind);
    s.synchronize();
    REQUIRE(rec.rows.size() == 2);
    CHECK(rec.rows[1].first.starts_with("memcpy2d_"));
    CHECK(rec.rows[1].second == rec.rows[0].second);
    CHECK(rec.rows[1].second > npurt::picoseconds{0});
    dev.free(src);
    dev.free(dst);
  }
}

TEST_CASE("a 2-D copy on the simulator puts each row at its pitch", "[sim][copy][memcpy2d]") {
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  npurt::device& dev = sys.device(0);
  npurt::stream s = dev.make_stream();
  std::vector<std::uint8_t> src(6 * 5);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::uint8_t>(i + 1);
  void* d = dev.malloc(4 * 5);
  s.memset(d, 20, 0, 20);
  s.memcpy2d(d, 4, src.data(), 6, 2, 5, npurt::memcpy_kind::host_to_device);
  std::vector<std::uint8_t> out(20);
  s.memcpy(out.data(), out.size(), d, out.size(), npurt::memcpy_kind::device_to_host);
  s.synchronize();
  for (std::size_t r = 0; r < 5; ++r) {
    CHECK(out[r * 4] == src[r * 6]);
    CHECK(out[r * 4 + 1] == src[r * 6 + 1]);
    CHECK(out[r * 4 + 2] == 0);
    CHECK(out[r * 4 + 3] == 0);
  }
  dev.free(d);
}

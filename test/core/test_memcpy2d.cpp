// stream::memcpy2d (cudaMemcpy2DAsync, aclrtMemcpy2dAsync): rows of one width at two pitches,
// as one task. The oracles: the bytes an element-by-element loop puts where, and the simple
// backend's closed-form cost of width * height bytes on the copy's link.
#include "common.hpp"

#include <boost/asio/detached.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

using namespace npurt_test;
using Catch::Matchers::ContainsSubstring;
using npurt::errc;

namespace {

errc code_2d(const std::error_code& ec) { return static_cast<errc>(ec.value()); }

// What a 2-D copy of `height` rows of `width` bytes leaves in `dst` (pitch `dp`) from `src`
// (pitch `sp`), computed one byte at a time.
void copy_rows(std::vector<unsigned char>& dst, std::size_t dp, const std::vector<unsigned char>& src, std::size_t sp,
               std::size_t width, std::size_t height) {
  for (std::size_t r = 0; r < height; ++r)
    for (std::size_t c = 0; c < width; ++c) dst[r * dp + c] = src[r * sp + c];
}

std::vector<unsigned char> counting(std::size_t n, unsigned char from) {
  std::vector<unsigned char> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>(from + i);
  return v;
}

// A system of one simple device with a stream, whose tasks are recorded.
struct copy_fixture {
  recorder rec;
  npurt::system sys{simple(1)};
  npurt::device& dev = sys.device(0);
  npurt::stream s = dev.make_stream();
  copy_fixture() { sys.add_observer(rec); }
};

}  // namespace

TEST_CASE("memcpy2d moves a tile between pitches and leaves the bytes between rows alone", "[copy][memcpy2d]") {
  copy_fixture f;
  npurt::device& dev = f.dev;
  npurt::stream& s = f.s;
  constexpr std::size_t sp = 16, dp = 7, width = 5, height = 3;
  const std::vector<unsigned char> host = counting(sp * 8, 1);
  void* d = dev.malloc(dp * height);
  s.memset(d, dp * height, 0xEE, dp * height);
  // A tile two rows down and three bytes in, from pageable memory (staged at the call).
  std::vector<unsigned char> src = host;
  s.memcpy2d(d, dp, src.data() + 2 * sp + 3, sp, width, height, npurt::memcpy_kind::host_to_device);
  std::fill(src.begin(), src.end(), 0);  // the staged rows are the call's
  std::vector<unsigned char> back(dp * height);
  s.memcpy(back.data(), back.size(), d, back.size(), npurt::memcpy_kind::device_to_host);
  s.synchronize();
  std::vector<unsigned char> want(dp * height, 0xEE);
  const std::vector<unsigned char> tile(host.begin() + 2 * sp + 3, host.end());
  copy_rows(want, dp, tile, sp, width, height);
  CHECK(back == want);

  // Back to the host at yet another pitch, and device to device.
  void* d2 = dev.malloc(4 * height);
  s.memcpy2d(d2, 4, d, dp, 4, height, npurt::memcpy_kind::device_to_device);
  std::vector<unsigned char> out(9 * height, 0x11);
  s.memcpy2d(out.data(), 9, d2, 4, 4, height, npurt::memcpy_kind::device_to_host);
  s.synchronize();
  std::vector<unsigned char> packed(4 * height);
  copy_rows(packed, 4, want, dp, 4, height);
  std::vector<unsigned char> want_out(9 * height, 0x11);
  copy_rows(want_out, 9, packed, 4, 4, height);
  CHECK(out == want_out);
  CHECK(f.rec.named("memcpy2d_h2d").size() == 1);
  CHECK(f.rec.named("memcpy2d_d2d").size() == 1);
  CHECK(f.rec.named("memcpy2d_d2h").size() == 1);

  // One row is a plain copy, under a plain copy's name.
  std::vector<unsigned char> one(width);
  s.memcpy2d(one.data(), width, d, dp, width, 1);
  s.synchronize();
  CHECK(std::equal(one.begin(), one.end(), want.begin()));
  CHECK(f.rec.named("memcpy_d2h").size() == 2);
  dev.free(d);
  dev.free(d2);
}

TEST_CASE("a 2-D copy costs what its bytes cost on the link, as one transfer", "[copy][memcpy2d]") {
  recorder rec;
  const npurt::simple_config cfg = simple(1);
  npurt::system sys{cfg};
  sys.add_observer(rec);
  npurt::device& dev = sys.device(0);
  npurt::stream s = dev.make_stream();
  constexpr std::size_t width = 1000, height = 64, pitch = 4096;
  npurt::host_buffer h{sys, pitch * height};
  void* d = dev.malloc(width * height);
  s.memcpy2d(d, width, h.data(), pitch, width, height, npurt::memcpy_kind::host_to_device);
  s.synchronize();
  const auto rows = rec.named("memcpy2d_h2d");
  REQUIRE(rows.size() == 1);
  // latency + bytes / bandwidth, the bytes being the rows' (not the source's extent).
  const npurt::device_properties& p = cfg.properties;
  const auto transfer =
      static_cast<std::int64_t>(std::llround(static_cast<long double>(width * height) / p.host_link_bandwidth * 1e12L));
  CHECK((rows[0].end - rows[0].start).count() == p.host_link_latency.count() + transfer);
  dev.free(d);
}

TEST_CASE("memcpy2d refuses bad shapes and ends with a typed error, enqueuing nothing", "[copy][memcpy2d]") {
  copy_fixture f;
  npurt::system& sys = f.sys;
  npurt::device& dev = f.dev;
  npurt::stream& s = f.s;
  void* d = dev.malloc(100);
  std::vector<unsigned char> h(1000);
  std::error_code ec;
  const auto refused = [&](void* dst, std::size_t dp, const void* src, std::size_t sp, std::size_t w, std::size_t n,
                           npurt::memcpy_kind k = npurt::memcpy_kind::default_kind) {
    const npurt::event e = s.memcpy2d(dst, dp, src, sp, w, n, k, ec);
    CHECK(e.valid() == !ec);  // a refusal returns a null event
    return code_2d(ec);
  };
  CHECK(refused(nullptr, 10, h.data(), 10, 10, 2) == errc::null_pointer);
  CHECK(refused(d, 10, nullptr, 10, 10, 2) == errc::null_pointer);
  CHECK(refused(d, 10, h.data(), 10, 0, 2) == errc::zero_size);
  CHECK(refused(d, 10, h.data(), 10, 10, 0) == errc::zero_size);
  CHECK(refused(d, 8, h.data(), 10, 10, 2) == errc::invalid_argument);
  CHECK_THAT(sys.recent_error_message(),
             ContainsSubstring("npurt::stream::memcpy2d") && ContainsSubstring("wider than its destination pitch (8"));
  CHECK(refused(d, 10, h.data(), 9, 10, 2) == errc::invalid_argument);
  CHECK_THAT(sys.recent_error_message(), ContainsSubstring("source pitch (9"));
  // 100 device bytes hold 10 rows at pitch 10 (the last row ends at 100), not 11, nor a
  // last row that runs one byte past.
  CHECK(refused(d, 10, h.data(), 10, 10, 10) == errc{});
  CHECK(refused(d, 10, h.data(), 10, 10, 11) == errc::size_overflow);
  CHECK_THAT(sys.recent_error_message(),
             ContainsSubstring("the destination's rows reach 110 bytes") && ContainsSubstring("holds 100"));
  CHECK(refused(static_cast<unsigned char*>(d) + 1, 10, h.data(), 10, 10, 10) == errc::size_overflow);
  // A pitch whose rows' extent wraps a size_t.
  constexpr std::size_t huge = std::numeric_limits<std::size_t>::max() / 2;
  CHECK(refused(d, huge, h.data(), 10, 10, 3) == errc::size_overflow);
  CHECK_THAT(sys.recent_error_message(), ContainsSubstring("does not fit in a size_t"));
  CHECK(refused(d, 10, h.data(), 10, 10, 2, npurt::memcpy_kind::device_to_host) == errc::invalid_copy_kind);
  void* gone = dev.malloc(64);
  dev.free(gone);
  CHECK(refused(gone, 8, h.data(), 8, 8, 2) == errc::invalid_pointer);
  CHECK_THAT(sys.recent_error_message(), ContainsSubstring("was freed"));
  // The throwing form says the same.
  CHECK(thrown_code([&] { s.memcpy2d(d, 8, h.data(), 10, 10, 2); }) == errc::invalid_argument);
  CHECK_THAT(thrown_what([&] { s.memcpy2d(d, 10, h.data(), 10, 10, 11); }),
             ContainsSubstring("npurt::stream::memcpy2d") && ContainsSubstring("rows reach 110 bytes"));
  s.synchronize();
  // Only the one accepted copy ran.
  CHECK(f.rec.rows.size() == 1);
  dev.free(d);
}

TEST_CASE("async_memcpy2d completes when the rows are copied", "[copy][memcpy2d][async]") {
  npurt::system sys{simple(1)};
  npurt::device& dev = sys.device(0);
  npurt::stream s = dev.make_stream();
  std::vector<unsigned char> src = counting(12, 40);
  std::vector<unsigned char> out(12, 0);
  void* d = dev.malloc(6);
  std::error_code first = make_error_code(errc::invalid_argument);
  std::error_code second = make_error_code(errc::invalid_argument);
  std::error_code refused;
  npurt::sim_time done{};
  s.async_memcpy2d(d, 2, src.data(), 4, 2, 3, npurt::memcpy_kind::host_to_device,
                   [&](std::error_code ec) { first = ec; });
  s.async_memcpy2d(out.data(), 4, d, 2, 2, 3, npurt::memcpy_kind::device_to_host, [&](std::error_code ec) {
    second = ec;
    done = sys.now();
  });
  s.async_memcpy2d(d, 1, src.data(), 4, 2, 3, npurt::memcpy_kind::host_to_device,
                   [&](std::error_code ec) { refused = ec; });
  sys.run();
  CHECK_FALSE(first);
  CHECK_FALSE(second);
  CHECK(code_2d(refused) == errc::invalid_argument);
  CHECK(done > npurt::sim_time{});
  std::vector<unsigned char> want(12, 0);
  std::vector<unsigned char> packed(6);
  copy_rows(packed, 2, src, 4, 2, 3);
  copy_rows(want, 4, packed, 2, 2, 3);
  CHECK(out == want);
  dev.free(d);
}

TEST_CASE("a captured 2-D copy from pinned memory copies at each launch", "[copy][memcpy2d][capture]") {
  npurt::system sys{simple(1)};
  npurt::device& dev = sys.device(0);
  npurt::stream s = dev.make_stream();
  npurt::host_buffer pinned{sys, 32};
  auto* p = static_cast<unsigned char*>(pinned.data());
  void* d = dev.malloc(8);
  s.begin_capture();
  s.memcpy2d(d, 2, p, 8, 2, 4, npurt::memcpy_kind::host_to_device);
  npurt::stream_graph g = s.end_capture();
  std::vector<unsigned char> out(8);
  for (unsigned char round = 1; round <= 2; ++round) {
    for (std::size_t i = 0; i < 32; ++i) p[i] = static_cast<unsigned char>(round * 50 + i);
    g.launch(s);
    s.memcpy(out.data(), out.size(), d, out.size(), npurt::memcpy_kind::device_to_host);
    s.synchronize();
    const std::vector<unsigned char> now(p, p + 32);
    std::vector<unsigned char> want(8);
    copy_rows(want, 2, now, 8, 2, 4);
    CHECK(out == want);
  }
  // A pageable source cannot be captured: a launch would need its bytes as they were.
  std::vector<unsigned char> pageable(32);
  std::error_code ec;
  s.begin_capture();
  (void)s.memcpy2d(d, 2, pageable.data(), 8, 2, 4, npurt::memcpy_kind::host_to_device, ec);
  CHECK(code_2d(ec) == errc::capture_unsupported);
  CHECK_THAT(sys.recent_error_message(), ContainsSubstring("npurt::stream::memcpy2d"));
  CHECK(thrown_code([&] { (void)s.end_capture(); }) != errc{});
  dev.free(d);
}

TEST_CASE("device::memcpy2d copies the rows before it returns", "[copy][memcpy2d][device]") {
  npurt::system sys{simple(1)};
  npurt::device& dev = sys.device(0);
  std::vector<unsigned char> src = counting(40, 3);
  void* d = dev.malloc(3 * 4);
  dev.memcpy2d(d, 4, src.data() + 1, 10, 4, 3, npurt::memcpy_kind::host_to_device);
  std::vector<unsigned char> out(3 * 5, 0x77);
  dev.memcpy2d(out.data(), 5, d, 4, 4, 3);
  std::vector<unsigned char> packed(3 * 4);
  const std::vector<unsigned char> from(src.begin() + 1, src.end());
  copy_rows(packed, 4, from, 10, 4, 3);
  std::vector<unsigned char> want(3 * 5, 0x77);
  copy_rows(want, 5, packed, 4, 4, 3);
  CHECK(out == want);
  std::error_code ec;
  dev.memcpy2d(d, 4, src.data(), 10, 4, 4, npurt::memcpy_kind::host_to_device, ec);  // 4 rows need 16 bytes
  CHECK(code_2d(ec) == errc::size_overflow);
  CHECK_THAT(thrown_what([&] { dev.memcpy2d(d, 3, src.data(), 10, 4, 2); }),
             ContainsSubstring("npurt::device::memcpy2d") && ContainsSubstring("destination pitch (3"));
  // Blocking: refused inside run(), where the awaitable form is the way.
  std::string inside;
  npurt::stream s = dev.make_stream();
  s.launch_callback([&] { inside = thrown_what([&] { dev.memcpy2d(out.data(), 5, d, 4, 4, 3); }); });
  sys.run();
  CHECK_THAT(inside, ContainsSubstring("blocks") && ContainsSubstring("async_memcpy2d"));
  dev.free(d);
}

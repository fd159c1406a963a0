#include <npurt/device.hpp>

#include "common.hpp"

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <numeric>
#include <vector>

using namespace npurt_test;
using npurt::sim_time;

namespace {

TEST_CASE("data copied host to device and back comes back unchanged", "[core][memory][copy]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  std::vector<int> in(1000), out(1000, -1);
  std::iota(in.begin(), in.end(), 7);
  void* d = dev.malloc(in.size() * sizeof(int));
  void* d2 = dev.malloc(in.size() * sizeof(int));
  s.memcpy(d, 4000, in.data(), 4000, npurt::memcpy_kind::host_to_device);
  s.memcpy(d2, 4000, d, 4000, npurt::memcpy_kind::device_to_device);
  s.memcpy(out.data(), 4000, d2, 4000, npurt::memcpy_kind::device_to_host);
  s.synchronize();
  CHECK(out == in);
}

TEST_CASE("a copy costs latency + bytes / bandwidth of its link", "[core][memory][copy]") {
  recorder rec;
  npurt::system sys{simple(2)};
  sys.add_observer(rec);
  auto& d0 = sys.device(0);
  const auto& p = d0.properties();
  const std::size_t n = 64 << 20;
  void* a = d0.malloc(n);
  void* b = sys.device(1).malloc(n);
  void* h = sys.host_malloc(n);
  auto s = d0.make_stream();
  s.memcpy(a, n, h, n);     // H2D over the host link
  s.memcpy(b, n, a, n);     // to the peer over its link
  s.synchronize();
  REQUIRE(rec.rows.size() == 2);
  auto expect = [](std::size_t bytes, double bw, picoseconds lat) {
    return lat + picoseconds{static_cast<std::int64_t>(static_cast<double>(bytes) / bw * 1e12 + 0.5)};
  };
  CHECK(rec.rows[0].end - rec.rows[0].start == expect(n, p.host_link_bandwidth, p.host_link_latency));
  CHECK(rec.rows[1].end - rec.rows[1].start == expect(n, p.peer_link_bandwidth, p.peer_link_latency));
  CHECK(rec.rows[1].name == "memcpy_peer");
}

TEST_CASE("memset fills device memory in stream order", "[core][memory]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  void* d = dev.malloc(256);
  s.memset(d, 256, 0xAB, 256);
  std::vector<unsigned char> out(256);
  s.memcpy(out.data(), 256, d, 256);
  s.synchronize();
  for (auto c : out) CHECK(c == 0xAB);
}

TEST_CASE("device memory accounting follows malloc and free", "[core][memory]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  const auto before = dev.memory_info();
  CHECK(before.free == before.total);
  void* p = dev.malloc(1000);  // rounded up to 512 B granules
  CHECK(dev.memory_info().free == before.total - 1024);
  dev.free(p);
  CHECK(dev.memory_info().free == before.total);
}

TEST_CASE("device memory is backed in functional mode only", "[core][memory]") {
  npurt::simple_config cfg = simple();
  cfg.functional = false;
  cfg.properties.memory_bytes = std::size_t{64} << 30;  // 64 GiB of device, no host RAM behind it
  npurt::system sys{cfg};
  auto& dev = sys.device(0);
  void* big = dev.malloc(std::size_t{48} << 30);
  CHECK(big != nullptr);
  CHECK(npurt::detail::runtime_of(sys).translate(0, big, 16) == nullptr);
  dev.free(big);
}

TEST_CASE("an allocation larger than the free memory raises out_of_memory_error with its fields",
          "[core][memory][error]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  const std::size_t total = dev.properties().memory_bytes;
  void* most = dev.malloc(total - (1 << 20));
  try {
    (void)dev.malloc(2 << 20);
    FAIL("no exception");
  } catch (const npurt::out_of_memory_error& e) {
    CHECK(e.code() == npurt::errc::out_of_memory);
    CHECK(e.requested() == (2u << 20));
    CHECK(e.device() == 0);
    CHECK(e.details().total == total);
    CHECK(e.details().free == (1u << 20));
    CHECK(std::string(e.what()).find("Tried to allocate 2.00 MiB") != std::string::npos);
  }
  // Nothing was lost: the earlier allocation is intact and the device still allocates.
  dev.free(most);
  CHECK_NOTHROW(dev.free(dev.malloc(2 << 20)));
}

TEST_CASE("reset aborts pending work and frees the device's memory", "[core][device][memory]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  void* p = dev.malloc(4096);
  s.launch(fixed(us(50)));
  dev.reset();
  CHECK(sys.now() == sim_time{});  // aclrtResetDevice does not wait for the kernel
  CHECK(dev.memory_info().free == dev.memory_info().total);
  std::error_code ec;
  dev.free(p, ec);
  CHECK(ec == npurt::errc::double_free);
  s.launch(fixed(us(1)), ec);
  CHECK(ec == npurt::errc::invalid_stream);
  auto fresh = dev.make_stream();
  CHECK_NOTHROW(fresh.launch(fixed(us(1))));
}

}  // namespace

TEST_CASE("a pageable host source is read at the call, as cudaMemcpyAsync stages it", "[core][memory][copy]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  constexpr std::size_t n = 256;
  void* d = dev.malloc(n * sizeof(int));
  void* d2 = dev.malloc(n * sizeof(int));
  // A kernel ahead of the copies, so that they cannot have run when the call returns.
  s.launch({npurt::kernels::fixed{picoseconds{50'000'000}}, "busy"});
  std::vector<int> expect(n);
  std::iota(expect.begin(), expect.end(), 3);
  {
    std::vector<int> src = expect;
    s.memcpy(d, n * sizeof(int), src.data(), n * sizeof(int), npurt::memcpy_kind::host_to_device);
    std::fill(src.begin(), src.end(), -1);  // changed after the call: the copy must not see it
  }
  bool done = false;
  {
    auto src = std::make_unique<std::vector<int>>(expect);
    s.async_memcpy(d2, n * sizeof(int), src->data(), n * sizeof(int), npurt::memcpy_kind::host_to_device,
                   [&](std::error_code ec) { done = !ec; });
    src.reset();  // freed after the call: ASan reports a read of it
  }
  std::vector<int> out(n, 0), out2(n, 0);
  s.memcpy(out.data(), n * sizeof(int), d, n * sizeof(int), npurt::memcpy_kind::device_to_host);
  s.memcpy(out2.data(), n * sizeof(int), d2, n * sizeof(int), npurt::memcpy_kind::device_to_host);
  s.synchronize();
  CHECK(done);
  CHECK(out == expect);
  CHECK(out2 == expect);

  // Host to host: the source is staged too; the (pageable) destination is written when the copy runs.
  std::vector<int> dst(n, 0);
  s.launch({npurt::kernels::fixed{picoseconds{50'000'000}}, "busy"});
  {
    std::vector<int> src = expect;
    s.memcpy(dst.data(), n * sizeof(int), src.data(), n * sizeof(int), npurt::memcpy_kind::host_to_host);
    std::fill(src.begin(), src.end(), -1);
    CHECK(dst[0] == 0);  // not written yet
  }
  s.synchronize();
  CHECK(dst == expect);
}

TEST_CASE("a pinned host source is read when the copy runs, not staged", "[core][memory][copy]") {
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  constexpr std::size_t bytes = 64 * sizeof(int);
  void* d = dev.malloc(bytes);
  auto* pinned = static_cast<int*>(sys.host_malloc(bytes));
  std::fill(pinned, pinned + 64, 1);
  s.launch({npurt::kernels::fixed{picoseconds{50'000'000}}, "busy"});
  s.memcpy(d, bytes, pinned, bytes, npurt::memcpy_kind::host_to_device);
  std::fill(pinned, pinned + 64, 2);  // before the copy runs: pinned memory is the caller's promise
  std::vector<int> out(64, 0);
  s.memcpy(out.data(), bytes, d, bytes, npurt::memcpy_kind::device_to_host);
  s.synchronize();
  CHECK(out == std::vector<int>(64, 2));
  sys.host_free(pinned);
}

TEST_CASE("a timing-only backend stages no host bytes", "[core][memory][copy]") {
  npurt::simple_config cfg = simple();
  cfg.functional = false;
  cfg.properties.memory_bytes = std::size_t{64} << 30;
  npurt::system sys{cfg};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  const std::size_t big = std::size_t{48} << 30;
  void* d = dev.malloc(big);
  // 48 GiB "from" a 16-byte vector: only a functional backend would read it, and staging it
  // would read far past the vector (or fail for want of 48 GiB of host memory).
  std::vector<int> small(4, 1);
  s.memcpy(d, big, small.data(), big, npurt::memcpy_kind::host_to_device);
  const sim_time before = sys.now();
  s.synchronize();
  CHECK(sys.now() > before);  // the copy still costs its transfer
  dev.free(d);
}

TEST_CASE("pointer_attributes says where a pointer's memory is, as cudaPointerGetAttributes", "[memory][pointer]") {
  npurt::system sys{simple(2)};
  auto& d1 = sys.device(1);
  auto* dev_mem = static_cast<std::byte*>(d1.malloc(100));
  auto* pinned = static_cast<std::byte*>(sys.host_malloc(64));
  int pageable = 0;
  const npurt::pointer_attributes a = sys.pointer_attributes(dev_mem + 40);
  CHECK(a.type == npurt::memory_type::device);
  CHECK(a.device == 1);
  CHECK(a.base == dev_mem);
  CHECK(a.bytes == 100);
  CHECK(a.offset == 40);
  const npurt::pointer_attributes h = sys.pointer_attributes(pinned + 63);
  CHECK(h.type == npurt::memory_type::host_pinned);
  CHECK(h.device == -1);
  CHECK(h.base == pinned);
  CHECK(h.offset == 63);
  const npurt::pointer_attributes u = sys.pointer_attributes(&pageable);
  CHECK(u.type == npurt::memory_type::unregistered);
  CHECK(u.base == nullptr);
  CHECK(npurt::to_string(npurt::memory_type::host_pinned) == "host_pinned");
  // A pool block is its own allocation, not the segment behind it.
  auto s = sys.device(0).make_stream();
  auto* block = static_cast<std::byte*>(sys.device(0).mem_pool().malloc_async(256, s));
  const npurt::pointer_attributes b = sys.pointer_attributes(block + 8);
  CHECK(b.type == npurt::memory_type::device);
  CHECK(b.device == 0);
  CHECK(b.base == block);
  CHECK(b.bytes == 256);
  // Refusals: null, and device memory that is no longer live (the words say freed).
  std::error_code ec;
  (void)sys.pointer_attributes(nullptr, ec);
  CHECK(static_cast<npurt::errc>(ec.value()) == npurt::errc::null_pointer);
  d1.free(dev_mem);
  (void)sys.pointer_attributes(dev_mem, ec);
  CHECK(static_cast<npurt::errc>(ec.value()) == npurt::errc::invalid_pointer);
  CHECK(sys.recent_error_message().find("npurt::system::pointer_attributes: ") != std::string::npos);
  CHECK(thrown_code([&] { (void)sys.pointer_attributes(dev_mem); }) == npurt::errc::invalid_pointer);
  sys.host_free(pinned);
  CHECK(sys.pointer_attributes(pinned).type == npurt::memory_type::unregistered);
  sys.device(0).mem_pool().free_async(block, s);
  s.synchronize();
}

TEST_CASE("on the simple backend every two devices are peers over its peer link", "[core][topology]") {
  npurt::simple_config cfg = simple(3);
  cfg.properties.peer_link_bandwidth = 40e9;
  cfg.properties.peer_link_latency = us(3);
  npurt::system sys{cfg};
  recorder rec;
  sys.add_observer(rec);
  const npurt::link_properties self = sys.topology(1, 1);
  CHECK(self.kind == npurt::link_kind::same_device);
  CHECK(self.bandwidth == cfg.properties.hbm_bandwidth);
  CHECK(self.latency == picoseconds{0});
  CHECK_FALSE(sys.can_access_peer(1, 1));
  const npurt::link_properties peer = sys.topology(0, 2);
  CHECK(peer.kind == npurt::link_kind::hccs);
  CHECK(peer.bandwidth == 40e9);
  CHECK(peer.latency == us(3));
  CHECK(sys.can_access_peer(2, 0));
  // A peer copy costs what the link says: 3 us + 4,000,000 bytes at 40 GB/s (100 us).
  void* src = sys.device(0).malloc(4'000'000);
  void* dst = sys.device(2).malloc(4'000'000);
  auto s = sys.device(0).make_stream();
  s.memcpy(dst, 4'000'000, src, 4'000'000, npurt::memcpy_kind::device_to_device);
  s.synchronize();
  REQUIRE(rec.rows.size() == 1);
  CHECK(rec.rows[0].end - rec.rows[0].start == peer.latency + us(100));
  std::error_code ec;
  CHECK_FALSE(sys.can_access_peer(0, 3, ec));
  CHECK(ec == npurt::errc::invalid_device);
}

// Collectives on the simulator: results against plain references, the three call forms,
// mismatches, timeouts, abort, split, groups, link sharing, determinism.
#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>

using namespace npurt;
using Catch::Matchers::ContainsSubstring;
using coll_test::mesh_preset;
using coll_test::roce_preset;

namespace {

// Per-rank device buffers with host mirrors.
struct rank_buffers {
  std::vector<void*> send, recv;
  std::vector<std::vector<std::byte>> host_send;
};

std::vector<std::byte> random_bytes(std::size_t n, std::uint32_t seed, dtype t) {
  std::mt19937 g(seed);
  std::vector<std::byte> v(n);
  const std::size_t es = size_of(t);
  for (std::size_t i = 0; i < n / es; ++i) {
    // Values with few significant bits would hide ordering; use full-precision random values.
    switch (t) {
      case dtype::f32: {
        const float f = std::uniform_real_distribution<float>(-2.f, 2.f)(g);
        std::memcpy(&v[i * 4], &f, 4);
        break;
      }
      case dtype::f16: {
        const std::uint16_t h = numeric::float_to_half_bits(std::uniform_real_distribution<float>(-2.f, 2.f)(g));
        std::memcpy(&v[i * 2], &h, 2);
        break;
      }
      case dtype::bf16: {
        const std::uint16_t h = numeric::float_to_bfloat16_bits(std::uniform_real_distribution<float>(-2.f, 2.f)(g));
        std::memcpy(&v[i * 2], &h, 2);
        break;
      }
      default:
        for (std::size_t b = 0; b < es; ++b) v[i * es + b] = static_cast<std::byte>(g() & 0xff);
    }
  }
  return v;
}

// The plain reference: fold rank 0, 1, ..., p-1 in that order, rounding to the type each step.
template <class T>
T ref_apply(reduce_op r, T a, T b) {
  switch (r) {
    case reduce_op::sum: return static_cast<T>(a + b);
    case reduce_op::prod: return static_cast<T>(a * b);
    case reduce_op::max: return std::max(a, b);
    case reduce_op::min: return std::min(a, b);
    case reduce_op::avg: break;  // not one fold step: test_collective_avg.cpp checks it by hand
  }
  return a;
}

std::vector<std::byte> reference_reduce(const std::vector<std::vector<std::byte>>& in, dtype t, reduce_op r,
                                        std::size_t off, std::size_t bytes) {
  std::vector<std::byte> acc(in[0].begin() + static_cast<std::ptrdiff_t>(off),
                             in[0].begin() + static_cast<std::ptrdiff_t>(off + bytes));
  const std::size_t es = size_of(t);
  for (std::size_t k = 1; k < in.size(); ++k)
    for (std::size_t i = 0; i < bytes / es; ++i) {
      std::byte* a = &acc[i * es];
      const std::byte* b = &in[k][off + i * es];
      switch (t) {
        case dtype::f32: {
          float x, y;
          std::memcpy(&x, a, 4), std::memcpy(&y, b, 4);
          x = ref_apply(r, x, y);
          std::memcpy(a, &x, 4);
          break;
        }
        case dtype::f16:
        case dtype::bf16: {
          std::uint16_t x, y;
          std::memcpy(&x, a, 2), std::memcpy(&y, b, 2);
          const bool h = t == dtype::f16;
          const float fx = h ? numeric::half_bits_to_float(x) : numeric::bfloat16_bits_to_float(x);
          const float fy = h ? numeric::half_bits_to_float(y) : numeric::bfloat16_bits_to_float(y);
          const float fz = ref_apply(r, fx, fy);
          x = h ? numeric::float_to_half_bits(fz) : numeric::float_to_bfloat16_bits(fz);
          std::memcpy(a, &x, 2);
          break;
        }
        case dtype::i32: {
          std::int32_t x, y;
          std::memcpy(&x, a, 4), std::memcpy(&y, b, 4);
          std::uint32_t ux = static_cast<std::uint32_t>(x), uy = static_cast<std::uint32_t>(y);
          if (r == reduce_op::sum) x = static_cast<std::int32_t>(ux + uy);
          else if (r == reduce_op::prod) x = static_cast<std::int32_t>(ux * uy);
          else x = ref_apply(r, x, y);
          std::memcpy(a, &x, 4);
          break;
        }
        case dtype::u8: {
          auto x = static_cast<std::uint8_t>(*a), y = static_cast<std::uint8_t>(*b);
          *a = static_cast<std::byte>(ref_apply(r, x, y));
          break;
        }
        default: FAIL("reference dtype not covered");
      }
    }
  return acc;
}

struct recorder_for_kernel final : observer {
  sim_time end{};
  void on_task(const task_info& t) override {
    if (t.name == "compute") end = t.end;
  }
};

struct fixture {
  npurt::system sys;
  std::vector<stream> streams;
  explicit fixture(const sim::preset& p, const sim::sim_options& o = {}) : sys(sim::make_backend(p, o)) {
    for (auto& d : sys.devices()) streams.push_back(d.make_stream());
  }
  void* upload(int dev, const std::vector<std::byte>& v) {
    void* p = sys.device(dev).malloc(v.size());
    streams[static_cast<std::size_t>(dev)].memcpy(p, v.size(), v.data(), v.size());
    return p;
  }
  void* zeros(int dev, std::size_t n) {
    void* p = sys.device(dev).malloc(n);
    streams[static_cast<std::size_t>(dev)].memset(p, n, 0, n);
    return p;
  }
  std::vector<std::byte> download(int dev, const void* p, std::size_t n) {
    std::vector<std::byte> v(n);
    streams[static_cast<std::size_t>(dev)].memcpy(v.data(), n, p, n);
    sys.run();
    return v;
  }
};

// All-reduce of every rank's random vector; returns each rank's result.
std::vector<std::vector<std::byte>> run_all_reduce(const sim::preset& p, collective_algorithm a, dtype t, reduce_op r,
                                                   std::size_t count, std::vector<std::vector<std::byte>>* inputs) {
  fixture f(p);
  const int n = static_cast<int>(f.sys.device_count());
  auto comm = communicator::init_all(f.sys, {.algorithm = a});
  const std::size_t bytes = count * size_of(t);
  std::vector<void*> buf(static_cast<std::size_t>(n));
  inputs->clear();
  for (int d = 0; d < n; ++d) {
    inputs->push_back(random_bytes(bytes, 1234u + static_cast<std::uint32_t>(d), t));
    buf[static_cast<std::size_t>(d)] = f.upload(d, inputs->back());
  }
  for (int d = 0; d < n; ++d)
    comm.all_reduce(buf[static_cast<std::size_t>(d)], buf[static_cast<std::size_t>(d)], count, t, r,
                    f.streams[static_cast<std::size_t>(d)]);
  f.sys.run();
  REQUIRE_FALSE(comm.async_error());
  std::vector<std::vector<std::byte>> out;
  for (int d = 0; d < n; ++d) out.push_back(f.download(d, buf[static_cast<std::size_t>(d)], bytes));
  return out;
}

}  // namespace

TEST_CASE("all_reduce gives every rank the rank-order reference, bit for bit, for every algorithm",
          "[collective][functional]") {
  const auto algo = GENERATE(collective_algorithm::ring, collective_algorithm::mesh, collective_algorithm::rhd,
                             collective_algorithm::automatic);
  const int n = GENERATE(3, 4);
  CAPTURE(to_string(algo), n);
  std::vector<std::vector<std::byte>> in;
  const auto out = run_all_reduce(mesh_preset(n), algo, dtype::f32, reduce_op::sum, 1000, &in);
  const auto ref = reference_reduce(in, dtype::f32, reduce_op::sum, 0, in[0].size());
  for (const auto& o : out) REQUIRE(o == ref);
  // Floating-point sums depend on order: another order must give other bits somewhere, or the
  // check above could not tell a wrong order.
  auto rev = in;
  std::reverse(rev.begin(), rev.end());
  CHECK(reference_reduce(rev, dtype::f32, reduce_op::sum, 0, in[0].size()) != ref);
  // Run again: the same bits.
  std::vector<std::vector<std::byte>> in2;
  CHECK(run_all_reduce(mesh_preset(n), algo, dtype::f32, reduce_op::sum, 1000, &in2) == out);
}

TEST_CASE("all_reduce reduces every dtype with every operator like the reference", "[collective][functional]") {
  const auto t = GENERATE(dtype::f32, dtype::f16, dtype::bf16, dtype::i32, dtype::u8);
  const auto r = GENERATE(reduce_op::sum, reduce_op::prod, reduce_op::max, reduce_op::min);
  CAPTURE(to_string(t), to_string(r));
  std::vector<std::vector<std::byte>> in;
  auto preset = roce_preset(3);
  preset.supports_bf16 = true;  // ascend910 (910A) cannot reduce bf16
  const auto out = run_all_reduce(preset, collective_algorithm::ring, t, r, 257, &in);
  const auto ref = reference_reduce(in, t, r, 0, in[0].size());
  for (const auto& o : out) REQUIRE(o == ref);
}

TEST_CASE("all_gather, reduce_scatter, broadcast, reduce and all_to_all move the right bytes",
          "[collective][functional]") {
  const int n = 4;
  const std::size_t count = 33;
  const dtype t = dtype::f32;
  const std::size_t blk = count * 4;
  fixture f(mesh_preset(n));
  auto comm = communicator::init_all(f.sys);
  std::vector<std::vector<std::byte>> in;  // n * blk bytes per rank
  std::vector<void*> src, dst;
  for (int d = 0; d < n; ++d) {
    in.push_back(random_bytes(n * blk, 77u + static_cast<std::uint32_t>(d), t));
    src.push_back(f.upload(d, in.back()));
    dst.push_back(f.zeros(d, n * blk));
  }
  const auto s = [&](int d) -> stream& { return f.streams[static_cast<std::size_t>(d)]; };

  SECTION("all_gather") {
    for (int d = 0; d < n; ++d) comm.all_gather(src[d], dst[d], count, t, s(d));
    f.sys.run();
    for (int d = 0; d < n; ++d) {
      const auto got = f.download(d, dst[d], n * blk);
      for (int j = 0; j < n; ++j)
        REQUIRE(std::equal(got.begin() + j * blk, got.begin() + (j + 1) * blk, in[j].begin()));
    }
  }
  SECTION("reduce_scatter") {
    for (int d = 0; d < n; ++d) comm.reduce_scatter(src[d], dst[d], count, t, reduce_op::sum, s(d));
    f.sys.run();
    for (int d = 0; d < n; ++d) {
      const auto got = f.download(d, dst[d], blk);
      REQUIRE(got == reference_reduce(in, t, reduce_op::sum, d * blk, blk));
    }
  }
  SECTION("broadcast from rank 2") {
    for (int d = 0; d < n; ++d) comm.broadcast(src[d], n * count, t, 2, s(d));
    f.sys.run();
    for (int d = 0; d < n; ++d) REQUIRE(f.download(d, src[d], n * blk) == in[2]);
  }
  SECTION("reduce to rank 1 leaves the others' outputs alone") {
    for (int d = 0; d < n; ++d) comm.reduce(src[d], dst[d], n * count, t, reduce_op::max, 1, s(d));
    f.sys.run();
    REQUIRE(f.download(1, dst[1], n * blk) == reference_reduce(in, t, reduce_op::max, 0, n * blk));
    REQUIRE(f.download(0, dst[0], n * blk) == std::vector<std::byte>(n * blk));
  }
  SECTION("all_to_all") {
    for (int d = 0; d < n; ++d) comm.all_to_all(src[d], dst[d], count, t, s(d));
    f.sys.run();
    for (int d = 0; d < n; ++d) {
      const auto got = f.download(d, dst[d], n * blk);
      for (int j = 0; j < n; ++j)
        REQUIRE(std::equal(got.begin() + j * blk, got.begin() + (j + 1) * blk, in[j].begin() + d * blk));
    }
  }
  SECTION("all_to_allv with uneven blocks") {
    // Rank s sends (s + d + 1) elements to rank d.
    for (int d = 0; d < n; ++d) {
      std::vector<std::size_t> sc(n), sd(n), rc(n), rd(n);
      std::size_t so = 0, ro = 0;
      for (int j = 0; j < n; ++j) {
        sc[j] = static_cast<std::size_t>(d + j + 1), sd[j] = so, so += sc[j];
        rc[j] = static_cast<std::size_t>(j + d + 1), rd[j] = ro, ro += rc[j];
      }
      comm.enqueue(communicator::all_to_allv_call(src[d], sc, sd, dst[d], rc, rd, t), s(d));
    }
    f.sys.run();
    REQUIRE_FALSE(comm.async_error());
    for (int d = 0; d < n; ++d) {
      const auto got = f.download(d, dst[d], n * blk);
      std::size_t ro = 0;
      for (int j = 0; j < n; ++j) {
        std::size_t so = 0;
        for (int k = 0; k < d; ++k) so += static_cast<std::size_t>(j + k + 1);
        const std::size_t len = static_cast<std::size_t>(j + d + 1) * 4;
        REQUIRE(std::equal(got.begin() + ro * 4, got.begin() + ro * 4 + len, in[j].begin() + so * 4));
        ro += static_cast<std::size_t>(j + d + 1);
      }
    }
  }
  SECTION("send and recv in a group exchange without deadlock") {
    // Each rank sends to the next and receives from the previous, on one stream.
    comm.group_start();
    for (int d = 0; d < n; ++d) {
      CHECK_FALSE(comm.send(src[d], count, t, (d + 1) % n, s(d)).valid());
      comm.recv(dst[d], count, t, (d + n - 1) % n, s(d));
    }
    comm.group_end();
    f.sys.run();
    for (int d = 0; d < n; ++d) {
      const auto got = f.download(d, dst[d], blk);
      REQUIRE(std::equal(got.begin(), got.end(), in[(d + n - 1) % n].begin()));
    }
  }
}

TEST_CASE("a cancelled await of a collective ends at the emit, and the call still runs with its peers",
          "[collective][api][cancel]") {
  namespace asio = boost::asio;
  fixture f(mesh_preset(2));
  auto comm = communicator::init_all(f.sys, {.keep_records = true});
  std::vector<std::byte> h0 = random_bytes(64, 1, dtype::f32), h1 = random_bytes(64, 2, dtype::f32);
  void* b0 = f.upload(0, h0);
  void* b1 = f.upload(1, h1);
  f.sys.run();
  const auto type =
      GENERATE(asio::cancellation_type::terminal, asio::cancellation_type::partial, asio::cancellation_type::total);
  asio::cancellation_signal sig;
  std::error_code got;
  sim_time completed{}, emitted{};
  // Rank 0 arrives first and waits for rank 1, which a millisecond of compute holds back.
  asio::co_spawn(
      f.sys.get_executor(),
      [&]() -> asio::awaitable<void> {
        auto [e] = co_await comm.async_all_reduce(
            b0, b0, 16, dtype::f32, reduce_op::sum, f.streams[0],
            asio::bind_cancellation_slot(sig.slot(), asio::as_tuple(asio::use_awaitable)));
        got = e;
        completed = f.sys.now();
      },
      asio::detached);
  asio::co_spawn(
      f.sys.get_executor(),
      [&]() -> asio::awaitable<void> {
        co_await f.streams[1].async_launch(kernel_desc{kernels::fixed{picoseconds{1'000'000'000}}, "compute"},
                                           asio::use_awaitable);
        emitted = f.sys.now();
        sig.emit(type);
        comm.all_reduce(b1, b1, 16, dtype::f32, reduce_op::sum, f.streams[1]);
      },
      asio::detached);
  f.sys.run();
  REQUIRE(comm.records().size() == 1);
  const collective_record rec = comm.records()[0];
  CHECK_FALSE(rec.error);
  if (type == asio::cancellation_type::total) {
    // Total cancellation would need the call un-queued, which a stream never does: ignored.
    CHECK_FALSE(got);
    CHECK(completed == rec.end);
  } else {
    CHECK(got == errc::operation_aborted);
    CHECK(completed == emitted);
    CHECK(rec.end > emitted);  // it ran after the emit, with rank 1
  }
  for (auto& s : f.streams) {
    std::error_code ec;
    s.synchronize(no_timeout, ec);
    CHECK_FALSE(ec);
  }
  CHECK(f.download(0, b0, 64) == reference_reduce({h0, h1}, dtype::f32, reduce_op::sum, 0, 64));
}

TEST_CASE("max and min propagate a NaN whichever rank holds it", "[collective][reduce]") {
  for (const reduce_op op : {reduce_op::max, reduce_op::min})
    for (int nan_rank = 0; nan_rank < 4; ++nan_rank) {
      INFO(to_string(op) << ", NaN on rank " << nan_rank);
      fixture f(mesh_preset(4));
      auto comm = communicator::init_all(f.sys);
      std::vector<void*> buf;
      for (int r = 0; r < 4; ++r) {
        const float v = r == nan_rank ? std::numeric_limits<float>::quiet_NaN() : 1.0f;
        std::vector<std::byte> h(sizeof v);
        std::memcpy(h.data(), &v, sizeof v);
        buf.push_back(f.upload(r, h));
      }
      for (int r = 0; r < 4; ++r) comm.all_reduce(buf[r], buf[r], 1, dtype::f32, op, f.streams[r]);
      for (int r = 0; r < 4; ++r) {
        const auto out = f.download(r, buf[r], sizeof(float));
        float v = 0;
        std::memcpy(&v, out.data(), sizeof v);
        CHECK(std::isnan(v));
      }
    }
}

TEST_CASE("the async form completes through any token and reports the error of a bad call", "[collective][api]") {
  fixture f(mesh_preset(2));
  auto comm = communicator::init_all(f.sys);
  std::vector<std::byte> h0 = random_bytes(64, 1, dtype::f32), h1 = random_bytes(64, 2, dtype::f32);
  void* b0 = f.upload(0, h0);
  void* b1 = f.upload(1, h1);
  int done = 0;
  sim_time when0{}, when1{};
  boost::asio::co_spawn(
      f.sys.get_executor(),
      [&]() -> boost::asio::awaitable<void> {
        co_await comm.async_all_reduce(b0, b0, 16, dtype::f32, reduce_op::sum, f.streams[0],
                                       boost::asio::use_awaitable);
        when0 = f.sys.now();
        ++done;
      },
      boost::asio::detached);
  comm.async_all_reduce(b1, b1, 16, dtype::f32, reduce_op::sum, f.streams[1], [&](async_error_code ec) {
    CHECK_FALSE(ec);
    when1 = f.sys.now();
    ++done;
  });
  f.sys.run();
  CHECK(done == 2);
  CHECK(when0 == when1);
  CHECK(f.download(0, b0, 64) == reference_reduce({h0, h1}, dtype::f32, reduce_op::sum, 0, 64));

  // Caller errors: nothing is enqueued, the error names the problem.
  std::error_code ec;
  comm.all_reduce(b0, b0, 17, dtype::f32, reduce_op::sum, f.streams[0], ec);  // 68 bytes > 64
  CHECK(ec == errc::size_overflow);
  comm.all_reduce(b1, b1, 16, dtype::f32, reduce_op::sum, f.streams[0], ec);  // rank 0's stream, rank 1's buffer
  CHECK(ec == errc::stream_device_mismatch);
  comm.broadcast(b0, 16, dtype::f32, 5, f.streams[0], ec);
  CHECK(ec == errc::invalid_argument);
  comm.send(b0, 16, dtype::f32, 0, f.streams[0], ec);  // to itself
  CHECK(ec == errc::invalid_argument);
  CHECK_THROWS_AS(comm.all_reduce(nullptr, b0, 16, dtype::f32, reduce_op::sum, f.streams[0]), caller_error);
  async_error_code aec;
  comm.async_all_reduce(b0, b0, 17, dtype::f32, reduce_op::sum, f.streams[0], [&](async_error_code e) { aec = e; });
  f.sys.run();
  CHECK(aec == errc::size_overflow);
  CHECK_FALSE(comm.async_error());
  CHECK(f.sys.device(0).make_stream().query());
}

TEST_CASE("ranks that call different operations fail with a mismatch naming the ranks and calls",
          "[collective][errors]") {
  fixture f(roce_preset(3));
  auto comm = communicator::init_all(f.sys, {.name = "dp"});
  SECTION("different counts") {
    std::error_code e0, e2;
    comm.all_reduce(nullptr, nullptr, 0, dtype::f32, reduce_op::sum, f.streams[0]);
    // Timing-free zero-count calls; then a real mismatch at call #1.
    comm.all_reduce(nullptr, nullptr, 0, dtype::f32, reduce_op::sum, f.streams[1]);
    comm.all_reduce(nullptr, nullptr, 0, dtype::f32, reduce_op::sum, f.streams[2]);
    void* a = f.sys.device(0).malloc(4096);
    void* b = f.sys.device(1).malloc(4096);
    void* c = f.sys.device(2).malloc(4096);
    comm.all_reduce(a, a, 16, dtype::f32, reduce_op::sum, f.streams[0]);
    comm.all_reduce(b, b, 32, dtype::f32, reduce_op::sum, f.streams[1]);
    async_error_code on_rank2;
    comm.async_all_reduce(c, c, 16, dtype::f32, reduce_op::sum, f.streams[2],
                          [&](async_error_code e) { on_rank2 = e; });
    f.sys.run();
    std::string msg;
    CHECK(comm.async_error(&msg) == errc::collective_mismatch);
    CHECK_THAT(msg, ContainsSubstring("'dp'") && ContainsSubstring("call #1") && ContainsSubstring("rank 1") &&
                        ContainsSubstring("count=32") && ContainsSubstring("count=16"));
    // Every rank's part fails; none hangs.
    CHECK(on_rank2 == errc::collective_mismatch);
  }
  SECTION("calls in a different order") {
    void* a = f.sys.device(0).malloc(4096);
    void* b = f.sys.device(1).malloc(4096);
    void* c = f.sys.device(2).malloc(4096);
    comm.all_reduce(a, a, 16, dtype::f32, reduce_op::sum, f.streams[0]);
    comm.all_gather(a, a, 4, dtype::f32, f.streams[0]);
    comm.all_gather(b, b, 4, dtype::f32, f.streams[1]);
    comm.all_reduce(b, b, 16, dtype::f32, reduce_op::sum, f.streams[1]);
    comm.all_reduce(c, c, 16, dtype::f32, reduce_op::sum, f.streams[2]);
    comm.all_gather(c, c, 4, dtype::f32, f.streams[2]);
    std::error_code ec;
    f.sys.run(ec);
    std::string msg;
    CHECK(comm.async_error(&msg) == errc::collective_mismatch);
    CHECK_THAT(msg, ContainsSubstring("all_reduce") && ContainsSubstring("all_gather") && ContainsSubstring("call #0"));
  }
}

// A synchronize's exception is often the only report a program logs: it must say what the ranks
// disagreed on, not only that they did.
TEST_CASE("a synchronize that reports a mismatched collective says which field differs on which ranks",
          "[collective][errors]") {
  fixture f(roce_preset(2));
  auto comm = communicator::init_all(f.sys, {.name = "tp"});
  void* a = f.sys.device(0).malloc(4096);
  void* b = f.sys.device(1).malloc(4096);
  std::string rank0, rank1, field;
  SECTION("counts") {
    comm.all_reduce(a, a, 16, dtype::f32, reduce_op::sum, f.streams[0]);
    comm.all_reduce(b, b, 32, dtype::f32, reduce_op::sum, f.streams[1]);
    rank0 = "count=16", rank1 = "count=32", field = "differ in count)";
  }
  SECTION("datatypes") {
    comm.all_reduce(a, a, 16, dtype::f32, reduce_op::sum, f.streams[0]);
    comm.all_reduce(b, b, 16, dtype::f16, reduce_op::sum, f.streams[1]);
    rank0 = "f32", rank1 = "f16", field = "differ in datatype)";
  }
  SECTION("ops") {
    comm.all_reduce(a, a, 16, dtype::f32, reduce_op::sum, f.streams[0]);
    comm.all_reduce(b, b, 16, dtype::f32, reduce_op::max, f.streams[1]);
    rank0 = "sum", rank1 = "max", field = "differ in reduction op)";
  }
  SECTION("roots") {
    comm.broadcast(a, 16, dtype::f32, 0, f.streams[0]);
    comm.broadcast(b, 16, dtype::f32, 1, f.streams[1]);
    rank0 = "root=0", rank1 = "root=1", field = "differ in root)";
  }
  std::error_code ec;
  f.sys.run(ec);
  std::string async_msg;
  REQUIRE(comm.async_error(&async_msg) == errc::collective_mismatch);
  auto check_names_both = [&](const std::string& text) {
    CHECK_THAT(text, ContainsSubstring("'tp'") && ContainsSubstring("rank 0 called") &&
                         ContainsSubstring("rank 1 called") && ContainsSubstring(rank0) && ContainsSubstring(rank1) &&
                         ContainsSubstring(field));
  };
  check_names_both(async_msg);
  for (std::size_t r = 0; r < 2; ++r) {
    try {
      f.streams[r].synchronize();
      FAIL("stream " << r << "'s synchronize did not throw");
    } catch (const std::system_error& e) {
      CHECK(e.code() == errc::collective_mismatch);
      check_names_both(e.what());
      CHECK_THAT(std::string(e.what()), ContainsSubstring(async_msg));
    }
    try {
      f.sys.device(static_cast<int>(r)).synchronize();
      FAIL("device " << r << "'s synchronize did not throw");
    } catch (const std::system_error& e) {
      CHECK(e.code() == errc::collective_mismatch);
      check_names_both(e.what());
    }
  }
}

// One report per mismatch must show the whole disagreement: naming only the first rank that
// differs sends the reader back to find the others one run at a time.
TEST_CASE("a mismatch names every rank whose call differs, with its call", "[collective][errors]") {
  fixture f(roce_preset(4));
  auto comm = communicator::init_all(f.sys, {.name = "dp"});
  std::vector<void*> buf;
  for (int r = 0; r < 4; ++r) buf.push_back(f.sys.device(r).malloc(4096));
  comm.all_reduce(buf[0], buf[0], 16, dtype::f32, reduce_op::sum, f.streams[0]);
  comm.all_reduce(buf[1], buf[1], 32, dtype::f32, reduce_op::sum, f.streams[1]);
  comm.all_reduce(buf[2], buf[2], 16, dtype::f16, reduce_op::sum, f.streams[2]);
  comm.all_reduce(buf[3], buf[3], 16, dtype::f32, reduce_op::sum, f.streams[3]);  // agrees with rank 0
  std::error_code ec;
  f.sys.run(ec);
  std::string msg;
  REQUIRE(comm.async_error(&msg) == errc::collective_mismatch);
  CHECK_THAT(msg, ContainsSubstring("rank 0 called all_reduce(count=16, f32, sum) but rank 1 called "
                                    "all_reduce(count=32, f32, sum) (they differ in count), rank 2 called "
                                    "all_reduce(count=16, f16, sum) (they differ in datatype)"));
  CHECK_THAT(msg, !ContainsSubstring("rank 3"));
  CHECK_THAT(msg, !ContainsSubstring("more ranks differ"));
  for (std::size_t r = 0; r < 4; ++r) {
    try {
      f.streams[r].synchronize();
      FAIL("stream " << r << "'s synchronize did not throw");
    } catch (const std::system_error& e) {
      CHECK(e.code() == errc::collective_mismatch);
      CHECK_THAT(std::string(e.what()), ContainsSubstring(msg));
    }
  }
}

// A rank whose stream is busy longer reaches the call after the others' mismatch (or timeout)
// has failed it: it must still be told, at its arrival, that its own call differs and how.
namespace {

struct late_rank_outcome {
  std::vector<errc> code;
  std::vector<std::string> what;
  std::string async_message;
  sim_time late_kernel_end{}, rank3_start{}, rank3_end{}, rank0_end{};
};

// reset_rank0: device 0 is reset 10 us in, while its rank waits for rank 3.
late_rank_outcome run_with_late_rank3(const std::vector<std::size_t>& counts, std::optional<picoseconds> exec_timeout,
                                      bool reset_rank0 = false) {
  struct ends final : observer {
    late_rank_outcome* out;
    explicit ends(late_rank_outcome* o) : out(o) {}
    void on_task(const task_info& t) override {
      if (t.name == "late") out->late_kernel_end = t.end;
      if (t.name == "all_reduce" && t.device == 3) out->rank3_start = t.start, out->rank3_end = t.end;
      if (t.name == "all_reduce" && t.device == 0) out->rank0_end = t.end;
    }
  };
  late_rank_outcome out;
  ends seen(&out);
  fixture f(roce_preset(4));
  f.sys.add_observer(seen);
  auto comm = communicator::init_all(f.sys, {.exec_timeout = exec_timeout, .name = "dp"});
  // Rank 3 first runs 100 us of compute; the others reach the call at once.
  f.streams[3].launch(kernel_desc{kernels::fixed{picoseconds{100'000'000}}, "late"});
  for (int r = 0; r < 4; ++r) {
    void* p = f.sys.device(r).malloc(4096);
    comm.all_reduce(p, p, counts[static_cast<std::size_t>(r)], dtype::f32, reduce_op::sum,
                    f.streams[static_cast<std::size_t>(r)]);
  }
  stream aux = f.sys.device(1).make_stream();
  if (reset_rank0) {
    aux.launch(kernel_desc{kernels::fixed{picoseconds{10'000'000}}, "pause"});
    aux.launch_callback([&] { f.sys.device(0).reset(); });
  }
  std::error_code ec;
  f.sys.run(ec);
  CHECK_FALSE(ec);  // nothing deadlocked or waited for ever
  (void)comm.async_error(&out.async_message);
  for (std::size_t r = 0; r < 4; ++r) {
    if (r == 0 && reset_rank0) {  // its stream went with the reset
      out.code.push_back(errc{});
      out.what.emplace_back();
      continue;
    }
    try {
      f.streams[r].synchronize();
      out.code.push_back(errc{});
      out.what.emplace_back();
    } catch (const std::system_error& e) {
      out.code.push_back(static_cast<errc>(e.code().value()));
      out.what.emplace_back(e.what());
    }
  }
  f.sys.remove_observer(seen);
  return out;
}

}  // namespace

TEST_CASE("a rank that arrives after the call failed is named with its own call, at its arrival",
          "[collective][errors]") {
  const std::string late_why =
      "rank 3, arriving after the call had failed, called all_reduce(count=32, f32, sum) but "
      "rank 0 called all_reduce(count=16, f32, sum) (they differ in count); the call had "
      "failed with: ";
  // Rank 3 fails at its arrival, when its compute has ended, without waiting for anything.
  auto at_arrival = [](const late_rank_outcome& o) {
    CHECK(o.rank3_start >= o.late_kernel_end);
    CHECK(o.rank3_end == o.rank3_start);
  };
  SECTION("after a mismatch of the ranks that came first") {
    // Rank 2 differs in the first instant: the call fails then, before rank 3 arrives.
    const auto o = run_with_late_rank3({16, 16, 8, 32}, std::nullopt);
    const std::string earlier =
        "collective mismatch in communicator 'dp' (id 1), call #0: rank 0 called all_reduce(count=16, f32, sum) but "
        "rank 2 called all_reduce(count=8, f32, sum) (they differ in count); rank(s) 3 had not arrived";
    for (std::size_t r = 0; r < 3; ++r) {
      CHECK(o.code[r] == errc::collective_mismatch);
      CHECK_THAT(o.what[r], ContainsSubstring(earlier) && !ContainsSubstring("rank 3,"));
    }
    CHECK(o.code[3] == errc::collective_mismatch);
    CHECK_THAT(o.what[3], ContainsSubstring(late_why + earlier));
    // The communicator's report has both failures, the first one first.
    CHECK_THAT(o.async_message, ContainsSubstring(earlier +
                                                  "\ncollective mismatch in communicator 'dp' (id 1), "
                                                  "call #0: " +
                                                  late_why));
    CHECK(o.rank0_end < o.late_kernel_end);  // the first ranks failed without waiting for rank 3
    at_arrival(o);
  }
  SECTION("after the execution timeout") {
    // 50 us: the first ranks give up on rank 3 before its 100 us of compute end.
    const auto o = run_with_late_rank3({16, 16, 16, 32}, picoseconds{50'000'000});
    for (std::size_t r = 0; r < 3; ++r) {
      CHECK(o.code[r] == errc::task_timeout);
      CHECK_THAT(o.what[r], ContainsSubstring("exec_timeout") && ContainsSubstring("rank(s) 3 had not arrived"));
    }
    CHECK(o.code[3] == errc::collective_mismatch);
    CHECK_THAT(o.what[3], ContainsSubstring(late_why + "HCCL execution timeout") &&
                              ContainsSubstring("rank(s) 3 had not arrived"));
    CHECK_THAT(o.async_message, ContainsSubstring("\ncollective mismatch in communicator 'dp' (id 1), call #0: " +
                                                  late_why + "HCCL execution timeout"));
    at_arrival(o);
  }
  SECTION("after a reset of the first rank's device: the communicator is gone") {
    const auto o = run_with_late_rank3({16, 16, 16, 32}, std::nullopt, true);
    for (std::size_t r = 1; r < 3; ++r) {
      CHECK(o.code[r] == errc::operation_aborted);
      CHECK_THAT(o.what[r], ContainsSubstring("device 0 was reset with all_reduce(count=16, f32, sum)"));
    }
    // The reset took the communicator down with it: a rank that comes later is told that, whatever
    // its call, as every later call is.
    CHECK(o.code[3] == errc::operation_aborted);
    CHECK_THAT(o.what[3], ContainsSubstring("device 0 was reset") && ContainsSubstring("make a new communicator"));
    at_arrival(o);
  }
  SECTION("a late rank whose call matches gets the failure it came too late for") {
    const auto o = run_with_late_rank3({16, 16, 8, 16}, std::nullopt);
    CHECK(o.code[3] == errc::collective_mismatch);
    CHECK_THAT(o.what[3], ContainsSubstring("rank 2 called all_reduce(count=8, f32, sum) (they differ in count); "
                                            "rank(s) 3 had not arrived") &&
                              !ContainsSubstring("arriving after"));
    CHECK_THAT(o.async_message, !ContainsSubstring("arriving after"));
    at_arrival(o);
  }
}

TEST_CASE("a mismatch names at most 8 differing ranks and counts the rest", "[collective][errors]") {
  constexpr int n = 12;
  fixture f(roce_preset(n), coll_test::timing_only());
  auto comm = communicator::init_all(f.sys, {.name = "wide"});
  // Every rank but 0 asks for its own count: 11 ranks differ, 8 are named, 3 are counted.
  for (int r = 0; r < n; ++r) {
    void* p = f.sys.device(r).malloc(4096);
    comm.all_reduce(p, p, static_cast<std::size_t>(16 + r), dtype::f32, reduce_op::sum,
                    f.streams[static_cast<std::size_t>(r)]);
  }
  std::error_code ec;
  f.sys.run(ec);
  std::string msg;
  REQUIRE(comm.async_error(&msg) == errc::collective_mismatch);
  for (int r = 1; r <= 8; ++r)
    CHECK_THAT(msg, ContainsSubstring("rank " + std::to_string(r) + " called all_reduce(count=" +
                                      std::to_string(16 + r) + ", f32, sum) (they differ in count)"));
  for (int r = 9; r < n; ++r) CHECK_THAT(msg, !ContainsSubstring("rank " + std::to_string(r) + " "));
  CHECK_THAT(msg, ContainsSubstring("(they differ in count), and 3 more ranks differ"));
}

TEST_CASE("a rank that never arrives fails the operation at the execution timeout, naming it", "[collective][errors]") {
  fixture f(roce_preset(3));
  auto comm = communicator::init_all(f.sys, {.exec_timeout = picoseconds{50'000'000'000'000LL}, .name = "seed"});
  async_error_code on_rank0;
  comm.async_barrier(f.streams[0], [&](async_error_code e) { on_rank0 = e; });
  comm.barrier(f.streams[2]);
  std::error_code ec;
  f.sys.run(ec);
  std::string msg;
  CHECK(comm.async_error(&msg) == errc::task_timeout);
  CHECK_THAT(msg, ContainsSubstring("exec_timeout") && ContainsSubstring("50 s") && ContainsSubstring("barrier") &&
                      ContainsSubstring("'seed'") && ContainsSubstring("rank(s) 1 had not arrived"));
  // The timer fired 50 s after the first rank arrived, and no earlier.
  const double t = to_ms(f.sys.now().time_since_epoch());
  CHECK(t >= 50'000.0);
  CHECK(t < 50'001.0);
  CHECK(on_rank0 == errc::task_timeout);
  CHECK_THROWS_AS(throw_error(on_rank0), timeout_error);
}

TEST_CASE("a finished operation cancels its timeout: the clock does not move to it", "[collective][errors]") {
  fixture f(roce_preset(2));
  auto comm = communicator::init_all(f.sys, {.exec_timeout = picoseconds{50'000'000'000'000LL}});
  comm.barrier(f.streams[0]);
  comm.barrier(f.streams[1]);
  f.sys.run();
  CHECK(to_ms(f.sys.now().time_since_epoch()) < 1.0);
  CHECK_FALSE(comm.async_error());
}

TEST_CASE("abort fails pending operations and refuses new ones", "[collective][errors]") {
  fixture f(roce_preset(2));
  auto comm = communicator::init_all(f.sys, {.exec_timeout = no_timeout, .connect_timeout = no_timeout});
  comm.barrier(f.streams[0]);
  std::error_code ec;
  f.sys.run(ec);  // rank 1 never calls and no timeout is set: nothing can progress
  CHECK(ec == errc::deadlock);
  CHECK_THAT(f.sys.deadlock_report(), ContainsSubstring("barrier") && ContainsSubstring("waits for rank(s) 1"));
  comm.abort(ec);
  CHECK_FALSE(ec);
  f.sys.run(ec);
  CHECK_FALSE(ec);
  std::string why;
  CHECK(comm.async_error(&why) == errc::operation_aborted);
  // Who aborted it: the application, not a reset or a fault.
  CHECK_THAT(why, ContainsSubstring("barrier") && ContainsSubstring("communicator::abort() was called"));
  comm.abort(ec);  // a second abort changes nothing
  CHECK_FALSE(ec);
  // Nobody awaited the barrier: its failure is stream 0's sticky error, reported once.
  CHECK_FALSE(f.streams[0].query(ec));
  CHECK(ec == errc::operation_aborted);
  CHECK(f.streams[0].query());
  comm.barrier(f.streams[1], ec);
  CHECK(ec == errc::operation_aborted);
  try {
    comm.barrier(f.streams[1]);
    FAIL("a call after abort must throw");
  } catch (const npurt::error& e) {
    CHECK(e.code() == errc::operation_aborted);
    CHECK_THAT(e.what(), ContainsSubstring("communicator::abort() was called"));
  }
  // The error_code form on an empty handle reports, never throws.
  npurt::communicator empty;
  CHECK_NOTHROW(empty.abort(ec));
  CHECK(ec == errc::invalid_argument);
}

TEST_CASE("group_end after abort reports the group's calls as aborted", "[collective][errors]") {
  fixture f(roce_preset(2), coll_test::timing_only());
  auto comm = communicator::init_all(f.sys);
  comm.group_start();
  comm.send(nullptr, 4, dtype::f32, 1, f.streams[0]);
  comm.recv(nullptr, 4, dtype::f32, 1, f.streams[0]);
  comm.abort();
  std::error_code ec;
  comm.group_end(ec);
  CHECK(ec == errc::operation_aborted);
  CHECK_THROWS_AS(
      [&] {
        comm.group_start();
        comm.group_end();
      }(),
      npurt::error);
  CHECK(f.streams[0].query());  // nothing was enqueued
}

TEST_CASE("group_end with a stream destroyed inside the group enqueues none of the group", "[collective][errors]") {
  fixture f(roce_preset(2), coll_test::timing_only());
  auto comm = communicator::init_all(f.sys, {.exec_timeout = no_timeout, .connect_timeout = no_timeout, .name = "g"});
  comm.group_start();
  comm.all_reduce(nullptr, nullptr, 4, dtype::f32, reduce_op::sum, f.streams[0]);
  comm.all_reduce(nullptr, nullptr, 4, dtype::f32, reduce_op::sum, f.streams[1]);
  f.streams[1] = npurt::stream{};  // rank 1's stream goes before the group is submitted
  std::error_code ec;
  comm.group_end(ec);
  CHECK(ec == errc::invalid_stream);
  // Rank 0's part was not enqueued alone, to wait for ever for a rank 1 that never comes.
  CHECK(f.streams[0].query());
  f.sys.run(ec);
  CHECK_FALSE(ec);
}

TEST_CASE("a fire-and-forget collective that fails is its stream's sticky error, and only its stream's",
          "[collective][errors]") {
  fixture f(roce_preset(3));
  auto comm = communicator::init_all(f.sys, {.exec_timeout = picoseconds{1'000'000'000}, .name = "sticky"});
  comm.barrier(f.streams[0]);  // ranks 1 and 2 never call: the 1 ms timeout fires
  std::error_code ec;
  f.streams[0].synchronize(no_timeout, ec);
  CHECK(ec == errc::task_timeout);
  f.streams[0].synchronize(no_timeout, ec);  // read once
  CHECK_FALSE(ec);
  CHECK(f.streams[1].query(ec));
  CHECK_FALSE(ec);
  f.sys.device(0).synchronize(no_timeout, ec);  // the device's first failure, kept apart
  CHECK(ec == errc::task_timeout);
}

TEST_CASE("resetting a device fails the collectives it takes part in on the other ranks", "[collective][errors]") {
  SECTION("an operation still waiting for the reset device's rank") {
    fixture f(roce_preset(3));
    auto comm = communicator::init_all(f.sys, {.exec_timeout = no_timeout, .connect_timeout = no_timeout, .name = "r"});
    async_error_code on_rank0;
    comm.async_barrier(f.streams[0], [&](async_error_code e) { on_rank0 = e; });
    comm.barrier(f.streams[1]);
    std::error_code ec;
    f.sys.run(ec);  // rank 2 never calls and no timeout is set
    CHECK(ec == errc::deadlock);
    f.sys.device(1).reset();
    f.sys.run(ec);
    CHECK_FALSE(ec);
    CHECK(on_rank0 == errc::operation_aborted);
    std::string msg;
    CHECK(comm.async_error(&msg) == errc::operation_aborted);
    CHECK_THAT(msg,
               ContainsSubstring("device 1 was reset") && ContainsSubstring("barrier") && ContainsSubstring("'r'"));
  }
  SECTION("an operation whose transfers are on the links") {
    fixture f(mesh_preset(2), coll_test::timing_only());
    auto comm = communicator::init_all(f.sys, {.exec_timeout = no_timeout, .connect_timeout = no_timeout, .name = "r"});
    const std::size_t count = std::size_t{1} << 28;  // 1 GiB of f32: tens of ms on HCCS
    for (int d = 0; d < 2; ++d)
      comm.all_reduce(nullptr, nullptr, count, dtype::f32, reduce_op::sum, f.streams[static_cast<std::size_t>(d)]);
    std::error_code ec;
    f.streams[0].synchronize(picoseconds{1'000'000'000}, ec);  // 1 ms in: the ring is running
    CHECK(ec == errc::wait_timeout);
    f.sys.device(1).reset();
    f.sys.run(ec);
    CHECK_FALSE(ec);
    f.streams[0].synchronize(no_timeout, ec);
    CHECK(ec == errc::operation_aborted);
    CHECK(comm.async_error() == errc::operation_aborted);
    // Device 0's engines were let go: a new operation on it runs to the end.
    auto solo = communicator::init_all(f.sys, std::vector<device_id>{0}, {});
    solo.barrier(f.streams[0]);
    f.streams[0].synchronize(no_timeout, ec);
    CHECK_FALSE(ec);
  }
}

TEST_CASE("a reset with an operation in flight aborts the communicator, queued calls and later calls alike",
          "[collective][errors]") {
  fixture f(roce_preset(2));
  auto comm = communicator::init_all(f.sys, {.name = "r"});
  // Rank 0's part is still queued on its stream (the host has not run) when device 1 is reset:
  // rank 1 never made the call, and after the reset its call numbers restart behind rank 0's.
  comm.barrier(f.streams[0]);
  f.sys.device(1).reset();
  std::error_code ec;
  f.streams[0].synchronize(no_timeout, ec);
  CHECK(ec == errc::operation_aborted);
  CHECK(f.sys.now() < sim_time{std::chrono::seconds{1}});  // at once, not at the connect timeout
  CHECK(comm.aborted());
  // HcclGetCommAsyncError says why, as it does for a reset that meets an operation in progress.
  std::string why;
  CHECK(comm.async_error(&why) == errc::operation_aborted);
  CHECK_THAT(why, ContainsSubstring("device 1 was reset") && ContainsSubstring("'r'"));
  try {
    comm.barrier(f.streams[0]);
    FAIL("a call on the aborted communicator was accepted");
  } catch (const caller_error& e) {
    CHECK(e.code() == errc::operation_aborted);
    CHECK_THAT(std::string(e.what()),
               ContainsSubstring("device 1 was reset") && ContainsSubstring("'r'") && ContainsSubstring("init_all"));
  }
  stream s1 = f.sys.device(1).make_stream();
  comm.barrier(s1, ec);
  CHECK(ec == errc::operation_aborted);
  // A new communicator works.
  auto again = communicator::init_all(f.sys);
  again.barrier(f.streams[0]);
  again.barrier(s1);
  f.sys.run();
  f.streams[0].synchronize(no_timeout, ec);
  CHECK_FALSE(ec);
}

TEST_CASE("a reset with nothing in flight leaves the communicator usable", "[collective][errors]") {
  fixture f(roce_preset(2));
  auto comm = communicator::init_all(f.sys);
  comm.barrier(f.streams[0]);
  comm.barrier(f.streams[1]);
  f.sys.run();
  f.sys.device(1).reset();
  CHECK_FALSE(comm.aborted());
  stream s1 = f.sys.device(1).make_stream();
  comm.barrier(f.streams[0]);
  comm.barrier(s1);
  f.sys.run();
  std::error_code ec;
  f.streams[0].synchronize(no_timeout, ec);
  CHECK_FALSE(ec);
  s1.synchronize(no_timeout, ec);
  CHECK_FALSE(ec);
}

TEST_CASE("a reset inside an open group drops the whole group and the ranks stay matched", "[collective][errors]") {
  fixture f(roce_preset(2));
  auto comm = communicator::init_all(f.sys);
  std::vector<std::vector<std::byte>> in;
  std::vector<void*> buf;
  for (int d = 0; d < 2; ++d) {
    in.push_back(random_bytes(64, 31u + static_cast<std::uint32_t>(d), dtype::f32));
    buf.push_back(f.upload(d, in.back()));
  }
  f.sys.run();
  SECTION("the error_code form") {
    comm.group_start();
    comm.barrier(f.streams[0]);
    comm.barrier(f.streams[1]);
    f.sys.device(1).reset();
    std::error_code ec;
    comm.group_end(ec);
    CHECK(ec == errc::invalid_stream);
  }
  SECTION("the throwing form says what happened to the calls") {
    comm.group_start();
    comm.barrier(f.streams[0]);
    comm.barrier(f.streams[1]);
    f.sys.device(1).reset();
    try {
      comm.group_end();
      FAIL("group_end did not report the reset stream");
    } catch (const caller_error& e) {
      CHECK(e.code() == errc::invalid_stream);
      CHECK_THAT(std::string(e.what()), ContainsSubstring("device reset") && ContainsSubstring("none of the group"));
    }
  }
  SECTION("a group holding the reset rank's call only gives back its call number") {
    comm.group_start();
    comm.barrier(f.streams[1]);
    f.sys.device(1).reset();
    std::error_code ec;
    comm.group_end(ec);
    CHECK(ec == errc::invalid_stream);
  }
  // Nothing of the group ran on rank 0 either, and the next calls of both ranks match: an
  // AllReduce on fresh memory of the reset device gives the sum.
  std::error_code ec;
  f.streams[0].synchronize(no_timeout, ec);
  CHECK_FALSE(ec);
  CHECK_FALSE(comm.aborted());
  stream s1 = f.sys.device(1).make_stream();
  void* fresh = f.sys.device(1).malloc(64);
  (void)s1.memcpy(fresh, 64, in[1].data(), 64);
  comm.all_reduce(buf[0], buf[0], 16, dtype::f32, reduce_op::sum, f.streams[0]);
  comm.all_reduce(fresh, fresh, 16, dtype::f32, reduce_op::sum, s1);
  f.sys.run();
  const auto ref = reference_reduce({in[0], in[1]}, dtype::f32, reduce_op::sum, 0, 64);
  CHECK(f.download(0, buf[0], 64) == ref);
  std::vector<std::byte> out(64);
  (void)s1.memcpy(out.data(), 64, fresh, 64);
  s1.synchronize();
  CHECK(out == ref);
}

TEST_CASE("split makes one communicator per color in parent rank order", "[collective][api]") {
  fixture f(roce_preset(6));
  auto world = communicator::init_all(f.sys);
  const int colors[] = {1, 0, 1, -1, 0, 1};
  auto subs = world.split(colors);
  REQUIRE(subs.size() == 2);
  CHECK(subs[0].devices() == std::vector<device_id>{1, 4});
  CHECK(subs[1].devices() == std::vector<device_id>{0, 2, 5});
  CHECK(subs[1].rank_of(5) == 2);
  CHECK(subs[1].rank_of(3) == -1);
  CHECK(subs[0].id() != subs[1].id());
  // The sub-communicators run independently.
  std::vector<std::vector<std::byte>> in;
  std::vector<void*> buf;
  for (int d = 0; d < 6; ++d) {
    in.push_back(random_bytes(40, 9u + static_cast<std::uint32_t>(d), dtype::f32));
    buf.push_back(f.upload(d, in.back()));
  }
  for (device_id d : {0, 2, 5}) subs[1].all_reduce(buf[d], buf[d], 10, dtype::f32, reduce_op::sum, f.streams[d]);
  f.sys.run();
  const auto ref = reference_reduce({in[0], in[2], in[5]}, dtype::f32, reduce_op::sum, 0, 40);
  for (device_id d : {0, 2, 5}) CHECK(f.download(d, buf[d], 40) == ref);
  CHECK(f.download(1, buf[1], 40) == in[1]);
  std::error_code ec;
  subs[0].barrier(f.streams[0], ec);  // device 0 is not in color 0
  CHECK(ec == errc::stream_device_mismatch);
}

TEST_CASE("split with keys orders each color's ranks by key, as ncclCommSplit does", "[collective][api]") {
  fixture f(roce_preset(6));
  auto world = communicator::init_all(f.sys);
  const int colors[] = {0, 1, 0, 1, 0, -1};
  const int keys[] = {5, 0, 1, 0, 1, 9};  // color 0: rank 2 and 4 tie at key 1, rank 0 last
  auto subs = world.split(colors, keys);
  REQUIRE(subs.size() == 2);
  CHECK(subs[0].devices() == std::vector<device_id>{2, 4, 0});
  CHECK(subs[1].devices() == std::vector<device_id>{1, 3});
  CHECK(subs[0].rank_of(0) == 2);
  // The new ranks are the ones the operations use: an all-gather lays the blocks out in key order.
  std::vector<std::vector<std::byte>> in;
  std::vector<void*> send, recv;
  for (int d = 0; d < 6; ++d) {
    in.push_back(random_bytes(16, 40u + static_cast<std::uint32_t>(d), dtype::f32));
    send.push_back(f.upload(d, in.back()));
    recv.push_back(f.zeros(d, 48));
  }
  for (device_id d : {0, 2, 4}) subs[0].all_gather(send[d], recv[d], 4, dtype::f32, f.streams[d]);
  f.sys.run();
  std::vector<std::byte> want;
  for (device_id d : {2, 4, 0}) want.insert(want.end(), in[d].begin(), in[d].end());
  for (device_id d : {0, 2, 4}) CHECK(f.download(d, recv[d], 48) == want);
  // One key per rank, as one color per rank.
  try {
    (void)world.split(colors, std::vector<int>{0, 1});
    FAIL("a split with 2 keys for 6 ranks was accepted");
  } catch (const caller_error& e) {
    CHECK(e.code() == errc::invalid_argument);
    CHECK_THAT(std::string(e.what()),
               ContainsSubstring("one color and one key per rank (6)") && ContainsSubstring("6 colors and 2 keys"));
  }
}

namespace {
struct step_log final : observer {
  std::vector<std::string> rows;
  void on_collective_step(const collective_step_info& s) override {
    rows.push_back(std::string(s.op) + " " + std::string(s.algorithm) + " " + std::to_string(s.device) + "->" +
                   std::to_string(s.peer) + " step " + std::to_string(s.step) + " " + std::to_string(s.bytes) + " " +
                   std::to_string(s.start.time_since_epoch().count()) + " " +
                   std::to_string(s.end.time_since_epoch().count()));
  }
  std::vector<std::string> links;
  void on_link_transfer(const link_transfer_info& l) override { links.push_back(std::string(l.link)); }
};

std::vector<std::string> traced_run(step_log& log) {
  fixture f(coll_test::cluster_preset(2, 4), coll_test::timing_only());
  f.sys.add_observer(log);
  auto comm = communicator::init_all(f.sys);
  for (int d = 0; d < 8; ++d) {
    // Staggered arrivals: rank d first runs d microseconds of compute.
    f.streams[d].launch(kernel_desc{kernels::fixed{picoseconds{d * 1'000'000LL}}, "compute"});
    comm.all_reduce(nullptr, nullptr, 1 << 20, dtype::f32, reduce_op::sum, f.streams[d]);
  }
  f.sys.run();
  f.sys.remove_observer(log);
  return log.rows;
}
}  // namespace

TEST_CASE("collective steps and peer waits are traced, identically run after run", "[collective][trace]") {
  step_log a, b;
  const auto ra = traced_run(a);
  const auto rb = traced_run(b);
  REQUIRE(ra == rb);
  // Hierarchical over 2 servers of a 4-mesh: HCCS inside, RoCE between.
  CHECK(std::count(a.links.begin(), a.links.end(), "hccs") > 0);
  CHECK(std::count(a.links.begin(), a.links.end(), "roce") > 0);
  // Ranks 0..6 waited for rank 7, the last to arrive; rank 7 did not wait.
  int waits = 0;
  for (const auto& r : ra)
    if (r.find(" wait ") != std::string::npos) {
      ++waits;
      CHECK(r.find("->7 ") != std::string::npos);
    }
  CHECK(waits == 7);
}

TEST_CASE("two all_reduces on the same links share their bandwidth", "[collective][timing]") {
  // Two devices, two communicators, each on its own stream pair: both rings cross the same
  // RoCE ports at the same time, so each moves its bytes at half the rate.
  const auto p = roce_preset(2);
  const std::size_t count = 16 << 20;  // 64 MiB of f32
  auto timed = [&](int comms) {
    npurt::system sys{sim::make_backend(p, coll_test::timing_only())};
    std::vector<communicator> cs;
    for (int c = 0; c < comms; ++c)
      cs.push_back(communicator::init_all(sys, {.algorithm = collective_algorithm::ring, .keep_records = true}));
    std::vector<stream> ss;
    for (int c = 0; c < comms; ++c)
      for (auto& d : sys.devices()) ss.push_back(d.make_stream());
    for (int c = 0; c < comms; ++c)
      for (int d = 0; d < 2; ++d)
        cs[c].all_reduce(nullptr, nullptr, count, dtype::f32, reduce_op::sum, ss[static_cast<std::size_t>(c * 2 + d)]);
    sys.run();
    std::vector<double> t;
    for (auto& c : cs) t.push_back(to_us(c.records().at(0).end - c.records().at(0).start));
    std::sort(t.begin(), t.end());
    return t;
  };
  const double alone = timed(1)[0];
  const auto both = timed(2);
  const double n = count * 4.0, alpha = 3.0, beta = 1e6 / p.roce_bandwidth;  // us, us per byte
  const double gamma = 1e6 / std::min(32 * 256.0 * 1e9, p.hbm_bandwidth / 3);
  // Ring, p = 2: (alpha + n/2 beta + n/2 gamma) + (alpha + n/2 beta).
  CHECK(std::abs(alone - (2 * alpha + n * beta + n / 2 * gamma)) / alone < 1e-3);
  // Together the two move 2n bytes through each port: the later one cannot end before the port
  // has carried them all, nor later than that plus both reductions (they share the cores too);
  // the earlier one is slowed by nearly the other's bytes.
  CHECK(both[1] >= 2 * alpha + 2 * n * beta - 1e-3);
  CHECK(both[1] <= (2 * alpha + 2 * n * beta + n * gamma) * (1 + 1e-3));
  CHECK(both[0] >= alone + 0.9 * n * beta);
}

TEST_CASE("a collective's reductions wait for the compute kernel holding the cores", "[collective][timing]") {
  // Ring all-reduce on 2 devices: transfer, reduce, transfer. Device 0's cores are held by a
  // 10 ms kernel, so its reduction (and with it the whole operation) waits for that kernel.
  const auto p = roce_preset(2);
  auto timed = [&](bool busy, sim_time* kernel_end) {
    npurt::system sys{sim::make_backend(p, coll_test::timing_only())};
    recorder_for_kernel rec;
    sys.add_observer(rec);
    auto comm = communicator::init_all(sys, {.algorithm = collective_algorithm::ring, .keep_records = true});
    std::vector<stream> compute, comms;
    for (auto& d : sys.devices()) compute.push_back(d.make_stream()), comms.push_back(d.make_stream());
    if (busy) compute[0].launch(kernel_desc{kernels::fixed{picoseconds{10'000'000'000}}, "compute"});
    for (int d = 0; d < 2; ++d) comm.all_reduce(nullptr, nullptr, 1 << 20, dtype::f32, reduce_op::sum, comms[d]);
    sys.run();
    sys.remove_observer(rec);
    if (kernel_end) *kernel_end = rec.end;
    return comm.records().at(0);
  };
  sim_time kend{};
  const auto idle = timed(false, nullptr);
  const auto busy = timed(true, &kend);
  CHECK(to_ms(idle.end - idle.start) < 1.0);
  CHECK(busy.end > kend);
  // After the kernel: the rest of the reduction and the all-gather step, as on an idle device.
  const double gamma_s = 1.0 / std::min(32 * 256.0 * 1e9, p.hbm_bandwidth / 3);
  const double rest = (2 << 20) * gamma_s + 3e-6 + (2 << 20) / p.roce_bandwidth;
  CHECK(std::abs(to_us(busy.end - kend) * 1e-6 - rest) < 1e-3 * rest + 1e-9);
}

TEST_CASE("communicator timeouts default to the preset's HCCL values, and the preset can set them",
          "[collective][api]") {
  {
    fixture f(roce_preset(2));
    auto comm = communicator::init_all(f.sys);
    CHECK(comm.exec_timeout() == picoseconds{1836LL * 1'000'000'000'000LL});
    CHECK(comm.connect_timeout() == picoseconds{120LL * 1'000'000'000'000LL});
  }
  {
    // HCCL's convention in the preset file: 0 disables the timer.
    auto p0 = roce_preset(2);
    REQUIRE_FALSE(sim::set_value(p0, "Interconnect.hccl_exec_timeout", "0"));
    fixture f(p0);
    CHECK_FALSE(communicator::init_all(f.sys).exec_timeout().has_value());
  }
  auto p = roce_preset(2);
  REQUIRE_FALSE(sim::set_value(p, "Interconnect.hccl_exec_timeout", "50000000000"));  // ns: the seed's 50 s
  fixture f(p);
  auto comm = communicator::init_all(f.sys);
  CHECK(comm.exec_timeout() == picoseconds{50LL * 1'000'000'000'000LL});
  auto never = communicator::init_all(f.sys, {.exec_timeout = no_timeout, .connect_timeout = no_timeout});
  CHECK_FALSE(never.exec_timeout().has_value());
  CHECK_FALSE(never.connect_timeout().has_value());
  // A duration of zero is a duration (it fires at once), as in the runtime's waits.
  auto zero = communicator::init_all(f.sys, {.exec_timeout = picoseconds{0}});
  CHECK(zero.exec_timeout() == picoseconds{0});
  // A split keeps the parent's timeouts, never included.
  const std::vector<int> colors{0, 0};
  CHECK_FALSE(never.split(colors).at(0).exec_timeout().has_value());
  CHECK(zero.split(colors).at(0).exec_timeout() == picoseconds{0});
  never.set_exec_timeout(std::chrono::seconds{3});
  CHECK(never.exec_timeout() == picoseconds{3LL * 1'000'000'000'000LL});
  CHECK_THROWS_AS(never.set_connect_timeout(picoseconds{-1}), caller_error);
  std::error_code ec;
  (void)communicator::init_all(f.sys, std::vector<device_id>{0, 1}, {.exec_timeout = picoseconds{-5}}, ec);
  CHECK(ec == errc::invalid_argument);
  (void)communicator::init_all(f.sys, std::vector<device_id>{0, 1}, {.connect_timeout = picoseconds{-1}}, ec);
  CHECK(ec == errc::invalid_argument);
  (void)communicator::init_all(f.sys, std::vector<device_id>{0, 0}, {}, ec);
  CHECK(ec == errc::invalid_argument);
  (void)communicator::init_all(f.sys, std::vector<device_id>{0, 7}, {}, ec);
  CHECK(ec == errc::invalid_device);
}

TEST_CASE("init_all names what it refuses, in its throwing words and in recent_error_message for the error_code form",
          "[collective][errors]") {
  fixture f(roce_preset(2), coll_test::timing_only());
  struct refusal {
    std::vector<device_id> devices;
    communicator_options opts;
    errc code;
    const char* words;
  };
  const std::vector<refusal> cases{
      {{}, {}, errc::invalid_argument, "npurt::communicator::init_all: no devices"},
      {{0, 7}, {}, errc::invalid_device, "device 7 is not a device of the system (it has 2)"},
      {{0, -1}, {}, errc::invalid_device, "device -1 is not a device of the system"},
      {{1, 1}, {}, errc::invalid_argument, "device 1 is listed twice"},
      {{0, 1}, {.exec_timeout = picoseconds{-5}}, errc::invalid_argument, "exec_timeout is negative"},
      {{0, 1}, {.connect_timeout = picoseconds{-1}}, errc::invalid_argument, "connect_timeout is negative"},
      {{0, 1}, {.buffer_size = 4096}, errc::invalid_argument, "buffer_size is 4096 bytes, less than the 1 MiB"},
  };
  for (const auto& c : cases) {
    INFO(c.words);
    std::string thrown;
    try {
      (void)communicator::init_all(f.sys, c.devices, c.opts);
    } catch (const caller_error& e) {
      CHECK(e.code() == c.code);
      thrown = e.what();
    }
    CHECK(thrown.find(c.words) != std::string::npos);
    std::error_code ec;
    const communicator refused = communicator::init_all(f.sys, c.devices, c.opts, ec);
    CHECK(ec == c.code);
    CHECK_FALSE(refused.valid());
    // The same words, read once.
    CHECK(std::string(f.sys.recent_error_message()) == thrown);
    CHECK(f.sys.recent_error_message().empty());
  }
  // Over every device, the same body.
  std::error_code ec;
  (void)communicator::init_all(f.sys, {.buffer_size = 1}, ec);
  CHECK(ec == errc::invalid_argument);
  CHECK(std::string(f.sys.recent_error_message()).find("buffer_size is 1 bytes") != std::string::npos);
  // From another thread: refused, and the system's recent error is its owner's (left alone).
  npurt::system checked{sim::presets::ascend910(2), system_options{.check_thread = true}};
  std::error_code other;
  std::thread t([&] { (void)communicator::init_all(checked, {}, other); });
  t.join();
  CHECK(other == errc::wrong_thread);
  CHECK(checked.recent_error_message().empty());
  CHECK(communicator::init_all(checked).valid());  // from its own thread
}

TEST_CASE("a wait cycle through a collective is reported as a deadlock naming the event and the missing rank",
          "[collective][errors]") {
  // Rank 0's stream waits for an event that rank 1 records after its all-reduce, and rank 0's
  // part of that all-reduce is behind the wait: neither can ever go on.
  fixture f(roce_preset(2), coll_test::timing_only());
  auto comm = communicator::init_all(f.sys, {.exec_timeout = no_timeout, .connect_timeout = no_timeout});
  event ev = f.sys.device(1).make_event({.wait_for_record = true});
  f.streams[0].wait(ev);
  comm.barrier(f.streams[0]);
  comm.barrier(f.streams[1]);
  f.streams[1].record(ev);
  std::error_code ec;
  f.sys.run(ec);
  CHECK(ec == errc::deadlock);
  CHECK_THAT(f.sys.deadlock_report(), ContainsSubstring("waits at task") && ContainsSubstring("barrier") &&
                                          ContainsSubstring("waits for rank(s) 0"));
}

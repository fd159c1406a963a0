// Inputs a collective cannot use: a buffer freed between the call and the run, and enumerators
// cast from integers out of their range.
#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cstdint>
#include <string>
#include <system_error>
#include <vector>

namespace coll_inputs_test {

using Catch::Matchers::ContainsSubstring;
using npurt::collective_op;
using npurt::dtype;
using npurt::errc;
using npurt::reduce_op;

inline std::error_code sync_code(npurt::stream& s) {
  std::error_code ec;
  s.synchronize(npurt::no_timeout, ec);
  return ec;
}

TEST_CASE("a collective whose input was freed before it ran fails with invalid_pointer on every rank",
          "[collective][memory]") {
  const std::string kind = GENERATE(as<std::string>{}, "all_reduce", "reduce", "reduce_scatter", "all_gather",
                                    "broadcast", "all_to_all", "all_to_allv", "send_recv");
  CAPTURE(kind);
  npurt::system sys{npurt::sim::presets::ascend910(2)};
  auto comm = npurt::communicator::init_all(sys);
  std::vector<npurt::stream> s;
  std::vector<void*> in(2), out(2);
  const std::vector<float> sentinel(8, -7.f);
  for (int r = 0; r < 2; ++r) {
    auto& d = sys.device(r);
    s.push_back(d.make_stream());
    in[r] = d.malloc(32);
    out[r] = d.malloc(32);
    const std::vector<float> h(8, float(r + 1));
    d.memcpy(in[r], 32, h.data(), 32, npurt::memcpy_kind::host_to_device);
    d.memcpy(out[r], 32, sentinel.data(), 32, npurt::memcpy_kind::host_to_device);
  }
  // Rank 1 arrives late, so rank 0's input is freed before the operation runs.
  s[1].launch(npurt::kernels::fixed{std::chrono::milliseconds{1}});
  const std::vector<std::size_t> one{1, 1}, displs{0, 1};
  for (int r = 0; r < 2; ++r) {
    if (kind == "all_reduce") comm.all_reduce(in[r], out[r], 4, dtype::f32, reduce_op::sum, s[r]);
    else if (kind == "reduce") comm.reduce(in[r], out[r], 4, dtype::f32, reduce_op::sum, 1, s[r]);
    else if (kind == "reduce_scatter") comm.reduce_scatter(in[r], out[r], 2, dtype::f32, reduce_op::sum, s[r]);
    else if (kind == "all_gather") comm.all_gather(in[r], out[r], 4, dtype::f32, s[r]);
    else if (kind == "broadcast") comm.broadcast(r == 0 ? in[r] : out[r], 4, dtype::f32, 0, s[r]);
    else if (kind == "all_to_all") comm.all_to_all(in[r], out[r], 2, dtype::f32, s[r]);
    else if (kind == "all_to_allv")
      comm.enqueue(npurt::communicator::all_to_allv_call(in[r], one, displs, out[r], one, displs, dtype::f32), s[r]);
    else if (r == 0) comm.send(in[0], 4, dtype::f32, 1, s[0]);
    else comm.recv(out[1], 4, dtype::f32, 0, s[1]);
  }
  sys.device(0).free(in[0]);
  CHECK(sync_code(s[0]) == errc::invalid_pointer);
  CHECK(sync_code(s[1]) == errc::invalid_pointer);
  std::string msg;
  CHECK(comm.async_error(&msg) == errc::invalid_pointer);
  CHECK_THAT(msg, ContainsSubstring("invalid pointer") && ContainsSubstring("'" + comm.name() + "'") &&
                      ContainsSubstring("#0") && ContainsSubstring("rank 0's send buffer"));
  // The device keeps its own record of the failure until a blocking device call reads it.
  std::error_code dev_ec;
  sys.device(1).synchronize(npurt::no_timeout, dev_ec);
  CHECK(dev_ec == errc::invalid_pointer);
  // Nothing written: a partial result would pass for a real one.
  std::vector<float> got(8);
  sys.device(1).memcpy(got.data(), 32, out[1], 32, npurt::memcpy_kind::device_to_host);
  CHECK(got == sentinel);
}

TEST_CASE("enumerators out of their range are refused at the call", "[collective][args]") {
  npurt::system sys{npurt::sim::presets::ascend910(2)};
  auto comm = npurt::communicator::init_all(sys);
  auto s = sys.device(0).make_stream();
  void* b = sys.device(0).malloc(64);
  const auto base = npurt::communicator::all_reduce_call(b, b, 4, dtype::f32, reduce_op::sum);
  std::error_code ec;
  SECTION("reduce_op") {
    auto c = base;
    c.red = static_cast<reduce_op>(9);
    comm.enqueue(c, s, ec);
    CHECK(ec == errc::invalid_argument);
    c.op = collective_op::reduce_scatter;
    comm.enqueue(c, s, ec);
    CHECK(ec == errc::invalid_argument);
  }
  SECTION("collective_op") {
    auto c = base;
    c.op = static_cast<collective_op>(42);
    comm.enqueue(c, s, ec);
    CHECK(ec == errc::invalid_argument);
  }
  SECTION("collective_algorithm, per call and per communicator") {
    auto c = base;
    c.algorithm = static_cast<npurt::collective_algorithm>(17);
    comm.enqueue(c, s, ec);
    CHECK(ec == errc::invalid_argument);
    CHECK_THROWS_AS(comm.set_algorithm(static_cast<npurt::collective_algorithm>(17)), npurt::caller_error);
    CHECK(comm.algorithm() == npurt::collective_algorithm::automatic);
  }
  CHECK(sync_code(s) == std::error_code{});  // nothing was enqueued
  CHECK_FALSE(comm.async_error());
}

TEST_CASE("an invalid argument to a collective says which one", "[collective][args]") {
  npurt::system sys{npurt::sim::presets::ascend910(2)};
  auto comm = npurt::communicator::init_all(sys);
  auto s = sys.device(0).make_stream();
  void* b = sys.device(0).malloc(64);
  CHECK_THAT(coll_test::caller_words([&] { comm.send(b, 4, dtype::f32, 0, s); }),
             ContainsSubstring("rank 0 cannot send to itself"));
  CHECK_THAT(coll_test::caller_words([&] { comm.broadcast(b, 4, dtype::f32, 5, s); }),
             ContainsSubstring("root 5 is not a rank of this communicator (0..1)"));
  CHECK_THAT(coll_test::caller_words([&] { comm.all_reduce(b, b, 4, dtype::f32, static_cast<reduce_op>(9), s); }),
             ContainsSubstring("reduce operator 9 is not a reduce_op"));
  CHECK_THAT(coll_test::caller_words([&] { comm.group_end(); }), ContainsSubstring("no group_start"));
  comm.abort();
  try {
    comm.group_start();
    FAIL("group_start after abort was accepted");
  } catch (const npurt::error& e) { CHECK(e.code() == errc::operation_aborted); }
}

TEST_CASE("all_to_allv does not check the displacement of a zero-count entry", "[collective][args]") {
  // MPI_Alltoallv and HCCL's AlltoAllV access no data for a zero count, so any displacement is
  // valid there; here past the buffer's end, and the largest size_t.
  npurt::system sys{npurt::sim::presets::ascend910(2)};
  auto comm = npurt::communicator::init_all(sys);
  std::vector<npurt::stream> s;
  std::vector<void*> in(2), out(2);
  const std::vector<std::vector<float>> host{{1, 2, 3, 4}, {10, 20, 30, 40}};
  const std::vector<float> sentinel(4, -7.f);
  for (int r = 0; r < 2; ++r) {
    auto& d = sys.device(r);
    s.push_back(d.make_stream());
    in[r] = d.malloc(16);
    out[r] = d.malloc(16);
    d.memcpy(in[r], 16, host[r].data(), 16, npurt::memcpy_kind::host_to_device);
    d.memcpy(out[r], 16, sentinel.data(), 16, npurt::memcpy_kind::host_to_device);
  }
  constexpr std::size_t far = 1000, last = SIZE_MAX;
  // Rank 0 sends its elements 1..2 to rank 1 and nothing to itself; rank 1 sends its elements
  // 0..2 to rank 0 and element 3 to itself.
  using call = npurt::communicator;
  std::error_code ec0, ec1;
  comm.enqueue(call::all_to_allv_call(in[0], {0, 2}, {far, 1}, out[0], {0, 3}, {last, 1}, dtype::f32), s[0], ec0);
  comm.enqueue(call::all_to_allv_call(in[1], {3, 1}, {0, 3}, out[1], {2, 1}, {0, 2}, dtype::f32), s[1], ec1);
  REQUIRE_FALSE(ec0);
  REQUIRE_FALSE(ec1);
  CHECK(sync_code(s[0]) == std::error_code{});
  CHECK(sync_code(s[1]) == std::error_code{});
  CHECK_FALSE(comm.async_error());
  std::vector<float> got(4);
  sys.device(0).memcpy(got.data(), 16, out[0], 16, npurt::memcpy_kind::device_to_host);
  CHECK(got == std::vector<float>{-7, 10, 20, 30});
  sys.device(1).memcpy(got.data(), 16, out[1], 16, npurt::memcpy_kind::device_to_host);
  CHECK(got == std::vector<float>{2, 3, 40, -7});
}

TEST_CASE("a bf16 reduction on a preset without bf16 is refused at the call", "[collective][args]") {
  // ascend910 (910A) has no bf16 vector arithmetic: its kernels refuse bf16 operands, and a
  // reduction runs on the same units. Moving bf16 bytes (all_gather) needs none.
  npurt::system sys{npurt::sim::presets::ascend910(2)};
  auto comm = npurt::communicator::init_all(sys);
  auto s = sys.device(0).make_stream();
  void* b = sys.device(0).malloc(64);
  std::error_code ec;
  comm.all_reduce(b, b, 4, dtype::bf16, reduce_op::sum, s, ec);
  CHECK(ec == errc::invalid_dtype);
  comm.reduce(b, b, 4, dtype::bf16, reduce_op::max, 0, s, ec);
  CHECK(ec == errc::invalid_dtype);
  comm.reduce_scatter(b, b, 2, dtype::bf16, reduce_op::sum, s, ec);
  CHECK(ec == errc::invalid_dtype);
  CHECK_THROWS_AS(comm.all_reduce(b, b, 4, dtype::bf16, reduce_op::sum, s), npurt::caller_error);
  CHECK(sync_code(s) == std::error_code{});  // nothing was enqueued
  CHECK_FALSE(comm.async_error());
  // The call numbers were not used up: the ranks still agree on the next operation.
  auto s1 = sys.device(1).make_stream();
  void* b1 = sys.device(1).malloc(64);
  comm.all_gather(b, b, 2, dtype::bf16, s, ec);
  CHECK_FALSE(ec);
  comm.all_gather(b1, b1, 2, dtype::bf16, s1, ec);
  CHECK_FALSE(ec);
  CHECK(sync_code(s) == std::error_code{});
  CHECK(sync_code(s1) == std::error_code{});

  npurt::system with_bf16{npurt::sim::presets::ascend910b(1)};
  auto one = npurt::communicator::init_all(with_bf16);
  auto t = with_bf16.device(0).make_stream();
  void* c = with_bf16.device(0).malloc(64);
  one.all_reduce(c, c, 4, dtype::bf16, reduce_op::sum, t, ec);
  CHECK_FALSE(ec);
  CHECK(sync_code(t) == std::error_code{});
}

TEST_CASE("broadcast with send != recv writes the root's recv and reads only the root's send",
          "[collective][functional]") {
  // ncclBroadcast's form: sendbuff is used on the root only, and every rank's recvbuff, the
  // root's included, receives the data.
  npurt::system sys{npurt::sim::presets::ascend910(3)};
  auto comm = npurt::communicator::init_all(sys);
  std::vector<npurt::stream> s;
  std::vector<void*> out(3);
  const std::vector<float> data{1, 2, 3, 4}, sentinel(4, -7.f);
  void* in = sys.device(1).malloc(16);
  sys.device(1).memcpy(in, 16, data.data(), 16, npurt::memcpy_kind::host_to_device);
  for (int r = 0; r < 3; ++r) {
    auto& d = sys.device(r);
    s.push_back(d.make_stream());
    out[r] = d.malloc(16);
    d.memcpy(out[r], 16, sentinel.data(), 16, npurt::memcpy_kind::host_to_device);
  }
  for (int r = 0; r < 3; ++r) {
    auto c = npurt::communicator::broadcast_call(out[r], 4, dtype::f32, 1);
    c.send = r == 1 ? in : nullptr;
    std::error_code ec;
    comm.enqueue(c, s[r], ec);
    REQUIRE_FALSE(ec);
  }
  for (auto& st : s) CHECK(sync_code(st) == std::error_code{});
  CHECK_FALSE(comm.async_error());
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    std::vector<float> got(4);
    sys.device(r).memcpy(got.data(), 16, out[r], 16, npurt::memcpy_kind::device_to_host);
    CHECK(got == data);
  }
}

TEST_CASE("a bool reduction yields 0 or 1 whatever nonzero bytes it read, on one rank too",
          "[collective][functional]") {
  // NumPy's bool reductions: sum and max are or, prod and min are and. Inputs hold the nonzero
  // bytes 2 and 255 beside 1 and 0.
  const int p = GENERATE(1, 2);
  const reduce_op op = GENERATE(reduce_op::sum, reduce_op::prod, reduce_op::max, reduce_op::min);
  CAPTURE(p, op);
  npurt::system sys{npurt::sim::presets::ascend910(p)};
  auto comm = npurt::communicator::init_all(sys);
  const std::vector<std::vector<std::uint8_t>> in{{0, 1, 2, 255}, {2, 0, 1, 255}};
  // Rank 0 alone: each byte as a truth value. Ranks 0 and 1: element-wise or / and.
  const bool any = op == reduce_op::sum || op == reduce_op::max;
  const std::vector<std::uint8_t> want = p == 1 ? std::vector<std::uint8_t>{0, 1, 1, 1}
                                         : any  ? std::vector<std::uint8_t>{1, 1, 1, 1}
                                                : std::vector<std::uint8_t>{0, 0, 1, 1};
  std::vector<npurt::stream> s;
  std::vector<void*> buf(p);
  for (int r = 0; r < p; ++r) {
    auto& d = sys.device(r);
    s.push_back(d.make_stream());
    buf[r] = d.malloc(4);
    d.memcpy(buf[r], 4, in[r].data(), 4, npurt::memcpy_kind::host_to_device);
  }
  for (int r = 0; r < p; ++r) (void)comm.all_reduce(buf[r], buf[r], 4, dtype::boolean, op, s[r]);
  for (auto& st : s) CHECK(sync_code(st) == std::error_code{});
  for (int r = 0; r < p; ++r) {
    CAPTURE(r);
    std::vector<std::uint8_t> got(4);
    sys.device(r).memcpy(got.data(), 4, buf[r], 4, npurt::memcpy_kind::device_to_host);
    CHECK(got == want);
  }
}

TEST_CASE("an empty communicator handle answers its accessors as a communicator of no ranks", "[collective][args]") {
  const npurt::communicator c;
  CHECK_FALSE(c.valid());
  CHECK(c.size() == 0);
  CHECK(c.name().empty());
  CHECK(c.devices().empty());
  CHECK(c.records().empty());
  CHECK(c.algorithm() == npurt::collective_algorithm::automatic);
  CHECK(c.buffer_size() == 0);
  CHECK(c.exec_timeout() == npurt::no_timeout);
  CHECK(c.connect_timeout() == npurt::no_timeout);
  CHECK(c.rank_of(0) == -1);
  CHECK(c.async_error() == errc::invalid_argument);
}

TEST_CASE("a timing-only call larger than the device's memory is refused at the call", "[collective][args]") {
  // Null buffers carry no size: the device's memory is the only bound on the count. Without it a
  // count near SIZE_MAX / 4 ran as one buffer-sized chunk after another, without end.
  npurt::system sys{npurt::sim::make_backend(npurt::sim::presets::ascend910(2), coll_test::timing_only())};
  auto comm = npurt::communicator::init_all(sys);
  std::vector<npurt::stream> s;
  for (auto& d : sys.devices()) s.push_back(d.make_stream());
  const std::size_t hbm = sys.device(0).properties().memory_bytes;
  std::error_code ec;
  comm.all_reduce(nullptr, nullptr, SIZE_MAX / 8, dtype::f32, reduce_op::sum, s[0], ec);
  CHECK(ec == errc::size_overflow);
  comm.all_reduce(nullptr, nullptr, hbm / 4 + 1, dtype::f32, reduce_op::sum, s[0], ec);
  CHECK(ec == errc::size_overflow);
  comm.all_gather(nullptr, nullptr, hbm / 2 / 4 + 1, dtype::f32, s[0], ec);  // the output is 2x
  CHECK(ec == errc::size_overflow);
  CHECK_THROWS_AS(comm.broadcast(nullptr, SIZE_MAX / 8, dtype::f32, 0, s[0]), npurt::caller_error);
  CHECK(sync_code(s[0]) == std::error_code{});  // nothing was enqueued
  // A message as large as the memory still runs, on every rank.
  for (auto& st : s) {
    comm.all_reduce(nullptr, nullptr, hbm / 4, dtype::f32, reduce_op::sum, st, ec);
    REQUIRE_FALSE(ec);
  }
  for (auto& st : s) CHECK(sync_code(st) == std::error_code{});
  CHECK_FALSE(comm.async_error());
}

}  // namespace coll_inputs_test

#include <npurt/checkpoint.hpp>
#include <npurt/graph/graph.hpp>
#include <npurt/graph/tensor.hpp>
#include <npurt/task.hpp>

#include "helpers.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <array>
#include <cstring>
#include <limits>
#include <memory>
#include <span>

using namespace npurt;

TEST_CASE("a host tensor stores elements rounded to its dtype", "[graph][tensor]") {
  tensor t({2, 3}, dtype::f16);
  CHECK(t.is_host());
  CHECK(t.bytes() == 12);
  t.set({1, 2}, 1.0 + 1.0 / 4096);  // below half's resolution at 1: rounds to 1
  CHECK(t.at({1, 2}) == 1.0);
  t.set(0, 65504.0 * 2);  // overflow rounds to infinity, as IEEE says
  CHECK(std::isinf(t.get(0)));
  tensor i({4}, dtype::i8);
  i.set(0, 300);
  CHECK(i.get(0) == 127);  // integers saturate
  t.fill(0.5);
  for (std::int64_t k = 0; k < t.elements(); ++k) CHECK(t.get(k) == 0.5);
  CHECK_THROWS_AS(t.at({2, 0}), caller_error);
  CHECK_THROWS_AS(t.at({0}), caller_error);
}

TEST_CASE("get_int reads int64 exactly and refuses floats that are not int64 values", "[graph][tensor]") {
  tensor i({2}, dtype::i64);
  const std::int64_t big = (std::int64_t{1} << 60) + 3;  // a double would round it
  std::memcpy(i.data(), &big, sizeof big);
  CHECK(i.get_int(0) == big);
  CHECK(static_cast<std::int64_t>(i.get(0)) != big);  // why get_int exists
  tensor f({3}, dtype::f32, {-2.75, 1e30, std::numeric_limits<double>::quiet_NaN()});
  CHECK(f.get_int(0) == -2);
  for (std::int64_t k : {1, 2}) {
    try {
      (void)f.get_int(k);
      FAIL("element " << k << " read as an int64");
    } catch (const npurt::error& e) { CHECK(e.code() == errc::invalid_argument); }
  }
  CHECK_THROWS_AS(i.get_int(2), npurt::error);  // out of range
}

TEST_CASE("reading a timing-only tensor says it has no data", "[graph][tensor]") {
  const tensor t = tensor::timing_only({4}, dtype::f32);
  try {
    (void)t.to_vector();
    FAIL("a timing-only tensor gave values");
  } catch (const npurt::error& e) {
    CHECK(e.code() == errc::invalid_argument);
    CHECK(std::string(e.what()).find("no data") != std::string::npos);
  }
}

TEST_CASE("a tensor round-trips through the device with blocking and awaited copies", "[graph][tensor]") {
  auto sys = test::make_system();
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  tensor h = test::random_tensor({4, 5}, 7);
  tensor d = h.to_device(dev, s);
  CHECK(d.is_device());
  CHECK(d.device() == 0);
  CHECK_THROWS_AS(d.get(0), caller_error);
  tensor back = d.to_host(s);
  CHECK(back.to_vector() == h.to_vector());

  tensor d2 = tensor::on_device(dev, {4, 5}, dtype::f32);
  tensor back2({4, 5}, dtype::f32);
  bool done = false;
  boost::asio::co_spawn(
      sys.get_executor(),
      [&]() -> boost::asio::awaitable<void> {
        co_await d2.async_copy_from(h, s, boost::asio::use_awaitable);
        co_await back2.async_copy_from(d2, s, boost::asio::use_awaitable);
        done = true;
      },
      boost::asio::detached);
  sys.run();
  CHECK(done);
  CHECK(back2.to_vector() == h.to_vector());

  d2.fill(2.0, s);
  CHECK(d2.to_host(s).get(19) == 2.0);
  const auto before = dev.memory_info().free;
  d2.release();
  CHECK_FALSE(d2.has_storage());
  CHECK(dev.memory_info().free > before);
}

TEST_CASE("a copy between tensors of different shapes or dtypes is refused", "[graph][tensor]") {
  auto sys = test::make_system();
  auto s = sys.device(0).make_stream();
  tensor a({4}, dtype::f32), b({5}, dtype::f32), c({4}, dtype::f16);
  try {
    a.copy_from(b, s);
    FAIL("no error");
  } catch (const caller_error& e) { CHECK(e.code() == errc::invalid_shape); }
  std::error_code ec;
  a.copy_from(c, s, ec);
  CHECK(ec == errc::invalid_dtype);
}

TEST_CASE("an async copy copy_from refuses completes with copy_from's code and words, under its own name",
          "[graph][tensor][errors]") {
  auto sys = test::make_system();
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  tensor a({4}, dtype::f32), b({5}, dtype::f32), c({4}, dtype::f16);
  const tensor empty = tensor::timing_only({4}, dtype::f32);
  b.fill(1.0);
  c.fill(1.0);
  tensor lost = tensor::on_device(dev, {4}, dtype::f32);
  struct refusal {
    const tensor* src;
    tensor* dst;
    errc code;
    std::string cause;
  };
  const std::string call = "npurt::tensor::async_copy_from: ";
  refusal cases[] = {
      {&b, &a, errc::invalid_shape, "f32 tensor of 5 elements into f32 tensor of 4 elements"},
      {&c, &a, errc::invalid_dtype, "f16 tensor of 4 elements into f32 tensor of 4 elements"},
      {&empty, &a, errc::null_pointer, "the source tensor has no storage"},
      {&a, &lost, errc::invalid_pointer, "the destination device tensor is unusable"},
  };
  for (int round = 0; round < 2; ++round) {
    if (round == 1) {
      dev.reset();  // `lost` loses its memory; the others keep failing as before
      s = dev.make_stream();
    }
    for (refusal& r : cases) {
      if (round == 0 && r.code == errc::invalid_pointer) continue;
      INFO(r.cause);
      std::error_code heard;
      std::string recent;
      bool initiating = true, called = false;
      r.dst->async_copy_from(*r.src, s, [&](async_error_code e) {
        called = true;
        heard = e;
        recent = sys.recent_error_message();
        CHECK_FALSE(initiating);  // never inside the initiating call
      });
      initiating = false;
      sys.run();
      REQUIRE(called);
      CHECK(heard == r.code);
      CHECK(recent.starts_with(call + r.cause));
      CHECK(recent.ends_with(": " + make_error_code(r.code).message()));
      // Awaited with npurt::use_task, the same words are thrown; copy_from throws them too.
      std::exception_ptr thrown;
      auto awaited = [](tensor* dst, const tensor* src, stream* st) -> task<void> {
        co_await dst->async_copy_from(*src, *st, use_task);
      };
      spawn(sys, awaited(r.dst, r.src, &s), [&](std::exception_ptr e) { thrown = e; });
      sys.run();
      REQUIRE(thrown);
      try {
        std::rethrow_exception(thrown);
      } catch (const caller_error& e) {
        CHECK(e.code() == r.code);
        CHECK_THAT(std::string(e.what()), Catch::Matchers::StartsWith(call + r.cause));
      }
      try {
        r.dst->copy_from(*r.src, s);
        FAIL("copy_from accepted it");
      } catch (const caller_error& e) {
        CHECK(e.code() == r.code);
        CHECK_THAT(std::string(e.what()), Catch::Matchers::StartsWith("npurt::tensor::copy_from: " + r.cause));
      }
    }
  }
  // Nothing was queued, nothing is sticky, nothing was written.
  CHECK(s.query());
  CHECK(a.to_vector() == std::vector<double>{0, 0, 0, 0});
}

TEST_CASE("a device tensor that outlives its system is an empty handle", "[graph][tensor][lifetime]") {
  tensor t;
  {
    auto sys = std::make_unique<npurt::system>(sim::presets::ascend910(1));
    t = tensor::on_device(sys->device(0), {4}, dtype::f32);
    REQUIRE(t.data() != nullptr);
  }
  // The memory went with the system: no dangling address, and the destructor frees nothing.
  CHECK(t.data() == nullptr);
  CHECK(t.desc().data == nullptr);
  CHECK(t.is_device());
  CHECK(t.device() == 0);
  tensor moved = std::move(t);
  CHECK(moved.data() == nullptr);
  moved.release();
  CHECK_FALSE(moved.has_storage());
}

// A reset frees every allocation of the device (aclrtResetDevice): a tensor made before it must
// not hand out an address that is no longer memory, and its next use must say what happened.
TEST_CASE("a device tensor whose device was reset is lost: null data, and its next use names the reset",
          "[graph][tensor][lifetime][reset]") {
  auto sys = test::make_system();
  auto& dev = sys.device(0);
  tensor h({4}, dtype::f32, {1, 2, 3, 4});
  tensor d;
  {
    auto s = dev.make_stream();
    d = h.to_device(dev, s);
  }
  REQUIRE(d.data() != nullptr);
  CHECK_FALSE(d.storage_lost());
  CHECK(d.lost_reason().empty());
  dev.reset();
  CHECK(d.storage_lost());
  CHECK(d.data() == nullptr);
  CHECK(d.desc().data == nullptr);
  // Still a device tensor of device 0 with its shape: only the memory went.
  CHECK(d.is_device());
  CHECK(d.has_storage());
  CHECK(d.device() == 0);
  CHECK(d.shape() == shape{4});
  CHECK_THAT(d.lost_reason(),
             Catch::Matchers::ContainsSubstring("device 0") && Catch::Matchers::ContainsSubstring("reset"));
  auto s = dev.make_stream();  // the device's old streams went with the reset
  auto expect_lost = [](auto&& use, const std::string& who, const std::string& role) {
    try {
      use();
      FAIL(who << " accepted a tensor lost to a reset");
    } catch (const caller_error& e) {
      CHECK(e.code() == errc::invalid_pointer);
      CHECK_THAT(std::string(e.what()), Catch::Matchers::ContainsSubstring(who + ": the " + role) &&
                                            Catch::Matchers::ContainsSubstring("reset of the device"));
    }
  };
  tensor back({4}, dtype::f32);
  expect_lost([&] { (void)d.to_host(s); }, "tensor::to_host", "source");
  expect_lost([&] { (void)d.to_device(dev, s); }, "tensor::to_device", "source");
  expect_lost([&] { back.copy_from(d, s); }, "tensor::copy_from", "source");
  expect_lost([&] { d.copy_from(h, s); }, "tensor::copy_from", "destination");
  expect_lost([&] { d.fill(1.0, s); }, "tensor::fill", "destination");
  std::error_code ec;
  back.copy_from(d, s, ec);
  CHECK(ec == errc::invalid_pointer);
  d.copy_from(h, s, ec);
  CHECK(ec == errc::invalid_pointer);
  CHECK(back.to_vector() == std::vector<double>{0, 0, 0, 0});  // nothing was written
  // A run fed with it is refused before anything is queued, naming the input.
  graph g("id");
  g.set_output(g.add_op("Relu", {g.add_input("x", {4}, dtype::f32)}, {}, "y"));
  session sess(sys, {});
  auto c = sess.compile(g);
  try {
    (void)sess.run(c, {{"x", d}});
    FAIL("a run accepted a feed lost to a reset");
  } catch (const graph_error& e) {
    CHECK(e.code() == errc::invalid_pointer);
    CHECK(e.tensor() == "x");
    CHECK_THAT(std::string(e.what()), Catch::Matchers::ContainsSubstring("input 'x'") &&
                                          Catch::Matchers::ContainsSubstring("reset of the device"));
  }
  // The device itself works: a tensor made after the reset is not lost, and the lost one's
  // release only drops the handle.
  tensor fresh = h.to_device(dev, s);
  CHECK_FALSE(fresh.storage_lost());
  CHECK(fresh.to_host(s).to_vector() == std::vector<double>{1, 2, 3, 4});
  CHECK(sess.run(c, {{"x", fresh}}).outputs.at("y").to_vector() == std::vector<double>{1, 2, 3, 4});
  d.release();
  CHECK_FALSE(d.has_storage());
  CHECK_FALSE(d.storage_lost());
}

TEST_CASE("a host tensor larger than the host's memory is out_of_memory, not an abort", "[graph][tensor][oom]") {
  // 2^48 bytes: more than the user address space, so the allocation fails at once.
  try {
    tensor t({std::int64_t{1} << 23, std::int64_t{1} << 23}, dtype::f32);
    FAIL("a 256 TiB host tensor was allocated");
  } catch (const npurt::error& e) { CHECK(e.code() == errc::out_of_memory); }
}

TEST_CASE("f64 and the 16-, 32- and 64-bit integer tensors hold their values; spans of their C++ types",
          "[graph][tensor][f64]") {
  tensor d({2}, dtype::f64);
  d.set(0, 0.1);  // f32 would hold 0.100000001490116...
  CHECK(d.get(0) == 0.1);
  CHECK(d.bytes() == 16);
  tensor s({3}, dtype::i16);
  s.set(0, 40000);  // saturates, as every integer set does
  s.set(1, -40000);
  s.set(2, -7);
  CHECK(s.to_vector() == std::vector<double>{32767, -32768, -7});
  tensor u({2}, dtype::u32);
  u.set(0, -1);
  u.set(1, 4294967295.0);
  CHECK(u.to_vector() == std::vector<double>{0, 4294967295.0});
  // u64 past 2^53 through spans, bit for bit; get_int refuses what is no int64.
  const std::array<std::uint64_t, 3> big{(std::uint64_t{1} << 53) + 1, (std::uint64_t{1} << 63) + 1, 5};
  const tensor b = tensor::of<std::uint64_t>({3}, std::span<const std::uint64_t>(big));
  CHECK(b.type() == dtype::u64);
  CHECK(b.elements_as<std::uint64_t>()[0] == (std::uint64_t{1} << 53) + 1);
  CHECK(b.get_int(0) == (std::int64_t{1} << 53) + 1);
  CHECK_THROWS_AS(b.get_int(1), caller_error);
  CHECK(b.get_int(2) == 5);
  CHECK_THROWS_AS(b.elements_as<std::int64_t>(), caller_error);  // i64 is another dtype
  const std::array<double, 2> dv{0.1, 1e300};
  const tensor t = tensor::of<double>({2}, std::span<const double>(dv));
  CHECK(t.type() == dtype::f64);
  CHECK(t.to_vector() == std::vector<double>{0.1, 1e300});
  CHECK_THROWS_AS(tensor::of<double>({3}, std::span<const double>(dv)), caller_error);  // 2 values, 3 elements
  static_assert(dtype_of<std::int16_t> == dtype::i16 && dtype_of<std::uint16_t> == dtype::u16 &&
                dtype_of<std::uint32_t> == dtype::u32 && dtype_of<double> == dtype::f64);
  static_assert(is_float(dtype::f64) && !is_integer(dtype::f64) && is_integer(dtype::u64) && is_unsigned(dtype::u16) &&
                !is_unsigned(dtype::i16));
  // Appended: the existing dtypes keep their values (kernels, tools and files may hold them).
  static_assert(static_cast<int>(dtype::boolean) == 7 && static_cast<int>(dtype::f64) == 8 &&
                static_cast<int>(dtype::u64) == 12);
}

TEST_CASE("graph tensors go into checkpoints and come back out, and a misshapen one is refused by the graph",
          "[graph][tensor][checkpoint]") {
  // A session's weights are npurt::tensor values (graph::constant, run_result::outputs), so a
  // training loop checkpoints them and loads them back with set_constant: docs/checkpoints.md.
  const std::vector<double> wv{1.5, -2.25, 3.0, 0.125, -0.5, 7.0};
  const tensor w({3, 2}, dtype::f32, wv);
  auto ck = create_checkpoint();
  ck.add_tensor("w", w);
  ck.add_tensor("ids", tensor({2}, dtype::i64, {3, -1}));
  const auto back = checkpoint::parse(ck.serialize());
  const checkpoint_tensor& cw = back.get_tensor("w");
  CHECK(cw.dtype() == dtype::f32);
  CHECK(std::vector<std::int64_t>(cw.shape().begin(), cw.shape().end()) == std::vector<std::int64_t>{3, 2});
  const auto fv = cw.values<float>();
  CHECK(std::vector<double>(fv.begin(), fv.end()) == wv);  // every value is exact in f32

  const tensor w2 = tensor::from(cw);
  CHECK(w2.is_host());
  CHECK(w2.shape() == shape{3, 2});
  CHECK(w2.type() == dtype::f32);
  CHECK(w2.to_vector() == wv);
  CHECK(tensor::from(back.get_tensor("ids")).to_vector() == std::vector<double>{3, -1});

  graph g("g");
  g.add_constant("w", tensor({3, 2}, dtype::f32));
  g.set_constant("w", tensor::from(cw));
  CHECK(g.constant("w")->to_vector() == wv);
  // A checkpoint of another model: the bytes would fit [2, 3] but mean something else.
  auto other = create_checkpoint();
  other.add_tensor("w", tensor({2, 3}, dtype::f32, wv));
  try {
    g.set_constant("w", tensor::from(other.get_tensor("w")));
    FAIL("a [2,3] checkpoint tensor replaced a [3,2] constant");
  } catch (const graph_error& e) { CHECK(e.code() == errc::invalid_shape); }
  CHECK(g.constant("w")->to_vector() == wv);  // kept

  // A device or timing-only tensor has no host bytes to take: refused, nothing added.
  auto sys = test::make_system();
  stream s = sys.device(0).make_stream();
  const tensor on_device = w.to_device(sys.device(0), s);
  const tensor none = tensor::timing_only({3, 2}, dtype::f32);
  for (const tensor* t : {&on_device, &none}) {
    auto c = create_checkpoint();
    std::error_code ec;
    c.add_tensor("x", *t, ec);
    CHECK(ec == errc::invalid_pointer);
    try {
      c.add_tensor("x", *t);
      FAIL("a tensor without host data was added");
    } catch (const caller_error& e) {
      CHECK(e.code() == errc::invalid_pointer);
      CHECK(std::string(e.what()).find("not a host tensor") != std::string::npos);
    }
    CHECK(c.tensors().empty());
    try {
      (void)tensor::from(*t);
      FAIL("tensor::from copied a tensor without host data");
    } catch (const caller_error& e) { CHECK(e.code() == errc::invalid_pointer); }
  }
  // The device tensor is snapshotted through its descriptor and a stream instead.
  auto c = create_checkpoint();
  c.add_tensor("w", on_device.desc(), s);
  CHECK(tensor::from(c.get_tensor("w")).to_vector() == wv);
}

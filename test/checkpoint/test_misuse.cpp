// Checkpoint API misuse: arguments a careless or hostile caller passes.
#include "common.hpp"

#include <npurt/npurt.hpp>
#include <npurt/sim/fault_backend.hpp>
#include <npurt/sim/sim.hpp>

#include <catch2/catch_test_macros.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

using namespace ckpt_test;
using npurt::checkpoint;
using npurt::dtype;
using npurt::errc;

namespace {

checkpoint misuse_sample() {
  auto ck = npurt::create_checkpoint();
  ck.add_tensor("w", dtype::f32, {2}, std::vector<float>{1.0f, 2.0f});
  ck.set_metadata("step", 7);
  return ck;
}

}  // namespace

TEST_CASE("a path with an embedded NUL is refused, not cut short at the NUL", "[checkpoint][errors]") {
  scratch_dir dir("nul");
  const std::string real = (dir / "a.ckpt").string();
  const std::filesystem::path with_nul = real + std::string("\0.evil", 6);
  std::error_code ec;
  misuse_sample().save(with_nul, ec);
  CHECK(ec == errc::invalid_argument);
  CHECK_THROWS_AS(misuse_sample().save(with_nul), npurt::caller_error);
  CHECK(dir.entries().empty());

  misuse_sample().save(real);
  auto c = checkpoint::load(with_nul, ec);
  CHECK(ec == errc::invalid_argument);
  CHECK_THROWS_AS(checkpoint::load(with_nul), npurt::caller_error);
  checkpoint r;
  r.restore(with_nul, ec);
  CHECK(ec == errc::invalid_argument);
  CHECK(r.tensors().empty());
}

TEST_CASE("copying an empty tensor back to the device is an empty task and not a refused copy",
          "[checkpoint][device]") {
  npurt::simple_config cfg;
  npurt::system sys{cfg};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  auto ck = misuse_sample();
  ck.add_tensor("empty", dtype::f32, {3, 0}, std::vector<float>{});
  const checkpoint back = checkpoint::parse(ck.serialize());
  void* d = dev.malloc(64);
  npurt::event e;
  REQUIRE_NOTHROW(e = back.copy_to_device("empty", d, 64, s));
  s.synchronize();
  CHECK(e.query());
}

namespace {

/// Lowers the probe's 32-bit field limit for one test and puts it back.
struct field_limit {
  explicit field_limit(std::uint64_t n) { npurt::detail::checkpoint_save_probe().max_field = n; }
  ~field_limit() { npurt::detail::checkpoint_save_probe().max_field = npurt::detail::save_probe{}.max_field; }
  field_limit(const field_limit&) = delete;
  field_limit& operator=(const field_limit&) = delete;
};

std::error_code save_code(const checkpoint& ck, const std::filesystem::path& p) {
  std::error_code ec;
  ck.save(p, ec);
  return ec;
}

}  // namespace

TEST_CASE("save refuses a count or length beyond the format's 32-bit fields and writes nothing",
          "[checkpoint][errors][limits]") {
  scratch_dir dir("fields");
  const auto path = dir / "a.ckpt";
  misuse_sample().save(path);
  const auto before = read_file(path);
  const field_limit limit(8);
  auto ck = misuse_sample();
  SECTION("a string value one byte longer") { ck.set_metadata("note", std::string(9, 'x')); }
  SECTION("more tensors than a count field holds") {
    for (int i = 0; i < 8; ++i) ck.add_tensor("t" + std::to_string(i), dtype::u8, {1}, std::vector<std::uint8_t>{1});
  }
  SECTION("more metadata entries than a count field holds") {
    for (int i = 0; i < 8; ++i) ck.set_metadata("k" + std::to_string(i), i);
  }
  SECTION("a key longer than a length field holds") { ck.set_metadata("a-long-key", 1); }
  CHECK(save_code(ck, path) == errc::size_overflow);
  CHECK_THROWS_AS(ck.save(path), npurt::caller_error);
  CHECK_THROWS_AS((void)ck.serialize(), npurt::caller_error);
  CHECK(dir.entries() == std::vector<std::string>{"a.ckpt"});
  CHECK(read_file(path) == before);
  // At the limit itself the same checkpoint is saved.
  ck = misuse_sample();
  ck.set_metadata("note", std::string(8, 'x'));
  REQUIRE_FALSE(save_code(ck, path));
  CHECK(checkpoint::load(path).get_metadata<std::string>("note") == std::string(8, 'x'));
}

TEST_CASE("save works for a file name a few bytes under NAME_MAX and leaves no temporary file", "[checkpoint][files]") {
  scratch_dir dir("longname");
  const std::string name(250, 'n');
  const auto ck = misuse_sample();
  SECTION("success") {
    REQUIRE_FALSE(save_code(ck, dir / name));
    const auto back = checkpoint::load(dir / name);
    CHECK(back.get_tensor("w") == ck.get_tensor("w"));
    CHECK(back.get_metadata<std::int64_t>("step") == 7);
    CHECK(dir.entries() == std::vector<std::string>{name});
  }
  SECTION("failure after the temporary file was written") {
    // rename(2) cannot replace a non-empty directory.
    std::filesystem::create_directory(dir / name);
    write_file(dir / name / "inside", {std::byte{1}});
    CHECK(save_code(ck, dir / name));
    CHECK(dir.entries() == std::vector<std::string>{name});
  }
}

namespace {

/// What a call throws, or an empty string if it does not.
template <class F>
std::string what_of(F&& f) {
  try {
    f();
  } catch (const npurt::error& e) { return e.what(); }
  return {};
}

bool has_control_byte(const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x20 || c == 0x7f) return true;
  return false;
}

}  // namespace

TEST_CASE("every message naming a tensor or key quotes it as add_tensor does", "[checkpoint][errors]") {
  auto ck = npurt::create_checkpoint();
  const std::string ctl("bad\x01\nkey", 8);
  const std::string long_key(300, 'k');
  ck.set_metadata(ctl, 1);
  ck.set_metadata(long_key, 1);
  ck.add_tensor(ctl, dtype::f32, {1}, std::vector<float>{1.0f});

  const std::string quoted_ctl = "'bad\\x01\\x0akey'";
  const std::string quoted_long = "'" + std::string(64, 'k') + "...'";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {what_of([&] { (void)ck.get_metadata<double>(ctl); }), quoted_ctl},
      {what_of([&] { (void)ck.get_metadata<double>(long_key); }), quoted_long},
      {what_of([&] { (void)ck.get_tensor(ctl).values<double>(); }), quoted_ctl},
      {what_of([&] { ck.set_metadata(long_key, ~std::uint64_t{0}); }), quoted_long},
      {what_of([&] { ck.add_tensor(ctl, ck.get_tensor(ctl)); }), quoted_ctl},
  };
  for (const auto& [what, quoted] : cases) {
    INFO(what);
    CHECK(what.find(quoted) != std::string::npos);
    CHECK_FALSE(has_control_byte(what));
    CHECK(what.find(std::string(65, 'k')) == std::string::npos);
  }
}

TEST_CASE("copying a tensor into a destination too small for it names the tensor and both sizes",
          "[checkpoint][device][errors]") {
  npurt::simple_config cfg;
  npurt::system sys{cfg};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  auto ck = misuse_sample();
  ck.add_tensor("h", dtype::f32, {1024}, std::vector<float>(1024, 1.0f));
  void* d = dev.malloc(4096);
  try {
    (void)ck.copy_to_device("h", d, 100, s);
    FAIL("the copy was accepted");
  } catch (const npurt::caller_error& e) {
    CHECK(e.code() == errc::size_overflow);
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("checkpoint::copy_to_device('h')") != std::string::npos);
    CHECK(what.find("4096") != std::string::npos);
    CHECK(what.find("100") != std::string::npos);
  }
  CHECK(s.query());
}

TEST_CASE("values<T> refuses an element type of the same size but another kind", "[checkpoint][errors]") {
  checkpoint ck;
  ck.add_tensor("w", dtype::f32, {4}, std::vector<float>(4, 1.0f));
  ck.add_tensor("n", dtype::i32, {4}, std::vector<std::int32_t>(4, 7));
  ck.add_tensor("h", dtype::f16, {4}, std::vector<std::uint16_t>(4, 0x3c00));
  try {
    (void)ck.get_tensor("w").values<std::int32_t>();
    FAIL("f32 read as int32_t");
  } catch (const npurt::caller_error& e) {
    CHECK(e.code() == errc::invalid_dtype);
    CHECK(std::string(e.what()).find("'w' is f32") != std::string::npos);
  }
  CHECK_THROWS_AS(ck.get_tensor("n").values<float>(), npurt::caller_error);
  CHECK(ck.get_tensor("w").values<float>().size() == 4);
  CHECK(ck.get_tensor("n").values<std::int32_t>()[0] == 7);
  CHECK(ck.get_tensor("h").values<std::uint16_t>()[0] == 0x3c00);  // f16 as bit patterns
}

TEST_CASE("copying into a descriptor checks its dtype and shape, in both forms", "[checkpoint][device][errors]") {
  npurt::simple_config cfg;
  npurt::system sys{cfg};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  checkpoint ck;
  std::vector<float> w(12);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i);
  ck.add_tensor("fc.weight", dtype::f32, {3, 4}, w);
  void* d = dev.malloc(48);
  // Another model's parameter of the same byte size: the bytes would fit and mean something else.
  const npurt::tensor_desc as_i32{d, npurt::shape{3, 4}, dtype::i32};
  const npurt::tensor_desc transposed{d, npurt::shape{4, 3}, dtype::f32};
  try {
    (void)ck.copy_to_device("fc.weight", as_i32, s);
    FAIL("a copy into an i32 destination was accepted");
  } catch (const npurt::caller_error& e) {
    CHECK(e.code() == errc::invalid_dtype);
    CHECK(std::string(e.what()).find("'fc.weight'") != std::string::npos);
  }
  try {
    (void)ck.copy_to_device("fc.weight", transposed, s);
    FAIL("a copy into a [4,3] destination was accepted");
  } catch (const npurt::caller_error& e) {
    CHECK(e.code() == errc::invalid_shape);
    CHECK(std::string(e.what()).find("[3,4]") != std::string::npos);
    CHECK(std::string(e.what()).find("[4,3]") != std::string::npos);
  }
  std::error_code ec;
  (void)ck.copy_to_device("fc.weight", transposed, s, ec);
  CHECK(ec == errc::invalid_shape);
  (void)ck.copy_to_device("nope", d, 48, s, ec);
  CHECK(ec == errc::invalid_argument);
  (void)ck.copy_to_device("fc.weight", d, 47, s, ec);
  CHECK(ec == errc::size_overflow);
  (void)ck.copy_to_device("fc.weight", npurt::tensor_desc{d, npurt::shape{3, 4}, dtype::f32}, s, ec);
  CHECK_FALSE(ec);
  // The snapshot the other way has an error_code form too (docs/checkpoints.md: every call has
  // one): a descriptor whose memory was freed adds nothing and throws nothing.
  void* gone = dev.malloc(48);
  dev.free(gone);
  ck.add_tensor("stale", npurt::tensor_desc{gone, npurt::shape{3, 4}, dtype::f32}, s, ec);
  CHECK(ec == errc::invalid_pointer);
  CHECK(ck.find_tensor("stale") == nullptr);
  ck.add_tensor("fresh", npurt::tensor_desc{d, npurt::shape{3, 4}, dtype::f32}, s, ec);
  CHECK_FALSE(ec);
  REQUIRE(ck.find_tensor("fresh") != nullptr);
  std::vector<float> back(12);
  s.memcpy(back.data(), 48, d, 48, npurt::memcpy_kind::device_to_host);
  s.synchronize();
  CHECK(back == w);
}

TEST_CASE("add_tensor refuses typed host data whose elements are not the dtype's, as values<T> does",
          "[checkpoint][errors]") {
  checkpoint ck;
  const std::vector<float> f(4, 1.5f);
  const std::vector<double> d(4, 2.5);
  // Same byte count, another kind: stored, the file would hold 1.5f's bit pattern as an i32.
  try {
    ck.add_tensor("as_i32", dtype::i32, {4}, f);
    FAIL("float data was stored as i32");
  } catch (const npurt::caller_error& e) {
    CHECK(e.code() == errc::invalid_dtype);
    const std::string what = e.what();
    CHECK(what.find("'as_i32'") != std::string::npos);
    CHECK(what.find("i32 cannot be stored from a floating-point element type") != std::string::npos);
  }
  // Four floats are the bytes of two doubles, and the other way round.
  std::error_code ec;
  ck.add_tensor("as_f64", dtype::f64, {2}, f, ec);
  CHECK(ec == errc::invalid_dtype);
  ck.add_tensor("as_f32", dtype::f32, {8}, d, ec);
  CHECK(ec == errc::invalid_dtype);
  CHECK(ck.tensors().empty());  // nothing refused was added

  // What values<T> reads back is accepted: the same type, 2-byte integers for f16 bit patterns,
  // and one-byte elements as raw bytes.
  ck.add_tensor("f", dtype::f32, {4}, f);
  ck.add_tensor("d", dtype::f64, {4}, d);
  ck.add_tensor("h", dtype::f16, {2}, std::vector<std::uint16_t>{0x3c00, 0x4000});
  std::vector<std::uint8_t> raw(4);
  const float one = 1.0f;
  std::memcpy(raw.data(), &one, 4);
  ck.add_tensor("raw", dtype::f32, {1}, raw);
  const checkpoint back = checkpoint::parse(ck.serialize());
  CHECK(back.get_tensor("f").values<float>()[3] == 1.5f);
  CHECK(back.get_tensor("d").values<double>()[0] == 2.5);
  CHECK(back.get_tensor("h").values<std::uint16_t>()[1] == 0x4000);
  CHECK(back.get_tensor("raw").values<float>()[0] == 1.0f);
}

TEST_CASE("get_metadata of another type says which type the key holds and which was asked for",
          "[checkpoint][errors]") {
  checkpoint ck;
  ck.set_metadata("lr", 0.1);
  ck.set_metadata("step", 7);
  ck.set_metadata("model", "mlp");
  const auto what_of = [&](auto get) -> std::string {
    try {
      get();
    } catch (const npurt::caller_error& e) {
      CHECK(e.code() == errc::invalid_argument);
      return e.what();
    }
    return "no error";
  };
  CHECK(what_of([&] {
          (void)ck.get_metadata<std::int64_t>("lr");
        }).starts_with("checkpoint metadata 'lr' holds a double, not an integer (std::int64_t)"));
  CHECK(what_of([&] {
          (void)ck.get_metadata<std::string>("step");
        }).starts_with("checkpoint metadata 'step' holds an integer (std::int64_t), not a string (std::string)"));
  CHECK(what_of([&] {
          (void)ck.get_metadata<double>("model");
        }).starts_with("checkpoint metadata 'model' holds a string (std::string), not a double"));
  CHECK(ck.get_metadata<double>("lr") == 0.1);
}

TEST_CASE("a device_buffer is snapshot and restored by its own size", "[checkpoint][device]") {
  npurt::simple_config cfg;
  npurt::system sys{cfg};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  std::vector<std::int32_t> in(6);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::int32_t>(10 * i) - 20;
  npurt::device_buffer src(dev, 24), dst(dev, 24), small(dev, 20);
  s.memcpy(src.data(), 24, in.data(), 24, npurt::memcpy_kind::host_to_device);
  checkpoint ck;
  ck.add_tensor("b", dtype::i32, {2, 3}, src, s);
  const auto v = ck.get_tensor("b").values<std::int32_t>();
  CHECK(std::vector<std::int32_t>(v.begin(), v.end()) == in);

  // 7 elements need 28 bytes: the buffer holds 24, and its allocation's rounding would have
  // been read without the check.
  try {
    ck.add_tensor("past_end", dtype::i32, {7}, src, s);
    FAIL("a snapshot past the buffer's end was accepted");
  } catch (const npurt::caller_error& e) {
    CHECK(e.code() == errc::size_overflow);
    CHECK(std::string(e.what()).find("need 28 bytes, the device buffer holds 24") != std::string::npos);
  }
  std::error_code ec;
  ck.add_tensor("past_end", dtype::i32, {7}, src, s, ec);
  CHECK(ec == errc::size_overflow);
  CHECK(ck.find_tensor("past_end") == nullptr);

  ck.copy_to_device("b", dst, s);
  std::vector<std::int32_t> out(6, 0);
  s.memcpy(out.data(), 24, dst.data(), 24, npurt::memcpy_kind::device_to_host);
  s.synchronize();
  CHECK(out == in);
  CHECK_THROWS_AS(ck.copy_to_device("b", small, s), npurt::caller_error);  // 24 bytes into 20
  (void)ck.copy_to_device("b", small, s, ec);
  CHECK(ec == errc::size_overflow);
}

TEST_CASE("a device snapshot on a stream with an earlier failure names that task, not the copy",
          "[checkpoint][errors][device]") {
  npurt::simple_config cfg;
  npurt::system sys{cfg};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  npurt::device_buffer b(dev, 16);
  std::vector<std::int32_t> in{1, 2, 3, 4};
  s.memcpy(b.data(), 16, in.data(), 16, npurt::memcpy_kind::host_to_device);
  // A fire-and-forget failure not read yet: the snapshot's synchronize is where it surfaces.
  (void)s.launch_callback([] { throw std::runtime_error("earlier failure"); });
  auto ck = npurt::create_checkpoint();
  std::string what;
  try {
    ck.add_tensor("dev", dtype::i32, {4}, b, s);
  } catch (const npurt::error& e) { what = e.what(); }
  INFO(what);
  CHECK(what.find("earlier failure") != std::string::npos);
  CHECK(what.find("nothing added") != std::string::npos);
  CHECK(what.find("the device-to-host copy failed") == std::string::npos);
  CHECK(ck.find_tensor("dev") == nullptr);
  // It was reported once: the stream runs on, and the next snapshot is taken.
  ck.add_tensor("dev", dtype::i32, {4}, b, s);
  const auto v = ck.get_tensor("dev").values<std::int32_t>();
  CHECK(std::vector<std::int32_t>(v.begin(), v.end()) == in);
}

TEST_CASE(
    "a device snapshot throws its stream's failure as synchronize would: a timeout's timer and limit, a "
    "device error's device",
    "[checkpoint][errors][device]") {
  SECTION("an event wait that timed out") {
    npurt::simple_config cfg;
    npurt::system sys{cfg};
    const npurt::picoseconds limit{5'000'000'000};  // 5 ms
    sys.set_event_wait_timeout(limit);
    auto& dev = sys.device(0);
    auto s = dev.make_stream();
    npurt::device_buffer b(dev, 16);
    auto never = dev.make_event({.wait_for_record = true});
    s.wait(never);
    auto ck = npurt::create_checkpoint();
    bool caught = false;
    try {
      ck.add_tensor("dev", dtype::i32, {4}, b, s);
    } catch (const npurt::timeout_error& e) {
      caught = true;
      INFO(e.what());
      CHECK(e.code() == errc::event_wait_timeout);
      CHECK(e.timer() == npurt::timeout_kind::event_wait);
      CHECK(e.limit() == limit.count());
      CHECK(std::string(e.what()).find("nothing added") != std::string::npos);
    }
    CHECK(caught);
    CHECK(ck.find_tensor("dev") == nullptr);
  }
  SECTION("a kernel fault on device 1") {
    npurt::fault_plan plan;
    plan.add(npurt::fault_spec::aicore_exception(1).at_time(npurt::sim_time{}));  // device 1's first kernel
    npurt::system sys{npurt::sim::with_faults(npurt::sim::presets::ascend910(2), plan)};
    auto& dev = sys.device(1);
    auto s = dev.make_stream();
    npurt::device_buffer b(dev, 16);
    (void)s.launch(npurt::kernel_desc{npurt::kernels::fixed{npurt::picoseconds{1'000'000}}, "faulty", 0});
    auto ck = npurt::create_checkpoint();
    bool caught = false;
    try {
      ck.add_tensor("dev", dtype::i32, {4}, b, s);
    } catch (const npurt::device_error& e) {
      caught = true;
      INFO(e.what());
      CHECK(e.code() == errc::kernel_fault);
      CHECK(e.device() == 1);
      CHECK(std::string(e.what()).find("faulty") != std::string::npos);
    }
    CHECK(caught);
    CHECK(ck.find_tensor("dev") == nullptr);
  }
}

// The rule of every call that can fail: a throwing form and an error_code form that reports the
// same refusal and changes nothing.
TEST_CASE("set_metadata has an error_code form that refuses what the throwing form refuses", "[checkpoint][errors]") {
  checkpoint ck;
  ck.set_metadata("step", 7);
  const std::string long_key(checkpoint::max_name_length + 1, 'k');
  struct refusal {
    std::function<void(std::error_code&)> with_code;
    std::function<void()> throwing;
    errc code;
  };
  const refusal cases[] = {
      {[&](std::error_code& ec) { ck.set_metadata("", 1, ec); }, [&] { ck.set_metadata("", 1); },
       errc::invalid_argument},
      {[&](std::error_code& ec) { ck.set_metadata(long_key, 0.5, ec); }, [&] { ck.set_metadata(long_key, 0.5); },
       errc::invalid_argument},
      {[&](std::error_code& ec) { ck.set_metadata("", "text", ec); }, [&] { ck.set_metadata("", "text"); },
       errc::invalid_argument},
      // INT64_MAX + 1 does not fit the format's signed integer; nor does the step it would replace.
      {[&](std::error_code& ec) { ck.set_metadata("step", std::uint64_t{1} << 63, ec); },
       [&] { ck.set_metadata("step", std::uint64_t{1} << 63); }, errc::size_overflow},
  };
  for (const refusal& r : cases) {
    std::error_code ec;
    CHECK_NOTHROW(r.with_code(ec));
    CHECK(ec == r.code);
    try {
      r.throwing();
      FAIL("the throwing form accepted what the error_code form refused");
    } catch (const npurt::caller_error& e) { CHECK(e.code() == r.code); }
  }
  // Nothing changed.
  REQUIRE(ck.metadata().size() == 1);
  CHECK(ck.get_metadata<std::int64_t>("step") == 7);
  // Accepted: set or replaced, the code cleared.
  std::error_code ec = make_error_code(errc::invalid_argument);
  ck.set_metadata("step", std::uint64_t{8}, ec);
  CHECK_FALSE(ec);
  ec = make_error_code(errc::invalid_argument);
  ck.set_metadata("lr", 0.25, ec);
  CHECK_FALSE(ec);
  ec = make_error_code(errc::invalid_argument);
  ck.set_metadata("model", "resnet", ec);
  CHECK_FALSE(ec);
  CHECK(ck.get_metadata<std::int64_t>("step") == 8);
  CHECK(ck.get_metadata<double>("lr") == 0.25);
  CHECK(ck.get_metadata<std::string>("model") == "resnet");
}

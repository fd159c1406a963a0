#include "common.hpp"
#include "format_oracle.hpp"

#include <npurt/npurt.hpp>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <array>
#include <cstring>
#include <numeric>

using namespace ckpt_test;
using npurt::checkpoint;
using npurt::dtype;
using npurt::errc;

namespace {

constexpr std::array all_dtypes = {dtype::f32, dtype::f16, dtype::bf16, dtype::i8,  dtype::i32, dtype::i64,
                                   dtype::u8,  dtype::f64, dtype::i16,  dtype::u16, dtype::u32, dtype::u64};
// Their on-disk codes, as docs/checkpoints.md lists them (8 is bool, not among these).
constexpr std::array<std::uint8_t, all_dtypes.size()> all_codes = {1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13};

std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = std::byte(static_cast<std::uint8_t>((i * 131 + seed * 17 + 7) % 251));
  return b;
}

checkpoint sample() {
  auto ck = npurt::create_checkpoint();
  unsigned seed = 0;
  for (dtype t : all_dtypes) {
    const std::vector<std::int64_t> shape = {3, 5, 2};
    ck.add_tensor("w." + std::string(npurt::to_string(t)), t, shape, pattern(30 * npurt::size_of(t), seed++));
  }
  ck.add_tensor("scalar", dtype::f32, {}, pattern(4, 99));
  ck.add_tensor("empty", dtype::i32, {4, 0, 7}, std::vector<std::byte>{});
  ck.set_metadata("step", 1234);
  ck.set_metadata("epoch", std::int64_t{-3});
  ck.set_metadata("lr", 0.125);
  ck.set_metadata("model", "resnet50");
  return ck;
}

TEST_CASE("CRC32C is the Castagnoli checksum of RFC 3720", "[checkpoint][format]") {
  // The check value of the CRC catalogue (CRC-32/ISCSI): crc("123456789") = 0xE3069283.
  const std::string s = "123456789";
  CHECK(npurt::detail::crc32c(std::as_bytes(std::span(s.data(), s.size()))) == 0xE3069283u);
}

TEST_CASE("every dtype, a scalar, an empty tensor and all metadata kinds survive save and load",
          "[checkpoint][roundtrip]") {
  scratch_dir dir("roundtrip");
  const checkpoint ck = sample();
  ck.save(dir / "a.ckpt");
  const checkpoint back = checkpoint::load(dir / "a.ckpt");
  REQUIRE(back.tensors().size() == ck.tensors().size());
  for (std::size_t i = 0; i < ck.tensors().size(); ++i) CHECK(back.tensors()[i] == ck.tensors()[i]);
  CHECK(back.metadata() == ck.metadata());
  CHECK(back.get_metadata<std::int64_t>("step") == 1234);
  CHECK(back.get_metadata<std::int64_t>("epoch") == -3);
  CHECK(back.get_metadata<double>("lr") == 0.125);
  CHECK(back.get_metadata<std::string>("model") == "resnet50");
  for (dtype t : all_dtypes) {
    const auto& x = back.get_tensor("w." + std::string(npurt::to_string(t)));
    CHECK(x.dtype() == t);
    CHECK(std::ranges::equal(x.shape(), std::vector<std::int64_t>{3, 5, 2}));
    CHECK(x.size_bytes() == 30 * npurt::size_of(t));
    CHECK(reinterpret_cast<std::uintptr_t>(x.data()) % checkpoint::alignment == 0);
  }
  CHECK(back.get_tensor("scalar").shape().empty());
  CHECK(back.get_tensor("empty").size_bytes() == 0);
  CHECK(dir.entries() == std::vector<std::string>{"a.ckpt"});  // no temporary file left
}

TEST_CASE("a bool tensor round-trips as bools, and its bytes must be 0 or 1", "[checkpoint][roundtrip][bool]") {
  checkpoint ck;
  const std::array<bool, 5> mask{true, false, false, true, true};
  ck.add_tensor("mask", dtype::boolean, {5}, mask);
  const auto bytes = ck.serialize();
  const checkpoint back = checkpoint::parse(bytes);
  const auto v = back.get_tensor("mask").values<bool>();
  CHECK(back.get_tensor("mask").dtype() == dtype::boolean);
  CHECK(std::vector<bool>(v.begin(), v.end()) == std::vector<bool>(mask.begin(), mask.end()));
  // The format's code for bool is 8, byte for byte as the oracle writes it.
  ckpt_oracle::file f;
  f.tensors.push_back({"mask", 8, {5}, {std::byte{1}, std::byte{0}, std::byte{0}, std::byte{1}, std::byte{1}}});
  CHECK(f.encode() == bytes);
  // A byte other than 0 or 1 is no bool: refused when added, and in a file.
  const std::array<std::uint8_t, 2> two{1, 2};
  std::error_code ec;
  checkpoint w;
  w.add_tensor("b", dtype::boolean, {2}, std::as_bytes(std::span(two)), ec);
  CHECK(ec == errc::invalid_argument);
  CHECK(w.tensors().empty());
  f.tensors[0].data[2] = std::byte{2};
  CHECK(parse_error_of(f.encode()) == errc::corrupt_file);
}

TEST_CASE("an empty checkpoint is a 64-byte header and loads back empty", "[checkpoint][roundtrip]") {
  const auto b = checkpoint{}.serialize();
  CHECK(b.size() == 64);
  const checkpoint back = checkpoint::parse(b);
  CHECK(back.tensors().empty());
  CHECK(back.metadata().empty());
}

TEST_CASE("typed values read back the numbers that were stored", "[checkpoint][roundtrip]") {
  std::vector<float> w(12);
  std::iota(w.begin(), w.end(), -2.5f);
  checkpoint ck;
  ck.add_tensor("w", dtype::f32, {3, 4}, w);
  const checkpoint back = checkpoint::parse(ck.serialize());
  const auto v = back.get_tensor("w").values<float>();
  CHECK(std::vector<float>(v.begin(), v.end()) == w);
  CHECK_THROWS_AS(back.get_tensor("w").values<double>(), npurt::caller_error);
}

TEST_CASE("a checkpoint_tensor can be added to another checkpoint as a host tensor", "[checkpoint][roundtrip]") {
  const checkpoint a = sample();
  checkpoint b;
  b.add_tensor("copy", a.get_tensor("w.bf16"));
  CHECK(b.get_tensor("copy").dtype() == dtype::bf16);
  CHECK(std::ranges::equal(b.get_tensor("copy").bytes(), a.get_tensor("w.bf16").bytes()));
}

TEST_CASE("the file is the documented format, byte for byte", "[checkpoint][format]") {
  const checkpoint ck = sample();
  ckpt_oracle::file f;
  // Metadata in key order, as documented.
  f.metadata = {{"epoch", 1, static_cast<std::uint64_t>(std::int64_t{-3}), {}},
                {"lr", 2, 0x3FC0000000000000ull, {}},
                {"model", 3, 0, "resnet50"},
                {"step", 1, 1234, {}}};
  unsigned seed = 0;
  for (std::size_t i = 0; i < all_dtypes.size(); ++i) {
    const dtype t = all_dtypes[i];
    f.tensors.push_back(
        {"w." + std::string(npurt::to_string(t)), all_codes[i], {3, 5, 2}, pattern(30 * npurt::size_of(t), seed++)});
  }
  f.tensors.push_back({"scalar", 1, {}, pattern(4, 99)});
  f.tensors.push_back({"empty", 5, {4, 0, 7}, {}});
  CHECK(ck.serialize() == f.encode());
}

TEST_CASE("saving the same checkpoint twice gives identical files", "[checkpoint][determinism]") {
  scratch_dir dir("determinism");
  sample().save(dir / "a.ckpt");
  sample().save(dir / "b.ckpt");
  const auto a = read_file(dir / "a.ckpt");
  CHECK(a == read_file(dir / "b.ckpt"));
  CHECK(a == sample().serialize());
}

TEST_CASE("save replaces an existing checkpoint and restore reads the new one", "[checkpoint][roundtrip]") {
  scratch_dir dir("replace");
  checkpoint a;
  a.set_metadata("step", 1);
  a.save(dir / "c.ckpt");
  checkpoint b;
  b.set_metadata("step", 2);
  b.add_tensor("x", dtype::u8, {2}, pattern(2, 1));
  b.save(dir / "c.ckpt");
  checkpoint r;
  r.restore(dir / "c.ckpt");
  CHECK(r.get_metadata<std::int64_t>("step") == 2);
  CHECK(r.tensors().size() == 1);
  CHECK(dir.entries() == std::vector<std::string>{"c.ckpt"});
}

TEST_CASE("a failed restore leaves the checkpoint as it was", "[checkpoint][errors]") {
  scratch_dir dir("restore-fail");
  checkpoint ck = sample();
  write_file(dir / "bad.ckpt", std::vector<std::byte>(100, std::byte{1}));
  std::error_code ec;
  ck.restore(dir / "bad.ckpt", ec);
  CHECK(ec == errc::parse_error);
  CHECK(ck.tensors().size() == sample().tensors().size());
  CHECK(ck.get_metadata<std::int64_t>("step") == 1234);
  CHECK_THROWS_AS(ck.restore(dir / "bad.ckpt"), npurt::caller_error);
}

TEST_CASE("add_tensor rejects bad names, shapes and sizes with typed errors", "[checkpoint][errors]") {
  checkpoint ck;
  std::error_code ec;
  ck.add_tensor("a", dtype::f32, {2}, pattern(8, 0), ec);
  CHECK(!ec);
  ck.add_tensor("a", dtype::f32, {2}, pattern(8, 0), ec);
  CHECK(ec == errc::invalid_argument);  // duplicate
  ck.add_tensor("", dtype::f32, {2}, pattern(8, 0), ec);
  CHECK(ec == errc::invalid_argument);
  ck.add_tensor(std::string(checkpoint::max_name_length + 1, 'n'), dtype::u8, {1}, pattern(1, 0), ec);
  CHECK(ec == errc::invalid_argument);
  ck.add_tensor("b", dtype::f32, {3}, pattern(8, 0), ec);
  CHECK(ec == errc::invalid_argument);  // 8 bytes for 12
  ck.add_tensor("c", dtype::f32, {-1}, pattern(0, 0), ec);
  CHECK(ec == errc::invalid_shape);
  ck.add_tensor("d", dtype::f32, std::vector<std::int64_t>(checkpoint::max_rank + 1, 1), pattern(4, 0), ec);
  CHECK(ec == errc::invalid_shape);
  ck.add_tensor("e", dtype::i64, {1ll << 31, 1ll << 31}, pattern(0, 0), ec);
  CHECK(ec == errc::size_overflow);  // 2^62 elements x 8 bytes
  CHECK(ck.tensors().size() == 1);
  CHECK_THROWS_AS(ck.add_tensor("a", dtype::f32, {2}, pattern(8, 0)), npurt::caller_error);
  try {
    ck.add_tensor("c", dtype::f32, {2, -1}, pattern(0, 0));
    FAIL("no exception");
  } catch (const npurt::caller_error& e) {
    CHECK(e.code() == errc::invalid_shape);
    CHECK(std::string(e.what()).find("'c'") != std::string::npos);
    CHECK(std::string(e.what()).find("negative extent -1 in dimension 1") != std::string::npos);
  }
  CHECK_THROWS_AS(ck.get_tensor("missing"), npurt::caller_error);
  CHECK(ck.find_tensor("missing") == nullptr);
  ck.set_metadata("k", "text");
  CHECK_THROWS_AS(ck.get_metadata<std::int64_t>("k"), npurt::caller_error);
  CHECK_THROWS_AS(ck.get_metadata<std::int64_t>("absent"), npurt::caller_error);
  CHECK_THROWS_AS(ck.set_metadata("", 1), npurt::caller_error);
  CHECK_THROWS_AS(ck.set_metadata("big", std::uint64_t{1} << 63), npurt::caller_error);
}

TEST_CASE("saving into a missing directory is an I/O error and leaves nothing behind", "[checkpoint][errors]") {
  scratch_dir dir("io");
  std::error_code ec;
  sample().save(dir / "no" / "such" / "dir.ckpt", ec);
  CHECK(ec == std::errc::no_such_file_or_directory);
  CHECK_THROWS_AS(sample().save(dir / "no" / "x.ckpt"), npurt::checkpoint_io_error);
  CHECK(dir.entries().empty());
  auto c = checkpoint::load(dir / "absent.ckpt", ec);
  CHECK(ec == std::errc::no_such_file_or_directory);
  CHECK_THROWS_AS(checkpoint::load(dir / "absent.ckpt"), npurt::checkpoint_io_error);
  c = checkpoint::load(dir.path(), ec);  // a directory
  CHECK(ec == errc::invalid_argument);
}

TEST_CASE("save fsyncs the file before the rename and the directory after it", "[checkpoint][durability]") {
  scratch_dir dir("order");
  struct log_t {
    std::vector<npurt::detail::save_step> steps;
    std::uint64_t last_bytes = 0;
  } log;
  auto& probe = npurt::detail::checkpoint_save_probe();
  probe.context = &log;
  probe.at = [](npurt::detail::save_step s, std::uint64_t bytes, void* ctx) {
    auto& l = *static_cast<log_t*>(ctx);
    if (l.steps.empty() || l.steps.back() != s) l.steps.push_back(s);
    l.last_bytes = bytes;
  };
  const checkpoint ck = sample();
  ck.save(dir / "o.ckpt");
  probe = {};
  using st = npurt::detail::save_step;
  CHECK(log.steps ==
        std::vector<st>{st::temp_created, st::bytes_written, st::file_synced, st::renamed, st::directory_synced});
  CHECK(log.last_bytes == ck.serialize().size());
}

TEST_CASE("a checkpoint snapshots device memory and copies it back", "[checkpoint][device]") {
  npurt::simple_config cfg;
  npurt::system sys{cfg};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  std::vector<std::int32_t> in(24);
  std::iota(in.begin(), in.end(), 100);
  void* d = dev.malloc(in.size() * 4);
  s.memcpy(d, 96, in.data(), 96, npurt::memcpy_kind::host_to_device);
  checkpoint ck;
  ck.add_tensor("dev", dtype::i32, {4, 6}, d, s);
  npurt::tensor_desc desc{d, npurt::shape{2, 12}, dtype::i32};
  ck.add_tensor("desc", desc, s);
  const checkpoint back = checkpoint::parse(ck.serialize());
  const auto v = back.get_tensor("dev").values<std::int32_t>();
  CHECK(std::vector<std::int32_t>(v.begin(), v.end()) == in);
  CHECK(std::ranges::equal(back.get_tensor("desc").bytes(), back.get_tensor("dev").bytes()));

  void* d2 = dev.malloc(96);
  back.copy_to_device("dev", d2, 96, s);
  std::vector<std::int32_t> out(24, 0);
  s.memcpy(out.data(), 96, d2, 96, npurt::memcpy_kind::device_to_host);
  s.synchronize();
  CHECK(out == in);

  std::error_code ec;
  ck.add_tensor("null", dtype::i32, {1}, nullptr, s, ec);
  CHECK(ec == errc::null_pointer);
  int host_only = 0;
  ck.add_tensor("bad", dtype::i32, {1}, &host_only, s, ec);  // not a device pointer
  CHECK(ec);
  CHECK(ck.find_tensor("bad") == nullptr);  // a failed snapshot adds nothing
  CHECK_THROWS_AS(back.copy_to_device("dev", d2, 95, s), npurt::caller_error);  // 96 bytes into 95
  dev.free(d);
  dev.free(d2);
}

}  // namespace

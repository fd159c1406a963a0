#include "common.hpp"
#include "format_oracle.hpp"

#include <npurt/npurt.hpp>

#include <catch2/catch_test_macros.hpp>

#include <cstring>

using namespace ckpt_test;
using npurt::checkpoint;
using npurt::errc;

namespace {

std::vector<std::byte> data(std::size_t n) {
  std::vector<std::byte> b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = std::byte(static_cast<std::uint8_t>(i * 7 + 3));
  return b;
}

/// A small valid file: two tensors (one needs padding after it) and two metadata entries.
ckpt_oracle::file small() {
  ckpt_oracle::file f;
  f.metadata = {{"name", 3, 0, "abc"}, {"step", 1, 42, {}}};
  f.tensors.push_back({"a", 1, {2, 3}, data(24)});
  f.tensors.push_back({"bb", 7, {5}, data(5)});
  return f;
}

TEST_CASE("the oracle's small file is valid, so each hostile variant differs from it in one way",
          "[checkpoint][hostile]") {
  const auto b = small().encode();
  const checkpoint ck = checkpoint::parse(b);
  CHECK(ck.tensors().size() == 2);
  CHECK(ck.get_metadata<std::int64_t>("step") == 42);
  CHECK(ck.serialize() == b);
}

TEST_CASE("every truncation of a checkpoint is reported, never loaded", "[checkpoint][hostile]") {
  const auto b = small().encode();
  for (std::size_t n = 0; n < b.size(); ++n) {
    const std::vector<std::byte> cut(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n));
    const std::error_code ec = parse_error_of(cut);
    INFO("length " << n);
    CHECK(ec == errc::corrupt_file);
  }
}

TEST_CASE("flipping any single byte of a checkpoint is detected", "[checkpoint][hostile]") {
  const auto b = small().encode();
  REQUIRE(b.size() < 4096);
  for (std::size_t i = 0; i < b.size(); ++i) {
    for (std::uint8_t mask : {std::uint8_t{0xFF}, std::uint8_t{0x01}, std::uint8_t{0x80}}) {
      auto bad = b;
      bad[i] ^= std::byte{mask};
      const std::error_code ec = parse_error_of(bad);
      INFO("byte " << i << " mask " << int(mask));
      REQUIRE(ec);
      // The magic is the first thing checked; everything after it is caught by a checksum or
      // a layout rule, all of which say the file is corrupt (or of another version).
      if (i < 8) CHECK(ec == errc::parse_error);
      else if (i >= 8 && i < 12) CHECK(ec == errc::not_supported);
      else CHECK(ec == errc::corrupt_file);
    }
  }
}

TEST_CASE("an appended byte is detected", "[checkpoint][hostile]") {
  auto b = small().encode();
  b.push_back(std::byte{0});
  CHECK(parse_error_of(b) == errc::corrupt_file);
}

TEST_CASE("wrong magic and other versions get their own errors", "[checkpoint][hostile]") {
  auto f = small();
  auto b = f.encode();
  b[1] = std::byte{'X'};
  CHECK(parse_error_of(b) == errc::parse_error);
  CHECK(parse_error_of(std::vector<std::byte>(3, std::byte{'{'})) == errc::corrupt_file);
  CHECK(parse_error_of(std::vector<std::byte>(300, std::byte{'{'})) == errc::parse_error);
  f.version = 2;
  CHECK(parse_error_of(f.encode()) == errc::not_supported);
  f.version = 0;
  CHECK(parse_error_of(f.encode()) == errc::not_supported);
  try {
    (void)checkpoint::parse(b);
    FAIL("no exception");
  } catch (const npurt::caller_error& e) { CHECK(std::string(e.what()).find("magic") != std::string::npos); }
}

// The variants below keep every checksum valid, so they reach the checks behind them.

TEST_CASE("a tensor count beyond what the manifest can hold is size_overflow", "[checkpoint][hostile]") {
  auto f = small();
  f.set_tensor_count = true;
  f.tensor_count = 0xFFFFFFFFu;
  CHECK(parse_error_of(f.encode()) == errc::size_overflow);
  f.tensor_count = 3;  // fits the count check, but the third entry is missing
  CHECK(parse_error_of(f.encode()) == errc::size_overflow);
  f.tensor_count = 1;  // the second entry is left over
  CHECK(parse_error_of(f.encode()) == errc::corrupt_file);
}

TEST_CASE("a manifest size beyond the file is size_overflow", "[checkpoint][hostile]") {
  auto f = small();
  f.set_manifest_size = true;
  f.manifest_size = ~std::uint64_t{0} - 10;
  CHECK(parse_error_of(f.encode()) == errc::size_overflow);
}

TEST_CASE("an oversized name length is size_overflow and an empty name is corrupt", "[checkpoint][hostile]") {
  auto f = small();
  f.tensors[0].set_name_length = true;
  f.tensors[0].name_length = 0xFFFFFFF0u;
  CHECK(parse_error_of(f.encode()) == errc::size_overflow);
  f.tensors[0].name_length = 0;  // an empty name
  CHECK(parse_error_of(f.encode()) == errc::corrupt_file);
}

TEST_CASE("a name longer than the limit is rejected even when the manifest holds it", "[checkpoint][hostile]") {
  auto f = small();
  f.tensors[0].name = std::string(checkpoint::max_name_length + 1, 'x');
  CHECK(parse_error_of(f.encode()) == errc::size_overflow);
}

TEST_CASE("a shape whose byte size overflows 64 bits is size_overflow", "[checkpoint][hostile]") {
  auto f = small();
  f.tensors[0].dims = {1ll << 40, 1ll << 40};
  CHECK(parse_error_of(f.encode()) == errc::size_overflow);
  f.tensors[0].dims = {(1ll << 62) / 4, 8};  // overflows only through the dtype size
  CHECK(parse_error_of(f.encode()) == errc::size_overflow);
}

TEST_CASE("a shape and size claiming more bytes than the file holds is size_overflow", "[checkpoint][hostile]") {
  auto f = small();
  f.tensors[1].dims = {1ll << 40};
  f.tensors[1].set_size = true;
  f.tensors[1].size = 1ull << 40;
  CHECK(parse_error_of(f.encode()) == errc::size_overflow);
  f.tensors[1].size = ~std::uint64_t{0};  // offset + size wraps around
  f.tensors[1].dims = {-1};
  CHECK(parse_error_of(f.encode()) == errc::invalid_shape);
}

TEST_CASE("a stored size that disagrees with shape and dtype is corrupt", "[checkpoint][hostile]") {
  auto f = small();
  f.tensors[0].set_size = true;
  f.tensors[0].size = 20;
  CHECK(parse_error_of(f.encode()) == errc::corrupt_file);
}

TEST_CASE("offsets out of range, misaligned or overlapping are reported", "[checkpoint][hostile]") {
  auto f = small();
  f.tensors[1].offset_delta = 1 << 20;  // past the end
  CHECK(parse_error_of(f.encode()) == errc::size_overflow);
  f.tensors[1].offset_delta = -64;  // overlaps the first tensor
  CHECK(parse_error_of(f.encode()) == errc::corrupt_file);
  f.tensors[1].offset_delta = 0;
  f.tensors[0].offset_delta = 3;  // inside the file, but not where the layout puts it
  CHECK(parse_error_of(f.encode()) == errc::corrupt_file);
  f.tensors[0].offset_delta = 0;
  f.tensors[1].offset_delta = static_cast<std::int64_t>(~std::uint64_t{0} / 2);
  CHECK(parse_error_of(f.encode()) == errc::size_overflow);
}

TEST_CASE("duplicate tensor names and metadata keys are corrupt", "[checkpoint][hostile]") {
  auto f = small();
  f.tensors[1].name = "a";
  CHECK(parse_error_of(f.encode()) == errc::corrupt_file);
  auto g = small();
  g.metadata[1].key = "name";
  CHECK(parse_error_of(g.encode()) == errc::corrupt_file);
}

TEST_CASE("metadata keys out of order are corrupt, so every checkpoint has one encoding", "[checkpoint][hostile]") {
  auto f = small();
  std::swap(f.metadata[0], f.metadata[1]);
  CHECK(parse_error_of(f.encode()) == errc::corrupt_file);
}

TEST_CASE("unknown dtypes, ranks and metadata kinds get typed errors", "[checkpoint][hostile]") {
  auto f = small();
  f.tensors[0].dtype_code = 0;
  CHECK(parse_error_of(f.encode()) == errc::invalid_dtype);
  f.tensors[0].dtype_code = 200;
  CHECK(parse_error_of(f.encode()) == errc::invalid_dtype);
  f.tensors[0].dtype_code = 14;  // the first code past u64's
  CHECK(parse_error_of(f.encode()) == errc::invalid_dtype);
  auto g = small();
  g.tensors[0].dims = std::vector<std::int64_t>(checkpoint::max_rank + 1, 1);
  g.tensors[0].data = data(24);
  CHECK(parse_error_of(g.encode()) == errc::invalid_shape);
  auto h = small();
  h.tensors[0].set_rank = true;
  h.tensors[0].rank = 255;  // more dimensions than the entry has bytes for
  CHECK(parse_error_of(h.encode()) == errc::invalid_shape);
  auto k = small();
  k.metadata[0].kind = 9;
  CHECK(parse_error_of(k.encode()) == errc::corrupt_file);
}

TEST_CASE("a tensor whose bytes do not match its CRC is corrupt and names the tensor", "[checkpoint][hostile]") {
  auto f = small();
  f.tensors[1].crc_xor = 1;
  std::error_code ec;
  (void)checkpoint::parse(f.encode(), ec);
  CHECK(ec == errc::corrupt_file);
  try {
    (void)checkpoint::parse(f.encode());
    FAIL("no exception");
  } catch (const npurt::caller_error& e) {
    CHECK(std::string(e.what()).find("'bb'") != std::string::npos);
    CHECK(e.code() == errc::corrupt_file);
  }
}

TEST_CASE("nonzero padding and a wrong file size are corrupt", "[checkpoint][hostile]") {
  auto f = small();
  f.padding_byte = 1;
  CHECK(parse_error_of(f.encode()) == errc::corrupt_file);
  auto g = small();
  g.file_size_delta = -1;
  CHECK(parse_error_of(g.encode()) == errc::corrupt_file);
  g.file_size_delta = 1;
  CHECK(parse_error_of(g.encode()) == errc::corrupt_file);
}

TEST_CASE("hostile names are quoted with control bytes escaped", "[checkpoint][hostile]") {
  auto f = small();
  f.tensors[1].name = std::string("x\n\x01", 3);
  f.tensors[1].crc_xor = 1;
  try {
    (void)checkpoint::parse(f.encode());
    FAIL("no exception");
  } catch (const npurt::error& e) { CHECK(std::string(e.what()).find("'x\\x0a\\x01'") != std::string::npos); }
}

TEST_CASE("a truncated file on disk is reported with its path", "[checkpoint][hostile]") {
  scratch_dir dir("truncated");
  auto b = small().encode();
  b.resize(b.size() - 3);
  write_file(dir / "t.ckpt", b);
  try {
    (void)checkpoint::load(dir / "t.ckpt");
    FAIL("no exception");
  } catch (const npurt::caller_error& e) {
    CHECK(e.code() == errc::corrupt_file);
    CHECK(std::string(e.what()).find("t.ckpt") != std::string::npos);
    CHECK(std::string(e.what()).find("truncated") != std::string::npos);
  }
}

}  // namespace

TEST_CASE("the on-disk codes 9 to 13 are f64, i16, u16, u32 and u64", "[checkpoint][hostile]") {
  // The format's codes, fixed by docs/checkpoint.md, written by hand here: appending the dtypes
  // to the enum must not move them.
  const std::array<std::pair<std::uint8_t, npurt::dtype>, 5> codes{{{9, npurt::dtype::f64},
                                                                    {10, npurt::dtype::i16},
                                                                    {11, npurt::dtype::u16},
                                                                    {12, npurt::dtype::u32},
                                                                    {13, npurt::dtype::u64}}};
  for (const auto& [code, type] : codes) {
    auto f = small();
    f.tensors[1].dtype_code = code;
    f.tensors[1].data = data(5 * npurt::size_of(type));
    const checkpoint ck = checkpoint::parse(f.encode());
    CHECK(ck.tensors()[1].dtype() == type);
    CHECK(ck.serialize() == f.encode());
  }
}

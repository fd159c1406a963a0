// An independent writer of the checkpoint file format as docs/checkpoints.md describes it. The
// tests use it twice: its output for a normal checkpoint must equal checkpoint::serialize()
// byte for byte (so the documentation and the code agree), and it builds hostile files whose
// checksums are valid, so the loader's checks behind the checksums are reached.
#pragma once

#include <boost/crc.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace ckpt_oracle {

using crc32c_t = boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true>;

inline std::uint32_t crc(const std::vector<std::byte>& b, std::size_t from = 0, std::size_t n = std::size_t(-1)) {
  crc32c_t c;
  if (n == std::size_t(-1)) n = b.size() - from;
  c.process_bytes(b.data() + from, n);
  return c.checksum();
}

struct bytes {
  std::vector<std::byte> v;
  void u8(std::uint64_t x) { v.push_back(std::byte(static_cast<std::uint8_t>(x))); }
  void u32(std::uint64_t x) {
    for (int i = 0; i < 4; ++i) u8(x >> (8 * i));
  }
  void u64(std::uint64_t x) {
    for (int i = 0; i < 8; ++i) u8(x >> (8 * i));
  }
  void str(const std::string& s, std::uint64_t len) {
    u32(len);
    for (char c : s) u8(static_cast<unsigned char>(c));
  }
};

struct meta {
  std::string key;
  std::uint8_t kind;  // 1 int64, 2 float64, 3 string
  std::uint64_t number = 0;
  std::string text;
};

struct tensor {
  std::string name;
  std::uint8_t dtype_code;
  std::vector<std::int64_t> dims;
  std::vector<std::byte> data;
  // Overrides for hostile files; by default the writer fills in the honest values.
  std::int64_t offset_delta = 0;
  bool set_size = false;
  std::uint64_t size = 0;
  bool set_rank = false;
  std::uint64_t rank = 0;
  bool set_name_length = false;
  std::uint64_t name_length = 0;
  std::uint32_t crc_xor = 0;
};

struct file {
  std::vector<meta> metadata;
  std::vector<tensor> tensors;
  std::uint32_t version = 1;
  bool set_tensor_count = false;
  std::uint64_t tensor_count = 0;
  bool set_manifest_size = false;
  std::uint64_t manifest_size = 0;
  std::int64_t file_size_delta = 0;
  std::uint8_t padding_byte = 0;

  [[nodiscard]] std::vector<std::byte> encode() const {
    bytes m;
    for (const auto& e : metadata) {
      m.str(e.key, e.key.size());
      m.u8(e.kind);
      if (e.kind == 3) m.str(e.text, e.text.size());
      else m.u64(e.number);
    }
    std::size_t entries = 0;
    for (const auto& t : tensors) entries += 4 + t.name.size() + 2 + 8 * t.dims.size() + 8 + 8 + 4;
    const std::uint64_t msize = m.v.size() + entries;
    const std::uint64_t data_offset = (64 + msize + 63) / 64 * 64;
    std::uint64_t at = data_offset, end = data_offset;
    std::vector<std::uint64_t> offsets;  // where the bytes go; the manifest may claim otherwise
    for (const auto& t : tensors) {
      const std::uint64_t off = at + static_cast<std::uint64_t>(t.offset_delta);
      offsets.push_back(at);
      m.str(t.name, t.set_name_length ? t.name_length : t.name.size());
      m.u8(t.dtype_code);
      m.u8(t.set_rank ? t.rank : t.dims.size());
      for (auto d : t.dims) m.u64(static_cast<std::uint64_t>(d));
      m.u64(off);
      m.u64(t.set_size ? t.size : t.data.size());
      crc32c_t c;
      c.process_bytes(t.data.data(), t.data.size());
      m.u32(c.checksum() ^ t.crc_xor);
      end = at + t.data.size();
      at = (end + 63) / 64 * 64;
    }
    bytes f;
    const unsigned char magic[8] = {0x89, 'N', 'P', 'C', 'K', 'P', 'T', '\n'};
    for (unsigned char c : magic) f.u8(c);
    f.u32(version);
    f.u32(64);
    f.u64(end + static_cast<std::uint64_t>(file_size_delta));
    f.u64(64);
    f.u64(set_manifest_size ? manifest_size : msize);
    f.u64(data_offset);
    f.u32(set_tensor_count ? tensor_count : tensors.size());
    f.u32(metadata.size());
    f.u32(crc(m.v));
    f.u32(crc(f.v, 0, 60));
    f.v.insert(f.v.end(), m.v.begin(), m.v.end());
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      while (f.v.size() < offsets[i]) f.u8(padding_byte);
      f.v.insert(f.v.end(), tensors[i].data.begin(), tensors[i].data.end());
    }
    while (f.v.size() < data_offset) f.u8(padding_byte);
    return f.v;
  }
};

}  // namespace ckpt_oracle

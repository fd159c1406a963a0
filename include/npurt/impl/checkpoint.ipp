// npurt/impl/checkpoint.ipp
#pragma once

#include <npurt/checkpoint.hpp>
#include <npurt/detail/scheduler.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

namespace npurt {
namespace detail {

namespace ckpt {

inline constexpr std::byte magic[8] = {std::byte{0x89}, std::byte{'N'}, std::byte{'P'}, std::byte{'C'},
                                       std::byte{'K'},  std::byte{'P'}, std::byte{'T'}, std::byte{'\n'}};
inline constexpr std::uint64_t header_size = 64;
// Counts and lengths are stored in 32-bit fields.
inline constexpr std::uint64_t max_field = std::numeric_limits<std::uint32_t>::max();
// The smallest manifest entries: a one-byte name, and for a tensor dtype, rank 0, offset, size
// and CRC; for metadata a kind and the smallest value (a string length of 4 bytes).
inline constexpr std::uint64_t min_tensor_entry = 4 + 1 + 1 + 1 + 8 + 8 + 4;
inline constexpr std::uint64_t min_metadata_entry = 4 + 1 + 1 + 4;

enum class value_kind : std::uint8_t { integer = 1, floating = 2, string = 3 };

// The on-disk dtype codes are fixed by the format, independent of the enum's values.
constexpr std::uint8_t dtype_code(npurt::dtype t) noexcept {
  switch (t) {
    case npurt::dtype::f32: return 1;
    case npurt::dtype::f16: return 2;
    case npurt::dtype::bf16: return 3;
    case npurt::dtype::i8: return 4;
    case npurt::dtype::i32: return 5;
    case npurt::dtype::i64: return 6;
    case npurt::dtype::u8: return 7;
    case npurt::dtype::boolean: return 8;
    case npurt::dtype::f64: return 9;
    case npurt::dtype::i16: return 10;
    case npurt::dtype::u16: return 11;
    case npurt::dtype::u32: return 12;
    case npurt::dtype::u64: return 13;
  }
  return 0;
}
constexpr bool dtype_from_code(std::uint8_t c, npurt::dtype& t) noexcept {
  switch (c) {
    case 1: t = npurt::dtype::f32; return true;
    case 2: t = npurt::dtype::f16; return true;
    case 3: t = npurt::dtype::bf16; return true;
    case 4: t = npurt::dtype::i8; return true;
    case 5: t = npurt::dtype::i32; return true;
    case 6: t = npurt::dtype::i64; return true;
    case 7: t = npurt::dtype::u8; return true;
    case 8: t = npurt::dtype::boolean; return true;
    case 9: t = npurt::dtype::f64; return true;
    case 10: t = npurt::dtype::i16; return true;
    case 11: t = npurt::dtype::u16; return true;
    case 12: t = npurt::dtype::u32; return true;
    case 13: t = npurt::dtype::u64; return true;
  }
  return false;
}

/// Whether `bytes` hold valid elements of `t`: every byte 0 or 1 for bool, anything otherwise.
inline bool bools_valid(npurt::dtype t, std::span<const std::byte> bytes) noexcept {
  if (t != npurt::dtype::boolean) return true;
  for (const std::byte b : bytes)
    if (b > std::byte{1}) return false;
  return true;
}

/// An error code with the sentence that names what was wrong.
struct status {
  std::error_code ec;
  std::string what;
  // A snapshot's stream failure: what its synchronize read (a timeout's timer and limit), and the
  // device a device error is about; raise() throws them as the synchronize would.
  failure stream_failure;
  std::int32_t device = -1;
  bool fail(std::error_code e, std::string w) {
    ec = e;
    what = std::move(w);
    return false;
  }
  bool fail(errc e, std::string w) { return fail(make_error_code(e), std::move(w)); }
};

inline bool add_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t& out) noexcept {
  return __builtin_add_overflow(a, b, &out);
}
/// x rounded up to the alignment; false on overflow.
inline bool align_up(std::uint64_t x, std::uint64_t& out) noexcept {
  if (add_overflows(x, checkpoint::alignment - 1, out)) return false;
  out &= ~std::uint64_t(checkpoint::alignment - 1);
  return true;
}

class writer {
 public:
  void u8(std::uint8_t v) { out_.push_back(std::byte{v}); }
  void u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(std::byte(static_cast<std::uint8_t>(v >> (8 * i))));
  }
  void u64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(std::byte(static_cast<std::uint8_t>(v >> (8 * i))));
  }
  void str(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    for (char c : s) out_.push_back(std::byte(static_cast<unsigned char>(c)));
  }
  std::vector<std::byte>& bytes() noexcept { return out_; }

 private:
  std::vector<std::byte> out_;
};

inline std::uint32_t get_u32(const std::byte* p) noexcept {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::uint32_t(std::to_integer<std::uint8_t>(p[i])) << (8 * i);
  return v;
}
inline std::uint64_t get_u64(const std::byte* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= std::uint64_t(std::to_integer<std::uint8_t>(p[i])) << (8 * i);
  return v;
}
inline void put_u32(std::byte* p, std::uint32_t v) noexcept {
  for (int i = 0; i < 4; ++i) p[i] = std::byte(static_cast<std::uint8_t>(v >> (8 * i)));
}
inline void put_u64(std::byte* p, std::uint64_t v) noexcept {
  for (int i = 0; i < 8; ++i) p[i] = std::byte(static_cast<std::uint8_t>(v >> (8 * i)));
}

/// A bounds-checked cursor over the manifest: every read says whether the bytes were there.
class reader {
 public:
  explicit reader(std::span<const std::byte> b) noexcept : b_(b) {}
  [[nodiscard]] std::size_t remaining() const noexcept { return b_.size() - pos_; }
  bool u8(std::uint8_t& v) noexcept {
    if (remaining() < 1) return false;
    v = std::to_integer<std::uint8_t>(b_[pos_++]);
    return true;
  }
  bool u32(std::uint32_t& v) noexcept {
    if (remaining() < 4) return false;
    v = get_u32(b_.data() + pos_);
    pos_ += 4;
    return true;
  }
  bool u64(std::uint64_t& v) noexcept {
    if (remaining() < 8) return false;
    v = get_u64(b_.data() + pos_);
    pos_ += 8;
    return true;
  }
  bool bytes(std::size_t n, std::string& s) {
    if (remaining() < n) return false;
    s.assign(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return true;
  }

 private:
  std::span<const std::byte> b_;
  std::size_t pos_ = 0;
};

/// Where a loaded file's bytes come from: memory, or a file read with pread(2).
class source {
 public:
  explicit source(std::span<const std::byte> mem) noexcept : mem_(mem), size_(mem.size()) {}
  source(int fd, std::uint64_t size) noexcept : fd_(fd), size_(size) {}
  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }
  /// Reads exactly dst.size() bytes at `offset` (the caller has bounds-checked them).
  bool read(std::uint64_t offset, std::span<std::byte> dst, status& st) const {
    if (dst.empty()) return true;  // memcpy's pointers must not be null, even for 0 bytes
    if (fd_ < 0) {
      std::memcpy(dst.data(), mem_.data() + offset, dst.size());
      return true;
    }
    std::size_t done = 0;
    while (done < dst.size()) {
      const ssize_t n = ::pread(fd_, dst.data() + done, dst.size() - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return st.fail(std::error_code(errno, std::generic_category()), "checkpoint: read failed");
      if (n == 0) return st.fail(errc::corrupt_file, "checkpoint: the file was truncated while it was read");
      done += static_cast<std::size_t>(n);
    }
    return true;
  }

 private:
  std::span<const std::byte> mem_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

inline bool check_name(std::string_view what, std::string_view name, status& st) {
  if (name.empty()) return st.fail(errc::invalid_argument, "empty " + std::string(what) + " name");
  if (name.size() > checkpoint::max_name_length)
    return st.fail(errc::invalid_argument, std::string(what) + " name of " + std::to_string(name.size()) +
                                               " bytes; at most " + std::to_string(checkpoint::max_name_length) +
                                               " are allowed");
  return true;
}

/// The shape checks shared by add_tensor and the loader.
inline bool shape_bytes(npurt::dtype type, std::span<const std::int64_t> shape, std::uint64_t& bytes, status& st) {
  if (shape.size() > checkpoint::max_rank)
    return st.fail(errc::invalid_shape,
                   "rank " + std::to_string(shape.size()) + " exceeds " + std::to_string(checkpoint::max_rank));
  std::uint64_t n = size_of(type);
  if (n == 0) return st.fail(errc::invalid_dtype, "unknown dtype");
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0)
      return st.fail(errc::invalid_shape,
                     "negative extent " + std::to_string(shape[i]) + " in dimension " + std::to_string(i));
    if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(shape[i]), &n))
      return st.fail(errc::size_overflow, "the shape's byte size overflows 64 bits");
  }
  if (n > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
      n > std::numeric_limits<std::size_t>::max())
    return st.fail(errc::size_overflow, "the shape's byte size overflows");
  bytes = n;
  return true;
}

/// Header + manifest + padding up to the first tensor, and where each tensor goes.
struct layout {
  std::vector<std::byte> prefix;
  std::vector<std::uint64_t> offsets;
  std::uint64_t file_size = 0;
};

/// Refuses contents whose counts or lengths do not fit the format's 32-bit fields: written cut
/// to 32 bits they would make a file that is corrupt, or worse, loads as something else.
inline bool check_fields(std::span<const checkpoint_tensor> tensors,
                         const std::map<std::string, checkpoint_value, std::less<>>& metadata, status& st) {
  const std::uint64_t limit = std::min<std::uint64_t>(checkpoint_save_probe().max_field, max_field);
  auto too_big = [&](const std::string& what, std::uint64_t n) {
    return st.fail(errc::size_overflow, "checkpoint: " + what + " of " + std::to_string(n) +
                                            "; the format stores at most " + std::to_string(limit));
  };
  if (tensors.size() > limit) return too_big("a tensor count", tensors.size());
  if (metadata.size() > limit) return too_big("a metadata count", metadata.size());
  for (const auto& t : tensors)
    if (t.name().size() > limit) return too_big("tensor " + printable(t.name()) + ": a name", t.name().size());
  for (const auto& [key, value] : metadata) {
    if (key.size() > limit) return too_big("metadata " + printable(key) + ": a key", key.size());
    if (const auto* v = std::get_if<std::string>(&value); v && v->size() > limit)
      return too_big("metadata " + printable(key) + ": a string value", v->size());
  }
  return true;
}

inline bool make_layout(std::span<const checkpoint_tensor> tensors,
                        const std::map<std::string, checkpoint_value, std::less<>>& metadata, layout& l, status& st) {
  if (!check_fields(tensors, metadata, st)) return false;
  writer m;
  for (const auto& [key, value] : metadata) {
    m.str(key);
    if (const auto* i = std::get_if<std::int64_t>(&value)) {
      m.u8(static_cast<std::uint8_t>(value_kind::integer));
      m.u64(static_cast<std::uint64_t>(*i));
    } else if (const auto* d = std::get_if<double>(&value)) {
      m.u8(static_cast<std::uint8_t>(value_kind::floating));
      m.u64(std::bit_cast<std::uint64_t>(*d));
    } else {
      m.u8(static_cast<std::uint8_t>(value_kind::string));
      m.str(std::get<std::string>(value));
    }
  }
  const std::uint64_t manifest_offset = header_size;
  std::uint64_t entries_size = 0;  // the tensor entries' size, to place the data section first
  for (const auto& t : tensors) entries_size += 4 + t.name().size() + 1 + 1 + 8 * t.shape().size() + 8 + 8 + 4;
  const std::uint64_t manifest_size = m.bytes().size() + entries_size;
  // In-memory sizes are far below 2^64: these sums cannot overflow.
  const std::uint64_t data_offset =
      (manifest_offset + manifest_size + checkpoint::alignment - 1) & ~std::uint64_t(checkpoint::alignment - 1);
  std::uint64_t at = data_offset, end = data_offset;
  for (const auto& t : tensors) {
    l.offsets.push_back(at);
    m.str(t.name());
    m.u8(dtype_code(t.dtype()));
    m.u8(static_cast<std::uint8_t>(t.shape().size()));
    for (auto d : t.shape()) m.u64(static_cast<std::uint64_t>(d));
    m.u64(at);
    m.u64(t.size_bytes());
    m.u32(crc32c(t.bytes()));
    end = at + t.size_bytes();
    at = (end + checkpoint::alignment - 1) & ~std::uint64_t(checkpoint::alignment - 1);
  }
  l.file_size = end;
  std::vector<std::byte>& manifest = m.bytes();
  l.prefix.assign(data_offset, std::byte{0});
  std::byte* h = l.prefix.data();
  std::memcpy(h, magic, sizeof magic);
  put_u32(h + 8, checkpoint::format_version);
  put_u32(h + 12, static_cast<std::uint32_t>(header_size));
  put_u64(h + 16, l.file_size);
  put_u64(h + 24, manifest_offset);
  put_u64(h + 32, manifest_size);
  put_u64(h + 40, data_offset);
  put_u32(h + 48, static_cast<std::uint32_t>(tensors.size()));
  put_u32(h + 52, static_cast<std::uint32_t>(metadata.size()));
  put_u32(h + 56, crc32c(manifest));
  put_u32(h + 60, crc32c({h, 60}));
  if (!manifest.empty()) std::memcpy(h + manifest_offset, manifest.data(), manifest.size());
  return true;
}

/// Emits the file through `sink(span)`, which returns false to stop.
template <class Sink>
bool emit(std::span<const checkpoint_tensor> tensors, const layout& l, Sink&& sink) {
  static constexpr std::byte zeros[checkpoint::alignment] = {};
  std::uint64_t at = l.prefix.size();
  if (!sink(std::span<const std::byte>(l.prefix))) return false;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (l.offsets[i] > at && !sink(std::span<const std::byte>(zeros, l.offsets[i] - at))) return false;
    if (!sink(tensors[i].bytes())) return false;
    at = l.offsets[i] + tensors[i].size_bytes();
  }
  return true;
}

inline bool all_zero(std::span<const std::byte> b) noexcept {
  return std::ranges::all_of(b, [](std::byte x) { return x == std::byte{0}; });
}

[[noreturn]] inline void raise(const status& st) {
  if (st.stream_failure && st.stream_failure.ec == st.ec) throw_failure(st.stream_failure, st.what, st.device);
  if (st.ec.category() == error_category()) throw_error_on(st.device, st.ec, st.what);
  throw checkpoint_io_error(st.ec, st.what);
}

}  // namespace ckpt
}  // namespace detail

// --- tensors and metadata ------------------------------------------------------------------------

NPURT_DECL bool checkpoint::byte_size(npurt::dtype type, std::span<const std::int64_t> shape, std::size_t& bytes,
                                      std::error_code& ec) noexcept {
  try {
    detail::ckpt::status st;
    std::uint64_t n = 0;
    if (!detail::ckpt::shape_bytes(type, shape, n, st)) {
      ec = st.ec;
      return false;
    }
    bytes = static_cast<std::size_t>(n);
    ec.clear();
    return true;
  } catch (const std::bad_alloc&) {
    ec = make_error_code(errc::resource_exhausted);
    return false;
  }
}

NPURT_DECL checkpoint_tensor* checkpoint::make_entry(std::string_view name, npurt::dtype type,
                                                     std::vector<std::int64_t> shape, detail::ckpt::status& st) {
  const std::string where = "checkpoint::add_tensor(" + detail::ckpt::printable(name) + "): ";
  std::uint64_t bytes = 0;
  if (!detail::ckpt::check_name("tensor", name, st) || !detail::ckpt::shape_bytes(type, shape, bytes, st)) {
    st.what = where + st.what;
    return nullptr;
  }
  if (index_.find(name) != index_.end()) {
    st.fail(errc::invalid_argument, where + "a tensor of that name already exists");
    return nullptr;
  }
  checkpoint_tensor t;
  t.name_ = std::string(name);
  t.type_ = type;
  t.shape_ = std::move(shape);
  t.size_ = static_cast<std::size_t>(bytes);
  t.data_.reset(static_cast<std::byte*>(detail::host_heap::allocate(t.size_)));
  if (!t.data_) {
    st.fail(errc::resource_exhausted, where + "out of host memory for " + std::to_string(bytes) + " bytes");
    return nullptr;
  }
  tensors_.reserve(tensors_.size() + 1);  // so that the push_back below cannot throw
  index_.emplace(t.name_, tensors_.size());
  tensors_.push_back(std::move(t));
  return &tensors_.back();
}

NPURT_DECL bool checkpoint::add_host(std::string_view name, npurt::dtype type, std::vector<std::int64_t> shape,
                                     std::span<const std::byte> data, detail::ckpt::status& st) {
  std::uint64_t bytes = 0;
  if (detail::ckpt::shape_bytes(type, shape, bytes, st) && bytes != data.size())
    return st.fail(errc::invalid_argument, "checkpoint::add_tensor(" + detail::ckpt::printable(name) +
                                               "): " + std::to_string(data.size()) +
                                               " bytes given, the shape and dtype need " + std::to_string(bytes));
  if (!detail::ckpt::bools_valid(type, data))
    return st.fail(errc::invalid_argument, "checkpoint::add_tensor(" + detail::ckpt::printable(name) +
                                               "): a bool tensor's bytes must be 0 or 1");
  checkpoint_tensor* t = make_entry(name, type, std::move(shape), st);
  if (!t) return false;
  if (!data.empty()) std::memcpy(t->data_.get(), data.data(), data.size());
  return true;
}

NPURT_DECL bool checkpoint::add_device(std::string_view name, npurt::dtype type, std::vector<std::int64_t> shape,
                                       const void* device_ptr, stream& s, detail::ckpt::status& st) {
  if (!device_ptr)
    return st.fail(errc::null_pointer,
                   "checkpoint::add_tensor(" + detail::ckpt::printable(name) + "): null device pointer");
  checkpoint_tensor* t = make_entry(name, type, std::move(shape), st);
  if (!t) return false;
  if (t->size_ == 0) return true;
  const std::size_t n = t->size_;
  std::error_code ec;
  detail::failure& f = st.stream_failure;
  st.device = detail::stream_access::device_or_none(s);
  s.memcpy(t->data_.get(), n, device_ptr, n, memcpy_kind::device_to_host, ec);
  // The synchronize reads the stream's first unread failure, which may be an earlier task's
  // rather than the copy's: the message names the task that failed.
  if (!ec) detail::stream_access::synchronize(s, ec, &f);
  if (!ec && !detail::ckpt::bools_valid(type, t->bytes())) {
    index_.erase(tensors_.back().name_);
    tensors_.pop_back();
    return st.fail(errc::invalid_argument, "checkpoint::add_tensor(" + detail::ckpt::printable(name) +
                                               "): a bool tensor's bytes must be 0 or 1");
  }
  if (!ec) return true;
  // The entry is the last one: a failed snapshot leaves no half-filled tensor behind.
  index_.erase(tensors_.back().name_);
  tensors_.pop_back();
  if (f)
    return st.fail(ec, "checkpoint::add_tensor(" + detail::ckpt::printable(name) +
                           "): nothing added: the snapshot's stream reported a failure: " + f.describe());
  return st.fail(ec, "checkpoint::add_tensor(" + detail::ckpt::printable(name) + "): the device-to-host copy failed");
}

NPURT_DECL void checkpoint::add_tensor(std::string_view name, npurt::dtype type, std::vector<std::int64_t> shape,
                                       std::span<const std::byte> data, std::error_code& ec) {
  detail::ckpt::status st;
  add_host(name, type, std::move(shape), data, st);
  ec = st.ec;
}

NPURT_DECL void checkpoint::add_tensor(std::string_view name, npurt::dtype type, std::vector<std::int64_t> shape,
                                       std::span<const std::byte> data) {
  detail::ckpt::status st;
  if (!add_host(name, type, std::move(shape), data, st)) detail::ckpt::raise(st);
}

NPURT_DECL void checkpoint::add_tensor(std::string_view name, npurt::dtype type, std::vector<std::int64_t> shape,
                                       const void* device_ptr, stream& s, std::error_code& ec) {
  detail::ckpt::status st;
  add_device(name, type, std::move(shape), device_ptr, s, st);
  ec = st.ec;
}

NPURT_DECL void checkpoint::add_tensor(std::string_view name, npurt::dtype type, std::vector<std::int64_t> shape,
                                       const void* device_ptr, stream& s) {
  detail::ckpt::status st;
  if (!add_device(name, type, std::move(shape), device_ptr, s, st)) detail::ckpt::raise(st);
}

NPURT_DECL const checkpoint_tensor* checkpoint::find_tensor(std::string_view name) const noexcept {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

NPURT_DECL const checkpoint_tensor& checkpoint::get_tensor(std::string_view name) const {
  const checkpoint_tensor* t = find_tensor(name);
  if (!t)
    throw_error(make_error_code(errc::invalid_argument),
                "checkpoint::get_tensor: no tensor named " + detail::ckpt::printable(name));
  return *t;
}

NPURT_DECL event checkpoint::copy_to_device(std::string_view name, void* dst, std::size_t dst_max, stream& s,
                                            std::error_code& ec) const {
  ec.clear();
  const checkpoint_tensor* t = find_tensor(name);
  if (!t) {
    ec = make_error_code(errc::invalid_argument);
    return {};
  }
  if (t->size_bytes() == 0) return s.launch_callback([] {}, ec);
  if (t->size_bytes() > dst_max) {
    ec = make_error_code(errc::size_overflow);
    return {};
  }
  return s.memcpy(dst, dst_max, t->data(), t->size_bytes(), memcpy_kind::host_to_device, ec);
}

namespace detail::ckpt {
inline std::string shape_text(std::span<const std::int64_t> dims) {
  std::string out = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) out += (i ? "," : "") + std::to_string(dims[i]);
  return out + "]";
}
// What keeps a tensor out of `dst` other than its size: a dtype or shape of another model.
inline std::error_code desc_mismatch(const checkpoint_tensor& t, const tensor_desc& dst, std::string* what) {
  if (t.dtype() != dst.type) {
    if (what)
      *what = "the tensor is " + std::string(to_string(t.dtype())) + ", the destination " +
              std::string(to_string(dst.type));
    return make_error_code(errc::invalid_dtype);
  }
  if (!std::ranges::equal(t.shape(), std::span<const std::int64_t>(dst.shape.begin(), dst.shape.end()))) {
    if (what)
      *what = "the tensor's shape is " + shape_text(t.shape()) + ", the destination's " +
              shape_text(std::span<const std::int64_t>(dst.shape.begin(), dst.shape.end()));
    return make_error_code(errc::invalid_shape);
  }
  return {};
}
}  // namespace detail::ckpt

NPURT_DECL event checkpoint::copy_to_device(std::string_view name, const tensor_desc& dst, stream& s,
                                            std::error_code& ec) const {
  ec.clear();
  const checkpoint_tensor* t = find_tensor(name);
  if (!t) {
    ec = make_error_code(errc::invalid_argument);
    return {};
  }
  if ((ec = detail::ckpt::desc_mismatch(*t, dst, nullptr))) return {};
  return copy_to_device(name, dst.data, dst.bytes(), s, ec);
}

NPURT_DECL event checkpoint::copy_to_device(std::string_view name, const tensor_desc& dst, stream& s) const {
  const checkpoint_tensor& t = get_tensor(name);
  std::string what;
  if (const std::error_code ec = detail::ckpt::desc_mismatch(t, dst, &what))
    throw_error(ec, "checkpoint::copy_to_device(" + detail::ckpt::printable(name) + "): " + what);
  return copy_to_device(name, dst.data, dst.bytes(), s);
}

NPURT_DECL event checkpoint::copy_to_device(std::string_view name, void* dst, std::size_t dst_max, stream& s) const {
  const checkpoint_tensor& t = get_tensor(name);
  // An empty tensor is a valid entry, but the stream refuses a copy of zero bytes: an empty
  // task keeps the returned event ordered in the stream all the same.
  if (t.size_bytes() == 0) return s.launch_callback([] {});
  // The stream's own message names neither the tensor nor the sizes that disagree.
  const std::string where = "checkpoint::copy_to_device(" + detail::ckpt::printable(name) + "): ";
  if (t.size_bytes() > dst_max)
    throw_error(make_error_code(errc::size_overflow), where + "the tensor's " + std::to_string(t.size_bytes()) +
                                                          " bytes do not fit the destination's " +
                                                          std::to_string(dst_max));
  std::error_code ec;
  event e = s.memcpy(dst, dst_max, t.data(), t.size_bytes(), memcpy_kind::host_to_device, ec);
  if (ec)
    throw_error_on(ec == error_class::device ? static_cast<std::int32_t>(s.device()) : -1, ec,
                   where + "the stream refused the host-to-device copy");
  return e;
}

NPURT_DECL void checkpoint::set_value(std::string_view key, checkpoint_value v, std::error_code* out) {
  detail::ckpt::status st;
  if (!detail::ckpt::check_name("metadata key", key, st)) {
    if (!out) throw_error(st.ec, "checkpoint::set_metadata: " + st.what);
    *out = st.ec;
    return;
  }
  if (out) out->clear();
  if (auto it = metadata_.find(key); it != metadata_.end()) it->second = std::move(v);
  else metadata_.emplace(std::string(key), std::move(v));
}

NPURT_DECL const checkpoint_value* checkpoint::find_metadata(std::string_view key) const noexcept {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

NPURT_DECL const checkpoint_value& checkpoint::metadata_value(std::string_view key) const {
  const checkpoint_value* v = find_metadata(key);
  if (!v)
    throw_error(make_error_code(errc::invalid_argument),
                "checkpoint: no metadata entry " + detail::ckpt::printable(key));
  return *v;
}

// --- writing --------------------------------------------------------------------------------------

NPURT_DECL std::vector<std::byte> checkpoint::serialize() const {
  detail::ckpt::status st;
  std::vector<std::byte> out;
  try {
    detail::ckpt::layout l;
    if (!detail::ckpt::make_layout(tensors_, metadata_, l, st)) detail::ckpt::raise(st);
    out.reserve(static_cast<std::size_t>(l.file_size));
    detail::ckpt::emit(std::span<const checkpoint_tensor>(tensors_), l, [&](std::span<const std::byte> b) {
      out.insert(out.end(), b.begin(), b.end());
      return true;
    });
  } catch (const std::bad_alloc&) {
    st.fail(errc::resource_exhausted, "checkpoint::serialize: out of host memory");
    detail::ckpt::raise(st);
  }
  return out;
}

namespace detail::ckpt {

inline std::error_code last_errno() noexcept { return {errno, std::generic_category()}; }

// The system calls see a path only up to its first NUL: such a path would name another file.
inline bool has_nul(const std::filesystem::path& path) noexcept {
  return path.native().find('\0') != std::filesystem::path::string_type::npos;
}

inline void probe(save_step step, std::uint64_t bytes) {
  const save_probe& p = checkpoint_save_probe();
  if (p.at) p.at(step, bytes, p.context);
}

/// A fresh temporary file in `dir`, created exclusively. The name has a fixed length, so that it
/// fits wherever the destination's name fits (a suffix on that name would pass NAME_MAX). Not
/// mkstemp(3): it creates mode 0600, which the rename would carry over to the checkpoint.
inline int create_temp(const std::filesystem::path& dir, std::filesystem::path& tmp, status& st) {
  static std::atomic<std::uint64_t> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    // splitmix64 over pid and counter: O_EXCL makes a collision (a file left by a crash) a retry
    // under the next counter, never a clash.
    std::uint64_t x = (std::uint64_t(::getpid()) << 32) ^ counter.fetch_add(1);
    x += 0x9e3779b97f4a7c15;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9;
    x = (x ^ (x >> 27)) * 0x94d049bb133111eb;
    x ^= x >> 31;
    static constexpr char hex[] = "0123456789abcdef";
    std::string name = ".npurt-ckpt-";
    for (int i = 0; i < 12; ++i) name += hex[(x >> (4 * i)) & 15];
    tmp = dir / name;
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) return fd;
    if (errno != EEXIST) break;
  }
  st.fail(last_errno(), "checkpoint::save: cannot create a temporary file in " + dir.string());
  return -1;
}

/// Closes the temporary file and removes it unless it was renamed, on every way out of
/// save_file, including an exception.
struct temp_file {
  int fd = -1;
  const std::filesystem::path* path = nullptr;
  bool renamed = false;
  temp_file() = default;
  temp_file(const temp_file&) = delete;
  temp_file& operator=(const temp_file&) = delete;
  ~temp_file() {
    if (fd >= 0) ::close(fd);
    if (path && !renamed) ::unlink(path->c_str());
  }
};

inline bool save_file(std::span<const checkpoint_tensor> tensors, const layout& l, const std::filesystem::path& path,
                      status& st) {
  if (has_nul(path)) return st.fail(errc::invalid_argument, "checkpoint::save: the path contains a NUL byte");
  std::filesystem::path dir = path.parent_path();
  if (dir.empty()) dir = ".";
  if (path.filename().empty())
    return st.fail(errc::invalid_argument, "checkpoint::save: " + path.string() + " names no file");
  // Same directory, so that rename(2) replaces atomically.
  std::filesystem::path tmp;
  temp_file t;
  t.fd = create_temp(dir, tmp, st);
  if (t.fd < 0) return false;
  t.path = &tmp;
  probe(save_step::temp_created, 0);
  std::uint64_t written = 0;
  const std::size_t max_write = std::max<std::size_t>(1, checkpoint_save_probe().max_write);
  std::error_code write_ec;
  const bool ok = emit(tensors, l, [&](std::span<const std::byte> b) {
    while (!b.empty()) {
      const ssize_t n = ::write(t.fd, b.data(), std::min(b.size(), max_write));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        write_ec = last_errno();
        return false;
      }
      b = b.subspan(static_cast<std::size_t>(n));
      written += static_cast<std::uint64_t>(n);
      probe(save_step::bytes_written, written);
    }
    return true;
  });
  if (!ok) return st.fail(write_ec, "checkpoint::save: cannot write " + tmp.string());
  // The data must be durable before the name points at it, or a power loss after the rename
  // could leave the new name on an empty or partial file.
  if (::fsync(t.fd) != 0) return st.fail(last_errno(), "checkpoint::save: cannot fsync " + tmp.string());
  probe(save_step::file_synced, written);
  const int fd = std::exchange(t.fd, -1);
  if (::close(fd) != 0) return st.fail(last_errno(), "checkpoint::save: cannot close " + tmp.string());
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    return st.fail(last_errno(), "checkpoint::save: cannot rename " + tmp.string() + " to " + path.string());
  t.renamed = true;
  probe(save_step::renamed, written);
  // The rename is a change of the directory: it is durable once the directory is synced.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return st.fail(last_errno(), "checkpoint::save: cannot open directory " + dir.string());
  if (::fsync(dfd) != 0) {
    const std::error_code ec = last_errno();
    ::close(dfd);
    return st.fail(ec, "checkpoint::save: cannot fsync directory " + dir.string());
  }
  ::close(dfd);
  probe(save_step::directory_synced, written);
  return true;
}

// Both overloads report running out of memory as resource_exhausted, like every other error:
// never as a std::bad_alloc the caller of a typed API does not expect.
inline bool save_all(std::span<const checkpoint_tensor> tensors,
                     const std::map<std::string, checkpoint_value, std::less<>>& metadata,
                     const std::filesystem::path& path, status& st) {
  try {
    layout l;
    return make_layout(tensors, metadata, l, st) && save_file(tensors, l, path, st);
  } catch (const std::bad_alloc&) { return st.fail(errc::resource_exhausted, "checkpoint::save: out of host memory"); }
}
}  // namespace detail::ckpt

NPURT_DECL void checkpoint::save(const std::filesystem::path& path, std::error_code& ec) const {
  detail::ckpt::status st;
  detail::ckpt::save_all(tensors_, metadata_, path, st);
  ec = st.ec;
}

NPURT_DECL void checkpoint::save(const std::filesystem::path& path) const {
  detail::ckpt::status st;
  if (!detail::ckpt::save_all(tensors_, metadata_, path, st)) detail::ckpt::raise(st);
}

// --- loading --------------------------------------------------------------------------------------

namespace detail {
/// The loader: parses into fresh containers and moves them in only on success.
struct checkpoint_loader {
  /// Reads and checks everything; the containers are complete only if the whole file is valid.
  static bool parse(const ckpt::source& src, ckpt::status& st, std::vector<checkpoint_tensor>& tensors,
                    std::map<std::string, std::size_t, std::less<>>& index,
                    std::map<std::string, checkpoint_value, std::less<>>& metadata) {
    using namespace ckpt;
    auto num = [](std::uint64_t v) { return std::to_string(v); };
    const std::uint64_t size = src.size();
    std::byte h[header_size];
    if (size >= sizeof magic) {
      if (!src.read(0, {h, sizeof magic}, st)) return false;
      if (std::memcmp(h, magic, sizeof magic) != 0)
        return st.fail(errc::parse_error, "checkpoint: not an npurt checkpoint (wrong magic bytes)");
    }
    if (size < header_size)
      return st.fail(errc::corrupt_file,
                     "checkpoint: truncated: " + num(size) + " bytes, the header alone is " + num(header_size));
    if (!src.read(0, {h, header_size}, st)) return false;
    const std::uint32_t version = get_u32(h + 8);
    if (version != checkpoint::format_version)
      return st.fail(errc::not_supported, "checkpoint: format version " + num(version) + "; this build reads version " +
                                              num(checkpoint::format_version));
    if (crc32c({h, 60}) != get_u32(h + 60)) return st.fail(errc::corrupt_file, "checkpoint: header checksum mismatch");
    const std::uint64_t hsize = get_u32(h + 12), file_size = get_u64(h + 16), manifest_offset = get_u64(h + 24),
                        manifest_size = get_u64(h + 32), data_offset = get_u64(h + 40);
    const std::uint32_t tensor_count = get_u32(h + 48), metadata_count = get_u32(h + 52);
    if (hsize != header_size || manifest_offset != header_size)
      return st.fail(errc::corrupt_file, "checkpoint: header size " + num(hsize) + " or manifest offset " +
                                             num(manifest_offset) + " is not " + num(header_size));
    if (file_size > size)
      return st.fail(errc::corrupt_file,
                     "checkpoint: truncated: the header says " + num(file_size) + " bytes, the file has " + num(size));
    if (file_size < size)
      return st.fail(errc::corrupt_file, "checkpoint: " + num(size - file_size) + " bytes after the end of the data");
    if (manifest_size > size - header_size)
      return st.fail(errc::size_overflow,
                     "checkpoint: a manifest of " + num(manifest_size) + " bytes does not fit in the file");
    std::uint64_t expected_data = 0;
    if (!align_up(header_size + manifest_size, expected_data) || data_offset != expected_data || data_offset > size)
      return st.fail(errc::corrupt_file,
                     "checkpoint: data section at " + num(data_offset) + ", expected " + num(expected_data));
    if (std::uint64_t(tensor_count) * min_tensor_entry + std::uint64_t(metadata_count) * min_metadata_entry >
        manifest_size)
      return st.fail(errc::size_overflow, "checkpoint: a manifest of " + num(manifest_size) + " bytes cannot hold " +
                                              num(tensor_count) + " tensors and " + num(metadata_count) +
                                              " metadata entries");
    // Bounded by the file's size (checked above).
    std::vector<std::byte> manifest(static_cast<std::size_t>(manifest_size));
    if (!src.read(header_size, manifest, st)) return false;
    if (crc32c(manifest) != get_u32(h + 56))
      return st.fail(errc::corrupt_file, "checkpoint: manifest checksum mismatch");

    reader r(manifest);
    auto truncated = [&](const std::string& where) {
      return st.fail(errc::size_overflow, "checkpoint: " + where + " extends past the end of the manifest");
    };
    auto read_name = [&](const char* what, std::string& name) {
      std::uint32_t len = 0;
      if (!r.u32(len)) return truncated(std::string(what) + " name length");
      if (len > r.remaining()) return truncated(std::string(what) + " name of " + num(len) + " bytes");
      if (!r.bytes(len, name)) return truncated(what);
      if (!check_name(what, name, st)) {
        st.what = "checkpoint: " + st.what;
        st.ec = len == 0 ? make_error_code(errc::corrupt_file) : make_error_code(errc::size_overflow);
        return false;
      }
      return true;
    };

    for (std::uint32_t i = 0; i < metadata_count; ++i) {
      std::string key;
      if (!read_name("metadata", key)) return false;
      std::uint8_t kind = 0;
      if (!r.u8(kind)) return truncated("metadata " + printable(key));
      checkpoint_value value;
      switch (static_cast<value_kind>(kind)) {
        case value_kind::integer: {
          std::uint64_t v = 0;
          if (!r.u64(v)) return truncated("metadata " + printable(key));
          value = static_cast<std::int64_t>(v);
          break;
        }
        case value_kind::floating: {
          std::uint64_t v = 0;
          if (!r.u64(v)) return truncated("metadata " + printable(key));
          value = std::bit_cast<double>(v);
          break;
        }
        case value_kind::string: {
          std::uint32_t len = 0;
          std::string s;
          if (!r.u32(len) || len > r.remaining() || !r.bytes(len, s)) return truncated("metadata " + printable(key));
          value = std::move(s);
          break;
        }
        default:
          return st.fail(errc::corrupt_file,
                         "checkpoint: metadata " + printable(key) + " has unknown kind " + num(kind));
      }
      // Keys are stored in strictly increasing byte order, so a file has one valid encoding.
      if (!metadata.empty() && key <= metadata.rbegin()->first)
        return st.fail(errc::corrupt_file, key == metadata.rbegin()->first
                                               ? "checkpoint: duplicate metadata key " + printable(key)
                                               : "checkpoint: metadata key " + printable(key) + " out of order");
      metadata.emplace_hint(metadata.end(), std::move(key), std::move(value));
    }

    struct placed {
      std::uint64_t offset, size;
      std::uint32_t crc;
    };
    std::vector<placed> where;
    std::uint64_t expected = data_offset, end = data_offset;
    for (std::uint32_t i = 0; i < tensor_count; ++i) {
      std::string name;
      if (!read_name("tensor", name)) return false;
      const std::string q = printable(name);
      std::uint8_t code = 0, rank = 0;
      if (!r.u8(code) || !r.u8(rank)) return truncated("tensor " + q);
      npurt::dtype type{};
      if (!dtype_from_code(code, type))
        return st.fail(errc::invalid_dtype, "checkpoint: tensor " + q + " has unknown dtype code " + num(code));
      if (rank > checkpoint::max_rank)
        return st.fail(errc::invalid_shape, "checkpoint: tensor " + q + " has rank " + num(rank));
      std::vector<std::int64_t> shape(rank);
      for (auto& d : shape) {
        std::uint64_t v = 0;
        if (!r.u64(v)) return truncated("tensor " + q + " shape");
        d = static_cast<std::int64_t>(v);
      }
      std::uint64_t offset = 0, bytes = 0, need = 0;
      std::uint32_t crc = 0;
      if (!r.u64(offset) || !r.u64(bytes) || !r.u32(crc)) return truncated("tensor " + q);
      if (!shape_bytes(type, shape, need, st)) {
        st.what = "checkpoint: tensor " + q + ": " + st.what;
        return false;
      }
      if (bytes != need)
        return st.fail(errc::corrupt_file, "checkpoint: tensor " + q + " stores " + num(bytes) +
                                               " bytes; its shape and dtype need " + num(need));
      std::uint64_t stop = 0;
      if (add_overflows(offset, bytes, stop) || stop > size)
        return st.fail(errc::size_overflow, "checkpoint: tensor " + q + " at offset " + num(offset) + " with " +
                                                num(bytes) + " bytes extends past the end of the file");
      if (offset != expected)
        return st.fail(errc::corrupt_file,
                       "checkpoint: tensor " + q + " at offset " + num(offset) + ", expected " + num(expected));
      if (index.find(name) != index.end()) return st.fail(errc::corrupt_file, "checkpoint: duplicate tensor name " + q);
      end = stop;
      if (!align_up(stop, expected)) expected = std::numeric_limits<std::uint64_t>::max();
      checkpoint_tensor t;
      t.name_ = std::move(name);
      t.type_ = type;
      t.shape_ = std::move(shape);
      t.size_ = static_cast<std::size_t>(bytes);
      index.emplace(t.name_, tensors.size());
      tensors.push_back(std::move(t));
      where.push_back({offset, bytes, crc});
    }
    if (r.remaining() != 0)
      return st.fail(errc::corrupt_file,
                     "checkpoint: " + num(r.remaining()) + " unused bytes at the end of the manifest");
    if (end != size)
      return st.fail(errc::corrupt_file, "checkpoint: the data ends at " + num(end) + ", the file at " + num(size));

    // Padding must be zero, so that every byte of a valid file is checked by something.
    std::byte pad[checkpoint::alignment];
    auto check_padding = [&](std::uint64_t from, std::uint64_t to) {
      if (to <= from) return true;
      const std::span<std::byte> p(pad, static_cast<std::size_t>(to - from));
      if (!src.read(from, p, st)) return false;
      if (!all_zero(p)) return st.fail(errc::corrupt_file, "checkpoint: nonzero padding at offset " + num(from));
      return true;
    };
    if (!check_padding(header_size + manifest_size, data_offset)) return false;
    std::uint64_t at = data_offset;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      checkpoint_tensor& t = tensors[i];
      if (!check_padding(at, where[i].offset)) return false;
      // Bounded by the file's size: offset + size <= size was checked for every tensor, and the
      // tensors do not overlap.
      t.data_.reset(static_cast<std::byte*>(host_heap::allocate(t.size_)));
      if (!t.data_) return st.fail(errc::resource_exhausted, "checkpoint: out of host memory");
      if (!src.read(where[i].offset, {t.data_.get(), t.size_}, st)) return false;
      if (crc32c(t.bytes()) != where[i].crc)
        return st.fail(errc::corrupt_file, "checkpoint: tensor " + printable(t.name_) + " checksum mismatch");
      // A bool is one byte, 0 or 1: values<bool>() reads them as bool, which any other byte is not.
      if (!bools_valid(t.type_, t.bytes()))
        return st.fail(errc::corrupt_file,
                       "checkpoint: bool tensor " + printable(t.name_) + " holds a byte other than 0 or 1");
      at = where[i].offset + where[i].size;
    }
    return true;
  }

  static bool run(const ckpt::source& src, checkpoint& out, ckpt::status& st) {
    try {
      checkpoint c;
      if (!parse(src, st, c.tensors_, c.index_, c.metadata_)) return false;
      out = std::move(c);
      return true;
    } catch (const std::bad_alloc&) { return st.fail(errc::resource_exhausted, "checkpoint: out of host memory"); }
  }
  static bool run_file(const std::filesystem::path& path, checkpoint& out, ckpt::status& st) {
    // The messages below allocate too: running out of memory there is resource_exhausted as well.
    try {
      if (ckpt::has_nul(path)) return st.fail(errc::invalid_argument, "checkpoint: the path contains a NUL byte");
      struct file {
        int fd;
        ~file() {
          if (fd >= 0) ::close(fd);
        }
      } f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
      if (f.fd < 0) return st.fail(ckpt::last_errno(), "checkpoint: cannot open " + path.string());
      struct ::stat sb{};
      bool ok = false;
      if (::fstat(f.fd, &sb) != 0) st.fail(ckpt::last_errno(), "checkpoint: cannot stat " + path.string());
      else if (!S_ISREG(sb.st_mode))
        st.fail(errc::invalid_argument, "checkpoint: " + path.string() + " is not a regular file");
      else ok = run(ckpt::source(f.fd, static_cast<std::uint64_t>(sb.st_size)), out, st);
      if (!ok && st.ec.category() == error_category()) st.what += " (" + path.string() + ")";
      return ok;
    } catch (const std::bad_alloc&) { return st.fail(errc::resource_exhausted, "checkpoint: out of host memory"); }
  }
};
}  // namespace detail

NPURT_DECL checkpoint checkpoint::parse(std::span<const std::byte> file, std::error_code& ec) {
  detail::ckpt::status st;
  checkpoint c;
  detail::checkpoint_loader::run(detail::ckpt::source(file), c, st);
  ec = st.ec;
  return c;
}

NPURT_DECL checkpoint checkpoint::parse(std::span<const std::byte> file) {
  detail::ckpt::status st;
  checkpoint c;
  if (!detail::checkpoint_loader::run(detail::ckpt::source(file), c, st)) detail::ckpt::raise(st);
  return c;
}

NPURT_DECL checkpoint checkpoint::load(const std::filesystem::path& path, std::error_code& ec) {
  detail::ckpt::status st;
  checkpoint c;
  detail::checkpoint_loader::run_file(path, c, st);
  ec = st.ec;
  return c;
}

NPURT_DECL checkpoint checkpoint::load(const std::filesystem::path& path) {
  detail::ckpt::status st;
  checkpoint c;
  if (!detail::checkpoint_loader::run_file(path, c, st)) detail::ckpt::raise(st);
  return c;
}

NPURT_DECL void checkpoint::restore(const std::filesystem::path& path, std::error_code& ec) {
  detail::ckpt::status st;
  detail::checkpoint_loader::run_file(path, *this, st);
  ec = st.ec;
}

NPURT_DECL void checkpoint::restore(const std::filesystem::path& path) {
  detail::ckpt::status st;
  if (!detail::checkpoint_loader::run_file(path, *this, st)) detail::ckpt::raise(st);
}

}  // namespace npurt

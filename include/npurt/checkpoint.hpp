// npurt/checkpoint.hpp — crash-safe checkpoints: named host tensors and key-value metadata,
// saved to one self-checking file and loaded back from a file that is treated as hostile.
//
// The file format is documented in docs/checkpoints.md: a fixed little-endian header, a
// manifest (metadata, then per tensor its dtype, shape, offset, size and CRC32C), then the
// tensor bytes at 64-byte aligned offsets. Every byte of a valid file is covered by a checksum
// or by a layout rule, so any single damaged byte is reported, never loaded.
//
// save() writes a temporary file in the destination's directory, fsyncs it, renames it over the
// destination and fsyncs the directory (the sequence POSIX rename(2) and the ext4/XFS
// documentation give for an atomic replace), so a crash at any point leaves either the old
// checkpoint or the new one under the name.
#pragma once

#include <npurt/config.hpp>
#include <npurt/detail/host_heap.hpp>
#include <npurt/device.hpp>
#include <npurt/error.hpp>
#include <npurt/event.hpp>
#include <npurt/stream.hpp>
#include <npurt/tensor.hpp>

#include <boost/crc.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <ranges>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace npurt {

class checkpoint;
namespace detail {
struct checkpoint_loader;
namespace ckpt {
struct status;

/// A tensor name or metadata key as every message shows it: quoted, at most 64 bytes, control
/// bytes escaped. Names come from hostile files and from any caller's string.
inline std::string printable(std::string_view s) {
  std::string out = "'";
  for (std::size_t i = 0; i < s.size() && i < 64; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f || c == '\'') {
      static constexpr char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > 64) out += "...";
  return out + "'";
}

/// Why elements of type T are not elements of `type` (null when they are): another size, or a
/// floating T for an integer dtype or an integer T for a floating one (the bytes would be bit
/// patterns of another kind). A 2-byte integer stands for f16 and bf16 bit patterns, and class
/// types (a half type) pass on size alone.
template <class T>
constexpr const char* element_mismatch(npurt::dtype type) noexcept {
  const bool floating = is_float(type);
  if (sizeof(T) != size_of(type)) return "an element type of another size";
  if (std::is_floating_point_v<T> && !floating) return "a floating-point element type";
  if (std::is_integral_v<T> && floating && sizeof(T) != 2) return "an integer element type";
  return nullptr;
}
}  // namespace ckpt
}  // namespace detail

/// A file-system failure while saving or loading (disk full, permission denied, missing file).
/// code() is the errno value in std::generic_category().
class checkpoint_io_error : public error {
 public:
  using error::error;
};

/// One tensor of a checkpoint: its name, dtype, shape and a host copy of its bytes (64-byte
/// aligned, from a mimalloc host heap, so `values<float>()` is safe to use as an array).
class checkpoint_tensor {
 public:
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] npurt::dtype dtype() const noexcept { return type_; }
  [[nodiscard]] std::span<const std::int64_t> shape() const noexcept { return shape_; }
  [[nodiscard]] std::int64_t elements() const noexcept {
    std::int64_t n = 1;
    for (auto d : shape_) n *= d;  // validated on entry: cannot overflow
    return n;
  }
  [[nodiscard]] std::size_t size_bytes() const noexcept { return size_; }
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return {data_.get(), size_}; }
  [[nodiscard]] const void* data() const noexcept { return data_.get(); }
  /// The elements as T. caller_error (errc::invalid_dtype) if T's size is not the dtype's, or if
  /// T is a floating type and the dtype an integer one or the other way round; a 2-byte integer
  /// reads f16 and bf16 as bit patterns, and class types (a half type) pass on size alone.
  template <class T>
  [[nodiscard]] std::span<const T> values() const {
    static_assert(std::is_trivially_copyable_v<T>);
    // Same size is not the same type: f32 weights read as int32_t would be bit patterns, silently.
    if (const char* why = detail::ckpt::element_mismatch<T>(type_))
      throw_error(make_error_code(errc::invalid_dtype), "checkpoint tensor " + detail::ckpt::printable(name_) + " is " +
                                                            std::string(to_string(type_)) + ", not readable as " + why);
    return {reinterpret_cast<const T*>(data_.get()), size_ / sizeof(T)};
  }
  friend bool operator==(const checkpoint_tensor& a, const checkpoint_tensor& b) noexcept {
    return a.name_ == b.name_ && a.type_ == b.type_ && std::ranges::equal(a.shape_, b.shape_) &&
           std::ranges::equal(a.bytes(), b.bytes());
  }

 private:
  friend class checkpoint;
  friend struct detail::checkpoint_loader;
  std::string name_;
  npurt::dtype type_ = npurt::dtype::u8;
  std::vector<std::int64_t> shape_;
  detail::host_bytes data_;
  std::size_t size_ = 0;
};

/// A metadata value: an integer (step, epoch), a float (learning rate) or a string.
using checkpoint_value = std::variant<std::int64_t, double, std::string>;

/// Anything that describes host tensor data: its dtype as dtype() or type(), a range of extents
/// shape(), and data() pointing at the elements in host memory. A checkpoint_tensor is one, so
/// is the graph layer's npurt::tensor (npurt/graph/tensor.hpp), whose is_host() says whether
/// data() is host memory at all: one that is not (a device or timing-only tensor) is refused.
template <class T>
concept host_tensor_like = requires(const T& t) {
  { t.data() } -> std::convertible_to<const void*>;
  requires std::ranges::input_range<decltype(t.shape())>;
  requires std::convertible_to<std::ranges::range_value_t<decltype(t.shape())>, std::int64_t>;
} && (requires(const T& t) {
  { t.dtype() } -> std::convertible_to<npurt::dtype>;
} || requires(const T& t) {
  { t.type() } -> std::convertible_to<npurt::dtype>;
});

namespace detail::ckpt {
template <host_tensor_like T>
npurt::dtype dtype_of_tensor(const T& t) {
  if constexpr (requires {
                  { t.dtype() } -> std::convertible_to<npurt::dtype>;
                })
    return t.dtype();
  else return t.type();
}
/// False for a tensor that says its data() is not host memory.
template <host_tensor_like T>
bool holds_host_data(const T& t) {
  if constexpr (requires {
                  { t.is_host() } -> std::convertible_to<bool>;
                })
    return t.is_host();
  else return true;
}
}  // namespace detail::ckpt

class checkpoint {
 public:
  static constexpr std::uint32_t format_version = 1;
  static constexpr std::size_t max_rank = 32;
  static constexpr std::size_t max_name_length = 4096;
  static constexpr std::size_t alignment = 64;  // of every tensor's offset in the file

  checkpoint() = default;
  checkpoint(checkpoint&&) noexcept = default;
  checkpoint& operator=(checkpoint&&) noexcept = default;
  checkpoint(const checkpoint&) = delete;
  checkpoint& operator=(const checkpoint&) = delete;

  // --- tensors --------------------------------------------------------------------------------
  /// Copies `data` (host memory) as tensor `name`. Errors: an empty, over-long or duplicate name
  /// (invalid_argument), a negative extent or rank > max_rank (invalid_shape), an element count
  /// whose byte size overflows (size_overflow), data.size() different from that byte size, or a
  /// bool tensor with a byte other than 0 or 1 (invalid_argument).
  NPURT_DECL void add_tensor(std::string_view name, npurt::dtype type, std::vector<std::int64_t> shape,
                             std::span<const std::byte> data, std::error_code& ec);
  NPURT_DECL void add_tensor(std::string_view name, npurt::dtype type, std::vector<std::int64_t> shape,
                             std::span<const std::byte> data);
  /// The same from any contiguous range of trivially copyable elements (a std::vector<float>).
  /// Elements of one byte are taken as raw bytes; others must be elements of `type`, by the rule
  /// values<T>() reads them with: floats given as i32, or doubles as f32, would be stored as bit
  /// patterns of another type, so they are errc::invalid_dtype naming both.
  template <std::ranges::contiguous_range R>
    requires std::is_trivially_copyable_v<std::ranges::range_value_t<R>>
  void add_tensor(std::string_view name, npurt::dtype type, std::vector<std::int64_t> shape, const R& data) {
    if (const char* why = range_mismatch<std::ranges::range_value_t<R>>(type))
      throw_error(make_error_code(errc::invalid_dtype), "checkpoint::add_tensor(" + detail::ckpt::printable(name) +
                                                            "): " + std::string(to_string(type)) +
                                                            " cannot be stored from " + why);
    add_tensor(name, type, std::move(shape),
               std::as_bytes(std::span(std::ranges::data(data), std::ranges::size(data))));
  }
  template <std::ranges::contiguous_range R>
    requires std::is_trivially_copyable_v<std::ranges::range_value_t<R>>
  void add_tensor(std::string_view name, npurt::dtype type, std::vector<std::int64_t> shape, const R& data,
                  std::error_code& ec) {
    if (range_mismatch<std::ranges::range_value_t<R>>(type)) {
      ec = make_error_code(errc::invalid_dtype);
      return;
    }
    add_tensor(name, type, std::move(shape), std::as_bytes(std::span(std::ranges::data(data), std::ranges::size(data))),
               ec);
  }
  /// A host tensor type (see host_tensor_like); its byte size follows from shape and dtype.
  /// A tensor whose is_host() is false is errc::invalid_pointer, before anything is added: its
  /// data() is a device address (snapshot it with add_tensor(name, t.desc(), stream)) or null.
  template <host_tensor_like T>
  void add_tensor(std::string_view name, const T& t) {
    if (!detail::ckpt::holds_host_data(t))
      throw_error(make_error_code(errc::invalid_pointer),
                  "checkpoint::add_tensor(" + detail::ckpt::printable(name) +
                      "): not a host tensor (device memory, or no storage); snapshot a device tensor with "
                      "add_tensor(name, t.desc(), stream)");
    std::error_code ec;
    add_tensor(name, t, ec);
    throw_if(ec, "checkpoint::add_tensor(" + detail::ckpt::printable(name) + ")");
  }
  template <host_tensor_like T>
  void add_tensor(std::string_view name, const T& t, std::error_code& ec) {
    if (!detail::ckpt::holds_host_data(t)) {
      ec = make_error_code(errc::invalid_pointer);
      return;
    }
    const npurt::dtype type = detail::ckpt::dtype_of_tensor(t);
    std::vector<std::int64_t> shape;
    for (auto d : t.shape()) shape.push_back(static_cast<std::int64_t>(d));
    std::size_t bytes = 0;
    if (!byte_size(type, shape, bytes, ec)) return;
    add_tensor(name, type, std::move(shape),
               std::span<const std::byte>(static_cast<const std::byte*>(static_cast<const void*>(t.data())), bytes),
               ec);
  }
  /// Snapshots device memory: enqueues a device-to-host copy of the tensor's bytes from
  /// `device_ptr` on `s` and waits for it (stream::synchronize, so call it outside system::run;
  /// inside a coroutine, co_await s.async_memcpy into a host buffer and add that). A failed copy
  /// adds nothing and reports the stream's error.
  NPURT_DECL void add_tensor(std::string_view name, npurt::dtype type, std::vector<std::int64_t> shape,
                             const void* device_ptr, stream& s, std::error_code& ec);
  NPURT_DECL void add_tensor(std::string_view name, npurt::dtype type, std::vector<std::int64_t> shape,
                             const void* device_ptr, stream& s);
  /// The same for a kernel operand descriptor: t.data is a device address.
  void add_tensor(std::string_view name, const tensor_desc& t, stream& s) {
    add_tensor(name, t.type, std::vector<std::int64_t>(t.shape.begin(), t.shape.end()), t.data, s);
  }
  void add_tensor(std::string_view name, const tensor_desc& t, stream& s, std::error_code& ec) {
    add_tensor(name, t.type, std::vector<std::int64_t>(t.shape.begin(), t.shape.end()), t.data, s, ec);
  }
  /// The same from a device_buffer, which knows its size: a tensor larger than the buffer is
  /// errc::size_overflow naming both sizes, before anything is enqueued (the copy would read
  /// past the buffer's end, into the rounding of its allocation or another one).
  void add_tensor(std::string_view name, npurt::dtype type, std::vector<std::int64_t> shape, const device_buffer& b,
                  stream& s, std::error_code& ec) {
    std::size_t bytes = 0;
    if (!byte_size(type, shape, bytes, ec)) return;
    if (bytes > b.size()) {
      ec = make_error_code(errc::size_overflow);
      return;
    }
    add_tensor(name, type, std::move(shape), b.data(), s, ec);
  }
  void add_tensor(std::string_view name, npurt::dtype type, std::vector<std::int64_t> shape, const device_buffer& b,
                  stream& s) {
    std::size_t bytes = 0;
    std::error_code ec;
    if (byte_size(type, shape, bytes, ec) && bytes > b.size())
      throw_error(make_error_code(errc::size_overflow),
                  "checkpoint::add_tensor(" + detail::ckpt::printable(name) + "): the shape and dtype need " +
                      std::to_string(bytes) + " bytes, the device buffer holds " + std::to_string(b.size()));
    add_tensor(name, type, std::move(shape), b.data(), s);
  }

  /// The tensor called `name`; caller_error (errc::invalid_argument) if there is none.
  [[nodiscard]] NPURT_DECL const checkpoint_tensor& get_tensor(std::string_view name) const;
  [[nodiscard]] NPURT_DECL const checkpoint_tensor* find_tensor(std::string_view name) const noexcept;
  /// All tensors, in the order they were added (the order of the file).
  [[nodiscard]] std::span<const checkpoint_tensor> tensors() const noexcept { return tensors_; }
  /// Enqueues a host-to-device copy of tensor `name` into `dst` (dst_max bytes) on `s`. The
  /// checkpoint must outlive the copy. An empty tensor enqueues an empty task instead.
  NPURT_DECL event copy_to_device(std::string_view name, void* dst, std::size_t dst_max, stream& s) const;
  NPURT_DECL event copy_to_device(std::string_view name, void* dst, std::size_t dst_max, stream& s,
                                  std::error_code& ec) const;
  /// The same into a kernel operand descriptor, which says what the destination holds: a tensor
  /// of another dtype is errc::invalid_dtype, of another shape errc::invalid_shape (the bytes
  /// would fit, and be read as something else).
  NPURT_DECL event copy_to_device(std::string_view name, const tensor_desc& dst, stream& s) const;
  NPURT_DECL event copy_to_device(std::string_view name, const tensor_desc& dst, stream& s, std::error_code& ec) const;
  /// The same into a device_buffer: dst_max is the buffer's size.
  event copy_to_device(std::string_view name, const device_buffer& dst, stream& s) const {
    return copy_to_device(name, dst.data(), dst.size(), s);
  }
  event copy_to_device(std::string_view name, const device_buffer& dst, stream& s, std::error_code& ec) const {
    return copy_to_device(name, dst.data(), dst.size(), s, ec);
  }

  // --- metadata -------------------------------------------------------------------------------
  /// Sets (or replaces) a metadata entry. Keys follow the tensor-name rules: an empty key or one
  /// longer than max_name_length is errc::invalid_argument, an unsigned value past INT64_MAX is
  /// errc::size_overflow, and the metadata stay as they were. The error_code forms report that
  /// instead of throwing; a checkpoint belongs to no system, so there is no
  /// recent_error_message to hold the words (the throwing form's message has them).
  template <std::integral I>
  void set_metadata(std::string_view key, I value) {
    set_integer(key, value, nullptr);
  }
  template <std::integral I>
  void set_metadata(std::string_view key, I value, std::error_code& ec) {
    set_integer(key, value, &ec);
  }
  void set_metadata(std::string_view key, double value) { set_value(key, checkpoint_value(value), nullptr); }
  void set_metadata(std::string_view key, double value, std::error_code& ec) {
    set_value(key, checkpoint_value(value), &ec);
  }
  void set_metadata(std::string_view key, std::string_view value) {
    set_value(key, checkpoint_value(std::string(value)), nullptr);
  }
  void set_metadata(std::string_view key, std::string_view value, std::error_code& ec) {
    set_value(key, checkpoint_value(std::string(value)), &ec);
  }
  /// The value of `key` as T (std::int64_t, double or std::string); caller_error
  /// (errc::invalid_argument) if the key is missing or holds another type.
  template <class T>
  [[nodiscard]] const T& get_metadata(std::string_view key) const {
    const checkpoint_value& v = metadata_value(key);
    if (const T* p = std::get_if<T>(&v)) return *p;
    // Which type it holds and which was asked for: the fix is the other get_metadata<T>.
    static constexpr const char* names[] = {"an integer (std::int64_t)", "a double", "a string (std::string)"};
    throw_error(make_error_code(errc::invalid_argument), "checkpoint metadata " + detail::ckpt::printable(key) +
                                                             " holds " + names[v.index()] + ", not " +
                                                             names[checkpoint_value(T{}).index()]);
  }
  [[nodiscard]] NPURT_DECL const checkpoint_value& metadata_value(std::string_view key) const;
  [[nodiscard]] NPURT_DECL const checkpoint_value* find_metadata(std::string_view key) const noexcept;
  [[nodiscard]] const std::map<std::string, checkpoint_value, std::less<>>& metadata() const noexcept {
    return metadata_;
  }

  // --- files ----------------------------------------------------------------------------------
  /// Writes the checkpoint to `path` crash-safely (temporary file, fsync, rename, directory
  /// fsync). On failure the temporary file is removed and `path` is untouched. I/O errors are
  /// errno codes (checkpoint_io_error from the throwing overload). More than 2^32 - 1 tensors or
  /// metadata entries, or a metadata string of 4 GiB or more, do not fit the format: size_overflow,
  /// and nothing is written. Out of host memory: resource_exhausted.
  NPURT_DECL void save(const std::filesystem::path& path, std::error_code& ec) const;
  NPURT_DECL void save(const std::filesystem::path& path) const;
  /// The exact bytes save() writes, with save()'s errors as exceptions.
  [[nodiscard]] NPURT_DECL std::vector<std::byte> serialize() const;

  /// Loads a checkpoint file. A damaged or hostile file gets a typed error and nothing else:
  /// parse_error (not a checkpoint), not_supported (another format version), corrupt_file
  /// (truncated, checksum mismatch, inconsistent layout, duplicate names), size_overflow
  /// (a count, length or shape product beyond the file or 64 bits), invalid_dtype,
  /// invalid_shape. Allocations never exceed the file's size.
  [[nodiscard]] NPURT_DECL static checkpoint load(const std::filesystem::path& path, std::error_code& ec);
  [[nodiscard]] NPURT_DECL static checkpoint load(const std::filesystem::path& path);
  /// The same from bytes in memory.
  [[nodiscard]] NPURT_DECL static checkpoint parse(std::span<const std::byte> file, std::error_code& ec);
  [[nodiscard]] NPURT_DECL static checkpoint parse(std::span<const std::byte> file);
  /// Replaces this checkpoint's contents by the file's; on error the contents are unchanged.
  NPURT_DECL void restore(const std::filesystem::path& path, std::error_code& ec);
  NPURT_DECL void restore(const std::filesystem::path& path);

  /// Byte size of a tensor of this dtype and shape, with the add_tensor checks.
  NPURT_DECL static bool byte_size(npurt::dtype type, std::span<const std::int64_t> shape, std::size_t& bytes,
                                   std::error_code& ec) noexcept;

 private:
  friend struct detail::checkpoint_loader;
  // The add_tensor rule for a typed range: one-byte elements are raw bytes.
  template <class E>
  static constexpr const char* range_mismatch(npurt::dtype type) noexcept {
    return sizeof(E) == 1 ? nullptr : detail::ckpt::element_mismatch<E>(type);
  }
  // The bodies of set_metadata's two forms: `out` null throws, else reports there.
  template <std::integral I>
  void set_integer(std::string_view key, I value, std::error_code* out) {
    if constexpr (std::is_unsigned_v<I> && sizeof(I) >= sizeof(std::int64_t)) {
      if (value > static_cast<I>(INT64_MAX)) {
        if (!out)
          throw_error(make_error_code(errc::size_overflow),
                      "checkpoint metadata " + detail::ckpt::printable(key) + " does not fit a signed 64-bit integer");
        *out = make_error_code(errc::size_overflow);
        return;
      }
    }
    set_value(key, checkpoint_value(static_cast<std::int64_t>(value)), out);
  }
  NPURT_DECL void set_value(std::string_view key, checkpoint_value v, std::error_code* out);
  NPURT_DECL checkpoint_tensor* make_entry(std::string_view name, npurt::dtype type, std::vector<std::int64_t> shape,
                                           detail::ckpt::status& st);
  NPURT_DECL bool add_host(std::string_view name, npurt::dtype type, std::vector<std::int64_t> shape,
                           std::span<const std::byte> data, detail::ckpt::status& st);
  NPURT_DECL bool add_device(std::string_view name, npurt::dtype type, std::vector<std::int64_t> shape,
                             const void* device_ptr, stream& s, detail::ckpt::status& st);

  std::vector<checkpoint_tensor> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, checkpoint_value, std::less<>> metadata_;
};

/// The seed document's spelling: `auto ck = npurt::create_checkpoint(); ck.add_tensor(...)`.
inline checkpoint create_checkpoint() { return {}; }

namespace detail {

/// CRC32C (Castagnoli), the checksum of iSCSI (RFC 3720), ext4 metadata and SSE4.2's crc32.
using crc32c_t = boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true>;

inline std::uint32_t crc32c(std::span<const std::byte> bytes) noexcept {
  crc32c_t c;
  c.process_bytes(bytes.data(), bytes.size());
  return c.checksum();
}

/// The points of a save that a crash test stops at. bytes_written is reported after every
/// write(2) call; the others once, in this order.
enum class save_step : std::uint8_t { temp_created, bytes_written, file_synced, renamed, directory_synced };

/// A test probe into save(): `at` is called at every save_step (a test ends the process there
/// to model a crash), and no single write(2) call writes more than `max_write` bytes, so a probe
/// can stop a save after any byte. Process-wide and unsynchronised: for tests only.
struct save_probe {
  void (*at)(save_step step, std::uint64_t bytes_written, void* context) = nullptr;
  void* context = nullptr;
  std::size_t max_write = std::size_t(1) << 30;
  /// The largest count or length save() and serialize() accept for a 32-bit field of the
  /// format. Lowering it reaches their refusal without gigabytes of data; above the format's
  /// limit it has no effect.
  std::uint64_t max_field = 0xffffffff;
};
inline save_probe& checkpoint_save_probe() noexcept {
  static save_probe p;
  return p;
}

}  // namespace detail
}  // namespace npurt

#if NPURT_INCLUDE_IMPL
#include <npurt/impl/checkpoint.ipp>
#endif

// npurt/graph/tensor.hpp — a tensor that owns its storage: shape, dtype and layout, with its
// bytes on the host or on one device (RAII, or released early with release()).
//
// Host tensors give element access (converted to and from double whatever the dtype; a bool
// element reads 0 or 1 and is set true by any nonzero value, NaN included) and fill(); bool
// tensors are also built from and read as spans of bool (bools()), and a tensor of any other
// dtype as spans of its C++ element type (tensor::of, elements<T>(): double for f64, std::int16_t
// for i16, std::uint64_t for u64, ...);
// device tensors are what graphs compute on. copy_from() moves bytes between any two places
// through a stream, blocking; async_copy_from() does the same with any completion token. A
// tensor may also be timing-only: a shape and dtype without storage, for simulating models at
// full size.
//
// Thread safety: a tensor is a plain value; use one from one thread at a time.
#pragma once

#include <npurt/checkpoint.hpp>
#include <npurt/detail/host_heap.hpp>
#include <npurt/device.hpp>
#include <npurt/error.hpp>
#include <npurt/stream.hpp>
#include <npurt/tensor.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace npurt {

/// Where a tensor's bytes are.
enum class storage_place : std::uint8_t { none, host, device };

class tensor {
 public:
  tensor() = default;
  /// A host tensor, zero-filled.
  tensor(npurt::shape s, npurt::dtype t, npurt::layout l = layout::nd);
  /// A host tensor with these values (converted to `t`); values.size() must equal the elements.
  tensor(npurt::shape s, npurt::dtype t, const std::vector<double>& values);
  /// A host bool tensor (dtype::boolean) holding `values`; values.size() must equal the elements.
  tensor(npurt::shape s, std::span<const bool> values);
  /// A tensor on `dev` (uninitialised device memory, freed by the destructor or release()). If
  /// the device is reset or its system dies first, the memory goes with it: the tensor keeps
  /// its shape, dtype and device(), storage_lost() becomes true and data() null, and a copy
  /// from or into it, or a run fed with it, is invalid_pointer naming the reset (or the system).
  static tensor on_device(npurt::device& dev, npurt::shape s, npurt::dtype t, npurt::layout l = layout::nd);
  /// Shape and dtype only: what timing-only runs move around.
  static tensor timing_only(npurt::shape s, npurt::dtype t, npurt::layout l = layout::nd);

  tensor(tensor&& o) noexcept { swap(o); }
  tensor& operator=(tensor&& o) noexcept {
    if (this != &o) {
      release();
      swap(o);
    }
    return *this;
  }
  tensor(const tensor&) = delete;
  tensor& operator=(const tensor&) = delete;
  ~tensor() { release(); }
  /// A host copy of a host tensor (device tensors are copied with copy_from).
  [[nodiscard]] tensor clone() const;

  /// Frees the storage now; the tensor keeps its shape and becomes timing-only.
  void release() noexcept;

  [[nodiscard]] const npurt::shape& shape() const noexcept { return shape_; }
  [[nodiscard]] npurt::dtype type() const noexcept { return type_; }
  [[nodiscard]] npurt::layout format() const noexcept { return format_; }
  [[nodiscard]] std::int64_t elements() const noexcept { return shape_.elements(); }
  [[nodiscard]] std::size_t bytes() const noexcept { return static_cast<std::size_t>(elements()) * size_of(type_); }
  [[nodiscard]] storage_place place() const noexcept { return place_; }
  [[nodiscard]] bool is_host() const noexcept { return place_ == storage_place::host; }
  [[nodiscard]] bool is_device() const noexcept { return place_ == storage_place::device; }
  [[nodiscard]] bool has_storage() const noexcept { return place_ != storage_place::none; }
  /// A device tensor whose memory went with a reset of its device (device::reset frees all of
  /// it) or with its system. It stays a device tensor (is_device(), device()) with a null
  /// data(); release() or the destructor then only drops the handle. Make the tensor again.
  [[nodiscard]] bool storage_lost() const noexcept {
    // Order matters: once the system is gone, device_memory_ is empty and dev_ dangles.
    return place_ == storage_place::device && (!device_memory_ || dev_->reset_count() != resets_);
  }
  /// Why storage_lost() is true, in words ("its memory on device 1 went with a reset of the
  /// device ..."); empty when it is false.
  [[nodiscard]] std::string lost_reason() const;
  /// The device of a device tensor (-1 otherwise).
  [[nodiscard]] device_id device() const noexcept { return place_ == storage_place::device ? device_id_ : -1; }
  /// Host pointer (host tensors) or device address (device tensors); null without storage, and
  /// for a device tensor whose memory is lost (storage_lost(): its device was reset or its
  /// system is gone).
  [[nodiscard]] void* data() noexcept { return live_data(); }
  [[nodiscard]] const void* data() const noexcept { return live_data(); }
  /// The kernel operand descriptor of this tensor.
  [[nodiscard]] tensor_desc desc() const noexcept { return {live_data(), shape_, type_, format_}; }

  /// Element i (row-major), converted to double. Host tensors only; caller_error otherwise or
  /// when i is out of range.
  [[nodiscard]] double get(std::int64_t i) const;
  [[nodiscard]] double at(std::initializer_list<std::int64_t> index) const { return get(linear(index)); }
  /// Element i as an integer: exact for i64, whose values above 2^53 a double would round (models
  /// write INT64_MAX for "to the end"); a floating element truncates toward zero, and one that is
  /// NaN or outside int64's range is invalid_argument.
  [[nodiscard]] std::int64_t get_int(std::int64_t i) const;
  /// Writes element i, rounded to the dtype (to nearest even for f16/bf16, saturating integers).
  void set(std::int64_t i, double v);
  void set(std::initializer_list<std::int64_t> index, double v) { set(linear(index), v); }
  /// Every element = v. Host tensors; a device tensor is filled through a host staging copy on
  /// `s` (the blocking form) — use fill(v, s).
  void fill(double v);
  void fill(double v, stream& s);
  /// All elements as doubles (host tensors).
  [[nodiscard]] std::vector<double> to_vector() const;
  /// The elements of a host bool tensor as bool, in place, as ONNX Runtime's GetTensorData<bool>
  /// and PyTorch's data_ptr<bool>() give them: a bool is one byte, 0 or 1. invalid_dtype for
  /// another dtype, invalid_pointer for a device tensor. Every npurt writer (kernels, set(),
  /// the ONNX importer) stores 0 or 1; whoever writes the bytes through data() must too.
  [[nodiscard]] std::span<bool> bools();
  [[nodiscard]] std::span<const bool> bools() const;
  /// A host tensor of T's dtype (dtype_of<T>: float f32, double f64, the fixed-width integers
  /// their dtypes, bool boolean) holding `values` exactly, bit for bit: u64 values past 2^53 and
  /// f64 values that a float would round survive, which the double-valued constructor cannot
  /// promise. values.size() must equal the elements.
  template <class T>
  static tensor of(npurt::shape s, std::span<const T> values) {
    tensor r(s, dtype_of<T>);
    if (static_cast<std::int64_t>(values.size()) != r.elements())
      throw_error(make_error_code(errc::invalid_shape), "npurt::tensor::of: " + std::to_string(values.size()) +
                                                            " values for " + std::to_string(r.elements()) +
                                                            " elements");
    if (!values.empty()) std::memcpy(r.data_, values.data(), values.size_bytes());
    return r;
  }
  /// A host tensor holding a copy of any host tensor-like value (checkpoint.hpp's
  /// host_tensor_like), bit for bit: `g.set_constant("w", tensor::from(ck.get_tensor("w")))`
  /// loads a checkpoint's weight into a graph, which then checks its shape and dtype. A source
  /// whose is_host() is false (a device or timing-only tensor) is invalid_pointer (use copy_from
  /// or to_host), a shape of more than 8 dimensions invalid_shape.
  template <host_tensor_like T>
  static tensor from(const T& src) {
    if (!detail::ckpt::holds_host_data(src))
      throw_error(make_error_code(errc::invalid_pointer),
                  "npurt::tensor::from: the source is not a host tensor (device memory, or no storage): use to_host");
    npurt::shape s;
    for (auto d : src.shape()) s.push_back(static_cast<std::int64_t>(d));
    tensor r(s, detail::ckpt::dtype_of_tensor(src));
    if (r.bytes() != 0) std::memcpy(r.data_, src.data(), r.bytes());
    return r;
  }
  /// The elements of a host tensor as T, in place: invalid_dtype unless the dtype is T's
  /// (dtype_of<T>), invalid_pointer for a device tensor.
  template <class T>
  [[nodiscard]] std::span<T> elements_as() {
    check_elements("npurt::tensor::elements_as", dtype_of<T>);
    return {static_cast<T*>(data_), static_cast<std::size_t>(elements())};
  }
  template <class T>
  [[nodiscard]] std::span<const T> elements_as() const {
    check_elements("npurt::tensor::elements_as", dtype_of<T>);
    return {static_cast<const T*>(data_), static_cast<std::size_t>(elements())};
  }

  /// Copies src's bytes into this tensor through `s`, blocking until done. Shapes' element
  /// counts and dtypes must match (errc::invalid_shape / invalid_dtype otherwise).
  void copy_from(const tensor& src, stream& s);
  void copy_from(const tensor& src, stream& s, std::error_code& ec);
  /// As copy_from, completing through `token` with void(async_error_code): a copy copy_from
  /// refuses completes with the same code and words (a throwing await raises them), never
  /// inside this call, and enqueues nothing.
  template <class Token = stream::default_token>
  auto async_copy_from(const tensor& src, stream& s, Token&& token = {}) {
    std::error_code ec;
    const memcpy_kind kind = check_copy(src, ec);
    std::string why;
    if (ec) [[unlikely]]
      why = copy_problem(src, ec);
    return s.async_memcpy_as("npurt::tensor::async_copy_from", ec, std::move(why), ec ? nullptr : live_data(), bytes(),
                             ec ? nullptr : src.live_data(), ec ? 0 : bytes(), kind, std::forward<Token>(token));
  }
  /// A device copy of this tensor on s's device (blocking), and a host copy of a device tensor.
  [[nodiscard]] tensor to_device(npurt::device& dev, stream& s) const;
  [[nodiscard]] tensor to_host(stream& s) const;

 private:
  [[nodiscard]] std::int64_t linear(std::initializer_list<std::int64_t> index) const;
  memcpy_kind check_copy(const tensor& src, std::error_code& ec) const noexcept;
  /// What copy_from's refusal `ec` (from check_copy) says about the two tensors.
  [[nodiscard]] std::string copy_problem(const tensor& src, std::error_code ec) const;
  void check_bools(const char* who) const;
  void check_elements(const char* who, npurt::dtype want) const;
  [[nodiscard]] void* live_data() const noexcept { return storage_lost() ? nullptr : data_; }
  // The throwing copies' check for a lost source or destination: invalid_pointer naming it.
  void throw_if_lost(const char* who, const tensor& src) const;
  void swap(tensor& o) noexcept {
    std::swap(shape_, o.shape_);
    std::swap(type_, o.type_);
    std::swap(format_, o.format_);
    std::swap(place_, o.place_);
    std::swap(data_, o.data_);
    std::swap(device_memory_, o.device_memory_);
    std::swap(device_id_, o.device_id_);
    std::swap(dev_, o.dev_);
    std::swap(resets_, o.resets_);
    std::swap(host_, o.host_);
  }

  npurt::shape shape_{};
  npurt::dtype type_ = dtype::f32;
  npurt::layout format_ = layout::nd;
  storage_place place_ = storage_place::none;
  void* data_ = nullptr;
  // Device storage: a buffer that becomes empty when its system dies (then data_ dangles and
  // live_data() hides it), and the device's id, which stays meaningful. A reset frees the
  // memory but leaves the buffer as it was: the device's reset count, taken at allocation,
  // tells (the device object lives as long as its system, which device_memory_ watches).
  device_buffer device_memory_;
  device_id device_id_ = -1;
  const npurt::device* dev_ = nullptr;
  std::uint64_t resets_ = 0;
  // From npurt's host heap, whose allocator throws std::bad_alloc when memory runs out: a global
  // operator new replaced by a C build of mimalloc aborts the process instead.
  std::vector<std::byte, detail::host_allocator<std::byte>> host_;
};

/// Reads element i of raw storage of dtype t as double; writes it back rounded. Shared by the
/// tensor, the graph compiler's constant folding and the ONNX importer.
[[nodiscard]] double load_element(const void* data, dtype t, std::int64_t i) noexcept;
void store_element(void* data, dtype t, std::int64_t i, double v) noexcept;

}  // namespace npurt

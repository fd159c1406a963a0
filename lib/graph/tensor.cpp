// Tensors with storage (see graph/tensor.hpp).
#include <npurt/graph/graph.hpp>
#include <npurt/graph/tensor.hpp>
#include <npurt/numeric.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <string>

namespace npurt {

namespace {

template <class T>
T load_as(const std::byte* b, std::int64_t i) noexcept {
  T v;
  std::memcpy(&v, b + i * static_cast<std::int64_t>(sizeof(T)), sizeof(T));
  return v;
}

template <class T>
void store_as(std::byte* b, std::int64_t i, T v) noexcept {
  std::memcpy(b + i * static_cast<std::int64_t>(sizeof(T)), &v, sizeof(T));
}

template <class I>
I saturate(double v) noexcept {
  if (std::isnan(v)) return 0;
  const double r = std::nearbyint(v);
  if (r <= static_cast<double>(std::numeric_limits<I>::lowest())) return std::numeric_limits<I>::lowest();
  if (r >= static_cast<double>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return static_cast<I>(r);
}

void check_shape(const shape& s, dtype t) {
  for (auto d : s)
    if (d < 0)
      throw_error(make_error_code(errc::invalid_shape), "npurt::tensor: negative dimension " + std::to_string(d));
  const std::int64_t n = s.checked_elements();
  std::size_t bytes = 0;
  // Sizes from outside (a file, a user's dimensions) are checked before anything is sized by them.
  if (n < 0 || __builtin_mul_overflow(static_cast<std::size_t>(n), size_of(t), &bytes) ||
      bytes > static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max()))
    throw_error(make_error_code(errc::size_overflow), "npurt::tensor: the " + std::string(to_string(t)) +
                                                          " elements of " + shape_string(s) + " do not fit in memory");
}

}  // namespace

double load_element(const void* data, dtype t, std::int64_t i) noexcept {
  const auto* b = static_cast<const std::byte*>(data);
  switch (t) {
    case dtype::f32: {
      float v;
      std::memcpy(&v, b + i * 4, 4);
      return v;
    }
    case dtype::f16: {
      std::uint16_t v;
      std::memcpy(&v, b + i * 2, 2);
      return numeric::half_bits_to_float(v);
    }
    case dtype::bf16: {
      std::uint16_t v;
      std::memcpy(&v, b + i * 2, 2);
      return numeric::bfloat16_bits_to_float(v);
    }
    case dtype::i8: {
      std::int8_t v;
      std::memcpy(&v, b + i, 1);
      return v;
    }
    case dtype::u8: {
      std::uint8_t v;
      std::memcpy(&v, b + i, 1);
      return v;
    }
    case dtype::boolean: return b[i] != std::byte{0} ? 1.0 : 0.0;
    case dtype::i32: {
      std::int32_t v;
      std::memcpy(&v, b + i * 4, 4);
      return v;
    }
    case dtype::i64: {
      std::int64_t v;
      std::memcpy(&v, b + i * 8, 8);
      return static_cast<double>(v);
    }
    case dtype::f64: return load_as<double>(b, i);
    case dtype::i16: return load_as<std::int16_t>(b, i);
    case dtype::u16: return load_as<std::uint16_t>(b, i);
    case dtype::u32: return load_as<std::uint32_t>(b, i);
    case dtype::u64: return static_cast<double>(load_as<std::uint64_t>(b, i));
  }
  return 0;
}

void store_element(void* data, dtype t, std::int64_t i, double v) noexcept {
  auto* b = static_cast<std::byte*>(data);
  switch (t) {
    case dtype::f32: {
      const float f = static_cast<float>(v);
      std::memcpy(b + i * 4, &f, 4);
      return;
    }
    case dtype::f16: {
      const auto h = numeric::float_to_half_bits(static_cast<float>(v));
      std::memcpy(b + i * 2, &h, 2);
      return;
    }
    case dtype::bf16: {
      const auto h = numeric::float_to_bfloat16_bits(static_cast<float>(v));
      std::memcpy(b + i * 2, &h, 2);
      return;
    }
    case dtype::i8: {
      const auto x = saturate<std::int8_t>(v);
      std::memcpy(b + i, &x, 1);
      return;
    }
    case dtype::u8: {
      const auto x = saturate<std::uint8_t>(v);
      std::memcpy(b + i, &x, 1);
      return;
    }
    case dtype::boolean:
      // NumPy's astype(bool): anything nonzero, NaN included, is true.
      b[i] = v != 0 || std::isnan(v) ? std::byte{1} : std::byte{0};
      return;
    case dtype::i32: {
      const auto x = saturate<std::int32_t>(v);
      std::memcpy(b + i * 4, &x, 4);
      return;
    }
    case dtype::i64: {
      const auto x = saturate<std::int64_t>(v);
      std::memcpy(b + i * 8, &x, 8);
      return;
    }
    case dtype::f64: store_as<double>(b, i, v); return;
    case dtype::i16: store_as(b, i, saturate<std::int16_t>(v)); return;
    case dtype::u16: store_as(b, i, saturate<std::uint16_t>(v)); return;
    case dtype::u32: store_as(b, i, saturate<std::uint32_t>(v)); return;
    case dtype::u64: store_as(b, i, saturate<std::uint64_t>(v)); return;
  }
}

tensor::tensor(npurt::shape s, npurt::dtype t, npurt::layout l) : shape_(s), type_(t), format_(l) {
  check_shape(s, t);
  try {
    host_.assign(bytes(), std::byte{0});
  } catch (const std::bad_alloc&) {
    throw_error(make_error_code(errc::out_of_memory),
                "npurt::tensor: no host memory for the " + std::to_string(bytes()) + " bytes of " + shape_string(s));
  }
  place_ = storage_place::host;
  data_ = host_.data();
}

tensor::tensor(npurt::shape s, npurt::dtype t, const std::vector<double>& values) : tensor(s, t) {
  if (static_cast<std::int64_t>(values.size()) != elements())
    throw_error(make_error_code(errc::invalid_shape), "npurt::tensor: " + std::to_string(values.size()) +
                                                          " values for " + std::to_string(elements()) + " elements");
  for (std::size_t i = 0; i < values.size(); ++i) store_element(data_, type_, static_cast<std::int64_t>(i), values[i]);
}

tensor::tensor(npurt::shape s, std::span<const bool> values) : tensor(s, dtype::boolean) {
  if (static_cast<std::int64_t>(values.size()) != elements())
    throw_error(make_error_code(errc::invalid_shape), "npurt::tensor: " + std::to_string(values.size()) +
                                                          " bools for " + std::to_string(elements()) + " elements");
  std::copy(values.begin(), values.end(), bools().begin());
}

std::span<bool> tensor::bools() {
  check_bools("npurt::tensor::bools");
  return {static_cast<bool*>(data_), static_cast<std::size_t>(elements())};
}

std::span<const bool> tensor::bools() const {
  check_bools("npurt::tensor::bools");
  return {static_cast<const bool*>(data_), static_cast<std::size_t>(elements())};
}

void tensor::check_bools(const char* who) const { check_elements(who, dtype::boolean); }

void tensor::check_elements(const char* who, npurt::dtype want) const {
  if (type_ != want)
    throw_error(make_error_code(errc::invalid_dtype), std::string(who) + ": the tensor is " +
                                                          std::string(to_string(type_)) + ", not " +
                                                          std::string(to_string(want)));
  if (place_ != storage_place::host && elements() > 0)
    throw_error(make_error_code(errc::invalid_pointer),
                std::string(who) + ": element access needs a host tensor (use to_host)");
}

tensor tensor::on_device(npurt::device& dev, npurt::shape s, npurt::dtype t, npurt::layout l) {
  check_shape(s, t);
  tensor r;
  r.shape_ = s;
  r.type_ = t;
  r.format_ = l;
  if (r.bytes() > 0) {
    r.device_memory_ = device_buffer(dev, r.bytes());
    r.data_ = r.device_memory_.data();
    r.device_id_ = dev.id();
    r.dev_ = &dev;
    r.resets_ = dev.reset_count();
    r.place_ = storage_place::device;
  }
  return r;
}

tensor tensor::timing_only(npurt::shape s, npurt::dtype t, npurt::layout l) {
  check_shape(s, t);
  tensor r;
  r.shape_ = s;
  r.type_ = t;
  r.format_ = l;
  return r;
}

tensor tensor::clone() const {
  if (place_ == storage_place::device)
    throw_error(make_error_code(errc::not_supported), "npurt::tensor::clone: a device tensor is copied with copy_from");
  if (place_ == storage_place::none) return timing_only(shape_, type_, format_);
  tensor r(shape_, type_, format_);
  // An empty tensor has no storage to copy: memcpy's pointers must not be null even for 0 bytes.
  if (bytes()) std::memcpy(r.data_, data_, bytes());
  return r;
}

void tensor::release() noexcept {
  device_memory_.reset();  // a lost device or a dead system frees nothing; the handle goes either way
  host_.clear();
  host_.shrink_to_fit();
  data_ = nullptr;
  device_id_ = -1;
  dev_ = nullptr;
  resets_ = 0;
  place_ = storage_place::none;
}

std::int64_t tensor::linear(std::initializer_list<std::int64_t> index) const {
  if (index.size() != shape_.rank())
    throw_error(make_error_code(errc::invalid_shape), "npurt::tensor: index of rank " + std::to_string(index.size()) +
                                                          " into a tensor of rank " + std::to_string(shape_.rank()));
  std::int64_t i = 0;
  std::size_t d = 0;
  for (auto x : index) {
    if (x < 0 || x >= shape_[d])
      throw_error(make_error_code(errc::invalid_argument), "npurt::tensor: index " + std::to_string(x) +
                                                               " out of range in dimension " + std::to_string(d) +
                                                               " of size " + std::to_string(shape_[d]));
    i = i * shape_[d] + x;
    ++d;
  }
  return i;
}

double tensor::get(std::int64_t i) const {
  // A timing-only tensor (the output of a timing-only run, say) has no values anywhere.
  if (place_ == storage_place::none)
    throw_error(
        make_error_code(errc::invalid_argument),
        "npurt::tensor::get: the tensor has no data (a timing-only tensor, such as a timing-only run's output, or an "
        "empty one)");
  if (place_ != storage_place::host)
    throw_error(make_error_code(errc::invalid_pointer),
                "npurt::tensor::get: element access needs a host tensor (use to_host)");
  if (i < 0 || i >= elements())
    throw_error(make_error_code(errc::invalid_argument),
                "npurt::tensor::get: element " + std::to_string(i) + " of " + std::to_string(elements()));
  return load_element(data_, type_, i);
}

std::int64_t tensor::get_int(std::int64_t i) const {
  if (type_ == dtype::i64 || type_ == dtype::u64) {
    (void)get(i);  // its checks: a host tensor, i in range
    std::int64_t v = 0;
    std::memcpy(&v, static_cast<const std::byte*>(data_) + static_cast<std::size_t>(i) * sizeof v, sizeof v);
    if (type_ == dtype::u64 && v < 0)  // the u64 is 2^63 or more
      throw_error(make_error_code(errc::invalid_argument), "npurt::tensor::get_int: element " + std::to_string(i) +
                                                               " is " + std::to_string(static_cast<std::uint64_t>(v)) +
                                                               ", which is not an int64 value");
    return v;
  }
  const double d = get(i);
  // -2^63 is exact in a double; 2^63 is the first value past the range.
  if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0))
    throw_error(make_error_code(errc::invalid_argument), "npurt::tensor::get_int: element " + std::to_string(i) +
                                                             " is " + std::to_string(d) +
                                                             ", which is not an int64 value");
  return static_cast<std::int64_t>(d);
}

void tensor::set(std::int64_t i, double v) {
  if (place_ != storage_place::host)
    throw_error(make_error_code(errc::invalid_pointer), "npurt::tensor::set: element access needs a host tensor");
  if (i < 0 || i >= elements())
    throw_error(make_error_code(errc::invalid_argument),
                "npurt::tensor::set: element " + std::to_string(i) + " of " + std::to_string(elements()));
  store_element(data_, type_, i, v);
}

void tensor::fill(double v) {
  if (place_ != storage_place::host)
    throw_error(make_error_code(errc::invalid_pointer),
                "npurt::tensor::fill: a device tensor is filled with fill(v, stream)");
  for (std::int64_t i = 0; i < elements(); ++i) store_element(data_, type_, i, v);
}

void tensor::fill(double v, stream& s) {
  if (place_ == storage_place::host) return fill(v);
  throw_if_lost("npurt::tensor::fill", tensor{});
  tensor staging(shape_, type_, format_);
  staging.fill(v);
  copy_from(staging, s);
}

std::vector<double> tensor::to_vector() const {
  std::vector<double> r(static_cast<std::size_t>(elements()));
  for (std::int64_t i = 0; i < elements(); ++i) r[static_cast<std::size_t>(i)] = get(i);
  return r;
}

memcpy_kind tensor::check_copy(const tensor& src, std::error_code& ec) const noexcept {
  if (src.type_ != type_) {
    ec = make_error_code(errc::invalid_dtype);
    return memcpy_kind::default_kind;
  }
  if (src.elements() != elements()) {
    ec = make_error_code(errc::invalid_shape);
    return memcpy_kind::default_kind;
  }
  if (!src.has_storage() || !has_storage()) {
    ec = make_error_code(errc::null_pointer);
    return memcpy_kind::default_kind;
  }
  if (src.storage_lost() || storage_lost()) {
    ec = make_error_code(errc::invalid_pointer);  // freed, as any device pointer a reset frees
    return memcpy_kind::default_kind;
  }
  if (src.is_host()) return is_host() ? memcpy_kind::host_to_host : memcpy_kind::host_to_device;
  return is_host() ? memcpy_kind::device_to_host : memcpy_kind::device_to_device;
}

void tensor::copy_from(const tensor& src, stream& s, std::error_code& ec) {
  ec.clear();
  const memcpy_kind kind = check_copy(src, ec);
  if (ec || bytes() == 0) return;
  event done = s.memcpy(live_data(), bytes(), src.live_data(), bytes(), kind, ec);
  if (ec) return;
  done.synchronize(npurt::no_timeout, ec);
}

std::string tensor::lost_reason() const {
  if (!storage_lost()) return {};
  if (!device_memory_)
    return "its memory on device " + std::to_string(device_id_) + " went with its system, which was destroyed";
  return "its memory on device " + std::to_string(device_id_) +
         " went with a reset of the device (device::reset frees all its memory): make the tensor again";
}

void tensor::throw_if_lost(const char* who, const tensor& src) const {
  if (src.storage_lost())
    throw_error(make_error_code(errc::invalid_pointer),
                std::string(who) + ": the source device tensor is unusable: " + src.lost_reason());
  if (storage_lost())
    throw_error(make_error_code(errc::invalid_pointer),
                std::string(who) + ": the destination device tensor is unusable: " + lost_reason());
}

std::string tensor::copy_problem(const tensor& src, std::error_code ec) const {
  if (ec == errc::invalid_pointer) {
    if (src.storage_lost()) return "the source device tensor is unusable: " + src.lost_reason();
    if (storage_lost()) return "the destination device tensor is unusable: " + lost_reason();
  }
  if (ec == errc::null_pointer)
    return std::string(src.has_storage() ? "the destination" : "the source") +
           " tensor has no storage (default-constructed, moved from, released or timing-only)";
  return std::string(to_string(src.type_)) + " tensor of " + std::to_string(src.elements()) + " elements into " +
         std::string(to_string(type_)) + " tensor of " + std::to_string(elements()) + " elements";
}

void tensor::copy_from(const tensor& src, stream& s) {
  throw_if_lost("npurt::tensor::copy_from", src);
  std::error_code ec;
  copy_from(src, s, ec);
  if (ec) throw_error(ec, "npurt::tensor::copy_from: " + copy_problem(src, ec));
}

tensor tensor::to_device(npurt::device& dev, stream& s) const {
  throw_if_lost("npurt::tensor::to_device", *this);
  tensor r = on_device(dev, shape_, type_, format_);
  r.copy_from(*this, s);
  return r;
}

tensor tensor::to_host(stream& s) const {
  throw_if_lost("npurt::tensor::to_host", *this);
  tensor r(shape_, type_, format_);
  r.copy_from(*this, s);
  return r;
}

}  // namespace npurt

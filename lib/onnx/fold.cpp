// Import-time constant folding (see fold.hpp). Each operator follows its onnx.ai definition and,
// where the text leaves a case open, the reference implementation (onnx/reference/ops/op_*.py,
// numpy underneath): integer arithmetic wraps as numpy's does, Slice clamps as Python slicing does.
#include "fold.hpp"

#include <npurt/kernel_ops.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numbers>
#include <vector>

namespace npurt::onnx::folding {

namespace {

constexpr std::array<std::string_view, 24> foldable_ops{
    "Add",        "Cast",          "Concat",         "ConstantOfShape",
    "Div",        "Equal",         "Gather",         "Identity",
    "Mul",        "Range",         "Reshape",        "Shape",
    "Size",       "Slice",         "Squeeze",        "Sub",
    "Unsqueeze",  "Where",         "Expand",         "Neg",
    "HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix"};

// Operators of the graph folded when their inputs hold data: an input without data (a
// timing-only weight) leaves them to the graph rather than failing the load.
constexpr std::array<std::string_view, 5> foldable_graph_ops{"Min", "Max", "DequantizeLinear", "Ceil", "Relu"};

bool graph_computes(std::string_view op_type) noexcept {
  return std::find(foldable_graph_ops.begin(), foldable_graph_ops.end(), op_type) != foldable_graph_ops.end();
}

bool is_bool(const operand& v) noexcept { return v.value->type() == dtype::boolean; }

// The node being folded, for errors that name it.
struct ctx {
  const ::onnx::NodeProto& n;
  const std::string& name;

  [[noreturn]] void fail(errc e, const std::string& tensor, const std::string& what) const {
    throw graph_error(make_error_code(e), name, tensor, "onnx: " + n.op_type() + " '" + name + "': " + what);
  }
  [[nodiscard]] const std::string& in_name(std::size_t i) const {
    static const std::string none;
    return static_cast<int>(i) < n.input_size() ? n.input(static_cast<int>(i)) : none;
  }
  [[nodiscard]] const ::onnx::AttributeProto* attr(std::string_view key) const {
    for (const auto& a : n.attribute())
      if (a.name() == key) return &a;
    return nullptr;
  }
  [[nodiscard]] std::int64_t attr_int(std::string_view key, std::int64_t fallback) const {
    const auto* a = attr(key);
    if (!a) return fallback;
    if (a->type() != ::onnx::AttributeProto::INT)
      fail(errc::invalid_argument, {}, "attribute '" + a->name() + "' is not an INT");
    return a->i();
  }
  [[nodiscard]] std::optional<ints> attr_ints(std::string_view key) const {
    const auto* a = attr(key);
    if (!a) return std::nullopt;
    if (a->type() != ::onnx::AttributeProto::INTS)
      fail(errc::invalid_argument, {}, "attribute '" + a->name() + "' is not INTS");
    return ints(a->ints().begin(), a->ints().end());
  }
};

// Element i of an integer tensor, exactly (get_int is exact for every integer dtype).
// An integer element; a u64 as its bits (values from 2^63 read negative), which wrapping
// arithmetic and put_int keep, and which what orders, divides or converts u64 treats apart.
std::int64_t int_at(const tensor& t, std::int64_t i) {
  if (t.type() == dtype::u64)
    return static_cast<std::int64_t>(t.elements_as<std::uint64_t>()[static_cast<std::size_t>(i)]);
  return t.get_int(i);
}

// Writes an integer into an integer tensor, wrapping to the dtype's width as numpy's astype does
// (two's complement; the conversion is defined in C++20).
void put_int(tensor& t, std::int64_t i, std::int64_t v) {
  auto* b = static_cast<std::byte*>(t.data());
  switch (t.type()) {
    case dtype::i64: std::memcpy(b + i * 8, &v, 8); return;
    case dtype::i32: {
      const auto x = static_cast<std::int32_t>(v);
      std::memcpy(b + i * 4, &x, 4);
      return;
    }
    case dtype::i8: {
      const auto x = static_cast<std::int8_t>(v);
      std::memcpy(b + i, &x, 1);
      return;
    }
    case dtype::u8: {
      const auto x = static_cast<std::uint8_t>(v);
      std::memcpy(b + i, &x, 1);
      return;
    }
    case dtype::u64: std::memcpy(b + i * 8, &v, 8); return;
    case dtype::i16: t.elements_as<std::int16_t>()[static_cast<std::size_t>(i)] = static_cast<std::int16_t>(v); return;
    case dtype::u16:
      t.elements_as<std::uint16_t>()[static_cast<std::size_t>(i)] = static_cast<std::uint16_t>(v);
      return;
    case dtype::u32:
      t.elements_as<std::uint32_t>()[static_cast<std::size_t>(i)] = static_cast<std::uint32_t>(v);
      return;
    default: t.set(i, static_cast<double>(v));
  }
}

void copy_element(tensor& to, std::int64_t i, const tensor& from, std::int64_t j) {
  const std::size_t sz = size_of(from.type());
  std::memcpy(static_cast<std::byte*>(to.data()) + static_cast<std::size_t>(i) * sz,
              static_cast<const std::byte*>(from.data()) + static_cast<std::size_t>(j) * sz, sz);
}

// The input i, which must be present with data.
const operand& need(const ctx& c, std::span<const operand> in, std::size_t i) {
  if (i >= in.size() || !in[i].value) c.fail(errc::invalid_argument, {}, "input " + std::to_string(i) + " is missing");
  return in[i];
}

// A 1-D (or scalar) integer input read as a list: Reshape's shape, Slice's starts, axes, ...
ints int_list(const ctx& c, const operand& v, std::size_t i) {
  const tensor& t = *v.value;
  if (!is_integer(t.type()))
    c.fail(errc::invalid_dtype, c.in_name(i), "input '" + c.in_name(i) + "' must be an integer tensor");
  if (t.shape().rank() > 1)
    c.fail(errc::invalid_shape, c.in_name(i),
           "input '" + c.in_name(i) + "' must be 1-D, not " + shape_string(t.shape()));
  ints r(static_cast<std::size_t>(t.elements()));
  for (std::int64_t k = 0; k < t.elements(); ++k) r[static_cast<std::size_t>(k)] = int_at(t, k);
  return r;
}

// An axis in [-rank, rank-1], made non-negative (ONNX's convention for every axis argument).
std::size_t norm_axis(const ctx& c, std::int64_t axis, std::size_t rank) {
  const auto r = static_cast<std::int64_t>(rank);
  if (axis < -r || axis >= r)
    c.fail(errc::invalid_argument, {},
           "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return static_cast<std::size_t>(axis < 0 ? axis + r : axis);
}

std::string dims_string(const ints& dims) {
  std::string l = "[";
  for (std::size_t k = 0; k < dims.size(); ++k) {
    if (k) l += ',';
    l += std::to_string(dims[k]);
  }
  l += ']';
  return l;
}

// A shape from dims checked as folding builds it: rank at most 8, each dimension non-negative,
// the element count within std::int64_t.
shape checked_shape(const ctx& c, const ints& dims, const std::string& tensor) {
  if (dims.size() > shape::max_rank)
    c.fail(errc::not_supported, tensor, "a result of rank " + std::to_string(dims.size()) + " (npurt holds at most 8)");
  shape s;
  std::int64_t n = 1;
  for (auto d : dims) {
    if (d < 0) c.fail(errc::invalid_argument, tensor, "dimension " + std::to_string(d) + " is negative");
    if (__builtin_mul_overflow(n, d, &n))
      c.fail(errc::size_overflow, tensor, "the dimensions " + dims_string(dims) + " overflow the element count");
    s.push_back(d);
  }
  return s;
}

ints dims_of(const shape& s) { return ints(s.begin(), s.end()); }

// numpy's multidirectional broadcasting (onnx.ai Broadcasting.md).
shape broadcast(const ctx& c, std::span<const shape* const> shapes) {
  std::size_t rank = 0;
  for (const auto* s : shapes) rank = std::max(rank, s->rank());
  ints out(rank, 1);
  for (const auto* s : shapes)
    for (std::size_t k = 0; k < s->rank(); ++k) {
      const std::int64_t d = (*s)[k];
      auto& o = out[rank - s->rank() + k];
      if (d == o || d == 1) continue;
      if (o != 1)
        c.fail(errc::invalid_shape, {},
               "shapes " + shape_string(*shapes[0]) + " and " + shape_string(*s) + " do not broadcast");
      o = d;
    }
  return checked_shape(c, out, {});
}

// The element of an operand of shape `in` that broadcasts to element `i` of `out`.
std::int64_t broadcast_index(const shape& out, const shape& in, std::int64_t i) {
  std::int64_t j = 0, stride = 1;
  for (std::size_t k = out.rank(); k-- > 0;) {
    const std::int64_t coord = i % out[k];
    i /= out[k];
    const std::size_t off = out.rank() - k;
    if (off <= in.rank()) {
      const std::int64_t d = in[in.rank() - off];
      if (d != 1) j += coord * stride;
      stride *= d;
    }
  }
  return j;
}

using result = std::optional<host_value>;

result too_large() { return std::nullopt; }

bool fits(const shape& s) { return s.elements() <= max_fold_elements; }

result fold_shape(const ctx& c, const tensor& x) {
  // Shape-15's start and end: negative counts from the back, both clamp to [0, rank].
  const auto r = static_cast<std::int64_t>(x.shape().rank());
  auto clamp = [r](std::int64_t v) { return std::clamp(v < 0 ? v + r : v, std::int64_t{0}, r); };
  const std::int64_t start = clamp(c.attr_int("start", 0)), end = clamp(c.attr_int("end", r));
  tensor out(shape{std::max<std::int64_t>(end - start, 0)}, dtype::i64);
  for (std::int64_t k = start; k < end; ++k) put_int(out, k - start, x.shape()[static_cast<std::size_t>(k)]);
  return host_value{std::move(out)};
}

result fold_gather(const ctx& c, std::span<const operand> in) {
  const operand& data = need(c, in, 0);
  const operand& idx = need(c, in, 1);
  const shape& ds = data.value->shape();
  if (ds.rank() == 0) c.fail(errc::invalid_shape, c.in_name(0), "data must have rank 1 or more");
  if (idx.value->type() != dtype::i64 && idx.value->type() != dtype::i32)
    c.fail(errc::invalid_dtype, c.in_name(1), "indices must be int32 or int64");
  const std::size_t axis = norm_axis(c, c.attr_int("axis", 0), ds.rank());
  ints od(ds.begin(), ds.begin() + axis);
  od.insert(od.end(), idx.value->shape().begin(), idx.value->shape().end());
  od.insert(od.end(), ds.begin() + axis + 1, ds.end());
  const shape os = checked_shape(c, od, c.n.output(0));
  if (!fits(os)) return too_large();
  std::int64_t outer = 1, inner = 1;
  for (std::size_t k = 0; k < axis; ++k) outer *= ds[k];
  for (std::size_t k = axis + 1; k < ds.rank(); ++k) inner *= ds[k];
  const std::int64_t dim = ds[axis], count = idx.value->elements();
  // Indices in [-dim, dim-1], negative ones counting from the back; any other is an error in
  // ONNX, and reading past the data here.
  ints at(static_cast<std::size_t>(count));
  for (std::int64_t j = 0; j < count; ++j) {
    const std::int64_t v = int_at(*idx.value, j);
    if (v < -dim || v >= dim)
      c.fail(errc::invalid_argument, c.in_name(1),
             "index " + std::to_string(v) + " is out of range for axis " + std::to_string(axis) + " of size " +
                 std::to_string(dim));
    at[static_cast<std::size_t>(j)] = v < 0 ? v + dim : v;
  }
  tensor out(os, data.value->type());
  std::int64_t o = 0;
  for (std::int64_t a = 0; a < outer; ++a)
    for (std::int64_t j = 0; j < count; ++j)
      for (std::int64_t b = 0; b < inner; ++b)
        copy_element(out, o++, *data.value, (a * dim + at[static_cast<std::size_t>(j)]) * inner + b);
  return host_value{std::move(out)};
}

// The same data under another shape (Reshape, Squeeze, Unsqueeze, Identity).
result reshaped(const operand& x, const shape& s) {
  if (!fits(s)) return too_large();
  tensor out(s, x.value->type());
  if (x.value->bytes()) std::memcpy(out.data(), x.value->data(), x.value->bytes());
  return host_value{std::move(out)};
}

// Squeeze and Unsqueeze take their axes as an input from opset 13, as an attribute before.
std::optional<ints> axes_of(const ctx& c, std::span<const operand> in, std::int64_t opset) {
  if (opset >= 13) {
    if (in.size() > 1 && in[1].value) return int_list(c, in[1], 1);
    return std::nullopt;
  }
  return c.attr_ints("axes");
}

result fold_unsqueeze(const ctx& c, std::span<const operand> in, std::int64_t opset) {
  const operand& x = need(c, in, 0);
  const auto axes = axes_of(c, in, opset);
  if (!axes) c.fail(errc::invalid_argument, {}, "needs axes");
  const std::size_t rank = x.value->shape().rank() + axes->size();
  if (rank > shape::max_rank)
    c.fail(errc::not_supported, c.n.output(0), "a result of rank " + std::to_string(rank) + " (npurt holds at most 8)");
  std::vector<bool> inserted(rank, false);
  for (auto a : *axes) {
    const std::size_t k = norm_axis(c, a, rank);
    if (inserted[k]) c.fail(errc::invalid_argument, {}, "axis " + std::to_string(a) + " is repeated");
    inserted[k] = true;
  }
  ints od;
  std::size_t from = 0;
  for (std::size_t k = 0; k < rank; ++k) od.push_back(inserted[k] ? 1 : x.value->shape()[from++]);
  return reshaped(x, checked_shape(c, od, c.n.output(0)));
}

result fold_squeeze(const ctx& c, std::span<const operand> in, std::int64_t opset) {
  const operand& x = need(c, in, 0);
  const shape& s = x.value->shape();
  const auto axes = axes_of(c, in, opset);
  std::vector<bool> drop(s.rank(), false);
  if (!axes) {
    // No axes: every dimension of size 1 goes.
    for (std::size_t k = 0; k < s.rank(); ++k) drop[k] = s[k] == 1;
  } else {
    for (auto a : *axes) {
      const std::size_t k = norm_axis(c, a, s.rank());
      if (drop[k]) c.fail(errc::invalid_argument, {}, "axis " + std::to_string(a) + " is repeated");
      if (s[k] != 1)
        c.fail(errc::invalid_shape, c.in_name(0),
               "axis " + std::to_string(a) + " of " + shape_string(s) + " is not of size 1");
      drop[k] = true;
    }
  }
  ints od;
  for (std::size_t k = 0; k < s.rank(); ++k)
    if (!drop[k]) od.push_back(s[k]);
  return reshaped(x, checked_shape(c, od, c.n.output(0)));
}

result fold_concat(const ctx& c, std::span<const operand> in) {
  if (in.empty()) c.fail(errc::invalid_argument, {}, "needs at least one input");
  if (!c.attr("axis")) c.fail(errc::invalid_argument, {}, "needs the attribute 'axis'");
  const operand& first = need(c, in, 0);
  const shape& s0 = first.value->shape();
  if (s0.rank() == 0) c.fail(errc::invalid_shape, c.in_name(0), "inputs must have rank 1 or more");
  const std::size_t axis = norm_axis(c, c.attr_int("axis", 0), s0.rank());
  ints od = dims_of(s0);
  od[axis] = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const operand& v = need(c, in, i);
    const shape& s = v.value->shape();
    if (v.value->type() != first.value->type()) c.fail(errc::invalid_dtype, c.in_name(i), "inputs must have one dtype");
    bool same = s.rank() == s0.rank();
    for (std::size_t k = 0; same && k < s.rank(); ++k) same = k == axis || s[k] == s0[k];
    if (!same)
      c.fail(
          errc::invalid_shape, c.in_name(i),
          "input " + shape_string(s) + " does not match " + shape_string(s0) + " outside axis " + std::to_string(axis));
    if (__builtin_add_overflow(od[axis], s[axis], &od[axis]))
      c.fail(errc::size_overflow, c.n.output(0), "the concatenated axis overflows");
  }
  const shape os = checked_shape(c, od, c.n.output(0));
  if (!fits(os)) return too_large();
  tensor out(os, first.value->type());
  std::int64_t outer = 1;
  for (std::size_t k = 0; k < axis; ++k) outer *= s0[k];
  std::int64_t o = 0;
  for (std::int64_t a = 0; a < outer; ++a)
    for (const auto& v : in) {
      // Each input contributes its slab of dims[axis:] for this outer index.
      const std::int64_t chunk = outer ? v.value->elements() / outer : 0;
      for (std::int64_t b = 0; b < chunk; ++b) copy_element(out, o++, *v.value, a * chunk + b);
    }
  return host_value{std::move(out)};
}

result fold_reshape(const ctx& c, std::span<const operand> in) {
  const operand& x = need(c, in, 0);
  const ints target = int_list(c, need(c, in, 1), 1);
  const shape& s = x.value->shape();
  // A 0 copies the input's dimension unless allowzero (opset 14) makes it a real 0; one -1 is
  // inferred from the rest.
  const bool allowzero = c.attr_int("allowzero", 0) != 0;
  ints od(target.size());
  std::int64_t known = 1;
  int infer = -1;
  for (std::size_t k = 0; k < target.size(); ++k) {
    std::int64_t d = target[k];
    if (d == 0 && !allowzero) {
      if (k >= s.rank())
        c.fail(errc::invalid_argument, c.in_name(1),
               "target dimension " + std::to_string(k) + " is 0 (copy) but the input has rank " +
                   std::to_string(s.rank()));
      d = s[k];
    }
    if (d == -1) {
      if (infer >= 0) c.fail(errc::invalid_argument, c.in_name(1), "the target shape has more than one -1");
      infer = static_cast<int>(k);
    } else if (d < 0) {
      c.fail(errc::invalid_argument, c.in_name(1), "target dimension " + std::to_string(d) + " is negative");
    } else if (__builtin_mul_overflow(known, d, &known)) {
      c.fail(errc::size_overflow, c.in_name(1), "the target shape's element count overflows");
    }
    od[k] = d;
  }
  const std::int64_t n = x.value->elements();
  if (infer >= 0) {
    if (known == 0 || n % known)
      c.fail(errc::invalid_shape, c.in_name(1),
             "cannot infer the -1 of the target shape for " + std::to_string(n) + " elements");
    od[static_cast<std::size_t>(infer)] = n / known;
  } else if (known != n) {
    c.fail(errc::invalid_shape, c.in_name(1),
           "the target shape holds " + std::to_string(known) + " elements, the input " + shape_string(s));
  }
  return reshaped(x, checked_shape(c, od, c.n.output(0)));
}

result fold_slice(const ctx& c, std::span<const operand> in, std::int64_t opset) {
  const operand& x = need(c, in, 0);
  const shape& s = x.value->shape();
  ints starts, ends, axes, steps;
  if (opset >= 10) {
    starts = int_list(c, need(c, in, 1), 1);
    ends = int_list(c, need(c, in, 2), 2);
    if (in.size() > 3 && in[3].value) axes = int_list(c, in[3], 3);
    if (in.size() > 4 && in[4].value) steps = int_list(c, in[4], 4);
  } else {
    starts = c.attr_ints("starts").value_or(ints{});
    ends = c.attr_ints("ends").value_or(ints{});
    axes = c.attr_ints("axes").value_or(ints{});
  }
  if (axes.empty())
    for (std::size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<std::int64_t>(k));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    c.fail(errc::invalid_argument, {}, "starts, ends, axes and steps must have one length");
  // Unsliced axes keep everything.
  ints first(s.rank(), 0), step(s.rank(), 1), count = dims_of(s);
  std::vector<bool> seen(s.rank(), false);
  for (std::size_t i = 0; i < starts.size(); ++i) {
    const std::size_t a = norm_axis(c, axes[i], s.rank());
    if (seen[a]) c.fail(errc::invalid_argument, {}, "axis " + std::to_string(axes[i]) + " is repeated");
    seen[a] = true;
    const std::int64_t dim = s[a], st = steps[i];
    if (st == 0) c.fail(errc::invalid_argument, {}, "a step is 0");
    // onnx.ai Slice: negative starts and ends count from the back; then starts clamp to
    // [0, dim] and ends to [0, dim] for a positive step, both to [-1, dim-1] for a negative one
    // (-1 meaning before the first element), as Python slicing does.
    std::int64_t b = starts[i] < 0 ? starts[i] + dim : starts[i];
    std::int64_t e = ends[i] < 0 ? ends[i] + dim : ends[i];
    std::int64_t len = 0;
    if (st > 0) {
      b = std::clamp<std::int64_t>(b, 0, dim);
      e = std::clamp<std::int64_t>(e, 0, dim);
      if (e > b)
        len = static_cast<std::int64_t>(static_cast<std::uint64_t>(e - b - 1) / static_cast<std::uint64_t>(st)) + 1;
    } else {
      b = std::clamp<std::int64_t>(b, -1, dim - 1);
      e = std::clamp<std::int64_t>(e, -1, dim - 1);
      // -st would overflow for INT64_MIN: the magnitude is taken unsigned.
      const std::uint64_t mag = -static_cast<std::uint64_t>(st);
      if (b > e) len = static_cast<std::int64_t>(static_cast<std::uint64_t>(b - e - 1) / mag) + 1;
    }
    first[a] = b;
    step[a] = st;
    count[a] = len;
  }
  const shape os = checked_shape(c, count, c.n.output(0));
  if (!fits(os)) return too_large();
  tensor out(os, x.value->type());
  for (std::int64_t i = 0; i < out.elements(); ++i) {
    std::int64_t rest = i, src = 0, stride = 1;
    for (std::size_t k = s.rank(); k-- > 0;) {
      const std::int64_t coord = rest % os[k];
      rest /= os[k];
      src += (first[k] + coord * step[k]) * stride;
      stride *= s[k];
    }
    copy_element(out, i, *x.value, src);
  }
  return host_value{std::move(out)};
}

result fold_constant_of_shape(const ctx& c, std::span<const operand> in) {
  const shape os = checked_shape(c, int_list(c, need(c, in, 0), 0), c.n.output(0));
  if (!fits(os)) return too_large();
  // The value: a one-element tensor attribute, float 0 when absent.
  host_value fill{tensor(shape{}, dtype::f32)};
  if (const auto* a = c.attr("value")) {
    if (a->type() != ::onnx::AttributeProto::TENSOR)
      c.fail(errc::invalid_argument, {}, "attribute 'value' is not a TENSOR");
    fill = to_host_value(a->t());
    if (fill.value.elements() != 1) c.fail(errc::invalid_argument, {}, "attribute 'value' must have one element");
  }
  tensor out(os, fill.value.type());
  for (std::int64_t i = 0; i < out.elements(); ++i) copy_element(out, i, fill.value, 0);
  return host_value{std::move(out)};
}

result fold_range(const ctx& c, std::span<const operand> in) {
  const tensor& start = *need(c, in, 0).value;
  const tensor& limit = *need(c, in, 1).value;
  const tensor& delta = *need(c, in, 2).value;
  for (std::size_t i = 0; i < 3; ++i) {
    const operand& v = need(c, in, i);
    if (v.value->elements() != 1 || v.value->shape().rank() > 1)
      c.fail(errc::invalid_shape, c.in_name(i), "input '" + c.in_name(i) + "' must be a scalar");
    if (v.value->type() != start.type() || is_bool(v))
      c.fail(errc::invalid_dtype, c.in_name(i), "start, limit and delta must have one numeric dtype");
  }
  const dtype t = start.type();
  if (t == dtype::i64 || t == dtype::i32) {
    const std::int64_t b = int_at(start, 0), e = int_at(limit, 0), d = int_at(delta, 0);
    if (d == 0) c.fail(errc::invalid_argument, c.in_name(2), "delta is 0");
    // count = max(ceil((limit - start) / delta), 0), in unsigned arithmetic: limit - start may
    // not fit in std::int64_t.
    std::uint64_t count = 0;
    if (d > 0 && e > b)
      count = (static_cast<std::uint64_t>(e) - static_cast<std::uint64_t>(b) - 1) / static_cast<std::uint64_t>(d) + 1;
    if (d < 0 && b > e)
      count = (static_cast<std::uint64_t>(b) - static_cast<std::uint64_t>(e) - 1) / -static_cast<std::uint64_t>(d) + 1;
    if (count > static_cast<std::uint64_t>(max_fold_elements)) return too_large();
    tensor out(shape{static_cast<std::int64_t>(count)}, t);
    // start + i*delta stays between start and limit, so modular arithmetic gives it exactly.
    for (std::uint64_t i = 0; i < count; ++i)
      put_int(out, static_cast<std::int64_t>(i),
              static_cast<std::int64_t>(static_cast<std::uint64_t>(b) + i * static_cast<std::uint64_t>(d)));
    return host_value{std::move(out)};
  }
  if (t != dtype::f32) c.fail(errc::not_supported, c.in_name(0), "a Range in " + std::string(to_string(t)));
  // onnx.ai Range: number_of_elements = max(ceil((limit - start) / delta), 0) and
  // output[i] = start + i * delta, each step in the inputs' type.
  const auto b = static_cast<float>(start.get(0)), e = static_cast<float>(limit.get(0)),
             d = static_cast<float>(delta.get(0));
  if (d == 0) c.fail(errc::invalid_argument, c.in_name(2), "delta is 0");
  const float diff = e - b;
  const float q = diff / d;
  if (!std::isfinite(q))
    c.fail(errc::invalid_argument, {}, "the element count of start, limit and delta is not finite");
  const float count = std::max(std::ceil(q), 0.0f);
  if (count > static_cast<float>(max_fold_elements)) return too_large();
  tensor out(shape{static_cast<std::int64_t>(count)}, t);
  for (std::int64_t i = 0; i < out.elements(); ++i) {
    const float step = static_cast<float>(i) * d;
    out.set(i, b + step);
  }
  return host_value{std::move(out)};
}

// Cast, as numpy's astype (the reference) but for integers, which saturate into a narrower one as
// the cast kernel does (kernels::saturate_int); floats truncate toward zero into integers,
// anything nonzero is true.
result fold_cast(const ctx& c, const operand& x) {
  const std::int64_t to_code = c.attr_int("to", 0);
  const auto to = dtype_from_onnx(to_code);
  if (!to) c.fail(errc::not_supported, c.n.output(0), "Cast to ONNX type " + std::to_string(to_code));
  const bool to_bool = *to == dtype::boolean;
  if (!fits(x.value->shape())) return too_large();
  const dtype from = x.value->type();
  tensor out(x.value->shape(), *to);
  for (std::int64_t i = 0; i < out.elements(); ++i) {
    if (to_bool) {
      put_int(out, i, x.value->get(i) != 0 ? 1 : 0);  // NaN is nonzero: true
    } else if (is_integer(from) && is_integer(*to)) {
      put_int(out, i, kernels::saturate_int(from, int_at(*x.value, i), *to));
    } else if (from == dtype::u64) {
      const auto v = static_cast<std::uint64_t>(int_at(*x.value, i));
      // As below, from the unsigned value.
      if (*to == dtype::f16 || *to == dtype::f64) out.set(i, static_cast<double>(v));
      else out.set(i, static_cast<double>(static_cast<float>(v)));
    } else if (is_integer(from)) {
      const std::int64_t v = int_at(*x.value, i);
      // One rounding from the integer to f32 (through double it could round twice past 2^53);
      // bf16 rounds from that f32, as the reference casts to bfloat16 through float32; f16
      // and f64 round from double, as numpy does.
      if (*to == dtype::f16 || *to == dtype::f64) out.set(i, static_cast<double>(v));
      else out.set(i, static_cast<double>(static_cast<float>(v)));
    } else if (is_integer(*to)) {
      const double v = x.value->get(i);
      // Float to integer truncates toward zero; out of the target's range it is undefined in
      // ONNX (and in C++), so refused.
      const double lo = is_unsigned(*to)    ? 0.0
                        : *to == dtype::i8  ? -128.0
                        : *to == dtype::i16 ? -32768.0
                        : *to == dtype::i32 ? -2147483648.0
                                            : -9223372036854775808.0;
      const double hi = *to == dtype::u8    ? 256.0
                        : *to == dtype::i8  ? 128.0
                        : *to == dtype::i16 ? 32768.0
                        : *to == dtype::u16 ? 65536.0
                        : *to == dtype::i32 ? 2147483648.0
                        : *to == dtype::u32 ? 4294967296.0
                        : *to == dtype::u64 ? 18446744073709551616.0
                                            : 9223372036854775808.0;
      const double tv = std::trunc(v);
      if (!(tv >= lo && tv < hi))
        c.fail(errc::invalid_argument, c.in_name(0),
               "element " + std::to_string(i) + " (" + std::to_string(v) + ") is outside " +
                   std::string(to_string(*to)) + "'s range");
      put_int(out, i,
              *to == dtype::u64 ? static_cast<std::int64_t>(static_cast<std::uint64_t>(tv))
                                : static_cast<std::int64_t>(tv));
    } else {
      // Float to float: one correctly rounded conversion (the source is exact in double).
      out.set(i, x.value->get(i));
    }
  }
  return host_value{std::move(out)};
}

result fold_expand(const ctx& c, std::span<const operand> in) {
  const operand& x = need(c, in, 0);
  const shape target = checked_shape(c, int_list(c, need(c, in, 1), 1), c.in_name(1));
  const shape* shapes[] = {&x.value->shape(), &target};
  const shape os = broadcast(c, shapes);
  if (!fits(os)) return too_large();
  tensor out(os, x.value->type());
  for (std::int64_t i = 0; i < out.elements(); ++i)
    copy_element(out, i, *x.value, broadcast_index(os, x.value->shape(), i));
  return host_value{std::move(out)};
}

// Add, Sub, Mul, Div and Equal over broadcast operands of one dtype.
result fold_binary(const ctx& c, std::span<const operand> in) {
  const operand& a = need(c, in, 0);
  const operand& b = need(c, in, 1);
  const std::string& op = c.n.op_type();
  const bool equal = op == "Equal";
  if (a.value->type() != b.value->type())
    c.fail(errc::invalid_dtype, c.in_name(1), "the operands have different dtypes");
  if (is_bool(a) && !equal) c.fail(errc::invalid_dtype, c.in_name(0), "bool operands");
  const shape* shapes[] = {&a.value->shape(), &b.value->shape()};
  const shape os = broadcast(c, shapes);
  if (!fits(os)) return too_large();
  const dtype t = a.value->type();
  tensor out(os, equal ? dtype::boolean : t);
  for (std::int64_t i = 0; i < out.elements(); ++i) {
    const std::int64_t ia = broadcast_index(os, a.value->shape(), i), ib = broadcast_index(os, b.value->shape(), i);
    if (is_integer(t)) {
      const std::int64_t x = int_at(*a.value, ia), y = int_at(*b.value, ib);
      if (equal) {
        put_int(out, i, x == y);
        continue;
      }
      // Two's complement wrap-around, as numpy (the reference) and onnxruntime compute; signed
      // overflow would be undefined, unsigned arithmetic is not.
      const auto ux = static_cast<std::uint64_t>(x), uy = static_cast<std::uint64_t>(y);
      std::int64_t r = 0;
      if (op == "Add") r = static_cast<std::int64_t>(ux + uy);
      else if (op == "Sub") r = static_cast<std::int64_t>(ux - uy);
      else if (op == "Mul") r = static_cast<std::int64_t>(ux * uy);
      else {
        if (y == 0) c.fail(errc::invalid_argument, c.in_name(1), "integer division by zero");
        // Integer Div truncates toward zero; INT64_MIN / -1 wraps to INT64_MIN. A u64 divides
        // as unsigned (its bits as int64 would be negative from 2^63).
        if (t == dtype::u64) r = static_cast<std::int64_t>(ux / uy);
        else r = y == -1 ? static_cast<std::int64_t>(-ux) : x / y;
      }
      put_int(out, i, r);
    } else {
      const double x = a.value->get(ia), y = b.value->get(ib);
      if (equal) {
        put_int(out, i, x == y);
        continue;
      }
      // In double, rounded once to the dtype: for one +, -, * or / of f32 (or narrower) operands
      // that is the correctly rounded result in the dtype, double having more than twice their
      // precision plus two bits.
      const double r = op == "Add" ? x + y : op == "Sub" ? x - y : op == "Mul" ? x * y : x / y;
      out.set(i, r);
    }
  }
  return host_value{std::move(out)};
}

// Neg: ONNX's function bodies negate the axis counts they compute from a shape (the expanded
// LayerNormalization's "NumReducedAxes"), which then size a ConstantOfShape.
result fold_neg(const ctx& c, std::span<const operand> in) {
  const operand& x = need(c, in, 0);
  if (is_bool(x)) c.fail(errc::invalid_dtype, c.in_name(0), "bool operand");
  const dtype t = x.value->type();
  if (!fits(x.value->shape())) return too_large();
  tensor out(x.value->shape(), t);
  for (std::int64_t i = 0; i < out.elements(); ++i) {
    if (is_integer(t)) {
      // 0 - x in unsigned arithmetic: -INT64_MIN wraps to INT64_MIN, as numpy's does.
      put_int(out, i, static_cast<std::int64_t>(std::uint64_t{0} - static_cast<std::uint64_t>(int_at(*x.value, i))));
    } else {
      out.set(i, -x.value->get(i));
    }
  }
  return host_value{std::move(out)};
}

result fold_where(const ctx& c, std::span<const operand> in) {
  const operand& cond = need(c, in, 0);
  const operand& x = need(c, in, 1);
  const operand& y = need(c, in, 2);
  if (!is_bool(cond)) c.fail(errc::invalid_dtype, c.in_name(0), "the condition must be bool");
  if (x.value->type() != y.value->type()) c.fail(errc::invalid_dtype, c.in_name(2), "X and Y have different dtypes");
  const shape* shapes[] = {&cond.value->shape(), &x.value->shape(), &y.value->shape()};
  const shape os = broadcast(c, shapes);
  if (!fits(os)) return too_large();
  tensor out(os, x.value->type());
  for (std::int64_t i = 0; i < out.elements(); ++i) {
    const bool pick_x = int_at(*cond.value, broadcast_index(os, cond.value->shape(), i)) != 0;
    const operand& from = pick_x ? x : y;
    copy_element(out, i, *from.value, broadcast_index(os, from.value->shape(), i));
  }
  return host_value{std::move(out)};
}

// Min and Max of broadcast operands of one dtype (onnx.ai: numpy.minimum or numpy.maximum over
// the inputs in turn): integers exactly, floats with a NaN operand giving NaN as numpy's does. A
// TopK's k computed as the Min of a static dimension and a constant folds so.
result fold_min_max(const ctx& c, std::span<const operand> in) {
  const operand& first = need(c, in, 0);
  std::vector<const shape*> shapes;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const operand& v = need(c, in, i);
    if (v.value->type() != first.value->type())
      c.fail(errc::invalid_dtype, c.in_name(i), "the operands have different dtypes");
    shapes.push_back(&v.value->shape());
  }
  if (is_bool(first)) c.fail(errc::invalid_dtype, c.in_name(0), "bool operands");
  const shape os = broadcast(c, shapes);
  if (!fits(os)) return too_large();
  const bool min = c.n.op_type() == "Min";
  const dtype t = first.value->type();
  tensor out(os, t);
  for (std::int64_t i = 0; i < out.elements(); ++i) {
    const auto at = [&](std::size_t k) { return broadcast_index(os, in[k].value->shape(), i); };
    if (is_integer(t)) {
      std::int64_t r = int_at(*first.value, at(0));
      for (std::size_t k = 1; k < in.size(); ++k) {
        const std::int64_t v = int_at(*in[k].value, at(k));
        r = min ? std::min(r, v) : std::max(r, v);
      }
      put_int(out, i, r);
    } else {
      // Every operand is exact in double and the result is one of them: no rounding.
      double r = first.value->get(at(0));
      for (std::size_t k = 1; k < in.size(); ++k) {
        const double v = in[k].value->get(at(k));
        if (std::isnan(r) || std::isnan(v)) r = std::isnan(r) ? r : v;
        else r = min ? std::min(r, v) : std::max(r, v);
      }
      out.set(i, r);
    }
  }
  return host_value{std::move(out)};
}

// Ceil and Relu: Range's function body (onnx.ai Range, its expanded form) computes its Loop's
// trip count as Cast(Relu(Ceil((limit - start) / delta))); folded, the Loop unrolls at import.
// Relu is numpy.maximum(x, 0) (the reference's), which keeps a NaN; of an unsigned integer it is
// the value. Ceil of a float is exact in double and in the float's own dtype; Ceil of an integer
// is no ONNX operator, so it is left to the graph, which reports it.
result fold_ceil_relu(const ctx& c, std::span<const operand> in) {
  const operand& x = need(c, in, 0);
  if (is_bool(x)) c.fail(errc::invalid_dtype, c.in_name(0), "bool operand");
  const dtype t = x.value->type();
  const bool ceil = c.n.op_type() == "Ceil";
  if (ceil && !is_float(t)) return result{};
  if (!fits(x.value->shape())) return too_large();
  tensor out(x.value->shape(), t);
  const bool is_unsigned = t == dtype::u8 || t == dtype::u16 || t == dtype::u32 || t == dtype::u64;
  for (std::int64_t i = 0; i < out.elements(); ++i) {
    if (is_unsigned) {
      copy_element(out, i, *x.value, i);
    } else if (is_integer(t)) {
      put_int(out, i, std::max<std::int64_t>(int_at(*x.value, i), 0));
    } else {
      const double v = x.value->get(i);
      out.set(i, ceil ? std::ceil(v) : v < 0 ? 0.0 : v);
    }
  }
  return host_value{std::move(out)};
}

// DequantizeLinear of constants (a quantized weight and its scale): y = (x - zero_point) * scale,
// per tensor or per axis, every element by kernels::dequantize_element, the kernel's own
// arithmetic, stored to scale's dtype as the kernel stores it, so that the folded weight is what
// the kernel would compute on every run. A form the kernel does not take (another dtype, blocked
// quantization, operands that do not fit) is not folded: the graph's DequantizeLinear reports it.
result fold_dequantize(const ctx& c, std::span<const operand> in) {
  const tensor* x = !in.empty() ? in[0].value : nullptr;
  const tensor* scale = in.size() > 1 ? in[1].value : nullptr;
  const tensor* zp = in.size() > 2 ? in[2].value : nullptr;
  const auto left_to_graph = [] { return result{}; };
  if (!x || !scale || (x->type() != dtype::i8 && x->type() != dtype::u8 && x->type() != dtype::i32) ||
      !is_float(scale->type()) || (zp && zp->type() != x->type()) || c.attr("block_size") || c.attr("output_dtype"))
    return left_to_graph();
  const bool per_axis = scale->elements() != 1;
  std::size_t inner = 1, dim = 1;
  if (per_axis) {
    const auto rank = static_cast<std::int64_t>(x->shape().rank());
    std::int64_t axis = c.attr_int("axis", 1);
    if (axis < 0) axis += rank;
    if (scale->shape().rank() != 1 || axis < 0 || axis >= rank ||
        scale->shape()[0] != x->shape()[static_cast<std::size_t>(axis)])
      return left_to_graph();
    dim = static_cast<std::size_t>(scale->shape()[0]);
    for (auto d = static_cast<std::size_t>(axis) + 1; d < x->shape().rank(); ++d)
      inner *= static_cast<std::size_t>(x->shape()[d]);
  }
  if (zp && !(zp->shape() == scale->shape())) return left_to_graph();
  if (!fits(x->shape())) return too_large();
  tensor out(x->shape(), scale->type());
  for (std::int64_t i = 0; i < out.elements(); ++i) {
    const auto k = static_cast<std::int64_t>(per_axis ? (static_cast<std::size_t>(i) / inner) % dim : 0);
    const float v =
        kernels::dequantize_element(x->get_int(i), zp ? zp->get_int(k) : 0, static_cast<float>(scale->get(k)));
    out.set(i, v);  // rounded to scale's dtype from float, as the kernel's store rounds
  }
  return host_value{std::move(out)};
}

// A scalar input of a signal operator (a window's size, MelWeightMatrix's parameters): one value.
const tensor& scalar_input(const ctx& c, std::span<const operand> in, std::size_t i, bool integer) {
  const tensor& v = *need(c, in, i).value;
  if (v.elements() != 1 || v.shape().rank() > 1)
    c.fail(errc::invalid_shape, c.in_name(i), "input '" + c.in_name(i) + "' must be a scalar");
  if (integer != is_integer(v.type()) || v.type() == dtype::boolean)
    c.fail(errc::invalid_dtype, c.in_name(i),
           "input '" + c.in_name(i) + "' must be " + (integer ? "an integer" : "a float") + ", got " +
               std::string(to_string(v.type())));
  return v;
}

// output_datatype (FLOAT when absent): a numeric dtype npurt holds.
dtype output_datatype(const ctx& c) {
  const std::int64_t code = c.attr_int("output_datatype", 1);
  const auto t = dtype_from_onnx(code);
  if (!t || *t == dtype::boolean)
    c.fail(errc::not_supported, {}, "output_datatype " + std::to_string(code) + " is not a numeric dtype npurt holds");
  return *t;
}

// Writes v as NumPy's astype does: a float type rounds to nearest, an integer one truncates.
void put_value(tensor& out, std::int64_t i, double v) {
  if (is_float(out.type())) out.set(i, v);
  else put_int(out, i, std::isfinite(v) ? static_cast<std::int64_t>(std::trunc(v)) : 0);
}

// HannWindow, HammingWindow and BlackmanWindow (onnx.ai/onnx/operators/onnx__HannWindow.html and
// its siblings): w[n] for n in [0, size), with N = size (periodic, the default) or size - 1
// (symmetric), computed in float64 as onnx/reference/ops/op_*_window.py does on np.arange(size)
// and cast to output_datatype: Hann sin^2(pi n / N); Hamming 25/46 - 21/46 cos(2 pi n / N);
// Blackman 0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N). Hamming takes pi itself where the
// reference writes 3.1415: the spec's formula.
result fold_window(const ctx& c, std::span<const operand> in) {
  const std::int64_t size = int_at(scalar_input(c, in, 0, true), 0);
  if (size < 1)
    c.fail(size < 0 ? errc::invalid_argument : errc::not_supported, c.in_name(0),
           "size " + std::to_string(size) + (size < 0 ? " is negative" : " makes an empty window"));
  if (size > max_fold_elements) return too_large();
  const std::int64_t periodic = c.attr_int("periodic", 1);
  if (periodic != 0 && periodic != 1)
    c.fail(errc::invalid_argument, {}, "periodic must be 0 or 1, got " + std::to_string(periodic));
  const dtype t = output_datatype(c);
  const auto n_1 = static_cast<double>(periodic == 1 ? size : size - 1);
  const std::string& op = c.n.op_type();
  tensor out(shape{size}, t);
  for (std::int64_t n = 0; n < size; ++n) {
    const double x = static_cast<double>(n);
    double w = 0;
    if (op == "HannWindow") {
      const double s = std::sin(x * std::numbers::pi / n_1);
      w = s * s;
    } else if (op == "HammingWindow") {
      const double alpha = 25.0 / 46.0;
      w = alpha - std::cos(x * (2 * std::numbers::pi) / n_1) * (1 - alpha);
    } else {
      w = std::cos(x * (2 * std::numbers::pi) / n_1) * -0.5 + std::cos(x * (4 * std::numbers::pi) / n_1) * 0.08 + 0.42;
    }
    put_value(out, n, w);
  }
  return host_value{std::move(out)};
}

// MelWeightMatrix (onnx.ai/onnx/operators/onnx__MelWeightMatrix.html), as
// onnx/reference/ops/op_mel_weight_matrix.py computes it: num_mel_bins + 2 points evenly spaced on
// the mel scale (2595 log10(1 + f / 700)) from lower_edge_hertz, in steps of the range over
// num_mel_bins + 2, back to hertz, to the spectrogram bin floor((dft_length + 1) f / sample_rate);
// then triangles rising from each point's left neighbour and falling to its right one, in a
// [dft_length / 2 + 1, num_mel_bins] matrix. The edges' mel values are taken in the edges' float
// type, as NumPy computes on float32 scalars; the rest in float64.
result fold_mel_weight_matrix(const ctx& c, std::span<const operand> in) {
  const std::int64_t bins = int_at(scalar_input(c, in, 0, true), 0);
  const std::int64_t dft_length = int_at(scalar_input(c, in, 1, true), 0);
  const std::int64_t rate = int_at(scalar_input(c, in, 2, true), 0);
  const tensor& lower = scalar_input(c, in, 3, false);
  const tensor& upper = scalar_input(c, in, 4, false);
  if (bins < 1 || dft_length < 1 || rate < 1)
    c.fail(errc::invalid_argument,
           c.in_name(bins < 1         ? 0
                     : dft_length < 1 ? 1
                                      : 2),
           "num_mel_bins, dft_length and sample_rate must be positive, got " + std::to_string(bins) + ", " +
               std::to_string(dft_length) + " and " + std::to_string(rate));
  const std::int64_t spectrogram_bins = dft_length / 2 + 1;
  if (spectrogram_bins > max_fold_elements / bins || bins > max_fold_elements) return too_large();
  const auto mel = [&](const tensor& hz) -> double {
    if (hz.type() == dtype::f32) {
      const auto f = static_cast<float>(hz.get(0));
      return static_cast<double>(2595.0f * std::log10(1.0f + f / 700.0f));
    }
    return 2595.0 * std::log10(1.0 + hz.get(0) / 700.0);
  };
  const double low = mel(lower), high = mel(upper);
  const double step = (high - low) / static_cast<double>(bins + 2);
  std::vector<std::int64_t> points(static_cast<std::size_t>(bins + 2));
  for (std::int64_t i = 0; i < bins + 2; ++i) {
    const double m = static_cast<double>(i) * step + low;
    const double hz = 700.0 * (std::pow(10.0, m / 2595.0) - 1.0);
    const double bin = std::floor(static_cast<double>(dft_length + 1) * hz / static_cast<double>(rate));
    if (!std::isfinite(bin) || bin < 0 || bin >= static_cast<double>(spectrogram_bins))
      c.fail(errc::invalid_argument, c.in_name(4),
             "the edges put a mel point at spectrogram bin " + std::to_string(bin) + ", outside [0, " +
                 std::to_string(spectrogram_bins) + ")");
    points[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(bin);
  }
  std::vector<double> w(static_cast<std::size_t>(spectrogram_bins * bins), 0.0);
  const auto at = [&](std::int64_t j, std::int64_t i) -> double& { return w[static_cast<std::size_t>(j * bins + i)]; };
  for (std::int64_t i = 0; i < bins; ++i) {
    const std::int64_t left = points[static_cast<std::size_t>(i)], centre = points[static_cast<std::size_t>(i + 1)],
                       right = points[static_cast<std::size_t>(i + 2)];
    if (centre == left) {
      at(centre, i) = 1;
    } else {
      for (std::int64_t j = left; j <= centre; ++j)
        at(j, i) = static_cast<double>(j - left) / static_cast<double>(centre - left);
    }
    for (std::int64_t j = centre; j < right; ++j)
      at(j, i) = static_cast<double>(right - j) / static_cast<double>(right - centre);
  }
  tensor out(shape{spectrogram_bins, bins}, output_datatype(c));
  for (std::size_t k = 0; k < w.size(); ++k) put_value(out, static_cast<std::int64_t>(k), w[k]);
  return host_value{std::move(out)};
}

// Operators whose output's shape depends on their inputs' values (shape_depends_on_data). Each
// returns one value per output, or nullopt when one would hold more than max_fold_elements.
using values = std::vector<host_value>;

std::optional<values> one_value(result r) {
  if (!r) return std::nullopt;
  values v;
  v.push_back(std::move(*r));
  return v;
}

// NonZero (onnx.ai/onnx/operators/onnx__NonZero.html, numpy.nonzero): the coordinates of the
// nonzero elements in row-major order, one row per dimension: [rank, count] int64. A float is
// nonzero when it compares unequal to 0, as numpy's test is: NaN is nonzero, -0.0 is not.
std::optional<values> fold_nonzero(const ctx& c, std::span<const operand> in) {
  const tensor& x = *need(c, in, 0).value;
  const shape& s = x.shape();
  // numpy.nonzero of a 0-d array is deprecated (an error from numpy 2.1): ONNX's output has one
  // row per dimension, and a scalar has none to hold a coordinate.
  if (s.rank() == 0) c.fail(errc::invalid_shape, c.in_name(0), "X is a scalar; NonZero takes rank 1 or more");
  const bool floating = is_float(x.type());
  const auto nonzero = [&](std::int64_t i) { return floating ? x.get(i) != 0.0 : int_at(x, i) != 0; };
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < x.elements(); ++i) count += nonzero(i) ? 1 : 0;
  const shape os = checked_shape(c, {static_cast<std::int64_t>(s.rank()), count}, c.n.output(0));
  if (!fits(os)) return std::nullopt;
  tensor out(os, dtype::i64);
  std::int64_t k = 0;
  for (std::int64_t i = 0; i < x.elements(); ++i) {
    if (!nonzero(i)) continue;
    std::int64_t rest = i;
    for (std::size_t d = s.rank(); d-- > 0;) {
      put_int(out, static_cast<std::int64_t>(d) * count + k, rest % s[d]);
      rest /= s[d];
    }
    ++k;
  }
  return one_value(host_value{std::move(out)});
}

// Compress's selection (onnx.ai/onnx/operators/onnx__Compress.html, numpy.compress): the indices
// along the axis, or of the flattened input without one, whose condition element is true.
compress_selection compress_select(const ctx& c, const tensor& cond, const shape& data) {
  if (cond.type() != dtype::boolean)
    c.fail(errc::invalid_dtype, c.in_name(1),
           "the condition '" + c.in_name(1) + "' must be bool, not " + std::string(to_string(cond.type())));
  if (cond.shape().rank() != 1)
    c.fail(errc::invalid_shape, c.in_name(1),
           "the condition '" + c.in_name(1) + "' must be 1-D, not " + shape_string(cond.shape()));
  compress_selection sel;
  std::int64_t extent = data.elements();
  if (c.attr("axis")) {
    sel.axis = norm_axis(c, c.attr_int("axis", 0), data.rank());
    extent = data[*sel.axis];
  }
  // numpy.compress leaves out what a shorter condition does not reach; a longer one is an error.
  if (cond.elements() > extent)
    c.fail(errc::invalid_shape, c.in_name(1),
           "the condition '" + c.in_name(1) + "' has " + std::to_string(cond.elements()) + " elements, more than the " +
               std::to_string(extent) +
               (sel.axis ? " of axis " + std::to_string(*sel.axis) + " of " + shape_string(data)
                         : " of the flattened input " + shape_string(data)));
  for (std::int64_t i = 0; i < cond.elements(); ++i)
    if (int_at(cond, i) != 0) sel.indices.push_back(i);
  return sel;
}

// Compress of constants: the selected indices gathered along the axis, or along the flattened
// input's only one.
std::optional<values> fold_compress(const ctx& c, std::span<const operand> in) {
  const operand& data = need(c, in, 0);
  const compress_selection sel = compress_select(c, *need(c, in, 1).value, data.value->shape());
  tensor idx(shape{static_cast<std::int64_t>(sel.indices.size())}, dtype::i64);
  for (std::size_t k = 0; k < sel.indices.size(); ++k) put_int(idx, static_cast<std::int64_t>(k), sel.indices[k]);
  if (sel.axis) {
    const operand gathered[] = {data, operand{&idx}};
    return one_value(fold_gather(c, gathered));
  }
  auto flat = reshaped(data, shape{data.value->elements()});
  if (!flat) return std::nullopt;
  // fold_gather reads the node's axis, absent here: 0, the flattened input's axis.
  const operand gathered[] = {operand{&flat->value}, operand{&idx}};
  return one_value(fold_gather(c, gathered));
}

// Unique (onnx.ai/onnx/operators/onnx__Unique.html) as onnx/reference/ops/op_unique.py computes
// it with numpy.unique(return_index, return_inverse, return_counts): the items are the elements of
// the flattened input without an axis, the slices along the axis with one; they are sorted stably
// (numpy's mergesort, which return_index asks for), lexicographically within a slice, numbers in
// order and NaN after them; Y holds each group of equal items once, as its first occurrence,
// `indices` those occurrences, inverse_indices every item's group, counts the groups' sizes.
// sorted = 0 orders the groups by first occurrence instead. Without an axis NaNs are equal (numpy's
// equal_nan); with one numpy compares the slices as records, field by field with ==, so a slice
// holding NaN equals no other. Y with sorted = 0 is taken along the axis of the flattened input or
// the given one, as the spec says (the reference takes it along axis 0 of the unflattened input).
std::optional<values> fold_unique(const ctx& c, std::span<const operand> in) {
  const tensor& x = *need(c, in, 0).value;
  const shape& s = x.shape();
  const dtype t = x.type();
  const std::int64_t sorted = c.attr_int("sorted", 1);
  if (sorted != 0 && sorted != 1)
    c.fail(errc::invalid_argument, {}, "sorted must be 0 or 1, got " + std::to_string(sorted));
  std::optional<std::size_t> axis;
  if (c.attr("axis")) axis = norm_axis(c, c.attr_int("axis", 0), s.rank());
  std::int64_t items = x.elements(), outer = 1, inner = 1;
  if (axis) {
    items = s[*axis];
    for (std::size_t k = 0; k < *axis; ++k) outer *= s[k];
    for (std::size_t k = *axis + 1; k < s.rank(); ++k) inner *= s[k];
  }
  const std::int64_t width = axis ? outer * inner : 1;
  // Element j of item `item`, as numpy.moveaxis(x, axis, 0).reshape(items, -1) orders them.
  const auto element = [&](std::int64_t item, std::int64_t j) {
    return axis ? ((j / inner) * items + item) * inner + j % inner : item;
  };
  const bool floating = is_float(t);
  const auto order = [&](std::int64_t a, std::int64_t b) -> int {
    if (floating) {
      const double u = x.get(a), v = x.get(b);
      if (std::isnan(u) || std::isnan(v)) return static_cast<int>(std::isnan(u)) - static_cast<int>(std::isnan(v));
      return static_cast<int>(u > v) - static_cast<int>(u < v);
    }
    if (t == dtype::u64) {
      const auto u = static_cast<std::uint64_t>(int_at(x, a)), v = static_cast<std::uint64_t>(int_at(x, b));
      return static_cast<int>(u > v) - static_cast<int>(u < v);
    }
    const std::int64_t u = int_at(x, a), v = int_at(x, b);
    return static_cast<int>(u > v) - static_cast<int>(u < v);
  };
  const auto compare = [&](std::int64_t p, std::int64_t q) {
    for (std::int64_t j = 0; j < width; ++j)
      if (const int r = order(element(p, j), element(q, j))) return r;
    return 0;
  };
  const auto same = [&](std::int64_t p, std::int64_t q) {
    if (compare(p, q) != 0) return false;
    if (!axis || !floating) return true;
    for (std::int64_t j = 0; j < width; ++j)
      if (std::isnan(x.get(element(p, j)))) return false;
    return true;
  };
  std::vector<std::int64_t> perm(static_cast<std::size_t>(items));
  for (std::int64_t k = 0; k < items; ++k) perm[static_cast<std::size_t>(k)] = k;
  std::stable_sort(perm.begin(), perm.end(), [&](std::int64_t p, std::int64_t q) { return compare(p, q) < 0; });
  std::vector<std::int64_t> first, counts, inverse(static_cast<std::size_t>(items));
  for (std::size_t k = 0; k < perm.size(); ++k) {
    if (k == 0 || !same(perm[k - 1], perm[k])) {
      first.push_back(perm[k]);
      counts.push_back(0);
    }
    inverse[static_cast<std::size_t>(perm[k])] = static_cast<std::int64_t>(first.size()) - 1;
    ++counts.back();
  }
  const auto groups = static_cast<std::int64_t>(first.size());
  if (sorted == 0) {
    // The groups by first occurrence: the reference's argsort of indices (no two are equal).
    std::vector<std::int64_t> by_first(first.size()), position(first.size());
    for (std::size_t g = 0; g < first.size(); ++g) by_first[g] = static_cast<std::int64_t>(g);
    std::sort(by_first.begin(), by_first.end(), [&](std::int64_t a, std::int64_t b) {
      return first[static_cast<std::size_t>(a)] < first[static_cast<std::size_t>(b)];
    });
    std::vector<std::int64_t> f(first.size()), n(first.size());
    for (std::size_t g = 0; g < first.size(); ++g) {
      const auto from = static_cast<std::size_t>(by_first[g]);
      position[from] = static_cast<std::int64_t>(g);
      f[g] = first[from];
      n[g] = counts[from];
    }
    first = std::move(f);
    counts = std::move(n);
    for (auto& v : inverse) v = position[static_cast<std::size_t>(v)];
  }
  ints yd{groups};
  if (axis) {
    yd = dims_of(s);
    yd[*axis] = groups;
  }
  const shape ys = checked_shape(c, yd, c.n.output(0));
  if (!fits(ys) || items > max_fold_elements) return std::nullopt;
  tensor y(ys, t);
  std::int64_t o = 0;
  for (std::int64_t a = 0; a < (axis ? outer : 1); ++a)
    for (std::int64_t g = 0; g < groups; ++g)
      for (std::int64_t b = 0; b < (axis ? inner : 1); ++b)
        copy_element(
            y, o++, x,
            axis ? (a * items + first[static_cast<std::size_t>(g)]) * inner + b : first[static_cast<std::size_t>(g)]);
  const auto list = [](const std::vector<std::int64_t>& v) {
    tensor r(shape{static_cast<std::int64_t>(v.size())}, dtype::i64);
    for (std::size_t k = 0; k < v.size(); ++k) put_int(r, static_cast<std::int64_t>(k), v[k]);
    return host_value{std::move(r)};
  };
  values r;
  r.push_back(host_value{std::move(y)});
  r.push_back(list(first));
  r.push_back(list(inverse));
  r.push_back(list(counts));
  return r;
}

// Whether box b is suppressed by box a, as the reference's suppress_by_iou decides it, in float32
// as NumPy computes on the float32 boxes: the intersection over union of the two exceeds the
// threshold, a box with no area or an empty intersection never suppressing. Python's max and min
// keep their first operand unless the second compares greater (less), and the reference's max_min
// orders a pair by >=: kept so, since the outcome with a NaN coordinate depends on it.
bool suppressed_by_iou(const float* a, const float* b, bool center_point_box, float threshold) {
  const auto py_max = [](float u, float v) { return v > u ? v : u; };
  const auto py_min = [](float u, float v) { return v < u ? v : u; };
  struct span_1d {
    float lo, hi;
  };
  const auto ordered = [](float u, float v) { return u >= v ? span_1d{v, u} : span_1d{u, v}; };
  span_1d x1{}, x2{}, y1{}, y2{};
  if (!center_point_box) {
    // [y1, x1, y2, x2], either corner first.
    x1 = ordered(a[1], a[3]), x2 = ordered(b[1], b[3]);
    y1 = ordered(a[0], a[2]), y2 = ordered(b[0], b[2]);
  } else {
    // [x_center, y_center, width, height].
    x1 = {a[0] - a[2] / 2, a[0] + a[2] / 2}, x2 = {b[0] - b[2] / 2, b[0] + b[2] / 2};
    y1 = {a[1] - a[3] / 2, a[1] + a[3] / 2}, y2 = {b[1] - b[3] / 2, b[1] + b[3] / 2};
  }
  const float ix_lo = py_max(x1.lo, x2.lo), ix_hi = py_min(x1.hi, x2.hi);
  if (ix_hi <= ix_lo) return false;
  const float iy_lo = py_max(y1.lo, y2.lo), iy_hi = py_min(y1.hi, y2.hi);
  if (iy_hi <= iy_lo) return false;
  const float inter = (ix_hi - ix_lo) * (iy_hi - iy_lo);
  if (inter <= 0) return false;
  const float area1 = (x1.hi - x1.lo) * (y1.hi - y1.lo), area2 = (x2.hi - x2.lo) * (y2.hi - y2.lo);
  const float uni = area1 + area2 - inter;
  if (area1 <= 0 || area2 <= 0 || uni <= 0) return false;
  return inter / uni > threshold;
}

// NonMaxSuppression's optional one-value inputs: absent or empty is the default (the reference
// ignores an empty one).
const tensor* nms_scalar(const ctx& c, std::span<const operand> in, std::size_t i, dtype want) {
  if (i >= in.size() || !in[i].value || in[i].value->elements() == 0) return nullptr;
  const tensor& v = *in[i].value;
  if (v.type() != want)
    c.fail(errc::invalid_dtype, c.in_name(i),
           "input '" + c.in_name(i) + "' must be " + std::string(to_string(want)) + ", not " +
               std::string(to_string(v.type())));
  if (v.elements() != 1)
    c.fail(errc::invalid_shape, c.in_name(i),
           "input '" + c.in_name(i) + "' must hold one value, not " + shape_string(v.shape()));
  return &v;
}

// NonMaxSuppression (onnx.ai/onnx/operators/onnx__NonMaxSuppression.html) as
// onnx/reference/ops/op_non_max_suppression.py computes it: for each batch, then each class, the
// boxes whose score exceeds score_threshold (every box without one) are taken by descending score,
// the lower box index first among equal scores, and each is kept unless its IoU with one kept
// before exceeds iou_threshold (default 0), until max_output_boxes_per_class (default 0, negative
// read as 0) are kept. Selected: [count, 3] int64 rows of (batch, class, box). A NaN score among
// the candidates has no place in that order (the reference's sort then depends on Python's
// algorithm): it is refused.
std::optional<values> fold_non_max_suppression(const ctx& c, std::span<const operand> in) {
  const tensor& boxes = *need(c, in, 0).value;
  const tensor& scores = *need(c, in, 1).value;
  for (std::size_t i = 0; i < 2; ++i)
    if (in[i].value->type() != dtype::f32)
      c.fail(errc::invalid_dtype, c.in_name(i),
             "input '" + c.in_name(i) + "' must be float32, not " + std::string(to_string(in[i].value->type())));
  const shape& bs = boxes.shape();
  const shape& ss = scores.shape();
  if (bs.rank() != 3 || bs[2] != 4)
    c.fail(errc::invalid_shape, c.in_name(0),
           "boxes must be [num_batches, spatial_dimension, 4], not " + shape_string(bs));
  if (ss.rank() != 3 || ss[0] != bs[0] || ss[2] != bs[1])
    c.fail(errc::invalid_shape, c.in_name(1),
           "scores must be [num_batches, num_classes, spatial_dimension] with boxes " + shape_string(bs) + ", not " +
               shape_string(ss));
  const std::int64_t center = c.attr_int("center_point_box", 0);
  if (center != 0 && center != 1)
    c.fail(errc::invalid_argument, {}, "center_point_box must be 0 or 1, got " + std::to_string(center));
  const tensor* max_t = nms_scalar(c, in, 2, dtype::i64);
  const tensor* iou_t = nms_scalar(c, in, 3, dtype::f32);
  const tensor* score_t = nms_scalar(c, in, 4, dtype::f32);
  const std::int64_t max_out = max_t ? std::max<std::int64_t>(int_at(*max_t, 0), 0) : 0;
  const float iou = iou_t ? static_cast<float>(iou_t->get(0)) : 0.0f;
  const std::int64_t batches = bs[0], classes = ss[1], count = bs[1];
  const float* box = static_cast<const float*>(boxes.data());
  const float* score = static_cast<const float*>(scores.data());
  std::vector<std::array<std::int64_t, 3>> selected;
  std::vector<std::int64_t> candidates, kept;
  for (std::int64_t b = 0; b < batches; ++b)
    for (std::int64_t k = 0; k < classes; ++k) {
      const float* sc = score + (b * classes + k) * count;
      candidates.clear();
      for (std::int64_t i = 0; i < count; ++i) {
        if (score_t && !(sc[i] > static_cast<float>(score_t->get(0)))) continue;
        if (std::isnan(sc[i]))
          c.fail(errc::invalid_argument, c.in_name(1),
                 "score of box " + std::to_string(i) + " (batch " + std::to_string(b) + ", class " + std::to_string(k) +
                     ") is NaN, which orders nowhere among the candidates");
        candidates.push_back(i);
      }
      std::sort(candidates.begin(), candidates.end(),
                [&](std::int64_t p, std::int64_t q) { return sc[p] > sc[q] || (sc[p] == sc[q] && p < q); });
      kept.clear();
      for (const std::int64_t i : candidates) {
        if (static_cast<std::int64_t>(kept.size()) >= max_out) break;
        const float* bi = box + (b * count + i) * 4;
        const bool suppressed = std::any_of(kept.begin(), kept.end(), [&](std::int64_t j) {
          return suppressed_by_iou(bi, box + (b * count + j) * 4, center == 1, iou);
        });
        if (suppressed) continue;
        kept.push_back(i);
        selected.push_back({b, k, i});
      }
    }
  const shape os = checked_shape(c, {static_cast<std::int64_t>(selected.size()), 3}, c.n.output(0));
  if (!fits(os)) return std::nullopt;
  tensor out(os, dtype::i64);
  for (std::size_t r = 0; r < selected.size(); ++r)
    for (std::size_t col = 0; col < 3; ++col) put_int(out, static_cast<std::int64_t>(r * 3 + col), selected[r][col]);
  return one_value(host_value{std::move(out)});
}

}  // namespace

bool is_foldable(std::string_view op_type) noexcept {
  return std::find(foldable_ops.begin(), foldable_ops.end(), op_type) != foldable_ops.end() || graph_computes(op_type);
}

bool needs_constant_inputs(std::string_view op_type) noexcept {
  return op_type == "HannWindow" || op_type == "HammingWindow" || op_type == "BlackmanWindow" ||
         op_type == "MelWeightMatrix";
}

bool reads_shape_only(std::string_view op_type) noexcept { return op_type == "Shape" || op_type == "Size"; }

std::optional<host_value> fold(const ::onnx::NodeProto& n, const std::string& node_name, std::int64_t opset,
                               std::span<const operand> inputs) {
  const ctx c{n, node_name};
  if (n.output_size() != 1 || n.output(0).empty())
    c.fail(errc::not_supported, {}, "folding takes exactly one named output");
  const std::string& t = n.op_type();
  if (t == "Shape") return fold_shape(c, *need(c, inputs, 0).value);
  if (t == "Size") {
    tensor out(shape{}, dtype::i64);
    put_int(out, 0, need(c, inputs, 0).value->shape().elements());
    return host_value{std::move(out)};
  }
  // Every other operator reads its inputs' data.
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].value && !inputs[i].value->is_host()) {
      if (graph_computes(t)) return std::nullopt;
      c.fail(errc::not_supported, c.in_name(i), "input '" + c.in_name(i) + "' has no data to fold");
    }
  if (t == "Min" || t == "Max") return fold_min_max(c, inputs);
  if (t == "DequantizeLinear") return fold_dequantize(c, inputs);
  if (t == "Gather") return fold_gather(c, inputs);
  if (t == "Unsqueeze") return fold_unsqueeze(c, inputs, opset);
  if (t == "Squeeze") return fold_squeeze(c, inputs, opset);
  if (t == "Concat") return fold_concat(c, inputs);
  if (t == "Reshape") return fold_reshape(c, inputs);
  if (t == "Slice") return fold_slice(c, inputs, opset);
  if (t == "ConstantOfShape") return fold_constant_of_shape(c, inputs);
  if (t == "Range") return fold_range(c, inputs);
  if (t == "Cast") return fold_cast(c, need(c, inputs, 0));
  if (t == "Expand") return fold_expand(c, inputs);
  if (t == "Identity") return reshaped(need(c, inputs, 0), need(c, inputs, 0).value->shape());
  if (t == "Where") return fold_where(c, inputs);
  if (t == "Neg") return fold_neg(c, inputs);
  if (t == "HannWindow" || t == "HammingWindow" || t == "BlackmanWindow") return fold_window(c, inputs);
  if (t == "MelWeightMatrix") return fold_mel_weight_matrix(c, inputs);
  if (t == "Ceil" || t == "Relu") return fold_ceil_relu(c, inputs);
  return fold_binary(c, inputs);
}

bool shape_depends_on_data(std::string_view op_type) noexcept {
  return op_type == "NonZero" || op_type == "Compress" || op_type == "Unique" || op_type == "NonMaxSuppression";
}

bool decides_shape(std::string_view op_type, std::size_t i) noexcept { return op_type != "Compress" || i == 1; }

std::optional<std::vector<host_value>> fold_shape_from_data(const ::onnx::NodeProto& n, const std::string& node_name,
                                                            std::span<const operand> inputs) {
  const ctx c{n, node_name};
  const std::string& t = n.op_type();
  const int outputs = t == "Unique" ? 4 : 1;
  if (n.output_size() < 1 || n.output_size() > outputs)
    c.fail(errc::invalid_argument, {},
           "has " + std::to_string(n.output_size()) + " outputs; it takes 1" +
               (outputs > 1 ? " to " + std::to_string(outputs) : std::string()));
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].value && !inputs[i].value->is_host())
      c.fail(errc::not_supported, c.in_name(i), "input '" + c.in_name(i) + "' has no data to fold");
  if (t == "NonZero") return fold_nonzero(c, inputs);
  if (t == "Compress") return fold_compress(c, inputs);
  if (t == "Unique") return fold_unique(c, inputs);
  return fold_non_max_suppression(c, inputs);
}

compress_selection select_compressed(const ::onnx::NodeProto& n, const std::string& node_name, const tensor& condition,
                                     const shape& data) {
  return compress_select(ctx{n, node_name}, condition, data);
}

}  // namespace npurt::onnx::folding

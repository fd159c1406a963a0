// bool tensors and the operators that make and read them (onnx.ai/onnx/operators: Equal, Less,
// LessOrEqual, Greater, GreaterOrEqual, Where, And, Or, Xor, Not, Cast to and from bool): host
// access, compiled runs against references written here from NumPy's semantics, fp16 sessions
// that leave bool and integer tensors alone, the typed errors, and a timing-only run.
#include <npurt/graph/session.hpp>

#include "helpers.hpp"

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

using namespace npurt;
using test::expect_graph_error;
using test::ints_tensor;

namespace {

// Element i of a bool run output as bool (the tensor's own view).
std::vector<bool> bool_values(const tensor& t) {
  const auto v = t.bools();
  return {v.begin(), v.end()};
}

}  // namespace

TEST_CASE("a bool tensor is fed and read as bools, one byte each, 0 or 1", "[graph][bool][tensor]") {
  const std::array<bool, 5> in{true, false, false, true, true};
  tensor t({5}, in);
  CHECK(t.type() == dtype::boolean);
  CHECK(t.bytes() == 5);
  CHECK(bool_values(t) == std::vector<bool>(in.begin(), in.end()));
  CHECK(t.to_vector() == std::vector<double>{1, 0, 0, 1, 1});
  // set() is NumPy's astype(bool): any nonzero value, NaN too, is true; the byte is 1.
  t.set(1, 0.5);
  t.set(2, std::nan(""));
  t.set(3, -0.0);
  CHECK(t.to_vector() == std::vector<double>{1, 1, 1, 0, 1});
  CHECK(static_cast<const std::uint8_t*>(t.data())[2] == 1);
  t.bools()[0] = false;
  CHECK(t.get(0) == 0);
  CHECK(to_string(dtype::boolean) == "bool");
  CHECK(size_of(dtype::boolean) == 1);
  // Through a device and back, unchanged.
  auto sys = test::make_system();
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  const tensor back = t.to_device(dev, s).to_host(s);
  CHECK(bool_values(back) == bool_values(t));
  // A float tensor has no bool view, a device tensor none on the host; the count of values must
  // match the shape.
  const tensor f({2}, dtype::f32);
  const tensor on_dev = t.to_device(dev, s);
  const std::array<bool, 2> two{true, false};
  const auto code_of = [](auto&& fn) {
    try {
      fn();
    } catch (const std::system_error& e) { return e.code(); }
    return std::error_code{};
  };
  CHECK(code_of([&] { (void)f.bools(); }) == errc::invalid_dtype);
  CHECK(code_of([&] { (void)on_dev.bools(); }) == errc::invalid_pointer);
  CHECK(code_of([&] { const tensor bad({3}, two); }) == errc::invalid_shape);
}

TEST_CASE("comparisons compare exactly in the operands' type, broadcast, and output bool", "[graph][bool][compare]") {
  // int64 above 2^53: 2^53 and 2^53 + 1 are one double, so a comparison through double would
  // call them equal.
  const std::int64_t big = std::int64_t{1} << 53;
  const std::vector<std::int64_t> av{big, big + 1}, bv{big + 1, big, -5};
  const std::array<std::pair<const char*, bool (*)(std::int64_t, std::int64_t)>, 5> ops{{
      {"Equal", [](std::int64_t x, std::int64_t y) { return x == y; }},
      {"Less", [](std::int64_t x, std::int64_t y) { return x < y; }},
      {"LessOrEqual", [](std::int64_t x, std::int64_t y) { return x <= y; }},
      {"Greater", [](std::int64_t x, std::int64_t y) { return x > y; }},
      {"GreaterOrEqual", [](std::int64_t x, std::int64_t y) { return x >= y; }},
  }};
  for (const auto& [op, ref] : ops) {
    CAPTURE(op);
    graph g("compare");
    // a [2, 1] against b [3]: the output is [2, 3].
    auto a = g.add_input("a", {2, 1}, dtype::i64);
    auto b = g.add_input("b", {3}, dtype::i64);
    g.set_output(g.add_op(op, {a, b}, {}, "y"));
    auto sys = test::make_system();
    session s{sys};
    // ints_tensor writes int64 through its bits; the [2] it makes is a [2, 1] by a byte copy.
    const tensor flat = ints_tensor(av);
    tensor a2({2, 1}, dtype::i64);
    std::memcpy(a2.data(), flat.data(), flat.bytes());
    const auto r = s.run(s.compile(g), {{"a", a2}, {"b", ints_tensor(bv)}});
    const tensor& y = r.outputs.at("y");
    REQUIRE(y.type() == dtype::boolean);
    REQUIRE(y.shape() == shape{2, 3});
    const auto got = bool_values(y);
    for (std::size_t i = 0; i < 2; ++i)
      for (std::size_t j = 0; j < 3; ++j) CHECK(got[i * 3 + j] == ref(av[i], bv[j]));
  }
}

TEST_CASE("Where, Not, And, Or, Xor and Cast compute a padding mask at run time", "[graph][bool][where]") {
  // ids [2, 4] with pad id 0: keep = Not(Equal(ids, 0)); And with a fed bool; Xor and Or of the
  // two; scores where keep, -inf elsewhere; the mask cast to float too.
  graph g("mask");
  auto ids = g.add_input("ids", {2, 4}, dtype::i64);
  auto allow = g.add_input("allow", {4}, dtype::boolean);
  auto scores = g.add_input("scores", {2, 4}, dtype::f32);
  auto pad = g.add_constant("pad", ints_tensor({0}));
  auto keep = g.add_op("Not", {g.add_op("Equal", {ids, pad}, {}, "is_pad")}, {}, "keep");
  auto both = g.add_op("And", {keep, allow}, {}, "both");
  g.set_output(both);
  g.set_output(g.add_op("Or", {keep, allow}, {}, "either"));
  g.set_output(g.add_op("Xor", {keep, allow}, {}, "one"));
  tensor ninf({1}, dtype::f32);
  ninf.set(0, -INFINITY);
  g.set_output(g.add_op("Where", {both, scores, g.add_constant("ninf", std::move(ninf))}, {}, "masked"));
  g.set_output(g.add_op("Cast", {both}, {{"to", std::int64_t{1}}}, "as_float"));
  g.set_output(g.add_op("Cast", {scores}, {{"to", std::int64_t{9}}}, "nonzero"));
  const std::vector<std::int64_t> idv{5, 0, 7, 0, 0, 3, 3, 9};
  const std::array<bool, 4> allowv{true, true, false, true};
  std::vector<double> sv = test::values(8, 42);
  sv[7] = 0.0;
  sv[6] = std::nan("");
  tensor idt({2, 4}, dtype::i64);
  for (std::int64_t i = 0; i < 8; ++i) idt.set(i, static_cast<double>(idv[static_cast<std::size_t>(i)]));
  for (const precision p : {precision::fp32, precision::fp16}) {
    CAPTURE(to_string(p));
    auto sys = test::make_system();
    session s{sys, {.precision = p}};
    const auto r =
        s.run(s.compile(g), {{"ids", idt}, {"allow", tensor({4}, allowv)}, {"scores", tensor({2, 4}, dtype::f32, sv)}});
    for (const char* name : {"both", "either", "one", "nonzero"}) CHECK(r.outputs.at(name).type() == dtype::boolean);
    const auto b = bool_values(r.outputs.at("both")), e = bool_values(r.outputs.at("either")),
               o = bool_values(r.outputs.at("one")), nz = bool_values(r.outputs.at("nonzero"));
    const auto masked = r.outputs.at("masked").to_vector(), as_float = r.outputs.at("as_float").to_vector();
    CHECK(r.outputs.at("masked").type() == dtype::f32);
    for (std::size_t i = 0; i < 8; ++i) {
      CAPTURE(i);
      const bool k = idv[i] != 0, al = allowv[i % 4];
      CHECK(b[i] == (k && al));
      CHECK(e[i] == (k || al));
      CHECK(o[i] == (k != al));
      CHECK(as_float[i] == ((k && al) ? 1.0 : 0.0));
      CHECK(nz[i] == (sv[i] != 0 || std::isnan(sv[i])));  // NumPy: NaN is true
      if (!(k && al)) {
        CHECK(masked[i] == -INFINITY);
      } else if (std::isnan(sv[i])) {
        CHECK(std::isnan(masked[i]));
      } else {
        // The f32 feed holds the score rounded to float; fp16 rounds it again on its way through
        // the compute type.
        CHECK(std::abs(masked[i] - double{static_cast<float>(sv[i])}) <= (p == precision::fp16 ? 1e-3 : 0.0));
      }
    }
  }
}

TEST_CASE("an fp16 session compares floats in f16 but keeps bool and integer tensors", "[graph][bool][precision]") {
  graph g("fp16");
  auto x = g.add_input("x", {4}, dtype::f32);
  auto n = g.add_input("n", {4}, dtype::i32);
  auto lim = g.add_constant("lim", tensor({1}, dtype::f32, {0.5}));
  auto ten = g.add_constant("ten", ints_tensor({10}, dtype::i32));
  auto big = g.add_op("Greater", {x, lim}, {}, "big");
  auto small = g.add_op("Less", {n, ten}, {}, "small");
  g.set_output(g.add_op("Where", {g.add_op("And", {big, small}, {}, "both"), n, ten}, {}, "picked"));
  auto sys = test::make_system();
  session s{sys, {.precision = precision::fp16}};
  tensor nt({4}, dtype::i32);
  // 16777217 is not an f16 (nor an f32) value: an integer routed through a float type would change.
  const std::vector<double> nv{3, 16777217, 12, 2};
  for (std::int64_t i = 0; i < 4; ++i) nt.set(i, nv[static_cast<std::size_t>(i)]);
  const auto r = s.run(s.compile(g), {{"x", tensor({4}, dtype::f32, {1.0, 2.0, 3.0, 0.25})}, {"n", nt}});
  const tensor& y = r.outputs.at("picked");
  REQUIRE(y.type() == dtype::i32);
  CHECK(y.get_int(0) == 3);
  CHECK(y.get_int(1) == 10);  // 16777217 < 10 is false
  CHECK(y.get_int(2) == 10);
  CHECK(y.get_int(3) == 10);  // 0.25 > 0.5 is false
}

TEST_CASE("bool operators refuse mismatched dtypes and shapes, naming the node and operand", "[graph][bool][errors]") {
  expect_graph_error(
      [] {
        graph g("dtypes");
        g.add_op("Less", {g.add_input("a", {4}, dtype::f32), g.add_input("b", {4}, dtype::i64)}, {}, "y");
      },
      errc::invalid_dtype, "y", "b");
  expect_graph_error(
      [] {
        graph g("order");
        g.add_op("Greater", {g.add_input("a", {4}, dtype::boolean), g.add_input("b", {4}, dtype::boolean)}, {}, "y");
      },
      errc::invalid_dtype, "y", "a");
  expect_graph_error(
      [] {
        graph g("broadcast");
        g.add_op("Equal", {g.add_input("a", {3}, dtype::i32), g.add_input("b", {4}, dtype::i32)}, {}, "y");
      },
      errc::invalid_shape, "y", "b");
  expect_graph_error(
      [] {
        graph g("cond");
        g.add_op(
            "Where",
            {g.add_input("c", {4}, dtype::u8), g.add_input("x", {4}, dtype::f32), g.add_input("z", {4}, dtype::f32)},
            {}, "y");
      },
      errc::invalid_dtype, "y", "c");
  expect_graph_error(
      [] {
        graph g("branches");
        g.add_op("Where",
                 {g.add_input("c", {4}, dtype::boolean), g.add_input("x", {4}, dtype::f32),
                  g.add_input("z", {4}, dtype::f16)},
                 {}, "y");
      },
      errc::invalid_dtype, "y", "z");
  expect_graph_error(
      [] {
        graph g("where shapes");
        g.add_op("Where",
                 {g.add_input("c", {2, 3}, dtype::boolean), g.add_input("x", {3}, dtype::f32),
                  g.add_input("z", {2}, dtype::f32)},
                 {}, "y");
      },
      errc::invalid_shape, "y", "z");
  expect_graph_error(
      [] {
        graph g("logical");
        g.add_op("And", {g.add_input("a", {4}, dtype::boolean), g.add_input("b", {4}, dtype::u8)}, {}, "y");
      },
      errc::invalid_dtype, "y", "b");
  expect_graph_error(
      [] {
        graph g("not");
        g.add_op("Not", {g.add_input("a", {4}, dtype::f32)}, {}, "y");
      },
      errc::invalid_dtype, "y", "a");
}

TEST_CASE("a comparison lowers to one compare kernel in a timing-only run", "[graph][bool][timing]") {
  graph g("timing");
  auto x = g.add_input("x", {256, 256}, dtype::f32);
  g.set_output(g.add_op("Greater", {x, g.add_constant("zero", tensor({1}, dtype::f32, {0.0}))}, {}, "y"));
  // x read, the bool y written.
  test::check_timing_only_movement(g, {256, 256}, dtype::f32, "y", {256, 256}, 256.0 * 256 * (4 + 1));
}

TEST_CASE("IsNaN and IsInf find NaN and the infinities their attributes select", "[graph][bool][isnan]") {
  const double inf = INFINITY;
  const std::vector<double> xv{1.0, std::nan(""), inf, -inf, -2.0, 0.0};
  graph g("special");
  auto x = g.add_input("x", {2, 3}, dtype::f32);
  g.set_output(g.add_op("IsNaN", {x}, {}, "nan"));
  g.set_output(g.add_op("IsInf", {x}, {}, "inf"));
  g.set_output(g.add_op("IsInf", {x}, {{"detect_positive", std::int64_t{0}}}, "neg_inf"));
  g.set_output(g.add_op("IsInf", {x}, {{"detect_negative", std::int64_t{0}}}, "pos_inf"));
  auto sys = test::make_system();
  session s{sys};
  const auto r = s.run(s.compile(g), {{"x", tensor({2, 3}, dtype::f32, xv)}});
  const auto nan = bool_values(r.outputs.at("nan")), any = bool_values(r.outputs.at("inf")),
             neg = bool_values(r.outputs.at("neg_inf")), pos = bool_values(r.outputs.at("pos_inf"));
  for (std::size_t i = 0; i < xv.size(); ++i) {
    CAPTURE(i);
    CHECK(nan[i] == std::isnan(xv[i]));
    CHECK(any[i] == std::isinf(xv[i]));
    CHECK(neg[i] == (std::isinf(xv[i]) && xv[i] < 0));
    CHECK(pos[i] == (std::isinf(xv[i]) && xv[i] > 0));
  }
  expect_graph_error(
      [] {
        graph h("ints");
        h.add_op("IsNaN", {h.add_input("a", {4}, dtype::i32)}, {}, "y");
      },
      errc::invalid_dtype, "y", "a");
}

TEST_CASE("Dropout's mask is all true where Dropout drops nothing; random dropping is refused",
          "[graph][bool][dropout]") {
  // ONNX's Dropout: in inference, and in training mode with ratio 0, the output is the input and
  // the mask all true; training with another ratio drops at random.
  graph g("dropout");
  const auto x = g.add_input("x", {2, 3}, dtype::f32);
  const auto zero = g.add_constant("zero", tensor(shape{}, dtype::f32, {0}));
  const auto half = g.add_constant("half", tensor(shape{}, dtype::f32, {0.5}));
  tensor yes(shape{}, dtype::boolean);
  yes.set(0, 1);
  const auto training = g.add_constant("training", std::move(yes));
  g.add_node("Dropout", "inference", {x, half}, {"y", "mask"});
  g.add_node("Dropout", "train0", {x, zero, training}, {"y0", "mask0"});
  for (const char* o : {"y", "mask", "y0", "mask0"}) g.set_output(o);
  CHECK(g.value("mask").type == dtype::boolean);
  CHECK(g.value("mask").shape == shape{2, 3});
  npurt::system sys = test::make_system();
  session s{sys};
  const std::vector<double> xs{1.5, -2, 0, 3.25, -0.5, 7};
  const auto r = s.run(s.compile(g), {{"x", tensor({2, 3}, dtype::f32, xs)}});
  CHECK(r.outputs.at("y").to_vector() == xs);
  CHECK(r.outputs.at("y0").to_vector() == xs);
  for (const char* m : {"mask", "mask0"}) {
    INFO(m);
    CHECK(r.outputs.at(m).shape() == shape{2, 3});
    CHECK(bool_values(r.outputs.at(m)) == std::vector<bool>(6, true));
  }
  // Training with ratio 0.5 (or the default ratio) would drop at random: refused, naming why, and
  // the graph left as it was.
  const std::size_t nodes = g.nodes().size();
  expect_graph_error([&] { g.add_node("Dropout", "random", {x, half, training}, {"yr", "maskr"}); },
                     errc::not_supported, "random", "training");
  expect_graph_error([&] { g.add_node("Dropout", "random2", {x, {}, training}, {"yr2"}); }, errc::not_supported,
                     "random2", "training");
  CHECK(g.nodes().size() == nodes);
  CHECK_FALSE(g.find("yr"));
  CHECK_FALSE(g.find("maskr"));
}

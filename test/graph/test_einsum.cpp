// Einsum against a nested-loop evaluator written here from numpy.einsum's rules (ONNX's reference
// calls numpy.einsum): every combination of every label's values, the product of the operands'
// elements summed into the output element the output's labels pick.
#include "helpers.hpp"

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

using namespace npurt;

namespace {

// "x0", "x1", ...: appended piecewise, as "x" + std::to_string(i) trips GCC 12's -Wrestrict false
// positive (bug 105651) at -O3.
std::string einsum_input_name(std::size_t i) {
  std::string name = "x";
  name += std::to_string(i);
  return name;
}

struct einsum_expected {
  shape dims;
  std::vector<double> values;
  std::vector<double> magnitude;  // the sum of the terms' absolute values, for a rounding bound
};

// The terms with '...' spelt out as digits: an operand whose '...' covers e axes of the
// broadcast rank b gets the digits b - e .. b - 1 (numpy aligns them to the right).
einsum_expected einsum_reference(std::string eq, const std::vector<tensor>& xs) {
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  const auto arrow = eq.find("->");
  std::vector<std::string> terms;
  {
    const std::string lhs = eq.substr(0, arrow);
    std::size_t from = 0;
    for (std::size_t c; (c = lhs.find(',', from)) != std::string::npos; from = c + 1)
      terms.push_back(lhs.substr(from, c - from));
    terms.push_back(lhs.substr(from));
  }
  REQUIRE(terms.size() == xs.size());
  std::size_t b = 0;
  for (std::size_t i = 0; i < terms.size(); ++i)
    if (terms[i].find("...") != std::string::npos) b = std::max(b, xs[i].shape().rank() - (terms[i].size() - 3));
  const auto spell = [&](std::string t, std::size_t e) {
    const auto at = t.find("...");
    if (at == std::string::npos) return t;
    std::string digits;
    for (std::size_t k = b - e; k < b; ++k) digits += static_cast<char>('0' + k);
    return t.replace(at, 3, digits);
  };
  for (std::size_t i = 0; i < terms.size(); ++i)
    terms[i] =
        spell(terms[i], terms[i].find("...") == std::string::npos ? 0 : xs[i].shape().rank() - (terms[i].size() - 3));
  std::string out;
  if (arrow != std::string::npos) {
    out = spell(eq.substr(arrow + 2), b);
  } else {
    std::map<char, int> uses;
    for (const auto& t : terms)
      for (char c : t)
        if (!std::isdigit(static_cast<unsigned char>(c))) ++uses[c];
    for (std::size_t k = 0; k < b; ++k) out += static_cast<char>('0' + k);
    for (const auto& [c, n] : uses)  // std::map orders by character code: 'A' .. 'Z' before 'a'
      if (n == 1) out += c;
  }
  std::map<char, std::int64_t> extent;
  for (std::size_t i = 0; i < terms.size(); ++i)
    for (std::size_t a = 0; a < terms[i].size(); ++a)
      extent[terms[i][a]] = std::max(extent[terms[i][a]], xs[i].shape()[a]);
  std::vector<char> labels;
  for (const auto& [c, n] : extent) labels.push_back(c);
  einsum_expected r;
  for (char c : out) r.dims.push_back(extent.count(c) ? extent[c] : 1);
  r.values.assign(static_cast<std::size_t>(r.dims.elements()), 0.0);
  r.magnitude.assign(r.values.size(), 0.0);
  std::map<char, std::int64_t> at;
  for (char c : labels) at[c] = 0;
  const auto element = [&](const std::string& t, const shape& s) {
    std::int64_t k = 0;
    for (std::size_t a = 0; a < t.size(); ++a) k = k * s[a] + (s[a] == 1 ? 0 : at[t[a]]);
    return k;
  };
  for (bool more = true; more;) {
    double p = 1;
    for (std::size_t i = 0; i < terms.size(); ++i) p *= xs[i].get(element(terms[i], xs[i].shape()));
    const auto o = static_cast<std::size_t>(element(out, r.dims));
    r.values[o] += p;
    r.magnitude[o] += std::abs(p);
    more = false;
    for (auto c = labels.rbegin(); c != labels.rend(); ++c) {
      if (++at[*c] < extent[*c]) {
        more = true;
        break;
      }
      at[*c] = 0;
    }
  }
  return r;
}

struct einsum_case {
  const char* equation;
  std::vector<shape> shapes;
  shape want;  // the output's shape, numpy's, written out here
};

const std::vector<einsum_case>& einsum_cases() {
  static const std::vector<einsum_case> cases{
      {"ij,jk->ik", {{2, 3}, {3, 4}}, {2, 4}},                              // matmul
      {"ij,jk", {{2, 3}, {3, 4}}, {2, 4}},                                  // implicit: the same
      {"bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}, {2, 3, 5}},                  // batched matmul
      {"bhqd,bhkd->bhqk", {{2, 3, 4, 5}, {2, 3, 6, 5}}, {2, 3, 4, 6}},      // attention scores
      {"bhqk,bhkd->bhqd", {{2, 3, 4, 6}, {2, 3, 6, 5}}, {2, 3, 4, 5}},      // attention values
      {"i,j->ij", {{3}, {4}}, {3, 4}},                                      // outer product
      {"bi,bj->bij", {{2, 3}, {2, 4}}, {2, 3, 4}},                          // batched outer product
      {"ij,ij->ij", {{2, 3}, {2, 3}}, {2, 3}},                              // elementwise
      {"i,i", {{5}, {5}}, {}},                                              // inner product
      {"ij->ji", {{3, 4}}, {4, 3}},                                         // transpose
      {"ijk->kji", {{2, 3, 4}}, {4, 3, 2}},                                 //
      {"ba", {{3, 4}}, {4, 3}},                                             // implicit: alphabetical
      {"ab,bA", {{2, 3}, {3, 4}}, {4, 2}},                                  // implicit: 'A' before 'a'
      {"ii", {{4, 4}}, {}},                                                 // trace
      {"ii->i", {{4, 4}}, {4}},                                             // diagonal
      {"iii->i", {{3, 3, 3}}, {3}},                                         //
      {"iji->j", {{3, 2, 3}}, {2}},                                         // trace over the outer axes
      {"...ii->...i", {{3, 5, 5}}, {3, 5}},                                 // batch diagonal
      {"iij,jk->ik", {{3, 3, 4}, {4, 2}}, {3, 2}},                          // diagonal, then contracted
      {"ij->i", {{3, 4}}, {3}},                                             // sums
      {"ij->", {{3, 4}}, {}},                                               //
      {"ijk->j", {{2, 3, 4}}, {3}},                                         //
      {"ij,kl->", {{2, 3}, {2, 2}}, {}},                                    //
      {"...ij,...jk->...ik", {{2, 1, 3, 4}, {5, 4, 2}}, {2, 5, 3, 2}},      // '...' of ranks 2 and 1
      {"...,...->...", {{2, 3}, {3}}, {2, 3}},                              // broadcast product
      {"...ij->...ji", {{2, 2, 3, 4}}, {2, 2, 4, 3}},                       //
      {"i...->...", {{3, 2, 4}}, {2, 4}},                                   //
      {"...i,i...", {{2, 1, 3}, {3, 1, 4}}, {2, 4}},                        // implicit: '...' first
      {"i,j->i...j", {{2}, {3}}, {2, 3}},                                   // a '...' of no axes
      {"ij,jk,kl->il", {{2, 3}, {3, 4}, {4, 2}}, {2, 2}},                   // three operands
      {"bn,anm,bm->ba", {{2, 3}, {4, 3, 5}, {2, 5}}, {2, 4}},               // bilinear layer
      {"i,i,i->i", {{4}, {4}, {4}}, {4}},                                   //
      {"ab,cd,ef->abcdef", {{2, 1}, {1, 3}, {2, 2}}, {2, 1, 1, 3, 2, 2}},   // outer products of three
      {"i j , j k -> i k", {{2, 3}, {3, 4}}, {2, 4}},                       // spaces
      {"ij,->ij", {{2, 3}, {}}, {2, 3}},                                    // a scalar operand
      // A letter of extent 1 broadcasts against another operand's extent (numpy's einsum; the
      // output shapes are numpy 1.24's).
      {"ij,jk->ik", {{3, 1}, {4, 5}}, {3, 5}},                // j: 1 against 4, summed over 4
      {"ij,jk", {{3, 4}, {1, 5}}, {3, 5}},                    // the other side's j is 1
      {"ij,ij->ij", {{3, 1}, {3, 4}}, {3, 4}},                // an output letter
      {"ij,ij->i", {{3, 1}, {3, 4}}, {3}},                    //
      {"ij,kj->ik", {{3, 1}, {2, 4}}, {3, 2}},                //
      {"bij,bjk->bik", {{1, 2, 3}, {4, 3, 5}}, {4, 2, 5}},    // a batch letter
      {"ij,ik->jk", {{3, 1}, {3, 4}}, {1, 4}},                // 1 everywhere: it stays 1
      {"ij,jk,kl->il", {{2, 1}, {3, 4}, {1, 5}}, {2, 5}},     // in two contractions
      {"ii,i->i", {{1, 1}, {3}}, {3}},                        // a 1x1 diagonal, broadcast
  };
  return cases;
}

tensor einsum_input(const shape& s, std::uint64_t seed, dtype t) { return test::random_tensor(s, seed, 1.0, t); }

// Runs Einsum with inputs x0, x1, ... and checks it against the reference within `tol` of the
// terms' magnitude.
void check_einsum(const einsum_case& c, dtype t, double tol) {
  INFO(c.equation << " in " << to_string(t));
  graph g("einsum");
  std::vector<std::string> ins;
  std::vector<tensor> xs;
  std::vector<feed> feeds;
  for (std::size_t i = 0; i < c.shapes.size(); ++i) {
    ins.push_back(g.add_input(einsum_input_name(i), c.shapes[i], t));
    xs.push_back(einsum_input(c.shapes[i], 11 + i, t));
  }
  for (std::size_t i = 0; i < xs.size(); ++i) feeds.push_back({ins[i], xs[i]});
  g.set_output(g.add_op("Einsum", ins, {{"equation", std::string(c.equation)}}, "y"));
  // The reference reads the inputs as the tensors hold them (half-rounded for fp16).
  const einsum_expected want = einsum_reference(c.equation, xs);
  REQUIRE(want.dims == c.want);
  auto sys = test::make_system();
  session s{sys};
  const auto r = s.run(s.compile(g), feeds);
  const tensor& y = r.outputs.at("y");
  REQUIRE(y.shape() == c.want);
  CHECK(y.type() == t);
  for (std::int64_t i = 0; i < y.elements(); ++i) {
    const auto k = static_cast<std::size_t>(i);
    INFO("element " << i << ": " << y.get(i) << " for " << want.values[k]);
    CHECK(std::abs(y.get(i) - want.values[k]) <= 1e-6 + tol * want.magnitude[k]);
  }
}

}  // namespace

TEST_CASE("Einsum matches a nested-loop evaluation of numpy.einsum's rules in fp32 and fp16", "[graph][einsum]") {
  for (const auto& c : einsum_cases()) {
    check_einsum(c, dtype::f32, 1e-6);
    // Half: the output rounds to 11 bits, and the sums of its steps may round on the way.
    check_einsum(c, dtype::f16, 4e-3);
  }
}

TEST_CASE("Einsum lowers a contraction to one batched MatMul and an outer product to Mul", "[graph][einsum]") {
  const auto count = [](const graph& g, const std::string& type) {
    return std::count_if(g.nodes().begin(), g.nodes().end(), [&](const node& n) { return n.type == type; });
  };
  {
    graph g("attention");
    auto q = g.add_input("q", {2, 3, 4, 5}, dtype::f32);
    auto k = g.add_input("k", {2, 3, 6, 5}, dtype::f32);
    g.set_output(g.add_op("Einsum", {q, k}, {{"equation", std::string("bhqd,bhkd->bhqk")}}, "y"));
    CHECK(count(g, "MatMul") == 1);
    CHECK(count(g, "Mul") == 0);
    CHECK(count(g, "ReduceSum") == 0);
    // k's d moves before its k: the one transpose; the node writing y keeps the model's name.
    CHECK(count(g, "Transpose") == 1);
    CHECK(g.find("y") != nullptr);
  }
  {
    // Timing-only, the contraction costs what the batched MatMul it is costs on its own.
    const auto matmul_busy = [](graph& g, const std::vector<std::pair<std::string, shape>>& ins) {
      auto sys = test::make_system();
      session s{sys};
      std::vector<feed> feeds;
      std::vector<tensor> xs;
      for (const auto& [name, sh] : ins) xs.push_back(tensor::timing_only(sh, dtype::f32));
      for (std::size_t i = 0; i < ins.size(); ++i) feeds.push_back({ins[i].first, xs[i]});
      const auto r = s.run(s.compile(g, {.timing_only = true}), feeds);
      picoseconds busy{0};
      int matmuls = 0;
      for (const auto& op : r.ops)
        if (op.type == "MatMul") {
          busy = op.busy;
          ++matmuls;
        }
      CHECK(matmuls == 1);
      return busy;
    };
    graph e("scores");
    e.set_output(e.add_op("Einsum",
                          {e.add_input("q", {8, 64, 32}, dtype::f32), e.add_input("k", {8, 32, 48}, dtype::f32)},
                          {{"equation", std::string("bqd,bdk->bqk")}}, "y"));
    graph m("matmul");
    m.set_output(m.add_op(
        "MatMul", {m.add_input("q", {8, 64, 32}, dtype::f32), m.add_input("k", {8, 32, 48}, dtype::f32)}, {}, "y"));
    const picoseconds via_einsum = matmul_busy(e, {{"q", {8, 64, 32}}, {"k", {8, 32, 48}}});
    CHECK(via_einsum > picoseconds{0});
    CHECK(via_einsum == matmul_busy(m, {{"q", {8, 64, 32}}, {"k", {8, 32, 48}}}));
  }
  {
    graph g("outer");
    g.set_output(g.add_op("Einsum", {g.add_input("a", {3}, dtype::f32), g.add_input("b", {4}, dtype::f32)},
                          {{"equation", std::string("i,j->ij")}}, "y"));
    CHECK(count(g, "MatMul") == 0);
    CHECK(count(g, "Mul") == 1);
  }
}

TEST_CASE("Einsum refuses malformed equations, mismatched operands and dtypes with typed errors naming them",
          "[graph][einsum][errors]") {
  struct bad {
    const char* equation;
    std::vector<shape> shapes;
    errc code;
    std::string tensor;   // the input the error names, or none
    std::string mention;  // what the message must say
  };
  const std::vector<bad> cases{
      {"ij,jk->ik", {{2, 3}}, errc::invalid_argument, "", "2 input term(s) but the node 1 input(s)"},
      {"ij", {{2, 3}, {3, 4}}, errc::invalid_argument, "", "1 input term(s) but the node 2"},
      {"ij->ik", {{2, 3}}, errc::invalid_argument, "", "output letter 'k' is in no input term"},
      {"ij->ii", {{2, 3}}, errc::invalid_argument, "", "output letter 'i' appears twice"},
      {"ij->i->j", {{2, 3}}, errc::invalid_argument, "", "'-'"},
      {"i>j", {{2, 3}}, errc::invalid_argument, "", "'>'"},
      {"i.j", {{2, 3}}, errc::invalid_argument, "", "'.' that is not part of '...'"},
      {"i..", {{2, 3}}, errc::invalid_argument, "", "'.' that is not part of '...'"},
      {"...i...", {{2, 3}}, errc::invalid_argument, "", "second '...'"},
      {"i1", {{2, 3}}, errc::invalid_argument, "", "'1'"},
      {"...ij->ij", {{4, 2, 3}}, errc::invalid_argument, "", "no '...'"},
      {"ij,jk", {{2, 3}, {4, 5}}, errc::invalid_shape, "x1", "letter 'j' is 3 in operand 0 ('x0') but 4 in operand 1"},
      {"ii", {{2, 3}}, errc::invalid_shape, "x0", "letter 'i' is repeated in operand 0 ('x0') with extents 2 and 3"},
      // Within one operand a diagonal does not broadcast (numpy: "dimensions in operand 0 for
      // collapsing index 'i' don't match (1 != 3)").
      {"ii->i", {{1, 3}}, errc::invalid_shape, "x0", "with extents 1 and 3"},
      {"ij,jk,kl->il", {{2, 3}, {1, 4}, {2, 5}}, errc::invalid_shape, "x2", "neither is 1"},
      {"ijk", {{2, 3}}, errc::invalid_shape, "x0", "rank 2 but its term names 3 axes"},
      {"ij", {{2, 3, 4}}, errc::invalid_shape, "x0", "rank 3 but its term names 2 axes"},
      {"...ijk", {{2, 3}}, errc::invalid_shape, "x0", "besides '...'"},
      {"...i,...i->...i", {{2, 3}, {4, 3}}, errc::invalid_shape, "x1", "do not broadcast"},
  };
  for (const auto& c : cases) {
    INFO(c.equation);
    graph g("bad einsum");
    std::vector<std::string> ins;
    for (std::size_t i = 0; i < c.shapes.size(); ++i)
      ins.push_back(g.add_input(einsum_input_name(i), c.shapes[i], dtype::f32));
    const std::size_t nodes = g.nodes().size();
    try {
      g.add_op("Einsum", ins, {{"equation", std::string(c.equation)}}, "y");
      FAIL("no error");
    } catch (const graph_error& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK(e.code() == c.code);
      CHECK(e.op() == "y");
      CHECK(e.tensor() == c.tensor);
      CHECK(what.find("Einsum 'y'") != std::string::npos);
      CHECK(what.find(std::string("equation '") + c.equation + "'") != std::string::npos);
      CHECK(what.find(c.mention) != std::string::npos);
    }
    // All or nothing: a refused Einsum leaves no step behind.
    CHECK(g.nodes().size() == nodes);
    CHECK(g.find("y") == nullptr);
  }
  test::expect_graph_error(
      [] {
        graph g("no equation");
        g.add_op("Einsum", {g.add_input("x", {2}, dtype::f32)}, {}, "y");
      },
      errc::invalid_argument, "y", "y");
  test::expect_graph_error(
      [] {
        graph g("integers");
        g.add_op("Einsum", {g.add_input("a", {2, 3}, dtype::i32), g.add_input("b", {3, 2}, dtype::i32)},
                 {{"equation", std::string("ij,jk->ik")}}, "y");
      },
      errc::not_supported, "y", "a");
  test::expect_graph_error(
      [] {
        graph g("mixed");
        g.add_op("Einsum", {g.add_input("a", {2, 3}, dtype::f32), g.add_input("b", {3, 2}, dtype::f16)},
                 {{"equation", std::string("ij,jk->ik")}}, "y");
      },
      errc::invalid_dtype, "y", "b");
  test::expect_graph_error(
      [] {
        graph g("attribute");
        g.add_op("Einsum", {g.add_input("a", {2}, dtype::f32)},
                 {{"equation", std::string("i")}, {"equations", std::string("i")}}, "y");
      },
      errc::not_supported, "y", "");
}

TEST_CASE("Einsum broadcasts a letter of extent 1 as numpy does: np.einsum('ij,jk->ik', a[3x1], b[4x5])",
          "[graph][einsum]") {
  graph g("einsum broadcast");
  const auto a = g.add_input("a", {3, 1}, dtype::f32);
  const auto b = g.add_input("b", {4, 5}, dtype::f32);
  g.set_output(g.add_op("Einsum", {a, b}, {{"equation", std::string("ij,jk->ik")}}, "y"));
  auto sys = test::make_system();
  session s{sys};
  const tensor av({3, 1}, dtype::f32, {1, 2, 3});
  const tensor bv({4, 5}, dtype::f32, test::iota(20));
  const auto r = s.run(s.compile(g), {{"a", av}, {"b", bv}});
  const tensor& y = r.outputs.at("y");
  // numpy 1.24: a[i, 0] times the column sums of b, [30, 34, 38, 42, 46].
  std::vector<double> want;
  for (double i : {1.0, 2.0, 3.0})
    for (double col : {30.0, 34.0, 38.0, 42.0, 46.0}) want.push_back(i * col);
  CHECK(y.shape() == shape{3, 5});
  CHECK(y.to_vector() == want);
}

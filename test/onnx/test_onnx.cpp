// ONNX import: the backend node tests Debian ships in libonnx-testdata, and the import errors.
#include <npurt/graph/session.hpp>
#include <npurt/onnx.hpp>
#include <npurt/sim/sim.hpp>

#include <onnx/onnx_pb.h>

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>

using namespace npurt;
namespace fs = std::filesystem;

namespace {

fs::path node_tests_dir() {
  if (const char* e = std::getenv("NPURT_ONNX_NODE_DIR")) return e;
  return NPURT_ONNX_NODE_DIR;
}

// ONNX's backend tests compare with numpy.testing.assert_allclose(rtol=1e-3, atol=1e-7).
bool allclose(const tensor& expected, const tensor& got, std::string& why) {
  if (!(expected.shape() == got.shape()) || expected.type() != got.type()) {
    why = "shape or dtype differs: " + shape_string(got.shape()) + " " + std::string(to_string(got.type())) + " vs " +
          shape_string(expected.shape()) + " " + std::string(to_string(expected.type()));
    return false;
  }
  for (std::int64_t i = 0; i < expected.elements(); ++i) {
    const double e = expected.get(i), g = got.get(i);
    if (std::isnan(e) && std::isnan(g)) continue;
    if (std::abs(g - e) > 1e-7 + 1e-3 * std::abs(e)) {
      why = "element " + std::to_string(i) + ": " + std::to_string(g) + " vs " + std::to_string(e);
      return false;
    }
  }
  return true;
}

}  // namespace

TEST_CASE("every ONNX backend node test of a supported operator and dtype passes within ONNX's tolerances",
          "[onnx][conformance]") {
  const fs::path dir = node_tests_dir();
  if (!fs::is_directory(dir)) SKIP("no ONNX node tests at " << dir.string() << " (install libonnx-testdata)");
  std::vector<fs::path> tests;
  for (const auto& e : fs::directory_iterator(dir))
    if (fs::exists(e.path() / "model.onnx")) tests.push_back(e.path());
  std::sort(tests.begin(), tests.end());
  // The 910B preset: it has bf16, which some tests cast to.
  npurt::system sys{sim::presets::ascend910b(1)};
  int passed = 0, unsupported = 0;
  std::vector<std::string> failures;
  std::map<std::string, int> reasons;
  for (const auto& t : tests) {
    const std::string name = t.filename().string();
    if (std::getenv("NPURT_ONNX_VERBOSE")) std::fprintf(stderr, "%s\n", name.c_str());
    try {
      graph g = npurt::onnx::load((t / "model.onnx").string());
      session s{sys};
      // Level 2: the expanded function tests (chains of elementwise operators) run fused.
      auto c = s.compile(g, {.optimization_level = 2});
      bool ok = true;
      int sets = 0;
      for (int k = 0; fs::is_directory(t / ("test_data_set_" + std::to_string(k))); ++k, ++sets) {
        const fs::path ds = t / ("test_data_set_" + std::to_string(k));
        std::vector<tensor> ins;
        for (std::size_t i = 0; i < g.inputs().size(); ++i)
          ins.push_back(npurt::onnx::load_tensor((ds / ("input_" + std::to_string(i) + ".pb")).string()));
        std::vector<feed> feeds;
        for (std::size_t i = 0; i < ins.size(); ++i) feeds.push_back({g.inputs()[i], ins[i]});
        auto r = s.run(c, feeds);
        for (std::size_t o = 0; o < g.outputs().size(); ++o) {
          const tensor expected = npurt::onnx::load_tensor((ds / ("output_" + std::to_string(o) + ".pb")).string());
          std::string why;
          if (!allclose(expected, r.outputs.at(g.outputs()[o]), why)) {
            failures.push_back(name + ": " + why);
            ok = false;
          }
        }
      }
      if (ok && sets > 0) ++passed;
    } catch (const graph_error& e) {
      if (e.code() == errc::not_supported) {
        ++unsupported;
        if (std::getenv("NPURT_ONNX_VERBOSE")) std::fprintf(stderr, "  unsupported: %s\n", e.what());
        continue;
      }
      failures.push_back(name + ": " + e.what());
    } catch (const std::exception& e) { failures.push_back(name + ": " + e.what()); }
  }
  for (const auto& f : failures) UNSCOPED_INFO(f);
  UNSCOPED_INFO("ONNX node tests: " << tests.size() << " in total, " << passed << " passed, " << failures.size()
                                    << " failed, " << unsupported
                                    << " use an unsupported operator, attribute or dtype");
  CHECK(failures.empty());
  CHECK(passed > 0);
  WARN("ONNX node tests passed: " << passed << " of " << tests.size() << " (" << unsupported << " unsupported)");
}

TEST_CASE("a model with unsupported operators is an error listing every one of them", "[onnx][errors]") {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("mixed");
  auto* in = g->add_input();
  in->set_name("x");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(1);
  in->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(4);
  auto add_node = [&](const char* type, const char* from, const char* to) {
    auto* n = g->add_node();
    n->set_op_type(type);
    n->add_input(from);
    n->add_output(to);
  };
  add_node("Trilu", "x", "a");
  add_node("Relu", "a", "b");
  add_node("Hardmax", "b", "c");
  add_node("Trilu", "c", "d");
  g->add_output()->set_name("d");
  try {
    (void)npurt::onnx::load_from_bytes(m.SerializeAsString(), "mixed");
    FAIL("no error");
  } catch (const graph_error& e) {
    const std::string w = e.what();
    CHECK(e.code() == errc::not_supported);
    CHECK(w.find("Trilu") != std::string::npos);
    CHECK(w.find("Hardmax") != std::string::npos);
    CHECK(w.find("Relu") == std::string::npos);
  }
  CHECK_THROWS_AS(npurt::onnx::load_from_bytes("not a model at all", "junk"), graph_error);
}

TEST_CASE("an ONNX model's initializers, attributes and outputs become the graph's", "[onnx]") {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  auto* in = g->add_input();
  in->set_name("x");
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(1);
  for (int d : {2, 3}) tt->mutable_shape()->add_dim()->set_dim_value(d);
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(1);
  w->add_dims(4);
  w->add_dims(3);
  for (int i = 0; i < 12; ++i) w->add_float_data(static_cast<float>(i) * 0.5f);
  auto* n = g->add_node();
  n->set_op_type("Gemm");
  n->add_input("x");
  n->add_input("w");
  n->add_output("y");
  auto* a = n->add_attribute();
  a->set_name("transB");
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(1);
  g->add_output()->set_name("y");
  graph gr = npurt::onnx::load_from_bytes(m.SerializeAsString());
  CHECK(gr.value("y").shape == shape{2, 4});
  REQUIRE(gr.constant("w"));
  CHECK(gr.constant("w")->get(11) == 5.5);
  npurt::system sys{sim::presets::ascend910(1)};
  session s{sys};
  tensor x({2, 3}, dtype::f32, {1, 0, 0, 0, 1, 0});
  auto r = s.run(s.compile(gr), {{"x", x}});
  // y = x * w^T: row 0 picks w[:,0] = {0, 1.5, 3, 4.5}; row 1 picks w[:,1].
  CHECK(r.outputs.at("y").to_vector() == std::vector<double>{0, 1.5, 3, 4.5, 0.5, 2, 3.5, 5});
}

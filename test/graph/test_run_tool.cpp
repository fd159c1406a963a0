// npurt-run as a user runs it: what it reports against independent bounds, byte-identical
// repeats, and the exit status and message of every kind of bad input.
#include <catch2/catch_test_macros.hpp>

#include <boost/json.hpp>

#if NPURT_HAS_ONNX
#include <onnx/onnx_pb.h>
#endif

#include "../tool_run.hpp"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

using tool_test::q;
using tool_test::scratch;
using tool_test::slurp;

tool_test::result run(const std::string& args) { return tool_test::run(NPURT_RUN_TOOL, args); }

/// The --json report of a successful run.
json::object report(const std::string& args) {
  const auto path = scratch() / "report.json";
  fs::remove(path);
  const tool_test::result r = run(args + " --json " + q(path.string()));
  INFO(r.err);
  REQUIRE(r.status == 0);
  return json::parse(slurp(path)).as_object();
}

std::int64_t num(const json::object& o, const char* key) { return o.at(key).to_number<std::int64_t>(); }

/// Sum of busy_ps over the report's operators of the given types (all when empty).
std::int64_t busy_of(const json::object& rep, std::initializer_list<std::string_view> types) {
  std::int64_t sum = 0;
  for (const auto& v : rep.at("ops").as_array()) {
    const auto& op = v.as_object();
    const std::string_view type = op.at("type").as_string();
    if (types.size() == 0 || std::find(types.begin(), types.end(), type) != types.end()) sum += num(op, "busy_ps");
  }
  return sum;
}

}  // namespace

TEST_CASE("npurt-run reports a built-in MLP's memory and time within independent bounds", "[graph][tool]") {
  const auto rep = report("mlp --batch 4");
  // The MLP of 784 -> 512 -> 256 -> 10 holds its weights and biases in f32: counted by hand.
  constexpr std::int64_t params = 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10;
  CHECK(num(rep, "weight_bytes") == params * 4);
  CHECK(num(rep, "peak_bytes") == num(rep, "activation_bytes") + num(rep, "weight_bytes") + num(rep, "io_bytes"));
  CHECK(num(rep, "activation_bytes") >= num(rep, "activation_lower_bound"));
  CHECK(num(rep, "activation_no_reuse_bytes") >= num(rep, "activation_bytes"));
  // The input, 4 x 784 in f32, lives on the device.
  CHECK(num(rep, "io_bytes") >= 4 * 784 * 4);
  // One stream: the operators run one after another inside the latency.
  CHECK(num(rep, "streams") == 1);
  CHECK(num(rep, "latency_ps") >= busy_of(rep, {}));
  CHECK(rep.at("ops").as_array().size() == 6);  // three Gemms, two Relus, a Softmax
  CHECK(busy_of(rep, {"Gemm"}) > 0);
}

TEST_CASE("npurt-run's kernel count is the kernels its trace holds, the copies apart", "[graph][tool]") {
  const auto trace = scratch() / "count.json";
  const auto r = run("mlp --batch 4 --trace " + q(trace.string()));
  REQUIRE(r.status == 0);
  // The trace is the run's own record: count its tasks by kind.
  std::int64_t kernels = 0, copies = 0;
  const json::value doc = json::parse(slurp(trace));
  for (const auto& v : doc.at("traceEvents").as_array()) {
    const auto& e = v.as_object();
    if (!e.contains("cat") || e.at("cat").as_string() != "task") continue;
    const std::string_view kind = e.at("args").at("kind").as_string();
    kernels += kind == "kernel";
    copies += kind == "memcpy";
  }
  CHECK(kernels == 6);  // three Gemms, two Relus, a Softmax
  CHECK(copies == 2);   // the input in, the output out
  CHECK(r.out.find("6 operators (0 fused away), 6 kernels, 1 stream\n") != std::string::npos);
  CHECK(num(report("mlp --batch 4"), "kernels") == kernels);
}

TEST_CASE("npurt-run's ResNet-50 forward in fp16 takes at least the cube's cycle floor", "[graph][tool]") {
  // Every 16x16x16 fractal of ResNet-50's convolutions (C_in padded to 16) is one cycle of one of
  // the 910's 32 cube units at about 1 GHz: 1.123 M cube-cycles per image, 35.1 us per image.
  const auto rep = report("resnet50 --batch 2 --precision fp16 --top 0");
  CHECK(busy_of(rep, {"Conv"}) >= 2 * 35'100'000);
  CHECK(num(rep, "latency_ps") >= busy_of(rep, {}));
  CHECK(rep.at("timing_only").as_bool());
  CHECK(num(rep, "operators") >= 53 + 53 + 49 + 16 + 4);  // conv, bn, relu, add, pools and fc
}

TEST_CASE("npurt-run prints, reports and traces the same bytes on every run", "[graph][tool][determinism]") {
  const auto t1 = scratch() / "t1.json", t2 = scratch() / "t2.json";
  const auto s1 = scratch() / "t1.svg", s2 = scratch() / "t2.svg";
  const auto a = run("transformer --seq 64 --runs 2 --trace " + q(t1.string()) + " --svg " + q(s1.string()));
  const auto b = run("transformer --seq 64 --runs 2 --trace " + q(t2.string()) + " --svg " + q(s2.string()));
  REQUIRE(a.status == 0);
  REQUIRE(b.status == 0);
  CHECK(a.out == b.out);
  CHECK(slurp(t1) == slurp(t2));
  CHECK(slurp(s1) == slurp(s2));
  CHECK(slurp(t1).find("\"traceEvents\"") != std::string::npos);
  CHECK(slurp(s1).find("<svg") != std::string::npos);
  CHECK(a.out.find("MatMul") != std::string::npos);
}

TEST_CASE("npurt-run refuses bad input with its exit status and a message that names it", "[graph][tool][errors]") {
  SECTION("a command line it cannot use: exit 1") {
    for (const std::string args :
         {"", "mlp --precision fp8", "mlp --schedule eager", "mlp --runs 0", "mlp --dim batch=2", "m.onnx --dim batch",
          "m.onnx --dim batch=0", "m.onnx --dim batch=2 --dim batch=3", "m.onnx --dim =3", "mlp --opt-level 9",
          "mlp --seed -1", "mlp --seed 2x"}) {
      const auto r = run(args);
      INFO(args << ": " << r.err);
      CHECK(r.status == 1);
      CHECK(!r.err.empty());
    }
  }
  SECTION("a model file that cannot be read: exit 2, with the reason") {
    const auto r = run(q((scratch() / "missing.onnx").string()));
    CHECK(r.status == 2);
#if NPURT_HAS_ONNX
    CHECK(r.err.find("No such file") != std::string::npos);
#else
    CHECK(r.err.find("without ONNX import") != std::string::npos);
#endif
  }
  SECTION("a preset file that is not one: exit 2") {
    const auto ini = scratch() / "bad.ini";
    std::ofstream(ini) << "[device]\ncores = many\n";
    const auto r = run("mlp --preset " + q(ini.string()));
    CHECK(r.status == 2);
    CHECK(r.err.find("bad.ini") != std::string::npos);
  }
  SECTION("a preset that is neither a built-in nor a file: exit 2, naming the built-ins") {
    const auto r = run("mlp --preset ascend9100");
    CHECK(r.status == 2);
    CHECK(r.err.find("'ascend9100'") != std::string::npos);
    CHECK(r.err.find("ascend910 and ascend910b") != std::string::npos);
  }
  SECTION("an output that cannot be written: exit 2, after the report") {
    const auto r = run("mlp --json " + q((scratch() / "no-such-dir" / "r.json").string()));
    CHECK(r.status == 2);
    CHECK(r.err.find("r.json: No such file or directory") != std::string::npos);
    CHECK(r.out.find("latency") != std::string::npos);
  }
}

#if NPURT_HAS_ONNX
namespace {
/// y = x[batch, 64] x W[64, 32], W an initializer: the batch is a symbolic dimension.
fs::path write_matmul_model(const std::string& node_name = {}, const std::string& file = "mm.onnx") {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("mm");
  auto* in = g->add_input();
  in->set_name("x");
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(::onnx::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_param("batch");
  tt->mutable_shape()->add_dim()->set_dim_value(64);
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(::onnx::TensorProto::FLOAT);
  w->add_dims(64);
  w->add_dims(32);
  for (int i = 0; i < 64 * 32; ++i) w->add_float_data(static_cast<float>(i % 7) / 7.0f);
  // Names as strings: add_input(const char*) trips GCC 12's false -Wrestrict (GCC bug 105651).
  const std::string x = "x", wn = "w", y = "y";
  auto* n = g->add_node();
  n->set_op_type("MatMul");
  n->set_name(node_name);
  n->add_input(x);
  n->add_input(wn);
  n->add_output(y);
  g->add_output()->set_name(y);
  const auto path = scratch() / file;
  std::ofstream(path, std::ios::binary) << m.SerializeAsString();
  return path;
}
}  // namespace

namespace {
/// y = Gather(table, Cast<int64>(x)), x of 64 elements of `elem_type`, a table of `rows` rows:
/// the run fails, naming the index, unless every fed value is a valid index (in [-rows, rows)
/// after ONNX's Cast, which truncates toward zero).
fs::path write_gather_model(::onnx::TensorProto::DataType elem_type, int rows, const std::string& file) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("gather");
  const std::string x = "x", idx = "idx", table = "table", y = "y";
  auto* in = g->add_input();
  in->set_name(x);
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem_type);
  tt->mutable_shape()->add_dim()->set_dim_value(64);
  auto* t = g->add_initializer();
  t->set_name(table);
  t->set_data_type(::onnx::TensorProto::FLOAT);
  t->add_dims(rows);
  for (int r = 0; r < rows; ++r) t->add_float_data(2.5f + static_cast<float>(r));
  auto* cast = g->add_node();
  cast->set_op_type("Cast");
  cast->add_input(x);
  cast->add_output(idx);
  auto* to = cast->add_attribute();
  to->set_name("to");
  to->set_type(::onnx::AttributeProto::INT);
  to->set_i(::onnx::TensorProto::INT64);
  auto* gather = g->add_node();
  gather->set_op_type("Gather");
  gather->add_input(table);
  gather->add_input(idx);
  gather->add_output(y);
  g->add_output()->set_name(y);
  const auto path = scratch() / file;
  std::ofstream(path, std::ios::binary) << m.SerializeAsString();
  return path;
}
}  // namespace

TEST_CASE("npurt-run feeds a DOUBLE input values in [-1, 1), as every floating input", "[graph][tool][onnx]") {
  // A table of one row: only indices in [-1, 0] are in range, and a value in (-1, 1) truncates
  // to 0. An input filled with the small integers of integer inputs would fail the run.
  const auto path = write_gather_model(::onnx::TensorProto::DOUBLE, 1, "f64.onnx");
  for (const char* seed : {"1", "2", "3"}) {
    const auto r = run(q(path.string()) + " --seed " + seed);
    INFO(r.err);
    CHECK(r.status == 0);
  }
}

TEST_CASE("npurt-run feeds signed integer inputs -4 .. 3 and unsigned ones 0 .. 7", "[graph][tool][onnx]") {
  // docs/graph.md: signed values -4 .. 3 are valid indices of 4 rows (negatives count from the
  // end) and unsigned 0 .. 7 of 8; 0 .. 7 fed to a signed input would overrun the 4 rows, and
  // any value past 7 (or below 0) fed to an unsigned one the 8.
  for (const auto type : {::onnx::TensorProto::INT8, ::onnx::TensorProto::INT32, ::onnx::TensorProto::INT64}) {
    const auto path = write_gather_model(type, 4, "signed.onnx");
    for (const char* seed : {"1", "2"}) {
      const auto r = run(q(path.string()) + " --seed " + seed);
      INFO(type << " " << r.err);
      CHECK(r.status == 0);
    }
  }
  for (const auto type : {::onnx::TensorProto::UINT8, ::onnx::TensorProto::UINT16}) {
    const auto path = write_gather_model(type, 8, "unsigned.onnx");
    const auto r = run(q(path.string()));
    INFO(type << " " << r.err);
    CHECK(r.status == 0);
  }
  // 3 rows: the signed values -4 and 3 are out of range, and the run says so.
  const auto r = run(q(write_gather_model(::onnx::TensorProto::INT8, 3, "short.onnx").string()));
  CHECK(r.status == 2);
}

TEST_CASE("npurt-run runs an ONNX model whose batch is sized by --dim", "[graph][tool][onnx]") {
  const auto model = write_matmul_model();
  const auto small = report(q(model.string()) + " --dim batch=16");
  const auto large = report(q(model.string()) + " --dim batch=4096");
  CHECK(!small.at("timing_only").as_bool());  // the weights have data: it computes
  CHECK(num(small, "weight_bytes") == 64 * 32 * 4);
  CHECK(num(small, "io_bytes") >= 16 * 64 * 4);  // the fed input, at least
  CHECK(num(large, "io_bytes") >= 4096 * 64 * 4);
  // The cube floor of 4096 x 64 x 32 on the 910's 32 cores: 256 x 4 x 2 fractal cycles / 32.
  CHECK(busy_of(large, {"MatMul"}) >= (256 * 4 * 2 / 32) * 1000);
  CHECK(busy_of(large, {"MatMul"}) > busy_of(small, {"MatMul"}));

  SECTION("without --dim the symbolic dimension is named, with the option that sizes it") {
    const auto r = run(q(model.string()));
    CHECK(r.status == 2);
    CHECK(r.err.find("'batch'") != std::string::npos);
    CHECK(r.err.find("--dim") != std::string::npos);
  }
  SECTION("a --dim for a dimension the model does not have is refused") {
    const auto r = run(q(model.string()) + " --dim batch=2 --dim seq=4");
    CHECK(r.status == 2);
    CHECK(r.err.find("'seq'") != std::string::npos);
  }
}

TEST_CASE("npurt-run's JSON report is UTF-8 whatever bytes the model's path and node names hold",
          "[graph][tool][onnx]") {
  // A path and an ONNX node name are bytes: a lone 0xFF is no UTF-8, and JSON text is UTF-8
  // (RFC 8259). Boost.JSON's parser refuses ill-formed UTF-8, as other readers do.
  const auto model = write_matmul_model("mm\xff", "m\xff.onnx");
  const auto rep = report(q(model.string()) + " --dim batch=2");
  const std::string r = "\xef\xbf\xbd";  // U+FFFD
  CHECK(std::string{rep.at("model").as_string()} == (scratch() / ("m" + r + ".onnx")).string());
  const auto& ops = rep.at("ops").as_array();
  REQUIRE(ops.size() == 1);
  CHECK(std::string{ops[0].as_object().at("name").as_string()} == "mm" + r);
}
#endif

// Model builders given sizes from outside: a batch of 0 or below, widths and heads of 0, and
// sizes whose tensors cannot fit in memory are typed errors, never garbage shapes or overflow.
#include <npurt/models/graphs.hpp>
#include <npurt/models/resnet50.hpp>

#include <catch2/catch_test_macros.hpp>

#include <cstdint>
#include <deque>
#include <string>

namespace models = npurt::models;
using npurt::errc;

namespace {

template <class F>
std::error_code code_of(F&& f) {
  try {
    f();
  } catch (const npurt::caller_error& e) { return e.code(); }
  return {};
}

constexpr std::int64_t huge = std::int64_t{1} << 50;

}  // namespace

TEST_CASE("resnet50 refuses a batch below 1 and one too large for memory", "[models][hostile]") {
  CHECK(code_of([] { models::resnet50 r(0); }) == errc::invalid_argument);
  CHECK(code_of([] { models::resnet50 r(-4); }) == errc::invalid_argument);
  CHECK(code_of([] { models::resnet50 r(huge); }) == errc::size_overflow);
  const models::resnet50 one(1);
  for (const auto& t : one.tensors()) CHECK(t.bytes() > 0);
}

TEST_CASE("the graph builders refuse sizes below 1 and sizes that overflow", "[models][hostile]") {
  CHECK(code_of([] { (void)models::mlp(4, {}); }) == errc::invalid_argument);
  CHECK(code_of([] { (void)models::mlp(4, {8, 0, 2}); }) == errc::invalid_argument);
  CHECK(code_of([] { (void)models::mlp_training_step(0, {4, 4}); }) == errc::invalid_argument);
  CHECK(code_of([] { (void)models::mlp_training_step(4, {}); }) == errc::invalid_argument);
  CHECK(code_of([] { (void)models::mlp_training_step(huge, {huge, 4}, 0.1, false); }) == errc::size_overflow);
  CHECK(code_of([] { (void)models::resnet50_graph(0); }) == errc::invalid_argument);
  CHECK(code_of([] { (void)models::resnet50_graph(1, 0); }) == errc::invalid_argument);
  models::transformer_config c;
  c.heads = 0;  // the head size is hidden / heads
  CHECK(code_of([&] { (void)models::transformer_encoder(c, false); }) == errc::invalid_argument);
  c.heads = 3;
  CHECK(code_of([&] { (void)models::transformer_encoder(c, false); }) == errc::invalid_argument);
  c = {};
  c.seq = huge;
  CHECK(code_of([&] { (void)models::transformer_encoder(c, false); }) == errc::size_overflow);
  CHECK(code_of([] { (void)models::bert_large(-1, 128); }) == errc::invalid_argument);
  CHECK(code_of([] { (void)models::bert_large(1, 128, false, -1); }) == errc::invalid_argument);
}

TEST_CASE("bert_training_step refuses a batch or sequence below 1 and products past 64 bits", "[models][hostile]") {
  std::deque<std::string> names;
  CHECK(code_of([&] { (void)models::bert_training_step(-2, 128, names); }) == errc::invalid_argument);
  CHECK(code_of([&] { (void)models::bert_training_step(2, 0, names); }) == errc::invalid_argument);
  CHECK(code_of([&] { (void)models::bert_training_step(2, 128, names, 24, 0); }) == errc::invalid_argument);
  // B * S alone overflows 64 bits.
  CHECK(code_of([&] { (void)models::bert_training_step(std::int64_t{1} << 40, std::int64_t{1} << 40, names); }) ==
        errc::size_overflow);
  CHECK(code_of([&] { (void)models::bert_training_step(2, 128, names, 1); }) == std::error_code{});
}

// Graph memory: mem_pool::malloc_async and free_async on a capturing stream (CUDA's allocation
// and free nodes). What a launch hands out, when the memory goes back to the device, and every
// refusal.
#include <npurt/sim/sim.hpp>
#include <npurt/stream_graph.hpp>

#include "common.hpp"

#include <cstring>
#include <utility>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

using namespace npurt_test;
using Catch::Matchers::ContainsSubstring;
using npurt::errc;

namespace {

// A stream of device 0 of the simple backend, pinned buffers of `n` bytes, and the device's
// free memory before the test allocates any.
struct graph_fixture {
  static constexpr std::size_t n = 4096;
  npurt::system sys{simple()};
  npurt::device& dev = sys.device(0);
  npurt::mem_pool& pool = dev.mem_pool();
  npurt::stream s = dev.make_stream();
  std::size_t free_before = dev.memory_info().free;
  unsigned char* in = static_cast<unsigned char*>(sys.host_malloc(n));
  unsigned char* out = static_cast<unsigned char*>(sys.host_malloc(n));
  ~graph_fixture() {
    sys.host_free(in);
    sys.host_free(out);
  }
  // A graph that allocates `result` and copies `in` into it, and one that copies it to `out`
  // and frees it (a free node of its own).
  struct pair_of_graphs {
    npurt::stream_graph producer, consumer;
    void* result;
  };
  pair_of_graphs producer_consumer() {
    s.begin_capture();
    void* result = pool.malloc_async(n, s);
    s.memcpy(result, n, in, n);
    npurt::stream_graph producer = s.end_capture();
    s.begin_capture();
    s.memcpy(out, n, result, n);
    pool.free_async(result, s);
    return {std::move(producer), s.end_capture(), result};
  }
  bool out_is(unsigned char v) const {
    for (std::size_t i = 0; i < n; ++i)
      if (out[i] != v) return false;
    return true;
  }
};

}  // namespace

TEST_CASE_METHOD(
    graph_fixture,
    "an allocation freed in its own graph: one address for every launch, back to the device with the graph",
    "[core][capture][memory]") {
  const std::size_t pool_used = pool.get_attribute(npurt::mem_pool_attr::used_mem_current);

  s.begin_capture();
  void* scratch = pool.malloc_async(n, s);
  REQUIRE(scratch != nullptr);
  s.memcpy(scratch, n, in, n);
  s.memcpy(out, n, scratch, n);
  pool.free_async(scratch, s);
  npurt::stream_graph g = s.end_capture();
  REQUIRE(g.valid());
  CHECK(g.size() == 2);  // allocations and frees are not nodes of their own: they cost the device nothing
  // The graph holds the memory from the capture on, outside the pool's figures.
  CHECK(dev.memory_info().free <= free_before - n);
  CHECK(pool.get_attribute(npurt::mem_pool_attr::used_mem_current) == pool_used);

  // Two launches queued back to back: the free node ends each launch's use, so no launch waits
  // for the program.
  std::memset(in, 3, n);
  g.launch(s);
  s.synchronize();
  CHECK(out_is(3));
  std::memset(in, 9, n);
  g.launch(s);
  g.launch(s);
  s.synchronize();
  CHECK(out_is(9));

  // Outside the graph nobody may free it: its graph does, at each launch's end.
  std::error_code ec;
  pool.free_async(scratch, s, ec);
  CHECK(ec == errc::invalid_pointer);
  CHECK_THAT(sys.recent_error_message(), ContainsSubstring("freed by its own graph"));
  dev.free(scratch, ec);
  CHECK(ec == errc::invalid_pointer);

  // Destroyed with a launch still queued: the launch still has its memory (the copies would
  // fail with invalid_pointer otherwise), and the device has it back once the launch is done.
  std::memset(in, 5, n);
  g.launch(s);
  g = npurt::stream_graph{};
  CHECK(dev.memory_info().free <= free_before - n);
  s.synchronize();
  CHECK(out_is(5));
  CHECK(dev.memory_info().free == free_before);
}

TEST_CASE_METHOD(
    graph_fixture,
    "an allocation a launch leaves allocated: read after the graph, freed by the program, then launched again",
    "[core][capture][memory]") {
  std::error_code ec;

  s.begin_capture();
  void* result = pool.malloc_async(n, s);
  s.memcpy(result, n, in, n);
  npurt::stream_graph g = s.end_capture();

  // Not allocated before the first launch.
  pool.free_async(result, s, ec);
  CHECK(ec == errc::invalid_pointer);
  CHECK_THAT(sys.recent_error_message(), ContainsSubstring("first launch"));

  std::memset(in, 4, n);
  g.launch(s);
  s.memcpy(out, n, result, n);  // ordinary work after the graph reads what the launch wrote
  s.synchronize();
  CHECK(out_is(4));

  // One launch's allocation at a time: the next launch waits for the program's free.
  g.launch(s, ec);
  CHECK(ec == errc::invalid_argument);
  CHECK_THAT(thrown_what([&] { g.launch(s); }), ContainsSubstring("not freed yet"));
  CHECK(s.query());  // nothing was enqueued

  pool.free_async(result, s);
  CHECK(thrown_code([&] { pool.free_async(result, s); }) == errc::double_free);
  std::memset(in, 6, n);
  g.launch(s);  // the same address again
  s.memcpy(out, n, result, n);
  s.synchronize();
  CHECK(out_is(6));

  // device::free frees it too (cudaFree of graph memory); the address stays the graph's.
  dev.free(result);
  CHECK(dev.memory_info().free <= free_before - n);

  // A graph destroyed while its launch's allocation is outstanding: the memory is the
  // program's until it frees it, then the device's once the stream has run what came before.
  g.launch(s);
  g = npurt::stream_graph{};
  std::memset(out, 0, n);
  s.memcpy(out, n, result, n);
  pool.free_async(result, s);
  CHECK(dev.memory_info().free <= free_before - n);
  s.synchronize();
  CHECK(out_is(6));
  CHECK(dev.memory_info().free == free_before);
  pool.free_async(result, s, ec);  // gone for good: no longer a graph's
  CHECK(ec == errc::invalid_pointer);
}

TEST_CASE_METHOD(graph_fixture, "a graph frees another graph's allocation: a free node of its own",
                 "[core][capture][memory]") {
  std::error_code ec;
  auto [producer, consumer, result] = producer_consumer();
  CHECK(consumer.size() == 1);
  consumer.launch(s, ec);  // nothing to free yet
  CHECK(ec == errc::invalid_pointer);
  CHECK_THAT(sys.recent_error_message(), ContainsSubstring("first launch"));
  for (unsigned char v = 1; v <= 3; ++v) {
    std::memset(in, v, n);
    producer.launch(s);
    consumer.launch(s);  // frees it: the producer may launch again
    s.synchronize();
    CHECK(out_is(v));
  }
  producer.launch(s);
  producer.launch(s, ec);  // not freed since
  CHECK(ec == errc::invalid_argument);
  consumer.launch(s);
  consumer.launch(s, ec);  // freed already
  CHECK(ec == errc::double_free);
  s.synchronize();

  // The producer destroyed with the consumer's launch queued: the memory outlives that launch.
  std::memset(in, 8, n);
  producer.launch(s);
  consumer.launch(s);
  producer = npurt::stream_graph{};
  CHECK(dev.memory_info().free <= free_before - n);
  s.synchronize();
  CHECK(out_is(8));
  CHECK(dev.memory_info().free == free_before);
  consumer.launch(s, ec);  // gone for good
  CHECK(ec == errc::invalid_pointer);
  CHECK_THAT(sys.recent_error_message(), ContainsSubstring("is gone"));
}

TEST_CASE_METHOD(graph_fixture, "a graph frees what a destroyed graph left allocated; refusals of such frees",
                 "[core][capture][memory][error]") {
  std::error_code ec;
  auto [producer, consumer, result] = producer_consumer();
  std::memset(in, 5, n);
  producer.launch(s);
  producer = npurt::stream_graph{};  // its launch's allocation stays outstanding
  consumer.launch(s);                // frees it for good, after the copy
  s.synchronize();
  CHECK(out_is(5));
  CHECK(dev.memory_info().free == free_before);

  // A use after the free node, a second free, the free of an allocation its own graph frees,
  // and one of another device: refused at the capture.
  s.begin_capture();
  void* own = pool.malloc_async(n, s);
  void* kept = pool.malloc_async(n, s);
  s.memcpy(own, n, in, n);
  s.memcpy(kept, n, own, n);
  pool.free_async(own, s);
  npurt::stream_graph g = s.end_capture();
  s.begin_capture();
  pool.free_async(kept, s);
  s.memcpy(out, n, kept, n);
  (void)s.end_capture(ec);
  CHECK(ec == errc::capture_invalidated);
  CHECK_THAT(sys.recent_error_message(), ContainsSubstring("the source of"));
  s.begin_capture();
  pool.free_async(kept, s);
  pool.free_async(kept, s, ec);
  CHECK(ec == errc::double_free);
  (void)s.end_capture(ec);
  s.begin_capture();
  pool.free_async(own, s, ec);
  CHECK(ec == errc::capture_unsupported);
  CHECK_THAT(sys.recent_error_message(), ContainsSubstring("freed by its own graph"));
  (void)s.end_capture(ec);
  npurt::system two{simple(2)};
  auto s0 = two.device(0).make_stream();
  auto s1 = two.device(1).make_stream();
  s0.begin_capture();
  void* p0 = two.device(0).mem_pool().malloc_async(n, s0);
  npurt::stream_graph g0 = s0.end_capture();
  s1.begin_capture();
  two.device(1).mem_pool().free_async(p0, s1, ec);
  CHECK(ec == errc::capture_unsupported);
  (void)s1.end_capture(ec);
  // A graph that frees another's: no launch into a capture.
  s.begin_capture();
  pool.free_async(kept, s);
  npurt::stream_graph frees = s.end_capture();
  s.begin_capture();
  frees.launch(s, ec);
  CHECK(ec == errc::capture_unsupported);
  (void)s.end_capture(ec);
}

TEST_CASE_METHOD(graph_fixture, "graph_flags::auto_free_on_launch: a launch frees what the previous one left allocated",
                 "[core][capture][memory]") {
  s.begin_capture();
  void* result = pool.malloc_async(n, s);
  s.memcpy(result, n, in, n);
  npurt::stream_graph g = s.end_capture(npurt::graph_flags::auto_free_on_launch);
  for (unsigned char v = 1; v <= 3; ++v) {
    std::memset(in, v, n);
    g.launch(s);  // the previous launch's result is freed first, in the stream's order
    s.memcpy(out, n, result, n);
    s.synchronize();
    CHECK(out_is(v));
  }
  const std::size_t held = dev.memory_info().free;
  CHECK(held <= free_before - n);
  g.launch(s);
  g.launch(s);  // back to back: each frees the one before
  s.synchronize();
  CHECK(dev.memory_info().free == held);  // one allocation throughout
  // The latest launch's allocation is still the program's to free, once.
  pool.free_async(result, s);
  CHECK(thrown_code([&] { pool.free_async(result, s); }) == errc::double_free);
  g = npurt::stream_graph{};
  s.synchronize();
  CHECK(dev.memory_info().free == free_before);
}

TEST_CASE_METHOD(graph_fixture,
                 "graph memory refusals: foreign frees, double frees, use after a free node, nested launches",
                 "[core][capture][memory][error]") {
  std::error_code ec;

  SECTION("memory the capture did not allocate, and a null pointer") {
    void* raw = dev.malloc(n);
    s.begin_capture();
    void* mine = pool.malloc_async(n, s);
    pool.free_async(nullptr, s, ec);
    CHECK(ec == errc::null_pointer);
    CHECK(s.capture_info() == npurt::capture_status::active);  // a null pointer breaks nothing
    pool.free_async(raw, s, ec);
    CHECK(ec == errc::capture_unsupported);
    CHECK(s.capture_info() == npurt::capture_status::invalidated);
    CHECK_THAT(thrown_what([&] { (void)s.end_capture(); }), ContainsSubstring("not memory this capture allocated"));
    (void)mine;
    dev.free(raw);
    CHECK(dev.memory_info().free == free_before);  // the failed capture's allocation went back
  }
  SECTION("a second free in the capture") {
    s.begin_capture();
    void* p = pool.malloc_async(n, s);
    pool.free_async(p, s);
    CHECK(thrown_code([&] { pool.free_async(p, s); }) == errc::double_free);
    CHECK(thrown_code([&] { (void)s.end_capture(); }) == errc::capture_invalidated);
    CHECK(dev.memory_info().free == free_before);
  }
  SECTION("a copy captured after the free node, from either end") {
    for (const bool from : {false, true}) {
      s.begin_capture();
      void* p = pool.malloc_async(n, s);
      pool.free_async(p, s);
      if (from) s.memcpy(out, n, static_cast<unsigned char*>(p) + 100, 16);
      else s.memset(p, n, 1, n);
      CHECK_THAT(
          thrown_what([&] { (void)s.end_capture(); }),
          ContainsSubstring(from ? "the source of" : "the destination of") && ContainsSubstring("freed before it"));
    }
    CHECK(dev.memory_info().free == free_before);
  }
  SECTION("a free outside the open capture that allocated it") {
    auto other = dev.make_stream();
    s.begin_capture(npurt::capture_mode::relaxed);
    void* p = pool.malloc_async(n, s);
    pool.free_async(p, other, ec);
    CHECK(ec == errc::capture_unsupported);
    CHECK_THAT(sys.recent_error_message(), ContainsSubstring("open capture"));
    CHECK(s.end_capture().valid());  // refused, not recorded: the capture goes on
  }
  SECTION("an allocating graph launched into a capture, and an allocation the device cannot hold") {
    s.begin_capture();
    (void)pool.malloc_async(n, s);
    npurt::stream_graph g = s.end_capture();
    auto other = dev.make_stream();
    other.begin_capture();
    g.launch(other, ec);
    CHECK(ec == errc::capture_unsupported);
    void* huge = pool.malloc_async(dev.properties().memory_bytes * 2, other, ec);
    CHECK(huge == nullptr);
    CHECK(ec == errc::out_of_memory);
    CHECK_THAT(thrown_what([&] { (void)other.end_capture(); }), ContainsSubstring("allocat"));
  }
}

TEST_CASE("a kernel captured after the free node of its operand is refused, naming the operand",
          "[core][capture][memory][error]") {
  npurt::system sys{npurt::sim::make_backend(npurt::sim::presets::ascend910(1))};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  using npurt::dtype;
  void* y = dev.malloc(4096);
  s.begin_capture();
  void* x = dev.mem_pool().malloc_async(4096, s);
  const npurt::kernel_desc relu{npurt::kernels::elementwise{
      npurt::kernels::eltwise_fn::relu, {x, npurt::shape{1024}, dtype::f32}, {}, {y, npurt::shape{1024}, dtype::f32}}};
  s.launch(relu);  // before the free node: fine
  dev.mem_pool().free_async(x, s);
  s.launch(relu);
  const std::string words = thrown_what([&] { (void)s.end_capture(); });
  CHECK_THAT(words, ContainsSubstring("operand") && ContainsSubstring("freed before it"));
  // A kernel after the free node that touches other memory is not refused.
  s.begin_capture();
  void* z = dev.mem_pool().malloc_async(4096, s);
  s.launch(npurt::kernel_desc{npurt::kernels::elementwise{
      npurt::kernels::eltwise_fn::relu, {z, npurt::shape{1024}, dtype::f32}, {}, {y, npurt::shape{1024}, dtype::f32}}});
  dev.mem_pool().free_async(z, s);
  s.launch(npurt::kernel_desc{npurt::kernels::elementwise{
      npurt::kernels::eltwise_fn::relu, {y, npurt::shape{1024}, dtype::f32}, {}, {y, npurt::shape{1024}, dtype::f32}}});
  CHECK(s.end_capture().size() == 2);
  dev.free(y);
}

TEST_CASE_METHOD(graph_fixture, "graph memory on a stream that joined the capture, and across a device reset",
                 "[core][capture][memory]") {
  auto side = dev.make_stream();
  auto fork = dev.make_event();
  auto join = dev.make_event();
  s.begin_capture();
  s.record(fork);
  side.wait(fork);
  void* p = pool.malloc_async(n, side);  // the capture's, though made on the joined stream
  side.memcpy(p, n, in, n);
  side.memcpy(out, n, p, n);
  pool.free_async(p, s);  // a free node on another of the capture's streams
  side.record(join);
  s.wait(join);
  npurt::stream_graph g = s.end_capture();
  REQUIRE(g.valid());
  std::memset(in, 8, n);
  g.launch(s);
  s.synchronize();
  CHECK(out_is(8));

  // A launch left outstanding, then the device reset: the graph is lost and its memory gone with
  // the device's; the pointer is nobody's any more.
  s.begin_capture();
  void* kept = pool.malloc_async(n, s);
  s.memset(kept, n, 1, n);
  npurt::stream_graph h = s.end_capture();
  h.launch(s);
  s.synchronize();
  dev.reset();
  CHECK_FALSE(g.valid());
  CHECK_FALSE(h.valid());
  CHECK(dev.memory_info().free == free_before);
  auto t = dev.make_stream();
  std::error_code ec;
  pool.free_async(kept, t, ec);
  CHECK(ec == errc::invalid_pointer);
  dev.free(kept, ec);
  CHECK(ec == errc::double_free);  // as for any device memory the reset freed
}

TEST_CASE("a system destroyed while a destroyed graph's launch is queued lets go of its memory",
          "[core][capture][memory]") {
  // Under ASan's leak check this is the test: the deferred release must run (or be dropped)
  // when the system goes, which here happens before its loop ever ran.
  npurt::system sys{simple()};
  auto& dev = sys.device(0);
  auto s = dev.make_stream();
  s.begin_capture();
  void* p = dev.mem_pool().malloc_async(1024, s);
  s.memset(p, 1024, 0, 1024);
  s.launch(fixed(us(10)));
  dev.mem_pool().free_async(p, s);
  npurt::stream_graph g = s.end_capture();
  g.launch(s);
  g.launch(s);
  g = npurt::stream_graph{};
  CHECK(dev.memory_info().free < dev.memory_info().total);  // still held for the queued launches
}

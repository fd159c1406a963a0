// Collectives in stream capture: a captured call or group is a node that takes its rank's next
// call number at each launch (as NCCL's calls captured in a CUDA graph), so the ranks' graphs
// and the calls made around them match in launch order; what a launch refuses; and the seed
// case's priority inversion, reproduced and removed by the capture's own lanes.
#include "helpers.hpp"

#include <npurt/stream_graph.hpp>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cstring>
#include <map>
#include <vector>

using namespace npurt;
using Catch::Matchers::ContainsSubstring;

namespace {

// One rank of a data-parallel step: a stream, a device vector and pinned staging for it.
struct dp_rank {
  stream s;
  host_buffer in, out;
  void* vec = nullptr;
  stream_graph g;
};

constexpr std::size_t elems = 64;
constexpr std::size_t vec_bytes = elems * sizeof(float);

std::vector<dp_rank> make_ranks(npurt::system& sys) {
  std::vector<dp_rank> r;
  for (auto& d : sys.devices())
    r.push_back({d.make_stream(), host_buffer(sys, vec_bytes), host_buffer(sys, vec_bytes), d.malloc(vec_bytes), {}});
  return r;
}

void fill(dp_rank& r, float base) {
  auto* p = static_cast<float*>(r.in.data());
  for (std::size_t i = 0; i < elems; ++i) p[i] = base + static_cast<float>(i);
}

float out_at(const dp_rank& r, std::size_t i) {
  float v = 0;
  std::memcpy(&v, static_cast<const std::byte*>(r.out.data()) + i * sizeof(float), sizeof v);
  return v;
}

// Captures on every rank: copy in, all-reduce in place, copy out.
void capture_step(communicator& comm, std::vector<dp_rank>& ranks) {
  for (auto& r : ranks) {
    r.s.begin_capture();
    r.s.memcpy(r.vec, vec_bytes, r.in.data(), vec_bytes);
    comm.all_reduce(r.vec, r.vec, elems, dtype::f32, reduce_op::sum, r.s);
    r.s.memcpy(r.out.data(), vec_bytes, r.vec, vec_bytes);
    r.g = r.s.end_capture();
  }
}

npurt::errc code_of(const std::error_code& ec) { return static_cast<npurt::errc>(ec.value()); }

// Timing-only ranks, one stream each, and a communicator of them all that keeps its records.
struct recorded_ranks {
  npurt::system sys;
  communicator comm;
  std::vector<stream> ss;
  explicit recorded_ranks(const sim::preset& p)
      : sys{sim::make_backend(p, coll_test::timing_only())},
        comm(communicator::init_all(sys, {.name = "dp", .keep_records = true})) {
    for (auto& d : sys.devices()) ss.push_back(d.make_stream());
  }
};

// Two ranks whose first stream, `s`, is capturing.
struct rank0_capturing : recorded_ranks {
  stream& s;
  rank0_capturing() : recorded_ranks(coll_test::mesh_preset(2)), s(ss[0]) { s.begin_capture(); }
};

}  // namespace

TEST_CASE("a captured all-reduce runs at every launch on that launch's data, matched by launch order",
          "[collective][capture]") {
  npurt::system sys{sim::make_backend(coll_test::mesh_preset(3))};
  auto comm = communicator::init_all(sys, {.name = "dp", .keep_records = true});
  auto ranks = make_ranks(sys);
  capture_step(comm, ranks);
  // Nothing ran, and no call number was taken: an eager call now is call #0 on every rank.
  CHECK(comm.records().empty());
  for (auto& r : ranks) {
    REQUIRE(r.g.size() == 3);
    comm.barrier(r.s);
  }
  sys.run();
  REQUIRE(comm.records().size() == 1);
  CHECK(comm.records()[0].sequence == 0);
  for (int launch = 0; launch < 3; ++launch) {
    CAPTURE(launch);
    for (std::size_t k = 0; k < ranks.size(); ++k) fill(ranks[k], static_cast<float>(100 * launch + 10 * k));
    for (auto& r : ranks) r.g.launch(r.s);
    // An eager call between launches takes the next number on every rank, after the graph's.
    if (launch == 1)
      for (auto& r : ranks) comm.all_reduce(r.vec, r.vec, elems, dtype::f32, reduce_op::sum, r.s);
    sys.run();
    REQUIRE_FALSE(comm.async_error());
    // Ranks hold 100 launch + 10 k + i: the sum is 300 launch + 30 + 3 i.
    for (auto& r : ranks)
      for (std::size_t i : {std::size_t{0}, std::size_t{17}, elems - 1})
        CHECK(out_at(r, i) == static_cast<float>(300 * launch + 30 + 3 * static_cast<int>(i)));
  }
  // barrier #0, the graph's #1, #2 and the eager #3 after the second launch, the graph's #4.
  REQUIRE(comm.records().size() == 5);
  for (std::size_t i = 0; i < comm.records().size(); ++i) {
    CAPTURE(i);
    CHECK(comm.records()[i].sequence == i);
    CHECK(comm.records()[i].op == (i == 0 ? collective_op::barrier : collective_op::all_reduce));
  }
}

TEST_CASE("a replayed collective takes the time of the same call made eagerly", "[collective][capture]") {
  const auto time_of = [](bool replay) {
    recorded_ranks ranks(coll_test::roce_preset(4));
    auto& [sys, comm, ss] = ranks;
    std::vector<stream_graph> gs;
    for (auto& s : ss) {
      if (replay) s.begin_capture();
      comm.all_reduce(nullptr, nullptr, std::size_t{8} << 20, dtype::f16, reduce_op::sum, s);
      comm.all_gather(nullptr, nullptr, std::size_t{1} << 20, dtype::f32, s);
      if (replay) gs.push_back(s.end_capture());
    }
    if (replay)
      for (std::size_t k = 0; k < ss.size(); ++k) gs[k].launch(ss[k]);
    sys.run();
    REQUIRE_FALSE(comm.async_error());
    std::vector<picoseconds> t;
    for (const auto& r : comm.records()) t.push_back(r.end - r.start);
    return t;
  };
  const auto eager = time_of(false);
  REQUIRE(eager.size() == 2);
  CHECK(eager[0] > picoseconds{0});
  CHECK(time_of(true) == eager);
}

TEST_CASE("ranks whose graphs hold different calls fail with a mismatch at the launch's run", "[collective][capture]") {
  npurt::system sys{sim::make_backend(coll_test::mesh_preset(2), coll_test::timing_only())};
  auto comm = communicator::init_all(sys, {.name = "dp"});
  stream s0 = sys.device(0).make_stream(), s1 = sys.device(1).make_stream();
  s0.begin_capture();
  comm.all_reduce(nullptr, nullptr, 1024, dtype::f32, reduce_op::sum, s0);
  stream_graph g0 = s0.end_capture();
  s1.begin_capture();
  comm.all_gather(nullptr, nullptr, 512, dtype::f32, s1);
  stream_graph g1 = s1.end_capture();
  g0.launch(s0);
  g1.launch(s1);
  std::error_code ec;
  sys.run(ec);
  std::string msg;
  CHECK(comm.async_error(&msg) == errc::collective_mismatch);
  CHECK_THAT(msg, ContainsSubstring("all_reduce") && ContainsSubstring("all_gather") && ContainsSubstring("call #0"));
  s0.synchronize(no_timeout, ec);
  CHECK(code_of(ec) == errc::collective_mismatch);
}

TEST_CASE_METHOD(rank0_capturing,
                 "a launch whose collective's communicator was aborted is refused with nothing enqueued",
                 "[collective][capture]") {
  s.launch(kernel_desc{kernels::fixed{picoseconds{1'000'000}}, "before"});
  comm.all_reduce(nullptr, nullptr, 1024, dtype::f32, reduce_op::sum, s);
  stream_graph g = s.end_capture();
  comm.abort();
  std::error_code ec;
  const event e = g.launch(s, ec);
  CHECK(code_of(ec) == errc::operation_aborted);
  CHECK_FALSE(e.valid());
  CHECK_THAT(sys.recent_error_message(),
             ContainsSubstring("node 1 (all_reduce)") && ContainsSubstring("'dp'") && ContainsSubstring("aborted"));
  CHECK_THROWS_AS(g.launch(s), npurt::error);
  // Not even the kernel before it was enqueued.
  CHECK(s.query());
  CHECK(sys.now() == sim_time{});
}

TEST_CASE("a group captured on every rank is one node per rank and replays as a group", "[collective][capture]") {
  npurt::system sys{sim::make_backend(coll_test::mesh_preset(2))};
  auto comm = communicator::init_all(sys, {.name = "dp", .keep_records = true});
  auto ranks = make_ranks(sys);
  std::vector<void*> gathered;
  for (auto& d : sys.devices()) gathered.push_back(d.malloc(2 * vec_bytes));
  for (auto& r : ranks) r.s.begin_capture();
  comm.group_start();
  for (std::size_t k = 0; k < ranks.size(); ++k) {
    auto& r = ranks[k];
    r.s.memcpy(r.vec, vec_bytes, r.in.data(), vec_bytes);
    comm.all_gather(r.vec, gathered[k], elems, dtype::f32, r.s);
    comm.all_reduce(r.vec, r.vec, elems, dtype::f32, reduce_op::max, r.s);
  }
  comm.group_end();
  for (std::size_t k = 0; k < ranks.size(); ++k) {
    auto& r = ranks[k];
    r.s.memcpy(r.out.data(), vec_bytes, r.vec, vec_bytes);
    r.g = r.s.end_capture();
    CHECK(r.g.size() == 3);  // copy in, the group, copy out
  }
  CHECK(comm.records().empty());
  for (int launch = 0; launch < 2; ++launch) {
    fill(ranks[0], static_cast<float>(launch));
    fill(ranks[1], static_cast<float>(5 - launch));
    for (auto& r : ranks) r.g.launch(r.s);
    sys.run();
    REQUIRE_FALSE(comm.async_error());
    for (auto& r : ranks) CHECK(out_at(r, 3) == static_cast<float>(std::max(launch, 5 - launch) + 3));
    // Rank 1's all-gather holds rank 0's vector first.
    std::vector<float> g(2 * elems);
    ranks[1].s.memcpy(g.data(), 2 * vec_bytes, gathered[1], 2 * vec_bytes);
    sys.run();
    CHECK(g[3] == static_cast<float>(launch + 3));
    CHECK(g[elems + 3] == static_cast<float>(5 - launch + 3));
  }
  REQUIRE(comm.records().size() == 4);
  CHECK(comm.records()[2].sequence == 2);
}

TEST_CASE("a group cannot hold a stream's calls from both sides of a capture's start or end", "[collective][capture]") {
  npurt::system sys{sim::make_backend(coll_test::mesh_preset(2), coll_test::timing_only())};
  auto comm = communicator::init_all(sys, {.name = "dp", .keep_records = true});
  stream s0 = sys.device(0).make_stream(), s1 = sys.device(1).make_stream();
  std::error_code ec;
  SECTION("a capture begun inside the group, before the group's end") {
    comm.group_start();
    comm.all_reduce(nullptr, nullptr, 64, dtype::f32, reduce_op::sum, s0);
    comm.all_reduce(nullptr, nullptr, 64, dtype::f32, reduce_op::sum, s1);
    s0.begin_capture();
    comm.group_end(ec);
    CHECK(code_of(ec) == errc::capture_unsupported);
    CHECK_THAT(sys.recent_error_message(), ContainsSubstring("began a capture inside the group") &&
                                               ContainsSubstring("none of the group's calls was enqueued"));
    s0.end_capture();
  }
  SECTION("a call on a stream that began capturing after its earlier calls of the group") {
    comm.group_start();
    comm.all_reduce(nullptr, nullptr, 64, dtype::f32, reduce_op::sum, s0);
    s0.begin_capture();
    comm.all_reduce(nullptr, nullptr, 64, dtype::f32, reduce_op::sum, s0, ec);
    CHECK(code_of(ec) == errc::capture_unsupported);
    CHECK_THAT(sys.recent_error_message(), ContainsSubstring("half a node of a capture"));
    comm.all_reduce(nullptr, nullptr, 64, dtype::f32, reduce_op::sum, s1);
    comm.group_end(ec);
    CHECK(code_of(ec) == errc::capture_unsupported);
    s0.end_capture(ec);
    CHECK(code_of(ec) == errc::capture_invalidated);
  }
  // Neither rank's call numbers moved: the next calls are #0 on both and match.
  comm.all_gather(nullptr, nullptr, 32, dtype::f32, s0);
  comm.all_gather(nullptr, nullptr, 32, dtype::f32, s1);
  sys.run();
  REQUIRE_FALSE(comm.async_error());
  REQUIRE(comm.records().size() == 1);
  CHECK(comm.records()[0].sequence == 0);
}

TEST_CASE_METHOD(rank0_capturing, "an awaited collective on a capturing stream is refused and invalidates the capture",
                 "[collective][capture]") {
  async_error_code got;
  bool called = false;
  comm.async_all_reduce(nullptr, nullptr, 64, dtype::f32, reduce_op::sum, s, [&](async_error_code e) {
    got = e;
    called = true;
  });
  CHECK_FALSE(called);  // never inside the initiating call
  std::error_code ec;
  sys.run(ec);
  REQUIRE(called);
  CHECK(code_of(got) == errc::stream_captured);
  s.end_capture(ec);
  CHECK(code_of(ec) == errc::capture_invalidated);
  CHECK_THAT(sys.recent_error_message(), ContainsSubstring("npurt::communicator::async_all_reduce") &&
                                             ContainsSubstring("an awaited call completes when its work has run"));
}

TEST_CASE("a graph of one stream with a collective launched into a capture takes its numbers at the outer launch",
          "[collective][capture]") {
  recorded_ranks ranks(coll_test::mesh_preset(2));
  auto& [sys, comm, ss] = ranks;
  std::vector<stream_graph> outer;
  for (auto& s : ss) {
    s.begin_capture();
    comm.all_reduce(nullptr, nullptr, 64, dtype::f32, reduce_op::sum, s);
    stream_graph inner = s.end_capture();
    s.begin_capture();
    inner.launch(s);
    inner.launch(s);
    outer.push_back(s.end_capture());
    CHECK(outer.back().size() == 2);
  }
  CHECK(comm.records().empty());
  for (std::size_t k = 0; k < ss.size(); ++k) outer[k].launch(ss[k]);
  sys.run();
  REQUIRE_FALSE(comm.async_error());
  REQUIRE(comm.records().size() == 2);
  CHECK(comm.records()[1].sequence == 1);
}

namespace {

// The seed case in a graph: each rank captures `queued` compute kernels on its compute stream
// and an all-reduce on a communication stream that forked from it, then launches the graph on a
// stream of normal priority. The all-reduce node comes after the kernels in capture order, so
// a launch submits it after them.
struct seed_outcome {
  collective_record rec;
  std::map<device_id, std::vector<sim_time>> compute;
};

seed_outcome captured_seed(int comm_priority, stream_flags comm_flags) {
  struct starts final : observer {
    std::map<device_id, std::vector<sim_time>> compute;
    void on_task(const task_info& t) override {
      if (t.name == "compute") compute[t.device].push_back(t.start);
    }
  } log;
  constexpr int devices = 4;
  npurt::system sys{sim::make_backend(sim::presets::ascend910(devices), coll_test::timing_only())};
  sys.add_observer(log);
  auto comm = communicator::init_all(sys, {.name = "dp", .keep_records = true});
  std::vector<stream_graph> graphs;
  std::vector<stream> launch_on;
  for (auto& d : sys.devices()) {
    stream compute = d.make_stream();
    stream comms = d.make_stream({.priority = comm_priority, .flags = comm_flags});
    event fork = d.make_event(), join = d.make_event();
    compute.begin_capture();
    compute.record(fork);
    comms.wait(fork);
    for (int k = 0; k < 10 + 5 * d.id(); ++k)
      compute.launch(kernel_desc{kernels::fixed{picoseconds{1'000'000'000}}, "compute"});
    comm.all_reduce(nullptr, nullptr, 25 << 20, dtype::f16, reduce_op::sum, comms);
    comms.record(join);
    compute.wait(join);
    graphs.push_back(compute.end_capture());
    launch_on.push_back(d.make_stream());
  }
  for (std::size_t k = 0; k < graphs.size(); ++k) graphs[k].launch(launch_on[k]);
  sys.run();
  REQUIRE_FALSE(comm.async_error());
  sys.remove_observer(log);
  return {comm.records().at(0), log.compute};
}

std::size_t started_before_arrival(const seed_outcome& o, int d) {
  std::size_t n = 0;
  for (sim_time t : o.compute.at(d))
    if (t <= o.rec.arrival[static_cast<std::size_t>(d)]) ++n;
  return n;
}

}  // namespace

TEST_CASE("a graph's communication lane keeps its stream's priority and flags: the seed case's inversion goes",
          "[collective][capture][seed]") {
  // Captured at normal priority: the inversion, as eagerly. Every rank's all-reduce reaches the
  // device after all of its kernels started, and the ranks wait for the one with the most.
  const auto slow = captured_seed(priority::normal, stream_flags::none);
  for (int d = 0; d < 4; ++d) CHECK(started_before_arrival(slow, d) == static_cast<std::size_t>(10 + 5 * d));
  CHECK(slow.rec.start == slow.rec.arrival[3]);
  for (const auto& [prio, flags] :
       {std::pair{priority::high, stream_flags::none}, std::pair{priority::normal, stream_flags::direct_submit}}) {
    CAPTURE(prio, static_cast<unsigned>(flags));
    const auto fast = captured_seed(prio, flags);
    for (int d = 0; d < 4; ++d) {
      // Only the kernel already running went first: the lane ran at its stream's priority (or
      // submitted directly), not at the launching stream's.
      CHECK(started_before_arrival(fast, d) == 1);
      CHECK(fast.rec.start - fast.rec.arrival[static_cast<std::size_t>(d)] < picoseconds{10'000'000});
    }
    CHECK(fast.rec.end < fast.compute.at(3).back());
  }
}

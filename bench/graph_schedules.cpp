// graph_schedules — ResNet-50 through the graph API on a simulated ascend910, timing-only:
// latency, throughput and peak memory for each schedule (sequential, parallel, pipeline), each
// optimisation level 0-3, memory reuse off and on; the "before" (level 0, sequential, no reuse)
// and "after" (best) rows; the ResNet-50 training step (kernel list) with and without memory
// reuse; and a BERT-Large training step (batch 96, mixed precision) against MindSpore's
// published 269 sentences/s on one Ascend 910; and a data-parallel MLP training step on 8 ranks
// with its gradients all-reduced inside the run, in backward and in forward order; and ResNet-50
// inference at batch 1 run call by call against as a captured graph (compile_options::capture_graph),
// a single run and 16 batches, with and without enable_overlap.
//
//   graph_schedules [--batch N] [--batches N] [--json PATH]
#include <npurt/collective.hpp>
#include <npurt/graph/session.hpp>
#include <npurt/memplan.hpp>
#include <npurt/models/graphs.hpp>
#include <npurt/models/memory_trace.hpp>
#include <npurt/models/resnet50.hpp>
#include <npurt/observer.hpp>
#include <npurt/sim/sim.hpp>

#include "bench_common.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

namespace {

constexpr double mib = 1024.0 * 1024.0;

struct row {
  std::string name;
  double latency_ms = 0, images_per_s = 0, peak_mib = 0;
};

// Sums kernel time by operation, for "where the time goes".
class by_op final : public npurt::observer {
 public:
  void on_task(const npurt::task_info& t) override {
    if (t.kind != npurt::task_kind::kernel || !t.kernel) return;
    const auto n = t.kernel->display_name();
    std::string key = std::visit([](const auto& o) { return std::string(npurt::kernels::op_name(o)); }, t.kernel->op);
    (void)n;
    time[key] += npurt::to_us(t.end - t.start);
  }
  std::map<std::string, double> time;
};

}  // namespace

int main(int argc, char** argv) {
  long batch = 64, batches = 4;
  npurt_bench::command_line cl{"graph_schedules: ResNet-50 through the graph API, per schedule and optimisation level"};
  cl.app().add_option("--batch", batch, "images per batch")->capture_default_str()->check(CLI::Range(1L, 4096L));
  cl.app()
      .add_option("--batches", batches, "batches streamed through the pipeline schedule")
      ->capture_default_str()
      ->check(CLI::Range(1L, 1024L));
  if (auto rc = cl.parse(argc, argv)) return *rc;
  npurt_bench::report rep("graph_schedules (ResNet-50 inference, batch " + std::to_string(batch) +
                          ", fp16, timing-only, ascend910)");
  npurt::graph g = npurt::models::resnet50_graph(batch, 224);
  npurt::tensor input = npurt::tensor::timing_only({batch, 3, 224, 224}, npurt::dtype::f32);
  std::vector<row> rows;
  std::printf("%-34s %12s %12s %12s %8s %8s\n", "configuration", "latency ms", "images/s", "peak MiB", "fused",
              "streams");
  // One configuration: a single run's latency, throughput over `batches` with run_batches, and
  // peak memory. With overlap, batch k+1's copy in and batch k-1's copy out run beside batch k's
  // operators (two arena and I/O slots), under the default shared execution queue.
  auto measure = [&](npurt::schedule sched, int level, bool reuse, bool overlap) {
    npurt::system sys{npurt::sim::presets::ascend910(1)};
    npurt::session s{sys, {.precision = npurt::precision::fp16, .profiling = false}};
    s.enable_overlap(overlap);
    auto c = s.compile(g, {.schedule = sched, .memory_reuse = reuse, .optimization_level = level});
    const auto& cr = c.report();
    const double single = static_cast<double>(s.run(c, {{"input", input}}).latency.count()) * 1e-9;
    std::vector<std::vector<npurt::feed>> feeds(static_cast<std::size_t>(batches), {{"input", input}});
    const auto br = s.run_batches(c, feeds);
    // Arenas in flight: a pipeline's two stages and one batch copying in; overlap's two slots.
    const double slots = sched == npurt::schedule::pipeline ? 3.0 : overlap ? 2.0 : 1.0;
    const double peak = (static_cast<double>(cr.activation_bytes) * slots + static_cast<double>(cr.weight_bytes) +
                         static_cast<double>(cr.io_bytes)) /
                        mib;
    const std::string tail = (reuse ? "reuse" : "noreuse") + std::string(overlap ? "_overlap" : "");
    row r{std::string(npurt::to_string(sched)) + " L" + std::to_string(level) + (reuse ? " reuse" : " no-reuse") +
              (overlap ? " overlap" : ""),
          single, br.batches_per_second * static_cast<double>(batch), peak};
    std::printf("%-34s %12.3f %12.1f %12.1f %8zu %8zu\n", r.name.c_str(), r.latency_ms, r.images_per_s, r.peak_mib,
                cr.fused, cr.streams);
    const std::string key = std::string(npurt::to_string(sched)) + "_L" + std::to_string(level) + "_" + tail;
    rep.add(key + "_latency_ms", r.latency_ms, "ms");
    rep.add(key + "_images_per_s", r.images_per_s, "img/s");
    rep.add(key + "_peak_mib", r.peak_mib, "MiB");
    rows.push_back(r);
  };
  for (auto sched : {npurt::schedule::sequential, npurt::schedule::parallel, npurt::schedule::pipeline})
    for (int level = 0; level <= 3; ++level)
      for (bool reuse : {false, true}) measure(sched, level, reuse, false);
  for (auto sched : {npurt::schedule::sequential, npurt::schedule::parallel}) measure(sched, 2, true, true);
  const row& before = rows.front();  // sequential L0 no-reuse
  const auto best_lat = *std::min_element(rows.begin(), rows.end(),
                                          [](const row& a, const row& b) { return a.latency_ms < b.latency_ms; });
  const auto best_thr = *std::max_element(rows.begin(), rows.end(),
                                          [](const row& a, const row& b) { return a.images_per_s < b.images_per_s; });
  const auto best_mem =
      *std::min_element(rows.begin(), rows.end(), [](const row& a, const row& b) { return a.peak_mib < b.peak_mib; });
  std::printf("\nbefore (sequential L0 no-reuse): %.3f ms, %.1f img/s, %.1f MiB\n", before.latency_ms,
              before.images_per_s, before.peak_mib);
  std::printf("after, latency:    %-28s %.3f ms  (%+.1f %%)\n", best_lat.name.c_str(), best_lat.latency_ms,
              100.0 * (best_lat.latency_ms / before.latency_ms - 1));
  std::printf("after, throughput: %-28s %.1f img/s (x%.2f)\n", best_thr.name.c_str(), best_thr.images_per_s,
              best_thr.images_per_s / before.images_per_s);
  std::printf("after, memory:     %-28s %.1f MiB (%+.1f %%)\n\n", best_mem.name.c_str(), best_mem.peak_mib,
              100.0 * (best_mem.peak_mib / before.peak_mib - 1));
  rep.add("after_latency_change_pct", 100.0 * (best_lat.latency_ms / before.latency_ms - 1), "%", best_lat.name);
  rep.add("after_throughput_ratio", best_thr.images_per_s / before.images_per_s, "x", best_thr.name);
  rep.add("after_memory_change_pct", 100.0 * (best_mem.peak_mib / before.peak_mib - 1), "%", best_mem.name);

  // The ResNet-50 training step: the kernel list on one stream, and its memory with and without
  // reuse (the allocation trace planned statically, or every tensor in its own place).
  {
    const npurt::models::resnet50 model{batch, npurt::dtype::f16};
    npurt::system sys{npurt::sim::presets::ascend910(1), {}};
    auto st = sys.device(0).make_stream();
    const auto t0 = sys.now();
    for (const auto& k : model.training_step()) st.launch(k);
    st.synchronize();
    const double ms = static_cast<double>((sys.now() - t0).count()) * 1e-9;
    const auto tr = npurt::models::training_step_trace(model);
    std::vector<npurt::memplan::buffer> bufs;
    for (const auto& b : tr.buffers) bufs.push_back({b.id, b.lower, b.upper, b.size});
    const auto plan = npurt::memplan::make_plan(bufs, {.alignment = 512, .search_work = 0});
    rep.add("train_step_ms", ms, "ms", "sequential stream, kernel list");
    rep.add("train_images_per_s", static_cast<double>(batch) / (ms * 1e-3), "img/s");
    rep.add("train_memory_noreuse_mib", static_cast<double>(npurt::memplan::no_reuse_size(bufs)) / mib, "MiB");
    rep.add("train_memory_reuse_mib", static_cast<double>(plan.arena_size) / mib, "MiB");
  }

  // BERT-Large training step, batch 96, sequence 128, mixed precision, one ascend910.
  {
    std::deque<std::string> names;
    const auto ks = npurt::models::bert_training_step(96, 128, names);
    npurt::system sys{npurt::sim::presets::ascend910(1), {}};
    by_op obs;
    sys.add_observer(obs);
    auto st = sys.device(0).make_stream();
    const auto t0 = sys.now();
    for (const auto& k : ks) st.launch(k);
    st.synchronize();
    sys.remove_observer(obs);
    const double secs = static_cast<double>((sys.now() - t0).count()) * 1e-12;
    const double sps = 96.0 / secs;
    rep.add("bert_large_step_ms", secs * 1e3, "ms", "batch 96, seq 128, fp16 compute");
    rep.add("bert_large_sentences_per_s", sps, "sent/s", "MindSpore 0.5 on one 910: 269");
    rep.add("bert_large_vs_mindspore_pct", 100.0 * (sps / 269.0 - 1), "%");
    double total = 0;
    for (const auto& [k, v] : obs.time) total += v;
    for (const auto& [k, v] : obs.time) rep.add("bert_time_share_" + k, 100.0 * v / total, "%");
  }
  // Data parallelism through the graph API: a training step on 8 ranks whose gradients are
  // all-reduced inside the run (compile_options::all_reduce). The step ends when its last
  // operator or reduction does (the copies of the outputs to the host are left out: a training
  // loop keeps its parameters on the device). Listed last layer first, the reductions overlap the
  // rest of the backward pass; listed first layer first, every one waits for the last gradient.
  // Two steps: an MLP (few, large gradients) and ResNet-50 (161 gradients, most of them small).
  const auto data_parallel = [&](const std::string& prefix, const char* note, const auto& make_graph,
                                 const std::vector<npurt::feed>& in, const std::vector<std::string>& backward_order,
                                 const std::vector<std::string>& forward_order, npurt::precision prec, int level,
                                 bool all_cases) {
    constexpr int ranks = 8;
    struct dp_case {
      const char* key;
      const std::vector<std::string>* order;
      int priority;
    };
    const dp_case cases[] = {{"compute_only", nullptr, 0},
                             {"backward_order", &backward_order, npurt::priority::high},
                             {"backward_order_low_priority", &backward_order, npurt::priority::low},
                             {"forward_order", &forward_order, npurt::priority::high}};
    double compute_only = 0;
    for (const auto& c : cases) {
      if (!all_cases && c.order != nullptr && c.order != &backward_order) continue;
      if (!all_cases && c.priority == npurt::priority::low) continue;
      npurt::system sys{npurt::sim::presets::ascend910(ranks), {}};
      auto comm = npurt::communicator::init_all(sys);
      std::vector<std::unique_ptr<npurt::session>> ss;
      std::vector<npurt::graph> gs;
      std::vector<npurt::compiled_graph> cs;
      for (int r = 0; r < ranks; ++r) {
        ss.push_back(std::make_unique<npurt::session>(sys, npurt::session_config{.device_id = r, .precision = prec}));
        gs.push_back(make_graph());
        for (const auto& n : backward_order) gs.back().set_output(n);
        npurt::compile_options o{.optimization_level = level, .timing_only = true};
        if (c.order) o.all_reduce = npurt::output_all_reduce{.comm = comm, .outputs = *c.order, .priority = c.priority};
        cs.push_back(ss.back()->compile(gs.back(), o));
      }
      std::vector<npurt::run_result> res(ranks);
      for (int r = 0; r < ranks; ++r)
        ss[static_cast<std::size_t>(r)]->async_run(cs[static_cast<std::size_t>(r)], in,
                                                   [&res, r](npurt::async_error_code ec, npurt::run_result x) {
                                                     if (ec) throw npurt::error(ec, x.error);
                                                     res[static_cast<std::size_t>(r)] = std::move(x);
                                                   });
      sys.run();
      double step = 0, reduce = 0;  // the slowest rank's
      for (const auto& x : res)
        for (const auto& op : x.ops) {
          step = std::max(step, static_cast<double>(op.end.count()) * 1e-9);
          if (op.type == "AllReduce") reduce += static_cast<double>(op.busy.count()) * 1e-9 / ranks;
        }
      const std::string key = prefix + c.key;
      rep.add(key + "_step_ms", step, "ms", note);
      if (!c.order) compute_only = step;
      else {
        rep.add(key + "_reductions_ms", reduce, "ms", "all-reduce time per rank, one after another");
        rep.add(key + "_hidden_pct", 100.0 * (1 - (step - compute_only) / reduce), "%",
                "share of the reductions' time not added to the step");
      }
    }
  };
  {
    constexpr std::int64_t batch_per_rank = 2048;
    const std::vector<std::int64_t> widths{1024, 4096, 4096, 4096, 1024};
    const int layers = static_cast<int>(widths.size()) - 1;
    std::vector<std::string> backward_order, forward_order;
    for (int i = layers; i >= 1; --i)
      for (const char* k : {".weight.grad", ".bias.grad"}) backward_order.push_back("fc" + std::to_string(i) + k);
    for (int i = 1; i <= layers; ++i)
      for (const char* k : {".weight.grad", ".bias.grad"}) forward_order.push_back("fc" + std::to_string(i) + k);
    data_parallel(
        "dp_", "MLP 1024-4096x3-1024, batch 2048 per rank, 8 ranks",
        [&] { return npurt::models::mlp_training_step(batch_per_rank, widths, 0.1, false); },
        {{"x", npurt::tensor::timing_only({batch_per_rank, widths.front()}, npurt::dtype::f32)},
         {"target", npurt::tensor::timing_only({batch_per_rank, widths.back()}, npurt::dtype::f32)}},
        backward_order, forward_order, npurt::precision::fp32, 1, true);
  }
  {
    const npurt::models::resnet_config rc{.batch = 32};
    std::vector<std::string> backward_order;
    (void)npurt::models::resnet_training_step(rc, false, 1, &backward_order);
    const std::vector<npurt::feed> in{
        {"input", npurt::tensor::timing_only({rc.batch, 3, rc.image, rc.image}, npurt::dtype::f32)},
        {"labels", npurt::tensor::timing_only({rc.batch, rc.classes}, npurt::dtype::f32)}};
    const auto step = [&] { return npurt::models::resnet_training_step(rc, false); };
    data_parallel("resnet50_dp_", "ResNet-50 training step as a graph, batch 32 per rank, fp16, 8 ranks", step, in,
                  backward_order, {backward_order.rbegin(), backward_order.rend()}, npurt::precision::fp16, 1, true);
    // Level 2: ReluGrads in the ConvGrads' epilogues, elementwise gradients chained.
    data_parallel("resnet50_dp_level2_",
                  "ResNet-50 training step as a graph, batch 32 per rank, fp16, 8 ranks, optimization level 2", step,
                  in, backward_order, {backward_order.rbegin(), backward_order.rend()}, npurt::precision::fp16, 2,
                  false);
  }
  // Captured runs (compile_options::capture_graph): ResNet-50 inference at batch 1, with the
  // runtime's own launch cost and with 10 us a call standing for a framework's eager dispatch;
  // the second run's latency (the first one captures), call by call against as a graph.
  {
    const npurt::tensor in1 = npurt::tensor::timing_only({1, 3, 224, 224}, npurt::dtype::f32);
    struct host_cost {
      const char* tag;
      std::int64_t ps;
    };
    for (const host_cost h : {host_cost{"launch2.5us", 2'500'000}, host_cost{"launch10us", 10'000'000}}) {
      double ms[2] = {0, 0};
      std::size_t kernels = 0;
      for (const bool captured : {false, true}) {
        npurt::system_options o;
        o.launch_overhead = npurt::picoseconds{h.ps};
        npurt::system sys{npurt::sim::make_backend(npurt::sim::presets::ascend910(1)), o};
        npurt::session s{sys, {.precision = npurt::precision::fp16, .profiling = false}};
        npurt::graph g1 = npurt::models::resnet50_graph(1, 224);
        auto c = s.compile(g1, {.optimization_level = 2, .timing_only = true, .capture_graph = captured});
        kernels = c.report().kernels;
        (void)s.run(c, {{"input", in1}});
        ms[captured ? 1 : 0] = static_cast<double>(s.run(c, {{"input", in1}}).latency.count()) * 1e-9;
      }
      const std::string key = std::string("captured_b1_") + h.tag;
      rep.add(
          key + "_eager_latency_ms", ms[0], "ms",
          "ResNet-50 inference, batch 1, " + std::to_string(kernels) + " kernels, launched call by call (second run)");
      rep.add(key + "_graph_latency_ms", ms[1], "ms", "compile_options::capture_graph (second run)");
      rep.add(key + "_speedup", ms[0] / ms[1], "ratio", "call by call over graph");
      // Throughput over 16 batches: call by call or as graphs, with the next batch's copies in
      // beside this batch's operators (enable_overlap) or not.
      for (const bool captured : {false, true})
        for (const bool overlap : {false, true}) {
          npurt::system_options o;
          o.launch_overhead = npurt::picoseconds{h.ps};
          npurt::system sys{npurt::sim::make_backend(npurt::sim::presets::ascend910(1)), o};
          npurt::session s{sys, {.precision = npurt::precision::fp16, .profiling = false}};
          s.enable_overlap(overlap);
          npurt::graph g1 = npurt::models::resnet50_graph(1, 224);
          auto c = s.compile(g1, {.optimization_level = 2, .timing_only = true, .capture_graph = captured});
          const std::vector<std::vector<npurt::feed>> feeds(16, {{"input", in1}});
          const double ips = s.run_batches(c, feeds).batches_per_second;
          rep.add(key + (captured ? "_graph" : "_eager") + (overlap ? "_overlap" : "") + "_images_per_s", ips, "img/s",
                  std::string(captured ? "as graphs" : "call by call") + ", 16 batches" +
                      (overlap ? ", copies beside the operators (enable_overlap)" : ""));
        }
    }
  }
  return cl.finish(rep);
}

// Data-parallel training, the way a framework drives HCCL: four simulated Ascend 910 devices
// each fit a linear model to their own shard of the data by gradient descent, and an all-reduce
// sums the gradients after every step so that every rank applies the same update. The kernels
// compute real results, so the program checks what it learned: every rank ends with the same
// weights, bit for bit, and they are the weights that generated the data.
//
// Then it trains again with an AI-core exception injected into one rank's gradient kernel. The
// failure is sticky on that rank's stream, as on CUDA and CANN, and the all-reduce after it
// spreads the rank's stale gradient to every rank; the step's synchronize reports it, and the
// loop rolls every rank back to its last checkpoint and replays. Because the simulation is
// deterministic, the recovered run ends with exactly the bits of the run without the fault.
//
//   data_parallel_sgd [--steps N]
#include <npurt/npurt.hpp>
#include <npurt/sim/fault_backend.hpp>
#include <npurt/sim/sim.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <system_error>
#include <vector>

using npurt::dtype;
using npurt::kernels::eltwise_fn;

namespace {

constexpr int ranks = 4;
constexpr std::int64_t features = 16;  // k: the model's weights
constexpr std::int64_t samples = 256;  // m: each rank's shard
constexpr float learning_rate = 0.5f;
constexpr std::size_t w_bytes = features * sizeof(float);

npurt::tensor_desc t2(void* p, std::int64_t rows, std::int64_t cols) {
  return {p, npurt::shape{rows, cols}, dtype::f32};
}

/// Where rank 0's device time goes: the step's kernels, and its part of each all-reduce (from
/// its arrival, so waiting for slower peers counts too).
class time_by_kind final : public npurt::observer {
 public:
  void on_task(const npurt::task_info& t) override {
    if (t.device != 0) return;
    if (t.kind == npurt::task_kind::kernel) kernels += t.end - t.start;
    if (t.kind == npurt::task_kind::collective) all_reduce += t.end - t.start;
  }
  npurt::picoseconds kernels{}, all_reduce{};
};

/// One rank: its stream, its shard (x, y), its copy of the weights, the step's scratch, and the
/// step's kernels.
struct rank_state {
  npurt::stream s;
  npurt::device_buffer x, y, w, pred, grad;
  npurt::kernels::matmul forward{}, gradient{};
  npurt::kernels::elementwise residual{}, update{};
  std::vector<float> w_host = std::vector<float>(features);

  rank_state(npurt::device& dev, const std::vector<float>& x_host, const std::vector<float>& y_host)
      : s(dev.make_stream()),
        x(dev, x_host.size() * sizeof(float)),
        y(dev, y_host.size() * sizeof(float)),
        w(dev, w_bytes),
        pred(dev, y_host.size() * sizeof(float)),
        grad(dev, w_bytes) {
    using namespace npurt::kernels;
    // Pageable sources are staged at the call: the caller's vectors may go at once.
    s.memcpy(x.data(), x.size(), x_host.data(), x.size(), npurt::memcpy_kind::host_to_device);
    s.memcpy(y.data(), y.size(), y_host.data(), y.size(), npurt::memcpy_kind::host_to_device);
    s.memset(w.data(), w_bytes, 0, w_bytes);  // w = 0
    // pred = X w; pred = pred - y; grad = lr * 2 / (m * p) * X^T pred (the gradient of the mean
    // squared error over all ranks' samples, once the all-reduce has summed it); w = w - grad.
    forward = {t2(x.data(), samples, features), t2(w.data(), features, 1), t2(pred.data(), samples, 1)};
    residual = {eltwise_fn::sub, t2(pred.data(), samples, 1), t2(y.data(), samples, 1), t2(pred.data(), samples, 1)};
    gradient = {t2(x.data(), samples, features), t2(pred.data(), samples, 1), t2(grad.data(), features, 1)};
    gradient.trans_a = true;
    gradient.alpha = learning_rate * 2.0f / static_cast<float>(samples * ranks);
    update = {eltwise_fn::sub, t2(w.data(), features, 1), t2(grad.data(), features, 1), t2(w.data(), features, 1)};
  }
};

/// The weights to learn, and each rank's shard of the data they generate (y = X w*), from a
/// fixed seed: every run sees the same data.
struct dataset {
  std::vector<float> w_true = std::vector<float>(features);
  std::vector<std::vector<float>> x, y;

  dataset() {
    for (std::int64_t j = 0; j < features; ++j) w_true[static_cast<std::size_t>(j)] = 0.25f * static_cast<float>(j - 7);
    std::mt19937 gen{2024};
    std::uniform_real_distribution<float> uniform{-1.0f, 1.0f};
    for (int r = 0; r < ranks; ++r) {
      auto& xr = x.emplace_back(samples * features);
      auto& yr = y.emplace_back(samples, 0.0f);
      for (auto& v : xr) v = uniform(gen);
      for (std::size_t i = 0; i < yr.size(); ++i)
        for (std::size_t j = 0; j < w_true.size(); ++j) yr[i] += xr[i * w_true.size() + j] * w_true[j];
    }
  }
};

std::vector<rank_state> make_ranks(npurt::system& sys, const dataset& data) {
  std::vector<rank_state> rs;
  rs.reserve(ranks);
  for (int r = 0; r < ranks; ++r) rs.emplace_back(sys.device(r), data.x[r], data.y[r]);
  return rs;
}

/// Part one. Each rank is a coroutine (npurt::task, awaiting with npurt::use_task) that drives
/// its own stream: it queues the step's kernels without waiting and awaits only the all-reduce,
/// whose result the update reads.
npurt::task<void> train(rank_state& r, npurt::communicator& comm, int steps) {
  for (int step = 0; step < steps; ++step) {
    r.s.launch(r.forward);
    r.s.launch(r.residual);
    r.s.launch(r.gradient);
    co_await comm.async_all_reduce(r.grad.data(), r.grad.data(), features, dtype::f32, npurt::reduce_op::sum, r.s,
                                   npurt::use_task);
    r.s.launch(r.update);
  }
  co_await r.s.async_memcpy(r.w_host.data(), w_bytes, r.w.data(), w_bytes, npurt::memcpy_kind::device_to_host,
                            npurt::use_task);
}

/// Part two, with the blocking API: a step is queued on every rank, then each rank's stream is
/// synchronized, which reports the first failure of its fire-and-forget work. A failed step
/// rolls every rank back to the last checkpoint (the failed rank's stale gradient reached the
/// others through the all-reduce). Returns the number of rollbacks.
int train_with_rollback(std::vector<rank_state>& rs, npurt::communicator& comm, int steps, int checkpoint_every) {
  auto ck = npurt::create_checkpoint();
  int saved = -1;  // the step the checkpoint holds (a replayed step is not saved again)
  int rollbacks = 0;
  for (int step = 0; step < steps;) {
    if (step % checkpoint_every == 0 && step != saved) {
      // Every rank holds the same weights: rank 0's are the model's.
      ck = npurt::create_checkpoint();
      ck.add_tensor("w", dtype::f32, {features}, rs[0].w.data(), rs[0].s);
      ck.set_metadata("step", std::int64_t{step});
      saved = step;
    }
    for (auto& r : rs) {
      r.s.launch(r.forward);
      r.s.launch(r.residual);
      r.s.launch(r.gradient);
      comm.all_reduce(r.grad.data(), r.grad.data(), features, dtype::f32, npurt::reduce_op::sum, r.s);
      r.s.launch(r.update);
    }
    bool failed = false;
    for (auto& r : rs) {
      std::error_code ec;
      r.s.synchronize(npurt::no_timeout, ec);  // reads (and clears) the stream's sticky error
      if (ec) {
        std::printf("  step %d: stream %u of device %d failed: %s\n", step, r.s.id(), r.s.device(),
                    ec.message().c_str());
        failed = true;
      }
    }
    if (!failed) {
      ++step;
      continue;
    }
    ++rollbacks;
    step = static_cast<int>(ck.get_metadata<std::int64_t>("step"));
    for (auto& r : rs) ck.copy_to_device("w", r.w.data(), w_bytes, r.s);
    std::printf("  rolled every rank back to the checkpoint of step %d\n", step);
  }
  for (auto& r : rs) r.s.memcpy(r.w_host.data(), w_bytes, r.w.data(), w_bytes, npurt::memcpy_kind::device_to_host);
  for (auto& r : rs) r.s.synchronize();
  return rollbacks;
}

bool ranks_agree(const std::vector<rank_state>& rs) {
  for (const auto& r : rs)
    if (std::memcmp(r.w_host.data(), rs[0].w_host.data(), w_bytes) != 0) return false;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 60;
  // Only "--steps N" with N a whole number in range: atoi would take "abc" as 0 and "5x" as 5,
  // and any other option is a mistake, not something to ignore.
  bool usable = argc == 1;
  if (argc == 3 && std::strcmp(argv[1], "--steps") == 0) {
    const char* end = argv[2] + std::strlen(argv[2]);
    const auto [p, ec] = std::from_chars(argv[2], end, steps);
    usable = ec == std::errc{} && p == end;
  }
  if (!usable || steps < 2 || steps > 100000) {
    std::fprintf(stderr, "usage: data_parallel_sgd [--steps N]   (2 <= N <= 100000)\n");
    return 2;
  }
  const dataset data;

  // Part one: co_await, no faults.
  npurt::system sys{npurt::sim::presets::ascend910(ranks)};
  auto comm = npurt::communicator::init_all(sys);  // rank i = device i
  time_by_kind where;
  sys.add_observer(where);
  auto rs = make_ranks(sys, data);
  for (auto& r : rs) npurt::spawn(sys, train(r, comm, steps));
  sys.run();
  for (auto& r : rs) r.s.synchronize();  // reports any failure of the fire-and-forget kernels

  double err = 0;
  for (std::size_t j = 0; j < data.w_true.size(); ++j)
    err = std::max(err, static_cast<double>(std::fabs(rs[0].w_host[j] - data.w_true[j])));
  const double total_us = npurt::to_us(sys.now().time_since_epoch());
  std::printf("%d ranks, %d steps of %lld samples each: largest weight error %.2e, ranks %s\n", ranks, steps,
              static_cast<long long>(samples), err, ranks_agree(rs) ? "identical" : "DIFFER");
  std::printf(
      "simulated on %s: %.1f us in all, %.2f us per step; rank 0 spent %.1f us in kernels and %.1f us in "
      "all-reduces\n",
      sys.device(0).properties().name.c_str(), total_us, total_us / steps, npurt::to_us(where.kernels),
      npurt::to_us(where.all_reduce));

  // Part two: an AI-core exception in device 2's first kernel submitted after a third of the
  // first run's virtual time, a checkpoint every 10 steps.
  npurt::fault_plan plan;
  plan.add(npurt::fault_spec::aicore_exception(2).at_time(npurt::sim_time{sys.now().time_since_epoch() / 3}));
  npurt::system faulty{npurt::sim::with_faults(npurt::sim::presets::ascend910(ranks), plan)};
  auto faulty_comm = npurt::communicator::init_all(faulty);
  auto frs = make_ranks(faulty, data);
  std::printf("again with an AI-core exception injected on device 2:\n");
  const int rollbacks = train_with_rollback(frs, faulty_comm, steps, 10);
  const bool same_bits = std::memcmp(frs[0].w_host.data(), rs[0].w_host.data(), w_bytes) == 0;
  std::printf("%zu fault(s) injected, %d rollback(s); recovered weights %s the fault-free run's\n",
              npurt::sim::faults_of(faulty).injected().size(), rollbacks, same_bits ? "equal" : "DIFFER FROM");

  if (!(err < 1e-3)) {
    // Too few steps (--steps) to learn them: gradient descent is not there yet.
    std::fprintf(stderr,
                 "data_parallel_sgd: after %d steps the weights are not yet learned to 1e-3 (largest error %.2e)\n",
                 steps, err);
    return 1;
  }
  if (!ranks_agree(rs) || !ranks_agree(frs) || !same_bits || rollbacks != 1) {
    std::fprintf(stderr, "data_parallel_sgd: training did not end as it should\n");
    return 1;
  }
  return 0;
}

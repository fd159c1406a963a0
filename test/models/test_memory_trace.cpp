#include <npurt/models/memory_trace.hpp>

#include <npurt/memplan.hpp>

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <sstream>
#include <string>

using namespace npurt;
using namespace npurt::models;

namespace {

// Index of a tensor or a kernel by name; -1 if absent.
std::int64_t tensor_index(const resnet50& m, const std::string& name) {
  const auto& ts = m.tensors();
  for (std::size_t i = 0; i < ts.size(); ++i)
    if (ts[i].name == name) return static_cast<std::int64_t>(i);
  return -1;
}

std::int64_t kernel_index(const resnet50& m, std::string_view name) {
  const auto& ks = m.training_step();
  for (std::size_t i = 0; i < ks.size(); ++i)
    if (ks[i].name == name) return static_cast<std::int64_t>(i);
  return -1;
}

const trace_buffer& buffer_of(const allocation_trace& tr, std::int64_t tensor) {
  const auto it =
      std::find_if(tr.buffers.begin(), tr.buffers.end(), [&](const trace_buffer& b) { return b.id == tensor; });
  REQUIRE(it != tr.buffers.end());
  return *it;
}

std::vector<memplan::buffer> as_memplan(const allocation_trace& tr) {
  std::vector<memplan::buffer> v;
  for (const auto& b : tr.buffers) v.push_back({b.id, b.lower, b.upper, b.size});
  return v;
}

}  // namespace

TEST_CASE("the training-step trace sizes every tensor from its shape and dtype", "[models][memory_trace]") {
  const resnet50 m{32};
  const auto tr = training_step_trace(m);
  const auto& ts = m.tensors();
  REQUIRE(tr.kernels == static_cast<std::int64_t>(m.training_step().size()));
  REQUIRE(m.accesses().size() == m.training_step().size());
  // Hand-computed sizes: FP16 activations and compute weights, FP32 masters and conv gradients.
  CHECK(buffer_of(tr, tensor_index(m, "conv1.out")).size == 32ull * 64 * 112 * 112 * 2);
  CHECK(buffer_of(tr, tensor_index(m, "input")).size == 32ull * 3 * 224 * 224 * 2);
  CHECK(buffer_of(tr, tensor_index(m, "maxpool.out")).size == 32ull * 64 * 56 * 56 * 2);
  CHECK(buffer_of(tr, tensor_index(m, "layer4.2.bn3.out")).size == 32ull * 2048 * 7 * 7 * 2);
  CHECK(buffer_of(tr, tensor_index(m, "layer3.0.conv2.out")).size == 32ull * 256 * 14 * 14 * 2);
  CHECK(buffer_of(tr, tensor_index(m, "fc.weight")).size == 2048ull * 1000 * 4);
  CHECK(buffer_of(tr, tensor_index(m, "fc.weight.f16")).size == 2048ull * 1000 * 2);
  CHECK(buffer_of(tr, tensor_index(m, "layer2.0.conv2.weight.grad")).size == 128ull * 128 * 3 * 3 * 4);
  CHECK(buffer_of(tr, tensor_index(m, "softmax.out")).size == 32ull * 1000 * 2);

  // Every buffer is a tensor of the table, with a non-empty lifetime inside the step.
  REQUIRE(tr.buffers.size() == ts.size());
  for (const auto& b : tr.buffers) {
    INFO(ts[static_cast<std::size_t>(b.id)].name);
    CHECK(0 <= b.lower);
    CHECK(b.lower < b.upper);
    CHECK(b.upper <= tr.kernels);
    CHECK(b.size == static_cast<std::uint64_t>(ts[static_cast<std::size_t>(b.id)].shape.elements()) *
                        size_of(ts[static_cast<std::size_t>(b.id)].type));
    CHECK(b.persistent == is_persistent(ts[static_cast<std::size_t>(b.id)].role));
  }

  // The optimizer's view: one FP32 master and one momentum buffer per parameter tensor, 25,557,032
  // elements in all (reference §5); FP16 copies of the 53 convs and the FC weight.
  std::map<tensor_role, std::pair<std::uint64_t, std::uint64_t>> by_role;  // tensors, elements
  for (const auto& t : ts) {
    by_role[t.role].first += 1;
    by_role[t.role].second += static_cast<std::uint64_t>(t.shape.elements());
  }
  CHECK(by_role[tensor_role::master_weight] == std::pair<std::uint64_t, std::uint64_t>{161, 25'557'032});
  CHECK(by_role[tensor_role::optimizer_state] == std::pair<std::uint64_t, std::uint64_t>{161, 25'557'032});
  CHECK(by_role[tensor_role::weight_grad] == std::pair<std::uint64_t, std::uint64_t>{161, 25'557'032});
  CHECK(by_role[tensor_role::compute_weight].first == 54);
  CHECK(by_role[tensor_role::running_stat].first == 2 * 53);
  CHECK(tr.persistent_bytes == 25'557'032ull * 8 + by_role[tensor_role::compute_weight].second * 2 +
                                   by_role[tensor_role::running_stat].second * 4);
}

TEST_CASE("each tensor lives from the kernel that writes it to the last kernel that reads it",
          "[models][memory_trace]") {
  const resnet50 m{32};
  const auto tr = training_step_trace(m);
  const auto& ts = m.tensors();
  const auto& acc = m.accesses();
  std::vector<std::int64_t> first_write(ts.size(), -1), first_read(ts.size(), -1);
  for (std::size_t k = 0; k < acc.size(); ++k) {
    INFO(m.training_step()[k].name);
    for (const auto* list : {&acc[k].reads, &acc[k].writes})
      for (auto t : *list) {
        REQUIRE(t < ts.size());
        // A kernel only touches a tensor while it is allocated.
        const auto& b = buffer_of(tr, t);
        CHECK(b.lower <= static_cast<std::int64_t>(k));
        CHECK(static_cast<std::int64_t>(k) < b.upper);
      }
    for (auto t : acc[k].writes)
      if (first_write[t] < 0) first_write[t] = static_cast<std::int64_t>(k);
    for (auto t : acc[k].reads)
      if (first_read[t] < 0) first_read[t] = static_cast<std::int64_t>(k);
  }
  for (const auto& b : tr.buffers) {
    const auto t = static_cast<std::size_t>(b.id);
    INFO(ts[t].name);
    if (b.persistent || ts[t].role == tensor_role::input) {
      CHECK(b.lower == 0);
      if (b.persistent) CHECK(b.upper == tr.kernels);
      if (ts[t].role == tensor_role::input) CHECK(first_write[t] == -1);  // copied in before the step
      continue;
    }
    // Transient tensors are produced in the step before anything reads them, and are read.
    CHECK(first_write[t] == b.lower);
    CHECK(first_read[t] > b.lower);
  }

  // Tightness at known points: saved activations die at their last backward reader, a BN
  // output that only feeds the residual add dies there, an input's gradient after its consumer.
  auto upper_is_after = [&](const char* tensor, const char* kernel) {
    INFO(tensor << " dies after " << kernel);
    CHECK(buffer_of(tr, tensor_index(m, tensor)).upper == kernel_index(m, kernel) + 1);
  };
  upper_is_after("conv1.out", "bn1.grad");
  upper_is_after("input", "conv1.grad_weight");
  upper_is_after("layer1.0.downsample.1.out", "layer1.0.add");
  upper_is_after("layer1.0.conv1.out", "layer1.0.bn1.grad");
  upper_is_after("maxpool.out", "layer1.0.conv1.grad_weight");  // after the shortcut's, in reverse order
  upper_is_after("fc.out", "softmax");
  upper_is_after("layer4.2.relu3.grad_input", "layer4.2.grad_add");  // identity shortcut's gradient
  upper_is_after("layer1.0.conv1.weight.grad", "layer1.0.conv1.weight.sgd");
  // In place: relu and the residual add write the BN output's tensor; no tensors of their own.
  CHECK(tensor_index(m, "layer1.0.relu3.out") == -1);
  CHECK(tensor_index(m, "layer1.0.add.out") == -1);
}

TEST_CASE("peak live bytes holds every saved activation and every parameter", "[models][memory_trace]") {
  const resnet50 m{32};
  const auto tr = training_step_trace(m);
  const auto& ts = m.tensors();
  // What must all be live at the turn from forward to backward: the persistent tensors, the
  // batch, and every forward output a backward kernel reads.
  std::vector<bool> saved(ts.size(), false);
  for (std::size_t k = m.forward_kernels(); k < m.training_step().size(); ++k)
    for (auto t : m.accesses()[k].reads)
      if (ts[t].role == tensor_role::activation || ts[t].role == tensor_role::saved_stat ||
          ts[t].role == tensor_role::input)
        saved[t] = true;
  std::uint64_t saved_bytes = 0, all_bytes = 0;
  for (std::size_t t = 0; t < ts.size(); ++t) {
    if (saved[t]) saved_bytes += ts[t].bytes();
    all_bytes += ts[t].bytes();
  }
  CHECK(saved_bytes > 32ull * 30 * 1024 * 1024);  // tens of MiB per image in FP16
  CHECK(tr.peak_live >= saved_bytes + tr.persistent_bytes);
  CHECK(tr.peak_live < all_bytes);
  // The checker's lower bound is computed by other code from the same buffers.
  CHECK(memplan::lower_bound(as_memplan(tr)) == tr.peak_live);

  // The event stream is the buffer list: one alloc and one free each, sorted, frees first.
  REQUIRE(tr.events.size() == 2 * tr.buffers.size());
  std::vector<int> allocs(tr.buffers.size()), frees(tr.buffers.size());
  std::uint64_t live = 0, peak = 0;
  for (std::size_t i = 0; i < tr.events.size(); ++i) {
    const auto& e = tr.events[i];
    const auto& b = tr.buffers[e.buffer];
    CHECK(e.size == b.size);
    CHECK(e.time == (e.alloc ? b.lower : b.upper));
    if (i > 0) {
      const auto& p = tr.events[i - 1];
      CHECK((p.time < e.time || (p.time == e.time && (!p.alloc || e.alloc))));
    }
    (e.alloc ? allocs : frees)[e.buffer] += 1;
    live = e.alloc ? live + e.size : live - e.size;
    peak = std::max(peak, live);
  }
  CHECK(live == 0);
  CHECK(peak == tr.peak_live);
  CHECK(std::all_of(allocs.begin(), allocs.end(), [](int c) { return c == 1; }));
  CHECK(std::all_of(frees.begin(), frees.end(), [](int c) { return c == 1; }));

  // Activations scale with the batch; the parameters do not.
  const auto tr64 = training_step_trace(64);
  CHECK(tr64.persistent_bytes == tr.persistent_bytes);
  CHECK(tr64.peak_live - tr64.persistent_bytes > 2 * (tr.peak_live - tr.persistent_bytes) * 9 / 10);
  CHECK(tr64.peak_live < 2 * tr.peak_live);
}

TEST_CASE("repeated steps allocate the persistent tensors once", "[models][memory_trace]") {
  const auto tr = training_step_trace(8);
  const auto ev = repeated_events(tr, 3);
  std::size_t persistent = 0;
  for (const auto& b : tr.buffers) persistent += b.persistent ? 1 : 0;
  const std::size_t transient = tr.buffers.size() - persistent;
  CHECK(ev.size() == 2 * (persistent + 3 * transient));
  std::uint64_t live = 0, peak = 0;
  std::map<std::uint32_t, int> open;
  for (const auto& e : ev) {
    if (e.alloc) {
      CHECK(open[e.buffer]++ == 0);
      live += e.size;
    } else {
      CHECK(--open[e.buffer] == 0);
      live -= e.size;
    }
    peak = std::max(peak, live);
  }
  CHECK(live == 0);
  // The steps do not overlap, so three of them peak as one does.
  CHECK(peak == tr.peak_live);
  const auto kept = repeated_events(tr, 2, false);
  CHECK(kept.size() == persistent + 2 * 2 * transient);
}

TEST_CASE("the planner's plan of the trace passes the independent checker", "[models][memory_trace][memplan]") {
  const auto tr = training_step_trace(32);
  const auto buffers = as_memplan(tr);
  memplan::options o;
  o.alignment = 512;
  o.search_work = 5'000'000;  // the full search is a benchmark's business
  const auto plan = memplan::make_plan(buffers, o);
  const auto rep = memplan::check(buffers, plan.offsets, o.alignment);
  INFO(rep.error);
  CHECK(rep.valid);
  CHECK(rep.lower_bound == tr.peak_live);
  CHECK(plan.arena_size >= rep.lower_bound);
  CHECK(plan.arena_size < rep.no_reuse);
  // The CSV form reads back through the planner's parser as the same buffers.
  std::stringstream csv;
  write_csv(csv, tr);
  const auto back = memplan::read_csv(csv);
  REQUIRE(back.buffers.size() == buffers.size());
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    CHECK(back.buffers[i].id == buffers[i].id);
    CHECK(back.buffers[i].lower == buffers[i].lower);
    CHECK(back.buffers[i].upper == buffers[i].upper);
    CHECK(back.buffers[i].size == buffers[i].size);
  }
}

TEST_CASE("the trace is deterministic and follows the compute dtype", "[models][memory_trace]") {
  const auto a = training_step_trace(16), b = training_step_trace(16);
  REQUIRE(a.buffers.size() == b.buffers.size());
  for (std::size_t i = 0; i < a.buffers.size(); ++i) {
    CHECK(a.buffers[i].lower == b.buffers[i].lower);
    CHECK(a.buffers[i].upper == b.buffers[i].upper);
    CHECK(a.buffers[i].size == b.buffers[i].size);
  }
  CHECK(a.peak_live == b.peak_live);
  // FP32 training: 4-byte activations and no compute copies of the weights.
  const resnet50 m32{16, dtype::f32};
  const auto f = training_step_trace(m32);
  CHECK(buffer_of(f, tensor_index(m32, "conv1.out")).size == 16ull * 64 * 112 * 112 * 4);
  CHECK(tensor_index(m32, "conv1.weight.f32") == -1);
  CHECK(std::none_of(m32.tensors().begin(), m32.tensors().end(),
                     [](const step_tensor& t) { return t.role == tensor_role::compute_weight; }));
  CHECK(f.peak_live > a.peak_live);
}

// The allocation trace of a training step (see memory_trace.hpp).
#include <npurt/models/memory_trace.hpp>

#include <algorithm>
#include <limits>
#include <ostream>

namespace npurt::models {

namespace {

void sort_events(std::vector<trace_event>& ev) {
  std::sort(ev.begin(), ev.end(), [](const trace_event& a, const trace_event& b) {
    if (a.time != b.time) return a.time < b.time;
    if (a.alloc != b.alloc) return !a.alloc;  // frees first: a step's dead tensors make room for its new ones
    return a.buffer < b.buffer;
  });
}

}  // namespace

allocation_trace training_step_trace(const resnet50& model) {
  const auto& tensors = model.tensors();
  const auto& access = model.accesses();
  allocation_trace tr;
  tr.kernels = static_cast<std::int64_t>(access.size());
  constexpr std::int64_t unseen = std::numeric_limits<std::int64_t>::max();
  std::vector<std::int64_t> first(tensors.size(), unseen), last(tensors.size(), -1);
  for (std::int64_t k = 0; k < tr.kernels; ++k) {
    const auto& a = access[static_cast<std::size_t>(k)];
    for (const auto* list : {&a.reads, &a.writes})
      for (auto t : *list) {
        first[t] = std::min(first[t], k);
        last[t] = std::max(last[t], k);
      }
  }
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    if (last[t] < 0) continue;  // never touched: nothing to allocate
    trace_buffer b;
    b.id = static_cast<std::int64_t>(t);
    b.size = tensors[t].bytes();
    b.persistent = is_persistent(tensors[t].role);
    if (b.persistent) {
      b.lower = 0;
      b.upper = tr.kernels;
      tr.persistent_bytes += b.size;
    } else {
      // A well-formed step writes a transient tensor before reading it, so its first access is
      // its first write; inputs arrive before the step.
      b.lower = tensors[t].role == tensor_role::input ? 0 : first[t];
      b.upper = last[t] + 1;
    }
    tr.buffers.push_back(b);
  }
  tr.events.reserve(2 * tr.buffers.size());
  for (std::uint32_t i = 0; i < tr.buffers.size(); ++i) {
    const auto& b = tr.buffers[i];
    tr.events.push_back({b.lower, true, i, b.size});
    tr.events.push_back({b.upper, false, i, b.size});
  }
  sort_events(tr.events);
  std::uint64_t live = 0;
  for (const auto& e : tr.events) {
    if (!e.alloc) {
      live -= e.size;
      continue;
    }
    live += e.size;
    if (live > tr.peak_live) {
      tr.peak_live = live;
      tr.peak_time = e.time;
    }
  }
  return tr;
}

allocation_trace training_step_trace(std::int64_t batch, dtype compute) {
  const resnet50 model{batch, compute};
  return training_step_trace(model);
}

std::vector<trace_event> repeated_events(const allocation_trace& trace, int steps, bool free_persistent) {
  std::vector<trace_event> ev;
  const auto n = static_cast<std::uint32_t>(trace.buffers.size());
  for (std::uint32_t i = 0; i < n; ++i) {
    const auto& b = trace.buffers[i];
    if (b.persistent) {
      ev.push_back({0, true, i, b.size});
      if (free_persistent) ev.push_back({trace.kernels * steps, false, i, b.size});
      continue;
    }
    for (int s = 0; s < steps; ++s) {
      const std::int64_t t0 = trace.kernels * s;
      const std::uint32_t id = i + static_cast<std::uint32_t>(s) * n;
      ev.push_back({t0 + b.lower, true, id, b.size});
      ev.push_back({t0 + b.upper, false, id, b.size});
    }
  }
  sort_events(ev);
  return ev;
}

void write_csv(std::ostream& out, const allocation_trace& trace) {
  out << "id,lower,upper,size\n";
  for (const auto& b : trace.buffers) out << b.id << ',' << b.lower << ',' << b.upper << ',' << b.size << '\n';
}

}  // namespace npurt::models

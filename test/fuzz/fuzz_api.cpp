// libFuzzer target: random sequences of public runtime calls on the simple backend, including
// times and sizes at the ends of their ranges, freed and foreign pointers, device resets, and
// handles that outlive their system. Properties, beyond "no crash, no UB, no leak, no hang": every
// error is one of npurt's codes, and virtual time never runs backwards or below zero.
//
// Pageable host memory is the one place where npurt trusts the caller (it cannot know the size
// of memory it did not allocate), so sizes of copies touching the two pageable buffers are either
// honest (at most their size) or beyond the user address space (which npurt must reject).
#include <npurt/device.hpp>
#include <npurt/error.hpp>
#include <npurt/event.hpp>
#include <npurt/simple_backend.hpp>
#include <npurt/stream.hpp>
#include <npurt/stream_graph.hpp>
#include <npurt/system.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

namespace {

using npurt::picoseconds;

class input {
 public:
  input(const std::uint8_t* d, std::size_t n) : d_(d), n_(n) {}
  [[nodiscard]] bool empty() const noexcept { return i_ >= n_; }
  std::uint8_t byte() noexcept { return i_ < n_ ? d_[i_++] : 0; }
  std::uint64_t u64() noexcept {
    std::uint64_t v = 0;
    for (int k = 0; k < 8; ++k) v = (v << 8) | byte();
    return v;
  }
  template <class T>
  T& pick(std::vector<T>& v) noexcept {
    return v[byte() % v.size()];
  }

 private:
  const std::uint8_t* d_;
  std::size_t n_;
  std::size_t i_ = 0;
};

constexpr std::size_t pageable_bytes = 1 << 16;

picoseconds any_time(input& in) {
  constexpr std::int64_t max = INT64_MAX;
  switch (in.byte() % 9) {
    case 0: return picoseconds{0};
    case 1: return picoseconds{1};
    case 2: return picoseconds{in.byte() * 1'000'000LL};
    case 3: return picoseconds{-1};
    case 4: return picoseconds{max};
    case 5: return picoseconds{max - in.byte()};
    case 6: return picoseconds{4'000'000'000'000'000'000LL};
    case 7: return picoseconds{static_cast<std::int64_t>(in.u64())};
    default: return picoseconds{INT64_MIN};
  }
}

std::optional<picoseconds> any_timeout(input& in) {
  if (in.byte() % 3 == 0) return npurt::no_timeout;
  return any_time(in);
}

// Sizes for memory npurt knows (device, pinned): anything.
std::size_t any_size(input& in) {
  switch (in.byte() % 8) {
    case 0: return 0;
    case 1: return 1;
    case 2: return std::size_t{in.byte()} << (in.byte() % 24);
    case 3: return SIZE_MAX;
    case 4: return SIZE_MAX / 2;
    case 5: return SIZE_MAX - in.byte();
    case 6: return std::size_t{1} << (in.byte() % 64);
    default: return static_cast<std::size_t>(in.u64());
  }
}

// Sizes for copies that may touch pageable memory: honest, or past the user address space.
std::size_t pageable_size(input& in) {
  switch (in.byte() % 4) {
    case 0: return 1 + in.byte() % pageable_bytes;
    case 1: return pageable_bytes;
    case 2: return SIZE_MAX / 2 + (in.byte() % 2);
    default: return (std::size_t{1} << 57) + in.byte();
  }
}

struct device_ptr {
  void* p = nullptr;
  int device = 0;
};

struct world {
  // First, so they die last: queued copies may still point into them when the streams drain.
  std::vector<std::byte> a = std::vector<std::byte>(pageable_bytes);
  std::vector<std::byte> b = std::vector<std::byte>(pageable_bytes);
  std::unique_ptr<npurt::system> sys;
  std::vector<npurt::stream> streams;
  std::vector<npurt::event> events;
  std::vector<device_ptr> device_ptrs;  // live, freed or of a destroyed system
  std::vector<void*> pinned;
  std::vector<void*> freed_pinned;  // only ever passed to host_free again; never a live block
  std::vector<npurt::device_buffer> buffers;
  std::vector<npurt::stream_graph> graphs;  // may outlive their system, device or streams
  std::vector<npurt::task_group> groups;    // of open captures, live or destroyed graphs
  npurt::sim_time last_now{};

  void make_system(input& in) {
    npurt::simple_config cfg;
    cfg.devices = 1 + in.byte() % 3;
    cfg.kernel_launch_latency = picoseconds{in.byte() % 2 ? 0 : 1000};
    cfg.properties.memory_bytes = std::size_t{1} << 24;
    npurt::system_options opts;
    opts.trace_from_env = false;
    sys = std::make_unique<npurt::system>(cfg, opts);
    last_now = {};
  }
};

void check(std::error_code ec) {
  if (ec && ec.category() != npurt::error_category()) __builtin_trap();
}

void check_clock(world& w) {
  if (!w.sys) return;
  const auto now = w.sys->now();
  if (now < w.last_now || now.time_since_epoch().count() < 0) __builtin_trap();
  w.last_now = now;
}

npurt::stream* any_stream(world& w, input& in) {
  if (w.streams.empty()) return nullptr;
  return &in.pick(w.streams);
}

void* host_end(world& w, input& in, bool& pageable) {
  pageable = false;
  switch (in.byte() % 4) {
    case 0: pageable = true; return w.a.data();
    case 1: pageable = true; return w.b.data();
    case 2: return w.pinned.empty() ? nullptr : in.pick(w.pinned);
    default: return nullptr;
  }
}

void step(world& w, input& in) {
  std::error_code ec;
  const std::uint8_t op = in.byte() % 17;
  if (!w.sys && op != 16) return;
  switch (op) {
    case 0: {  // a stream, on a device id that may not exist
      const int dev = static_cast<int>(in.byte() % 4) - (in.byte() % 8 == 0 ? 5 : 0);
      if (npurt::device* d = w.sys->find_device(dev, ec)) {
        if (w.streams.size() < 8) w.streams.push_back(d->make_stream({.priority = static_cast<int>(in.byte()) - 128}));
        // A core limit of any kind and count, on the device or a stream: one that is taken is in force.
        const auto kind = static_cast<npurt::core_kind>(in.byte() % 3);
        const std::uint32_t n = in.byte() % 40u;
        if (in.byte() % 2) {
          d->set_core_limit(kind, n, ec);
          if (!ec && d->core_limit(kind) != n) __builtin_trap();
        } else if (auto* s = any_stream(w, in)) {
          s->set_core_limit(kind, n, ec);
          if (!ec && s->core_limit(kind) != n) __builtin_trap();
        }
      }
      check(ec);
      break;
    }
    case 1: {  // a fixed kernel of any duration and block_dim
      if (auto* s = any_stream(w, in)) {
        npurt::kernel_desc k{npurt::kernels::fixed{any_time(in)}, "k", in.byte() % 40u};
        if (in.byte() % 2) {
          npurt::event e = s->launch(k, ec);
          if (!ec && w.events.size() < 16) w.events.push_back(e);
        } else {
          s->async_launch(k, [](npurt::async_error_code c) { check(c); });
        }
        check(ec);
      }
      break;
    }
    case 2: {  // a copy between any two ends
      auto* s = any_stream(w, in);
      if (!s) break;
      bool dst_pageable = false, src_pageable = false;
      void* dst = nullptr;
      const void* src = nullptr;
      const bool dst_dev = in.byte() % 2 && !w.device_ptrs.empty();
      const bool src_dev = in.byte() % 2 && !w.device_ptrs.empty();
      dst = dst_dev ? in.pick(w.device_ptrs).p : host_end(w, in, dst_pageable);
      src = src_dev ? in.pick(w.device_ptrs).p : host_end(w, in, src_pageable);
      const bool pageable = dst_pageable || src_pageable;
      if (in.byte() % 4 == 0) {  // a 2-D copy: any shape, kept inside pageable ends (npurt trusts them)
        const std::size_t width = in.byte() % 2 ? 1 + in.byte() % 64 : any_size(in);
        const std::size_t height = in.byte() % 2 ? 1 + in.byte() % 8 : any_size(in);
        const std::size_t dpitch = in.byte() % 2 ? width + in.byte() % 16 : any_size(in);
        const std::size_t spitch = in.byte() % 2 ? width + in.byte() % 16 : any_size(in);
        const auto extent = [&](std::size_t pitch) {
          std::size_t e = 0;
          if (height == 0 || __builtin_mul_overflow(pitch, height - 1, &e) || __builtin_add_overflow(e, width, &e))
            return SIZE_MAX;
          return e;
        };
        if ((dst_pageable && extent(dpitch) > pageable_bytes) || (src_pageable && extent(spitch) > pageable_bytes))
          break;
        const auto kind = static_cast<npurt::memcpy_kind>(in.byte() % 5);
        s->memcpy2d(dst, dpitch, src, spitch, width, height, kind, ec);
        check(ec);
        break;
      }
      const std::size_t count = pageable ? pageable_size(in) : any_size(in);
      std::size_t dst_max = pageable ? pageable_size(in) : any_size(in);
      if (dst_pageable && count <= pageable_bytes) dst_max = std::min(dst_max, pageable_bytes);
      const auto kind = static_cast<npurt::memcpy_kind>(in.byte() % 5);
      s->memcpy(dst, dst_max, src, count, kind, ec);
      check(ec);
      break;
    }
    case 3: {  // memset, value write or value wait of device memory (any pointer, size, offset, condition)
      auto* s = any_stream(w, in);
      if (!s || w.device_ptrs.empty()) break;
      auto* p = static_cast<unsigned char*>(in.pick(w.device_ptrs).p);
      switch (in.byte() % 3) {
        case 0: {
          const std::size_t n = any_size(in);
          s->memset(p, any_size(in), in.byte(), n, ec);
          break;
        }
        case 1: (void)s->write_value(p + in.byte() % 12, in.u64() % 4, ec); break;
        default:
          s->wait_value(p + in.byte() % 12, in.u64() % 4, static_cast<npurt::wait_condition>(in.byte() % 5), ec);
          break;
      }
      check(ec);
      break;
    }
    case 4: {  // device malloc of any size
      const int dev = in.byte() % 4;
      if (npurt::device* d = w.sys->find_device(dev, ec)) {
        const std::size_t n = any_size(in);
        if (in.byte() % 4 == 0) {
          try {
            if (w.buffers.size() < 8) w.buffers.emplace_back(*d, n);
          } catch (const npurt::error& e) { check(e.code()); }
        } else if (void* p = d->malloc(n, ec); p && w.device_ptrs.size() < 32) {
          w.device_ptrs.push_back({p, dev});
        }
      }
      check(ec);
      break;
    }
    case 5: {  // free: live, freed, or on the wrong device
      if (w.device_ptrs.empty()) break;
      device_ptr& p = in.pick(w.device_ptrs);
      if (npurt::device* d = w.sys->find_device(in.byte() % 2 ? p.device : in.byte() % 4, ec)) d->free(p.p, ec);
      check(ec);
      break;
    }
    case 6: {  // events: make, record, wait
      const std::uint8_t what = in.byte() % 3;
      if (what == 0) {
        if (npurt::device* d = w.sys->find_device(in.byte() % 4, ec); d && w.events.size() < 16)
          w.events.push_back(d->make_event({.wait_for_record = in.byte() % 2 == 0}));
      } else if (auto* s = any_stream(w, in); s && !w.events.empty()) {
        npurt::event& e = in.pick(w.events);
        if (what == 1) s->record(e, ec);
        else s->wait(e, ec);
      }
      check(ec);
      break;
    }
    case 7: {  // blocking waits with any timeout
      const auto t = any_timeout(in);
      switch (in.byte() % 3) {
        case 0:
          if (auto* s = any_stream(w, in)) s->synchronize(t, ec);
          break;
        case 1:
          if (!w.events.empty()) in.pick(w.events).synchronize(t, ec);
          break;
        default:
          if (npurt::device* d = w.sys->find_device(in.byte() % 4, ec)) d->synchronize(t, ec);
          break;
      }
      check(ec);
      check_clock(w);
      break;
    }
    case 8: {  // queries, elapsed times and pointer attributes
      if (auto* s = any_stream(w, in)) (void)s->query(ec);
      check(ec);
      {
        // Any pointer, at any offset: an answer holds it inside the allocation it names.
        bool pageable = false;
        auto* p = static_cast<const std::byte*>(!w.device_ptrs.empty() && in.byte() % 2 ? in.pick(w.device_ptrs).p
                                                                                        : host_end(w, in, pageable));
        if (p && in.byte() % 2) p += in.byte();
        const npurt::pointer_attributes a = w.sys->pointer_attributes(p, ec);
        check(ec);
        if (!ec && a.type != npurt::memory_type::unregistered &&
            (static_cast<const std::byte*>(a.base) + a.offset != p || a.offset >= a.bytes))
          __builtin_trap();
      }
      {
        // Any two ids, devices or not: a link answered is a real one, and the two devices are
        // peers exactly when it is HCCS (never a device and itself).
        const npurt::device_id a = static_cast<int>(in.byte() % 7) - 1, b = static_cast<int>(in.byte() % 7) - 1;
        const npurt::link_properties l = w.sys->topology(a, b, ec);
        check(ec);
        const bool peer = w.sys->can_access_peer(a, b, ec);
        check(ec);
        if (!ec && (!(l.bandwidth > 0) || peer != (l.kind == npurt::link_kind::hccs) || (a == b && peer)))
          __builtin_trap();
      }
      if (w.events.size() >= 2) {
        (void)in.pick(w.events).query(ec);
        check(ec);
        const double ms = npurt::elapsed_time(in.pick(w.events), in.pick(w.events), ec);
        check(ec);
        if (ec && ms != 0) __builtin_trap();
      }
      break;
    }
    case 9: {  // device reset, or a stream's abort
      if (in.byte() % 2) {
        if (npurt::device* d = w.sys->find_device(in.byte() % 4, ec)) d->reset(ec);
      } else if (auto* s = any_stream(w, in)) {
        s->abort(ec);
        // The simple backend can stop any task: nothing of the stream is left pending.
        std::error_code q;
        if (!ec && !s->query(q) && !q) __builtin_trap();
      }
      check(ec);
      break;
    }
    case 10: {  // async waits with any timeout, then run
      const auto t = any_timeout(in);
      if (auto* s = any_stream(w, in)) s->async_synchronize(t, [](npurt::async_error_code c) { check(c); });
      if (!w.events.empty()) in.pick(w.events).async_wait(t, [](npurt::async_error_code c) { check(c); });
      w.sys->run(ec);
      check(ec);
      check_clock(w);
      break;
    }
    case 11: {  // a host callback that may throw
      if (auto* s = any_stream(w, in)) {
        const bool throws = in.byte() % 2;
        s->launch_callback(
            [throws] {
              if (throws) throw std::runtime_error("callback");
            },
            ec);
        check(ec);
      }
      break;
    }
    case 12: {  // pinned host memory
      if (in.byte() % 3 == 0 && !w.freed_pinned.empty()) {
        w.sys->host_free(in.pick(w.freed_pinned), ec);  // a double free: an error, not a crash
      } else if (in.byte() % 2 && !w.pinned.empty()) {
        // A freed pinned pointer looks like pageable memory to npurt, so it leaves the copy pool.
        const std::size_t i = in.byte() % w.pinned.size();
        w.sys->host_free(w.pinned[i], ec);
        if (w.freed_pinned.size() < 8) w.freed_pinned.push_back(w.pinned[i]);
        w.pinned.erase(w.pinned.begin() + static_cast<std::ptrdiff_t>(i));
      } else if (w.pinned.size() < 4) {
        if (void* p = w.sys->host_malloc(1 + in.byte() % 8192, ec)) {
          w.pinned.push_back(p);
          // The heap hands freed addresses out again: "freeing" the stale copy would then free
          // this live block behind our back, and its copies (sized as for pinned memory, not
          // honestly) would run on what npurt now takes for pageable memory.
          std::erase(w.freed_pinned, p);
        }
      }
      check(ec);
      break;
    }
    case 13: {  // drop a handle (streams drain, events release)
      if (in.byte() % 2 && !w.streams.empty())
        w.streams.erase(w.streams.begin() + static_cast<std::ptrdiff_t>(in.byte() % w.streams.size()));
      else if (!w.events.empty())
        w.events.erase(w.events.begin() + static_cast<std::ptrdiff_t>(in.byte() % w.events.size()));
      break;
    }
    case 14: {  // the system dies while handles live on
      w.sys.reset();
      w.pinned.clear();  // its memory went with it
      w.freed_pinned.clear();
      for (auto& s : w.streams)
        if (s.valid()) __builtin_trap();
      for (auto& e : w.events)
        if (e.valid()) __builtin_trap();
      for (auto& b : w.buffers)
        if (b) __builtin_trap();
      for (auto& g : w.graphs)
        if (g.valid()) __builtin_trap();
      break;
    }
    case 15: {  // stream capture: begin, end, launch, drop and update graphs, graph memory, task groups
      npurt::stream* s = any_stream(w, in);
      switch (in.byte() % 9) {
        case 0:
          if (s) s->begin_capture(in.byte() % 2 ? npurt::capture_mode::relaxed : npurt::capture_mode::global, ec);
          break;
        case 1:
          if (s) {
            npurt::stream_graph g = s->end_capture(ec);
            if (g.valid() != !ec) __builtin_trap();  // a graph exactly when it succeeded
            if (g.valid() && w.graphs.size() < 4) w.graphs.push_back(std::move(g));
          }
          break;
        case 2:
          if (s && !w.graphs.empty()) (void)in.pick(w.graphs).launch(*s, ec);
          if (npurt::stream_graph* g = w.graphs.empty() ? nullptr : &in.pick(w.graphs); g && g->valid()) {
            // Every dependency is an earlier node.
            const std::vector<npurt::graph_node> ns = g->nodes();
            for (std::size_t i = 0; i < ns.size(); ++i)
              for (const std::size_t d : ns[i].dependencies)
                if (d >= i) __builtin_trap();
          }
          break;
        case 3:
          if (!w.graphs.empty())
            w.graphs.erase(w.graphs.begin() + static_cast<std::ptrdiff_t>(in.byte() % w.graphs.size()));
          break;
        case 4: {  // a pool allocation for the stream: a graph's while it captures
          const int dev = in.byte() % 4;
          npurt::device* d = s && w.sys ? w.sys->find_device(dev, ec) : nullptr;
          if (void* p = d ? d->mem_pool().malloc_async(1 + in.byte() * 64u, *s, ec) : nullptr;
              p && w.device_ptrs.size() < 32)
            w.device_ptrs.push_back({p, dev});
          break;
        }
        case 5:  // update one graph from another: taken (and then null) only when the shapes match
          if (w.graphs.size() >= 2) {
            npurt::stream_graph& a = in.pick(w.graphs);
            npurt::stream_graph& b = in.pick(w.graphs);
            a.update(std::move(b), ec);
            if (!ec && b.valid()) __builtin_trap();
          }
          break;
        case 6:  // a task group begun or ended on any stream, capturing or not
          if (s && in.byte() % 2) s->begin_task_group(ec);
          else if (s) {
            npurt::task_group g = s->end_task_group(ec);
            if (!ec && w.groups.size() < 4) w.groups.push_back(g);
          }
          break;
        case 7:  // a task update begun (of any group) or ended, on any stream
          if (s && in.byte() % 2 && !w.groups.empty()) s->begin_task_update(in.pick(w.groups), ec);
          else if (s) s->end_task_update(ec);
          break;
        default:  // a stream-ordered free of any pointer (a graph's among them), in a capture or not
          if (npurt::device* d = s && w.sys && !w.device_ptrs.empty() ? w.sys->find_device(in.byte() % 4, ec) : nullptr)
            d->mem_pool().free_async(in.pick(w.device_ptrs).p, *s, ec);
          break;
      }
      check(ec);
      break;
    }
    default:  // a (new) system; old handles stay stale
      if (!w.sys) w.make_system(in);
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  input in(data, size);
  world w;
  w.make_system(in);
  for (int n = 0; n < 256 && !in.empty(); ++n) step(w, in);
  if (w.sys) {
    std::error_code ec;
    w.sys->run(ec);
    check(ec);
    check_clock(w);
  }
  // Stale and live handles die in any order with their system (declared after it in `world`).
  return 0;
}

// npurt/impl/profiler.ipp — the profiler as an observer: recording, the system's profiler and
// NPURT_TRACE. The outputs live in chrome_trace.ipp, summary*.ipp and svg_timeline.ipp.
#pragma once

#include <npurt/detail/trace_format.hpp>
#include <npurt/profiler.hpp>
#include <npurt/system.hpp>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <unistd.h>

namespace npurt {

// ---------------------------------------------------------------------------------------------
// profiler: recording

NPURT_DECL profiler::profiler() { reserve(0); }

NPURT_DECL profiler::profiler(clock_type clock) : clock_(std::move(clock)) { reserve(0); }

namespace detail {

NPURT_DECL std::string numbered_trace_path(const std::string& path, std::uint64_t n) {
  if (n == 0) return path;
  const std::size_t slash = path.rfind('/');
  const std::size_t name = slash == std::string::npos ? 0 : slash + 1;
  std::size_t dot = path.rfind('.');
  // A leading dot names a hidden file, not an extension.
  if (dot == std::string::npos || dot <= name) dot = path.size();
  return path.substr(0, dot) + "." + std::to_string(n) + path.substr(dot);
}

}  // namespace detail

NPURT_DECL std::unique_ptr<profiler> profiler::from_environment() {
  const char* path = std::getenv("NPURT_TRACE");
  if (path == nullptr || *path == '\0') return nullptr;
  // Each system of a program writes its own trace: were they all to write PATH, the last to
  // shut down would silently replace the others. Counted per path, in creation order.
  static std::mutex mutex;
  static std::map<std::string, std::uint64_t, std::less<>> made;
  std::uint64_t n = 0;
  {
    std::lock_guard lock(mutex);
    n = made[path]++;
  }
  auto p = std::make_unique<profiler>();
  p->set_output(detail::numbered_trace_path(path, n));
  return p;
}

NPURT_DECL void profiler::reserve(std::size_t tasks) {
  pending_tasks_.reserve(tasks * sizeof(detail::task_head));
  const std::size_t others = std::max<std::size_t>(tasks / 8, 1024);
  data_.records.reserve(data_.records.size() + others);
  data_.waits.reserve(data_.waits.size() + others);
  data_.memory.reserve(data_.memory.size() + 1024);
}

NPURT_DECL void profiler::clear() {
  data_.clear();
  pending_tasks_.clear();
  latest_ = {};
  for (auto& s : name_cache_) s = name_slot{};
}

namespace detail {

/// The first and last bytes of a name (n > 0), read without going past its end: together they
/// hold every character of names up to 16 long.
inline void name_ends(const char* p, std::size_t n, std::uint64_t& head, std::uint64_t& tail) noexcept {
  if (n >= 8) {
    std::memcpy(&head, p, 8);
    std::memcpy(&tail, p + n - 8, 8);
  } else if (n >= 4) {
    std::uint32_t a = 0, b = 0;
    std::memcpy(&a, p, 4);
    std::memcpy(&b, p + n - 4, 4);
    head = a;
    tail = b;
  } else {
    head = static_cast<std::uint64_t>(static_cast<unsigned char>(p[0])) |
           static_cast<std::uint64_t>(static_cast<unsigned char>(p[n / 2])) << 8 |
           static_cast<std::uint64_t>(static_cast<unsigned char>(p[n - 1])) << 16;
    tail = 0;
  }
}

/// A task's times as a record keeps them: the end, and the steps back from it to start, ready
/// and submitted, which fit the head when each is under 2^32 ps.
struct task_steps {
  std::int64_t end, start, ready, submitted;
  std::uint64_t run, wait, queue;

  explicit task_steps(const task_info& t) noexcept
      : end(ps(t.end)),
        start(ps(t.start)),
        ready(ps(t.ready)),
        submitted(ps(t.submitted)),
        run(static_cast<std::uint64_t>(end - start)),
        wait(static_cast<std::uint64_t>(start - ready)),
        queue(static_cast<std::uint64_t>(ready - submitted)) {}
  [[nodiscard]] bool fit() const noexcept { return ((run | wait | queue) >> 32) == 0; }
};

/// Builds the head every task record starts with at `at`.
inline task_head* put_head(void* at, const task_info& t, const task_steps& s, std::uint32_t name,
                           std::uint8_t flags) noexcept {
  auto* h = ::new (at) task_head;
  h->id = t.id;
  h->end = s.end;
  h->run = static_cast<std::uint32_t>(s.run);
  h->wait = static_cast<std::uint32_t>(s.wait);
  h->stream = t.stream;
  h->priority = t.priority;
  h->kind = t.kind;
  h->engine = t.engine;
  h->flags = flags;
  h->queue = static_cast<std::uint32_t>(s.queue);
  h->name = name;
  return h;
}

/// Calls f(head, extra or null, times or null) for each record of a span of a profiler's task
/// chunks, oldest first.
template <class F>
void for_each_task_record(trace_chunks::span sp, F&& f) {
  for (const std::byte* p = sp.begin; p != sp.end;) {
    const auto* h = std::launder(reinterpret_cast<const task_head*>(p));
    p += sizeof(task_head);
    const task_extra* x = nullptr;
    const task_times* tt = nullptr;
    if ((h->flags & task_head::has_extra) != 0) {
      x = std::launder(reinterpret_cast<const task_extra*>(p));
      p += sizeof(task_extra);
    }
    if ((h->flags & task_head::has_times) != 0) {
      tt = std::launder(reinterpret_cast<const task_times*>(p));
      p += sizeof(task_times);
    }
    f(*h, x, tt);
  }
}

}  // namespace detail

NPURT_DECL std::uint32_t profiler::intern_fast(std::string_view s) {
  if (s.empty()) return 0;
  name_slot& slot = slot_of(s.data());
  const std::size_t n = s.size();
  const std::uint32_t size =
      n <= short_name ? static_cast<std::uint32_t>(n) : long_name | static_cast<std::uint32_t>(n);
  if (slot.data == s.data() && slot.size == size && n < long_name) {
    std::uint64_t head = 0, tail = 0;
    detail::name_ends(s.data(), n, head, tail);
    if (head == slot.head && tail == slot.tail &&
        (n <= short_name || std::memcmp(data_.strings[slot.id].data(), s.data(), n) == 0))
      return slot.id;
  }
  const std::uint32_t id = data_.intern(s);
  if (n < long_name) {
    slot.data = s.data();
    slot.size = size;
    detail::name_ends(s.data(), n, slot.head, slot.tail);
    slot.id = id;
  }
  return id;
}

NPURT_DECL sim_time profiler::now() const {
  if (clock_) return clock_();
  // Tasks leave latest_ alone as they arrive (a compare less per task): catch up with them here.
  pending_tasks_.for_each_new_span([this](detail::trace_chunks::span sp) {
    detail::for_each_task_record(sp, [this](const detail::task_head& h, const detail::task_extra*,
                                            const detail::task_times*) { seen(sim_time{picoseconds{h.end}}); });
  });
  return latest_;
}

NPURT_DECL void profiler::on_task(const task_info& t) {
  // The common case takes no call and writes a 40-byte head in place: a kernel with nothing but
  // times to tell (no flops, bytes or block_dim, steps that fit), on a device below 63, whose
  // short name the cache knows. Everything else goes to on_task_slow().
  using detail::task_head;
  if (!pending_tasks_.has_room()) [[unlikely]]
    return on_task_slow(t);
  const char* const np = t.name.data();
  const std::size_t nn = t.name.size();
  const name_slot& slot = slot_of(np);
  // A slot's size is 1 .. short_name or has long_name set: a match is a short name.
  if (slot.data != np || slot.size != nn) [[unlikely]]
    return on_task_slow(t);
  std::uint64_t head = 0, tail = 0;
  detail::name_ends(np, nn, head, tail);
  if (head != slot.head || tail != slot.tail) [[unlikely]]
    return on_task_slow(t);
  static_assert(static_cast<int>(task_kind::kernel) == 0);
  if ((t.flops | t.bytes | t.fixed.flops | t.fixed.bytes | t.block_dim | static_cast<std::uint64_t>(t.kind)) != 0 ||
      static_cast<std::uint32_t>(t.device) >= task_head::device_mask || t.failure != nullptr) [[unlikely]]
    return on_task_slow(t);
  const detail::task_steps steps(t);
  if (!steps.fit()) [[unlikely]]
    return on_task_slow(t);
  detail::put_head(pending_tasks_.cursor(), t, steps, slot.id, static_cast<std::uint8_t>(t.device));
  pending_tasks_.commit(sizeof(task_head));
}

NPURT_DECL void profiler::on_task_slow(const task_info& t) {
  using detail::task_head;
  // The head has no room for an outcome: the few failed tasks keep theirs beside the records.
  if (t.failure != nullptr && *t.failure)
    data_.errors.push_back({t.id, t.failure->value(), data_.intern(t.failure->message())});
  std::string_view name = t.name;
  if (name.empty()) name = t.kernel != nullptr ? t.kernel->display_name() : to_string(t.kind);
  const std::uint32_t name_id = intern_fast(name);
  const std::uint64_t flops = t.flops != 0 ? t.flops : (t.kernel == nullptr ? t.fixed.flops : 0);
  const std::uint64_t bytes =
      t.bytes != 0 ? t.bytes : (t.kind == task_kind::kernel ? (t.kernel == nullptr ? t.fixed.bytes : 0) : t.copy.bytes);
  device_id src = -1, dst = -1;
  if (t.kind == task_kind::memcpy || t.kind == task_kind::memset) {
    src = t.copy.src_device;
    dst = t.copy.dst_device;
  }
  const detail::task_steps steps(t);
  const bool extra = (flops | bytes | t.block_dim) != 0 || src != -1 || dst != -1 ||
                     static_cast<std::uint32_t>(t.device) >= task_head::device_mask;
  std::uint8_t flags = extra ? task_head::has_extra : static_cast<std::uint8_t>(t.device);
  if (!steps.fit()) flags |= task_head::has_times;

  std::byte* const p = pending_tasks_.room();
  detail::put_head(p, t, steps, name_id, flags);
  std::size_t n = sizeof(task_head);
  if (extra) {
    ::new (static_cast<void*>(p + n)) detail::task_extra{flops, bytes, t.block_dim, t.device, src, dst};
    n += sizeof(detail::task_extra);
  }
  if (!steps.fit()) {
    ::new (static_cast<void*>(p + n)) detail::task_times{steps.submitted, steps.ready, steps.start};
    n += sizeof(detail::task_times);
  }
  pending_tasks_.commit(n);
}

NPURT_DECL void profiler::drain() const {
  using detail::task_head;
  static_assert(sizeof(task_head) == 40 && sizeof(detail::task_extra) % detail::trace_chunks::alignment == 0 &&
                sizeof(detail::task_times) % detail::trace_chunks::alignment == 0 &&
                sizeof(task_head) + sizeof(detail::task_extra) + sizeof(detail::task_times) <=
                    detail::trace_chunks::max_record);
  auto& out = data_.tasks;
  out.reserve(out.size() + pending_tasks_.used_bytes() / sizeof(task_head));
  pending_tasks_.for_each_span([&](detail::trace_chunks::span sp) {
    detail::for_each_task_record(sp,
                                 [&](const task_head& h, const detail::task_extra* x, const detail::task_times* tt) {
                                   trace_task r;
                                   r.id = h.id;
                                   r.stream = h.stream;
                                   r.priority = h.priority;
                                   r.kind = h.kind;
                                   r.engine = h.engine;
                                   r.name = h.name;
                                   r.end = sim_time{picoseconds{h.end}};
                                   if (tt != nullptr) {
                                     r.submitted = sim_time{picoseconds{tt->submitted}};
                                     r.ready = sim_time{picoseconds{tt->ready}};
                                     r.start = sim_time{picoseconds{tt->start}};
                                   } else {
                                     r.start = r.end - picoseconds{h.run};
                                     r.ready = r.start - picoseconds{h.wait};
                                     r.submitted = r.ready - picoseconds{h.queue};
                                   }
                                   if (x != nullptr) {
                                     r.device = x->device;
                                     r.flops = x->flops;
                                     r.bytes = x->bytes;
                                     r.block_dim = x->block_dim;
                                     r.src_device = x->src_device;
                                     r.dst_device = x->dst_device;
                                   } else {
                                     r.device = h.flags & task_head::device_mask;
                                   }
                                   seen(r.end);
                                   out.push_back(r);
                                 });
  });
  pending_tasks_.clear();
}

NPURT_DECL void profiler::on_event_record(const event_record_info& e) {
  data_.records.push_back(e);
  seen(e.time);
}

NPURT_DECL void profiler::on_event_wait(const event_wait_info& w) {
  data_.waits.push_back(w);
  seen(w.satisfied);
}

NPURT_DECL void profiler::on_memory(const memory_info& m) {
  data_.memory.push_back(m);
  seen(m.time);
}

NPURT_DECL void profiler::on_link_transfer(const link_transfer_info& l) {
  data_.links.push_back({intern_fast(l.link), l.src, l.dst, l.bytes, l.start, l.end});
  seen(l.end);
}

NPURT_DECL void profiler::on_collective_step(const collective_step_info& s) {
  data_.steps.push_back(
      {s.collective, intern_fast(s.op), intern_fast(s.algorithm), s.device, s.peer, s.step, s.bytes, s.start, s.end});
  seen(s.end);
}

NPURT_DECL void profiler::on_host_range(const host_range_info& r) {
  data_.ranges.push_back({r.op, intern_fast(r.name), r.lane, r.time});
  seen(r.time);
}

NPURT_DECL void profiler::on_stream_created(device_id dev, std::uint32_t stream, std::uint8_t priority) {
  data_.streams.push_back({dev, stream, priority});
}

NPURT_DECL void profiler::on_shutdown(sim_time t) {
  data_.shutdown = t;
  if (output_.empty()) return;
  // Shutdown cannot throw to anyone useful: keep the outcome and say it on stderr.
  write_chrome_trace(output_, shutdown_error_);
  if (shutdown_error_)
    std::cerr << "npurt: cannot write trace to " << output_ << ": " << shutdown_error_.message() << '\n';
}

NPURT_DECL void profiler::mark(std::string_view name, std::uint32_t lane) { mark_at(now(), name, lane); }
NPURT_DECL void profiler::push_range(std::string_view name, std::uint32_t lane) { push_range_at(now(), name, lane); }
NPURT_DECL void profiler::pop_range(std::uint32_t lane) { pop_range_at(now(), lane); }

NPURT_DECL void profiler::mark_at(sim_time t, std::string_view name, std::uint32_t lane) {
  on_host_range({host_range_op::mark, name, lane, t});
}
NPURT_DECL void profiler::push_range_at(sim_time t, std::string_view name, std::uint32_t lane) {
  on_host_range({host_range_op::push, name, lane, t});
}
NPURT_DECL void profiler::pop_range_at(sim_time t, std::uint32_t lane) {
  on_host_range({host_range_op::pop, {}, lane, t});
}

namespace detail {

/// Opens `path` for a profiler's file, or says why it cannot in ec.
NPURT_DECL bool open_output(std::ofstream& out, const std::string& path, std::error_code& ec) {
  out.open(path, std::ios::binary | std::ios::trunc);
  if (out) return true;
  // Say why (a directory, no permission, a missing directory) rather than guess. The stream's
  // errno is not to be trusted: its cleanup may run the allocator after open(2) failed. Asking
  // open(2) again, without truncating, gives the reason and changes nothing.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
  const int why = fd < 0 ? errno : EIO;
  if (fd >= 0) ::close(fd);
  ec = std::error_code(why, std::generic_category());
  return false;
}

/// Closes a file open_output opened: a write that failed, the close included, is io_error.
NPURT_DECL void close_output(std::ofstream& out, std::error_code& ec) {
  out.close();
  if (!out) ec = std::make_error_code(std::errc::io_error);
}

}  // namespace detail

NPURT_DECL void profiler::write_chrome_trace(const std::string& path, std::error_code& ec) const {
  ec.clear();
  std::ofstream out;
  if (!detail::open_output(out, path, ec)) return;
  npurt::write_chrome_trace(out, data());
  detail::close_output(out, ec);
}

NPURT_DECL void profiler::write_chrome_trace(const std::string& path) const {
  std::error_code ec;
  write_chrome_trace(path, ec);
  // npurt::error, as every other throw of the library, though the code is the OS's.
  if (ec) throw npurt::error(ec, "npurt: cannot write trace to " + path);
}

NPURT_DECL void profiler::write_svg(const std::string& path, std::error_code& ec, const svg_options& opts) const {
  ec.clear();
  std::ostringstream svg;
  try {
    npurt::write_svg(svg, data(), opts);
  } catch (const npurt::error& e) {
    ec = e.code();
    return;
  }
  std::ofstream out;
  if (!detail::open_output(out, path, ec)) return;
  const std::string text = std::move(svg).str();
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  detail::close_output(out, ec);
}

NPURT_DECL void profiler::write_svg(const std::string& path, const svg_options& opts) const {
  // Refused options throw here, with what is wrong, before the file is touched.
  if (const auto why = opts.check(); !why.empty())
    throw_error(make_error_code(errc::invalid_argument), "npurt::profiler::write_svg: " + why);
  std::error_code ec;
  write_svg(path, ec, opts);
  if (ec) throw npurt::error(ec, "npurt: cannot write SVG timeline to " + path);
}

// ---------------------------------------------------------------------------------------------
// the system's profiler

NPURT_DECL npurt::profiler& system::profiler() {
  if (!profiler_) {
    auto p = std::make_unique<npurt::profiler>([this] { return now(); });
    p->set_tasks_before_attach(rt_->next_task_id() - 1);
    profiler_ = std::move(p);
    rt_->add_observer(*profiler_);
  }
  return static_cast<npurt::profiler&>(*profiler_);
}

namespace detail {

NPURT_DECL std::unique_ptr<observer> make_env_profiler(system& sys) {
  auto p = profiler::from_environment();
  if (p) p->set_clock([&sys] { return sys.now(); });
  return p;
}

}  // namespace detail

}  // namespace npurt

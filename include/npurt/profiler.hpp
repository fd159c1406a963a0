// npurt/profiler.hpp — an observer that records everything the runtime reports, plus msproftx-style
// marks and ranges from host code, and turns the records into a Chrome trace (Perfetto,
// chrome://tracing), a summary (text or JSON) and an SVG timeline.
//
// Recording only appends to vectors; nothing is formatted or written until a write_* call, so a
// profiled run pays a copy per report (a task: a 40-byte record, see task_head). Every output is
// a pure function of the records and virtual time is integer picoseconds, so the same run writes
// the same bytes.
//
// @code
//   npurt::profiler prof{[&] { return sys.now(); }};
//   sys.add_observer(prof);
//   prof.push_range("step 0");  ...  prof.pop_range();
//   sys.run();
//   prof.write_chrome_trace("trace.json");      // open in ui.perfetto.dev
//   prof.write_summary_text(std::cout);
// @endcode
//
// @par Thread Safety
// Not thread-safe: feed it from the system's event loop (where observers are called) and read it
// after the run.
#pragma once

#include <npurt/config.hpp>
#include <npurt/detail/trace_chunks.hpp>
#include <npurt/error.hpp>
#include <npurt/observer.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace npurt {

/// A finished task as a trace keeps it. Names are indices into trace_data::strings, so a record
/// is small and owns nothing that could dangle.
struct trace_task {
  std::uint64_t id = 0;
  device_id device = 0;
  std::uint32_t stream = 0;
  std::uint8_t priority = 4;
  task_kind kind = task_kind::kernel;
  engine_kind engine = engine_kind::none;
  sim_time submitted{};
  sim_time ready{};
  sim_time start{};
  sim_time end{};
  std::uint32_t name = 0;
  std::uint32_t block_dim = 0;
  std::uint64_t flops = 0;
  std::uint64_t bytes = 0;
  device_id src_device = -1;  // copies and memsets: -1 is host memory
  device_id dst_device = -1;

  [[nodiscard]] picoseconds duration() const noexcept { return end - start; }
};

struct trace_link_transfer {
  std::uint32_t link = 0;  // string index: "hccs", "pcie", ...
  device_id src = 0;
  device_id dst = 0;
  std::size_t bytes = 0;
  sim_time start{};
  sim_time end{};
};

struct trace_collective_step {
  std::uint64_t collective = 0;
  std::uint32_t op = 0;         // string index
  std::uint32_t algorithm = 0;  // string index
  device_id device = 0;
  device_id peer = 0;
  std::uint32_t step = 0;
  std::size_t bytes = 0;
  sim_time start{};
  sim_time end{};
};

struct trace_host_range {
  host_range_op op = host_range_op::mark;
  std::uint32_t name = 0;  // string index
  std::uint32_t lane = 0;
  sim_time time{};
};

struct trace_stream {
  device_id device = 0;
  std::uint32_t stream = 0;
  std::uint8_t priority = 4;
};

/// Everything a profiler recorded, or a trace reader loaded back. Outputs are computed from this
/// alone.
struct trace_data {
  std::vector<std::string> strings;  // interned names; index 0 is ""
  std::vector<trace_task> tasks;
  std::vector<event_record_info> records;
  std::vector<event_wait_info> waits;
  std::vector<memory_info> memory;
  std::vector<trace_link_transfer> links;
  std::vector<trace_collective_step> steps;
  std::vector<trace_host_range> ranges;
  std::vector<trace_stream> streams;
  std::optional<sim_time> shutdown;

  trace_data() { strings.emplace_back(); }

  /// The index of `s` in strings, adding it if new.
  NPURT_DECL std::uint32_t intern(std::string_view s);
  [[nodiscard]] std::string_view str(std::uint32_t i) const noexcept {
    return i < strings.size() ? std::string_view{strings[i]} : std::string_view{};
  }
  NPURT_DECL void clear();

 private:
  struct string_hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::uint32_t, string_hash, std::equal_to<>> index_;
};

/// Why a stream sat idle between two pieces of work.
enum class gap_cause : std::uint8_t {
  event,   // a wait on an event blocked the stream
  peer,    // the next task is a collective: it waited for its peers
  memory,  // a stream-ordered allocation completed when the gap ended
  host,    // the host had not launched the next task yet (launch overhead, host work)
  engine,  // the next task was ready but its engine was busy with other streams
  other,
};

constexpr std::string_view to_string(gap_cause c) noexcept {
  switch (c) {
    case gap_cause::event: return "event";
    case gap_cause::peer: return "peer";
    case gap_cause::memory: return "memory";
    case gap_cause::host: return "host";
    case gap_cause::engine: return "engine";
    case gap_cause::other: return "other";
  }
  return "?";
}

/// What a run did, computed from records only (see summarize()).
///
/// Busy time is the union of the intervals of tasks that occupy an engine (control tasks such
/// as event records and waits do not); utilisation is busy time over the span of the whole
/// trace (first task start to last task end).
struct profile_summary {
  struct gap {
    sim_time begin{};
    sim_time end{};
    gap_cause cause = gap_cause::other;
    std::uint64_t next_task = 0;  // the task whose start ended the gap
    std::uint64_t event = 0;      // cause == event: the event waited on
    [[nodiscard]] picoseconds duration() const noexcept { return end - begin; }
  };
  struct stream_stats {
    device_id device = 0;
    std::uint32_t stream = 0;
    std::uint8_t priority = 4;
    std::uint64_t tasks = 0;
    picoseconds busy{0};
    double utilisation = 0;
    picoseconds idle{0};  // sum of the gaps
    std::vector<gap> gaps;
  };
  struct engine_stats {
    engine_kind engine = engine_kind::none;
    std::uint64_t tasks = 0;
    picoseconds busy{0};
    double utilisation = 0;
  };
  struct device_stats {
    device_id device = 0;
    std::uint64_t tasks = 0;
    picoseconds busy{0};
    double utilisation = 0;
    picoseconds compute{0};        // union of ai_core work
    picoseconds communication{0};  // union of collectives and peer copies
    picoseconds overlap{0};        // time both ran at once
    double overlap_fraction = 0;   // overlap / communication (0 without communication)
    std::size_t peak_memory = 0;   // largest in_use reported
    std::vector<engine_stats> engines;
  };
  struct kernel_stats {
    std::string name;
    std::uint64_t count = 0;
    picoseconds total{0};
    picoseconds max{0};
    std::uint64_t flops = 0;
    std::uint64_t bytes = 0;
  };
  struct path_task {
    std::uint64_t id = 0;
    std::string name;
    device_id device = 0;
    std::uint32_t stream = 0;
    task_kind kind = task_kind::kernel;
    engine_kind engine = engine_kind::none;
    sim_time start{};
    sim_time end{};
    bool via_event = false;  // its predecessor on the path is the record task of an event it waited on
  };

  std::uint64_t tasks = 0;
  sim_time begin{};
  sim_time end{};
  picoseconds span{0};
  std::vector<device_stats> devices;
  std::vector<stream_stats> streams;
  std::vector<kernel_stats> top_kernels;  // by total time, longest first
  /// Walked back from the task that ends last, each step to the predecessor (previous task on
  /// the stream, or the record task of an event it waited on) that ended last. First task first.
  std::vector<path_task> critical_path;
  picoseconds critical_path_length{0};  // last end - first start
  picoseconds critical_path_busy{0};    // sum of the durations of path tasks that use an engine
};

/// Options of write_svg().
struct svg_options {
  std::string title = "npurt timeline";
  double width = 1200;       // pixels, whole image
  double label_width = 190;  // pixels left of the time axis
  double row_height = 18;
  bool engines = true;  // engine occupancy rows
  bool links = true;    // link and collective-step rows
  bool host = true;     // host range rows
  bool control = true;  // ticks for event records and waits
};

NPURT_DECL profile_summary summarize(const trace_data& data, std::size_t top_kernels = 10);
NPURT_DECL void write_chrome_trace(std::ostream& os, const trace_data& data);
NPURT_DECL void write_summary_text(std::ostream& os, const profile_summary& s);
NPURT_DECL void write_summary_json(std::ostream& os, const profile_summary& s);
NPURT_DECL void write_svg(std::ostream& os, const trace_data& data, const svg_options& opts = {});

namespace detail {

// A task as the profiler keeps it while the run goes on: 40 bytes, built in place in its
// trace_chunks. Times are the end and three 32-bit steps back from it (4.29 ms of picoseconds
// each). What is usually zero or absent (flops, bytes, block_dim, copy endpoints, a device above
// 62) and steps that do not fit follow the head only when needed, flagged in `flags`.
// profiler::data() expands them into trace_tasks.
struct task_head {
  std::uint64_t id;
  std::int64_t end;
  std::uint32_t run;   // end - start
  std::uint32_t wait;  // start - ready
  std::uint32_t stream;
  std::uint8_t priority;
  task_kind kind;
  engine_kind engine;
  std::uint8_t flags;   // without has_extra: the device
  std::uint32_t queue;  // ready - submitted
  std::uint32_t name;

  static constexpr std::uint8_t has_extra = 0x40;
  static constexpr std::uint8_t has_times = 0x80;
  static constexpr std::uint8_t device_mask = 0x3f;  // devices 0 .. 62 fit in the head
};

struct task_extra {
  std::uint64_t flops;
  std::uint64_t bytes;
  std::uint32_t block_dim;
  device_id device;
  device_id src_device;
  device_id dst_device;
};

struct task_times {
  std::int64_t submitted;
  std::int64_t ready;
  std::int64_t start;
};

}  // namespace detail

/// The observer that records a run.
class profiler : public observer {
 public:
  using clock_type = std::function<sim_time()>;

  /// Without a clock, marks and ranges are stamped with the latest time any record reported.
  NPURT_DECL profiler();
  NPURT_DECL explicit profiler(clock_type clock);

  /// A profiler that writes its Chrome trace to $NPURT_TRACE when the system shuts down, or
  /// null when the variable is unset or empty.
  [[nodiscard]] NPURT_DECL static std::unique_ptr<profiler> from_environment();

  void set_clock(clock_type clock) { clock_ = std::move(clock); }
  /// on_shutdown() writes the Chrome trace to `path` (empty: write nothing).
  void set_output(std::string path) { output_ = std::move(path); }
  [[nodiscard]] const std::string& output() const noexcept { return output_; }
  /// The outcome of the last write on shutdown.
  [[nodiscard]] std::error_code shutdown_error() const noexcept { return shutdown_error_; }

  /// Allocates and touches room for `tasks` more tasks now, so that recording them costs no
  /// page faults during the run (as a CUPTI activity buffer is set up before profiling). Room is
  /// counted in 40-byte task heads: tasks with flops, bytes or very long steps take more.
  NPURT_DECL void reserve(std::size_t tasks);
  NPURT_DECL void clear();

  /// msproftx: an instant mark, and a stack of nested ranges per host lane.
  NPURT_DECL void mark(std::string_view name, std::uint32_t lane = 0);
  NPURT_DECL void push_range(std::string_view name, std::uint32_t lane = 0);
  NPURT_DECL void pop_range(std::uint32_t lane = 0);
  NPURT_DECL void mark_at(sim_time t, std::string_view name, std::uint32_t lane = 0);
  NPURT_DECL void push_range_at(sim_time t, std::string_view name, std::uint32_t lane = 0);
  NPURT_DECL void pop_range_at(sim_time t, std::uint32_t lane = 0);

  /// Pushes a range now and pops it when destroyed.
  class scoped_range {
   public:
    scoped_range(profiler& p, std::string_view name, std::uint32_t lane = 0) : p_(&p), lane_(lane) {
      p.push_range(name, lane);
    }
    scoped_range(const scoped_range&) = delete;
    scoped_range& operator=(const scoped_range&) = delete;
    ~scoped_range() { p_->pop_range(lane_); }

   private:
    profiler* p_;
    std::uint32_t lane_;
  };

  NPURT_DECL void on_task(const task_info& t) override;
  NPURT_DECL void on_event_record(const event_record_info& e) override;
  NPURT_DECL void on_event_wait(const event_wait_info& w) override;
  NPURT_DECL void on_memory(const memory_info& m) override;
  NPURT_DECL void on_link_transfer(const link_transfer_info& l) override;
  NPURT_DECL void on_collective_step(const collective_step_info& s) override;
  NPURT_DECL void on_host_range(const host_range_info& r) override;
  NPURT_DECL void on_stream_created(device_id dev, std::uint32_t stream, std::uint8_t priority) override;
  NPURT_DECL void on_shutdown(sim_time t) override;

  /// Everything recorded so far.
  [[nodiscard]] const trace_data& data() const {
    if (!pending_tasks_.empty()) drain();
    return data_;
  }
  [[nodiscard]] profile_summary summary(std::size_t top_kernels = 10) const { return summarize(data(), top_kernels); }

  void write_chrome_trace(std::ostream& os) const { npurt::write_chrome_trace(os, data()); }
  NPURT_DECL void write_chrome_trace(const std::string& path, std::error_code& ec) const;
  NPURT_DECL void write_chrome_trace(const std::string& path) const;
  void write_summary_text(std::ostream& os, std::size_t top_kernels = 10) const {
    npurt::write_summary_text(os, summary(top_kernels));
  }
  void write_summary_json(std::ostream& os, std::size_t top_kernels = 10) const {
    npurt::write_summary_json(os, summary(top_kernels));
  }
  void write_svg(std::ostream& os, const svg_options& opts = {}) const { npurt::write_svg(os, data(), opts); }

 private:
  // Names are mostly literals: a small cache keyed by address skips hashing the characters. The
  // address alone is not enough (the storage may have died and been reused for other text), so
  // a slot also keeps the first and last bytes, which hold all of a name of up to 16 characters;
  // longer ones are compared with the interned copy, by intern_fast() only.
  struct name_slot {
    const char* data = nullptr;
    std::uint32_t size = long_name;  // long_name | size for names longer than short_name
    std::uint32_t id = 0;
    std::uint64_t head = 0;
    std::uint64_t tail = 0;
  };
  static constexpr std::size_t name_cache_size = 64;
  static constexpr std::size_t short_name = 16;
  static constexpr std::uint32_t long_name = std::uint32_t{1} << 31;

  [[nodiscard]] name_slot& slot_of(const char* p) noexcept {
    return name_cache_[(reinterpret_cast<std::uintptr_t>(p) >> 3) % name_cache_size];
  }
  NPURT_DECL std::uint32_t intern_fast(std::string_view s);
  NPURT_DECL void on_task_slow(const task_info& t);
  NPURT_DECL void drain() const;
  NPURT_DECL sim_time now() const;
  void seen(sim_time t) const noexcept {
    if (t > latest_) latest_ = t;
  }

  mutable trace_data data_;
  // Tasks arrive by the million: they wait here until data() is read (see trace_chunks.hpp).
  mutable detail::trace_chunks pending_tasks_;
  clock_type clock_;
  std::string output_;
  std::error_code shutdown_error_;
  mutable sim_time latest_{};  // of everything but pending tasks, which now() reads lazily
  name_slot name_cache_[name_cache_size]{};
};

}  // namespace npurt

#if NPURT_INCLUDE_IMPL
#include <npurt/impl/profiler.ipp>
#endif

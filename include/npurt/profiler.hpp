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
#include <npurt/detail/trace_hook.hpp>
#include <npurt/detail/trace_records.hpp>
#include <npurt/error.hpp>
#include <npurt/observer.hpp>
#include <npurt/profiler/chrome_trace.hpp>
#include <npurt/profiler/summary.hpp>
#include <npurt/profiler/svg_timeline.hpp>
#include <npurt/profiler/trace_data.hpp>
#include <npurt/system.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>

namespace npurt {

/// The observer that records a run.
class profiler : public observer {
 public:
  using clock_type = std::function<sim_time()>;

  /// Without a clock, marks and ranges are stamped with the latest time any record reported.
  NPURT_DECL profiler();
  NPURT_DECL explicit profiler(clock_type clock);

  /// A profiler that writes its Chrome trace to $NPURT_TRACE when the system shuts down, or
  /// null when the variable is unset or empty. The first one made for a path writes the path
  /// itself, later ones a numbered path (p.json, then p.1.json, p.2.json, ...).
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
  /// How many tasks the system had enqueued before this profiler was attached: the summary says
  /// that they are missing (system::profiler() sets it when it makes the profiler late).
  void set_tasks_before_attach(std::uint64_t n) noexcept { data_.tasks_before_attach = n; }

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
  /// A file that cannot be opened gives open(2)'s errno (std::generic_category(): a directory is
  /// is_a_directory, a missing directory no_such_file_or_directory); a failed write, io_error.
  NPURT_DECL void write_chrome_trace(const std::string& path, std::error_code& ec) const;
  /// Throws npurt::error with that code.
  NPURT_DECL void write_chrome_trace(const std::string& path) const;
  void write_summary_text(std::ostream& os, std::size_t top_kernels = 10) const {
    npurt::write_summary_text(os, summary(top_kernels));
  }
  void write_summary_json(std::ostream& os, std::size_t top_kernels = 10) const {
    npurt::write_summary_json(os, summary(top_kernels));
  }
  void write_svg(std::ostream& os, const svg_options& opts = {}) const { npurt::write_svg(os, data(), opts); }
  /// As write_chrome_trace(path, ec) for the file; options write_svg refuses give their
  /// errc::invalid_argument. The picture is drawn before the file is opened, so a refused one
  /// leaves an existing file as it was.
  NPURT_DECL void write_svg(const std::string& path, std::error_code& ec, const svg_options& opts = {}) const;
  /// Throws caller_error for refused options, as the stream form does, and npurt::error with the
  /// file's code.
  NPURT_DECL void write_svg(const std::string& path, const svg_options& opts = {}) const;

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

namespace detail {

NPURT_DECL std::unique_ptr<observer> make_env_profiler(system& sys);
/// The path of the n-th trace (from 0) NPURT_TRACE makes for `path`: path itself, then the name
/// with ".n" before its extension (p.json, p.1.json, p.2.json), or after it when it has none.
[[nodiscard]] NPURT_DECL std::string numbered_trace_path(const std::string& path, std::uint64_t n);

// Every system made in a program that includes this header honours NPURT_TRACE.
inline const bool trace_env_registered = (trace_from_environment = &make_env_profiler, true);

}  // namespace detail

}  // namespace npurt

#if NPURT_INCLUDE_IMPL
#include <npurt/impl/profiler.ipp>
#endif

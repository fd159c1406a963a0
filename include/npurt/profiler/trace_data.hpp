// npurt/profiler/trace_data.hpp — what a trace holds: the records a profiler keeps, or a trace
// reader loads back. Every profiler output is computed from a trace_data alone.
//
// @par Thread Safety
// A plain value: distinct objects may be used from different threads; one object is not
// synchronised.
#pragma once

#include <npurt/config.hpp>
#include <npurt/observer.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
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

/// How a failed or aborted task ended. Only such tasks have one, so a trace of a program whose
/// tasks all succeed holds none.
struct trace_task_error {
  std::uint64_t task = 0;      // the task's id
  std::int32_t code = 0;       // the error code's value (npurt's category: errc)
  std::uint32_t message = 0;   // string index: the code's message
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
  std::vector<trace_task_error> errors;  // of the failed tasks only
  std::vector<event_record_info> records;
  std::vector<event_wait_info> waits;
  std::vector<memory_info> memory;
  std::vector<trace_link_transfer> links;
  std::vector<trace_collective_step> steps;
  std::vector<trace_host_range> ranges;
  std::vector<trace_stream> streams;
  std::optional<sim_time> shutdown;
  // Tasks the system had already enqueued when the recorder was attached: not in this trace
  // (a profiler made by system::profiler() after the work it was meant to see).
  std::uint64_t tasks_before_attach = 0;

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

}  // namespace npurt

#if NPURT_INCLUDE_IMPL
#include <npurt/impl/trace_data.ipp>
#endif

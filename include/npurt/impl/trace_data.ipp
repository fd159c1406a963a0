// npurt/impl/trace_data.ipp
#pragma once

#include <npurt/profiler/trace_data.hpp>

namespace npurt {

// ---------------------------------------------------------------------------------------------
// trace_data

NPURT_DECL std::uint32_t trace_data::intern(std::string_view s) {
  if (s.empty()) return 0;
  if (index_.empty() && strings.size() > 1) {
    // Strings were filled by hand (or the index was lost by a copy): rebuild it once.
    for (std::uint32_t i = 1; i < strings.size(); ++i) index_.emplace(strings[i], i);
  }
  if (auto it = index_.find(s); it != index_.end()) return it->second;
  const auto id = static_cast<std::uint32_t>(strings.size());
  strings.emplace_back(s);
  index_.emplace(strings.back(), id);
  return id;
}

NPURT_DECL void trace_data::clear() {
  strings.assign(1, std::string{});
  index_.clear();
  tasks.clear();
  errors.clear();
  records.clear();
  waits.clear();
  memory.clear();
  links.clear();
  steps.clear();
  ranges.clear();
  streams.clear();
  shutdown.reset();
  tasks_before_attach = 0;
}

}  // namespace npurt

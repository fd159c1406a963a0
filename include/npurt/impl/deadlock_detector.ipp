// npurt/impl/deadlock_detector.ipp — bodies of detail::deadlock_detector.
#pragma once

#include <npurt/detail/deadlock_detector.hpp>
#include <npurt/detail/runtime.hpp>

#include <sstream>

namespace npurt::detail {

NPURT_DECL bool deadlock_detector::closes_cycle(const stream_state& s) const {
  const stream_state* cur = &s;
  for (std::size_t hops = 0; hops <= streams_.size(); ++hops) {
    const task* h = cur->head;
    if (!h || h->kind != task_kind::event_wait || !h->blocked) return false;
    const std::uint32_t target = h->extra->target_stream;
    if (target == 0) return false;  // its record is not even enqueued yet
    if (target == s.id) return true;
    if (target >= streams_.size() || !streams_[target]) return false;
    cur = streams_[target].get();
  }
  return false;
}

NPURT_DECL std::vector<stream_state*> deadlock_detector::blocked(bool only_cycles) const {
  std::vector<stream_state*> out;
  for (const auto& sp : streams_)
    if (sp && sp->head && sp->head_started && sp->head->blocked &&
        ((sp->head->kind == task_kind::event_wait && (!only_cycles || closes_cycle(*sp))) ||
         // Any task may yet write a value wait's word: it blocks for good only when nothing runs.
         (sp->head->kind == task_kind::value_wait && !only_cycles)))
      out.push_back(sp.get());
  return out;
}

NPURT_DECL std::string deadlock_detector::describe_wait_chain(const stream_state& s) const {
  std::ostringstream os;
  const task* h = s.head;
  const task_side& x = *h->extra;
  if (h->kind == task_kind::value_wait) {
    os << "stream " << s.id << " (device " << s.device << ") waits at task " << h->id << " for a 64-bit word of device "
       << x.copy.dst_device << " to meet " << to_string(x.condition) << ' ' << x.operand
       << ", and no work is left to write it";
    return os.str();
  }
  os << "stream " << s.id << " (device " << s.device << ") waits at task " << h->id << " on ";
  if (x.event_id != 0) os << "event " << x.event_id;
  else os << "a task event";
  if (x.target_stream == 0) {
    os << " (never recorded yet)";
    return os.str();
  }
  os << " = stream " << x.target_stream << " position " << x.target_seq;
  if (x.target_stream < streams_.size() && streams_[x.target_stream]) {
    const stream_state& t = *streams_[x.target_stream];
    os << " (stream " << t.id << " has completed " << t.completed;
    if (t.head) {
      os << ", its head is task " << t.head->id << " " << to_string(t.head->kind);
      if (const auto behind = queue_.held_behind(t.device, t.priority, t.head->id))
        os << ", held in device " << t.device << "'s execution queue behind task " << behind->first << " of stream "
           << behind->second;
    }
    os << ")";
  }
  return os.str();
}

NPURT_DECL void deadlock_detector::report(sim_time now, const std::vector<stream_state*>& streams,
                                          std::size_t host_waits, const std::string& backend_waits) {
  if (replace_) {
    report_.clear();
    replace_ = false;
  }
  std::ostringstream os;
  os << "deadlock at t=" << to_us(now.time_since_epoch()) << " us: ";
  if (streams.empty()) {
    os << "no stream or device can make progress";
    if (host_waits != 0) os << " and " << host_waits << " awaited host operation(s) wait";
    // Work the backend holds and never completes: a hung task with no watchdog to end it.
    for (const auto& sp : streams_)
      if (sp && sp->head && sp->head_started && !sp->head->blocked && sp->run.rec == sp->head &&
          sp->head->kind != task_kind::collective) {
        os << "; stream " << sp->id << " (device " << sp->device << ") runs task " << sp->run.id;
        if (!sp->run.name.empty()) os << " (" << sp->run.name << ")";
        os << ", started at t=" << to_us(sp->run.start.time_since_epoch())
           << " us, which never ends (hung, with no op-execute watchdog to end it)";
      }
    if (!backend_waits.empty()) os << "; " << backend_waits;
    if (report_.empty()) {
      report_ = os.str();
      ++reports_;
    }
    return;
  }
  bool first = true;
  for (const auto* s : streams) {
    os << (first ? "" : "; ") << describe_wait_chain(*s);
    first = false;
  }
  if (!backend_waits.empty()) os << "; " << backend_waits;
  if (!report_.empty()) report_ += "\n";
  report_ += os.str();
  ++reports_;
}

}  // namespace npurt::detail

// npurt/impl/system.ipp
#pragma once

#include <npurt/system.hpp>

#include <cstdlib>
#include <sstream>

namespace npurt {

namespace detail {
// Times from outside are checked before anything is built.
inline void check_overhead(picoseconds v, const char* name) {
  if (v.count() < 0)
    throw_error(make_error_code(errc::invalid_config),
                std::string("npurt::system: system_options::") + name + " is negative");
  if (v > max_launch_overhead)
    throw_error(make_error_code(errc::invalid_config),
                std::string("npurt::system: system_options::") + name + " of " + std::to_string(v.count()) +
                    " ps is more than max_launch_overhead (1 s): a launch costs a host microseconds");
}
inline const system_options& checked(const system_options& o) {
  check_overhead(o.launch_overhead, "launch_overhead");
  check_overhead(o.graph_node_overhead, "graph_node_overhead");
  return o;
}
}  // namespace detail

NPURT_DECL system::system(std::unique_ptr<npurt::backend> b, const system_options& opts)
    : rt_(std::make_unique<detail::runtime>(std::move(b), detail::checked(opts))) {
  for (std::size_t d = 0; d < rt_->device_count(); ++d) devices_.emplace_back(*rt_, static_cast<device_id>(d));
  // Any program can be profiled without changing its code, if it includes the profiler.
  if (opts.trace_from_env && detail::trace_from_environment != nullptr) {
    profiler_ = detail::trace_from_environment(*this);
    if (profiler_) rt_->add_observer(*profiler_);
  }
}

NPURT_DECL system::~system() {
  if (rt_->tracing()) rt_->fanout().on_shutdown(rt_->now());
}

NPURT_DECL npurt::device* system::find_device(device_id id, std::error_code& ec) noexcept {
  ec.clear();
  if (id < 0 || static_cast<std::size_t>(id) >= devices_.size()) {
    ec = make_error_code(errc::invalid_device);
    return nullptr;
  }
  return &devices_[static_cast<std::size_t>(id)];
}

NPURT_DECL npurt::device& system::device(device_id id) {
  std::error_code ec;
  npurt::device* d = find_device(id, ec);
  if (!d) throw_error(ec, "npurt::system::device: no device " + std::to_string(id));
  return *d;
}

NPURT_DECL void system::set_device(device_id id) {
  throw_if(rt_->check_thread(), "npurt::system::set_device");
  (void)device(id);  // validates
  current_ = id;
}

NPURT_DECL void system::run(std::error_code& ec) { rt_->run(ec); }

NPURT_DECL void system::run() {
  std::error_code ec;
  const bool nested = rt_->in_run();
  rt_->run(ec);
  if (!ec) return;
  if (ec == errc::not_supported && nested)
    throw_error(ec,
                "npurt::system::run: called from inside the loop it would run (a handler, host callback or "
                "coroutine of this system), which cannot be re-entered; the running loop already drives the "
                "work: co_await its async_ form instead (async_synchronize, async_wait), or return and let the "
                "outer run() go on");
  // A report kept from an earlier deadlock is not this error's message.
  if (ec == errc::deadlock && !rt_->last_deadlock_report().empty()) throw_error(ec, rt_->last_deadlock_report());
  throw_error(ec, "npurt::system::run");
}

NPURT_DECL void* system::host_malloc(std::size_t bytes, std::error_code& ec) noexcept {
  if ((ec = rt_->check_thread())) return nullptr;
  return rt_->memory().host_malloc(bytes, ec);
}

namespace detail {
// pointer_attributes' work; `why` says what is wrong with a refused pointer.
inline npurt::pointer_attributes pointer_attributes_of(runtime& rt, const void* p, std::error_code& ec,
                                                       std::string& why) {
  ec.clear();
  if ((ec = rt.check_thread())) return {};
  if (!p) {
    ec = make_error_code(errc::null_pointer);
    return {};
  }
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  const memory_registry& m = rt.memory();
  if (is_device_address(p)) {
    if (const allocation* a = m.find_allocation(p))
      return {memory_type::device, a->device, reinterpret_cast<const void*>(a->address), a->bytes, at - a->address};
    ec = make_error_code(errc::invalid_pointer);
    why = m.why_not_live(p);
    return {};
  }
  if (const host_allocation* h = m.find_host_allocation(p))
    return {memory_type::host_pinned, -1, h->base, h->bytes, at - reinterpret_cast<std::uintptr_t>(h->base)};
  return {};
}
}  // namespace detail

NPURT_DECL npurt::pointer_attributes system::pointer_attributes(const void* p, std::error_code& ec) const {
  std::string why;
  const npurt::pointer_attributes a = detail::pointer_attributes_of(*rt_, p, ec, why);
  if (ec && ec != errc::wrong_thread)
    (void)detail::note_refusal(*rt_, -1, "npurt::system::pointer_attributes", ec, why);
  return a;
}

NPURT_DECL npurt::pointer_attributes system::pointer_attributes(const void* p) const {
  std::error_code ec;
  std::string why;
  const npurt::pointer_attributes a = detail::pointer_attributes_of(*rt_, p, ec, why);
  if (ec) throw_error(ec, "npurt::system::pointer_attributes" + (why.empty() ? "" : ": " + why));
  return a;
}

namespace detail {
// The words of a refused pair of devices: the first id of the two that is not a device.
inline std::string no_such_device(const char* call, device_id a, device_id b, std::size_t count) {
  const bool a_bad = a < 0 || static_cast<std::size_t>(a) >= count;
  return std::string(call) + ": no device " + std::to_string(a_bad ? a : b) + " (the system has " +
         std::to_string(count) + ")";
}
}  // namespace detail

NPURT_DECL link_properties system::topology(device_id a, device_id b, std::error_code& ec) const {
  ec.clear();
  const auto n = devices_.size();
  if (a < 0 || b < 0 || static_cast<std::size_t>(a) >= n || static_cast<std::size_t>(b) >= n) {
    ec = make_error_code(errc::invalid_device);
    return {};
  }
  return rt_->backend().link(a, b);
}

NPURT_DECL link_properties system::topology(device_id a, device_id b) const {
  std::error_code ec;
  const link_properties l = topology(a, b, ec);
  if (ec) throw_error(ec, detail::no_such_device("npurt::system::topology", a, b, devices_.size()));
  return l;
}

NPURT_DECL bool system::can_access_peer(device_id a, device_id b, std::error_code& ec) const {
  const link_properties l = topology(a, b, ec);
  return !ec && l.kind == link_kind::hccs;
}

NPURT_DECL bool system::can_access_peer(device_id a, device_id b) const {
  std::error_code ec;
  const bool can = can_access_peer(a, b, ec);
  if (ec) throw_error(ec, detail::no_such_device("npurt::system::can_access_peer", a, b, devices_.size()));
  return can;
}

NPURT_DECL void* system::host_malloc(std::size_t bytes) {
  std::error_code ec;
  void* p = host_malloc(bytes, ec);
  // The code is the device's out_of_memory; the message says whose memory ran out.
  if (ec == errc::out_of_memory)
    throw_error(ec, "npurt::system::host_malloc: no pinned host memory for " + std::to_string(bytes) + " bytes");
  throw_if(ec, "npurt::system::host_malloc");
  return p;
}

NPURT_DECL void system::host_free(void* p, std::error_code& ec) noexcept {
  if ((ec = rt_->check_thread())) return;
  try {
    rt_->free_host(p, ec);
  } catch (const std::bad_alloc&) { ec = make_error_code(errc::out_of_memory); }
}

NPURT_DECL void system::host_free(void* p) {
  std::error_code ec;
  host_free(p, ec);
  // The code's own text is about device memory: say which memory this is about.
  if (ec == errc::invalid_pointer || ec == errc::double_free) {
    std::ostringstream os;
    os << p;
    throw_error(ec, "npurt::system::host_free: " + os.str() +
                        (ec == errc::double_free ? " was freed already"
                                                 : " is not the start of pinned memory from host_malloc"));
  }
  throw_if(ec, "npurt::system::host_free");
}

NPURT_DECL void system::set_event_wait_timeout(std::optional<picoseconds> limit, std::error_code& ec) noexcept {
  ec.clear();
  if ((ec = rt_->check_thread())) return;
  if (limit && limit->count() <= 0) {
    ec = make_error_code(errc::invalid_argument);
    return;
  }
  rt_->set_event_wait_timeout(limit ? limit->count() : 0);
}

NPURT_DECL void system::set_event_wait_timeout(std::optional<picoseconds> limit) {
  std::error_code ec;
  set_event_wait_timeout(limit, ec);
  if (ec == errc::invalid_argument)
    throw_error(ec, "npurt::system::set_event_wait_timeout: the limit must be positive (no_timeout for none), got " +
                        std::to_string(limit->count()) + " ps");
  throw_if(ec, "npurt::system::set_event_wait_timeout");
}

// The observer list and the observers' records are the loop thread's, as everything else is:
// these refuse another thread like every other call (system_options::check_thread).
// remove_observer is left unchecked: destructors and noexcept clean-up paths call it.
NPURT_DECL void system::add_observer(observer& o) {
  throw_if(rt_->check_thread(), "npurt::system::add_observer");
  rt_->add_observer(o);
}
NPURT_DECL void system::remove_observer(observer& o) { rt_->remove_observer(o); }

NPURT_DECL void system::mark(std::string_view name, std::uint32_t lane) {
  throw_if(rt_->check_thread(), "npurt::system::mark");
  if (rt_->tracing()) rt_->fanout().on_host_range({host_range_op::mark, name, lane, rt_->now()});
}
NPURT_DECL void system::push_range(std::string_view name, std::uint32_t lane) {
  throw_if(rt_->check_thread(), "npurt::system::push_range");
  if (rt_->tracing()) rt_->fanout().on_host_range({host_range_op::push, name, lane, rt_->now()});
}
NPURT_DECL void system::pop_range(std::uint32_t lane) {
  throw_if(rt_->check_thread(), "npurt::system::pop_range");
  if (rt_->tracing()) rt_->fanout().on_host_range({host_range_op::pop, {}, lane, rt_->now()});
}

}  // namespace npurt

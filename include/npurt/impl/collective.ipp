// npurt/impl/collective.ipp — bodies of npurt::communicator.
#pragma once

#include <npurt/collective.hpp>
#include <npurt/system.hpp>

#include <algorithm>
#include <limits>
#include <set>
#include <sstream>
#include <string>

namespace npurt {

NPURT_DECL communicator communicator::init_all(system& sys, std::span<const device_id> devices,
                                               const communicator_options& opts, std::error_code& ec) {
  std::string why;
  communicator c = init_all_checked(sys, devices, opts, ec, why);
  // From another thread the system is its owner's to write: its recent error is left alone.
  if (ec && ec != errc::wrong_thread)
    (void)detail::note_refusal(detail::runtime_of(sys), -1, "npurt::communicator::init_all", ec, why);
  return c;
}

NPURT_DECL communicator communicator::init_all(system& sys, std::span<const device_id> devices,
                                               const communicator_options& opts) {
  std::error_code ec;
  std::string why;
  communicator c = init_all_checked(sys, devices, opts, ec, why);
  if (ec) throw_error(ec, "npurt::communicator::init_all: " + why);
  return c;
}

NPURT_DECL communicator communicator::init_all_checked(system& sys, std::span<const device_id> devices,
                                                       const communicator_options& opts, std::error_code& ec,
                                                       std::string& why) {
  ec.clear();
  communicator c;
  const auto refuse = [&](errc e, std::string words) {
    ec = make_error_code(e);
    why = std::move(words);
    return c;
  };
  if (const std::error_code t = detail::runtime_of(sys).check_thread()) return refuse(errc::wrong_thread, "");
  // The preset's value, or the option's (a negative duration is a caller error).
  const auto resolve = [](const timeout_option& o, picoseconds preset, std::optional<picoseconds>& out) {
    if (std::holds_alternative<preset_timeout_t>(o)) {
      out = preset.count() > 0 ? std::optional<picoseconds>(preset) : std::nullopt;  // 0: HCCL's "never"
      return true;
    }
    out = std::get<std::optional<picoseconds>>(o);
    return !out || out->count() >= 0;
  };
  // An algorithm cast from an integer out of the enumeration is refused here as set_algorithm
  // and the per-call override refuse it: the engine would plan it as no algorithm at all.
  if (opts.algorithm > collective_algorithm::hierarchical)
    return refuse(errc::invalid_argument, "communicator_options::algorithm is not a collective_algorithm (" +
                                              std::to_string(static_cast<int>(opts.algorithm)) + ")");
  if (opts.buffer_size < min_collective_buffer_size)
    return refuse(errc::invalid_argument, "communicator_options::buffer_size is " + std::to_string(opts.buffer_size) +
                                              " bytes, less than the 1 MiB minimum");
  if (devices.empty()) return refuse(errc::invalid_argument, "no devices");
  std::set<device_id> seen;
  for (device_id d : devices) {
    if (d < 0 || static_cast<std::size_t>(d) >= sys.device_count())
      return refuse(errc::invalid_device, "device " + std::to_string(d) + " is not a device of the system (it has " +
                                              std::to_string(sys.device_count()) + ")");
    if (!seen.insert(d).second)
      return refuse(errc::invalid_argument,
                    "device " + std::to_string(d) + " is listed twice (ranks are distinct devices)");
  }
  const device_properties& props = sys.device(devices[0]).properties();
  std::optional<picoseconds> exec, connect;
  if (!resolve(opts.exec_timeout, props.hccl_exec_timeout, exec))
    return refuse(errc::invalid_argument, "communicator_options::exec_timeout is negative");
  if (!resolve(opts.connect_timeout, props.hccl_connect_timeout, connect))
    return refuse(errc::invalid_argument, "communicator_options::connect_timeout is negative");
  c.sys_ = &sys;
  c.rt_ = &detail::runtime_of(sys);
  c.state_ = std::make_shared<collective_comm_state>();
  auto& st = *c.state_;
  st.id = c.rt_->new_communicator_id();
  st.name = opts.name.empty() ? "comm" + std::to_string(st.id) : opts.name;
  st.devices.assign(devices.begin(), devices.end());
  st.algorithm = opts.algorithm;
  st.buffer_bytes = opts.buffer_size;
  st.exec_timeout = exec;
  st.connect_timeout = connect;
  st.keep_records = opts.keep_records;
  const std::size_t n = st.devices.size();
  st.next_seq.assign(n, 0);
  st.next_send.assign(n * n, 0);
  st.next_recv.assign(n * n, 0);
  c.group_ = std::make_shared<group_state>();
  return c;
}

NPURT_DECL communicator communicator::init_all(system& sys, const communicator_options& opts) {
  std::vector<device_id> all(sys.device_count());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<device_id>(i);
  return init_all(sys, all, opts);
}

NPURT_DECL communicator communicator::init_all(system& sys, const communicator_options& opts, std::error_code& ec) {
  std::vector<device_id> all(sys.device_count());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<device_id>(i);
  return init_all(sys, all, opts, ec);
}

NPURT_DECL int communicator::rank_of(device_id dev) const noexcept {
  if (!state_) return -1;
  const auto& d = state_->devices;
  const auto it = std::find(d.begin(), d.end(), dev);
  return it == d.end() ? -1 : static_cast<int>(it - d.begin());
}

NPURT_DECL device_id communicator::device_of(std::uint32_t rank) const {
  if (!state_ || rank >= state_->size())
    throw_error(make_error_code(errc::invalid_argument), "npurt::communicator::device_of: rank out of range");
  return state_->devices[rank];
}

NPURT_DECL std::error_code communicator::usable() const noexcept {
  if (!state_ || !rt_) return make_error_code(errc::invalid_argument);
  return rt_->check_thread();
}

NPURT_DECL void communicator::refuse(std::string_view call, std::error_code ec, std::string_view why,
                                     std::error_code* out) const {
  std::string what = "npurt::communicator::" + std::string(call);
  if (!why.empty()) what.append(": ").append(why);
  if (!out) throw_error(ec, what);
  *out = ec;
  // From another thread the system is its owner's to write: its recent error is left alone.
  if (rt_ && ec != errc::wrong_thread) (void)detail::note_refusal(*rt_, -1, what, ec, {});
}

NPURT_DECL bool communicator::admit(std::string_view call, std::error_code* out) const {
  const std::error_code ec = usable();
  if (!ec) {
    if (out) out->clear();
    return true;
  }
  refuse(call, ec, !state_ ? "empty communicator handle" : !rt_ ? "its system was destroyed" : "", out);
  return false;
}

NPURT_DECL std::vector<communicator> communicator::do_split(std::span<const int> colors,
                                                            const std::span<const int>* keys,
                                                            std::error_code* out) const {
  if (!admit("split", out)) return {};
  const std::size_t n = state_->size();
  if (!keys && colors.size() != n) {
    refuse("split", make_error_code(errc::invalid_argument),
           "one color per rank (" + std::to_string(n) + "), not " + std::to_string(colors.size()), out);
    return {};
  }
  if (keys && (colors.size() != n || keys->size() != n)) {
    refuse("split", make_error_code(errc::invalid_argument),
           "one color and one key per rank (" + std::to_string(n) + "), not " + std::to_string(colors.size()) +
               " colors and " + std::to_string(keys->size()) + " keys",
           out);
    return {};
  }
  // ncclCommSplit: the ranks of a color in (key, parent rank) order; without keys, parent rank
  // order.
  std::map<int, std::vector<std::pair<int, std::size_t>>> members;
  for (std::size_t r = 0; r < colors.size(); ++r)
    if (colors[r] >= 0) members[colors[r]].push_back({keys ? (*keys)[r] : 0, r});
  std::map<int, std::vector<device_id>> groups;
  for (auto& [color, m] : members) {
    std::sort(m.begin(), m.end());
    for (const auto& [key, r] : m) groups[color].push_back(state_->devices[r]);
  }
  std::vector<communicator> result;
  for (auto& [color, devs] : groups) {
    communicator_options o;
    o.algorithm = state_->algorithm;
    o.buffer_size = state_->buffer_bytes;
    o.exec_timeout = state_->exec_timeout;
    o.connect_timeout = state_->connect_timeout;
    o.keep_records = state_->keep_records;
    o.name = state_->name + "/" + std::to_string(color);
    // The parent's settings and devices passed init_all's checks when it was made.
    result.push_back(init_all(*sys_, devs, o));
  }
  return result;
}

NPURT_DECL std::vector<communicator> communicator::split(std::span<const int> colors) const {
  return do_split(colors, nullptr, nullptr);
}

NPURT_DECL std::vector<communicator> communicator::split(std::span<const int> colors, std::error_code& ec) const {
  return do_split(colors, nullptr, &ec);
}

NPURT_DECL std::vector<communicator> communicator::split(std::span<const int> colors, std::span<const int> keys) const {
  return do_split(colors, &keys, nullptr);
}

NPURT_DECL std::vector<communicator> communicator::split(std::span<const int> colors, std::span<const int> keys,
                                                         std::error_code& ec) const {
  return do_split(colors, &keys, &ec);
}

NPURT_DECL void communicator::do_set_algorithm(collective_algorithm a, std::error_code* out) {
  if (!admit("set_algorithm", out)) return;
  if (a > collective_algorithm::hierarchical)
    return refuse("set_algorithm", make_error_code(errc::invalid_argument), "unknown algorithm", out);
  state_->algorithm = a;
}

NPURT_DECL void communicator::set_algorithm(collective_algorithm a) { do_set_algorithm(a, nullptr); }
NPURT_DECL void communicator::set_algorithm(collective_algorithm a, std::error_code& ec) { do_set_algorithm(a, &ec); }

NPURT_DECL void communicator::do_set_buffer_size(std::size_t bytes, std::error_code* out) {
  if (!admit("set_buffer_size", out)) return;
  if (bytes < min_collective_buffer_size)
    return refuse("set_buffer_size", make_error_code(errc::invalid_argument),
                  std::to_string(bytes) + " bytes is less than the 1 MiB minimum (HCCL_BUFFSIZE's)", out);
  state_->buffer_bytes = bytes;
}

NPURT_DECL void communicator::set_buffer_size(std::size_t bytes) { do_set_buffer_size(bytes, nullptr); }
NPURT_DECL void communicator::set_buffer_size(std::size_t bytes, std::error_code& ec) {
  do_set_buffer_size(bytes, &ec);
}

NPURT_DECL void communicator::do_set_timeout(std::string_view call,
                                             std::optional<picoseconds> collective_comm_state::* field,
                                             std::optional<picoseconds> t, std::error_code* out) {
  if (!admit(call, out)) return;
  if (t && t->count() < 0) return refuse(call, make_error_code(errc::invalid_argument), "negative timeout", out);
  (*state_).*field = t;
}

NPURT_DECL void communicator::set_exec_timeout(std::optional<picoseconds> t) {
  do_set_timeout("set_exec_timeout", &collective_comm_state::exec_timeout, t, nullptr);
}
NPURT_DECL void communicator::set_exec_timeout(std::optional<picoseconds> t, std::error_code& ec) {
  do_set_timeout("set_exec_timeout", &collective_comm_state::exec_timeout, t, &ec);
}
NPURT_DECL void communicator::set_connect_timeout(std::optional<picoseconds> t) {
  do_set_timeout("set_connect_timeout", &collective_comm_state::connect_timeout, t, nullptr);
}
NPURT_DECL void communicator::set_connect_timeout(std::optional<picoseconds> t, std::error_code& ec) {
  do_set_timeout("set_connect_timeout", &collective_comm_state::connect_timeout, t, &ec);
}

NPURT_DECL std::error_code communicator::async_error(std::string* message) const {
  if (!state_) return make_error_code(errc::invalid_argument);
  if (message) *message = state_->message;
  return state_->async_error;
}

NPURT_DECL void communicator::abort(std::error_code& ec) {
  if (!admit("abort", &ec)) return;
  if (state_->aborted) return;
  state_->aborted = true;
  // What the failed operations and every later call say: the application aborted it, not a
  // device reset or a fault.
  state_->abort_reason = "communicator::abort() was called";
  if (group_) group_->pending.clear();
  rt_->backend().abort_collectives(state_->id);
}

NPURT_DECL void communicator::abort() {
  require_usable("abort");
  std::error_code ec;
  abort(ec);
}

NPURT_DECL std::error_code communicator::check(const collective_call& c, device_id dev, std::uint32_t rank,
                                               std::string* why) const {
  const auto explain = [&](std::error_code e, const std::string& text) {
    if (why) *why = text;
    return e;
  };
  const std::uint32_t p = state_->size();
  const std::size_t es = size_of(c.type);
  if (es == 0) return make_error_code(errc::invalid_dtype);
  // Enumerators from a cast integer: the simulator would otherwise run them as some other
  // operation (or none) and complete with a wrong answer.
  if (c.op > collective_op::barrier || c.algorithm > collective_algorithm::hierarchical)
    return make_error_code(errc::invalid_argument);
  const bool reduces =
      c.op == collective_op::all_reduce || c.op == collective_op::reduce || c.op == collective_op::reduce_scatter;
  if (reduces && c.red > reduce_op::avg) return make_error_code(errc::invalid_argument);
  // A boolean's sum is an or (0 or 1), which one division by the rank count in the element type
  // turns into 0 on any communicator of two or more ranks: an answer that passes for a result.
  // NCCL has no boolean type to average.
  if (reduces && c.red == reduce_op::avg && c.type == dtype::boolean) return make_error_code(errc::invalid_dtype);
  // The reduction runs on the device's vector units, which take bf16 only where the preset says
  // so (as a kernel's bf16 operands); moving bf16 bytes needs no arithmetic.
  if (reduces && c.type == dtype::bf16 && !rt_->backend().properties(dev).bf16_supported)
    return make_error_code(errc::invalid_dtype);
  const bool needs_root = c.op == collective_op::broadcast || c.op == collective_op::reduce ||
                          c.op == collective_op::send || c.op == collective_op::recv;
  if (needs_root && (c.root < 0 || static_cast<std::uint32_t>(c.root) >= p))
    return make_error_code(errc::invalid_argument);
  if ((c.op == collective_op::send || c.op == collective_op::recv) && static_cast<std::uint32_t>(c.root) == rank)
    return make_error_code(errc::invalid_argument);
  // Bytes each buffer must hold.
  std::size_t send_elems = c.count, recv_elems = c.count;
  const auto mul = [](std::size_t a, std::size_t b, std::size_t& out) {
    if (b != 0 && a > std::numeric_limits<std::size_t>::max() / b) return false;
    out = a * b;
    return true;
  };
  bool ok = true;
  switch (c.op) {
    case collective_op::all_gather: ok = mul(c.count, p, recv_elems); break;
    case collective_op::reduce_scatter: ok = mul(c.count, p, send_elems); break;
    case collective_op::all_to_all: ok = mul(c.count, p, send_elems) && mul(c.count, p, recv_elems); break;
    case collective_op::send: recv_elems = 0; break;
    case collective_op::recv: send_elems = 0; break;
    case collective_op::reduce:
      if (rank != static_cast<std::uint32_t>(c.root)) recv_elems = 0;
      break;
    case collective_op::broadcast:  // only the root's send is read (ncclBroadcast)
      if (rank != static_cast<std::uint32_t>(c.root)) send_elems = 0;
      break;
    case collective_op::barrier: send_elems = recv_elems = 0; break;
    case collective_op::all_to_allv: {
      if (c.send_counts.size() != p || c.send_displs.size() != p || c.recv_counts.size() != p ||
          c.recv_displs.size() != p)
        return make_error_code(errc::invalid_argument);
      send_elems = recv_elems = 0;
      // A zero-count entry moves nothing, so its displacement names no element and is not
      // checked: MPI_Alltoallv and HCCL's AlltoAllV do not access the buffer for it either.
      for (std::uint32_t i = 0; i < p; ++i) {
        if (c.send_counts[i] > std::numeric_limits<std::size_t>::max() - c.send_displs[i] ||
            c.recv_counts[i] > std::numeric_limits<std::size_t>::max() - c.recv_displs[i])
          return make_error_code(errc::size_overflow);
        if (c.send_counts[i] != 0) send_elems = std::max(send_elems, c.send_displs[i] + c.send_counts[i]);
        if (c.recv_counts[i] != 0) recv_elems = std::max(recv_elems, c.recv_displs[i] + c.recv_counts[i]);
      }
      break;
    }
    default: break;
  }
  std::size_t send_bytes = 0, recv_bytes = 0;
  // The words are built only for a refusal: every accepted call passes through here.
  const auto rank_text = [rank] { return "rank " + std::to_string(rank) + "'s "; };
  if (!ok || !mul(send_elems, es, send_bytes) || !mul(recv_elems, es, recv_bytes))
    return explain(make_error_code(errc::size_overflow), "count " + std::to_string(c.count) + " of " +
                                                             std::string(to_string(c.type)) + " on " +
                                                             std::to_string(p) + " ranks overflows a byte size");
  // A buffer larger than the device's memory cannot exist. Timing-only calls pass null buffers,
  // so nothing else bounds the count there, and the engine would simulate such a message one
  // buffer-sized chunk at a time, practically forever.
  const std::size_t hbm = rt_->backend().properties(dev).memory_bytes;
  if (hbm != 0 && (send_bytes > hbm || recv_bytes > hbm))
    return explain(make_error_code(errc::size_overflow),
                   rank_text() + (send_bytes > hbm ? "send" : "recv") + " buffer would need " +
                       std::to_string(std::max(send_bytes, recv_bytes)) + " bytes, more than device " +
                       std::to_string(dev) + "'s memory (" + std::to_string(hbm) + " bytes)");
  const bool timing_only = !rt_->backend().functional();
  auto buffer = [&](const char* which, const void* ptr, std::size_t bytes) -> std::error_code {
    if (bytes == 0) return {};
    const auto named = [&] {
      std::ostringstream os;
      os << rank_text() << which << " buffer ";
      if (ptr) os << ptr;
      return os.str();
    };
    if (!ptr)
      return timing_only ? std::error_code{}
                         : explain(make_error_code(errc::null_pointer),
                                   named() + "is null (only a timing-only system takes null buffers)");
    const detail::allocation* a = rt_->memory().find_allocation(ptr);
    if (!a) return make_error_code(errc::invalid_pointer);
    if (a->device != dev)
      return explain(make_error_code(errc::stream_device_mismatch), named() + " is memory of device " +
                                                                        std::to_string(a->device) + ", not of device " +
                                                                        std::to_string(dev) + ", the calling rank's");
    const std::size_t room = a->bytes - (reinterpret_cast<std::uint64_t>(ptr) - a->address);
    if (bytes > room)
      return explain(make_error_code(errc::size_overflow), named() + " has " + std::to_string(room) +
                                                               " bytes to the end of its allocation; the call needs " +
                                                               std::to_string(bytes));
    return {};
  };
  if (auto e = buffer("send", c.send, send_bytes)) return e;
  if (auto e = buffer("recv", c.recv, recv_bytes)) return e;
  return {};
}

NPURT_DECL detail::task* communicator::prepare(const collective_call& c, stream& s, std::error_code& ec) {
  ec.clear();
  if (!state_) {
    ec = make_error_code(errc::invalid_argument);
    return nullptr;
  }
  if (!rt_) {
    ec = make_error_code(errc::invalid_argument);  // its system was destroyed
    return nullptr;
  }
  // Before the stream's check: from another thread every stream reads as invalid, which would
  // hide the cause.
  if ((ec = rt_->check_thread())) return nullptr;
  if (state_->aborted) {
    ec = make_error_code(errc::operation_aborted);
    return nullptr;
  }
  // Stream ids are per system: another system's stream could name one of ours.
  detail::stream_state* ss = s.rt_ == rt_ && s.valid() ? rt_->find_stream(s.id()) : nullptr;
  if (!ss || ss->destroyed || ss->invalidated) {
    ec = make_error_code(errc::invalid_stream);
    return nullptr;
  }
  const int r = rank_of(ss->device);
  if (r < 0) {
    ec = make_error_code(errc::stream_device_mismatch);
    return nullptr;
  }
  const auto rank = static_cast<std::uint32_t>(r);
  // A lost device takes no work until it is reset, as its launches and copies are refused at the
  // call: nothing is enqueued and the rank's call number does not advance, so the ranks stay
  // matched when the caller resets the device and calls again.
  if (rt_->backend().status(ss->device) == device_status::lost) {
    ec = make_error_code(errc::device_lost);
    return nullptr;
  }
  if ((ec = check(c, ss->device, rank))) return nullptr;
  // Call numbers, per rank for collectives and per ordered pair for point-to-point calls: the
  // engine matches the ranks' parts by them. A captured call takes its number at each launch of
  // its graph instead.
  const bool captured = ss->capture != nullptr;
  collective_settings settings;
  settings.algorithm = c.algorithm != collective_algorithm::automatic ? c.algorithm : state_->algorithm;
  settings.buffer_bytes = state_->buffer_bytes;
  if (group_ && group_->depth > 0) {
    auto& d = group_->pending[ss->id];
    if (!d) {
      d = std::make_shared<collective_desc>();
      d->comm = state_;
      d->rank = rank;
      d->captured = captured;
    } else if (d->captured != captured) {
      // One group task holds the stream's calls: it cannot be half a node of a capture.
      ec = make_error_code(errc::capture_unsupported);
      if (captured)
        rt_->invalidate_capture(*ss, ec,
                                "npurt::communicator: stream " + std::to_string(ss->id) +
                                    " began capturing inside a group that holds its earlier calls");
      return nullptr;
    }
    d->calls.push_back(c);
    d->sequence.push_back(captured ? 0 : state_->take_sequence(rank, c));
    d->settings.push_back(settings);
    return nullptr;
  }
  const std::uint64_t seq = captured ? 0 : state_->take_sequence(rank, c);
  auto d = std::make_shared<collective_desc>();
  d->comm = state_;
  d->rank = rank;
  d->calls.push_back(c);
  d->sequence.push_back(seq);
  d->settings.push_back(settings);
  d->captured = captured;
  detail::task* t = rt_->new_task(*ss, task_kind::collective);
  t->engine = engine_kind::collective;
  t->name = to_string(c.op);
  t->describe(nullptr, std::move(d));
  return t;
}

NPURT_DECL std::string communicator::describe_invalid(const collective_call& c, const stream& s) const {
  const std::uint32_t p = state_->size();
  if (c.op > collective_op::barrier)
    return "operation " + std::to_string(static_cast<unsigned>(c.op)) + " is not a collective_op";
  if (c.algorithm > collective_algorithm::hierarchical)
    return "algorithm " + std::to_string(static_cast<unsigned>(c.algorithm)) + " is not a collective_algorithm";
  const bool reduces =
      c.op == collective_op::all_reduce || c.op == collective_op::reduce || c.op == collective_op::reduce_scatter;
  if (reduces && c.red > reduce_op::avg)
    return "reduce operator " + std::to_string(static_cast<unsigned>(c.red)) + " is not a reduce_op";
  const bool p2p = c.op == collective_op::send || c.op == collective_op::recv;
  if ((p2p || c.op == collective_op::broadcast || c.op == collective_op::reduce) &&
      (c.root < 0 || static_cast<std::uint32_t>(c.root) >= p))
    return std::string(p2p ? "peer " : "root ") + std::to_string(c.root) + " is not a rank of this communicator (0.." +
           std::to_string(p - 1) + ")";
  const int rank = s.valid() ? rank_of(s.device_or_none()) : -1;
  if (p2p && rank >= 0 && c.root == rank)
    return "rank " + std::to_string(rank) + " cannot " + (c.op == collective_op::send ? "send to" : "receive from") +
           " itself";
  if (c.op == collective_op::all_to_allv)
    return "all_to_allv takes " + std::to_string(p) + " send and receive counts and displacements, one per rank";
  return {};
}

NPURT_DECL std::string communicator::refusal_words(const collective_call& c, const stream& s, std::error_code ec,
                                                   bool async) const {
  std::string what =
      std::string(async ? "npurt::communicator::async_" : "npurt::communicator::") + std::string(to_string(c.op));
  // What check() found wrong with a buffer or a size, when it was check() that refused.
  std::string buffer_why;
  const int rank = state_ && rt_ && s.valid() ? rank_of(s.device_or_none()) : -1;
  if (rank >= 0 && (ec == errc::size_overflow || ec == errc::null_pointer || ec == errc::stream_device_mismatch))
    (void)check(c, s.device_or_none(), static_cast<std::uint32_t>(rank), &buffer_why);
  if (ec == errc::invalid_stream) what += ": the stream is empty, destroyed, or of another system";
  if (ec == errc::capture_unsupported)
    what +=
        ": the stream's earlier calls in this group were made on the other side of a capture's start or end, and "
        "one group cannot be half a node of a capture (end the group before begin_capture or end_capture)";
  else if (ec == errc::stream_captured) what += ": " + std::string(detail::awaited_in_capture);
  else if (!buffer_why.empty()) what += ": " + buffer_why;
  else if (ec == errc::stream_device_mismatch) {
    std::string devs;
    for (device_id x : devices()) devs += (devs.empty() ? "" : ", ") + std::to_string(x);
    what += ": the stream's device " + std::to_string(s.device_or_none()) +
            " has no rank in this communicator (its devices are " + devs + ")";
  } else if (ec == errc::operation_aborted && state_)
    what += ": the communicator was aborted" +
            (state_->abort_reason.empty() ? std::string("") : " (" + state_->abort_reason + ")");
  else if (ec == errc::device_lost)
    what +=
        ": the calling rank's device " + std::to_string(s.device_or_none()) + " is lost (device::reset() repairs it)";
  else if (ec == errc::invalid_argument && !state_) what += ": empty communicator handle";
  else if (ec == errc::invalid_argument && !rt_) what += ": its system was destroyed";
  else if (ec == errc::invalid_argument) {
    if (std::string why = describe_invalid(c, s); !why.empty()) what += ": " + why;
  } else if (ec == errc::invalid_dtype && c.type == dtype::boolean && c.red == reduce_op::avg)
    what += ": avg cannot reduce boolean (its sum is an or, 0 or 1, which the division by the rank count makes 0)";
  else if (ec == errc::invalid_dtype && c.type == dtype::bf16)
    what += ": the devices of this system cannot reduce bf16 (the preset has no bf16 support)";
  else if (ec == errc::invalid_pointer && rt_) {
    std::string why = c.send ? rt_->memory().why_not_live(c.send) : std::string();
    what += ": " + (why.empty() && c.recv ? rt_->memory().why_not_live(c.recv) : why);
  }
  if (ec == errc::not_supported && group_ && group_->depth > 0)
    what += ": an async_ call cannot be part of a group (group_start() is open)";
  return what;
}

NPURT_DECL std::exception_ptr communicator::note_refused_call(const collective_call& c, const stream& s,
                                                              std::error_code ec, bool async) const {
  // From another thread the system is its owner's to write: its recent error is left alone.
  if (!rt_ || ec == errc::wrong_thread) return nullptr;
  return detail::note_refusal(*rt_, ec == errc::device_lost ? s.device_or_none() : -1, refusal_words(c, s, ec, async),
                              ec, {});
}

NPURT_DECL event communicator::submit(detail::task* t, stream& s) {
  const std::uint64_t task = t->id;
  const std::uint64_t seq = rt_->enqueue(*rt_->find_stream(s.id()), t);
  if (seq == 0) return {};  // a node of the stream's capture: no place in the stream until a launch
  return detail::event_access::task_event(*rt_, s.id(), seq, task);
}

NPURT_DECL event communicator::enqueue(const collective_call& c, stream& s, std::error_code& ec) {
  if (detail::task* t = prepare(c, s, ec)) return submit(t, s);
  if (ec) (void)note_refused_call(c, s, ec, false);
  return {};  // refused, or a call of an open group, which group_end enqueues
}

NPURT_DECL event communicator::enqueue(const collective_call& c, stream& s) {
  std::error_code ec;
  if (detail::task* t = prepare(c, s, ec)) return submit(t, s);
  if (ec) throw_error_on(ec == errc::device_lost ? s.device_or_none() : -1, ec, refusal_words(c, s, ec, false), 0);
  return {};
}

NPURT_DECL void communicator::do_group_start(std::error_code* out) {
  if (!admit("group_start", out)) return;
  // As every call after abort() is refused: a group opened now could only end in that error.
  if (state_->aborted)
    return refuse("group_start", make_error_code(errc::operation_aborted), "the communicator was aborted", out);
  ++group_->depth;
}

NPURT_DECL void communicator::group_start() { do_group_start(nullptr); }
NPURT_DECL void communicator::group_start(std::error_code& ec) { do_group_start(&ec); }

NPURT_DECL void communicator::do_group_end(std::error_code* out) {
  if (out) out->clear();
  if (rt_)
    if (const std::error_code ec = rt_->check_thread()) return refuse("group_end", ec, {}, out);
  if (!group_ || group_->depth == 0)
    return refuse("group_end", make_error_code(errc::invalid_argument), state_ && rt_ ? "no group_start to end" : "",
                  out);
  if (--group_->depth > 0) return;
  // abort() dropped the group's calls: without an error here they would vanish unreported, as
  // their fire-and-forget events are empty.
  if (state_ && state_->aborted) {
    group_->pending.clear();
    return refuse("group_end", make_error_code(errc::operation_aborted), {}, out);
  }
  if (!rt_) {
    group_->pending.clear();
    return refuse("group_end", make_error_code(errc::invalid_argument), {}, out);  // its system was destroyed
  }
  auto pending = std::move(group_->pending);
  group_->pending.clear();
  // All or nothing: a stream destroyed inside the group would leave the other ranks' parts
  // waiting for a peer that never comes (until a timeout, or for ever without one).
  for (const auto& entry : pending) {
    const detail::stream_state* ss = rt_->find_stream(entry.first);
    // Its capture began or ended inside the group: its calls were numbered for the other side.
    const bool capture_moved = ss && (ss->capture != nullptr) != entry.second->captured;
    if (!ss || ss->destroyed || ss->invalidated || capture_moved) {
      // The group's calls outside captures took the last call numbers of their ranks (every call
      // of this communicator went into the open group): give them back, so that the ranks' next
      // calls match whichever ranks the group held.
      for (const auto& [sid, d] : pending)
        if (!d->captured)
          for (const collective_call& c : d->calls) state_->give_back_sequence(d->rank, c);
      if (capture_moved)
        return refuse("group_end", make_error_code(errc::capture_unsupported),
                      "stream " + std::to_string(entry.first) + (entry.second->captured ? " ended" : " began") +
                          " a capture inside the group, which holds its calls made " +
                          (entry.second->captured ? "in" : "outside") + " it; none of the group's calls was enqueued",
                      out);
      return refuse("group_end", make_error_code(errc::invalid_stream),
                    "a stream of the group was destroyed or its device reset; none of the group's calls was "
                    "enqueued",
                    out);
    }
  }
  for (auto& [sid, d] : pending) {
    detail::stream_state* ss = rt_->find_stream(sid);
    detail::task* t = rt_->new_task(*ss, task_kind::collective);
    t->engine = engine_kind::collective;
    t->name = d->calls.size() == 1 ? to_string(d->calls[0].op) : std::string_view("collective_group");
    t->describe(nullptr, std::move(d));
    rt_->enqueue(*ss, t);
  }
}

NPURT_DECL void communicator::group_end() { do_group_end(nullptr); }
NPURT_DECL void communicator::group_end(std::error_code& ec) { do_group_end(&ec); }

}  // namespace npurt

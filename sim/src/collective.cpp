// The collective engine: rendezvous of the ranks, phases over the device model's links,
// timeouts, mismatches, and the functional results.
#include <npurt/sim/collective_engine.hpp>

#include <npurt/numeric.hpp>
#include <npurt/observer.hpp>
#include <npurt/sim/device_model.hpp>
#include <npurt/sim/topology.hpp>
#include <npurt/time.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>

namespace npurt::sim {

namespace {

constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();

std::size_t checked_bytes(std::size_t count, dtype t, std::size_t times = 1) {
  const std::size_t s = size_of(t);
  if (count != 0 && (times > std::numeric_limits<std::size_t>::max() / count ||
                     count * times > std::numeric_limits<std::size_t>::max() / s))
    return std::numeric_limits<std::size_t>::max();
  return count * times * s;
}

std::string describe_call(const collective_call& c) {
  std::ostringstream os;
  os << to_string(c.op) << "(count=" << c.count << ", " << to_string(c.type);
  if (c.op == collective_op::all_reduce || c.op == collective_op::reduce || c.op == collective_op::reduce_scatter)
    os << ", " << to_string(c.red);
  if (c.op == collective_op::broadcast || c.op == collective_op::reduce) os << ", root=" << c.root;
  if (c.op == collective_op::send || c.op == collective_op::recv) os << ", peer=" << c.root;
  os << ")";
  return os.str();
}

std::string describe_settings(const collective_settings& s) {
  std::ostringstream os;
  os << "algorithm " << to_string(s.algorithm) << ", buffer size " << s.buffer_bytes << " B";
  return os.str();
}

// Ranks that run one operation with different algorithms or chunkings would move different
// data at different steps; a send and a recv are one transfer whatever their algorithm.
bool same_settings(const collective_call& c, const collective_settings& a, const collective_settings& b) {
  if (a.buffer_bytes != b.buffer_bytes) return false;
  return c.op == collective_op::send || c.op == collective_op::recv || a.algorithm == b.algorithm;
}

bool same_call(const collective_call& a, const collective_call& b) {
  if (a.type != b.type || a.count != b.count) return false;
  if (a.op == collective_op::send || a.op == collective_op::recv) return true;  // roles differ by design
  if (a.op != b.op) return false;
  if ((a.op == collective_op::all_reduce || a.op == collective_op::reduce || a.op == collective_op::reduce_scatter) &&
      a.red != b.red)
    return false;
  if ((a.op == collective_op::broadcast || a.op == collective_op::reduce) && a.root != b.root) return false;
  return true;
}

// What same_call found different, named as the user's arguments are: a message that only lists
// both calls leaves the reader to diff them.
std::string differing_fields(const collective_call& a, const collective_call& b) {
  std::string out;
  auto add = [&](const char* field) { out += out.empty() ? field : std::string(", ") + field; };
  const bool p2p = a.op == collective_op::send || a.op == collective_op::recv;
  if (!p2p && a.op != b.op) add("operation");
  if (a.count != b.count) add("count");
  if (a.type != b.type) add("datatype");
  if (!p2p && a.op == b.op) {
    if ((a.op == collective_op::all_reduce || a.op == collective_op::reduce || a.op == collective_op::reduce_scatter) &&
        a.red != b.red)
      add("reduction op");
    if ((a.op == collective_op::broadcast || a.op == collective_op::reduce) && a.root != b.root) add("root");
  }
  return out;
}

// --- element-wise reduction in a fixed order -----------------------------------------------

template <class T>
T apply(reduce_op r, T a, T b) {
  // max and min propagate a NaN (as numpy's maximum and the graph's ReduceMax do): a comparison
  // alone would keep or drop it by the rank that holds it.
  if constexpr (std::is_floating_point_v<T>)
    if ((r == reduce_op::max || r == reduce_op::min) && (a != a || b != b)) return a != a ? a : b;
  switch (r) {
    case reduce_op::sum:
    case reduce_op::avg: return a + b;  // avg divides the whole sum once, in divide_into
    case reduce_op::prod: return a * b;
    case reduce_op::max: return a < b ? b : a;
    case reduce_op::min: return b < a ? b : a;
  }
  return a;
}

// Integers wrap (as the device's integer units do) instead of overflowing into UB. U is at least
// unsigned int: a narrower unsigned type would promote to int, whose product of two 16-bit values
// can overflow.
template <class T>
T apply_int(reduce_op r, T a, T b) {
  using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
  switch (r) {
    case reduce_op::sum:
    case reduce_op::avg: return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    case reduce_op::prod: return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    default: return apply(r, a, b);
  }
}

template <class T>
void reduce_plain(reduce_op r, std::byte* acc, const std::byte* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    T a, b;
    std::memcpy(&a, acc + i * sizeof(T), sizeof(T));
    std::memcpy(&b, x + i * sizeof(T), sizeof(T));
    T c;
    if constexpr (std::is_integral_v<T>) c = apply_int(r, a, b);
    else c = apply(r, a, b);
    std::memcpy(acc + i * sizeof(T), &c, sizeof(T));
  }
}

// 16-bit floats: each step computes in float and rounds back, as a 16-bit vector unit does.
template <float (*to_f)(std::uint16_t), std::uint16_t (*from_f)(float)>
void reduce_16(reduce_op r, std::byte* acc, const std::byte* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    std::uint16_t a, b;
    std::memcpy(&a, acc + i * 2, 2);
    std::memcpy(&b, x + i * 2, 2);
    const std::uint16_t c = from_f(apply(r, to_f(a), to_f(b)));
    std::memcpy(acc + i * 2, &c, 2);
  }
}

// bool as NumPy reduces it (np.add.reduce of bools is logical or): sum and max are or, prod and
// min are and; the result is 0 or 1 whatever nonzero bytes the inputs held.
void reduce_bool(reduce_op r, std::byte* acc, const std::byte* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const bool a = acc[i] != std::byte{0}, b = x[i] != std::byte{0};
    const bool any = r == reduce_op::sum || r == reduce_op::max;
    acc[i] = std::byte{static_cast<unsigned char>(any ? (a || b) : (a && b))};
  }
}

// avg's one division of the finished sum by the rank count p, in the element type: floats divide
// (16-bit ones in float, rounded once, as each step of their sum is), integers truncate toward
// zero as C++ and NCCL's integer ncclAvg do. p is divided in a 64-bit type: narrowed to an 8-bit
// element type, 256 ranks would be a zero divisor.
template <class T>
void divide_plain(std::byte* acc, std::size_t n, std::size_t p) {
  for (std::size_t i = 0; i < n; ++i) {
    T a;
    std::memcpy(&a, acc + i * sizeof(T), sizeof(T));
    if constexpr (std::is_floating_point_v<T>) a = a / static_cast<T>(p);
    else if constexpr (std::is_signed_v<T>)
      a = static_cast<T>(static_cast<std::int64_t>(a) / static_cast<std::int64_t>(p));
    else a = static_cast<T>(static_cast<std::uint64_t>(a) / static_cast<std::uint64_t>(p));
    std::memcpy(acc + i * sizeof(T), &a, sizeof(T));
  }
}

template <float (*to_f)(std::uint16_t), std::uint16_t (*from_f)(float)>
void divide_16(std::byte* acc, std::size_t n, std::size_t p) {
  for (std::size_t i = 0; i < n; ++i) {
    std::uint16_t a;
    std::memcpy(&a, acc + i * 2, 2);
    a = from_f(to_f(a) / static_cast<float>(p));
    std::memcpy(acc + i * 2, &a, 2);
  }
}

float h2f(std::uint16_t h) { return numeric::half_bits_to_float(h); }
std::uint16_t f2h(float f) { return numeric::float_to_half_bits(f); }
float b2f(std::uint16_t h) { return numeric::bfloat16_bits_to_float(h); }
std::uint16_t f2b(float f) { return numeric::float_to_bfloat16_bits(f); }

void reduce_into(dtype t, reduce_op r, std::byte* acc, const std::byte* x, std::size_t n) {
  switch (t) {
    case dtype::f32: return reduce_plain<float>(r, acc, x, n);
    case dtype::f16: return reduce_16<&h2f, &f2h>(r, acc, x, n);
    case dtype::bf16: return reduce_16<&b2f, &f2b>(r, acc, x, n);
    case dtype::i8: return reduce_plain<std::int8_t>(r, acc, x, n);
    case dtype::i32: return reduce_plain<std::int32_t>(r, acc, x, n);
    case dtype::i64: return reduce_plain<std::int64_t>(r, acc, x, n);
    case dtype::u8: return reduce_plain<std::uint8_t>(r, acc, x, n);
    case dtype::boolean: return reduce_bool(r, acc, x, n);
    case dtype::f64: return reduce_plain<double>(r, acc, x, n);
    case dtype::i16: return reduce_plain<std::int16_t>(r, acc, x, n);
    case dtype::u16: return reduce_plain<std::uint16_t>(r, acc, x, n);
    case dtype::u32: return reduce_plain<std::uint32_t>(r, acc, x, n);
    case dtype::u64: return reduce_plain<std::uint64_t>(r, acc, x, n);
  }
}

// boolean has no average (the communicator refuses it): not called for it.
void divide_into(dtype t, std::byte* acc, std::size_t n, std::size_t p) {
  switch (t) {
    case dtype::f32: return divide_plain<float>(acc, n, p);
    case dtype::f16: return divide_16<&h2f, &f2h>(acc, n, p);
    case dtype::bf16: return divide_16<&b2f, &f2b>(acc, n, p);
    case dtype::i8: return divide_plain<std::int8_t>(acc, n, p);
    case dtype::i32: return divide_plain<std::int32_t>(acc, n, p);
    case dtype::i64: return divide_plain<std::int64_t>(acc, n, p);
    case dtype::u8: return divide_plain<std::uint8_t>(acc, n, p);
    case dtype::boolean: return;
    case dtype::f64: return divide_plain<double>(acc, n, p);
    case dtype::i16: return divide_plain<std::int16_t>(acc, n, p);
    case dtype::u16: return divide_plain<std::uint16_t>(acc, n, p);
    case dtype::u32: return divide_plain<std::uint32_t>(acc, n, p);
    case dtype::u64: return divide_plain<std::uint64_t>(acc, n, p);
  }
}

}  // namespace

struct collective_engine::instance {
  std::uint64_t id = 0;
  key k{};
  std::shared_ptr<collective_comm_state> comm;
  bool p2p = false;
  std::uint64_t sequence = 0;
  std::vector<device_id> devices;            // by participant
  std::vector<std::uint32_t> ranks;          // communicator rank by participant
  std::vector<task_info*> tasks;
  std::vector<const collective_call*> calls;
  std::vector<collective_settings> settings;  // by participant: what its call was enqueued under
  std::vector<sim_time> arrival;
  std::uint32_t arrived = 0;
  std::uint32_t first = none;
  bool started = false;
  bool failed = false;
  bool mismatched = false;  // a call differs: flush() fails the operation at the end of the instant
  std::error_code error;
  std::string message;  // failed: what fail() said, for ranks that arrive later too
  // failed: the first rank's call, settings and rank, kept by value to compare a rank that
  // arrives later with (the calls above belong to tasks that fail() released, and a device
  // reset clears its rank's entries, `first` included).
  struct reference {
    collective_call call;
    collective_settings settings;
    std::uint32_t rank = 0;
  };
  std::optional<reference> ref;
  std::uint64_t timer = 0;
  bool timer_armed = false;
  bool connect_timer = false;  // the armed timer is connect_timeout (else exec_timeout)
  picoseconds timer_span{0};
  collective_op op = collective_op::all_reduce;
  collective_algorithm algo = collective_algorithm::ring;
  double bytes = 0;
  std::size_t chunks = 1, chunk = 0, phase = 0;
  std::vector<coll_phase> phases;
  std::uint32_t outstanding = 0;
  sim_time start{};
};

struct collective_engine::carrier {
  task_info info;
  instance* in = nullptr;
  std::uint32_t src = 0, dst = 0;
  std::uint32_t step = 0;
  bool reduction = false;  // a local reduction on the AI cores, not a transfer
};

collective_engine::collective_engine(device_model& model, const preset& p, bool functional)
    : model_(model), preset_(p), functional_(functional), gamma_(reduce_seconds_per_byte(p)) {}

collective_engine::~collective_engine() = default;

collective_engine::carrier* collective_engine::new_carrier() {
  if (free_carriers_.empty()) {
    carriers_.push_back(std::make_unique<carrier>());
    return carriers_.back().get();
  }
  carrier* c = free_carriers_.back();
  free_carriers_.pop_back();
  return c;
}

void collective_engine::submit(task_info& t) {
  const collective_desc* d = t.collective;
  if (!d || !d->comm || d->calls.empty() || d->sequence.size() != d->calls.size() ||
      d->settings.size() != d->calls.size() || d->rank >= d->comm->size()) {
    tasks_[&t] = {1, {}};
    release_task(t, make_error_code(errc::invalid_argument));
    return;
  }
  auto& track = tasks_[&t];
  track.pending = static_cast<std::uint32_t>(d->calls.size());
  if (d->comm->aborted) {
    track.pending = 1;
    if (!d->comm->abort_reason.empty()) note_failure(t, d->comm->abort_reason);
    release_task(t, make_error_code(errc::operation_aborted));
    return;
  }
  for (std::uint32_t i = 0; i < d->calls.size(); ++i) {
    const collective_call& c = d->calls[i];
    const std::uint64_t seq = d->sequence[i];
    const auto peer = static_cast<std::uint32_t>(c.root);
    if (c.op == collective_op::send) arrive(key{d->comm->id, d->rank, peer, seq}, t, i, 0);
    else if (c.op == collective_op::recv) arrive(key{d->comm->id, peer, d->rank, seq}, t, i, 1);
    else arrive(key{d->comm->id, none, none, seq}, t, i, d->rank);
  }
}

void collective_engine::arrive(const key& k, task_info& t, std::uint32_t call_index, std::uint32_t participant) {
  const collective_desc& d = *t.collective;
  auto [it, inserted] = instances_.try_emplace(k);
  if (inserted) {
    auto in = std::make_unique<instance>();
    in->id = next_id_++;
    in->k = k;
    in->comm = d.comm;
    in->p2p = std::get<1>(k) != none;
    in->sequence = std::get<3>(k);
    if (in->p2p) {
      in->ranks = {std::get<1>(k), std::get<2>(k)};
      in->devices = {d.comm->devices[in->ranks[0]], d.comm->devices[in->ranks[1]]};
    } else {
      in->devices = d.comm->devices;
      in->ranks.resize(in->devices.size());
      for (std::uint32_t r = 0; r < in->ranks.size(); ++r) in->ranks[r] = r;
    }
    const std::size_t n = in->devices.size();
    in->tasks.assign(n, nullptr);
    in->calls.assign(n, nullptr);
    in->settings.assign(n, collective_settings{});
    in->arrival.assign(n, sim_time{});
    by_id_[in->id] = in.get();
    it->second = std::move(in);
  }
  instance& in = *it->second;
  const collective_call& call = t.collective->calls[call_index];
  const sim_time now = host_->now();
  if (in.tasks[participant]) {
    // The same rank twice under one key cannot come from the communicator's numbering.
    release_task(t, make_error_code(errc::collective_mismatch));
    return;
  }
  in.tasks[participant] = &t;
  in.calls[participant] = &call;
  in.settings[participant] = t.collective->settings[call_index];
  in.arrival[participant] = now;
  ++in.arrived;
  if (in.failed) {
    // A rank that arrives after the operation failed (its stream was busy longer) was not in
    // the comparison: if its own call differs from the one the others joined, that is its
    // failure, named, rather than the earlier report that could not name it.
    if (in.ref &&
        (!same_call(in.ref->call, call) || !same_settings(call, in.ref->settings, in.settings[participant]))) {
      const std::string message = late_mismatch_message(in, participant);
      collective_comm_state& c = *in.comm;
      if (!c.message.empty()) c.message += "\n";
      c.message += message;
      note_failure(t, message);
      release_task(t, make_error_code(errc::collective_mismatch));
    } else {
      note_failure(t, in.message);
      release_task(t, in.error);
    }
    if (in.arrived == in.tasks.size() && in.outstanding == 0) {
      by_id_.erase(in.id);
      instances_.erase(it);
    }
    return;
  }
  if (in.first == none) {
    in.first = participant;
    // Until an operation has started, the communicator's links are not set up: the first
    // rendezvous is also bounded by the connect timeout (HCCL links lazily, at the first
    // operation), and the earlier timer is the one that fires.
    std::optional<picoseconds> span = in.comm->exec_timeout;
    const std::optional<picoseconds> connect = in.comm->connected ? std::nullopt : in.comm->connect_timeout;
    in.connect_timer = connect && (!span || *connect <= *span);
    if (in.connect_timer) span = connect;
    // A deadline past the end of virtual time never fires (npurt/time.hpp); now + span would
    // wrap around to a time already passed and fire at once.
    const sim_time deadline = span ? later(now, *span) : end_of_time;
    if (deadline != end_of_time && in.arrived < in.tasks.size()) {
      in.timer_span = *span;
      in.timer = host_->call_at_cancellable(deadline, &collective_engine::on_timeout, this, in.id);
      in.timer_armed = true;
    }
  } else if (in.mismatched) {
    return;  // flush(), at the end of this instant, compares this call too
  } else if (!same_call(*in.calls[in.first], call) ||
             !same_settings(call, in.settings[in.first], in.settings[participant])) {
    // Ranks that reach the call in this same instant are compared before the failure is
    // reported (at the end of the instant, when the host calls flush()), so that the message
    // names every rank that differs, not only the first.
    in.mismatched = true;
    if (!host_->calls_flush()) {
      fail_mismatch(in.id);
      return;
    }
    if (mismatched_.empty()) {
      model_.request_collective_flush();
      host_->request_flush();
    }
    mismatched_.push_back(in.id);
    return;
  }
  if (in.arrived == in.tasks.size()) {
    if (in.timer_armed) host_->cancel_timer(in.timer);
    in.timer_armed = false;
    host_->call_at(now, &collective_engine::on_begin, this, in.id);
  }
}

void collective_engine::fail(instance& in, std::error_code ec, const std::string& message) {
  in.failed = true;
  in.error = ec;
  in.message = message;
  if (in.first != none && in.calls[in.first] && in.arrived < in.tasks.size())
    in.ref = instance::reference{*in.calls[in.first], in.settings[in.first], in.ranks[in.first]};
  if (in.timer_armed) host_->cancel_timer(in.timer);
  in.timer_armed = false;
  collective_comm_state& c = *in.comm;
  if (!c.async_error) c.async_error = ec;
  if (!c.message.empty()) c.message += "\n";
  c.message += message;
  for (task_info* t : in.tasks)
    if (t) {
      note_failure(*t, message);
      release_task(*t, ec);
    }
  if (c.keep_records) {
    collective_record r;
    r.sequence = in.sequence;
    r.op = in.calls[in.first] ? in.calls[in.first]->op : collective_op::all_reduce;
    r.arrival = in.arrival;
    r.start = r.end = host_->now();
    r.error = ec;
    c.records.push_back(std::move(r));
  }
}

std::string collective_engine::mismatch_message(const instance& in) {
  // The first 8 ranks that differ from the first to arrive are shown: enough to see the
  // pattern (one rank, every odd rank, ...) without a line per rank of a large communicator.
  constexpr std::size_t shown = 8;
  const collective_call& ref = *in.calls[in.first];
  const collective_settings& ref_settings = in.settings[in.first];
  std::size_t differ = 0;
  bool settings_only = false;
  std::string ranks;
  for (std::size_t i = 0; i < in.calls.size(); ++i) {
    if (i == in.first || !in.calls[i]) continue;
    const collective_call& c = *in.calls[i];
    const bool calls_agree = same_call(ref, c);
    if (calls_agree && same_settings(c, ref_settings, in.settings[i])) continue;
    if (differ++ >= shown) continue;
    if (!ranks.empty()) ranks += ", ";
    ranks += "rank " + std::to_string(in.ranks[i]);
    if (calls_agree) {
      settings_only = true;
      ranks += " with " + describe_settings(in.settings[i]);
    } else {
      ranks += " called " + describe_call(c) + " (they differ in " + differing_fields(ref, c) + ")";
    }
  }
  std::ostringstream os;
  os << "collective mismatch in communicator '" << in.comm->name << "' (id " << in.comm->id << "), "
     << (in.p2p ? "point-to-point call #" : "call #") << in.sequence << ": rank " << in.ranks[in.first] << " called "
     << describe_call(ref);
  if (settings_only) os << " with " << describe_settings(ref_settings);
  os << " but " << ranks;
  if (differ > shown) os << ", and " << differ - shown << " more ranks differ";
  // The ranks not compared yet: one that arrives later fails on its own, naming its call (see
  // late_mismatch_message), and this says why this report could not name it.
  bool missing = false;
  for (std::size_t i = 0; i < in.calls.size(); ++i)
    if (!in.calls[i]) {
      os << (missing ? " " : "; rank(s) ") << in.ranks[i];
      missing = true;
    }
  if (missing) os << " had not arrived";
  return os.str();
}

std::string collective_engine::late_mismatch_message(const instance& in, std::uint32_t participant) {
  const collective_call& ref = in.ref->call;
  const collective_call& c = *in.calls[participant];
  const bool calls_agree = same_call(ref, c);
  std::ostringstream os;
  os << "collective mismatch in communicator '" << in.comm->name << "' (id " << in.comm->id << "), "
     << (in.p2p ? "point-to-point call #" : "call #") << in.sequence << ": rank " << in.ranks[participant]
     << ", arriving after the call had failed, called " << describe_call(c);
  if (calls_agree) os << " with " << describe_settings(in.settings[participant]);
  os << " but rank " << in.ref->rank << " called " << describe_call(ref);
  if (calls_agree) os << " with " << describe_settings(in.ref->settings);
  else os << " (they differ in " << differing_fields(ref, c) << ")";
  os << "; the call had failed with: " << in.message;
  return os.str();
}

void collective_engine::fail_mismatch(std::uint64_t id) {
  auto it = by_id_.find(id);
  if (it == by_id_.end() || it->second->failed) return;  // aborted in the meantime
  instance& in = *it->second;
  fail(in, make_error_code(errc::collective_mismatch), mismatch_message(in));
  if (in.arrived == in.tasks.size() && in.outstanding == 0) {
    const key k = in.k;
    by_id_.erase(it);
    instances_.erase(k);
  }
}

void collective_engine::flush() {
  std::vector<std::uint64_t> ids;
  ids.swap(mismatched_);
  for (const std::uint64_t id : ids) fail_mismatch(id);
}

void collective_engine::on_timeout(void* self, std::uint64_t id) {
  auto* e = static_cast<collective_engine*>(self);
  auto it = e->by_id_.find(id);
  if (it == e->by_id_.end()) return;
  instance& in = *it->second;
  if (in.started || in.failed || in.mismatched) return;
  in.timer_armed = false;
  std::ostringstream os;
  os << (in.connect_timer ? "HCCL connect timeout: timer connect_timeout ("
                          : "HCCL execution timeout: timer exec_timeout (")
     << to_ms(in.timer_span) / 1000.0 << " s) fired in "
     << (in.calls[in.first] ? describe_call(*in.calls[in.first]) : std::string("?")) << " #" << in.sequence
     << " of communicator '" << in.comm->name << "' (id " << in.comm->id << "): rank(s)";
  for (std::size_t i = 0; i < in.tasks.size(); ++i)
    if (!in.tasks[i]) os << " " << in.ranks[i];
  os << " had not arrived";
  e->fail(in, make_error_code(errc::task_timeout), os.str());
}

void collective_engine::on_begin(void* self, std::uint64_t id) {
  auto* e = static_cast<collective_engine*>(self);
  auto it = e->by_id_.find(id);
  if (it == e->by_id_.end() || it->second->failed || it->second->started) return;
  e->begin(*it->second);
}

void collective_engine::begin(instance& in) {
  in.started = true;
  in.start = host_->now();
  in.comm->connected = true;
  const collective_call& c = *in.calls[in.first];
  in.op = c.op;
  const std::size_t p = in.devices.size();
  // n: the vector the formulas are written in.
  std::vector<std::vector<double>> blocks;
  std::size_t n = 0;
  switch (c.op) {
    case collective_op::all_gather:
    case collective_op::reduce_scatter:
    case collective_op::all_to_all: n = checked_bytes(c.count, c.type, p); break;
    case collective_op::barrier: n = 8; break;
    case collective_op::all_to_allv: {
      blocks.assign(p, std::vector<double>(p, 0.0));
      for (std::size_t s = 0; s < p; ++s)
        for (std::size_t d = 0; d < p && d < in.calls[s]->send_counts.size(); ++d) {
          blocks[s][d] = static_cast<double>(checked_bytes(in.calls[s]->send_counts[d], c.type));
          n = std::max(n, static_cast<std::size_t>(blocks[s][d]) * p);
        }
      break;
    }
    default: n = checked_bytes(c.count, c.type); break;
  }
  in.bytes = static_cast<double>(n);
  if (c.op == collective_op::all_to_allv)
    for (std::size_t s = 0; s < p; ++s)
      for (std::size_t d = 0; d < p; ++d)
        if (in.calls[s]->send_counts[d] != in.calls[d]->recv_counts[s]) {
          std::ostringstream os;
          os << "collective mismatch in communicator '" << in.comm->name << "', all_to_allv #" << in.sequence
             << ": rank " << s << " sends " << in.calls[s]->send_counts[d] << " elements to rank " << d
             << ", which expects " << in.calls[d]->recv_counts[s];
          in.started = false;
          fail(in, make_error_code(errc::collective_mismatch), os.str());
          by_id_.erase(in.id);
          instances_.erase(in.k);
          return;
        }
  // What the calls were enqueued under, not the communicator's settings now.
  const collective_settings& settings = in.settings[in.first];
  collective_algorithm a = settings.algorithm;
  if (in.p2p) a = collective_algorithm::ring;
  if (a == collective_algorithm::automatic) a = choose_algorithm(preset_, in.devices, c.op, n);
  in.algo = a;
  const std::size_t buf = std::max<std::size_t>(settings.buffer_bytes, 1);
  in.chunks = c.op == collective_op::barrier ? 1 : std::max<std::size_t>(1, (n + buf - 1) / buf);
  if (!blocks.empty())
    for (auto& row : blocks)
      for (auto& x : row) x /= static_cast<double>(in.chunks);
  const auto root = in.p2p ? 0u : static_cast<std::uint32_t>(std::max(0, c.root));
  in.phases = plan_phases(preset_, c.op, a, in.devices, in.bytes / static_cast<double>(in.chunks), root,
                          blocks.empty() ? nullptr : &blocks);
  // The ranks that came first waited for the last one: an idle gap whose cause is a peer.
  if (observer* o = host_->tracer()) {
    std::uint32_t last = 0;
    for (std::uint32_t i = 0; i < p; ++i)
      if (in.arrival[i] > in.arrival[last]) last = i;
    for (std::uint32_t i = 0; i < p; ++i)
      if (in.arrival[i] < in.start)
        o->on_collective_step(
            {in.tasks[i]->id, to_string(c.op), "wait", in.devices[i], in.devices[last], 0, 0, in.arrival[i], in.start});
  }
  run_phase(in);
}

void collective_engine::run_phase(instance& in) {
  for (;;) {
    if (in.phase == in.phases.size()) {
      in.phase = 0;
      if (++in.chunk >= in.chunks) return finish(in);
      if (in.phases.empty()) continue;
    }
    const coll_phase& ph = in.phases[in.phase];
    if (ph.transfers.empty()) {
      if (ph.reduce_bytes > 0) return phase_done(in);
      ++in.phase;
      continue;
    }
    in.outstanding = static_cast<std::uint32_t>(ph.transfers.size());
    const std::string_view name = to_string(in.op);
    const auto step = static_cast<std::uint32_t>(in.chunk * in.phases.size() + in.phase);
    for (const coll_transfer& x : ph.transfers) {
      carrier* c = new_carrier();
      c->in = &in;
      c->src = x.src;
      c->dst = x.dst;
      c->step = step;
      c->reduction = false;
      task_info& t = c->info;
      t = task_info{};
      t.id = in.tasks[x.src]->id;
      t.device = in.devices[x.src];
      t.kind = task_kind::collective;
      t.engine = engine_kind::copy_d2d;
      t.name = name;
      t.copy.kind = memcpy_kind::device_to_device;
      t.copy.src_device = in.devices[x.src];
      t.copy.dst_device = in.devices[x.dst];
      t.copy.bytes = static_cast<std::size_t>(std::llround(x.bytes));
      // A throttled end (task_info::slowdown) drives its side of the transfer that much slower,
      // so the transfer holds its link for the stretched time and the phase waits for it.
      t.slowdown = std::max(in.tasks[x.src]->slowdown, in.tasks[x.dst]->slowdown);
      t.backend_data = c;
      model_.start_transfer(t);
    }
    return;
  }
}

void collective_engine::on_transfer(task_info& t, std::error_code ec) {
  auto* c = static_cast<carrier*>(t.backend_data);
  instance& in = *c->in;
  if (c->reduction) {
    if (observer* o = host_->tracer())
      o->on_collective_step({t.id, to_string(in.op), "reduce", t.device, t.device, c->step, 0, t.start, t.end});
    free_carriers_.push_back(c);
    if (--in.outstanding != 0) return;
    if (in.failed) return phase_done(in);
    ++in.phase;
    return run_phase(in);
  }
  if (observer* o = host_->tracer())
    o->on_collective_step({t.id, to_string(in.op), to_string(in.algo), t.copy.src_device, t.copy.dst_device, c->step,
                           t.copy.bytes, t.start, t.end});
  free_carriers_.push_back(c);
  if (ec && !in.failed) {
    std::ostringstream os;
    os << "link failure in " << to_string(in.op) << " #" << in.sequence << " of communicator '" << in.comm->name
       << "' between devices " << t.copy.src_device << " and " << t.copy.dst_device;
    fail(in, ec, os.str());
  }
  if (--in.outstanding != 0) return;
  phase_done(in);
}

void collective_engine::phase_done(instance& in) {
  if (in.failed) {
    if (in.arrived == in.tasks.size()) {
      by_id_.erase(in.id);
      instances_.erase(in.k);
    }
    return;
  }
  const coll_phase& ph = in.phases[in.phase];
  if (ph.reduce_bytes > 0) {
    // Every rank that received data reduces it on its vector cores, queued with its kernels.
    const auto ps = static_cast<std::int64_t>(std::ceil(ph.reduce_bytes * gamma_ * 1e12));
    std::vector<char> receives(in.devices.size(), 0);
    for (const coll_transfer& x : ph.transfers) receives[x.dst] = 1;
    if (ph.transfers.empty()) std::fill(receives.begin(), receives.end(), 1);
    in.outstanding = static_cast<std::uint32_t>(std::count(receives.begin(), receives.end(), 1));
    const auto step = static_cast<std::uint32_t>(in.chunk * in.phases.size() + in.phase);
    for (std::uint32_t r = 0; r < receives.size(); ++r) {
      if (!receives[r]) continue;
      carrier* c = new_carrier();
      c->in = &in;
      c->src = c->dst = r;
      c->step = step;
      c->reduction = true;
      task_info& t = c->info;
      t = task_info{};
      t.id = in.tasks[r]->id;
      t.priority = in.tasks[r]->priority;
      t.device = in.devices[r];
      t.kind = task_kind::collective;
      t.engine = engine_kind::ai_core;
      t.name = "collective_reduce";
      t.fixed.duration = picoseconds{ps};
      t.slowdown = in.tasks[r]->slowdown;  // holds the throttled device's vector cores longer
      t.backend_data = c;
      model_.start_reduction(t);
    }
    return;
  }
  ++in.phase;
  run_phase(in);
}

void collective_engine::finish(instance& in) {
  std::error_code ec;
  if (functional_) compute(in);
  collective_comm_state& c = *in.comm;
  if (c.keep_records) {
    collective_record r;
    r.sequence = in.sequence;
    r.op = in.op;
    r.algorithm = in.algo;
    r.bytes = static_cast<std::size_t>(in.bytes);
    r.arrival = in.arrival;
    r.start = in.start;
    r.end = host_->now();
    r.error = in.error;
    c.records.push_back(std::move(r));
  }
  for (task_info* t : in.tasks) {
    if (in.error && !in.message.empty()) note_failure(*t, in.message);
    release_task(*t, in.error);
  }
  by_id_.erase(in.id);
  instances_.erase(in.k);
}

void collective_engine::note_failure(task_info& t, const std::string& message) {
  // Only the communicator's async_error would say what went wrong otherwise: a synchronize that
  // reports this task's failure reads it from the rank's call.
  if (t.collective && t.collective->failure.empty()) t.collective->failure = message;
}

void collective_engine::release_task(task_info& t, std::error_code ec) {
  auto it = tasks_.find(&t);
  if (it == tasks_.end()) return;
  if (ec && !it->second.error) it->second.error = ec;
  if (--it->second.pending != 0) return;
  const std::error_code err = it->second.error;
  tasks_.erase(it);
  done_.push_back({&t, err});
  if (done_.size() == 1) host_->call_at(host_->now(), &collective_engine::on_complete, this, 0);
}

void collective_engine::on_complete(void* self, std::uint64_t) {
  auto* e = static_cast<collective_engine*>(self);
  std::vector<std::pair<task_info*, std::error_code>> batch;
  batch.swap(e->done_);
  for (auto& [t, ec] : batch) {
    t->end = e->host_->now();
    e->host_->complete(*t, ec);
  }
}

void collective_engine::abort(std::uint64_t comm) {
  std::vector<instance*> hit;
  for (auto& [k, in] : instances_)
    if (std::get<0>(k) == comm && !in->failed) hit.push_back(in.get());
  for (instance* in : hit) {
    std::ostringstream os;
    // in->op is only set once the operation starts: before that, the first arrival's call says
    // which operation it is.
    os << "communicator '" << in->comm->name << "' (id " << comm << ") aborted with "
       << (in->first != none && in->calls[in->first] ? describe_call(*in->calls[in->first])
                                                     : std::string(to_string(in->op)))
       << " #" << in->sequence << " pending";
    if (!in->comm->abort_reason.empty()) os << " (" << in->comm->abort_reason << ")";
    fail(*in, make_error_code(errc::operation_aborted), os.str());
    if (in->arrived == in->tasks.size() && in->outstanding == 0) {
      by_id_.erase(in->id);
      instances_.erase(in->k);
    }
  }
}

void collective_engine::abort_device(device_id dev) {
  std::erase_if(tasks_, [dev](const auto& kv) { return kv.first->device == dev; });
  std::erase_if(done_, [dev](const auto& p) { return p.first->device == dev; });
  std::vector<instance*> hit;
  for (auto& [k, in] : instances_)
    if (!in->failed && std::find(in->devices.begin(), in->devices.end(), dev) != in->devices.end())
      hit.push_back(in.get());
  for (instance* in : hit) {
    std::ostringstream os;
    os << "device " << dev << " was reset with "
       << (in->first != none && in->calls[in->first] ? describe_call(*in->calls[in->first])
                                                     : std::string(to_string(in->op)))
       << " #" << in->sequence << " of communicator '" << in->comm->name << "' (id " << in->comm->id << ") pending";
    fail(*in, make_error_code(errc::operation_aborted), os.str());
    // The reset device's records are about to be freed: nothing may point at them. Its carriers
    // are dropped with its jobs, so `outstanding` never drains and a started instance stays
    // (its other carriers still point at it).
    for (std::size_t i = 0; i < in->devices.size(); ++i)
      if (in->devices[i] == dev) {
        in->tasks[i] = nullptr;
        in->calls[i] = nullptr;
      }
    if (in->first != none && !in->calls[in->first]) in->first = none;
    if (in->arrived == in->tasks.size() && in->outstanding == 0) {
      by_id_.erase(in->id);
      instances_.erase(in->k);
    }
  }
}

std::string collective_engine::describe() const {
  std::ostringstream os;
  bool first = true;
  for (const auto& [k, in] : instances_) {
    if (in->started || in->failed || in->first == none) continue;
    os << (first ? "" : "; ") << describe_call(*in->calls[in->first]) << " #" << in->sequence << " of communicator '"
       << in->comm->name << "' (id " << in->comm->id << ") waits for rank(s)";
    for (std::size_t i = 0; i < in->tasks.size(); ++i)
      if (!in->tasks[i]) os << " " << in->ranks[i];
    first = false;
  }
  return os.str();
}

void collective_engine::compute(instance& in) {
  const std::size_t p = in.devices.size();
  const collective_call& c0 = *in.calls[in.first];
  const std::size_t es = size_of(c0.type);
  auto dev = [&](std::size_t i, const void* ptr, std::size_t bytes) -> std::byte* {
    if (bytes == 0) return nullptr;
    return host_->translate(in.devices[i], ptr, bytes);
  };
  // Every rank fails with the first unusable buffer found: the message says whose it was.
  auto fail_data = [&](std::size_t i, const char* which, const void* ptr) {
    if (in.error) return;
    in.error = make_error_code(errc::invalid_pointer);
    if (!in.comm->async_error) in.comm->async_error = in.error;
    std::ostringstream os;
    os << "invalid pointer in " << describe_call(c0) << " #" << in.sequence << " of communicator '" << in.comm->name
       << "' (id " << in.comm->id << "): rank " << in.ranks[i] << "'s " << which << " buffer " << ptr
       << " is not live memory of device " << in.devices[i] << " (freed after the call?)";
    in.message = os.str();
    if (!in.comm->message.empty()) in.comm->message += "\n";
    in.comm->message += in.message;
  };
  // Inputs are read in full before any output is written: in-place calls are safe. An input
  // that cannot be read fails the collective on every rank, and no output is written, so that
  // a freed buffer never passes for one that held nothing.
  bool unreadable = false;
  auto input = [&](std::size_t i, std::size_t bytes, std::size_t offset = 0) -> std::vector<std::byte> {
    std::vector<std::byte> v;
    // An empty block's offset may lie anywhere (all_to_allv does not check it): no pointer is
    // formed from it.
    if (bytes == 0) return v;
    const auto* base = static_cast<const std::byte*>(in.calls[i]->send);
    if (const std::byte* src = dev(i, base + offset, bytes)) v.assign(src, src + bytes);
    else {
      unreadable = true;
      fail_data(i, "send", in.calls[i]->send);
    }
    return v;
  };
  auto output = [&](std::size_t i, const std::vector<std::byte>& v, std::size_t offset = 0) {
    if (v.empty()) return;
    std::byte* dst = dev(i, static_cast<std::byte*>(in.calls[i]->recv) + offset, v.size());
    if (!dst) return fail_data(i, "recv", in.calls[i]->recv);
    std::memcpy(dst, v.data(), v.size());
  };
  auto reduced = [&](std::size_t bytes, std::size_t offset, const std::vector<std::size_t>& order) {
    std::vector<std::byte> acc = input(order[0], bytes, offset);
    if (acc.size() != bytes) return std::vector<std::byte>{};
    for (std::size_t k = 1; k < order.size(); ++k) {
      const std::vector<std::byte> x = input(order[k], bytes, offset);
      if (x.size() != bytes) return std::vector<std::byte>{};
      reduce_into(c0.type, c0.red, acc.data(), x.data(), bytes / es);
    }
    if (c0.red == reduce_op::avg) divide_into(c0.type, acc.data(), bytes / es, order.size());
    // A bool reduction yields 0 or 1 whatever nonzero bytes it read, one rank's included.
    if (c0.type == dtype::boolean && order.size() == 1)
      for (std::byte& b : acc) b = std::byte{b != std::byte{0}};
    return acc;
  };
  // The communicator rejects unknown enumerators at the call; a backend driven another way must
  // not turn them into some other reduction or a silent no-op.
  auto fail_argument = [&](errc e = errc::invalid_argument) {
    in.error = make_error_code(e);
    if (!in.comm->async_error) in.comm->async_error = in.error;
  };
  const bool reduces =
      in.op == collective_op::all_reduce || in.op == collective_op::reduce || in.op == collective_op::reduce_scatter;
  if (reduces && c0.red > reduce_op::avg) return fail_argument();
  if (reduces && c0.red == reduce_op::avg && c0.type == dtype::boolean) return fail_argument(errc::invalid_dtype);
  std::vector<std::size_t> order(p);
  for (std::size_t i = 0; i < p; ++i) order[i] = i;
  const std::size_t n = c0.count * es;
  switch (in.op) {
    case collective_op::all_reduce: {
      const auto r = reduced(n, 0, order);
      if (unreadable) return;
      for (std::size_t i = 0; i < p; ++i) output(i, r);
      break;
    }
    case collective_op::reduce: {
      const auto r = reduced(n, 0, order);
      if (unreadable) return;
      output(static_cast<std::size_t>(c0.root), r);
      break;
    }
    case collective_op::reduce_scatter:
      for (std::size_t j = 0; j < p; ++j) {
        const auto r = reduced(n, j * n, order);
        if (unreadable) return;
        output(j, r);
      }
      break;
    case collective_op::all_gather: {
      std::vector<std::vector<std::byte>> parts(p);
      for (std::size_t j = 0; j < p; ++j) parts[j] = input(j, n);
      if (unreadable) return;
      for (std::size_t i = 0; i < p; ++i)
        for (std::size_t j = 0; j < p; ++j) output(i, parts[j], j * n);
      break;
    }
    case collective_op::broadcast: {
      const auto root = static_cast<std::size_t>(c0.root);
      const auto v = input(root, n);
      if (unreadable) return;
      // The root's own recv too: a call with send != recv (ncclBroadcast's form) expects the
      // root's result there as on every other rank.
      for (std::size_t i = 0; i < p; ++i)
        if (i != root || in.calls[i]->recv != in.calls[i]->send) output(i, v);
      break;
    }
    case collective_op::all_to_all: {
      std::vector<std::vector<std::byte>> blocks(p * p);
      for (std::size_t s = 0; s < p; ++s)
        for (std::size_t d = 0; d < p; ++d) blocks[s * p + d] = input(s, n, d * n);
      if (unreadable) return;
      for (std::size_t s = 0; s < p; ++s)
        for (std::size_t d = 0; d < p; ++d) output(d, blocks[s * p + d], s * n);
      break;
    }
    case collective_op::all_to_allv: {
      std::vector<std::vector<std::byte>> blocks(p * p);
      for (std::size_t s = 0; s < p; ++s)
        for (std::size_t d = 0; d < p; ++d)
          blocks[s * p + d] = input(s, in.calls[s]->send_counts[d] * es, in.calls[s]->send_displs[d] * es);
      if (unreadable) return;
      for (std::size_t s = 0; s < p; ++s)
        for (std::size_t d = 0; d < p; ++d) output(d, blocks[s * p + d], in.calls[d]->recv_displs[s] * es);
      break;
    }
    case collective_op::send:
    case collective_op::recv: {
      const auto v = input(0, n);
      if (unreadable) return;
      output(1, v);
      break;
    }
    case collective_op::barrier: break;
    default: return fail_argument();
  }
}

}  // namespace npurt::sim

// Sessions: device memory, compile, run, the seed's knobs (see graph/session.hpp).
#include "compiled.hpp"
#include "lower.hpp"
#include "recompute.hpp"

#include <npurt/observer.hpp>

#include <algorithm>
#include <atomic>
#include <exception>
#include <map>
#include <set>

namespace npurt {

std::shared_ptr<compiled_graph::impl> build_plan(graph& src, const compile_options& o, precision prec,
                                                 const schedule_config& sc, const memory_config& mc, int level_default,
                                                 std::string_view call);

namespace {

std::atomic<std::uint64_t> next_session_id{1};

constexpr double mb = 1024.0 * 1024.0;

}  // namespace

compiled_graph::impl::~impl() {
  if (owner)
    for (auto [ptr, bytes] : held) owner->give_back(ptr, bytes);
}

const compile_report& compiled_graph::report() const {
  if (!p_)
    throw_error(make_error_code(errc::invalid_argument),
                "npurt::compiled_graph::report: the compiled graph is empty (not from compile())");
  return p_->rep;
}

std::uint32_t compiled_graph::final_stream() const { return p_ ? p_->final_stream : 0; }

std::vector<std::pair<std::string, std::uint32_t>> compiled_graph::schedule_order() const {
  std::vector<std::pair<std::string, std::uint32_t>> r;
  if (p_)
    for (const auto& s : p_->steps) r.emplace_back(s.n->name, s.stream);
  return r;
}

session::session(npurt::system& sys, const session_config& cfg)
    : sys_(&sys),
      dev_(&sys.device(cfg.device_id)),
      rt_(&detail::runtime_of(sys)),
      cfg_(cfg),
      id_(next_session_id.fetch_add(1)) {
  if (static_cast<unsigned>(cfg.precision) > static_cast<unsigned>(precision::mixed))
    throw_error(
        make_error_code(errc::invalid_argument),
        "npurt::session: precision " + std::to_string(static_cast<unsigned>(cfg.precision)) + " is not a precision");
  if (cfg.precision == precision::bf16 && !dev_->properties().bf16_supported)
    throw_error(make_error_code(errc::not_supported),
                "npurt::session: " + dev_->properties().name + " has no bf16 (use fp16 or mixed)");
  (void)stream(0);
}

session::~session() {
  if (!rt_) {
    // The system went first, and its device memory with it: nothing to give back or wait for.
    for (auto& w : compiled_)
      if (auto c = w.lock()) {
        c->held.clear();
        c->owner = nullptr;
      }
    return;
  }
  for (auto& s : streams_) {
    std::error_code ec;
    if (s) s->synchronize(npurt::no_timeout, ec);
  }
  if (comm_buffer_) give_back(comm_buffer_, comm_bytes_);
  // Compiled graphs that outlive the session lose their memory with it (running one is an error).
  for (auto& w : compiled_)
    if (auto c = w.lock()) {
      for (auto [ptr, bytes] : c->held) give_back(ptr, bytes);
      c->held.clear();
      c->owner = nullptr;
    }
  drain();
  if (pool_ && detail::runtime_of(*sys_).in_run()) {
    // Inside run the drain could not wait: the work still queued reads blocks of the pool, so
    // the pool (and the device memory behind it) goes when that work has run, from a callback
    // that stream 0 runs after every other stream's queued work. The streams themselves run
    // their queued work and go after it, as any stream destroyed inside run.
    std::shared_ptr<npurt::mem_pool> keep(std::move(pool_));
    std::error_code ec;
    npurt::stream* first = streams_.empty() ? nullptr : streams_.front().get();
    if (first && first->valid()) {
      for (std::size_t i = 1; i < streams_.size(); ++i)
        if (streams_[i] && streams_[i]->valid()) {
          const event done = streams_[i]->launch_callback([] {}, ec);
          if (!ec) first->wait(done, ec);
        }
      first->launch_callback([keep]() mutable { keep.reset(); }, ec);
    }
    return;
  }
  pool_.reset();
}

void session::check_compiled(const compiled_graph& cg, std::string_view call) const {
  check_alive(call);
  if (!cg.valid())
    throw_error(make_error_code(errc::invalid_argument),
                std::string(call) + ": the compiled graph is empty (not from compile())");
  if (cg.get().owner != this)
    throw_error(make_error_code(errc::invalid_argument),
                std::string(call) + ": the compiled graph belongs to another session");
}

void session::check_alive(std::string_view what) const {
  if (!rt_)
    throw_error(make_error_code(errc::invalid_argument), std::string(what) + ": the session's system was destroyed");
  // A device reset invalidates the session's streams and frees its memory: nothing it holds is
  // left to run on. Said here, rather than by whichever internal stream a call touches first.
  if (!streams_.empty() && !streams_.front()->valid())
    throw_error(make_error_code(errc::invalid_stream),
                std::string(what) + ": device " + std::to_string(dev_->id()) +
                    " was reset after the session was made; its streams and memory are gone: make a new session");
  // A device lost to a fatal fault takes no work until it is reset (docs/faults.md): said here,
  // naming the call and what to do, rather than by the first internal copy or allocation.
  if (rt_->backend().status(dev_->id()) == device_status::lost)
    throw_error_on(dev_->id(), make_error_code(errc::device_lost),
                   std::string(what) + ": device " + std::to_string(dev_->id()) +
                       " is lost (a fatal fault); reset it (device::reset) and make a new session");
}

void session::check_can_block(std::string_view what) const {
  check_alive(what);
  const detail::runtime& rt = *rt_;
  if (rt.in_run())
    throw_error(make_error_code(errc::not_supported),
                std::string(what) + " blocks, which is not possible inside system::run (in a coroutine or handler); " +
                    "use async_run");
  if (const std::error_code ec = rt.check_thread()) throw_error(ec, std::string(what) + " blocks");
}

void session::drain() noexcept {
  for (auto& s : streams_) {
    std::error_code ec;
    if (s) s->synchronize(npurt::no_timeout, ec);
  }
}

npurt::mem_pool& session::pool() {
  check_alive("npurt::session::pool");
  if (!pool_) {
    mem_pool_options o;
    o.strategy = alloc_;
    o.pool_size_limit = mem_.pool_size;
    pool_ = std::make_unique<npurt::mem_pool>(detail::runtime_of(*sys_), dev_->id(), o);
  }
  return *pool_;
}

void session::set_allocation_strategy(allocation_strategy s) {
  alloc_ = s;
  rebuild_pool_if_idle();
}

void session::rebuild_pool_if_idle() {
  if (!pool_ || held_ != 0) return;
  if (pool_->options().strategy == alloc_ && pool_->options().pool_size_limit == mem_.pool_size) return;
  drain();  // nothing the old pool handed out may still be in use on a stream
  pool_.reset();
}

namespace {
void check_stream_index(const char* what, std::size_t i) {
  if (i >= session::max_streams)
    throw_error(make_error_code(errc::invalid_argument), std::string(what) + ": index " + std::to_string(i) +
                                                             "; a session has at most " +
                                                             std::to_string(session::max_streams) + " such streams");
}
}  // namespace

npurt::stream& session::stream(std::size_t i) {
  check_stream_index("npurt::session::stream", i);
  while (compute_.size() <= i) {
    compute_.push_back(streams_.size());
    streams_.push_back(std::make_unique<npurt::stream>(dev_->make_stream()));
  }
  return *streams_[compute_[i]];
}

npurt::stream& session::io_stream(std::size_t i) {
  if (i >= io_.size())
    throw_error(make_error_code(errc::invalid_argument), "npurt::session::io_stream: index " + std::to_string(i) +
                                                             "; a session has " + std::to_string(io_.size()) +
                                                             " copy streams");
  auto& at = io_[i];
  if (at == 0) {  // index 0 is always stream(0), never a copy stream
    (void)stream(0);
    at = streams_.size();
    streams_.push_back(std::make_unique<npurt::stream>(dev_->make_stream({.flags = stream_flags::direct_submit})));
  }
  return *streams_[at];
}

npurt::stream& session::stage_stream(std::size_t i) {
  check_stream_index("npurt::session::stage_stream", i);
  (void)stream(0);
  while (stage_.size() <= i) {
    stage_.push_back(streams_.size());
    streams_.push_back(std::make_unique<npurt::stream>(dev_->make_stream({.flags = stream_flags::direct_submit})));
  }
  return *streams_[stage_[i]];
}

npurt::stream& session::comm_stream(int priority) {
  if (priority < 0 || static_cast<std::size_t>(priority) >= comm_.size())
    throw_error(make_error_code(errc::invalid_argument),
                "npurt::session::comm_stream: priority " + std::to_string(priority) + " (0 highest .. 7 lowest)");
  auto& at = comm_[static_cast<std::size_t>(priority)];
  if (at == 0) {  // index 0 is always stream(0), never a communication stream
    (void)stream(0);
    at = streams_.size();
    streams_.push_back(std::make_unique<npurt::stream>(
        dev_->make_stream({.priority = priority, .flags = stream_flags::direct_submit})));
  }
  return *streams_[at];
}

namespace {

// The stream a compiled graph's stream index k names: a pipeline's stages run on direct-submit
// streams of their own, every other schedule on the session's compute streams.
npurt::stream& exec_stream(session& s, const compiled_graph::impl& c, std::uint32_t k) {
  return c.rep.schedule == schedule::pipeline ? s.stage_stream(k) : s.stream(k);
}

/// Makes every stream a run of `c` uses wait for the graph's previous run. Nothing is queued
/// when that run is over: a wait costs its stream a launch, and a lone run would be slower.
void after_previous_run(session& s, const compiled_graph::impl& c) {
  if (!c.last_run.valid()) return;
  std::error_code ec;  // a run that failed may still have work queued: it is waited for too
  if (c.last_run.query(ec)) return;
  for (std::uint32_t k = 0; k < c.streams; ++k) exec_stream(s, c, k).wait(c.last_run);
  if (c.rep.overlap) {
    s.io_stream(0).wait(c.last_run);
    s.io_stream(1).wait(c.last_run);
  }
}

}  // namespace

npurt::stream& session::end_stream(const compiled_graph& c) {
  return c.get().rep.overlap ? io_stream(1) : exec_stream(*this, c.get(), c.final_stream());
}

void* session::acquire(std::size_t bytes) { return acquire(bytes, 0, "npurt::session::acquire"); }

void* session::acquire(std::size_t bytes, std::size_t freeing, std::string_view call) {
  if (bytes == 0) return nullptr;
  const std::size_t cap = mem_.pool_size;
  // held_ may already exceed a pool_size lowered since, and held_ + bytes may wrap.
  const std::size_t counted = held_ - std::min(held_, freeing);
  const std::size_t room = cap > counted ? cap - counted : 0;
  if (cap && bytes > room) {
    out_of_memory_error::info i{bytes, dev_->id(), cap, room, held_, held_};
    throw out_of_memory_error(i, std::string(call) + ": session " + std::to_string(id_) + ": " + std::to_string(bytes) +
                                     " bytes exceed the pool_size of " + std::to_string(cap) + " (" +
                                     std::to_string(held_) + " held)");
  }
  rebuild_pool_if_idle();
  void* p = nullptr;
  try {
    p = pool().malloc_async(bytes, stream(0));
  } catch (const out_of_memory_error& e) {
    // The pool's own words (which limit, which segment) keep their class and code, after the
    // name of the call that needed the memory, as the pool_size refusal above begins.
    std::string words = e.what();
    const std::string tail = ": " + e.code().message();  // system_error::what appends it again
    if (words.ends_with(tail)) words.resize(words.size() - tail.size());
    throw out_of_memory_error(e.code(), e.details(), std::string(call) + ": " + words);
  }
  held_ += bytes;
  peak_ = std::max(peak_, held_);
  return p;
}

void session::give_back(void* p, std::size_t bytes) noexcept {
  if (!p || !rt_) return;  // without its system the memory is gone already (a compiled graph dying late)
  // Buffers of a compiled graph are used by kernels on every session stream: the block is
  // reused only after the work enqueued on each of them so far (PyTorch's record_stream).
  std::error_code ec;
  for (std::size_t i = 1; i < streams_.size(); ++i) pool_->record_stream(p, *streams_[i], ec);
  pool_->free_async(p, *streams_[0], ec);
  held_ -= std::min(held_, bytes);
}

void session::set_memory_config(const memory_config& m) {
  const std::size_t capacity = dev_->properties().memory_bytes;
  // Without auto_growth the whole pool_size counts as reserved: more than the device has would
  // be reported as reserved all the same.
  if (!m.auto_growth && m.pool_size > capacity)
    throw_error(make_error_code(errc::invalid_argument),
                "npurt::session::set_memory_config: pool_size " + std::to_string(m.pool_size) +
                    " without auto_growth exceeds the " + std::to_string(capacity) + " bytes of device " +
                    std::to_string(dev_->id()));
  mem_ = m;
  rebuild_pool_if_idle();
}

void session::set_schedule_config(const schedule_config& s) {
  if (static_cast<unsigned>(s.strategy) > static_cast<unsigned>(schedule::pipeline))
    throw_error(make_error_code(errc::invalid_argument), "npurt::session::set_schedule_config: strategy " +
                                                             std::to_string(static_cast<unsigned>(s.strategy)) +
                                                             " is not a schedule");
  check_schedule_limits("npurt::session::set_schedule_config", s.max_parallelism, s.pipeline_stages);
  sched_ = s;
}

void session::enable_auto_schedule(int level) {
  if (level < 0 || level > 3)
    throw_error(make_error_code(errc::invalid_argument),
                "npurt::session::enable_auto_schedule: level " + std::to_string(level) + " (0-3)");
  level_ = level;
}

void session::set_comm_buffer_size(std::size_t bytes) {
  if (bytes == comm_bytes_) return;
  // The new buffer is had before the old one goes, so that a size that cannot be had keeps the
  // old one; against pool_size the old one counts as gone already.
  void* fresh = acquire(bytes, comm_bytes_, "npurt::session::set_comm_buffer_size");
  if (comm_buffer_) give_back(comm_buffer_, comm_bytes_);
  comm_buffer_ = fresh;
  comm_bytes_ = bytes;
}

memory_usage_mb session::memory_usage() const noexcept {
  if (!rt_) return {};
  const std::size_t pool_reserved =
      pool_ ? static_cast<std::size_t>(pool_->stats().reserved_bytes[stat_all].current) : 0;
  const double reserved = static_cast<double>(std::max(pool_reserved, mem_.auto_growth ? held_ : mem_.pool_size));
  return {static_cast<double>(held_) / mb, reserved / mb, static_cast<double>(peak_) / mb};
}

void session::trigger_gc() {
  compiled_.erase(std::remove_if(compiled_.begin(), compiled_.end(), [](const auto& w) { return w.expired(); }),
                  compiled_.end());
  if (pool_) {
    drain();  // frees in flight complete, so their blocks count as cached
    pool_->empty_cache();
  }
}

compiled_graph session::compile(graph& g, const compile_options& opts) {
  // Queued copies of constants and the blocking wait for them: refused up front where the wait
  // could not happen, as the copies would outlive the graph they read.
  check_can_block("npurt::session::compile");
  auto p = build_plan(g, opts, cfg_.precision, sched_, mem_, level_, "npurt::session::compile");
  p->owner = this;
  auto& rep = p->rep;
  // Overlap: inputs come in and outputs go out on copy streams of their own, into one of two
  // slots, so the next batch's copy in and the last batch's copy out run beside this batch's
  // operators. The copy streams bypass the device's shared execution queue: there a copy out
  // submitted before the next batch's operators would hold them until its own batch finished.
  if (overlap_ && rep.schedule != schedule::pipeline) {
    rep.overlap = true;
    rep.streams = p->streams + 2;
    (void)io_stream(0);
    (void)io_stream(1);
  }
  if (opts.capture_graph) {
    // A pipeline's stages take turns in several slots, each stage waiting for the previous
    // batch's end of the next: work a captured graph cannot hold. An overlapped run's copies stay
    // calls beside the graph, one graph per slot.
    if (rep.schedule == schedule::pipeline)
      throw graph_error(make_error_code(errc::not_supported), {}, {},
                        "npurt::session::compile: capture_graph runs cannot be pipelined (schedule::pipeline)");
    rep.graph = true;
  }
  if (p->all_reduce) {
    // Every rank's run must meet the others in the same collective: refused here, before any
    // memory is taken, rather than failing or hanging in a run.
    const auto& ar = *p->all_reduce;
    if (!ar.comm.valid())
      throw_error(make_error_code(errc::invalid_argument),
                  "npurt::session::compile: all_reduce's communicator is empty or its system is gone");
    if (ar.comm.rank_of(dev_->id()) < 0)
      throw_error(make_error_code(errc::invalid_argument), "npurt::session::compile: all_reduce's communicator '" +
                                                               ar.comm.name() + "' has no rank on device " +
                                                               std::to_string(dev_->id()) + ", the session's");
    if (static_cast<unsigned>(ar.op) > static_cast<unsigned>(reduce_op::avg))
      throw_error(make_error_code(errc::invalid_argument), "npurt::session::compile: all_reduce's op " +
                                                               std::to_string(static_cast<unsigned>(ar.op)) +
                                                               " is not a reduce_op");
    (void)comm_stream(ar.priority);  // refuses a priority out of range
    rep.streams += 1;
  }
  // A pipeline has a batch in each stage and one being copied in.
  const std::size_t slots = rep.schedule == schedule::pipeline ? static_cast<std::size_t>(p->stages) + 1
                            : rep.overlap                      ? 2
                                                               : 1;
  rep.kernels = 0;
  for (std::uint32_t s = 0; s < p->streams; ++s) (void)exec_stream(*this, *p, s);
  // Operators that may overlap share the AI cores, as kernels on concurrent streams do when their
  // tiling leaves cores free; everything else uses all of them.
  const std::uint32_t cores = dev_->properties().ai_core_count;
  for (auto& st : p->steps)
    if (st.concurrent && rep.schedule == schedule::parallel)
      st.block_dim = std::max<std::uint32_t>(1, cores / (st.peers + 1));
  auto hold = [&](std::size_t bytes) {
    void* ptr = acquire(bytes, 0, "npurt::session::compile");
    p->held.emplace_back(ptr, bytes);
    return ptr;
  };
  // Constants are copied to the device from p's graph when the copies run: should a later
  // acquire fail, they finish before p (and the host values they read) goes.
  try {
    // Constants go to the device once (functional runs).
    p->const_ptr.assign(p->values.size(), nullptr);
    if (!rep.timing_only) {
      for (std::size_t v = 0; v < p->values.size(); ++v) {
        const cvalue& c = p->values[v];
        if (c.kind != value_kind::constant || !c.host || !c.host->is_host() || c.bytes() == 0) continue;
        void* d = hold(c.bytes());
        stream(0).memcpy(d, c.bytes(), c.host->data(), c.bytes(), memcpy_kind::host_to_device);
        p->const_ptr[v] = d;
      }
      for (std::size_t k = 0; k < slots; ++k) p->arenas.push_back(hold(static_cast<std::size_t>(p->arena_bytes)));
    }
    p->input_ptr.assign(slots, {});
    p->output_ptr.assign(slots, {});
    for (std::size_t k = 0; k < slots; ++k) {
      for (int v : p->inputs) p->input_ptr[k].push_back(hold(p->values[static_cast<std::size_t>(v)].bytes()));
      if (rep.timing_only)
        for (int v : p->outputs) p->output_ptr[k].push_back(hold(p->values[static_cast<std::size_t>(v)].bytes()));
    }
    if (slots > 1) rep.io_bytes *= slots, rep.activation_bytes *= 1;  // per slot figures stay per batch
  } catch (...) {
    std::error_code ec;
    stream(0).synchronize(npurt::no_timeout, ec);
    throw;
  }
  stream(0).synchronize();
  if (!mem_.auto_growth && mem_.pool_size > held_) reserved_extra_ = mem_.pool_size - held_;
  // Kernel count of one run.
  auto ptr0 = [](int) -> void* { return nullptr; };
  for (const auto& st : p->steps) rep.kernels += lower_step(st, p->values, ptr0).size();
  compiled_.push_back(p);
  return compiled_graph(std::move(p));
}

// ---- refit ----

namespace {

// The value compile would have given the rewritten graph's constant `d` for the user's `v`: the
// same operations in the same order (a clone; Gemm's beta folded in; the cast to the compute
// type), so a refitted graph computes bit for bit what a fresh compile does.
tensor derive_constant(const tensor& v, const refit_log::derivation& d, dtype to) {
  tensor r = v.clone();
  if (d.scale) {
    tensor scaled(v.shape(), v.type());
    for (std::int64_t k = 0; k < v.elements(); ++k) scaled.set(k, *d.scale * v.get(k));
    r = std::move(scaled);
  }
  if (r.type() != to) {
    tensor c(r.shape(), to, r.format());
    for (std::int64_t i = 0; i < r.elements(); ++i) c.set(i, r.get(i));
    r = std::move(c);
  }
  return r;
}

}  // namespace

event session::refit(const compiled_graph& cg, std::string_view name, const tensor& value, std::string_view call) {
  check_compiled(cg, call);
  auto& c = cg.get();
  const std::string n(name);
  const auto src = c.refit.sources.find(name);
  if (src == c.refit.sources.end()) {
    const value_info* v = c.g.find(name);
    throw graph_error(
        make_error_code(errc::invalid_argument), {}, n,
        std::string(call) + ": '" + n + "' is " +
            (v && v->kind == value_kind::input ? "an input of the graph, not a constant"
             : v                               ? "an activation (an operator's output), not a constant"
                 : "not a constant of the compiled graph (none of its operators reads one of that name)"));
  }
  const auto& [want_shape, want_type] = src->second;
  if (!(value.shape() == want_shape))
    throw graph_error(make_error_code(errc::invalid_shape), {}, n,
                      std::string(call) + ": constant '" + n + "' is " + shape_string(want_shape) + ", given " +
                          shape_string(value.shape()));
  if (value.type() != want_type)
    throw graph_error(make_error_code(errc::invalid_dtype), {}, n,
                      std::string(call) + ": constant '" + n + "' is " + std::string(to_string(want_type)) +
                          ", given " + std::string(to_string(value.type())));
  if (!value.is_host())
    throw graph_error(make_error_code(errc::invalid_argument), {}, n,
                      std::string(call) + ": constant '" + n + "' is given " +
                          (value.is_device() ? "a device tensor; it takes a host tensor"
                                             : "a timing-only tensor (no data), but the graph computes real results"));
  if (c.rep.timing_only)
    throw graph_error(make_error_code(errc::not_supported), {}, n,
                      std::string(call) +
                          ": the graph was compiled timing-only (compile_options::timing_only, or a "
                          "constant without data): it has no device copy of '" +
                          n + "' to set");
  if (const auto why = c.refit.consumed.find(name); why != c.refit.consumed.end())
    throw graph_error(make_error_code(errc::not_supported), {}, n,
                      std::string(call) + ": constant '" + n + "' was " + why->second);
  // Everything is derived and checked before anything changes: a refusal leaves the graph as it was.
  std::map<std::string_view, tensor, std::less<>> next;  // by constant of the rewritten graph
  for (const auto& [target, d] : c.refit.derived)
    if (const tensor* now = c.g.constant(target); d.source == name && now)
      next.emplace(target, derive_constant(value, d, now->type()));
  // A constant that sets a parameter (a shape, axes, pads) is read again when each run is
  // lowered, but shapes were inferred, and memory planned, from the old value: refused unless
  // the new one infers the same outputs.
  for (const node& nd : c.g.nodes()) {
    if (std::none_of(nd.inputs.begin(), nd.inputs.end(), [&](const std::string& i) { return next.count(i) != 0; }))
      continue;
    std::vector<const value_info*> ins;
    std::vector<const tensor*> consts;
    for (const auto& i : nd.inputs) {
      ins.push_back(i.empty() ? nullptr : c.g.find(i));
      const auto at = next.find(i);
      consts.push_back(i.empty() ? nullptr : at != next.end() ? &at->second : c.g.constant(i));
    }
    const std::vector<inferred_output> out = infer_op(nd, ins, consts);
    for (std::size_t k = 0; k < nd.outputs.size() && k < out.size(); ++k) {
      if (nd.outputs[k].empty()) continue;
      const value_info& was = c.g.value(nd.outputs[k]);
      if (out[k].shape == was.shape && out[k].type == was.type) continue;
      throw graph_error(make_error_code(errc::not_supported), nd.name, n,
                        std::string(call) + ": constant '" + n + "' decides the output of " + nd.type + " '" + nd.name +
                            "': " + shape_string(was.shape) + " " + std::string(to_string(was.type)) +
                            " as compiled, " + shape_string(out[k].shape) + " " + std::string(to_string(out[k].type)) +
                            " with the new value (compile again: memory was planned for the old one)");
    }
  }
  // Stream-ordered as a run is: after the runs queued before (they read the old value), before
  // the runs queued after. The host values are staged by memcpy before it returns.
  npurt::stream& s = exec_stream(*this, c, c.copy_stream);
  event last;
  std::error_code done_ec;
  if (c.last_run.valid() && !c.last_run.query(done_ec)) s.wait(c.last_run);
  for (std::size_t v = 0; v < c.values.size(); ++v) {
    const cvalue& cv = c.values[v];
    if (cv.kind != value_kind::constant || !c.const_ptr[v]) continue;
    const auto at = next.find(cv.name);
    if (at == next.end() || cv.bytes() == 0) continue;
    last = s.memcpy(c.const_ptr[v], cv.bytes(), at->second.data(), cv.bytes(), memcpy_kind::host_to_device);
  }
  // The host copies too: each run's lowering reads a parameter's value from them.
  for (auto& [target, t] : next) c.g.set_constant(target, std::move(t));
  if (last.valid()) c.last_run = last;
  return last;
}

void session::set_constant(const compiled_graph& c, std::string_view name, const tensor& value) {
  (void)refit(c, name, value, "npurt::session::set_constant");
}

void session::set_constant(const compiled_graph& c, std::string_view name, const tensor& value, std::error_code& ec) {
  ec.clear();
  try {
    (void)refit(c, name, value, "npurt::session::set_constant");
  } catch (const error& e) {
    ec = e.code();
    if (rt_) rt_->note_recent_error(e.what());
  }
}

// ---- runs ----

namespace {

/// Collects the kernels of a run by name: per-operator start, end and busy time.
class op_recorder final : public observer {
 public:
  op_recorder(const std::map<std::string_view, std::size_t>& index,
              const std::map<std::uint64_t, std::size_t>& reductions)
      : index_(index), reductions_(reductions) {}
  void on_task(const task_info& t) override {
    if (t.kind == task_kind::collective) {
      if (auto at = reductions_.find(t.id); at != reductions_.end()) {
        auto& r = reduced_[at->second];
        r.start = t.start, r.end = t.end, r.busy = t.end - t.start, r.seen = true;
      }
      return;
    }
    if (t.kind != task_kind::kernel) return;
    auto it = index_.find(t.name);
    if (it == index_.end()) return;
    auto& r = spans_[it->second];
    if (!r.seen || t.start < r.start) r.start = t.start;
    if (!r.seen || t.end > r.end) r.end = t.end;
    r.busy += t.end - t.start;
    r.seen = true;
  }
  struct span {
    sim_time start{}, end{};
    picoseconds busy{0};
    bool seen = false;
  };
  std::map<std::size_t, span> spans_;
  std::map<std::size_t, span> reduced_;  // by output index

 private:
  const std::map<std::string_view, std::size_t>& index_;
  const std::map<std::uint64_t, std::size_t>& reductions_;  // the run's all-reduce tasks: output index
};

}  // namespace

struct session::pending_run {
  std::shared_ptr<compiled_graph::impl> c;
  std::vector<tensor> host_out;
  std::vector<std::vector<tensor>> batch_out;  // run_batches: per batch
  sim_time start{};
  std::map<std::string_view, std::size_t> index;
  std::map<std::uint64_t, std::size_t> reductions;  // the run's all-reduce tasks by id: output index
  std::unique_ptr<op_recorder> rec;
  bool observing = false;
};

namespace {

void check_feeds(const compiled_graph::impl& c, const std::vector<feed>& inputs, std::vector<const tensor*>& by_input,
                 std::string_view call) {
  by_input.assign(c.inputs.size(), nullptr);
  for (const auto& f : inputs) {
    bool found = false;
    for (std::size_t i = 0; i < c.inputs.size(); ++i) {
      const cvalue& v = c.values[static_cast<std::size_t>(c.inputs[i])];
      if (v.name != f.name) continue;
      found = true;
      if (!(f.value.shape() == v.shape))
        throw graph_error(make_error_code(errc::invalid_shape), {}, f.name,
                          std::string(call) + ": input '" + f.name + "' expects shape " + shape_string(v.shape) +
                              ", fed " + shape_string(f.value.shape()));
      if (f.value.type() != v.type)
        throw graph_error(make_error_code(errc::invalid_dtype), {}, f.name,
                          std::string(call) + ": input '" + f.name + "' expects " + std::string(to_string(v.type)) +
                              ", fed " + std::string(to_string(f.value.type())));
      if (by_input[i])
        throw graph_error(make_error_code(errc::invalid_argument), {}, f.name,
                          std::string(call) + ": input '" + f.name + "' fed twice");
      if (!c.rep.timing_only && !f.value.is_host() && !f.value.is_device() && v.bytes() != 0)
        throw graph_error(make_error_code(errc::invalid_argument), {}, f.name,
                          std::string(call) + ": input '" + f.name +
                              "' is a timing-only tensor (no data), but the graph computes real results");
      if (f.value.storage_lost())
        throw graph_error(make_error_code(errc::invalid_pointer), {}, f.name,
                          std::string(call) + ": input '" + f.name +
                              "' is a device tensor that is unusable: " + f.value.lost_reason());
      by_input[i] = &f.value;
    }
    if (!found)
      throw graph_error(make_error_code(errc::invalid_argument), {}, f.name,
                        std::string(call) + ": the graph has no input '" + f.name + "'");
  }
  for (std::size_t i = 0; i < c.inputs.size(); ++i)
    if (!by_input[i]) {
      const auto& name = c.values[static_cast<std::size_t>(c.inputs[i])].name;
      throw graph_error(make_error_code(errc::invalid_argument), {}, name,
                        std::string(call) + ": input '" + name + "' is not fed");
    }
}

// Enqueues one batch on the session's streams: copies in, the operators with their waits,
// copies out. `slot` selects the arena and staging buffers. Returns the event of the batch's end
// on stream `base` (after the outputs' copies).
struct enqueue_ctx {
  session& s;
  compiled_graph::impl& c;
  std::size_t slot;
  std::vector<const tensor*> in;
  std::vector<tensor>* host_out;
  std::vector<event>* stage_done;  // pipeline: per stage, the previous batch's end of that stage
  std::map<std::uint64_t, std::size_t>* reductions = nullptr;  // the run's all-reduce tasks by id
};

// Copies the outputs out on `sout`, into the run's host (or device) tensors.
template <class Ptr>
void copy_outputs(enqueue_ctx& x, npurt::stream& sout, const Ptr& ptr) {
  const auto& c = x.c;
  const bool timing = c.rep.timing_only;
  for (std::size_t i = 0; i < c.outputs.size(); ++i) {
    const int v = c.outputs[i];
    const cvalue& cv = c.values[static_cast<std::size_t>(v)];
    tensor& h = (*x.host_out)[i];
    if (cv.bytes() == 0) continue;
    const void* src = timing ? c.output_ptr[x.slot][i] : ptr(v);
    sout.memcpy(h.data(), h.bytes(), src, cv.bytes(),
                c.output_on_device[i] ? memcpy_kind::device_to_device : memcpy_kind::device_to_host);
  }
}

event enqueue_batch(enqueue_ctx& x) {
  auto& c = x.c;
  const bool timing = c.rep.timing_only;
  std::byte* arena = timing || c.arenas.empty() ? nullptr : static_cast<std::byte*>(c.arenas[x.slot]);
  std::vector<int> input_pos(c.values.size(), -1);
  for (std::size_t i = 0; i < c.inputs.size(); ++i)
    input_pos[static_cast<std::size_t>(c.inputs[i])] = static_cast<int>(i);
  auto ptr = [&](int v) -> void* {
    if (timing) return nullptr;
    const cvalue& cv = c.values[static_cast<std::size_t>(v)];
    const int r = cv.root;
    const cvalue& rv = c.values[static_cast<std::size_t>(r)];
    if (rv.kind == value_kind::constant) return c.const_ptr[static_cast<std::size_t>(r)];
    if (rv.kind == value_kind::input)
      return c.input_ptr[x.slot][static_cast<std::size_t>(input_pos[static_cast<std::size_t>(r)])];
    return arena + c.roots[static_cast<std::size_t>(r)].offset;
  };
  // Outputs that stay on the device are allocated before anything is queued: a device without
  // room for them refuses the run with nothing in flight.
  for (std::size_t i = 0; i < c.outputs.size(); ++i) {
    const cvalue& cv = c.values[static_cast<std::size_t>(c.outputs[i])];
    tensor& h = (*x.host_out)[i];
    h = c.output_on_device[i] ? tensor::on_device(x.s.device(), cv.shape, cv.type) : tensor(cv.shape, cv.type);
  }
  const bool overlap = c.rep.overlap;
  npurt::stream& sin = overlap ? x.s.io_stream(0) : exec_stream(x.s, c, c.copy_stream);
  npurt::stream& sout = overlap ? x.s.io_stream(1) : exec_stream(x.s, c, c.final_stream);
  // Inputs: host to device on the first stream.
  for (std::size_t i = 0; i < c.inputs.size(); ++i) {
    const tensor& t = *x.in[i];
    const std::size_t bytes = c.values[static_cast<std::size_t>(c.inputs[i])].bytes();
    if (bytes == 0) continue;
    if (t.is_host()) sin.memcpy(c.input_ptr[x.slot][i], bytes, t.data(), bytes, memcpy_kind::host_to_device);
    else if (t.is_device()) sin.memcpy(c.input_ptr[x.slot][i], bytes, t.data(), bytes, memcpy_kind::device_to_device);
    else {
      // A timing-only feed (check_feeds admits it to timing-only graphs) still costs its transfer.
      if (c.staging.empty()) {
        std::size_t most = 0;
        for (int v : c.inputs) most = std::max(most, c.values[static_cast<std::size_t>(v)].bytes());
        c.staging.assign(most, std::byte{0});
      }
      sin.memcpy(c.input_ptr[x.slot][i], bytes, c.staging.data(), bytes, memcpy_kind::host_to_device);
    }
  }
  // compile_options::capture_graph: the operators below are captured once per slot, on their
  // root stream (where the other streams join), and launched there: the copy-in stream, which
  // also copies the outputs out; with overlap the first compute stream, between the copies in
  // and out on the io streams, which stay calls (a slot's graph reads and writes that slot's
  // buffers).
  const bool graph = c.rep.graph;
  npurt::stream& root = graph && overlap ? exec_stream(x.s, c, c.copy_stream) : sin;
  if (graph && c.run_graphs.size() <= x.slot) c.run_graphs.resize(x.slot + 1);
  stream_graph* run_graph = graph ? &c.run_graphs[x.slot] : nullptr;
  // With overlap the graph starts once its slot's inputs are in: a wait outside the capture.
  if (graph && overlap) root.wait(sin.launch_callback([] {}));
  const auto launch_run_graph = [&] {
    event end = run_graph->launch(root);
    // The all-reduces' tasks of this launch, for the run's rows and its failures' words: the
    // graph's collective nodes are the reductions, in the order they were captured.
    if (x.reductions) {
      const std::vector<std::uint64_t> ids = detail::stream_graph_access::collective_task_ids(*run_graph);
      for (std::size_t i = 0; i < ids.size() && i < c.reductions.size(); ++i)
        x.reductions->emplace(ids[i], c.reductions[i].output);
    }
    if (overlap) sout.wait(end.valid() ? end : root.launch_callback([] {}));
    copy_outputs(x, sout, ptr);
    return sout.launch_callback([] {});
  };
  if (graph && run_graph->valid()) return launch_run_graph();
  // A refusal below (a launch the backend refused, an aborted communicator) ends the capture
  // with it, so that the stream takes calls again.
  struct capture_guard {
    npurt::stream* s = nullptr;
    ~capture_guard() {
      std::error_code ec;
      if (s) (void)s->end_capture(ec);
    }
  } guard;
  if (graph) {
    root.begin_capture();
    guard.s = &root;
  }
  // Inside a capture a dependency between streams is a user event recorded in it (a captured
  // call's event is null): mark() records one where a call's event would do outside.
  npurt::device& dev = x.s.device();
  const auto mark = [&](npurt::stream& on) {
    if (!graph) return on.launch_callback([] {});
    event e = dev.make_event();
    on.record(e);
    return e;
  };
  std::vector<bool> waited_for(graph ? c.steps.size() : 0, false);
  if (graph) {
    for (const cstep& st : c.steps)
      for (int w : st.waits) waited_for[static_cast<std::size_t>(w)] = true;
    for (const creduction& red : c.reductions)
      if (red.after >= 0) waited_for[static_cast<std::size_t>(red.after)] = true;
  }
  event inputs_done = mark(root);
  // All-reduces of outputs: on the communication stream, in the order of the list, each once
  // every step that touches its output's memory is queued (and, through the waits, has run).
  npurt::stream* comm = c.reductions.empty() ? nullptr : &x.s.comm_stream(c.all_reduce->priority);
  std::size_t next_reduction = 0;
  std::vector<event> reduced(c.reductions.size());
  std::vector<std::vector<std::size_t>> reads_reduced(comm ? c.steps.size() : 0);
  for (std::size_t i = 0; i < c.reductions.size(); ++i)
    for (int k : c.reductions[i].readers) reads_reduced[static_cast<std::size_t>(k)].push_back(i);
  std::vector<event> done(c.steps.size());
  std::vector<bool> stream_started(c.streams, false);
  std::vector<event> stage_end(static_cast<std::size_t>(c.stages));
  for (std::size_t k = 0; k < c.steps.size(); ++k) {
    const cstep& st = c.steps[k];
    npurt::stream& s = exec_stream(x.s, c, st.stream);
    if (!stream_started[st.stream]) {
      stream_started[st.stream] = true;
      if (overlap || st.stream != c.copy_stream) s.wait(inputs_done);
      if (x.stage_done && (*x.stage_done)[static_cast<std::size_t>(st.stage)].valid())
        s.wait((*x.stage_done)[static_cast<std::size_t>(st.stage)]);
    }
    for (int w : st.waits) s.wait(done[static_cast<std::size_t>(w)]);
    // compile ordered every reader after every reduced output's writer: the reductions it reads
    // are queued.
    if (comm)
      for (std::size_t i : reads_reduced[k]) s.wait(reduced[i]);
    event last;
    for (auto& task : lower_step(st, c.values, ptr)) {
      if (task.kernel) last = s.launch(*task.kernel);
      else
        last = s.memcpy(task.copy.dst, task.copy.bytes, task.copy.src, task.copy.bytes, memcpy_kind::device_to_device);
    }
    done[k] = graph ? (waited_for[k] ? mark(s) : event{}) : last;
    stage_end[static_cast<std::size_t>(st.stage)] = last;
    while (comm && next_reduction < c.reductions.size() && c.reductions[next_reduction].after <= static_cast<int>(k)) {
      const std::size_t i = next_reduction++;
      const creduction& red = c.reductions[i];
      if (const event& w = done[static_cast<std::size_t>(red.after)]; w.valid()) comm->wait(w);
      const cvalue& cv = c.values[static_cast<std::size_t>(red.value)];
      // Timing only: the output's staging buffer, at least as large as a compute-type value.
      void* buf = timing ? c.output_ptr[x.slot][red.output] : ptr(red.value);
      reduced[i] = c.all_reduce->comm.enqueue(
          communicator::all_reduce_call(buf, buf, static_cast<std::size_t>(cv.shape.elements()), cv.type,
                                        c.all_reduce->op),
          *comm);
      if (graph) reduced[i] = mark(*comm);
      else if (x.reductions) x.reductions->emplace(reduced[i].task_id(), red.output);
    }
  }
  // Join every stream into the final one, then copy the outputs out there. A capture joins its
  // root (non-pipelined, the copy-in stream is the final one).
  npurt::stream& join = graph ? root : sout;
  if (!overlap) stream_started[c.copy_stream] = true;
  for (std::uint32_t k = 0; k < c.streams; ++k)
    if ((overlap || k != c.final_stream) && stream_started[k]) {
      npurt::stream& from = exec_stream(x.s, c, k);
      if (&from == &join) continue;
      event e = mark(from);
      join.wait(e);
    }
  if (!reduced.empty() && reduced.back().valid()) join.wait(reduced.back());
  if (graph) {
    guard.s = nullptr;
    *run_graph = root.end_capture();
    return launch_run_graph();
  }
  copy_outputs(x, sout, ptr);
  if (x.stage_done)
    for (std::size_t k = 0; k < stage_end.size(); ++k)
      if (stage_end[k].valid()) (*x.stage_done)[k] = stage_end[k];
  return sout.launch_callback([] {});
}

}  // namespace

std::shared_ptr<session::pending_run> session::start_run(const compiled_graph& cg, const std::vector<feed>& inputs,
                                                         std::string_view call) {
  check_compiled(cg, call);
  auto p = std::make_shared<pending_run>();
  // The compiled graph stays alive until the run completes.
  for (const auto& w : compiled_)
    if (auto sp = w.lock(); sp.get() == &cg.get()) p->c = sp;
  auto& c = cg.get();
  enqueue_ctx x{*this, c, 0, {}, &p->host_out, nullptr};
  check_feeds(c, inputs, x.in, call);
  p->host_out.resize(c.outputs.size());
  if (cfg_.profiling) {
    for (std::size_t k = 0; k < c.steps.size(); ++k) p->index[c.steps[k].kernel_name] = k;
    p->rec = std::make_unique<op_recorder>(p->index, p->reductions);
    sys_->add_observer(*p->rec);
    p->observing = true;
  }
  x.reductions = &p->reductions;
  p->start = sys_->now();
  try {
    after_previous_run(*this, c);
    c.last_run = enqueue_batch(x);
  } catch (...) {
    // A launch the backend refused: nothing more is enqueued; what was waits for its memory's
    // owner, the compiled graph, to outlive it.
    abandon_run(*p);
    for (auto& st : streams_) {
      std::error_code ec;
      st->synchronize(npurt::no_timeout, ec);
    }
    throw;
  }
  return p;
}

void session::abandon_run(pending_run& p) noexcept {
  if (p.observing) sys_->remove_observer(*p.rec);
  p.observing = false;
}

run_result session::finish_run(pending_run& p) {
  abandon_run(p);
  run_result r;
  r.latency = sys_->now() - p.start;
  auto& c = *p.c;
  for (std::size_t i = 0; i < c.outputs.size(); ++i) {
    const cvalue& v = c.values[static_cast<std::size_t>(c.outputs[i])];
    if (c.rep.timing_only) p.host_out[i].release();
    r.outputs.emplace(v.name, std::move(p.host_out[i]));
  }
  if (p.rec)
    for (const auto& [k, sp] : p.rec->spans_) {
      const cstep& st = c.steps[k];
      r.ops.push_back({st.kernel_name, st.n->type, st.stream, sp.start - p.start, sp.end - p.start, sp.busy});
    }
  if (p.rec)
    for (const auto& [i, sp] : p.rec->reduced_) {
      const cvalue& v = c.values[static_cast<std::size_t>(c.outputs[i])];
      r.ops.push_back({"all_reduce(" + v.name + ")", "AllReduce", static_cast<std::uint32_t>(c.rep.streams - 1),
                       sp.start - p.start, sp.end - p.start, sp.busy});
    }
  std::stable_sort(r.ops.begin(), r.ops.end(),
                   [](const op_timing& a, const op_timing& b) { return a.start < b.start; });
  return r;
}

namespace {

// What a run raises for the first error its drain read: a task's failure in the graph's terms
// (the node whose kernel failed, and what its data had wrong, e.g. the index out of range) and
// of the class the stream's own synchronize would raise (a timeout_error keeps its timer and
// limit, a callback's exception is rethrown as it was), else the error itself.
std::exception_ptr run_error(const compiled_graph::impl& c, const system& sys, std::error_code ec,
                             const detail::failure& f, std::int32_t device, std::string_view what,
                             const std::map<std::uint64_t, std::size_t>* reductions = nullptr) {
  if (f.exception) return f.exception;
  std::string msg(what);
  if (f && reductions) {
    if (const auto at = reductions->find(f.task); at != reductions->end())
      msg += ": all_reduce of output '" + c.values[static_cast<std::size_t>(c.outputs[at->second])].name + "'";
  }
  if (f) {
    const auto st = std::find_if(c.steps.begin(), c.steps.end(),
                                 [&](const cstep& x) { return !x.kernel_name.empty() && x.kernel_name == f.name; });
    if (st != c.steps.end()) {
      // A step of a chain is reported as the operator the user wrote, the step after it.
      const auto o = c.origins.find(st->kernel_name);
      msg += o == c.origins.end() ? ": node '" + st->kernel_name + "' (" + st->n->type + ")"
                                  : ": node '" + o->second.name + "' (" + o->second.type + ", step " + st->n->type +
                                        (st->kernel_name == o->second.name ? "" : " '" + st->kernel_name + "'") + ")";
    }
    return detail::failure_exception(f, msg + ": " + f.describe(), device);
  }
  if (ec == errc::deadlock && !sys.deadlock_report().empty()) msg += ": " + sys.deadlock_report();
  try {
    throw_error_on(device, ec, msg);
  } catch (...) { return std::current_exception(); }
}

}  // namespace

std::vector<std::pair<std::uint32_t, std::uint64_t>> session::run_positions(const compiled_graph& c) {
  std::vector<std::pair<std::uint32_t, std::uint64_t>> pos;
  const auto add = [&](const npurt::stream& s) { pos.emplace_back(s.id(), rt_->last_enqueued(s.id())); };
  for (std::uint32_t k = 0; k < c.get().streams; ++k) add(exec_stream(*this, c.get(), k));
  if (!c.get().reductions.empty()) add(comm_stream(c.get().all_reduce->priority));
  add(end_stream(c));
  return pos;
}

std::exception_ptr session::take_run_failure(const compiled_graph& c, std::string_view what,
                                             const std::vector<std::pair<std::uint32_t, std::uint64_t>>* upto,
                                             const pending_run* run) {
  const auto* reductions = run ? &run->reductions : nullptr;
  // Every stream is read (each holds the failures of its own kernels: an event wait does not
  // pass them on to the stream that ends the run); the first error is the one reported.
  std::exception_ptr first;
  if (upto) {
    // The run's positions are reached; later runs may already be queued behind them, so only a
    // failure at or before the run's own last task is this run's (a later one is theirs).
    for (const auto& [id, seq] : *upto) {
      const detail::failure* f = rt_->peek_stream_failure(id);
      if (!f || f->seq > seq) continue;
      const detail::failure taken = rt_->take_stream_failure(id);
      if (!first) first = run_error(c.get(), *sys_, taken.ec, taken, dev_->id(), what, reductions);
    }
    return first;
  }
  auto drain_one = [&](npurt::stream& s) {
    std::error_code ec;
    detail::failure f;
    detail::stream_access::synchronize(s, ec, &f);
    if (ec && !first) first = run_error(c.get(), *sys_, ec, f, s.valid() ? s.device() : -1, what, reductions);
  };
  for (std::uint32_t k = 0; k < c.get().streams; ++k) drain_one(exec_stream(*this, c.get(), k));
  if (!c.get().reductions.empty()) drain_one(comm_stream(c.get().all_reduce->priority));
  drain_one(end_stream(c));
  return first;
}

run_result session::run(const compiled_graph& c, const std::vector<feed>& inputs) {
  // A run that could not wait would leave its copies out writing into host outputs already gone.
  check_can_block("npurt::session::run");
  auto p = start_run(c, inputs, "npurt::session::run");
  if (std::exception_ptr first = take_run_failure(c, "npurt::session::run", nullptr, p.get())) {
    abandon_run(*p);
    std::rethrow_exception(first);
  }
  return finish_run(*p);
}

std::shared_ptr<session::pending_run> session::start_batches(const compiled_graph& cg,
                                                             const std::vector<std::vector<feed>>& batches,
                                                             bool wait_each, std::string_view call) {
  check_compiled(cg, call);
  if (wait_each) check_can_block(call);
  auto p = std::make_shared<pending_run>();
  for (const auto& w : compiled_)
    if (auto sp = w.lock(); sp.get() == &cg.get()) p->c = sp;
  auto& c = cg.get();
  const bool pipelined = c.rep.schedule == schedule::pipeline;
  const bool rotating = pipelined || c.rep.overlap;  // batches take turns in several slots
  const std::size_t slots = c.input_ptr.size();
  std::vector<event> stage_done(static_cast<std::size_t>(c.stages));
  std::vector<event> batch_end(batches.size());
  // Every batch's feeds are checked before the first is queued: a bad batch fails the call with
  // nothing in flight.
  std::vector<std::vector<const tensor*>> fed(batches.size());
  for (std::size_t b = 0; b < batches.size(); ++b) check_feeds(c, batches[b], fed[b], call);
  p->batch_out.resize(batches.size());
  p->start = sys_->now();
  npurt::stream* comm = c.reductions.empty() ? nullptr : &comm_stream(c.all_reduce->priority);
  // Queued copies write into the batches' outputs when they run: should queueing fail part way,
  // the queued batches finish before the outputs go.
  auto drain = [&] {
    if (std::exception_ptr first = take_run_failure(cg, "npurt::session::run_batches", nullptr, p.get()))
      std::rethrow_exception(first);
  };
  try {
    after_previous_run(*this, c);
    for (std::size_t b = 0; b < batches.size(); ++b) {
      enqueue_ctx x{*this,
                    c,
                    rotating ? b % slots : 0,
                    std::move(fed[b]),
                    &p->batch_out[b],
                    pipelined ? &stage_done : nullptr,
                    &p->reductions};
      p->batch_out[b].resize(c.outputs.size());
      // A slot is reused only when the batch that used it has been copied out.
      if (rotating && b >= slots)
        (c.rep.overlap ? io_stream(0) : exec_stream(*this, c, c.copy_stream)).wait(batch_end[b - slots]);
      // Without rotation every batch uses the one slot: the next waits for this one's end, as
      // the next run would.
      if (!rotating && !wait_each && b > 0) {
        c.last_run = batch_end[b - 1];
        after_previous_run(*this, c);
      }
      batch_end[b] = enqueue_batch(x);
      if (!rotating && wait_each) {
        // A failed batch is reported by the drain below, which names the node that failed. An
        // all-reduce's failure stays on the communication stream, which no wait passes on.
        std::error_code ec;
        batch_end[b].synchronize(no_timeout, ec);
        if (ec || (comm && rt_->peek_stream_failure(comm->id()))) {
          drain();
          throw_error(ec, "npurt::session::run_batches: batch " + std::to_string(b));
        }
      }
    }
  } catch (...) {
    try {
      drain();
    } catch (...) {  // the first failure is the one to report
    }
    throw;
  }
  if (!batch_end.empty()) c.last_run = batch_end.back();
  return p;
}

batches_result session::finish_batches(pending_run& p) {
  batches_result r;
  r.latency = sys_->now() - p.start;
  const auto& c = *p.c;
  for (auto& o : p.batch_out) {
    std::map<std::string, tensor> m;
    for (std::size_t i = 0; i < c.outputs.size(); ++i) {
      if (c.rep.timing_only) o[i].release();
      m.emplace(c.values[static_cast<std::size_t>(c.outputs[i])].name, std::move(o[i]));
    }
    r.outputs.push_back(std::move(m));
  }
  const double secs = static_cast<double>(r.latency.count()) * 1e-12;
  r.batches_per_second = secs > 0 ? static_cast<double>(p.batch_out.size()) / secs : 0;
  return r;
}

batches_result session::run_batches(const compiled_graph& cg, const std::vector<std::vector<feed>>& batches) {
  auto p = start_batches(cg, batches, true, "npurt::session::run_batches");
  if (std::exception_ptr first = take_run_failure(cg, "npurt::session::run_batches", nullptr, p.get()))
    std::rethrow_exception(first);
  return finish_batches(*p);
}

optimizer_report session::optimize(graph& g, const std::vector<feed>& inputs) {
  optimizer_report rep;
  const compile_options before{.schedule = schedule::sequential, .memory_reuse = false, .optimization_level = 0};
  {
    compiled_graph c0 = compile(g, before);
    const run_result r0 = run(c0, inputs);
    rep.latency_before = r0.latency;
    rep.peak_bytes_before = c0.report().peak_bytes();
  }
  enable_memory_reuse(true);
  enable_auto_schedule(3);
  // Overlap pays off across batches (run_batches) and costs a second I/O and arena slot; the
  // single run measured here is compiled without it, later compiles get it.
  enable_overlap(false);
  rep.options = compile_options{.memory_reuse = true, .optimization_level = 3};
  compiled_graph c1 = compile(g, rep.options);
  enable_overlap(true);
  const run_result r1 = run(c1, inputs);
  rep.compiled = c1.report();
  rep.latency_after = r1.latency;
  rep.peak_bytes_after = rep.compiled.peak_bytes();
  rep.memory_efficiency = rep.compiled.activation_bytes ? static_cast<double>(rep.compiled.activation_lower_bound) /
                                                              static_cast<double>(rep.compiled.activation_bytes)
                                                        : 1.0;
  picoseconds busy{0};
  for (const auto& o : r1.ops) busy += o.busy;
  const double denom = static_cast<double>(r1.latency.count()) * static_cast<double>(rep.compiled.streams);
  rep.compute_efficiency = denom > 0 ? static_cast<double>(busy.count()) / denom : 0;
  return rep;
}

// ---- suggestions ----

std::vector<memory_suggestion> graph_optimizer::memory_suggestions() const {
  const compile_options base{.schedule = schedule::sequential, .memory_reuse = false, .optimization_level = 0};
  const auto peak = [&](const compile_options& o, precision p) { return plan_memory(*g_, o, p).peak_bytes(); };
  const double b = static_cast<double>(peak(base, precision_));
  std::vector<memory_suggestion> out;
  auto add = [&](memory_suggestion::kind k, std::string text, compile_options o, std::optional<precision> p) {
    const double after = static_cast<double>(peak(o, p.value_or(precision_)));
    if (after < b) out.push_back({k, std::move(text), (b - after) / mb, o, p});
  };
  add(memory_suggestion::kind::enable_reuse,
      "enable memory reuse: activations whose lifetimes do not overlap share memory",
      {.schedule = schedule::sequential, .memory_reuse = true, .optimization_level = 0}, std::nullopt);
  add(memory_suggestion::kind::in_place, "in-place activations and fusion (optimization level 2)",
      {.schedule = schedule::sequential, .memory_reuse = false, .optimization_level = 2}, std::nullopt);
  if (precision_ == precision::fp32)
    add(memory_suggestion::kind::lower_precision, "compute in fp16: halves activations and weights", base,
        precision::fp16);
  // Recomputation: greedily, largest activation first, keep each rewrite that lowers the peak
  // of the plan with reuse and fusion.
  {
    const compile_options with{.schedule = schedule::sequential, .memory_reuse = true, .optimization_level = 2};
    const std::uint64_t now = plan_memory(*g_, with, precision_).peak_bytes();
    auto cands = recompute_candidates(*g_);
    std::stable_sort(cands.begin(), cands.end(), [](const auto& x, const auto& y) { return x.bytes > y.bytes; });
    if (cands.size() > 16) cands.resize(16);  // each trial is a planner run
    std::vector<recompute_candidate> chosen;
    std::set<std::size_t> cloned;
    std::uint64_t best = now;
    for (const auto& c : cands) {
      if (std::any_of(c.chain.begin(), c.chain.end(), [&](auto k) { return cloned.count(k) != 0; })) continue;
      chosen.push_back(c);
      graph t = apply_recompute(*g_, chosen);
      const std::uint64_t pk = plan_memory(t, with, precision_).peak_bytes();
      if (pk < best) {
        best = pk;
        cloned.insert(c.chain.begin(), c.chain.end());
      } else {
        chosen.pop_back();
      }
    }
    if (best < now) {
      std::string names;
      for (const auto& c : chosen) names += (names.empty() ? "" : ", ") + c.value;
      out.push_back({memory_suggestion::kind::recomputation,
                     "recompute " + std::to_string(chosen.size()) + " activation(s) before their late readers (" +
                         names + ") instead of keeping them",
                     static_cast<double>(now - best) / mb, with, std::nullopt,
                     std::make_shared<graph>(apply_recompute(*g_, chosen))});
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.saving_mb > y.saving_mb; });
  return out;
}

}  // namespace npurt

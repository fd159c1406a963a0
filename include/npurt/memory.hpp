// npurt/memory.hpp — the stream-ordered caching memory pool (aclrtMemPool / cudaMemPool, with
// PyTorch's caching allocator inside).
//
// Allocation happens when the host asks, on behalf of a stream: the pointer may be used by work
// enqueued on that stream from then on. A free is stream-ordered too: the block goes back to the
// pool at once, tagged with the stream position of the free, and is reused by the same stream at
// once (stream order makes that safe) and by other streams only when the pool's reuse policies
// allow it — the free's position has been reached, the other stream already waits for it, or (if
// allowed) the pool makes it wait. record_stream() marks a block as used by another stream, so
// that reuse also waits for that stream's work, as PyTorch's does.
//
// Thread safety: a pool belongs to its system's loop thread, like the device that owns it; no
// call may come from another thread while the system runs.
#pragma once

#include <npurt/backend.hpp>
#include <npurt/config.hpp>
#include <npurt/detail/async_op.hpp>
#include <npurt/detail/caching_allocator.hpp>
#include <npurt/detail/runtime.hpp>
#include <npurt/error.hpp>
#include <npurt/stream.hpp>

#include <boost/asio/associator.hpp>
#include <boost/asio/async_result.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string_view>
#include <utility>

namespace npurt {

/// The pool's options: strategy ("segmented", PyTorch-like, or "compact", one growable arena per
/// stream), max_split_size, garbage_collection_threshold, pool_size_limit, auto_growth, the three
/// reuse policies and the release threshold.
using mem_pool_options = detail::caching_allocator_options;
using detail::allocation_strategy;
using detail::allocator_stats;
using detail::memory_snapshot;
using detail::memory_usage_report;

/// Where a pointer's memory is (cudaMemoryType, aclrtMemLocationType).
enum class memory_type : std::uint8_t {
  unregistered,  // host memory npurt did not allocate (pageable), or a null result
  host_pinned,   // system::host_malloc, host_buffer
  device,        // device::malloc, a pool's block
};

constexpr std::string_view to_string(memory_type t) noexcept {
  switch (t) {
    case memory_type::unregistered: return "unregistered";
    case memory_type::host_pinned: return "host_pinned";
    case memory_type::device: return "device";
  }
  return "unknown";
}

/// system::pointer_attributes (cudaPointerGetAttributes, aclrtPointerGetAttributes): what npurt
/// knows of the memory a pointer points into.
struct pointer_attributes {
  memory_type type = memory_type::unregistered;
  device_id device = -1;       // device memory's device; -1 for host memory
  const void* base = nullptr;  // the start of the allocation holding the pointer (null: unregistered)
  std::size_t bytes = 0;       // the bytes the allocation asked for
  std::size_t offset = 0;      // the pointer's distance from base
};

/// Pool attributes with cudaMemPoolAttr's / aclrtMemPoolAttr's ids.
enum class mem_pool_attr : int {
  reuse_follow_event_dependencies = 1,
  reuse_allow_opportunistic = 2,
  reuse_allow_internal_dependencies = 3,
  release_threshold = 4,
  reserved_mem_current = 5,
  reserved_mem_high = 6,
  used_mem_current = 7,
  used_mem_high = 8,
};

namespace detail {
class pool_provider;
template <class Handler>
struct pool_delivery;
}  // namespace detail

class mem_pool {
 public:
  using default_token = detail::default_token;

  NPURT_DECL mem_pool(detail::runtime& rt, device_id dev, const mem_pool_options& opts = {});
  NPURT_DECL ~mem_pool();
  mem_pool(const mem_pool&) = delete;
  mem_pool& operator=(const mem_pool&) = delete;

  [[nodiscard]] device_id device() const noexcept { return dev_; }

  /// cudaMallocAsync: memory for work on `s`. Throws out_of_memory_error (with the requested
  /// size, device, total and free capacity, allocated and reserved bytes, and a hint) when the
  /// retry chain cannot find it or the device could never hold it, and
  /// caller_error(errc::size_overflow) when rounding `bytes` up would overflow size_t. On a
  /// capturing stream it is a graph allocation (an allocation node), taken from the device rather
  /// than the pool: its address is the graph's, the same at every launch (see stream_graph).
  [[nodiscard]] NPURT_DECL void* malloc_async(std::size_t bytes, stream& s);
  [[nodiscard]] NPURT_DECL void* malloc_async(std::size_t bytes, stream& s, std::error_code& ec);
  /// cudaFreeAsync: returns p to the pool in the order of `s`. A pointer of another device is
  /// errc::stream_device_mismatch, as device::free says (the throwing form names both devices).
  /// On a capturing stream it frees an allocation of the same capture at the end of each launch
  /// (a free node), or one another graph's launch left allocated, at each launch of this one;
  /// outside a capture it also frees a graph allocation a launch left allocated.
  NPURT_DECL void free_async(void* p, stream& s);
  NPURT_DECL void free_async(void* p, stream& s, std::error_code& ec);
  /// Takes `bytes` of device memory into the pool's cache for `s` now (a segment, or arena pages
  /// in compact mode): the way to stock a pool whose auto_growth is off. Errors: zero_size,
  /// size_overflow (a size that cannot be rounded up), out_of_memory (more than the device holds
  /// or has free: out_of_memory_error when thrown), pool_limit, and the stream's.
  NPURT_DECL void reserve(std::size_t bytes, stream& s);
  NPURT_DECL void reserve(std::size_t bytes, stream& s, std::error_code& ec);
  /// PyTorch's record_stream: p is also used by `s`; reuse waits for s's work enqueued so far.
  NPURT_DECL void record_stream(void* p, stream& s);
  NPURT_DECL void record_stream(void* p, stream& s, std::error_code& ec);

  /// `co_await pool.async_malloc(n, s, use_awaitable)` → void*. When the device is out of memory
  /// while other streams still hold frees in flight, it waits for the device to drain and tries
  /// once more before failing. Awaited with npurt::use_task, a refusal throws what malloc_async
  /// throws (out_of_memory_error with its fields, taken at the refusal); heard as an error_code
  /// (here or from the error_code malloc_async), its words are system::recent_error_message().
  template <class Token = default_token>
  auto async_malloc(std::size_t bytes, stream& s, Token&& token = {});
  template <class Token = default_token>
  auto async_free(void* p, stream& s, Token&& token = {});

  NPURT_DECL void set_attribute(mem_pool_attr a, std::uint64_t value);
  [[nodiscard]] NPURT_DECL std::uint64_t get_attribute(mem_pool_attr a) const;
  /// aclrtMemPoolTrimTo: release cached memory until at most `keep` bytes stay reserved.
  NPURT_DECL void trim_to(std::size_t keep);
  NPURT_DECL void empty_cache();
  NPURT_DECL void trigger_gc();
  NPURT_DECL void reset_peak();
  /// torch.cuda.reset_accumulated_memory_stats: zeroes the statistics' running totals and the
  /// retry, OOM, synchronisation and device allocation counters; current figures stay.
  NPURT_DECL void reset_accumulated();
  /// After a stream, event or device synchronize of the pool's device: trims to the release
  /// threshold (default 0), as a CUDA pool does. all_streams: the whole device is idle, so every
  /// recorded use is over; otherwise memory whose stream-ordered free is still ahead stays.
  NPURT_DECL void on_synchronize(bool all_streams = true);

  /// A snapshot of the statistics (by value, as PyTorch's memory_stats: the pool brings some of
  /// them up to date only when asked, so a kept reference could not stay current).
  /// stats() and memory_usage() are noexcept readers, which (as the system's other noexcept
  /// accessors) check no thread: call them from the system's thread. snapshot() is refused on
  /// another thread with check_thread (errc::wrong_thread).
  [[nodiscard]] allocator_stats stats() const noexcept { return alloc_->stats(); }
  [[nodiscard]] memory_usage_report memory_usage() const noexcept { return alloc_->memory_usage(); }
  [[nodiscard]] NPURT_DECL memory_snapshot snapshot() const;
  /// The options in force, read-only: they are validated when set (device::configure_mem_pool,
  /// set_attribute), and a value written past that (a granule of 0) would divide by zero later.
  [[nodiscard]] const mem_pool_options& options() const noexcept { return std::as_const(*alloc_).options(); }
  [[nodiscard]] detail::caching_allocator& allocator() noexcept { return *alloc_; }

 private:
  friend class device;
  /// Swaps in an allocator with these options, releasing all memory of the old one; the pool
  /// object stays, so references to it (and in-flight async_malloc retries) stay valid.
  NPURT_DECL void reconfigure(const mem_pool_options& opts);
  [[nodiscard]] NPURT_DECL std::unique_ptr<detail::caching_allocator> make_allocator(
      const mem_pool_options& opts) const;
  NPURT_DECL void unregister_blocks();
  NPURT_DECL void* do_malloc(std::size_t bytes, std::uint32_t stream, std::error_code& ec);
  /// The stream's id for the allocator, or 0 with the error. A capturing stream is refused
  /// (capture_unsupported, invalidating its capture) unless `capturing` is given: it then
  /// points at the stream's state, for a graph allocation or free.
  NPURT_DECL std::uint32_t stream_id(stream& s, std::error_code& ec, detail::stream_state** capturing = nullptr) const;
  /// free_async's work; `why` has the words of a graph allocation's refusal.
  NPURT_DECL void free_async(void* p, stream& s, std::error_code& ec, std::string& why);
  // Throws wrong_thread (caller_error) when called off the system's owning thread.
  NPURT_DECL void check_owner(const char* call) const;
  [[nodiscard]] NPURT_DECL bool device_busy() const;
  // Whether the device, and the pool's size limit, could hold `bytes` at all: only then can
  // waiting for frees make room.
  [[nodiscard]] NPURT_DECL bool fits_device(std::size_t bytes) const;
  // Makes the refusal's report (the throwing malloc_async's words and figures) the system's
  // recent error: the error_code forms and an await with use_awaitable carry the code alone.
  NPURT_DECL void note_refusal(std::error_code ec, std::size_t bytes);
  template <class Handler>
  friend struct detail::pool_delivery;

  // Counts the allocators the pool has had (reconfigure: configure_mem_pool and device reset).
  // A pointer async_malloc took from one is handed to its handler only while that allocator is
  // still the pool's: the handler runs later (posted), and a reconfiguration in between has
  // released the memory.
  std::uint64_t generation_ = 0;

  // Null once the system is gone: only a pool its owner keeps past the system (a session's)
  // sees that, in its destructor.
  detail::runtime_ref rt_;
  device_id dev_;
  std::unique_ptr<detail::pool_provider> provider_;
  std::unique_ptr<detail::caching_allocator> alloc_;
};

namespace detail {

/// async_malloc's handler as the runtime completes it, with the pointer and the generation of
/// the allocator that made it: the user's, told operation_aborted instead of a pointer whose
/// allocator the pool no longer has (configure_mem_pool or device::reset ran between the
/// allocation and the handler). A waiting retry allocates from the allocator of the time it
/// runs; this covers the stretch after that, while the completion is posted.
template <class Handler>
struct pool_delivery {
  Handler handler;
  mem_pool* pool;

  void operator()(async_error_code ec, void* p, std::uint64_t made_in) {
    if (!ec && p && pool->generation_ != made_in) {
      pool->rt_->note_recent_error(
          "npurt::mem_pool::async_malloc: the pool's memory was released (configure_mem_pool or device::reset) "
          "before the allocation reached its handler: nothing is allocated");
      ec = to_async_error(make_error_code(errc::operation_aborted));
      p = nullptr;
    }
    std::move(handler)(ec, p);
  }
};

}  // namespace detail

template <class Token>
auto mem_pool::async_malloc(std::size_t bytes, stream& s, Token&& token) {
  return boost::asio::async_initiate<Token, void(async_error_code, void*)>(
      [this, &s](auto user_handler, std::size_t n) {
        std::error_code ec;
        const std::uint32_t sid = stream_id(s, ec);
        if (ec == errc::wrong_thread) [[unlikely]] {
          detail::refuse_foreign(&rt_->io(), std::move(user_handler), dev_, "npurt::mem_pool::async_malloc",
                                 static_cast<void*>(nullptr));
          return;
        }
        if (ec) {
          detail::post_error(*rt_, std::move(user_handler), ec, static_cast<void*>(nullptr));
          return;
        }
        using detail::thrown_slot;
        std::exception_ptr* thrown = thrown_slot(user_handler);
        using handler_t = detail::pool_delivery<decltype(user_handler)>;
        handler_t handler{std::move(user_handler), this};
        void* p = do_malloc(n, sid, ec);
        if ((ec == errc::out_of_memory || ec == errc::pool_limit) && fits_device(n) && device_busy()) {
          // The last step of the retry chain, asynchronously: let the device drain (frees in
          // flight on other streams become reusable), then try once more. A pool at its size
          // limit is no different: its busy cached segments are what the drain frees.
          auto* op = detail::handler_op<handler_t, void*, std::uint64_t>::create(*rt_, std::move(handler));
          struct retry final : detail::op_base {
            mem_pool* pool;
            std::size_t n;
            std::uint32_t sid;
            std::exception_ptr* thrown;
            detail::op_base* user;
            static void done(detail::op_base* b, std::error_code e) {
              auto* self = static_cast<retry*>(b);
              auto* user_op = static_cast<detail::handler_op<handler_t, void*, std::uint64_t>*>(self->user);
              void* q = nullptr;
              if (!e) {
                self->pool->alloc_->on_synchronize(true);
                q = self->pool->do_malloc(self->n, self->sid, e);
                if (e) self->pool->note_refusal(e, self->n);
                if (e && self->thrown) *self->thrown = self->pool->alloc_->allocate_error(e, self->n);
              }
              std::get<0>(user_op->values) = q;
              std::get<1>(user_op->values) = self->pool->generation_;  // the allocator q came from
              user_op->complete(e);
              delete self;
            }
          };
          auto* r = new retry;
          r->complete_fn = &retry::done;
          r->pool = this;
          r->n = n;
          r->sid = sid;
          r->thrown = thrown;
          r->user = op;
          detail::start_multi_wait(*rt_, r, rt_->device_positions(dev_), no_timeout);
          return;
        }
        // The report of the refusal as the throwing malloc_async raises it, taken now: by the
        // time the awaiter resumes, the pool's figures may have moved.
        if (ec) note_refusal(ec, n);
        if (ec && thrown) *thrown = alloc_->allocate_error(ec, n);
        detail::post_error(*rt_, std::move(handler), ec, p, generation_);
      },
      token, bytes);
}

template <class Token>
auto mem_pool::async_free(void* p, stream& s, Token&& token) {
  return boost::asio::async_initiate<Token, void(async_error_code)>(
      [this, &s](auto handler, void* ptr) {
        std::error_code ec;
        free_async(ptr, s, ec);
        if (ec == errc::wrong_thread) [[unlikely]] {
          detail::refuse_foreign(&rt_->io(), std::move(handler), dev_, "npurt::mem_pool::async_free");
          return;
        }
        detail::post_error(*rt_, std::move(handler), ec);
      },
      token, p);
}

}  // namespace npurt

namespace boost::asio {

// pool_delivery runs where, with what and as the user's handler would: every associator
// (executor, allocator, cancellation slot) is the user handler's, as Asio's own wrappers do.
template <template <typename, typename> class Associator, typename Handler, typename DefaultCandidate>
struct associator<Associator, npurt::detail::pool_delivery<Handler>, DefaultCandidate>
    : Associator<Handler, DefaultCandidate> {
  static typename Associator<Handler, DefaultCandidate>::type get(
      const npurt::detail::pool_delivery<Handler>& h) noexcept {
    return Associator<Handler, DefaultCandidate>::get(h.handler);
  }
  static auto get(const npurt::detail::pool_delivery<Handler>& h, const DefaultCandidate& c) noexcept
      -> decltype(Associator<Handler, DefaultCandidate>::get(h.handler, c)) {
    return Associator<Handler, DefaultCandidate>::get(h.handler, c);
  }
};

}  // namespace boost::asio

#if NPURT_INCLUDE_IMPL
#include <npurt/impl/memory.ipp>
#endif

// npurt/detail/runtime_ref.hpp — a handle's pointer to its runtime that becomes null when the
// runtime dies first.
//
// Streams, events, communicators and owned buffers are values a user may keep after the system
// that made them is gone. Each keeps its runtime through a runtime_ref, and every live
// runtime_ref of a runtime sits in that runtime's handle_list (an intrusive list: no allocation,
// O(1) to join and leave). When the runtime dies the list nulls every member, so a stale handle is
// exactly a null handle: each call on it fails with the handle's typed error (invalid_stream,
// invalid_event, ...) instead of reading freed memory. Single-threaded, as the runtime is.
#pragma once

#include <cstddef>

namespace npurt::detail {

class runtime;
class handle_list;

/// The list of a runtime (defined in detail/runtime.hpp, after the runtime).
handle_list& handles_of(runtime& rt) noexcept;

class runtime_ref {
 public:
  runtime_ref() noexcept = default;
  runtime_ref(std::nullptr_t) noexcept {}  // NOLINT(google-explicit-constructor): a null pointer
  runtime_ref(runtime* rt) noexcept { attach(rt); }  // NOLINT(google-explicit-constructor)
  runtime_ref(const runtime_ref& o) noexcept : rt_(o.rt_) {
    if (rt_) insert_after(o);
  }
  runtime_ref(runtime_ref&& o) noexcept { take_place(o); }
  runtime_ref& operator=(const runtime_ref& o) noexcept {
    if (this != &o) {
      reset();
      rt_ = o.rt_;
      if (rt_) insert_after(o);
    }
    return *this;
  }
  runtime_ref& operator=(runtime_ref&& o) noexcept {
    if (this != &o) {
      reset();
      take_place(o);
    }
    return *this;
  }
  runtime_ref& operator=(runtime* rt) noexcept {
    reset();
    attach(rt);
    return *this;
  }
  runtime_ref& operator=(std::nullptr_t) noexcept {
    reset();
    return *this;
  }
  ~runtime_ref() { reset(); }

  [[nodiscard]] runtime* get() const noexcept { return rt_; }
  operator runtime*() const noexcept { return rt_; }  // NOLINT(google-explicit-constructor): a pointer
  runtime* operator->() const noexcept { return rt_; }
  runtime& operator*() const noexcept { return *rt_; }

  /// Leaves the list and becomes null.
  void reset() noexcept { drop(); }

 private:
  friend class handle_list;
  struct sentinel_tag {};
  explicit runtime_ref(sentinel_tag) noexcept : prev_(this), next_(this) {}

  // Also what the list does to a handle whose runtime dies, which may be a const object: the
  // members are mutable because they are the handle's tie to its runtime, not its value.
  void drop() const noexcept {
    if (next_) {
      prev_->next_ = next_;
      next_->prev_ = prev_;
      prev_ = next_ = nullptr;
    }
    rt_ = nullptr;
  }

  inline void attach(runtime* rt) noexcept;
  // A move takes the source's place in the list (handles are moved on every launch that returns
  // an event: one relink instead of a join and a leave). Precondition: *this is unlinked.
  void take_place(runtime_ref& o) noexcept {
    rt_ = o.rt_;
    if (!o.next_) return;
    prev_ = o.prev_;
    next_ = o.next_;
    prev_->next_ = this;
    next_->prev_ = this;
    o.prev_ = o.next_ = nullptr;
    o.rt_ = nullptr;
  }
  // The list links are not part of the value: joining after a const handle is fine.
  void insert_after(const runtime_ref& o) noexcept {
    prev_ = &o;
    next_ = o.next_;
    o.next_->prev_ = this;
    o.next_ = this;
  }

  mutable runtime* rt_ = nullptr;
  mutable const runtime_ref* prev_ = nullptr;
  mutable const runtime_ref* next_ = nullptr;
};

/// Every live runtime_ref of one runtime. Destroying the list nulls them all.
class handle_list {
 public:
  handle_list() noexcept = default;
  handle_list(const handle_list&) = delete;
  handle_list& operator=(const handle_list&) = delete;
  ~handle_list() { detach_all(); }

  void detach_all() noexcept {
    while (head_.next_ != &head_) head_.next_->drop();
  }
  [[nodiscard]] bool empty() const noexcept { return head_.next_ == &head_; }

 private:
  friend class runtime_ref;
  runtime_ref head_{runtime_ref::sentinel_tag{}};
};

inline void runtime_ref::attach(runtime* rt) noexcept {
  rt_ = rt;
  if (rt_) insert_after(handles_of(*rt_).head_);
}

}  // namespace npurt::detail

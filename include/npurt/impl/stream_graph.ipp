// npurt/impl/stream_graph.ipp
#pragma once

#include <npurt/stream_graph.hpp>

#include <string>

namespace npurt {

NPURT_DECL stream_graph& stream_graph::operator=(stream_graph&& o) noexcept {
  if (this != &o) {
    if (rt_) rt_->release_graph(id_);
    rt_ = std::move(o.rt_);
    id_ = std::exchange(o.id_, 0);
  }
  return *this;
}

NPURT_DECL stream_graph::~stream_graph() {
  if (rt_) rt_->release_graph(id_);
}

NPURT_DECL const detail::graph_state* stream_graph::state(std::error_code& ec, std::string& why) const {
  ec.clear();
  if (!rt_) {
    ec = make_error_code(errc::invalid_graph);
    why =
        "the graph is null (default-constructed, moved from, or it outlived its system): make one with "
        "stream::end_capture()";
    return nullptr;
  }
  if ((ec = rt_->check_thread())) return nullptr;
  const detail::graph_state* g = rt_->find_graph(id_);
  if (!g || g->lost) {
    ec = make_error_code(errc::invalid_graph);
    why = "the graph's device was reset, which destroys its captured work: capture it again";
    return nullptr;
  }
  return g;
}

NPURT_DECL bool stream_graph::valid() const noexcept {
  std::error_code ec;
  std::string why;
  try {
    return state(ec, why) != nullptr;
  } catch (...) {  // no memory for the words: it is not usable either way
    return false;
  }
}

NPURT_DECL std::size_t stream_graph::size() const {
  std::error_code ec;
  std::string why;
  const detail::graph_state* g = state(ec, why);
  if (!g) throw_error(ec, "npurt::stream_graph::size" + (why.empty() ? why : ": " + why));
  return g->nodes.size();
}

NPURT_DECL device_id stream_graph::device() const {
  std::error_code ec;
  std::string why;
  const detail::graph_state* g = state(ec, why);
  if (!g) throw_error(ec, "npurt::stream_graph::device" + (why.empty() ? why : ": " + why));
  return g->device;
}

NPURT_DECL event stream_graph::launch(stream& s, std::error_code& ec, std::string& words) {
  std::string why;
  const detail::graph_state* g = state(ec, why);
  detail::stream_state* ss = nullptr;
  if (g) {
    if (s.rt_ != rt_) {
      ec = make_error_code(errc::invalid_stream);
      why = s.rt_ ? "the stream belongs to another npurt::system" : "";
    } else if ((ss = s.state(ec)) && ss->device != g->device) {
      ec = make_error_code(errc::stream_device_mismatch);
      why = "the graph was captured on device " + std::to_string(g->device) + ", the stream is of device " +
            std::to_string(ss->device) + " (launch it on a stream of its device)";
    } else if (ss && rt_->backend().status(ss->device) == device_status::lost) {
      ec = make_error_code(errc::device_lost);
    }
  }
  if (!ec) {
    const auto [seq, task] = rt_->launch_graph(id_, *ss, ec, why);
    if (!ec) return seq == 0 ? event() : detail::event_access::task_event(*rt_, ss->id, seq, task);
  }
  if (ec == errc::invalid_stream && why.empty()) {
    words = s.refusal("npurt::stream_graph::launch", ec, {});
    return {};
  }
  words = "npurt::stream_graph::launch";
  if (!why.empty()) words.append(": ").append(why);
  return {};
}

NPURT_DECL event stream_graph::launch(stream& s, std::error_code& ec) {
  std::string words;
  event e = launch(s, ec, words);
  if (ec && rt_ && ec != errc::wrong_thread) (void)detail::note_refusal(*rt_, s.device_or_none(), words, ec, {});
  return e;
}

NPURT_DECL void stream_graph::update(stream_graph& from, std::error_code& ec, std::string& words) {
  std::string why;
  if (state(ec, why)) {
    if (from.rt_ && from.rt_ != rt_) {
      ec = make_error_code(errc::invalid_graph);
      why = "the update is a graph of another npurt::system";
    } else if (from.rt_ && from.id_ == id_) {
      ec = make_error_code(errc::invalid_argument);
      why = "a graph cannot be updated from itself";
    } else if (from.state(ec, why)) {
      rt_->update_graph(id_, from.id_, ec, why);
      if (!ec) from = stream_graph{};  // its nodes are this graph's now; its streams go
    } else {
      why = "the update: " + why;
    }
  }
  words = "npurt::stream_graph::update";
  if (!why.empty()) words.append(": ").append(why);
}

NPURT_DECL void stream_graph::update(stream_graph&& from, std::error_code& ec) {
  std::string words;
  update(from, ec, words);
  if (ec && rt_ && ec != errc::wrong_thread) rt_->note_recent_error(words);
}

NPURT_DECL void stream_graph::update(stream_graph&& from) {
  std::error_code ec;
  std::string words;
  update(from, ec, words);
  if (ec) throw_error(ec, words);
}

NPURT_DECL std::vector<std::uint64_t> detail::stream_graph_access::collective_task_ids(const stream_graph& g) {
  std::vector<std::uint64_t> ids;
  std::error_code ec;
  std::string why;
  const detail::graph_state* st = g.state(ec, why);
  if (!st) return ids;
  for (std::size_t i = 0; i < st->nodes.size() && i < st->last_ids.size(); ++i)
    if (st->nodes[i]->kind == task_kind::collective) ids.push_back(st->last_ids[i]);
  return ids;
}

NPURT_DECL event stream_graph::launch(stream& s) {
  std::error_code ec;
  std::string words;
  event e = launch(s, ec, words);
  if (ec) throw_error_on(s.device_or_none(), ec, words);
  return e;
}

}  // namespace npurt

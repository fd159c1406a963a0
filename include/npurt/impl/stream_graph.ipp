// npurt/impl/stream_graph.ipp
#pragma once

#include <npurt/stream_graph.hpp>

#include <algorithm>
#include <string>
#include <string_view>

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

NPURT_DECL std::vector<graph_node> stream_graph::nodes() const {
  std::error_code ec;
  std::string why;
  const detail::graph_state* g = state(ec, why);
  if (!g) throw_error(ec, "npurt::stream_graph::nodes" + (why.empty() ? why : ": " + why));
  std::vector<graph_node> out(g->nodes.size());
  std::vector<std::size_t> last(g->lane_count, 0);
  std::vector<bool> seen(g->lane_count, false);
  for (std::size_t i = 0; i < g->nodes.size(); ++i) {
    const detail::task& t = *g->nodes[i];
    graph_node& n = out[i];
    n.kind = t.kind;
    n.name = std::string(t.name);
    n.stream = g->lanes[i];
    if (t.extra && (t.kind == task_kind::memcpy || t.kind == task_kind::memset)) n.bytes = t.extra->copy.bytes;
    if (seen[n.stream]) n.dependencies.push_back(last[n.stream]);
    // A wait between streams: its extra names the record's node (see graph_state).
    if (t.kind == task_kind::event_wait && t.extra->target_stream != n.stream)
      n.dependencies.push_back(static_cast<std::size_t>(t.extra->target_seq));
    std::sort(n.dependencies.begin(), n.dependencies.end());
    last[n.stream] = i;
    seen[n.stream] = true;
  }
  return out;
}

NPURT_DECL std::string stream_graph::to_dot() const {
  const std::vector<graph_node> ns = nodes();
  const auto quoted = [](std::string_view text) {
    std::string q = "\"";
    for (const char c : text) {
      if (c == '"' || c == '\\') q += '\\';
      q += c;
    }
    return q + '"';
  };
  std::uint32_t streams = 1;
  for (const graph_node& n : ns) streams = std::max(streams, n.stream + 1);
  std::string dot = "digraph stream_graph {\n  rankdir=TB;\n  node [shape=box];\n";
  for (std::uint32_t lane = 0; lane < streams; ++lane) {
    dot += "  subgraph cluster_" + std::to_string(lane) + " {\n    label=" +
           quoted(lane == 0 ? std::string("stream 0 (the launch's)") : "stream " + std::to_string(lane)) + ";\n";
    for (std::size_t i = 0; i < ns.size(); ++i) {
      if (ns[i].stream != lane) continue;
      // The kind once when it is the name (records, waits).
      const std::string_view kind = to_string(ns[i].kind);
      std::string extra = kind == ns[i].name ? std::string() : std::string(kind);
      if (ns[i].bytes != 0) extra += ", " + std::to_string(ns[i].bytes) + " B";
      std::string label = std::to_string(i) + ": " + ns[i].name;
      if (!extra.empty()) label += " (" + extra + ")";
      dot += "    n" + std::to_string(i) + " [label=" + quoted(label) + "];\n";
    }
    dot += "  }\n";
  }
  for (std::size_t i = 0; i < ns.size(); ++i)
    for (const std::size_t d : ns[i].dependencies)
      dot += "  n" + std::to_string(d) + " -> n" + std::to_string(i) + ";\n";
  return dot + "}\n";
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

// --- task groups --------------------------------------------------------------------------

NPURT_DECL const detail::task_group_state* task_group::state(std::string& why) const {
  if (!rt_) {
    why =
        "the task group is null (default-constructed, or it outlived its system): make one with "
        "stream::end_task_group()";
    return nullptr;
  }
  const detail::task_group_state* tg = rt_->find_task_group(id_);
  const detail::graph_state* g = tg ? rt_->find_graph(tg->graph) : nullptr;
  if (!g || g->lost) {
    why = tg && tg->capture ? "the task group's capture is still open (end_capture first)"
                            : "the task group's graph was destroyed, its capture failed, or its device was reset";
    return nullptr;
  }
  return tg;
}

NPURT_DECL bool task_group::valid() const noexcept {
  try {
    std::string why;
    return rt_ && !rt_->wrong_thread() && state(why) != nullptr;
  } catch (...) {  // no memory for the words: it is not usable either way
    return false;
  }
}

NPURT_DECL std::vector<std::size_t> task_group::nodes() const {
  if (rt_) throw_if(rt_->check_thread(), "npurt::task_group::nodes");
  std::string why;
  const detail::task_group_state* tg = state(why);
  if (!tg) throw_error(make_error_code(errc::invalid_graph), "npurt::task_group::nodes: " + why);
  return tg->nodes;
}

NPURT_DECL std::size_t task_group::size() const { return nodes().size(); }

NPURT_DECL std::uint64_t stream::task_group_call(group_op op, const task_group* g, std::error_code& ec,
                                                 std::string& words) {
  static constexpr std::string_view calls[] = {"npurt::stream::begin_task_group", "npurt::stream::end_task_group",
                                               "npurt::stream::begin_task_update", "npurt::stream::end_task_update"};
  const std::string_view call = calls[static_cast<std::size_t>(op)];
  std::string why;
  std::uint64_t group = 0;
  if (detail::stream_state* s = state(ec)) {
    switch (op) {
      case group_op::begin_group: rt_->begin_task_group(*s, ec, why); break;
      case group_op::end_group: group = rt_->end_task_group(*s, ec, why); break;
      case group_op::begin_update:
        if (!g->rt_ || g->rt_ != rt_) {
          ec = make_error_code(errc::invalid_graph);
          why = g->rt_ ? "the task group belongs to another npurt::system"
                       : "the task group is null (default-constructed, or it outlived its system)";
        } else {
          rt_->begin_task_update(*s, g->id_, ec, why);
        }
        break;
      case group_op::end_update: rt_->end_task_update(*s, ec, why); break;
    }
  }
  if (ec == errc::capture_invalidated)
    words = std::string(call) + ": the update was invalidated by " + why;  // the call that broke it
  else if (ec) words = refusal(call, ec, why);
  return group;
}

namespace detail {
/// The error_code form of a task-group call: the words go to recent_error_message (note_refusal
/// leaves another thread's refusal to its caller).
inline void note_task_group_refusal(runtime* rt, std::int32_t device, const std::string& words, std::error_code ec) {
  if (ec && rt) (void)note_refusal(*rt, device, words, ec, {});
}
}  // namespace detail

NPURT_DECL void stream::begin_task_group(std::error_code& ec) {
  std::string words;
  task_group_call(group_op::begin_group, nullptr, ec, words);
  detail::note_task_group_refusal(rt_, device_or_none(), words, ec);
}

NPURT_DECL void stream::begin_task_group() {
  std::error_code ec;
  std::string words;
  task_group_call(group_op::begin_group, nullptr, ec, words);
  if (ec) throw_error_on(device_or_none(), ec, words);
}

NPURT_DECL task_group stream::end_task_group(std::error_code& ec) {
  std::string words;
  const std::uint64_t id = task_group_call(group_op::end_group, nullptr, ec, words);
  detail::note_task_group_refusal(rt_, device_or_none(), words, ec);
  return ec ? task_group{} : task_group(*rt_, id);
}

NPURT_DECL task_group stream::end_task_group() {
  std::error_code ec;
  std::string words;
  const std::uint64_t id = task_group_call(group_op::end_group, nullptr, ec, words);
  if (ec) throw_error_on(device_or_none(), ec, words);
  return task_group(*rt_, id);
}

NPURT_DECL void stream::begin_task_update(const task_group& g, std::error_code& ec) {
  std::string words;
  task_group_call(group_op::begin_update, &g, ec, words);
  detail::note_task_group_refusal(rt_, device_or_none(), words, ec);
}

NPURT_DECL void stream::begin_task_update(const task_group& g) {
  std::error_code ec;
  std::string words;
  task_group_call(group_op::begin_update, &g, ec, words);
  if (ec) throw_error_on(device_or_none(), ec, words);
}

NPURT_DECL void stream::end_task_update(std::error_code& ec) {
  std::string words;
  task_group_call(group_op::end_update, nullptr, ec, words);
  detail::note_task_group_refusal(rt_, device_or_none(), words, ec);
}

NPURT_DECL void stream::end_task_update() {
  std::error_code ec;
  std::string words;
  task_group_call(group_op::end_update, nullptr, ec, words);
  if (ec) throw_error_on(device_or_none(), ec, words);
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

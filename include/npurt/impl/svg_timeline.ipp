// npurt/impl/svg_timeline.ipp — write_svg(): window, rows, axis, bars per kind, legend.
#pragma once

#include <npurt/detail/trace_format.hpp>
#include <npurt/detail/trace_layout.hpp>
#include <npurt/error.hpp>
#include <npurt/profiler/svg_timeline.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace npurt {

NPURT_DECL std::string svg_options::check() const {
  auto within = [](double v, double lo, double hi) { return std::isfinite(v) && v >= lo && v <= hi; };
  if (!within(width, 200, 100000)) return "width must be a number of pixels from 200 to 100000";
  if (!within(label_width, 0, width)) return "label_width must be a number of pixels from 0 to the width";
  if (!within(row_height, 4, 200)) return "row_height must be a number of pixels from 4 to 200";
  if (title.size() > 1000) return "title must be at most 1000 bytes";
  if (max_bars == 0) return "max_bars must be at least 1";
  return {};
}

namespace detail {

struct bar_style {
  std::string_view label;
  std::string_view fill;
};

inline bar_style task_style(const trace_task& t) noexcept {
  switch (t.kind) {
    case task_kind::kernel: return {"kernel", "#4e79a7"};
    case task_kind::collective: return {"collective", "#e15759"};
    case task_kind::memset: return {"memset", "#9c755f"};
    case task_kind::host_callback: return {"host", "#76b7b2"};
    case task_kind::event_record:
    case task_kind::event_wait: return {"event", "#bab0ac"};
    case task_kind::value_write:
    case task_kind::value_wait: return {"value", "#d4a6c8"};
    case task_kind::memcpy:
      switch (t.engine) {
        case engine_kind::copy_h2d: return {"copy H2D", "#59a14f"};
        case engine_kind::copy_d2h: return {"copy D2H", "#f28e2b"};
        case engine_kind::host: return {"host", "#76b7b2"};
        default:
          if (t.src_device >= 0 && t.dst_device >= 0 && t.src_device != t.dst_device) return {"peer copy", "#ff9da7"};
          return {"copy D2D", "#b07aa1"};
      }
  }
  return {"other", "#79706e"};
}

inline std::string svg_num(double v) {
  std::string r;
  append_fixed(r, v, 2);
  return r;
}

/// Tick spacing: 1, 2 or 5 times a power of ten picoseconds, at most ~10 ticks over the span.
inline std::int64_t tick_step(std::int64_t span, int& decimals_exp) {
  std::int64_t mag = 1;
  decimals_exp = 0;
  for (;;) {
    for (std::int64_t m : {1, 2, 5}) {
      if (span / (m * mag) <= 10) return m * mag;
    }
    if (mag > std::numeric_limits<std::int64_t>::max() / 100) return mag * 10;
    mag *= 10;
    ++decimals_exp;
  }
}

inline std::string tick_label(std::int64_t t, int step_exp, std::int64_t span) {
  // The unit the span reads best in, and just enough decimals for the step.
  int span_exp = 0;
  for (std::int64_t v = span; v >= 10; v /= 10) ++span_exp;
  const int unit_exp = span_exp >= 12 ? 12 : span_exp >= 9 ? 9 : span_exp >= 6 ? 6 : span_exp >= 3 ? 3 : 0;
  const char* unit = unit_exp == 12  ? "s"
                     : unit_exp == 9 ? "ms"
                     : unit_exp == 6 ? "\xC2\xB5s"
                     : unit_exp == 3 ? "ns"
                                     : "ps";
  const int decimals = std::max(0, unit_exp - step_exp);
  std::string r;
  append_fixed(r, static_cast<double>(t) / std::pow(10.0, unit_exp), decimals);
  return r + " " + unit;
}

inline std::string bar_tip(std::string_view name, std::string_view what, sim_time a, sim_time b) {
  std::string tip{name};
  tip += " (";
  tip += what;
  tip += ") ";
  append_us(tip, a);
  tip += " .. ";
  append_us(tip, b);
  tip += " \xC2\xB5s";
  return tip;
}

class svg_writer {
 public:
  svg_writer(const trace_data& data, const svg_options& opts) : data_(data), opts_(opts), lay_(data) {}

  std::string write() {
    window();
    build_rows();
    aggregate_ = count_bars() > opts_.max_bars;
    pending_.assign(rows_.size(), {});
    o_.reserve(200 * (std::min(data_.tasks.size(), opts_.max_bars) * 2 + 64));
    header();
    row_backgrounds();
    axis();
    const auto order = time_order();
    tasks(order);
    if (opts_.engines) engines(order);
    if (opts_.links) links();
    if (opts_.host) host();
    legend();
    return std::move(o_);
  }

 private:
  /// A bar waiting to be merged with the next ones on its row (large traces only).
  struct pending_bar {
    bool open = false;
    std::string cls, fill, tip;
    double x0 = 0, x1 = 0, inset = 0;
    sim_time a{}, b{};
    std::uint64_t id = 0, count = 0;
  };
  struct row {
    int pid;
    int tid;
    std::string label;
    bool header;
  };

  /// The time window: everything drawn.
  void window() {
    t0_ = std::numeric_limits<std::int64_t>::max();
    t1_ = std::numeric_limits<std::int64_t>::min();
    auto widen = [&](sim_time a, sim_time b) {
      t0_ = std::min(t0_, ps(a));
      t1_ = std::max(t1_, ps(b));
    };
    for (const auto& t : data_.tasks) widen(t.start, t.end);
    if (opts_.links) {
      for (const auto& l : data_.links) widen(l.start, l.end);
      for (const auto& st : data_.steps) widen(st.start, st.end);
    }
    if (opts_.host)
      for (const auto& r : data_.ranges) widen(r.time, r.time);
    if (t0_ > t1_) t0_ = t1_ = 0;
    if (t1_ == t0_) {
      if (t1_ < std::numeric_limits<std::int64_t>::max()) ++t1_;
      else --t0_;
    }
    if (static_cast<std::uint64_t>(t1_) - static_cast<std::uint64_t>(t0_) >
        static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      throw_error(make_error_code(errc::invalid_argument), "npurt::write_svg: the trace spans more than 2^63 ps");
    left_ = opts_.label_width;
    plot_ = std::max(100.0, opts_.width - left_ - 20);
  }

  [[nodiscard]] double x_of(std::int64_t t) const {
    // Unsigned: t - t0 fits even when t is far from zero; the value is the same.
    const auto d = static_cast<std::uint64_t>(t) - static_cast<std::uint64_t>(t0_);
    return left_ + static_cast<double>(d) * plot_ / static_cast<double>(t1_ - t0_);
  }
  [[nodiscard]] double row_y(std::size_t r) const { return rows_top_ + opts_.row_height * static_cast<double>(r); }

  /// Rows: host lanes first, then each device's stream, engine, step and link tracks.
  void build_rows() {
    for (const auto& p : lay_.processes) {
      if (p.pid == 0 && !opts_.host) continue;
      std::vector<const trace_layout::track*> shown;
      for (const auto& t : p.tracks) {
        if (t.kind == track_kind::memory) continue;
        if (t.kind == track_kind::engine && !opts_.engines) continue;
        if ((t.kind == track_kind::link || t.kind == track_kind::step) && !opts_.links) continue;
        if (t.kind == track_kind::host && p.pid != 0) continue;
        shown.push_back(&t);
      }
      if (shown.empty()) continue;
      rows_.push_back({p.pid, -1, p.name, true});
      for (const auto* t : shown) {
        row_of_[{p.pid, t->tid}] = rows_.size();
        rows_.push_back({p.pid, t->tid, t->name, false});
      }
    }
    rows_bottom_ = rows_top_ + opts_.row_height * static_cast<double>(rows_.size());
    legend_y_ = rows_bottom_ + 22;
  }

  [[nodiscard]] std::size_t count_bars() const {
    std::size_t n = data_.tasks.size() * (opts_.engines ? 2 : 1);
    if (opts_.links) n += data_.steps.size() + data_.links.size();
    if (opts_.host) n += data_.ranges.size();
    return n;
  }

  /// The document, the title and a one-line digest.
  void header() {
    const double height = legend_y_ + 24;
    const std::string w = svg_num(opts_.width), h = svg_num(height);
    o_ += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
    o_ += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + w + "\" height=\"" + h + "\" viewBox=\"0 0 " + w +
          " " + h + "\" font-family=\"Helvetica, Arial, sans-serif\">\n";
    o_ += "<rect class=\"background\" x=\"0\" y=\"0\" width=\"" + w + "\" height=\"" + h + "\" fill=\"#ffffff\"/>\n";
    o_ += "<text class=\"title\" x=\"" + svg_num(left_ > 10 ? 10 : left_) +
          "\" y=\"20\" font-size=\"15\" font-weight=\"bold\" fill=\"#222\">";
    append_xml(o_, opts_.title);
    o_ += "</text>\n";
    std::set<device_id> devs;
    std::set<std::pair<device_id, std::uint32_t>> streams;
    for (const auto& t : data_.tasks) {
      devs.insert(t.device);
      streams.insert({t.device, t.stream});
    }
    std::string sub = std::to_string(data_.tasks.size()) + " tasks on " + std::to_string(devs.size()) +
                      (devs.size() == 1 ? " device, " : " devices, ") + std::to_string(streams.size()) +
                      (streams.size() == 1 ? " stream" : " streams") + " \xC2\xB7 virtual time ";
    append_us(sub, t0_);
    sub += " .. ";
    append_us(sub, t1_);
    sub += " \xC2\xB5s";
    o_ += "<text class=\"subtitle\" x=\"" + svg_num(left_ > 10 ? 10 : left_) +
          "\" y=\"38\" font-size=\"11\" fill=\"#555\">";
    append_xml(o_, sub);
    o_ += "</text>\n";
  }

  void row_backgrounds() {
    const double rh = opts_.row_height;
    o_ += "<g class=\"rows\">\n";
    for (std::size_t r = 0; r < rows_.size(); ++r) {
      const auto& rw = rows_[r];
      const double y = row_y(r);
      if (rw.header) {
        o_ += "<rect x=\"0\" y=\"" + svg_num(y) + "\" width=\"" + svg_num(opts_.width) + "\" height=\"" + svg_num(rh) +
              "\" fill=\"#e8ecf2\"/>\n";
        o_ += "<text x=\"6\" y=\"" + svg_num(y + rh * 0.72) + "\" font-size=\"12\" font-weight=\"bold\" fill=\"#222\">";
      } else {
        if (r % 2 == 0)
          o_ += "<rect x=\"0\" y=\"" + svg_num(y) + "\" width=\"" + svg_num(opts_.width) + "\" height=\"" +
                svg_num(rh) + "\" fill=\"#f7f7f7\"/>\n";
        o_ += "<text x=\"16\" y=\"" + svg_num(y + rh * 0.72) + "\" font-size=\"11\" fill=\"#333\">";
      }
      append_xml(o_, rw.label);
      o_ += "</text>\n";
    }
    o_ += "</g>\n";
  }

  /// Time axis: ticks over the rows, labels above them.
  void axis() {
    o_ += "<g class=\"axis\">\n";
    o_ += "<line x1=\"" + svg_num(left_) + "\" y1=\"" + svg_num(rows_top_) + "\" x2=\"" + svg_num(left_ + plot_) +
          "\" y2=\"" + svg_num(rows_top_) + "\" stroke=\"#888\" stroke-width=\"1\"/>\n";
    int step_exp = 0;
    const std::int64_t span = t1_ - t0_;
    const std::int64_t step = tick_step(span, step_exp);
    // The first multiple of step at or after t0, and how many fit up to t1: counted, so that no
    // addition can run past the largest time.
    const std::int64_t rem = t0_ % step;
    const std::int64_t first = rem == 0 ? t0_ : (t0_ > 0 ? t0_ + (step - rem) : t0_ - rem);
    const std::int64_t count = first > t1_ ? 0 : (t1_ - first) / step + 1;
    for (std::int64_t k = 0; k < count; ++k) {
      const std::int64_t t = first + k * step;
      const double x = x_of(t);
      o_ += "<line class=\"tick\" x1=\"" + svg_num(x) + "\" y1=\"" + svg_num(rows_top_ - 4) + "\" x2=\"" + svg_num(x) +
            "\" y2=\"" + svg_num(rows_bottom_) + "\" stroke=\"#d8d8d8\" stroke-width=\"1\"/>\n";
      o_ += "<text class=\"tick-label\" x=\"" + svg_num(x) + "\" y=\"" + svg_num(rows_top_ - 7) +
            "\" font-size=\"10\" fill=\"#555\" text-anchor=\"middle\">";
      append_xml(o_, tick_label(t, step_exp, span));
      o_ += "</text>\n";
    }
    o_ += "</g>\n";
  }

  void rect(std::string_view cls, double x, double y, double w, double h, std::string_view fill, std::uint64_t id,
            sim_time a, sim_time b, std::string_view tip) {
    o_ += "<rect class=\"";
    o_ += cls;
    o_ += "\" x=\"" + svg_num(x) + "\" y=\"" + svg_num(y) + "\" width=\"" + svg_num(w) + "\" height=\"" + svg_num(h) +
          "\" fill=\"";
    o_ += fill;
    o_ += "\" stroke=\"#ffffff\" stroke-width=\"0.6\" data-id=\"" + std::to_string(id) + "\" data-start=\"" +
          std::to_string(ps(a)) + "\" data-end=\"" + std::to_string(ps(b)) + "\"><title>";
    append_xml(o_, tip);
    o_ += "</title></rect>\n";
  }

  void bar(std::string_view cls, std::size_t r, sim_time a, sim_time b, std::string_view fill, std::string_view label,
           const std::string& tip, std::uint64_t id, double inset) {
    const double x = x_of(ps(a));
    const double w = std::max(x_of(ps(b)) - x, 1.0);
    if (aggregate_) return merge(cls, r, x, w, a, b, fill, tip, id, inset);
    const double y = row_y(r) + inset;
    const double h = opts_.row_height - 2 * inset;
    rect(cls, x, y, w, h, fill, id, a, b, tip);
    // A name fits inside the bar at about 6 px per character of 10 px text.
    if (!label.empty() && w > 6.0 * static_cast<double>(label.size()) + 6) {
      o_ += "<text class=\"bar-label\" x=\"" + svg_num(x + 3) + "\" y=\"" + svg_num(y + h * 0.5 + 3.5) +
            "\" font-size=\"10\" fill=\"#fff\">";
      append_xml(o_, label);
      o_ += "</text>\n";
    }
  }

  /// Large traces: a bar that starts within a pixel of the previous one on its row (of the same
  /// class and inset) extends it, so a row holds at most about one bar per pixel.
  void merge(std::string_view cls, std::size_t r, double x, double w, sim_time a, sim_time b, std::string_view fill,
             const std::string& tip, std::uint64_t id, double inset) {
    auto& p = pending_[r];
    if (p.open && p.cls == cls && p.inset == inset && x <= p.x1 + 1.0) {
      p.x1 = std::max(p.x1, x + w);
      p.b = std::max(p.b, b);
      ++p.count;
      return;
    }
    flush(r);
    p = {true, std::string{cls}, std::string{fill}, tip, x, x + w, inset, a, b, id, 1};
  }

  void flush(std::size_t r) {
    auto& p = pending_[r];
    if (!p.open) return;
    p.open = false;
    std::string tip = p.tip;
    if (p.count > 1) {
      tip = std::to_string(p.count) + " bars ";
      append_us(tip, p.a);
      tip += " .. ";
      append_us(tip, p.b);
      tip += " \xC2\xB5s";
    }
    rect(p.cls, p.x0, row_y(r) + p.inset, p.x1 - p.x0, opts_.row_height - 2 * p.inset, p.fill, p.id, p.a, p.b, tip);
  }

  void end_group() {
    if (aggregate_)
      for (std::size_t r = 0; r < pending_.size(); ++r) flush(r);
    o_ += "</g>\n";
  }

  [[nodiscard]] std::vector<std::size_t> time_order() const {
    std::vector<std::size_t> order(data_.tasks.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      const auto& x = data_.tasks[a];
      const auto& y = data_.tasks[b];
      return std::tie(x.start, x.device, x.stream, x.id) < std::tie(y.start, y.device, y.stream, y.id);
    });
    return order;
  }

  /// Tasks on their streams; control tasks are ticks (waits that blocked are thin bars).
  void tasks(const std::vector<std::size_t>& order) {
    o_ += "<g class=\"tasks\">\n";
    for (auto i : order) {
      const auto& t = data_.tasks[i];
      auto r = row_of_.find({t.device + 1, trace_layout::stream_tid(t.stream)});
      if (r == row_of_.end()) continue;
      const auto style = task_style(t);
      const auto tip = bar_tip(data_.str(t.name), to_string(t.kind), t.start, t.end);
      if (t.engine == engine_kind::none) {
        if (!opts_.control) continue;
        bar("control", r->second, t.start, t.end, "#9a9a9a", {}, tip, t.id, opts_.row_height * 0.38);
        continue;
      }
      legend_.insert({style.label, style.fill});
      bar("task", r->second, t.start, t.end, style.fill, data_.str(t.name), tip, t.id, 2);
    }
    end_group();
  }

  void engines(const std::vector<std::size_t>& order) {
    o_ += "<g class=\"engines\">\n";
    for (auto i : order) {
      const auto& t = data_.tasks[i];
      if (t.engine == engine_kind::none) continue;
      auto r = row_of_.find({t.device + 1, lay_.task_tid[i]});
      if (r == row_of_.end()) continue;
      const auto style = task_style(t);
      bar("engine", r->second, t.start, t.end, style.fill, {},
          bar_tip(data_.str(t.name), to_string(t.engine), t.start, t.end), t.id, 3);
    }
    end_group();
  }

  void links() {
    o_ += "<g class=\"links\">\n";
    for (auto i : lay_.step_order) {
      const auto& st = data_.steps[i];
      auto r = row_of_.find({st.device + 1, lay_.step_tid[i]});
      if (r == row_of_.end()) continue;
      const std::string name = std::string{data_.str(st.op)} + " step " + std::to_string(st.step) + " \xE2\x86\x92 " +
                               endpoint_name(st.peer);
      bar("step", r->second, st.start, st.end, "#f1a2a9", {}, bar_tip(name, data_.str(st.algorithm), st.start, st.end),
          st.collective, 3);
      legend_.insert({"collective step", "#f1a2a9"});
    }
    for (std::size_t k = 0; k < lay_.link_order.size(); ++k) {
      const auto i = lay_.link_order[k];
      const auto& l = data_.links[i];
      auto r = row_of_.find({lay_.link_pid[i], lay_.link_tid[i]});
      if (r == row_of_.end()) continue;
      bar("link", r->second, l.start, l.end, "#8cd17d", {},
          bar_tip(lay_.link_names[lay_.link_key[i]], std::to_string(l.bytes) + " bytes", l.start, l.end), k, 3);
      legend_.insert({"link transfer", "#8cd17d"});
    }
    end_group();
  }

  /// Ranges become bars, nested ones inset a little more; marks are thin lines.
  void host() {
    const double rh = opts_.row_height;
    o_ += "<g class=\"host\">\n";
    std::map<std::uint32_t, std::vector<const trace_host_range*>> open;
    for (const auto& hr : data_.ranges) {
      auto r = row_of_.find({0, trace_layout::host_tid(hr.lane)});
      if (r == row_of_.end()) continue;
      auto& stack = open[hr.lane];
      if (hr.op == host_range_op::push) {
        stack.push_back(&hr);
      } else if (hr.op == host_range_op::pop) {
        if (stack.empty()) continue;
        const auto* b = stack.back();
        stack.pop_back();
        const double inset = std::min(2.0 + 2.0 * static_cast<double>(stack.size()), rh * 0.4);
        bar("range", r->second, b->time, hr.time, stack.empty() ? "#edc948" : "#f4dc8c", data_.str(b->name),
            bar_tip(data_.str(b->name), "range", b->time, hr.time), hr.lane, inset);
        legend_.insert({"host range", "#edc948"});
      } else if (!aggregate_) {
        const double x = x_of(ps(hr.time));
        o_ += "<line class=\"mark\" x1=\"" + svg_num(x) + "\" y1=\"" + svg_num(row_y(r->second) + 1) + "\" x2=\"" +
              svg_num(x) + "\" y2=\"" + svg_num(row_y(r->second) + rh - 1) +
              "\" stroke=\"#b6992d\" stroke-width=\"2\"><title>";
        append_xml(o_, data_.str(hr.name));
        o_ += "</title></line>\n";
      }
    }
    end_group();
  }

  /// One swatch per kind of bar drawn, in a fixed order.
  void legend() {
    o_ += "<g class=\"legend\">\n";
    double x = left_;
    std::vector<std::pair<std::string_view, std::string_view>> items(legend_.begin(), legend_.end());
    if (opts_.control && std::any_of(data_.tasks.begin(), data_.tasks.end(),
                                     [](const trace_task& t) { return t.engine == engine_kind::none; }))
      items.push_back({"event record / wait", "#9a9a9a"});
    for (const auto& [label, fill] : items) {
      o_ += "<rect class=\"swatch\" x=\"" + svg_num(x) + "\" y=\"" + svg_num(legend_y_ - 9) +
            "\" width=\"12\" height=\"10\" fill=\"";
      o_ += fill;
      o_ +=
          "\"/>\n<text x=\"" + svg_num(x + 16) + "\" y=\"" + svg_num(legend_y_) + "\" font-size=\"11\" fill=\"#333\">";
      append_xml(o_, label);
      o_ += "</text>\n";
      x += 16 + 6.5 * static_cast<double>(label.size()) + 18;
    }
    o_ += "</g>\n</svg>\n";
  }

  static constexpr double rows_top_ = 48 + 22;  // title, then the axis labels

  const trace_data& data_;
  const svg_options& opts_;
  const trace_layout lay_;
  std::string o_;
  std::int64_t t0_ = 0, t1_ = 0;
  double left_ = 0, plot_ = 0, rows_bottom_ = 0, legend_y_ = 0;
  std::vector<row> rows_;
  std::map<std::pair<int, int>, std::size_t> row_of_;
  std::set<std::pair<std::string_view, std::string_view>> legend_;
  bool aggregate_ = false;
  std::vector<pending_bar> pending_;
};

}  // namespace detail

NPURT_DECL void write_svg(std::ostream& os, const trace_data& data, const svg_options& opts) {
  if (const auto why = opts.check(); !why.empty())
    throw_error(make_error_code(errc::invalid_argument), "npurt::write_svg: " + why);
  const std::string o = detail::svg_writer{data, opts}.write();
  os.write(o.data(), static_cast<std::streamsize>(o.size()));
}

}  // namespace npurt

// Observers against the lifetime of their system: destroyed while attached, outliving it, and
// attaching or removing observers from inside a report.
#include <npurt/npurt.hpp>
#include <npurt/profiler/trace_reader.hpp>
#include <npurt/sim/sim.hpp>

#include <catch2/catch_test_macros.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

struct counter : npurt::observer {
  int tasks = 0, shutdowns = 0;
  void on_task(const npurt::task_info&) override { ++tasks; }
  void on_shutdown(npurt::sim_time) override { ++shutdowns; }
};

void launch(npurt::stream& s, int n) {
  for (int i = 0; i < n; ++i) s.launch(npurt::kernels::fixed{npurt::picoseconds{1'000'000}});
}

std::string trace_of(const npurt::profiler& p) {
  std::ostringstream out;
  p.write_chrome_trace(out);
  return out.str();
}

}  // namespace

TEST_CASE("an observer destroyed while attached is never reported to again", "[profiler][observer]") {
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  auto s = sys.device(0).make_stream();
  counter stays;
  sys.add_observer(stays);
  {
    counter gone;
    sys.add_observer(gone);
    launch(s, 2);
    sys.run();
    CHECK(gone.tasks == 2);
  }
  launch(s, 3);
  sys.run();
  CHECK(stays.tasks == 5);
}

TEST_CASE("a profiler declared after its system, as the profiler header shows it", "[profiler][observer]") {
  std::optional<npurt::system> sys;
  sys.emplace(npurt::sim::presets::ascend910(1));
  counter last;
  sys->add_observer(last);
  {
    npurt::profiler prof{[&] { return sys->now(); }};
    sys->add_observer(prof);
    auto s = sys->device(0).make_stream();
    launch(s, 2);
    sys->run();
    CHECK(prof.data().tasks.size() == 2);
  }
  sys.reset();  // reports the shutdown to the observers still attached, and only to them
  CHECK(last.shutdowns == 1);
}

TEST_CASE("an observer may outlive its system and still be read and destroyed", "[profiler][observer]") {
  auto prof = std::make_unique<npurt::profiler>();
  {
    npurt::system sys{npurt::sim::presets::ascend910(1)};
    sys.add_observer(*prof);
    auto s = sys.device(0).make_stream();
    launch(s, 2);
    sys.run();
  }
  CHECK(prof->data().tasks.size() == 2);
  CHECK(prof->data().shutdown.has_value());
  CHECK_FALSE(trace_of(*prof).empty());
  prof.reset();
}

TEST_CASE("an observer that removes itself inside a report leaves the others their reports", "[profiler][observer]") {
  struct leaver : npurt::observer {
    npurt::system* sys = nullptr;
    int tasks = 0;
    void on_task(const npurt::task_info&) override {
      ++tasks;
      sys->remove_observer(*this);
    }
  };
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  leaver first;
  first.sys = &sys;
  counter second, third;
  sys.add_observer(first);
  sys.add_observer(second);
  sys.add_observer(third);
  auto s = sys.device(0).make_stream();
  launch(s, 4);
  sys.run();
  CHECK(first.tasks == 1);
  CHECK(second.tasks == 4);
  CHECK(third.tasks == 4);
}

TEST_CASE("observers attached inside a report get the reports that follow", "[profiler][observer]") {
  struct spawner : npurt::observer {
    npurt::system* sys = nullptr;
    std::vector<std::unique_ptr<counter>> added;
    void on_task(const npurt::task_info&) override {
      // Enough of them that the system's list of observers has to grow.
      for (int i = 0; i < 16; ++i) {
        added.push_back(std::make_unique<counter>());
        sys->add_observer(*added.back());
      }
    }
  };
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  spawner sp;
  sp.sys = &sys;
  sys.add_observer(sp);
  auto s = sys.device(0).make_stream();
  launch(s, 3);
  sys.run();
  REQUIRE(sp.added.size() == 48);
  // Added during task k's report: they see the tasks after k, not k itself.
  CHECK(sp.added.front()->tasks == 2);
  CHECK(sp.added.back()->tasks == 0);
  sys.remove_observer(sp);
}

TEST_CASE("two profilers on one system record the same trace", "[profiler][observer]") {
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  npurt::profiler mine{[&] { return sys.now(); }};
  sys.add_observer(mine);
  (void)sys.profiler();
  auto s = sys.device(0).make_stream();
  launch(s, 3);
  sys.run();
  CHECK(trace_of(mine) == trace_of(sys.profiler()));
  npurt::profiler late{[&] { return sys.now(); }};
  sys.add_observer(late);
  launch(s, 2);
  sys.run();
  CHECK(late.data().tasks.size() == 2);
  CHECK(mine.data().tasks.size() == 5);
  // A profiler attached in the middle of a run writes a trace that reads back.
  std::error_code ec;
  std::string message;
  const auto back = npurt::read_chrome_trace(trace_of(late), ec, message);
  CHECK_FALSE(ec);
  CHECK(back.tasks.size() == 2);
  sys.remove_observer(mine);
  sys.remove_observer(late);
}

TEST_CASE("writing a trace where it cannot go says why", "[profiler][write]") {
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  auto s = sys.device(0).make_stream();
  launch(s, 1);
  sys.run();
  std::error_code ec;
  sys.profiler().write_chrome_trace("/nonexistent-npurt-dir/trace.json", ec);
  CHECK(ec == std::errc::no_such_file_or_directory);
  sys.profiler().write_chrome_trace("/", ec);
  CHECK(ec == std::errc::is_a_directory);
  sys.profiler().write_chrome_trace("/dev/full", ec);
  CHECK(ec == std::errc::io_error);
  try {
    sys.profiler().write_chrome_trace("/");
    FAIL("no exception");
  } catch (const npurt::error& e) { CHECK(e.code() == std::errc::is_a_directory); }
}

TEST_CASE("an SVG timeline is written to a path, and where it cannot go says why", "[profiler][write][svg]") {
  npurt::system sys{npurt::sim::presets::ascend910(1)};
  auto s = sys.device(0).make_stream();
  launch(s, 3);
  sys.run();
  const auto& prof = sys.profiler();
  std::ostringstream expect;
  prof.write_svg(expect);
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("npurt-svg-" + std::to_string(::getpid()) + ".svg");
  auto read_back = [&] {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  std::error_code ec = std::make_error_code(std::errc::io_error);
  prof.write_svg(path.string(), ec);
  CHECK_FALSE(ec);
  CHECK(read_back() == expect.str());
  prof.write_svg(path.string());
  CHECK(read_back() == expect.str());

  // Refused options: a typed error, and the file written before is still there.
  npurt::svg_options bad;
  bad.width = 1;
  CHECK_NOTHROW(prof.write_svg(path.string(), ec, bad));
  CHECK(ec == npurt::errc::invalid_argument);
  CHECK_THROWS_AS(prof.write_svg(path.string(), bad), npurt::caller_error);
  CHECK(read_back() == expect.str());
  std::filesystem::remove(path);

  CHECK_NOTHROW(prof.write_svg("/nonexistent-npurt-dir/timeline.svg", ec));
  CHECK(ec == std::errc::no_such_file_or_directory);
  CHECK_NOTHROW(prof.write_svg("/", ec));
  CHECK(ec == std::errc::is_a_directory);
  CHECK_NOTHROW(prof.write_svg("/dev/full", ec));
  CHECK(ec == std::errc::io_error);
  try {
    prof.write_svg("/");
    FAIL("no exception");
  } catch (const npurt::error& e) { CHECK(e.code() == std::errc::is_a_directory); }
}

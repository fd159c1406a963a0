// Crash safety: a writer process is ended in the middle of save() — at every byte it writes and
// at every step of the replace sequence (through the save probe, deterministically), and by
// SIGKILL after seeded random delays — and the loader must then find the old checkpoint or the
// new one, complete, never anything else.
#include "common.hpp"

#include <npurt/checkpoint.hpp>

#include <catch2/catch_test_macros.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <random>

using namespace ckpt_test;
using npurt::checkpoint;
using npurt::dtype;
using step_t = npurt::detail::save_step;

namespace {

constexpr int crashed_exit = 77;

checkpoint generation(std::int64_t step, std::size_t bytes) {
  checkpoint ck;
  ck.set_metadata("step", step);
  std::vector<std::uint8_t> w(bytes, static_cast<std::uint8_t>(step % 251));
  ck.add_tensor("w", dtype::u8, {static_cast<std::int64_t>(bytes)}, w);
  std::vector<std::int64_t> v(5, step);
  ck.add_tensor("v", dtype::i64, {5}, v);
  return ck;
}

/// True if `ck` is exactly generation(step, bytes) for its own step.
bool is_complete_generation(const checkpoint& ck, std::size_t bytes) {
  const auto step = ck.get_metadata<std::int64_t>("step");
  const checkpoint expect = generation(step, bytes);
  return ck.tensors().size() == 2 && ck.get_tensor("w") == expect.get_tensor("w") &&
         ck.get_tensor("v") == expect.get_tensor("v");
}

void remove_temporaries(const scratch_dir& dir) {
  for (const auto& name : dir.entries())
    if (name.starts_with(".npurt-ckpt-")) fs::remove(dir / name);
}

struct crash_point {
  step_t step;
  std::uint64_t bytes;  // for bytes_written: stop once this many bytes are written
};

/// Forks a child that saves `ck` to `path` and ends itself with _exit at `at`; returns the
/// child's exit status.
int save_and_crash(const checkpoint& ck, const fs::path& path, crash_point at) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    static crash_point target;
    target = at;
    auto& probe = npurt::detail::checkpoint_save_probe();
    probe.max_write = 1;  // one byte per write(2), so the crash can land after any byte
    probe.context = &target;
    probe.at = [](step_t s, std::uint64_t bytes, void* ctx) {
      const auto& t = *static_cast<const crash_point*>(ctx);
      if (s == t.step && (s != step_t::bytes_written || bytes == t.bytes)) ::_exit(crashed_exit);
    };
    std::error_code ec;
    ck.save(path, ec);
    ::_exit(ec ? 2 : 0);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  return status;
}

TEST_CASE("a writer that crashes after any byte or step of save leaves the old or the new checkpoint",
          "[checkpoint][crash]") {
  scratch_dir dir("crash-bytes");
  const fs::path path = dir / "model.ckpt";
  const std::size_t bytes = 700;
  const checkpoint old_ck = generation(1, bytes), new_ck = generation(2, bytes);
  old_ck.save(path);
  const std::uint64_t size = new_ck.serialize().size();

  std::vector<crash_point> points{{step_t::temp_created, 0}};
  for (std::uint64_t n = 1; n <= size; ++n) points.push_back({step_t::bytes_written, n});
  points.push_back({step_t::file_synced, 0});
  points.push_back({step_t::renamed, 0});
  points.push_back({step_t::directory_synced, 0});

  int saw_old = 0, saw_new = 0;
  for (const crash_point& at : points) {
    INFO("crash at step " << int(at.step) << " after " << at.bytes << " bytes");
    const int status = save_and_crash(new_ck, path, at);
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == crashed_exit);  // the crash happened where it was asked to
    std::error_code ec;
    const checkpoint got = checkpoint::load(path, ec);
    REQUIRE(!ec);
    const bool after_rename = at.step == step_t::renamed || at.step == step_t::directory_synced;
    const std::int64_t want = after_rename ? 2 : 1;
    REQUIRE(got.get_metadata<std::int64_t>("step") == want);
    REQUIRE(is_complete_generation(got, bytes));
    ++(after_rename ? saw_new : saw_old);
    // A crash leaves at most its own temporary file beside the checkpoint; it never counts.
    const auto entries = dir.entries();
    CHECK(entries.size() <= 2);
    CHECK(std::ranges::count(entries, std::string("model.ckpt")) == 1);
    remove_temporaries(dir);
    if (after_rename) old_ck.save(path);
  }
  CHECK(saw_old == static_cast<int>(size) + 2);
  CHECK(saw_new == 2);
}

TEST_CASE("a writer killed with SIGKILL at seeded random times never leaves a broken checkpoint",
          "[checkpoint][crash]") {
  scratch_dir dir("crash-kill");
  const fs::path path = dir / "train.ckpt";
  const std::size_t bytes = 256 * 1024;
  generation(0, bytes).save(path);
  std::mt19937_64 rng(20261130);  // the delays are the same on every run
  std::int64_t last_step = 0;
  for (int round = 0; round < 12; ++round) {
    const auto delay_us = static_cast<long>(rng() % 40000);
    int report[2];
    REQUIRE(::pipe(report) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(report[0]);
      // Reports each step after its save returned: from then on it must be the one loaded,
      // or a later one.
      for (std::int64_t step = last_step + 1;; ++step) {
        std::error_code ec;
        generation(step, bytes).save(path, ec);
        if (ec || ::write(report[1], &step, sizeof step) != sizeof step) ::_exit(2);
      }
    }
    ::close(report[1]);
    std::int64_t saved = 0;
    REQUIRE(::read(report[0], &saved, sizeof saved) == sizeof saved);  // the loop is running
    timespec ts{delay_us / 1000000, (delay_us % 1000000) * 1000};
    while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
    REQUIRE(::kill(pid, SIGKILL) == 0);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    REQUIRE(WIFSIGNALED(status));  // it was still writing: it never exits on its own
    for (std::int64_t s = 0; ::read(report[0], &s, sizeof s) == sizeof s;) saved = s;
    ::close(report[0]);
    INFO("round " << round << " after " << delay_us << " us; last completed save " << saved);
    std::error_code ec;
    const checkpoint got = checkpoint::load(path, ec);
    REQUIRE(!ec);
    REQUIRE(is_complete_generation(got, bytes));
    const auto step = got.get_metadata<std::int64_t>("step");
    CHECK(step >= saved);     // a save that returned is never lost
    CHECK(step <= saved + 1); // and only the save in progress may have landed since
    last_step = step;
    remove_temporaries(dir);
  }
}

}  // namespace

// npurt/sim/collective_engine.hpp — HCCL-style collectives on the simulated interconnect.
//
// Every rank's collective task reaches the engine when its stream (and the device's task
// scheduler) lets it start. An operation instance — one call number of one communicator, or
// one send/recv pair — starts moving data when its last rank has arrived; until then the
// ranks that came first wait for their peers (reported to observers as collective steps of
// algorithm "wait"). The instance then runs its algorithm as a sequence of phases, once per
// chunk of the communication buffer: a phase starts its peer transfers together on the
// device model's links (latency + bytes over fluidly shared bandwidth), and when the last one
// has landed each receiving rank reduces what it received on its vector cores (gamma seconds per
// byte, queued with the device's kernels by priority, never preempting one), then the next
// phase starts. On an uncontended network a phase therefore costs alpha + n_phase * beta +
// n_reduce * gamma exactly, and the whole instance its HCCL alpha-beta-gamma formula.
//
// In functional mode the results are computed when the instance ends, reducing rank by rank in
// rank order: every rank's result is the same bits, run after run.
#pragma once

#include <npurt/backend.hpp>
#include <npurt/collective_types.hpp>
#include <npurt/sim/preset.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace npurt::sim {

class device_model;

/// One peer transfer of a phase: participant indices and bytes.
struct coll_transfer {
  std::uint32_t src = 0;
  std::uint32_t dst = 0;
  double bytes = 0;
};
/// One phase: transfers that start together, then a local reduction of `reduce_bytes`.
struct coll_phase {
  std::vector<coll_transfer> transfers;
  double reduce_bytes = 0;
};

/// The phases of one chunk of `bytes` (the vector the formulas call n) for p participants
/// whose devices are `devices`. `root` is a participant index. `block_bytes(src, dst)` gives
/// all_to_allv's per-pair sizes (ignored by the other operations). Exposed for tests.
std::vector<coll_phase> plan_phases(const preset& p, collective_op op, collective_algorithm algo,
                                    const std::vector<device_id>& devices, double bytes, std::uint32_t root,
                                    const std::vector<std::vector<double>>* block_bytes = nullptr);

class collective_engine {
 public:
  collective_engine(device_model& model, const preset& p, bool functional);
  ~collective_engine();
  collective_engine(const collective_engine&) = delete;
  collective_engine& operator=(const collective_engine&) = delete;

  void attach(backend_host& host) noexcept { host_ = &host; }
  /// A collective task reached the device.
  void submit(task_info& t);
  /// A transfer the engine started on the device model has finished.
  void on_transfer(task_info& carrier, std::error_code ec);
  void abort(std::uint64_t comm);
  /// The end of an instant (backend::flush): fails the operations whose ranks' calls differ,
  /// each with a message that names every rank that reached it in the instant.
  void flush();
  /// Device reset (before the device model drops the device's jobs): the device's collective
  /// tasks are forgotten, never completed (the runtime drops their records), and every
  /// operation the device takes part in fails with errc::operation_aborted on its other ranks.
  void abort_device(device_id dev);
  /// The operations waiting for ranks that have not arrived: "all_reduce #3 of communicator
  /// 'dp' (id 1) waits for rank(s) 2 5", one per operation, '; ' between.
  [[nodiscard]] std::string describe() const;

 private:
  struct instance;
  struct carrier;
  struct task_track {
    std::uint32_t pending = 0;
    std::error_code error;
  };
  using key = std::tuple<std::uint64_t, std::uint32_t, std::uint32_t, std::uint64_t>;

  void arrive(const key& k, task_info& t, std::uint32_t call_index, std::uint32_t participant);
  void fail(instance& in, std::error_code ec, const std::string& message);
  void begin(instance& in);
  void run_phase(instance& in);
  void phase_done(instance& in);
  void finish(instance& in);
  void release_task(task_info& t, std::error_code ec);
  static void note_failure(task_info& t, const std::string& message);
  void compute(instance& in);
  static void on_timeout(void* self, std::uint64_t arg);
  static void on_complete(void* self, std::uint64_t arg);
  static void on_begin(void* self, std::uint64_t arg);
  void fail_mismatch(std::uint64_t id);
  static std::string mismatch_message(const instance& in);
  static std::string late_mismatch_message(const instance& in, std::uint32_t participant);
  carrier* new_carrier();

  device_model& model_;
  const preset& preset_;
  bool functional_;
  double gamma_;
  backend_host* host_ = nullptr;
  std::map<key, std::unique_ptr<instance>> instances_;
  std::unordered_map<std::uint64_t, instance*> by_id_;
  std::uint64_t next_id_ = 1;
  std::unordered_map<task_info*, task_track> tasks_;
  std::vector<std::unique_ptr<carrier>> carriers_;
  std::vector<carrier*> free_carriers_;
  std::vector<std::pair<task_info*, std::error_code>> done_;  // completions due at this instant
  std::vector<std::uint64_t> mismatched_;                      // instances flush() fails
};

}  // namespace npurt::sim

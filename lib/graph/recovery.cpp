// session::run_with_recovery: run() under the session's recovery strategy.
#include <npurt/graph/session.hpp>
#include <npurt/recovery.hpp>

#include <string>
#include <vector>

namespace npurt {

run_result session::run_with_recovery(const compiled_graph& c, const std::vector<feed>& inputs) {
  // The watchdog in force, not the preset's: the caller may have set their own.
  const picoseconds watchdog = sys_->get_backend().op_execute_timeout();
  bool short_watchdog = false;
  // An error is recovered from only when a later attempt of the same run succeeds: until then it
  // belongs to neither list.
  std::vector<std::error_code> seen;
  for (std::uint32_t attempt = 1;; ++attempt) {
    try {
      run_result r = run(c, inputs);
      if (short_watchdog) (void)sys_->get_backend().set_op_execute_timeout(watchdog);
      recovered_.insert(recovered_.end(), seen.begin(), seen.end());
      return r;
    } catch (const npurt::error& e) {
      if (short_watchdog) (void)sys_->get_backend().set_op_execute_timeout(watchdog);
      const std::error_code ec = e.code();
      seen.push_back(ec);
      const recovery_action act = recovery_.action_for(ec);
      const bool lost = sys_->get_backend().status(dev_->id()) == device_status::lost;
      if (lost || !is_retry(act) || attempt > recovery_.max_retries) {
        unrecovered_.insert(unrecovered_.end(), seen.begin(), seen.end());
        throw;
      }
      if (act == recovery_action::gc_and_retry) trigger_gc();
      if (act == recovery_action::retry_with_timeout)
        short_watchdog = !sys_->get_backend().set_op_execute_timeout(recovery_.retry_timeout);
      sleep_for(*sys_, recovery_.backoff_for(attempt));
    }
  }
}

}  // namespace npurt

// When the Executor captures a run and replays it (Backend::begin_capture, replay), and
// what it reports about it (Executor::capture_status, capture_line).
#include <string>
#include <string_view>

#include "runtime/executor_prepared.h"

namespace trainrt {

// Whether this run may be captured (Backend::begin_capture) or replay a capture, and the
// options a capture depends on (`key`): device memory the host never sees, no step on
// the host, every feed staged through pinned memory, no step hook unless it only queues
// work (StepHooks::queue_only), no profile or early stop, and a run of this plan
// before (the kernels' own one-time set-up, and the hooks' for the plan, not captured).
// Returns "" when it may, else why not (Executor::CaptureStatus::reason): a literal or a
// string of the plan, so that asking allocates nothing.
std::string_view Executor::capture_refusal(const Prepared& p, const RunOptions& ro, std::string& key) const {
  if (!opts_.capture) return "capture turned off";
  if (!backend_.can_capture()) return p.no_capture_backend;
  if (backend_.host_visible()) return "the backend's memory is host-visible";
  if (p.capture_failed) return p.capture.refused;
  if (p.host_steps) return p.no_capture_host;
  if (ro.profile) return "profiling (a synchronisation after each kernel)";
  if (ro.hooks_need_host()) return "step hooks that need the host (a host communicator)";
  if (ro.skip_state_writes) return "a run that skips state writes";
  if (p.runs == 0) return "the plan's first run (kernels' one-time set-up; captured from the second)";
  size_t staged = 0;
  for (const Tensor& t : p.staged) staged += !t.empty();
  if (p.feed_copies.size() != staged || staged != p.feed_values.size())
    return "a feed the backend reads in place (not staged)";
  key = std::string(ro.training ? "training" : "inference") + (ro.detect_anomaly ? " anomaly" : "");
  for (const std::string& c : ro.check_finite) key += " " + c;
  if (ro.has_hooks()) key += " hooks " + std::to_string(reinterpret_cast<uintptr_t>(ro.hooks->skip_flag()));
  return "";
}

Executor::CaptureStatus Executor::capture_status() const {
  if (!last_) return {};
  return last_->capture;
}

std::string capture_line(const Executor::CaptureStatus& s) {
  if (s.runs == 0) return "capture: not captured (no run)";
  if (s.captures == 0)
    return "capture: not captured (" + (s.reason.empty() ? std::string("no reason recorded") : s.reason) + ")";
  std::string line = "capture: step captured " +
                     (s.captures == 1 ? std::string("once") : std::to_string(s.captures) + " times") + ", replayed " +
                     std::to_string(s.replays) + (s.replays == 1 ? " time" : " times");
  if (!s.reason.empty()) line += "; the last run not captured (" + s.reason + ")";
  return line;
}

}  // namespace trainrt

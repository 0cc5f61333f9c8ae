// Step hooks: a caller's work between the steps of a run (RunOptions::hooks).
//
//   class Reader : public StepHooks {
//     void after_step(int step) override { ... Executor::value() of what `step` wrote ... }
//   };
//   Reader r;
//   RunOptions ro;
//   ro.hooks = &r;
//   executor.run(feeds, ro);        // r.after_step(k) after each plan step k
//
// Why: the executor runs one plan on one backend and knows nothing of what a caller does
// between its steps (the data-parallel code, distribution/data_parallel.h, starts a
// bucket's all-reduce after the step that writes its last gradient and waits for it
// before the optimizer). It asks the hooks only what decides how a run may go: whether
// they only queue work in stream order (then the run may go ahead of the host and be
// captured) and which flag the state writers skip on.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>

namespace trainrt {

class StepHooks {
 public:
  virtual ~StepHooks() = default;

  // Called once per run around its steps: before the first is issued and after the last
  // (or around the replay of a captured run, which calls no per-step hook), outside any
  // capture: where a caller does per-run work a captured step cannot (a copy from
  // pageable memory, a watch of the run's events).
  virtual void before_steps() {}
  virtual void after_steps() {}
  // Called before each plan step (index into Plan::steps) runs: where an optimizer step
  // waits for the all-reduce of the gradients it reads. An exception stops the run there.
  virtual void before_step(int step) {}
  // Called after each plan step with its outputs written: where a gradient bucket's
  // all-reduce starts. Executor::value() reads any live value from inside it (on an
  // asynchronous backend it synchronises first; a hook that reads nothing costs no
  // synchronisation).
  virtual void after_step(int step) {}

  // Whether the hooks (and skip_flag) only issue work in stream order (kernels, copies,
  // events, collectives on the backend's streams), never wait for the device or read its
  // memory on the host, and issue the same work every run of a plan: the run may then go
  // ahead of the host (Executor::launch) and be captured and replayed, the per-step hooks
  // called only while it is captured. Asked before each run.
  virtual bool queue_only() const { return false; }
  // A flag in the backend's memory (8 bytes, Backend::kAllFinite while all is well) that
  // the hooks' own device-side checks lower: every state writer gets it as
  // KernelContext::skip_if_flagged, unless the run's own checks give them theirs. The
  // hooks check Backend::skips_when_flagged. Null: none.
  virtual const uint64_t* skip_flag() const { return nullptr; }
};

// Hooks that call `f` after each step: a test or a diagnostic that reads the values a
// step wrote (Executor::value(), TrainingSession::value()).
class AfterEachStep final : public StepHooks {
 public:
  explicit AfterEachStep(std::function<void(int step)> f) : f_(std::move(f)) {}
  void after_step(int step) override { f_(step); }

 private:
  std::function<void(int step)> f_;
};

}  // namespace trainrt

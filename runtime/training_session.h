// A training step over a training graph: run the plan, state updated in place.
//
//   TrainingSession s(build_training_graph(forward, opts), make_backend("cpu"), {.seed = 0});
//   s.training().graph;                           // what runs: the fused training graph
//   double loss = s.step({{"input", x}, {"labels", y}}, /*lr=*/0.01f);
//   Graph trained = s.trained_forward(forward);   // same interface, updated initializers
//
// Why: parameters, optimizer state and BatchNormalization running statistics are
// initializers of the training graph, held in one persistent block. The plan
// (runtime/plan.h) is built on the first step for the batch's shapes and reused:
// optimizer updates write parameters and their state in place, the other updates
// (running statistics) are copied back after the step. Dropout masks derive from the
// session seed and the step number, so a run is reproducible. Each step checks the
// loss and every gradient for NaN/Inf right after it is computed and stops before
// any state is written (NumericalError); find_anomaly() reruns a step checking
// every node's output, to name the first node that produced one.
// The session runs the training graph after fuse_training_graph (passes/passes.h:
// BN+Relu, Conv+residual Add), unless `fuse` is off (for debugging, or to compare):
// fusion keeps every value a caller sees — parameters, state, gradients, loss — under
// its name, so checkpoints and trained_forward() do not depend on it. It changes
// node indices, which seed Dropout masks: the masks differ between fuse on and off.
#pragma once

#include <memory>
#include <optional>

#include "autodiff/training_graph.h"
#include "runtime/executor.h"
#include "runtime/loss_scaler.h"

namespace trainrt {

// The plan options of a training step: updates in place where kernels allow, state
// written only after every other node.
PlanOptions training_plan_options(const TrainingGraph& t);

struct SessionOptions {
  uint64_t seed = 0;                           // Dropout masks derive from it and the step number
  bool fuse = true;                            // fuse_training_graph first (off to compare or debug)
  bool fuse_dropout = true;                    // with fuse: its dropout_into_batchnorm (off to measure it)
  bool blocked_layouts = true;                 // ExecutorOptions::blocked_layouts
  MathPrecision math = MathPrecision::fp32;    // ExecutorOptions::math (bf16: mixed precision)
  ConvAlgorithm conv = ConvAlgorithm::direct;  // ExecutorOptions::conv
  bool concurrent_branches = false;            // ExecutorOptions::concurrent_branches
  // Used when the training graph has a loss-scale input (TrainingOptions::loss_scale_name).
  LossScalerOptions loss_scaling = {};
  EngineChooser* chooser = nullptr;  // ExecutorOptions::chooser (the caller keeps it alive)
};

class TrainingSession {
 public:
  TrainingSession(TrainingGraph t, std::unique_ptr<Backend> backend, SessionOptions o = {});
  ~TrainingSession();
  TrainingSession(TrainingSession&&) noexcept;

  // One step on a batch (model inputs + labels); returns the loss. Throws
  // NumericalError (state unchanged, step not counted) when the loss or a gradient
  // is not finite and check_finite is on.
  double step(const TensorMap& batch, float lr);
  // Graph outputs (logits, loss, updates) of the last step: views that the next step overwrites.
  const TensorMap& last_outputs() const;

  // Steps that do not wait for each other (Executor::launch): queue_step() issues a step
  // and returns while the device still runs it; finish_steps() waits for the queued steps
  // (one synchronisation) and returns their losses in order. A step whose checks failed
  // ends the list, `error` as step() would have thrown it; the steps queued after it wrote
  // no state, so state and steps_done() are those before it, and queue_step() does
  // nothing until finish_steps(). A step that cannot go ahead of the host (a host backend,
  // loss scaling, step hooks that are not queue-only, profiling, the session's first step) runs at
  // queue_step() as step() does, its loss kept in the same list. Dropout's seed follows
  // the step's number either way, so queued steps equal step()'s bit for bit.
  void queue_step(const TensorMap& batch, float lr);
  struct Finished {
    std::vector<double> losses;
    std::optional<NumericalError> error;  // of the step after the last loss
  };
  Finished finish_steps();
  int64_t queued_steps() const { return static_cast<int64_t>(finished_.losses.size()) + launched_; }
  bool queue_failed() const { return finished_.error.has_value(); }  // finish_steps() now

  // The training graph this session runs (fused unless `fuse` was off).
  const TrainingGraph& training() const { return t_; }
  // Where the steps run; its allocate() gives memory its kernels (and communicators) reach.
  const Backend& backend() const { return *backend_; }
  // Pinned host memory for batches (Executor::batch_pool): the data pipeline writes a
  // batch there (PipelineOptions::allocate) and the step's copy to the device reads it
  // where it lies. Null where the backend reads host memory at the call.
  HostPool* batch_pool();
  // Bytes of batches the host copied into the steps' own pinned buffers (feeds not written
  // in batch_pool() memory; Executor::host_staged_bytes).
  size_t host_staged_bytes() const;
  // The state's persistent buffer: the next step overwrites it (clone() to keep a copy).
  // Where the host cannot see the backend's memory (Backend::host_visible, cuda) a host
  // copy made by this call (a synchronisation): checkpoints and exports read it so.
  const Tensor& state(const std::string& name) const;
  int64_t steps_done() const { return steps_; }
  // The run seed the next step() draws its Dropout masks from (node_seed, ops/core/kernel.h).
  uint64_t next_run_seed() const { return run_options().seed; }
  // Loss scaling (a training graph with a loss-scale input): each step feeds the
  // scaler's scale; a step whose gradients are not finite is skipped (no state is
  // written, the step still counts) and the scale halves. The scaler's state is part
  // of state_names() ("loss_scaler.scale", "loss_scaler.good_steps"), so a checkpoint
  // resumes it. Without loss scaling a non-finite gradient is a NumericalError.
  bool loss_scaling() const { return !t_.loss_scale.empty(); }
  float loss_scale() const { return scaler_.scale(); }
  bool last_step_skipped() const { return last_skipped_; }
  int64_t skipped_steps() const { return skipped_; }
  // Everything a checkpoint must hold to continue exactly: the names of the
  // training graph's state (parameters, optimizer state, BatchNormalization
  // running statistics, optimizer.step, the loss scaler's), read with state() and restored with
  // set_state(); set_steps_done() restores the step counter that seeds Dropout.
  std::vector<std::string> state_names() const;
  void set_state(const std::string& name, const Tensor& value);  // copies into the persistent buffer
  // The checks set_state() makes (a state of this graph, its type and shape; a valid loss
  // scaler), without applying anything: a restore checks every tensor before it writes one.
  void check_state(const std::string& name, const Tensor& value) const;
  void set_steps_done(int64_t steps) { steps_ = steps; }
  // The forward graph with this session's trained initializers (parameters and
  // BatchNormalization running statistics); inputs, outputs and nodes unchanged.
  Graph trained_forward(const Graph& forward) const;

  // Loss and gradient checks of every step (on by default).
  void set_check_finite(bool on) { check_ = on; }
  // Reruns a step on `batch` (same seed as the next step) checking every float output,
  // without writing any state; returns the first fault, or nothing if the step is finite.
  std::optional<NumericalError> find_anomaly(const TensorMap& batch, float lr);
  // Per-node events of the following steps are appended here (nullptr: off).
  void set_profile(ProfileCollector* p) { profile_ = p; }
  // The step hooks of the following steps (RunOptions::hooks; null: none; the caller keeps
  // them alive). value() reads a live value from inside StepHooks::after_step, e.g. a
  // bucket's gradients at its ready_after_step; a NumericalError thrown by before_step (a
  // non-finite reduced gradient) stops the step like the session's own checks. Where the
  // hooks only queue work (StepHooks::queue_only), queue_step() launches steps with them.
  void set_step_hooks(StepHooks* h) { hooks_ = h; }
  // A live value's buffer (Executor::value): device memory where !backend().host_visible().
  const Tensor& value(const std::string& name) const { return exec_->value(name); }
  // Refuse plans needing more bytes than this (0: MemAvailable).
  void set_memory_limit(size_t bytes) { memory_limit_ = bytes; }
  // Bytes to count beside each new plan in that refusal (RunOptions::reserve_bytes).
  void set_memory_reserve(size_t bytes) { memory_reserve_ = bytes; }
  size_t memory_reserve() const { return memory_reserve_; }
  // Called once per step after its run has ended, with the run's results (host copies
  // where the host cannot see the backend's memory; RunOptions::copy_out among them),
  // before the updates not written in place are copied into the state; it returns the
  // step's loss (the data-parallel mean over the ranks). A NumericalError it throws ends
  // the step as a failed check does. For queued steps it is called by finish_steps(), in
  // order, up to the first that throws.
  void set_after_run(std::function<double(const TensorMap& results)> f) { after_run_ = std::move(f); }
  // RunOptions::copy_out of the following steps (the caller keeps the vector alive).
  void set_copy_out(const std::vector<std::pair<std::string, Tensor>>* v) { copy_out_ = v; }
  // Groups of values the plans lay out contiguously (Executor::set_contiguous): the
  // data-parallel gradient buckets. Setting one drops the plans built so far, and with
  // them last_outputs().
  void set_contiguous(std::function<std::vector<ContiguousGroup>(const Plan&)> f) {
    const bool drops = static_cast<bool>(f);
    exec_->set_contiguous(std::move(f));
    if (drops) last_ = nullptr;
  }
  // The plan of the last step (BadInput before the first).
  const Plan& plan() const { return exec_->plan(); }
  // What CUDA-graph capture did for the last step's plan (Executor::capture_status).
  Executor::CaptureStatus capture_status() const { return exec_->capture_status(); }
  // Bytes of the persistent block (parameters, optimizer and BN state).
  size_t persistent_bytes() const { return persistent_bytes_; }

 private:
  RunOptions run_options() const;
  void take_launched();                               // the launched steps' results into finished_
  double loss_of(const TensorMap& results) const;     // after_run_'s loss, or the result's
  double run_step(const TensorMap& batch, float lr);  // step(), without the check for queued steps
  const TensorMap& feeds_for(const TensorMap& batch, float lr);

  TrainingGraph t_;
  std::unique_ptr<Backend> backend_;
  uint64_t seed_;
  int64_t steps_ = 0;
  std::shared_ptr<std::byte[]> persistent_;
  size_t persistent_bytes_ = 0;
  std::unique_ptr<Executor> exec_;
  const TensorMap* last_ = nullptr;
  TensorMap feeds_;
  std::vector<std::string> check_names_;
  bool check_ = true;
  ProfileCollector* profile_ = nullptr;
  size_t memory_limit_ = 0;
  size_t memory_reserve_ = 0;
  StepHooks* hooks_ = nullptr;
  std::function<double(const TensorMap&)> after_run_;
  const std::vector<std::pair<std::string, Tensor>>* copy_out_ = nullptr;
  LossScaler scaler_;
  mutable Tensor scaler_scale_, scaler_good_;  // the scaler's state as tensors, refreshed by state()
  mutable TensorMap host_state_;               // state() copies where the host cannot see the backend's memory
  int64_t launched_ = 0;                       // steps launched on the executor and not yet collected
  Finished finished_;                          // steps queued and done, not yet handed out by finish_steps()
  TensorMap finished_last_;
  bool last_skipped_ = false;
  int64_t skipped_ = 0;
};

}  // namespace trainrt

// Runs a graph on a backend for given inputs.
//
//   auto backend = make_backend("cpu");
//   std::map<std::string, Tensor> out = run_graph(g, {{"input", x}}, *backend);   // one-shot
//
//   Executor ex(g, *backend);                         // repeated runs: planned once per shape
//   const TensorMap& y = ex.run({{"input", x}});      // views into the arena, valid until the next run
//
// Why: kernels get preallocated outputs, so the graph is first specialised to the
// feeds' shapes (symbolic batch dims become numbers, and the values of feeds read as
// shapes, e.g. Reshape's shape, become constants) and planned (runtime/plan.h):
// order, lifetimes, one arena. An Executor keeps the plan, the arena and every
// kernel's argument list per feed-shape signature, so a repeated run neither
// re-plans nor allocates graph values. run_graph is an Executor used once whose
// results own their buffers.
//
// Numerical faults: values named in RunOptions::check_finite (or every float
// output with detect_anomaly) are checked right after their node; a NaN/Inf stops
// the run before any later node and throws NumericalError naming node, op and value.
// On an asynchronous backend (cuda) the check runs on the device instead
// (Backend::flag_non_finite into a per-plan flag buffer) and the host reads the flags
// at the step's end. The checks before the first state write also lower one "any" flag
// that the state writers read on the device (KernelContext::skip_if_flagged): a bad
// value makes them write nothing, so the state is unchanged without a wait before them.
// Where a state writer's kernel cannot skip (Backend::skips_when_flagged), the host
// instead synchronises and reads the flags before the first state write. The error
// names the first node in plan order with a bad output, as on a host backend; kernels
// after that node (none writing state) may have run.
//
// Capture (ExecutorOptions::capture, a backend that can_capture: cuda's CUDA graphs): the
// second run of a plan is captured and replayed, and later runs with the same run options
// only replay it, one launch per run. What changes from run to run reaches the captured
// kernels through memory they read when they run: the batch through its pinned staging
// buffer, the learning rate as a feed, Dropout's seed from device memory
// (KernelContext::run_seed). Not captured: a plan with a step on the host, feeds the
// backend reaches directly (their addresses change), runs with step hooks that do more
// than queue work (StepHooks::queue_only: the data-parallel steps on a host
// communicator), profiling or skip_state_writes, and a plan whose capture the backend
// refused once (it then runs as issued).
//
// Synchronisation on an asynchronous backend: at the end of run(), before the first
// state write when checks are on and a writer cannot skip, in value() when kernels are
// queued on a backend whose memory the host sees (a step hook reading a value: once per
// hook that reads, not once per node) and after each kernel when profiling.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "graph/error.h"
#include "runtime/backend.h"
#include "runtime/host_pool.h"
#include "runtime/non_finite.h"
#include "runtime/plan.h"
#include "runtime/step_hooks.h"
#include "runtime/trace.h"

namespace trainrt {

using TensorMap = std::map<std::string, Tensor>;

struct RunOptions {
  bool training = false;
  uint64_t seed = 0;
  // Values to return besides the graph outputs (e.g. intermediates for tests).
  std::vector<std::string> extra_outputs;
  // Per-node events are appended here when set (runtime/trace.h).
  ProfileCollector* profile = nullptr;
  // NaN/Inf checks right after the producing node.
  std::vector<std::string> check_finite;
  bool detect_anomaly = false;  // check every float output
  // Stop before the first node that writes state in place (a diagnostic rerun).
  bool skip_state_writes = false;
  // Refuse a plan whose arena needs more bytes than this (0: Backend::available_bytes(),
  // the host's MemAvailable or the GPU's free memory).
  size_t memory_limit_bytes = 0;
  // Bytes the caller will allocate in the backend's memory beside this plan (the
  // data-parallel buckets): counted with the arena, the outputs and the staged feeds in
  // that refusal, so a run that would not fit stops before its first step.
  size_t reserve_bytes = 0;
  // The caller's work between the steps (runtime/step_hooks.h: the data-parallel
  // all-reduces), its skip flag, and whether it only queues work in stream order.
  StepHooks* hooks = nullptr;
  // Tensors in the backend's memory besides the plan's values (the data-parallel check
  // flags, mean loss and stop flag) that the run copies into host memory at its end and
  // returns with its results under their names, as it returns the loss. Read when the
  // run's last step has been issued, so the hooks may fill it during the run; the
  // caller keeps it alive while the run is in flight.
  const std::vector<std::pair<std::string, Tensor>>* copy_out = nullptr;

  // Whether the run has step hooks, and whether they need the host between the steps (not
  // StepHooks::queue_only): such a run is neither launched ahead nor captured.
  bool has_hooks() const { return hooks != nullptr; }
  bool hooks_need_host() const { return hooks && !hooks->queue_only(); }
};

// A NaN or Inf in a checked value; BadInput (exit 2): the data or the settings caused it.
class NumericalError : public Error {
 public:
  NumericalError(std::string node, std::string op, std::string value, size_t node_index, const std::string& message)
      : Error(ErrorKind::BadInput, message),
        node(std::move(node)),
        op(std::move(op)),
        value(std::move(value)),
        node_index(node_index) {}
  std::string node, op, value;
  size_t node_index;
};

// Copies `g` with graph input shapes taken from `feeds` and re-infers all shapes.
// A feed with the wrong dtype, rank or a fixed dimension that differs is BadInput.
// A graph input read as a shape input (graph/infer.h shape_input_slots: Reshape's
// shape, Pad's pads...) is specialised on its value too, as TensorRT does with shape
// tensors: the copy holds it as an initializer as well, so the shape rules read it.
// Shape computations then fold to initializers (passes/passes.h fold_shapes), except
// through the initializers in `variable` (training state).
Graph specialize(const Graph& g, const TensorMap& feeds, const std::set<std::string>& variable = {});

// The graph inputs of `g` that some node reads as a shape input (see specialize()).
std::vector<std::string> shape_feeds(const Graph& g);

TensorMap run_graph(const Graph& g, const TensorMap& feeds, const Backend& backend, const RunOptions& opts = {});

// How many copies of a host batch a plan holds in `b`'s memory: the staged buffer the
// step reads, and on an asynchronous backend two landing buffers taking turns (the next
// batch's copy overlaps the step before it).
inline size_t staged_copies(const Backend& b) { return b.asynchronous() ? 3 : 1; }

struct ExecutorOptions {
  PlanOptions plan;           // keep is extended by the graph outputs and RunOptions::extra_outputs
  bool poison_arena = false;  // tests: fill a new arena with 0xff (NaN) so reads of unwritten bytes show
  // Keep values blocked between kernels that take it (runtime/layout.h); false: all
  // Plain, every oneDNN kernel reorders at its boundary (tests compare the two).
  bool blocked_layouts = true;
  // Arithmetic of the convolution kernels (ops/core/kernel.h MathPrecision); storage stays
  // fp32 except values every reader rounds, where the backend declares it (runtime/narrow.h).
  MathPrecision math = MathPrecision::fp32;
  ConvAlgorithm conv = ConvAlgorithm::direct;  // ops/core/kernel.h
  // Run the plan's independent neighbouring steps two at a time (PlanOptions::
  // pair_branches, Backend::run_pair), e.g. a residual block's 1x1 skip convolution
  // beside its main branch. Results equal the serial run's up to the kernels' own
  // thread-count dependence (each kernel of a pair gets half the threads).
  bool concurrent_branches = false;
  // On a backend that can capture (cuda: CUDA graphs), capture a run once its plan has run
  // before and replay it while the feed shapes and run options stay the same: one launch
  // per step instead of one per kernel (Executor::run says when a run is not captured).
  bool capture = true;
  // Runs launch() may have in flight at once (the host buffers of each are allocated
  // with the plan: pinned batch copies, results, flags); a launch beyond it waits for the
  // oldest. TrainingSession sets 4.
  size_t max_in_flight = 1;
  // Given to every kernel as KernelContext::chooser (null: kernels time nothing). The
  // caller keeps it alive as long as the executor.
  EngineChooser* chooser = nullptr;
};

class Executor {
 public:
  // `g`'s initializers are shared, not copied: state written in place (PlanOptions::
  // state_updates) is visible through the caller's tensors. The backend must outlive this.
  Executor(Graph g, const Backend& backend, ExecutorOptions o = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Outputs (graph outputs, extra outputs) are views into the arena, or into state
  // for updates written in place; the next run overwrites them. Where the host cannot
  // see the backend's memory (Backend::host_visible: cuda) they are host copies, made
  // once per run at its end: the one place a run reads device memory besides the
  // NaN/Inf flags; updates written in place are not copied (their state's buffer).
  const TensorMap& run(const TensorMap& feeds, const RunOptions& ro = {});

  // Runs without waiting for them. launch() issues a run and returns while the backend
  // still runs it (an asynchronous backend the host cannot see: cuda), up to
  // ExecutorOptions::max_in_flight runs ahead (then it waits for the oldest one's end
  // event, not for the device); collect() waits for the runs launched since the last
  // collect() (one synchronisation) and returns their results in launch order, as host
  // copies. The checks of a run are read when it is collected: a run whose checks failed
  // ends the list, `error` names its first bad value as run() would have thrown it, and
  // the runs launched after it wrote no state (the "any check failed" flag stays lowered
  // until a collect()), so the state is the state before the failed run.
  // A run that cannot go ahead of the host (a host backend, an op on the host, step hooks
  // unless they only queue work, profiling, skip_state_writes, or checks where a
  // state writer cannot skip on the device) runs at its launch, after the runs before it; its results are kept in
  // the same list. run() while runs are in flight is an InternalError.
  void launch(const TensorMap& feeds, const RunOptions& ro = {});
  struct Collected {
    std::vector<TensorMap> results;       // one per run, up to the failed one
    std::optional<NumericalError> error;  // the run at results.size() failed its checks
  };
  Collected collect();
  size_t in_flight() const { return in_flight_.size(); }
  // The plan of the last run (BadInput before the first run).
  const Plan& plan() const;
  // A value's buffer in the current (or last) run; its bytes are only meaningful while
  // the value is live (Plan::values[...].def <= step <= last). BadInput for unknown names.
  // Intermediates may be Blocked16c (Tensor::layout(); to_plain() reads them). On an
  // asynchronous backend with kernels queued it synchronises first, so that the host
  // may read and write the bytes (a step hook); where the host cannot see the backend's
  // memory (Backend::host_visible) it does not: the caller copies in stream order.
  const Tensor& value(const std::string& name) const;
  // PlanOptions::contiguous for the plans built from now on. Setting one drops the plans
  // built so far (the next run builds its plan with the groups); clearing it keeps them.
  // InternalError while runs are in flight.
  void set_contiguous(std::function<std::vector<ContiguousGroup>(const Plan&)> f);
  // Plans built so far (one per feed-shape signature and option set; a feed read as a
  // shape input is part of the signature by value).
  size_t plans_built() const { return prepared_.size(); }
  // Where a batch should be written so that its copy to the device reads it where it lies
  // (runtime/host_pool.h): a feed whose buffer is one of this pool's is copied from it,
  // with no host copy into the run's own pinned buffer, and held until that run ended.
  // Null where the backend reads host memory at the call (synchronous backends).
  HostPool* batch_pool();
  // Bytes of feeds the host copied into the runs' pinned buffers (feeds not from
  // batch_pool()), since the executor was made.
  size_t host_staged_bytes() const { return host_staged_bytes_; }
  // What capture did for the last run's plan (ExecutorOptions::capture): how many of its
  // runs were captured (each one then replayed), how many only replayed the capture, and
  // why the last run was not captured or replayed ("" when it was). A capture the backend
  // refused (it threw while capturing: a synchronisation, a call it cannot record) keeps
  // its message in `refused`; the plan then runs as issued. `trainrt bench` prints it.
  struct CaptureStatus {
    size_t runs = 0;        // runs of the plan
    size_t captures = 0;    // runs captured (and run by replaying the capture)
    size_t replays = 0;     // later runs that only replayed it
    size_t uncaptured = 0;  // runs after the first neither captured nor replayed
    std::string reason;     // why the last run was neither; "" when it was
    std::string refused;    // the backend's refusal, where it refused
  };
  CaptureStatus capture_status() const;  // of the last run's plan; all zero before a run

 private:
  struct Prepared;
  Prepared& prepare(const TensorMap& feeds, const RunOptions& ro);
  // The compute and side streams' workspace.
  std::pair<size_t, size_t> plan_workspace(const Plan& plan, const std::vector<Layout>& layouts,
                                           const std::vector<char>& narrowed) const;
  KernelContext context_of(const Plan& plan, const PlanStep& st, std::vector<Tensor>& values) const;
  // A copy of host tensor `t` in the backend's memory (a constant it cannot reach).
  Tensor in_backend_memory(const Tensor& t) const;
  // The phases of run(), in order.
  void release_other_arenas(const Prepared& keep);
  void bind_slots(Prepared& p);
  void build_contexts(Prepared& p) const;
  void stage_feeds(Prepared& p, const TensorMap& feeds) const;
  bool choose_checks(Prepared& p, const RunOptions& ro) const;  // true: the check set changed
  Prepared& start(const TensorMap& feeds, const RunOptions& ro, size_t slot, bool& checking);
  void issue_inputs(Prepared& p, bool checking, bool fresh);
  void issue(Prepared& p, const RunOptions& ro, bool checking, bool fresh);
  void issue_outputs(Prepared& p, const RunOptions& ro, bool checking);
  void gather_results(Prepared& p);
  void run_now(Prepared& p, const RunOptions& ro, bool checking);
  bool deferrable(const Prepared& p, const RunOptions& ro, bool checking) const;
  void retire(size_t count);
  std::string_view capture_refusal(const Prepared& p, const RunOptions& ro, std::string& key) const;
  void run_steps(Prepared& p, const RunOptions& ro, bool checking);
  void run_kernel(Prepared& p, size_t s, NodeEvent* ev) const;
  static void check_outputs(const Prepared& p, size_t s);
  void flag_outputs(Prepared& p, size_t s) const;
  void fetch_flags(Prepared& p) const;
  struct Slot;
  Slot& run_slot(Prepared& p) const;
  static void read_flags(Prepared& p, size_t upto);
  // backend_.synchronize(), and nothing of this executor is queued any more.
  void sync() const;

  Graph graph_;
  const Backend& backend_;
  ExecutorOptions opts_;
  std::vector<std::string> shape_feeds_;  // plans are keyed on these feeds' values too
  std::set<std::string> state_;           // initializers updates write: never folded
  std::vector<std::unique_ptr<Prepared>> prepared_;
  Prepared* last_ = nullptr;
  mutable bool queued_ = false;  // kernels or copies issued since the last sync() (asynchronous backends)
  struct InFlight {
    Prepared* p;
    size_t slot;  // Prepared::ring index
    bool checking;
  };
  std::deque<InFlight> in_flight_;  // launched, not yet retired (oldest first)
  std::deque<TensorMap> done_;      // results of retired runs, not yet collected
  std::optional<NumericalError> error_;
  std::unique_ptr<HostPool> batch_pool_;  // batch_pool(), made on first use
  mutable size_t host_staged_bytes_ = 0;  // written by stage_feeds
};

// "capture: step captured once, replayed 9 times", "capture: not captured (WHY)", or the
// first with "; the last run not captured (WHY)" when later runs were not.
std::string capture_line(const Executor::CaptureStatus& s);

}  // namespace trainrt

#include "runtime/training_session.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>

#include "graph/error.h"
#include "ops/core/register_all.h"
#include "passes/fuse_util.h"
#include "passes/passes.h"

namespace trainrt {

namespace {

// Every state update is written by the plan in place: an update whose producer cannot
// write over its state (BatchNormalization's running statistics, computed in the forward
// pass) gets an Assign node, appended last so that no other node's index (Dropout's
// seed) moves. Like the optimizer's updates it runs after the step's checks and skips on
// a failed one, and the host copies nothing back after a step.
void assign_updates_in_place(TrainingGraph& t) {
  Graph& g = t.graph;
  const std::unordered_map<std::string, size_t> producer = g.producers();
  const auto no_dims = [](size_t) -> const std::vector<int64_t>* { return nullptr; };
  for (const auto& [produced, state] : t.updates) {
    auto it = producer.find(produced);
    if (it == producer.end()) continue;
    const Node& n = g.nodes[it->second];
    const size_t out = static_cast<size_t>(std::find(n.outputs.begin(), n.outputs.end(), produced) - n.outputs.begin());
    bool in_place = false;
    for (InPlacePair c : registry().kernels.in_place(n, no_dims, nullptr))
      in_place = in_place || (c.out == out && c.in < n.inputs.size() && n.inputs[c.in] == state);
    if (in_place) continue;
    std::string value = produced + ".value";
    while (g.find_info(value) || g.is_initializer(value)) value += "_";
    for (Node& m : g.nodes) {
      for (std::string& in : m.inputs)
        if (in == produced) in = value;
      for (std::string& o : m.outputs)
        if (o == produced) o = value;
    }
    if (const ValueInfo* info = g.find_info(produced)) g.values[value] = *info;
    Node assign;
    assign.name = produced + "/assign";
    assign.op_type = "Assign";
    assign.domain = kTrainrtDomain;
    assign.inputs = {state, value};
    assign.outputs = {produced};
    g.nodes.push_back(std::move(assign));
  }
}

}  // namespace

PlanOptions training_plan_options(const TrainingGraph& t) {
  PlanOptions o;
  o.state_updates = t.updates;
  o.state_writes_last = true;
  return o;
}

TrainingSession::TrainingSession(TrainingGraph t, std::unique_ptr<Backend> backend, SessionOptions o)
    : t_(std::move(t)), backend_(std::move(backend)), seed_(o.seed), scaler_(o.loss_scaling) {
  if (o.fuse) fuse_training_graph(t_.graph, o.fuse_dropout);
  // The ReLU's gradient read by the batch-norm gradient: a gain where the kernel masks dY
  // as it reads it (the cuda kernels); the host kernels would mask into a copy first,
  // which on the cpu backend costs more than the ReluGrad it replaces (7% of the main
  // job's step, measured with trainrt bench).
  if (o.fuse && backend_->asynchronous()) passes::fuse_relu_grad_into_bn_grad(t_.graph);
  assign_updates_in_place(t_);
  // One persistent block for every state tensor; the initializers become views into it.
  for (const auto& [produced, state] : t_.updates)
    persistent_bytes_ += align_up(t_.graph.initializers.at(state).nbytes());
  // The backend's memory (device memory for cuda), which the host reads after a run.
  persistent_ = backend_->allocate(std::max<size_t>(persistent_bytes_, kPlanAlignment));
  size_t at = 0;
  for (const auto& [produced, state] : t_.updates) {
    Tensor& init = t_.graph.initializers.at(state);
    Tensor view(init.dtype(), init.dims(), std::shared_ptr<std::byte[]>(persistent_, persistent_.get() + at));
    backend_->copy(view.raw(), init.raw(), init.nbytes());
    at += align_up(init.nbytes());
    init = view;
  }
  backend_->synchronize();  // the host tensors copied from may go
  for (const std::string& p : t_.params)
    if (auto it = t_.gradients.find(p); it != t_.gradients.end()) check_names_.push_back(it->second);
  if (!t_.loss.empty()) check_names_.push_back(t_.loss);
  ExecutorOptions eo;
  eo.plan = training_plan_options(t_);
  eo.blocked_layouts = o.blocked_layouts;
  eo.math = o.math;
  eo.conv = o.conv;
  eo.concurrent_branches = o.concurrent_branches;
  eo.chooser = o.chooser;
  eo.max_in_flight = 4;  // queue_step(): up to 4 steps ahead of the host
  exec_ = std::make_unique<Executor>(t_.graph, *backend_, eo);
}

TrainingSession::~TrainingSession() = default;
TrainingSession::TrainingSession(TrainingSession&&) noexcept = default;

const TensorMap& TrainingSession::last_outputs() const {
  static const TensorMap empty;
  return last_ ? *last_ : empty;
}

RunOptions TrainingSession::run_options() const {
  RunOptions ro;
  ro.training = true;
  ro.seed = seed_ * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(steps_ + launched_);
  if (check_) ro.check_finite = check_names_;
  ro.profile = profile_;
  ro.memory_limit_bytes = memory_limit_;
  ro.reserve_bytes = memory_reserve_;
  ro.hooks = hooks_;
  ro.copy_out = copy_out_;
  return ro;
}

// The batch plus lr, in a map reused across steps (no per-step allocation when the keys repeat).
const TensorMap& TrainingSession::feeds_for(const TensorMap& batch, float lr) {
  bool same = feeds_.size() == batch.size() + (t_.lr.empty() ? 0 : 1) + (t_.loss_scale.empty() ? 0 : 1);
  for (auto it = batch.begin(); same && it != batch.end(); ++it) same = feeds_.count(it->first) != 0;
  if (!same) feeds_.clear();
  for (const auto& [name, t] : batch) feeds_[name] = t;
  if (!t_.lr.empty()) {
    Tensor& l = feeds_[t_.lr];
    if (l.dtype() != DataType::Float32 || !l.dims().empty()) l = Tensor(DataType::Float32, {});
    l.data<float>()[0] = lr;
  }
  if (!t_.loss_scale.empty()) {
    Tensor& s = feeds_[t_.loss_scale];
    if (s.dtype() != DataType::Float32 || !s.dims().empty()) s = Tensor(DataType::Float32, {});
    s.data<float>()[0] = scaler_.scale();
  }
  return feeds_;
}

double TrainingSession::step(const TensorMap& batch, float lr) {
  if (queued_steps() > 0 || finished_.error)
    throw_internal("TrainingSession::step", "steps queued: finish_steps() first");
  return run_step(batch, lr);
}

double TrainingSession::run_step(const TensorMap& batch, float lr) {
  RunOptions ro = run_options();
  last_skipped_ = false;
  const TensorMap* ran = nullptr;
  double loss = 0;
  try {
    ran = &exec_->run(feeds_for(batch, lr), ro);
    loss = loss_of(*ran);  // may throw NumericalError: nothing below runs then
  } catch (const NumericalError& e) {
    // An overflow of the scaled backward pass: the check stopped the step before any
    // state was written; skip it and shrink the scale. A non-finite loss is a real fault.
    if (t_.loss_scale.empty() || e.value == t_.loss) throw;
    scaler_.overflow();
    last_skipped_ = true;
    ++skipped_;
    ++steps_;
    return backend_->to_host(exec_->value(t_.loss)).get_as_double(0);
  }
  const TensorMap& out = *ran;
  last_ = &out;
  if (!t_.loss_scale.empty()) scaler_.good_step();
  // Updates not written in place (BatchNormalization running statistics) are copied back.
  const Plan& plan = exec_->plan();
  for (const auto& [produced, state] : t_.updates) {
    if (plan.value(produced).storage == Storage::State) continue;
    const Tensor& from = out.at(produced);
    Tensor& to = t_.graph.initializers.at(state);
    if (from.nbytes() != to.nbytes()) throw_internal("TrainingSession::step", "update '" + produced + "' changed size");
    backend_->copy(to.raw(), from.raw(), to.nbytes());  // results are host memory: read at the call
  }
  ++steps_;
  return loss;
}

// A run's loss: the after-run hook's (which may throw NumericalError), else the result's.
double TrainingSession::loss_of(const TensorMap& results) const {
  return after_run_ ? after_run_(results) : results.at(t_.loss).get_as_double(0);
}

void TrainingSession::queue_step(const TensorMap& batch, float lr) {
  if (finished_.error) return;  // a failed step: nothing after it runs until finish_steps()
  const RunOptions ro = run_options();
  const bool now = !backend_->asynchronous() || backend_->host_visible() || exec_->plans_built() == 0 ||
                   !t_.loss_scale.empty() || ro.hooks_need_host() || profile_;
  if (now) {
    take_launched();
    if (finished_.error) return;
    try {
      finished_.losses.push_back(run_step(batch, lr));
      finished_last_ = last_outputs();
      last_ = &finished_last_;
    } catch (const NumericalError& e) {
      finished_.error = e;
    }
    return;
  }
  exec_->launch(feeds_for(batch, lr), ro);
  ++launched_;
}

void TrainingSession::take_launched() {
  if (launched_ == 0) return;
  Executor::Collected c = exec_->collect();
  launched_ = 0;
  // Every update is written in place by the plan (Assign): nothing to copy back after a step.
  const Plan& plan = exec_->plan();
  for (const auto& [produced, state] : t_.updates)
    if (plan.value(produced).storage != Storage::State)
      throw_internal("TrainingSession::queue_step", "update '" + produced + "' is not written in place");
  size_t good = 0;
  for (const TensorMap& out : c.results) {
    try {
      finished_.losses.push_back(loss_of(out));
    } catch (const NumericalError& e) {  // the runs after it wrote no state (the caller's skip flag)
      finished_.error = e;
      break;
    }
    ++good;
  }
  steps_ += static_cast<int64_t>(good);
  if (good) {
    finished_last_ = c.results[good - 1];
    last_ = &finished_last_;
  }
  if (c.error && !finished_.error) finished_.error = std::move(c.error);
}

TrainingSession::Finished TrainingSession::finish_steps() {
  take_launched();
  Finished f = std::move(finished_);
  finished_ = {};
  return f;
}

std::optional<NumericalError> TrainingSession::find_anomaly(const TensorMap& batch, float lr) {
  RunOptions ro = run_options();
  ro.check_finite.clear();
  ro.hooks = nullptr;  // a diagnostic rerun on this process alone: no step hooks
  ro.copy_out = nullptr;
  ro.detect_anomaly = true;
  ro.skip_state_writes = true;
  try {
    exec_->run(feeds_for(batch, lr), ro);
  } catch (const NumericalError& e) {
    return e;
  }
  return std::nullopt;
}

namespace {
constexpr const char* kScalerScale = "loss_scaler.scale";
constexpr const char* kScalerGood = "loss_scaler.good_steps";
}  // namespace

std::vector<std::string> TrainingSession::state_names() const {
  std::vector<std::string> names;
  for (const auto& [produced, state] : t_.updates) names.push_back(state);
  if (!t_.loss_scale.empty()) {
    names.push_back(kScalerScale);
    names.push_back(kScalerGood);
  }
  return names;
}

HostPool* TrainingSession::batch_pool() { return exec_->batch_pool(); }
size_t TrainingSession::host_staged_bytes() const { return exec_->host_staged_bytes(); }

const Tensor& TrainingSession::state(const std::string& name) const {
  if (!t_.loss_scale.empty() && (name == kScalerScale || name == kScalerGood)) {
    scaler_scale_ = Tensor(DataType::Float32, {});
    scaler_scale_.data<float>()[0] = scaler_.scale();
    scaler_good_ = Tensor(DataType::Int64, {});
    scaler_good_.data<int64_t>()[0] = scaler_.good_steps();
    return name == kScalerScale ? scaler_scale_ : scaler_good_;
  }
  const Tensor& t = t_.graph.initializers.at(name);
  if (backend_->host_visible()) return t;
  return host_state_[name] = backend_->to_host(t);  // device memory: a host copy, made now
}

void TrainingSession::check_state(const std::string& name, const Tensor& value) const {
  if (!t_.loss_scale.empty() && (name == kScalerScale || name == kScalerGood)) {
    const bool scale = name == kScalerScale;
    if (value.dtype() != (scale ? DataType::Float32 : DataType::Int64) || !value.dims().empty())
      throw_bad_input("state '" + name + "'", "must be a " + std::string(scale ? "float32" : "int64") + " scalar");
    const bool valid =
        scale ? value.data<float>()[0] > 0 && std::isfinite(value.data<float>()[0]) : value.data<int64_t>()[0] >= 0;
    if (!valid) throw_bad_input("state '" + name + "'", "is not a valid loss scaler state");
    return;
  }
  auto it = t_.graph.initializers.find(name);
  bool is_state = false;
  for (const auto& [produced, state] : t_.updates) is_state = is_state || state == name;
  if (it == t_.graph.initializers.end() || !is_state)
    throw_bad_input("state '" + name + "'", "is not a state of this training graph");
  if (it->second.dtype() != value.dtype() || it->second.dims() != value.dims())
    throw_bad_input("state '" + name + "'", "expected " + std::string(dtype_name(it->second.dtype())) + " " +
                                                dims_to_string(it->second.dims()) + ", got " +
                                                dtype_name(value.dtype()) + " " + dims_to_string(value.dims()));
}

void TrainingSession::set_state(const std::string& name, const Tensor& value) {
  check_state(name, value);
  if (!t_.loss_scale.empty() && (name == kScalerScale || name == kScalerGood)) {
    const bool scale = name == kScalerScale;
    scaler_.restore(scale ? value.data<float>()[0] : scaler_.scale(),
                    scale ? scaler_.good_steps() : value.data<int64_t>()[0]);
    return;
  }
  // The executor shares this buffer: write into it rather than replacing it.
  Tensor& dst = t_.graph.initializers.at(name);
  if (value.nbytes()) backend_->copy(dst.raw(), value.raw(), value.nbytes());
  host_state_.erase(name);
}

Graph TrainingSession::trained_forward(const Graph& forward) const {
  Graph g = forward;
  for (auto& [name, tensor] : g.initializers) {
    auto it = t_.graph.initializers.find(name);
    if (it != t_.graph.initializers.end()) tensor = backend_->to_host(it->second).clone();
  }
  return g;
}

}  // namespace trainrt

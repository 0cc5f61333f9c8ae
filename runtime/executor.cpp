// The Executor's entry points: specialising a graph to its feeds, run(), the phases
// before a run is issued, and run_graph. The rest of the Executor is in files named for
// what they hold: executor_plan_cache.cpp (plans per feed signature, their arenas and
// bindings), executor_issue.cpp (the issue loop: a run's steps, its inputs and outputs),
// executor_checks.cpp (the NaN/Inf checks), executor_capture.cpp (when a run is
// captured), executor_in_flight.cpp (the ring of runs in flight: launch, collect);
// executor_prepared.h the per-plan state they share.
#include "runtime/executor.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "graph/error.h"
#include "graph/infer.h"
#include "passes/passes.h"
#include "runtime/executor_prepared.h"

namespace trainrt {

namespace {
constexpr int64_t kMaxShapeFeed = 1024;  // a shape feed is copied into each plan's signature
}  // namespace

Graph specialize(const Graph& g, const TensorMap& feeds, const std::set<std::string>& variable) {
  Graph s = g;
  for (const std::string& in : g.inputs) {
    auto it = feeds.find(in);
    if (it == feeds.end()) throw_bad_input("input '" + in + "'", "is required but was not given");
    const Tensor& t = it->second;
    const ValueInfo& want = g.info(in);
    if (t.dtype() != want.dtype)
      throw_bad_input("input '" + in + "'",
                      std::string("expected ") + dtype_name(want.dtype) + ", got " + dtype_name(t.dtype()));
    if (want.shape) {
      bool ok = want.shape->size() == t.dims().size();
      for (size_t i = 0; ok && i < t.dims().size(); ++i)
        ok = !(*want.shape)[i].known() || (*want.shape)[i].value == t.dims()[i];
      if (!ok)
        throw_bad_input("input '" + in + "'",
                        "expected shape " + shape_to_string(*want.shape) + ", got " + dims_to_string(t.dims()));
    }
    s.values[in] = ValueInfo{t.dtype(), shape_of(t.dims())};
  }
  for (const auto& [name, t] : feeds)
    if (!s.find_info(name) || std::find(g.inputs.begin(), g.inputs.end(), name) == g.inputs.end())
      throw_bad_input("input '" + name + "'", "is not an input of the model");
  for (const std::string& in : shape_feeds(g)) {
    const Tensor& t = feeds.at(in);
    if (t.rank() > 1 || t.numel() > kMaxShapeFeed)
      throw_bad_input("input '" + in + "'", "is read as a shape and must be a scalar or 1-D of at most " +
                                                std::to_string(kMaxShapeFeed) + " values, got " +
                                                dims_to_string(t.dims()));
    s.initializers[in] = t.clone();
    if (std::find(s.initializer_inputs.begin(), s.initializer_inputs.end(), in) == s.initializer_inputs.end())
      s.initializer_inputs.push_back(in);
  }
  infer_shapes(s, registry().schemas, "");
  // Shape computations (and a shape the inference left open) fold now that shapes are known.
  if (has_shape_computation(s)) fold_shapes(s, registry().schemas, SimplifyOptions{.keep = {}, .variable = variable});
  return s;
}

std::vector<std::string> shape_feeds(const Graph& g) {
  std::set<std::string> inputs(g.inputs.begin(), g.inputs.end()), read;
  for (const Node& n : g.nodes)
    for (size_t slot : shape_input_slots(n))
      if (n.has_input(slot) && inputs.count(n.inputs[slot])) read.insert(n.inputs[slot]);
  std::vector<std::string> out;
  for (const std::string& in : g.inputs)
    if (read.count(in)) out.push_back(in);
  return out;
}

Executor::Executor(Graph g, const Backend& backend, ExecutorOptions o)
    : graph_(std::move(g)), backend_(backend), opts_(std::move(o)), shape_feeds_(shape_feeds(graph_)) {
  for (const auto& [produced, state] : opts_.plan.state_updates) state_.insert(state);
}

Executor::~Executor() = default;

HostPool* Executor::batch_pool() {
  if (!backend_.asynchronous()) return nullptr;
  if (!batch_pool_) batch_pool_ = std::make_unique<HostPool>(backend_);
  return batch_pool_.get();
}

const Plan& Executor::plan() const {
  if (!last_) throw_bad_input("Executor::plan", "no run yet");
  return last_->plan;
}

const Tensor& Executor::value(const std::string& name) const {
  if (!last_) throw_bad_input("Executor::value", "no run yet");
  auto it = last_->plan.index.find(name);
  if (it == last_->plan.index.end()) throw_bad_input("value '" + name + "'", "is not a value of the model");
  // The host reads (or a hook writes) it next; device memory the host cannot see is read
  // through copies in stream order instead (Backend::copy, to_host).
  if (queued_ && backend_.host_visible()) sync();
  return last_->slots[static_cast<size_t>(it->second)];
}

void Executor::set_contiguous(std::function<std::vector<ContiguousGroup>(const Plan&)> f) {
  if (!in_flight_.empty()) throw_internal("Executor::set_contiguous", "runs are in flight: collect() first");
  if (f) {
    sync();
    last_ = nullptr;
    prepared_.clear();
  }
  opts_.plan.contiguous = std::move(f);
}

void Executor::sync() const {
  backend_.synchronize();
  queued_ = false;
}

// The phases before a run is issued: its plan (bound), its checks, its slot's batch and seed.
Executor::Prepared& Executor::start(const TensorMap& feeds, const RunOptions& ro, size_t slot, bool& checking) {
  Prepared& p = prepare(feeds, ro);
  last_ = &p;
  if (!p.arena) {  // (re)bind buffers after a build or after another signature released them
    release_other_arenas(p);
    bind_slots(p);
    build_contexts(p);
    backend_.reserve_workspace(p.workspace, p.side_workspace);  // before the first run: no step allocates it
  }
  checking = ro.detect_anomaly || !ro.check_finite.empty();
  if (checking && choose_checks(p, ro)) p.captured.reset();
  p.current = slot;
  stage_feeds(p, feeds);
  if (backend_.asynchronous()) std::memcpy(run_slot(p).seed.get(), &ro.seed, sizeof(uint64_t));
  return p;
}

// A run issued and waited for (run(), and a launch() that cannot go ahead): throws
// NumericalError for a failed check; p.results holds its results.
void Executor::run_now(Prepared& p, const RunOptions& ro, bool checking) {
  issue(p, ro, checking, /*fresh=*/true);
  if (backend_.asynchronous()) {
    sync();  // results (and, on a host-visible backend, state and staged feeds) are the host's again
    if (checking) read_flags(p, p.plan.steps.size());
  }
  gather_results(p);
}

const TensorMap& Executor::run(const TensorMap& feeds, const RunOptions& ro) {
  if (!in_flight_.empty()) throw_internal("Executor::run", "runs launched and not collected");
  bool checking = false;
  Prepared& p = start(feeds, ro, 0, checking);
  run_now(p, ro, checking);
  return p.results;
}

TensorMap run_graph(const Graph& g, const TensorMap& feeds, const Backend& backend, const RunOptions& opts) {
  ExecutorOptions o;
  o.plan.kept_outside = true;  // results outlive this call; the arena does not
  Executor ex(g, backend, o);
  return ex.run(feeds, opts);
}

}  // namespace trainrt

#include "runtime/executor.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <new>
#include <set>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "graph/error.h"
#include "graph/infer.h"
#include "passes/passes.h"
#include "runtime/layout.h"
#include "runtime/narrow.h"

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

namespace {

std::string gib(size_t bytes) {
  std::ostringstream s;
  s.precision(bytes >= (size_t{1} << 30) ? 3 : 6);
  s << static_cast<double>(bytes) / static_cast<double>(size_t{1} << 30);
  return s.str();
}

}  // namespace

Tensor Executor::in_backend_memory(const Tensor& t) const {
  Tensor copy(t.dtype(), t.dims(), backend_.allocate(t.nbytes()));
  copy.set_layout(t.layout());
  backend_.copy(copy.raw(), t.raw(), t.nbytes());
  return copy;
}

// Asynchronous backends: the host memory of one run in flight (allocate_host: pinned for
// cuda), one slot per run launch() may have in flight (run() uses slot 0), all allocated
// by the plan's first run (Executor::run_slot): the batch's copy per staged feed, the seed, the results and the
// check flags copied back where the host cannot see the backend's memory, and the
// event on the compute stream after the run's last copy.
struct Executor::Slot {
  std::vector<std::shared_ptr<std::byte[]>> feeds;  // per feed (null: not staged)
  // Per feed: the caller's tensor when its buffer is from batch_pool(), copied from where
  // it lies, and held until the slot is reused (its run has ended by then).
  std::vector<Tensor> held;
  std::vector<std::shared_ptr<std::byte[]>> results;  // per result_values entry (null: not copied)
  std::shared_ptr<std::byte[]> seed, flags;
  // RunOptions::copy_out of the run in this slot: each tensor and its host copy (pinned,
  // allocated for every slot at once when a run first asks for them).
  std::vector<std::pair<std::string, Tensor>> out;
  std::vector<std::shared_ptr<std::byte[]>> out_host;
  Backend::Event done;
};

struct Executor::Prepared {
  // Signature: feed dtypes and dims (in graph input order) and the extra outputs.
  std::vector<DataType> feed_types;
  std::vector<std::vector<int64_t>> feed_dims;
  std::vector<Tensor> shape_values;  // the values of shape_feeds_ the plan was specialised on
  std::vector<std::string> extra;

  Plan plan;
  std::vector<Layout> layouts;  // per plan value (runtime/layout.h)
  std::vector<char> narrowed;   // per plan value: stored in 16 bits (runtime/narrow.h)
  std::shared_ptr<std::byte[]> arena;
  std::vector<Tensor> slots;   // one per plan value; kernels get pointers to these
  std::vector<Tensor> staged;  // per feed: its copy in backend memory, when the backend cannot reach it
  // Asynchronous backends: per feed, two landing buffers in backend memory taking turns
  // (run k lands in landing[k % 2]): the copy stream writes the next batch there while
  // the step before still runs, and the compute stream copies it into `staged`.
  std::vector<std::array<Tensor, 2>> landing;
  std::vector<const Kernel*> kernels;
  std::vector<KernelContext> contexts;                     // per step, built once: a run only sets training and seed
  std::vector<int> feed_values;                            // plan value of each graph input
  std::vector<std::pair<std::string, int>> result_values;  // returned name -> plan value
  std::vector<double> flops;                               // per step, for profiles
  TensorMap results;
  // Which outputs of each step are checked for NaN/Inf, for the check set below.
  std::vector<std::vector<char>> checked;
  std::vector<std::string> check_names;
  bool check_anomaly = false;
  bool check_ready = false;
  // Asynchronous backends: per step and output, the index of its flag in `flags` (-1:
  // unchecked), 8 bytes each in the backend's memory (Backend::flag_non_finite), reset
  // from `flags_init` at the start of each run; steps [0, flags_read) have been read.
  std::vector<std::vector<int>> flag_of;
  std::shared_ptr<std::byte[]> flags;
  std::vector<uint64_t> flags_init;
  std::shared_ptr<std::byte[]> flags_init_pinned;  // flags_init in allocate_host memory (asynchronous backends)
  // The flag of "some check before the first state write failed" (-1: none), which the
  // state writers read on the device (KernelContext::skip_if_flagged); set when every
  // state writer's kernel honours it, and then the step waits for nothing before them.
  int any_flag = -1;
  size_t flags_read = 0;
  // Asynchronous backends: the run's seed in backend memory (KernelContext::run_seed),
  // written from its slot's pinned copy; the batch copies to issue (landing <- pinned on
  // the copy stream, then staged <- landing on the compute stream).
  std::shared_ptr<std::byte[]> seed_device;
  struct FeedCopy {
    void* to;
    const void* from;
    size_t bytes;
    void* landing = nullptr;  // asynchronous backends: the landing buffer in between
  };
  std::vector<FeedCopy> feed_copies;
  // Asynchronous backends: the host memory of each run in flight (Executor::Slot).
  std::vector<Slot> ring;
  size_t current = 0;  // the slot of the run being issued
  // The landing buffers' turn for the next run, and per turn the compute stream's event
  // after it last copied out of them (the copy stream overwrites them after that only).
  size_t landing_turn = 0;
  std::array<Backend::Event, 2> landed;
  // The captured step (Backend::replay), the run options it was captured with, and
  // whether capturing failed (the backend refused something in it: never tried again).
  Backend::Captured captured;
  std::string capture_key;
  bool capture_failed = false;
  bool host_steps = false;  // some step runs on the host (Backend::runs_on_host): never captured
  // Why runs of this plan are not captured, where it is fixed for the plan (written when
  // it is built, so that a run allocates no reason: Executor::capture_refusal).
  std::string no_capture_backend;  // "the cpu backend cannot capture"
  std::string no_capture_host;     // "an op runs on the host: 'NODE' (OP)", the first of them
  // What capture did for this plan (Executor::capture_status): captures, replays, runs
  // not captured after the first and the last run's reason; the refusal's message.
  Executor::CaptureStatus capture;
  size_t workspace = 0;       // the kernels' scratch memory (Executor::plan_workspace)
  size_t side_workspace = 0;  // the side stream's, for the second steps of pairs
  size_t runs = 0;
};

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

Executor::Prepared& Executor::prepare(const TensorMap& feeds, const RunOptions& ro) {
  // A cached plan whose signature matches: no allocation on this path.
  for (auto& p : prepared_) {
    if (feeds.size() != graph_.inputs.size() || p->extra != ro.extra_outputs) continue;
    bool same = true;
    for (size_t i = 0; same && i < graph_.inputs.size(); ++i) {
      auto it = feeds.find(graph_.inputs[i]);
      same = it != feeds.end() && it->second.dtype() == p->feed_types[i] && it->second.dims() == p->feed_dims[i];
    }
    for (size_t i = 0; same && i < shape_feeds_.size(); ++i) {
      const Tensor &now = feeds.at(shape_feeds_[i]), &then = p->shape_values[i];
      same = now.nbytes() == then.nbytes() && std::memcmp(now.raw(), then.raw(), now.nbytes()) == 0;
    }
    if (same) return *p;
  }
  auto p = std::make_unique<Prepared>();
  Graph s = specialize(graph_, feeds, state_);
  if (opts_.blocked_layouts) add_layout_copies(s, backend_);  // before the 16-bit choice: copies may be narrowed
  for (const std::string& in : shape_feeds_) p->shape_values.push_back(feeds.at(in).clone());
  PlanOptions po = opts_.plan;
  po.pair_branches = po.pair_branches || opts_.concurrent_branches;
  for (const std::string& out : graph_.outputs) po.keep.push_back(out);
  for (const std::string& out : ro.extra_outputs) {
    if (!s.find_info(out) && !s.is_initializer(out))
      throw_bad_input("output '" + out + "'", "is not a value of the model");
    po.keep.push_back(out);
  }
  std::vector<std::string> updates;
  for (const auto& [produced, state] : po.state_updates) updates.push_back(produced);
  po.narrowed = choose_narrowed(s, po.keep, updates, backend_, opts_.math);
  p->plan = build_plan(s, po);
  const Plan& plan = p->plan;
  p->layouts =
      opts_.blocked_layouts ? choose_layouts(plan, backend_) : std::vector<Layout>(plan.values.size(), Layout::Plain);
  p->narrowed.assign(plan.values.size(), 0);
  for (size_t v = 0; v < plan.values.size(); ++v) p->narrowed[v] = po.narrowed.count(plan.values[v].name) > 0;
  for (const std::string& in : graph_.inputs) {
    p->feed_types.push_back(feeds.at(in).dtype());
    p->feed_dims.push_back(feeds.at(in).dims());
    p->feed_values.push_back(plan.index.at(in));
  }
  p->extra = ro.extra_outputs;

  // Memory refusal before the arena exists: the arena, the outputs, the feeds staged in
  // backend memory (staged_copies of each), the kernels' scratch memory and what the caller reserves (state is
  // allocated already).
  size_t staged = 0;
  for (const std::string& in : graph_.inputs)
    if (const Tensor& f = feeds.at(in); f.nbytes() && !backend_.reaches(f.raw()))
      staged += f.nbytes() * staged_copies(backend_);
  std::tie(p->workspace, p->side_workspace) = plan_workspace(plan, p->layouts, p->narrowed);
  const size_t need =
      plan.arena_bytes + plan.output_bytes + staged + p->workspace + p->side_workspace + ro.reserve_bytes;
  const size_t limit = ro.memory_limit_bytes ? ro.memory_limit_bytes : backend_.available_bytes();
  if (limit && need > limit)
    throw_bad_input("memory plan",
                    "needs " + gib(need) + " GiB, " + gib(limit) + " GiB available" +
                        (ro.memory_limit_bytes ? " (the set limit)" : " (" + backend_.available_source() + ")") +
                        " (arena " + gib(plan.arena_bytes) + ", outputs " + gib(plan.output_bytes) +
                        ", staged inputs " + gib(staged) + ", workspace " + gib(p->workspace + p->side_workspace) +
                        ", reserved " + gib(ro.reserve_bytes) + " GiB): use a smaller batch");
  prepared_.push_back(std::move(p));
  Prepared& r = *prepared_.back();
  r.slots.resize(plan.values.size());
  for (const std::string& name : graph_.outputs) r.result_values.push_back({name, plan.index.at(name)});
  for (const std::string& name : ro.extra_outputs) r.result_values.push_back({name, plan.index.at(name)});
  for (const PlanStep& st : plan.steps) {
    const Node& n = plan.graph.nodes[st.node];
    r.kernels.push_back(&backend_.kernel(n));
    const OpSchema* schema = registry().schemas.find(n.domain, n.op_type);
    r.flops.push_back(schema && schema->flops ? schema->flops(plan.graph, n) : 0.0);
  }
  return r;
}

// The scratch memory the plan's kernels need (Backend::workspace_bytes): the most one call
// needs, since the calls take it in turn; and, where pairs run at once
// (concurrent_branches), the most the second step of a pair needs, in a workspace of its
// own (Backend::run_pair). Asked with each step's arguments typed, shaped and laid out
// but without memory.
std::pair<size_t, size_t> Executor::plan_workspace(const Plan& plan, const std::vector<Layout>& layouts,
                                                   const std::vector<char>& narrowed) const {
  std::vector<Tensor> shaped(plan.values.size());
  for (size_t v = 0; v < plan.values.size(); ++v) {
    shaped[v] = Tensor(plan.values[v].dtype, plan.values[v].dims, nullptr);
    shaped[v].set_layout(layouts[v]);
    shaped[v].set_narrowed(narrowed[v] != 0);
  }
  auto need = [&](size_t s) { return backend_.workspace_bytes(context_of(plan, plan.steps[s], shaped)); };
  size_t most = 0, side = 0;
  for (size_t s = 0; s < plan.steps.size();) {
    const bool pair = opts_.concurrent_branches && s < plan.runs_with_next.size() && plan.runs_with_next[s];
    most = std::max(most, need(s));
    if (pair) side = std::max(side, need(s + 1));
    s += pair ? 2 : 1;
  }
  return {most, side};
}

// Step `st`'s kernel context on `values` (one tensor per plan value), with the executor's
// kernel options.
KernelContext Executor::context_of(const Plan& plan, const PlanStep& st, std::vector<Tensor>& values) const {
  KernelContext c{plan.graph.nodes[st.node], {}, {}};
  c.math = opts_.math;
  c.conv = opts_.conv;
  c.chooser = opts_.chooser;
  for (int v : st.inputs) c.inputs.push_back(v < 0 ? nullptr : &values[static_cast<size_t>(v)]);
  for (int v : st.outputs) c.outputs.push_back(v < 0 ? nullptr : &values[static_cast<size_t>(v)]);
  return c;
}

// One arena at a time: other signatures' arenas are released and come back on their next use.
void Executor::release_other_arenas(const Prepared& keep) {
  for (auto& q : prepared_) {
    if (q.get() == &keep || !q->arena) continue;
    q->arena.reset();
    q->results.clear();
    for (Tensor& t : q->slots) t = Tensor();
    q->staged.clear();
    q->landing.clear();
    q->ring.clear();
    q->landed = {};
    q->captured.reset();
    q->seed_device.reset();
  }
}

// Allocates `p`'s arena and points every slot at its buffer: arena values at their
// offsets, constants and state at their initializers, updates at their state.
void Executor::bind_slots(Prepared& p) {
  const Plan& plan = p.plan;
  p.arena = backend_.allocate(std::max<size_t>(plan.arena_bytes, kPlanAlignment));
  if (opts_.poison_arena) {
    const size_t n = std::max<size_t>(plan.arena_bytes, kPlanAlignment);
    if (backend_.host_visible()) {
      std::memset(p.arena.get(), 0xff, n);
    } else {
      const std::vector<std::byte> ff(n, std::byte{0xff});
      backend_.copy(p.arena.get(), ff.data(), n);
    }
  }
  for (size_t v = 0; v < plan.values.size(); ++v) {
    const PlannedValue& pv = plan.values[v];
    if (pv.storage == Storage::Arena) {
      p.slots[v] = Tensor(pv.dtype, pv.dims, std::shared_ptr<std::byte[]>(p.arena, p.arena.get() + pv.offset));
      p.slots[v].set_layout(p.layouts[v]);
      p.slots[v].set_narrowed(p.narrowed[v] != 0);
    } else if ((pv.storage == Storage::Constant || pv.storage == Storage::State) && pv.alias < 0) {
      const Tensor& init = plan.graph.initializers.at(pv.name);
      if (init.nbytes() && !backend_.reaches(init.raw())) {
        // State is written in place and read back by the caller: it must already live in
        // the backend's memory (TrainingSession allocates it there). A constant is copied in.
        if (pv.storage == Storage::State)
          throw_internal("state '" + pv.name + "'", "is not in the memory of backend " + backend_.name());
        p.slots[v] = in_backend_memory(init);
      } else {
        p.slots[v] = init;
      }
    }
  }
  for (size_t v = 0; v < plan.values.size(); ++v)  // updates written in place share their state's buffer
    if (plan.values[v].storage == Storage::State && plan.values[v].alias >= 0)
      p.slots[v] = p.slots[static_cast<size_t>(plan.values[v].alias)];
  p.staged.assign(p.feed_values.size(), Tensor());
  p.landing.assign(p.feed_values.size(), {});
  p.ring.clear();
  if (backend_.asynchronous()) p.seed_device = backend_.allocate(sizeof(uint64_t));
  p.host_steps = false;
  p.no_capture_host.clear();
  for (const PlanStep& st : plan.steps)
    if (const Node& n = plan.graph.nodes[st.node]; backend_.runs_on_host(n)) {
      if (!p.host_steps) p.no_capture_host = "an op runs on the host: '" + n.name + "' (" + n.op_type + ")";
      p.host_steps = true;
    }
  p.no_capture_backend = "the " + backend_.name() + " backend cannot capture";
}

// Each step's kernel arguments, built once per binding: pointers into the slots.
void Executor::build_contexts(Prepared& p) const {
  const Plan& plan = p.plan;
  p.contexts.clear();
  p.contexts.reserve(plan.steps.size());
  for (const PlanStep& st : plan.steps) {
    KernelContext& c = p.contexts.emplace_back(context_of(plan, st, p.slots));
    c.run_seed = p.seed_device ? reinterpret_cast<const uint64_t*>(p.seed_device.get()) : nullptr;
    c.node_index = st.node;
  }
}

// Points the graph inputs' slots at this run's feeds and gives the kept outputs fresh
// buffers the caller will own.
void Executor::stage_feeds(Prepared& p, const TensorMap& feeds) const {
  const Plan& plan = p.plan;
  const bool async = backend_.asynchronous();
  Slot* run = async ? &run_slot(p) : nullptr;
  p.feed_copies.clear();
  for (size_t i = 0; i < p.feed_values.size(); ++i) {
    const Tensor& feed = feeds.at(graph_.inputs[i]);
    Tensor& slot = p.slots[static_cast<size_t>(p.feed_values[i])];
    if (feed.nbytes() && !backend_.reaches(feed.raw())) {  // a host batch: staged in backend memory
      Tensor& staged = p.staged[i];
      if (staged.empty()) staged = Tensor(feed.dtype(), feed.dims(), backend_.allocate(feed.nbytes()));
      if (async) {  // through host memory the copy reads when it runs (the slot's last run has ended)
        const std::byte* pinned = nullptr;
        if (batch_pool_ && batch_pool_->owns(feed.raw(), feed.nbytes())) {  // written there by the data pipeline
          run->held[i] = feed;
          pinned = feed.raw();
        } else {
          run->held[i] = Tensor();
          std::memcpy(run->feeds[i].get(), feed.raw(), feed.nbytes());  // allocated with the slot (run_slot)
          host_staged_bytes_ += feed.nbytes();
          pinned = run->feeds[i].get();
        }
        for (Tensor& l : p.landing[i])  // both turns with the first run: none allocated later
          if (l.empty()) l = Tensor(feed.dtype(), feed.dims(), backend_.allocate(feed.nbytes()));
        p.feed_copies.push_back({staged.raw(), pinned, feed.nbytes(), p.landing[i][p.landing_turn].raw()});
      } else {
        backend_.copy(staged.raw(), feed.raw(), feed.nbytes());
      }
      slot = staged;
    } else {
      slot = feed;
    }
  }
  for (size_t v = 0; v < plan.values.size(); ++v) {  // kept values returned to a caller that owns them
    const PlannedValue& pv = plan.values[v];
    if (pv.storage != Storage::Output) continue;
    if (!backend_.host_visible()) {  // the caller gets host copies (run()): one device buffer, kept
      if (p.slots[v].empty())
        p.slots[v] = Tensor(pv.dtype, pv.dims,
                            backend_.allocate(static_cast<size_t>(element_count(pv.dims)) * dtype_size(pv.dtype)));
    } else if (async)
      p.slots[v] = Tensor(pv.dtype, pv.dims,
                          backend_.allocate(static_cast<size_t>(element_count(pv.dims)) * dtype_size(pv.dtype)));
    else
      p.slots[v] = Tensor(pv.dtype, pv.dims);
  }
}

// NaN/Inf checks: which outputs of which steps (kept until the check set changes).
bool Executor::choose_checks(Prepared& p, const RunOptions& ro) const {
  if (p.check_ready && p.check_anomaly == ro.detect_anomaly && p.check_names == ro.check_finite) return false;
  const Plan& plan = p.plan;
  std::set<int> named;
  for (const std::string& name : ro.check_finite) {
    auto it = plan.index.find(name);
    if (it == plan.index.end()) throw_bad_input("check_finite '" + name + "'", "is not a value of the model");
    named.insert(it->second);
  }
  p.checked.assign(plan.steps.size(), {});
  for (size_t s = 0; s < plan.steps.size(); ++s)
    for (int v : plan.steps[s].outputs)
      p.checked[s].push_back(v >= 0 && (named.count(v) || (ro.detect_anomaly &&
                                                           dtype_is_float(plan.values[static_cast<size_t>(v)].dtype))));
  p.check_names = ro.check_finite;
  p.check_anomaly = ro.detect_anomaly;
  p.check_ready = true;
  p.flag_of.assign(plan.steps.size(), {});
  p.flags_init.clear();
  if (!backend_.asynchronous()) return true;
  for (size_t s = 0; s < plan.steps.size(); ++s)
    for (char c : p.checked[s]) {
      p.flag_of[s].push_back(c ? static_cast<int>(p.flags_init.size()) : -1);
      if (c) p.flags_init.push_back(Backend::kAllFinite);
    }
  bool guard = plan.first_state_write >= 0;
  for (const PlanStep& st : plan.steps)
    guard = guard && (!st.writes_state || backend_.skips_when_flagged(plan.graph.nodes[st.node]));
  p.any_flag = guard ? static_cast<int>(p.flags_init.size()) : -1;
  if (guard) p.flags_init.push_back(Backend::kAllFinite);
  const size_t bytes = std::max<size_t>(p.flags_init.size() * sizeof(uint64_t), kPlanAlignment);
  p.flags = backend_.allocate(bytes);
  p.flags_init_pinned = backend_.allocate_host(bytes);
  std::memcpy(p.flags_init_pinned.get(), p.flags_init.data(), p.flags_init.size() * sizeof(uint64_t));
  for (Slot& slot : p.ring) slot.flags.reset();  // sized anew by run_slot()
  return true;
}

// Issues the copy of the check flags into host memory where the host cannot see them;
// they are read after the next sync().
void Executor::fetch_flags(Prepared& p) const {
  if (const auto& host = p.ring[p.current].flags)
    backend_.copy(host.get(), p.flags.get(), p.flags_init.size() * sizeof(uint64_t));
}

// The host buffers of the run being issued (Prepared::current).
Executor::Slot& Executor::run_slot(Prepared& p) const {
  // Every slot at once (ExecutorOptions::max_in_flight), with the staged feeds' copies:
  // nothing is allocated once the plan has run.
  const size_t depth = std::max<size_t>({opts_.max_in_flight, p.current + 1, 1});
  if (p.ring.size() < depth) p.ring.resize(depth);
  for (Slot& slot : p.ring) {
    if (slot.feeds.empty()) {
      slot.feeds.resize(p.feed_values.size());
      slot.held.resize(p.feed_values.size());
      for (size_t i = 0; i < p.feed_values.size(); ++i) {
        const size_t bytes = static_cast<size_t>(element_count(p.feed_dims[i])) * dtype_size(p.feed_types[i]);
        if (bytes) slot.feeds[i] = backend_.allocate_host(bytes);
      }
      slot.results.resize(p.result_values.size());
      slot.seed = backend_.allocate_host(sizeof(uint64_t));
      if (!backend_.host_visible())
        for (size_t i = 0; i < p.result_values.size(); ++i) {
          const PlannedValue& pv = p.plan.values[static_cast<size_t>(p.result_values[i].second)];
          // An update written in place is returned as its state's buffer: the state is read
          // through TrainingSession::state(), not copied out at every step.
          if (pv.storage != Storage::State) slot.results[i] = backend_.allocate_host(pv.bytes);
        }
    }
    if (p.flags && !backend_.host_visible() && !slot.flags)
      slot.flags = backend_.allocate_host(std::max<size_t>(p.flags_init.size() * sizeof(uint64_t), kPlanAlignment));
  }
  return p.ring[p.current];
}

// One kernel call; its profile event goes to `ev` (the caller appends events in plan
// order, also for a pair that ran at the same time).
void Executor::run_kernel(Prepared& p, size_t s, NodeEvent* ev) const {
  const Plan& plan = p.plan;
  const PlanStep& st = plan.steps[s];
  const Node& n = plan.graph.nodes[st.node];
  KernelContext& ctx = p.contexts[s];
  const int64_t t0 = ev ? now_ns() : 0;
  const bool async = backend_.asynchronous();
  if (async) queued_ = true;
  try {
    (*p.kernels[s])(ctx);
  } catch (const Error& e) {
    throw Error(e.kind(), describe_node(n, st.node) + ": " + e.what());
  } catch (const std::exception& e) {
    throw_internal(describe_node(n, st.node), e.what());
  }
  if (!ev) return;
  if (async) sync();  // the kernel's own time, not its launch's
  ev->name = n.name;
  ev->op = n.op_type;
  ev->node = st.node;
  ev->start_ns = t0;
  ev->end_ns = now_ns();
  ev->flops = p.flops[s];
  for (const Tensor* t : ctx.inputs) ev->input_shapes.push_back(t ? t->dims() : std::vector<int64_t>{});
  for (const Tensor* t : ctx.outputs) ev->output_shapes.push_back(t ? t->dims() : std::vector<int64_t>{});
}

namespace {

// Output `k` of step `s` holds a NaN (or Inf) first at element `bad` of its storage order.
NumericalError non_finite_output(const Plan& plan, const KernelContext& ctx, size_t s, size_t k, int64_t bad,
                                 bool nan) {
  const PlanStep& st = plan.steps[s];
  const Node& n = plan.graph.nodes[st.node];
  const std::string& value = n.outputs[k];
  // the row-major index a user can look up
  const int64_t element = storage_to_plain_index(ctx.outputs[k]->layout(), ctx.outputs[k]->dims(), bad);
  return NumericalError(n.name, n.op_type, value, st.node,
                        describe_node(n, st.node) + ": output '" + value + "' has " + (nan ? "NaN" : "Inf") +
                            " at element " + std::to_string(element) +
                            " (the run stopped before later nodes; state is unchanged)");
}

}  // namespace

// Throws NumericalError for the first checked output of step `s` holding a NaN or Inf.
void Executor::check_outputs(const Prepared& p, size_t s) {
  const KernelContext& ctx = p.contexts[s];
  for (size_t k = 0; k < p.checked[s].size(); ++k) {
    if (!p.checked[s][k]) continue;
    const int64_t bad = first_non_finite(*ctx.outputs[k]);
    if (bad >= 0) throw non_finite_output(p.plan, ctx, s, k, bad, std::isnan(ctx.outputs[k]->get_as_double(bad)));
  }
}

// The device-side check of step `s`'s checked outputs (asynchronous backends), read by read_flags.
void Executor::flag_outputs(Prepared& p, size_t s) const {
  auto* flags = reinterpret_cast<uint64_t*>(p.flags.get());
  const bool guards = p.any_flag >= 0 && static_cast<int>(s) < p.plan.first_state_write;
  for (size_t k = 0; k < p.flag_of[s].size(); ++k)
    if (const int f = p.flag_of[s][k]; f >= 0) {
      backend_.flag_non_finite(*p.contexts[s].outputs[k], flags + f);
      if (guards) backend_.flag_non_finite(*p.contexts[s].outputs[k], flags + p.any_flag);
    }
}

// After a synchronisation: throws NumericalError for the first flagged output of the
// steps from flags_read up to `upto`, in plan order.
void Executor::read_flags(Prepared& p, size_t upto) {
  const auto& host = p.ring[p.current].flags;
  const auto* flags = reinterpret_cast<const uint64_t*>(host ? host.get() : p.flags.get());
  for (size_t s = p.flags_read; s < upto; ++s)
    for (size_t k = 0; k < p.flag_of[s].size(); ++k) {
      const int f = p.flag_of[s][k];
      if (f < 0 || flags[f] == Backend::kAllFinite) continue;
      p.flags_read = upto;
      throw non_finite_output(p.plan, p.contexts[s], s, k, static_cast<int64_t>(flags[f] >> 1), (flags[f] & 1) == 0);
    }
  p.flags_read = upto;
}

// The plan's steps in order, one or (concurrent_branches) two at a time, each with
// its hooks, profile events and NaN/Inf checks. On an asynchronous backend nothing here
// waits for the device except profiling (per kernel), a hook reading a value (value())
// and, with checks on, the read of the device's check flags before the first state write.
void Executor::run_steps(Prepared& p, const RunOptions& ro, bool checking) {
  const Plan& plan = p.plan;
  const bool async = backend_.asynchronous();
  // A run that stops early (an error, a NaN, a hook's exception) leaves no kernel queued
  // behind it: the caller may read state or write a checkpoint next.
  struct DrainOnThrow {
    const Executor& ex;
    bool armed;
    ~DrainOnThrow() {
      if (armed && std::uncaught_exceptions() > 0) try {
          ex.sync();
        } catch (...) {  // the error in flight is the one to report
        }
    }
  } drain{*this, async};
  const bool deferred = checking && async;  // checks flagged on the device, read after a synchronisation
  // The state writers skip on the device when a check before them failed: no wait there.
  const bool skip_on_device = deferred && p.any_flag >= 0;
  bool state_guarded = false;  // the flags before the first state write were read
  if (deferred) {              // the "any" flag (last) is reset by issue_inputs(), where a window of runs starts
    const size_t reset = p.flags_init.size() - (p.any_flag >= 0 ? 1 : 0);
    if (reset) backend_.copy(p.flags.get(), p.flags_init_pinned.get(), reset * sizeof(uint64_t));
    p.flags_read = 0;
  }
  const size_t steps = plan.steps.size();
  for (size_t s = 0; s < steps;) {
    const size_t count = opts_.concurrent_branches && s < plan.runs_with_next.size() && plan.runs_with_next[s] ? 2 : 1;
    if (deferred && !skip_on_device && plan.steps[s].writes_state && !state_guarded) {
      state_guarded = true;
      fetch_flags(p);
      sync();  // a NaN found now leaves the state unchanged
      read_flags(p, s);
    }
    if (ro.skip_state_writes && plan.steps[s].writes_state) break;  // paired steps never write state
    for (size_t k = s; k < s + count; ++k) {
      if (ro.hooks) ro.hooks->before_step(static_cast<int>(k));
      KernelContext& ctx = p.contexts[k];
      ctx.training = ro.training;
      ctx.seed = node_seed(ro.seed, plan.steps[k].node);  // device kernels read it from run_seed
      ctx.skip_if_flagged = !plan.steps[k].writes_state ? nullptr
                            : skip_on_device            ? reinterpret_cast<const uint64_t*>(p.flags.get()) + p.any_flag
                            : ro.hooks                  ? ro.hooks->skip_flag()
                                                        : nullptr;
    }
    NodeEvent ev[2];
    if (count == 2)
      backend_.run_pair([&] { run_kernel(p, s, ro.profile ? &ev[0] : nullptr); },
                        [&] { run_kernel(p, s + 1, ro.profile ? &ev[1] : nullptr); });
    else
      run_kernel(p, s, ro.profile ? &ev[0] : nullptr);
    if (ro.profile)
      for (size_t k = 0; k < count; ++k) ro.profile->events.push_back(std::move(ev[k]));
    if (checking)
      for (size_t k = s; k < s + count; ++k) deferred ? flag_outputs(p, k) : check_outputs(p, k);
    if (ro.hooks)
      for (size_t k = s; k < s + count; ++k) ro.hooks->after_step(static_cast<int>(k));
    s += count;
  }
}

// Before a run's captured part: the batch's copies from the slot's pinned buffers into
// this run's landing buffers on the copy stream, once the run two before has copied out
// of them (so they overlap the run before this one), then on the compute stream, after
// the run before (which read the staged buffers), from there into the staged buffers
// the plan reads; the seed; and, where a window of runs starts
// (`fresh`: none in flight), the reset of the "any check failed" flag, which stays
// lowered over the window's later runs so that after a failed run no state changes.
void Executor::issue_inputs(Prepared& p, bool checking, bool fresh) {
  const bool async = backend_.asynchronous();
  if (async && !p.feed_copies.empty()) {
    Backend::Event& landed = p.landed[p.landing_turn];
    if (landed) backend_.wait(Backend::Stream::copy, landed);
    for (const Prepared::FeedCopy& c : p.feed_copies)
      backend_.copy_on(Backend::Stream::copy, c.landing, c.from, c.bytes);
    backend_.wait(Backend::Stream::compute, backend_.record(Backend::Stream::copy));
    for (const Prepared::FeedCopy& c : p.feed_copies) backend_.copy(c.to, c.landing, c.bytes);
    landed = backend_.record(Backend::Stream::compute);
    p.landing_turn ^= 1;
  } else {
    for (const Prepared::FeedCopy& c : p.feed_copies) backend_.copy(c.to, c.from, c.bytes);
  }
  if (p.seed_device) backend_.copy(p.seed_device.get(), p.ring[p.current].seed.get(), sizeof(uint64_t));
  if (async && checking && fresh && p.any_flag >= 0) {
    const size_t at = static_cast<size_t>(p.any_flag) * sizeof(uint64_t);
    backend_.copy(p.flags.get() + at, p.flags_init_pinned.get() + at, sizeof(uint64_t));
  }
  if (async) queued_ = true;
}

// After a run's captured part: its results, the caller's RunOptions::copy_out and the
// check flags into the slot's host memory, and the event that marks its end.
void Executor::issue_outputs(Prepared& p, const RunOptions& ro, bool checking) {
  if (!backend_.asynchronous()) {  // memory the host reads once the run has ended
    if (ro.copy_out)
      for (const auto& [name, t] : *ro.copy_out) p.results[name] = t;
    return;
  }
  Slot& slot = p.ring[p.current];
  for (size_t i = 0; i < p.result_values.size(); ++i) {
    const Tensor& t = p.slots[static_cast<size_t>(p.result_values[i].second)];
    if (slot.results[i] && t.nbytes() && backend_.reaches(t.raw()))
      backend_.copy(slot.results[i].get(), t.raw(), t.nbytes());
  }
  slot.out = ro.copy_out ? *ro.copy_out : decltype(Slot::out){};
  bool sized = slot.out_host.size() == slot.out.size();
  for (size_t i = 0; sized && i < slot.out.size(); ++i) sized = slot.out_host[i] != nullptr;
  if (!sized)  // every slot at once: runs after this one allocate nothing
    for (Slot& s : p.ring) {
      s.out_host.resize(slot.out.size());
      for (size_t i = 0; i < slot.out.size(); ++i)
        if (!s.out_host[i]) s.out_host[i] = backend_.allocate_host(std::max<size_t>(slot.out[i].second.nbytes(), 1));
    }
  for (size_t i = 0; i < slot.out.size(); ++i)
    if (const Tensor& t = slot.out[i].second; t.nbytes()) backend_.copy(slot.out_host[i].get(), t.raw(), t.nbytes());
  if (checking) fetch_flags(p);
  slot.done = backend_.record(Backend::Stream::compute);
}

// A run: inputs, the steps (captured once and replayed where capturable()), outputs.
void Executor::issue(Prepared& p, const RunOptions& ro, bool checking, bool fresh) {
  issue_inputs(p, checking, fresh);
  // Decided before the hooks' per-run work, which may change what they say (the
  // data-parallel code chooses its path for a new plan there).
  std::string key;
  const std::string_view why = capture_refusal(p, ro, key);
  if (ro.hooks) ro.hooks->before_steps();
  CaptureStatus& cs = p.capture;
  ++cs.runs;
  if (!why.empty()) {
    cs.reason = why;  // the same reason run after run: no allocation after the first
    cs.uncaptured += p.runs > 0;
    run_steps(p, ro, checking);
  } else if (p.captured && p.capture_key == key) {
    p.flags_read = 0;
    backend_.replay(p.captured);
    ++cs.replays, cs.reason.clear();
  } else {
    // Captured once, then replayed: this run and every later one with the same options.
    p.captured.reset();
    backend_.begin_capture();
    try {
      run_steps(p, ro, checking);
      p.captured = backend_.end_capture();
      p.capture_key = key;
      ++cs.captures, cs.reason.clear();
    } catch (const std::exception& e) {  // something in the step cannot be captured: run it as issued
      backend_.abort_capture();
      p.capture_failed = true;
      cs.reason = std::string("the backend refused the capture: ") + e.what();
      cs.refused = cs.reason;
      ++cs.uncaptured;
      run_steps(p, ro, checking);
    }
    if (p.captured) backend_.replay(p.captured);
  }
  if (ro.hooks) ro.hooks->after_steps();
  issue_outputs(p, ro, checking);
  ++p.runs;
}

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

// The results of the run in slot `p.current`, after it ended: host copies of its pinned
// buffers where the host cannot see the backend's memory, else the slots themselves.
void Executor::gather_results(Prepared& p) {
  const Slot* slot = p.ring.size() > p.current ? &p.ring[p.current] : nullptr;
  for (size_t i = 0; i < p.result_values.size(); ++i) {
    const auto& [name, v] = p.result_values[i];
    const Tensor& t = p.slots[static_cast<size_t>(v)];
    if (slot && slot->results[i] && t.nbytes() && backend_.reaches(t.raw())) {
      Tensor h(t.dtype(), t.dims());  // the caller's: a copy of the pinned buffer
      h.set_layout(t.layout());
      std::memcpy(h.raw(), slot->results[i].get(), t.nbytes());
      p.results[name] = h;
    } else {
      p.results[name] = t;
    }
  }
  if (!slot) return;
  for (size_t i = 0; i < slot->out.size(); ++i) {
    const auto& [name, t] = slot->out[i];
    Tensor h(t.dtype(), t.dims());  // the caller's: a copy of the pinned buffer
    if (t.nbytes()) std::memcpy(h.raw(), slot->out_host[i].get(), t.nbytes());
    p.results[name] = h;
  }
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

bool Executor::deferrable(const Prepared& p, const RunOptions& ro, bool checking) const {
  return backend_.asynchronous() && !backend_.host_visible() && !p.host_steps && !ro.profile && !ro.hooks_need_host() &&
         !ro.skip_state_writes && (!checking || p.any_flag >= 0 || p.plan.first_state_write < 0);
}

void Executor::launch(const TensorMap& feeds, const RunOptions& ro) {
  const size_t depth = std::max<size_t>(opts_.max_in_flight, 1);
  // One plan in flight at a time: a run of another plan waits for the runs before it
  // (its arena may take theirs).
  if (!in_flight_.empty() && &prepare(feeds, ro) != in_flight_.front().p) retire(in_flight_.size());
  if (in_flight_.size() >= depth) retire(in_flight_.size() - depth + 1);
  const size_t slot = in_flight_.empty() ? 0 : (in_flight_.back().slot + 1) % depth;
  bool checking = false;
  Prepared& p = start(feeds, ro, slot, checking);
  if (!deferrable(p, ro, checking)) {  // run now, as run() does
    retire(in_flight_.size());
    if (error_) return;  // a failed run before it: nothing after it runs
    p.current = slot;
    try {
      run_now(p, ro, checking);
    } catch (const NumericalError& e) {
      error_ = e;
      return;
    }
    TensorMap own;  // the next run overwrites the arena (an update in place is its state: not copied)
    for (const auto& [name, v] : p.result_values) {
      const Tensor& t = p.results.at(name);
      own[name] = p.plan.values[static_cast<size_t>(v)].storage == Storage::State ? t : t.clone();
    }
    if (ro.copy_out)  // RunOptions::copy_out, returned with the results
      for (const auto& [name, t] : *ro.copy_out) own[name] = p.results.at(name).clone();
    done_.push_back(std::move(own));
    return;
  }
  // No run in flight and no failure: a fresh window, whose "any check failed" flag is reset.
  issue(p, ro, checking, /*fresh=*/in_flight_.empty() && !error_);
  in_flight_.push_back({&p, slot, checking});
}

// Waits for the oldest `count` runs in flight (all of them: one synchronisation; fewer:
// the host waits for the last one's end event only) and takes their results and checks.
void Executor::retire(size_t count) {
  if (count == 0) return;
  if (count >= in_flight_.size()) {
    sync();
  } else {
    backend_.wait_host(in_flight_[count - 1].p->ring[in_flight_[count - 1].slot].done);
  }
  for (size_t i = 0; i < count; ++i) {
    const InFlight f = in_flight_.front();
    in_flight_.pop_front();
    if (error_) continue;  // runs after a failed one wrote no state; their results are dropped
    Prepared& p = *f.p;
    p.current = f.slot;
    if (f.checking) try {
        p.flags_read = 0;
        read_flags(p, p.plan.steps.size());
      } catch (const NumericalError& e) {
        error_ = e;
        continue;
      }
    gather_results(p);
    done_.push_back(p.results);  // host copies (deferrable() holds only where the host cannot see the memory)
  }
}

Executor::Collected Executor::collect() {
  retire(in_flight_.size());
  Collected c;
  c.results.assign(std::make_move_iterator(done_.begin()), std::make_move_iterator(done_.end()));
  done_.clear();
  c.error = std::move(error_);
  error_.reset();
  return c;
}

TensorMap run_graph(const Graph& g, const TensorMap& feeds, const Backend& backend, const RunOptions& opts) {
  ExecutorOptions o;
  o.plan.kept_outside = true;  // results outlive this call; the arena does not
  Executor ex(g, backend, o);
  return ex.run(feeds, opts);
}

}  // namespace trainrt

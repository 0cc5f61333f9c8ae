// The Executor's plan cache: a plan per feed signature (specialised, laid out, its memory
// refusal), and each plan's arena, value bindings, kernel contexts and staged feeds.
#include <algorithm>
#include <cstring>
#include <sstream>
#include <tuple>

#include "graph/error.h"
#include "ops/core/rounded_outputs.h"
#include "runtime/executor_prepared.h"
#include "runtime/layout.h"
#include "runtime/narrow.h"

namespace trainrt {

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
  if (opts_.blocked_layouts)
    add_layout_copies(s, backend_, opts_.math);  // before the 16-bit choice: copies may be narrowed
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
  // Under bf16/fp16 the outputs math_rounded_outputs names, where float32 and not stored in
  // 16 bits (a kernel writing a 16-bit value rounds it as it writes).
  p.rounded.assign(plan.steps.size(), {});
  if (opts_.math == MathPrecision::fp32) return;
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const PlanStep& st = plan.steps[s];
    for (size_t k : math_rounded_outputs(plan.graph.nodes[st.node])) {
      const int v = k < st.outputs.size() ? st.outputs[k] : -1;
      if (v >= 0 && plan.values[static_cast<size_t>(v)].dtype == DataType::Float32 &&
          !p.narrowed[static_cast<size_t>(v)])
        p.rounded[s].push_back(k);
    }
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

}  // namespace trainrt

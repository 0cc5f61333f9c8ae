// The Executor's issue loop: a run's inputs (batch copies, seed), its steps with their
// hooks, profile events and checks, its outputs, and the capture or replay around them.
#include <algorithm>
#include <exception>
#include <string>
#include <vector>

#include "graph/error.h"
#include "runtime/executor_prepared.h"

namespace trainrt {

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
    if (!p.rounded[s].empty()) backend_.round_outputs(ctx, p.rounded[s]);
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
  std::vector<const std::byte*> read;  // an input passed twice (x * x) is read once
  for (const Tensor* t : ctx.inputs) {
    ev->input_shapes.push_back(t ? t->dims() : std::vector<int64_t>{});
    if (!t || t->empty() || std::find(read.begin(), read.end(), t->raw()) != read.end()) continue;
    read.push_back(t->raw());
    ev->bytes += static_cast<double>(t->nbytes());
  }
  for (const Tensor* t : ctx.outputs) {
    ev->output_shapes.push_back(t ? t->dims() : std::vector<int64_t>{});
    if (t && !t->empty()) ev->bytes += static_cast<double>(t->nbytes());
  }
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

}  // namespace trainrt

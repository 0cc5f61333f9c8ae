// The Executor's numerics guard: which outputs are checked for NaN/Inf, the checks on the
// host right after a node, and on an asynchronous backend the device-side flags and
// their reading.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "graph/error.h"
#include "runtime/executor_prepared.h"

namespace trainrt {

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

}  // namespace trainrt

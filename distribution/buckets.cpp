#include "distribution/buckets.h"

#include <algorithm>

#include "graph/error.h"

namespace trainrt {

std::vector<GradientBucket> plan_buckets(const TrainingGraph& t, const Plan& p, size_t cap_bytes,
                                         size_t first_cap_bytes) {
  if (cap_bytes == 0 || first_cap_bytes == 0) throw_bad_input("--bucket-cap-mb", "a bucket cap must be > 0");
  std::vector<int> step_of(p.values.size(), -1);
  for (size_t s = 0; s < p.steps.size(); ++s)
    for (int v : p.steps[s].outputs)
      if (v >= 0) step_of[static_cast<size_t>(v)] = static_cast<int>(s);
  struct Grad {
    std::string param;
    int step;
    size_t bytes;
  };
  std::vector<Grad> grads;
  for (const std::string& param : t.params) {
    auto g = t.gradients.find(param);
    if (g == t.gradients.end()) continue;
    auto it = p.index.find(g->second);
    if (it == p.index.end())
      throw_bad_input("plan_buckets", "gradient '" + g->second + "' is not in the plan (built for another graph?)");
    grads.push_back({param, step_of[static_cast<size_t>(it->second)], p.values[static_cast<size_t>(it->second)].bytes});
  }
  std::stable_sort(grads.begin(), grads.end(), [](const Grad& a, const Grad& b) { return a.step < b.step; });
  std::vector<GradientBucket> out;
  for (const Grad& g : grads) {
    // out.back() is the first bucket while out.size() == 1.
    const size_t cap = out.size() == 1 ? first_cap_bytes : cap_bytes;
    if (out.empty() || out.back().bytes + g.bytes > cap) out.emplace_back();
    GradientBucket& b = out.back();
    b.params.push_back(g.param);
    b.bytes += g.bytes;
    if (g.step > b.ready_after_step) {
      b.ready_after_step = g.step;
      b.ready_after_node = g.step >= 0 ? p.steps[static_cast<size_t>(g.step)].node : 0;
    }
  }
  return out;
}

}  // namespace trainrt

// Independent branches run two at a time (PlanOptions::pair_branches, Backend::run_pair):
// the planner pairs only independent neighbours with disjoint arena bytes, the verifier
// refuses a bad pair, and a training step with pairs equals the serial one.
#include "runtime_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

Plan wrn_plan(bool pair, int64_t batch = 4) {
  TrainingGraph t = wrn_training(small_wrn());
  PlanOptions o = training_plan_options(t);
  o.pair_branches = pair;
  TensorMap feeds = wrn_batch(batch, 1);
  feeds[t.lr] = Tensor(DataType::Float32, {});
  return build_plan(specialize(t.graph, feeds), o);
}

}  // namespace

TEST_CASE("pair_branches: the Wide ResNet's training plan has independent pairs; the verifier refuses a bad one") {
  const Plan serial = wrn_plan(false);
  CHECK(serial.runs_with_next.empty());
  CHECK(serial.pairs == 0);
  const Plan p = wrn_plan(true);
  verify_plan(p);
  CHECK(p.pairs > 0);
  CHECK(p.arena_bytes == serial.arena_bytes);  // pairing chooses no new offsets
  size_t marked = 0;
  for (size_t s = 0; s < p.runs_with_next.size(); ++s) {
    if (!p.runs_with_next[s]) continue;
    ++marked;
    CHECK(steps_independent(p, static_cast<int>(s), static_cast<int>(s) + 1));
    CHECK_FALSE(p.steps[s].writes_state);
    CHECK_FALSE(p.steps[s + 1].writes_state);
  }
  CHECK(marked == p.pairs);
  // A consumer right after its producer is never independent.
  size_t dependent = 0;
  for (size_t s = 0; s + 1 < p.steps.size(); ++s) {
    const auto& outs = p.steps[s].outputs;
    for (int v : p.steps[s + 1].inputs)
      if (v >= 0 && std::find(outs.begin(), outs.end(), v) != outs.end()) {
        CHECK_FALSE(steps_independent(p, static_cast<int>(s), static_cast<int>(s) + 1));
        ++dependent;
        break;
      }
  }
  CHECK(dependent > 10);
  // Two steps that are not data-dependent but where the second writes over bytes the
  // first reads (the serial plan handed them over): not independent either.
  size_t byte_conflicts = 0;
  for (size_t s = 0; s + 1 < p.steps.size(); ++s) {
    const auto& outs = p.steps[s].outputs;
    bool data = false;
    for (int v : p.steps[s + 1].inputs) data = data || (v >= 0 && std::find(outs.begin(), outs.end(), v) != outs.end());
    if (data || p.steps[s].writes_state || p.steps[s + 1].writes_state) continue;
    if (!steps_independent(p, static_cast<int>(s), static_cast<int>(s) + 1)) ++byte_conflicts;
  }
  CHECK(byte_conflicts > 0);
  // Marking a dependent neighbour as a pair must fail verification.
  Plan bad = p;
  for (size_t s = 0; s + 1 < bad.steps.size(); ++s)
    if (!steps_independent(bad, static_cast<int>(s), static_cast<int>(s) + 1) &&
        !(s > 0 && bad.runs_with_next[s - 1]) && !bad.runs_with_next[s + 1]) {
      bad.runs_with_next[s] = 1;
      break;
    }
  CHECK(error_of([&] { verify_plan(bad); }).find("are paired but depend on each other") != std::string::npos);
}

TEST_CASE("concurrent branches: training steps on the cpu backend equal the serial steps") {
  // Each kernel of a pair runs with one of the two threads, so oneDNN's reductions may
  // sum in another order: equal within fp32 rounding, not bitwise. The reference
  // backend runs pairs one after the other and must match bit for bit.
  Graph g = small_wrn();
  for (const char* backend : {"cpu", "reference"}) {
    CAPTURE(backend);
    TrainingSession serial(wrn_training(g), make_backend(backend, 2), {.seed = 3});
    TrainingSession paired(wrn_training(g), make_backend(backend, 2), {.seed = 3, .concurrent_branches = true});
    for (int step = 0; step < 3; ++step) {
      const TensorMap b = wrn_batch(8, static_cast<uint64_t>(step + 1));
      const double a = serial.step(b, 0.05f), c = paired.step(b, 0.05f);
      CHECK(std::fabs(a - c) <= 1e-5 * std::fabs(a));
    }
    CHECK(paired.plan().pairs > 0);
    for (const std::string& name : serial.state_names()) {
      CAPTURE(name);
      if (std::string(backend) == "reference")
        CHECK(bitwise_equal(serial.state(name), paired.state(name)));
      else
        CHECK(all_close(paired.state(name), serial.state(name), 1e-4, 1e-5));
    }
  }
}

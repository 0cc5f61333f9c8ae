// Gradient buckets (distribution/buckets.h): every parameter in one bucket, the caps, the
// step after which a bucket is complete, and that a step hook reading a bucket's
// gradients there sees their final values.
#include <doctest/doctest.h>

#include <map>
#include <set>
#include <vector>

#include "../runtime/runtime_util.h"
#include "distribution/buckets.h"

using namespace trainrt;
using namespace trainrt::test;

TEST_CASE("gradient buckets: every parameter once, caps respected, ready after its last gradient's producer") {
  Graph g = small_wrn({8, 16, 24, 32});
  TrainingGraph t = wrn_training(g);
  TensorMap feeds = wrn_batch(2, 1);
  feeds[t.lr] = Tensor(DataType::Float32, {});
  Plan p = build_plan(specialize(t.graph, feeds), training_plan_options(t));
  for (auto [cap, first] :
       std::vector<std::pair<size_t, size_t>>{{20000, 4000}, {kDefaultBucketCap, kDefaultFirstBucketCap}, {1, 1}}) {
    CAPTURE(cap);
    std::vector<GradientBucket> buckets = plan_buckets(t, p, cap, first);
    std::multiset<std::string> seen;
    int last_ready = -1;
    for (size_t i = 0; i < buckets.size(); ++i) {
      const GradientBucket& bk = buckets[i];
      REQUIRE(!bk.params.empty());
      size_t c = i == 0 ? first : cap;
      CHECK((bk.bytes <= c || bk.params.size() == 1));
      size_t bytes = 0;
      int latest = -1;
      for (const std::string& param : bk.params) {
        seen.insert(param);
        const std::string& grad = t.gradients.at(param);
        bytes += p.value(grad).bytes;
        latest = std::max(latest, p.value(grad).def);
      }
      CHECK(bytes == bk.bytes);
      CHECK(bk.ready_after_step == latest);  // the last producer of the bucket's gradients
      CHECK(p.steps[static_cast<size_t>(bk.ready_after_step)].node == bk.ready_after_node);
      const Node& producer = p.graph.nodes[bk.ready_after_node];
      bool writes_a_gradient = false;
      for (const std::string& param : bk.params)
        for (const std::string& out : producer.outputs)
          writes_a_gradient = writes_a_gradient || out == t.gradients.at(param);
      CHECK(writes_a_gradient);
      CHECK(bk.ready_after_step >= last_ready);  // buckets complete in order
      last_ready = bk.ready_after_step;
      // A bucket closed because the next gradient did not fit.
      if (i + 1 < buckets.size()) CHECK(bk.bytes + p.value(t.gradients.at(buckets[i + 1].params.front())).bytes > c);
    }
    CHECK(seen.size() == t.params.size());
    for (const std::string& param : t.params) CHECK(seen.count(param) == 1);
    if (cap == 1) CHECK(buckets.size() == t.params.size());
  }
  CHECK(plan_buckets(t, p).front().bytes <= kDefaultFirstBucketCap);
  CHECK(error_of([&] { plan_buckets(t, p, 0); }).find("bucket cap") != std::string::npos);
}

TEST_CASE("after_step: at each bucket's ready step its gradients are final (equal to the naive run's)") {
  Graph g = small_wrn({3, 5, 6, 7});
  TrainingGraph t = wrn_training(g);
  TrainingSession s(t, make_backend("cpu"), {.seed = 2});
  s.step(wrn_batch(3, 1), 0.05f);
  std::vector<GradientBucket> buckets = plan_buckets(t, s.plan(), 4000, 1000);
  REQUIRE(buckets.size() > 2);
  // The naive run of the second step from the same state, on the (fused) graph the session runs.
  TrainingGraph naive_t = s.training();
  for (const std::string& name : s.state_names()) naive_t.graph.initializers[name] = s.state(name).clone();
  TensorMap feeds = wrn_batch(3, 2);
  feeds[t.lr] = make(DataType::Float32, {}, {0.05});
  auto b = make_backend("cpu");
  TensorMap want = naive_run(naive_t.graph, feeds, *b, true, 2 * 0x9e3779b97f4a7c15ull + 1);

  std::map<std::string, Tensor> seen;
  std::vector<int> calls;
  AfterEachStep hooks([&](int step) {
    calls.push_back(step);
    for (const GradientBucket& bk : buckets)
      if (bk.ready_after_step == step)
        for (const std::string& p : bk.params) seen[p] = s.value(t.gradients.at(p)).clone();
  });
  s.set_step_hooks(&hooks);
  s.step(wrn_batch(3, 2), 0.05f);
  REQUIRE(calls.size() == s.plan().steps.size());
  for (size_t i = 0; i < calls.size(); ++i) CHECK(calls[i] == static_cast<int>(i));
  CHECK(seen.size() == t.params.size());
  for (const auto& [p, grad] : seen) {
    CAPTURE(p);
    CHECK(bitwise_equal(grad, want.at(t.gradients.at(p))));
  }
  CHECK(error_of([&] { s.value("nope"); }).find("'nope'") != std::string::npos);
}

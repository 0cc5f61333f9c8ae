// Training steps with one multi-tensor optimizer node (passes/fuse_optimizer.cpp: MultiSGD,
// MultiAdam) equal those with one SGD/Adam node per parameter, bit for bit, on the
// reference and cpu backends and on the strict stand-in device (standin_device.h: queued
// kernels, device memory, the skip flag the state writers read): losses and every state
// tensor (parameters, optimizer state, running statistics) after each step. Only the
// optimizer is fused, so every Dropout keeps its index and its mask. On the stand-in, a
// step whose NaN checks fail skips the multi node on the device flag and changes no state.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "passes/passes.h"
#include "runtime/training_session.h"
#include "runtime_util.h"
#include "standin_device.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

std::unique_ptr<Backend> backend_named(const std::string& name) {
  if (name == "stand-in") return std::make_unique<StandinDevice>();
  return make_backend(name);
}

}  // namespace

TEST_CASE(
    "training steps with MultiSGD/MultiAdam equal the per-parameter nodes' bit for bit (reference, cpu, stand-in)") {
  const Graph g = small_wrn();
  // SGD with momentum and weight decay everywhere; Adam and AdamW where they cost least.
  const std::vector<std::pair<const char*, std::vector<const char*>>> cases = {
      {"sgd", {"reference", "cpu", "stand-in"}}, {"adam", {"cpu", "stand-in"}}, {"adamw", {"cpu"}}};
  for (const auto& [optimizer, backends] : cases) {
    const TrainingGraph plain = wrn_training(g, optimizer);
    TrainingGraph multi = plain;
    REQUIRE(fuse_optimizer(multi.graph) == plain.params.size() - 1);
    for (const char* backend : backends) {
      CAPTURE(optimizer);
      CAPTURE(backend);
      TrainingSession a(plain, backend_named(backend), {.seed = 5, .fuse = false});
      TrainingSession b(multi, backend_named(backend), {.seed = 5, .fuse = false});
      REQUIRE(a.state_names() == b.state_names());  // checkpoints fit both
      for (int step = 0; step < 2; ++step) {        // the first step (buffers start) and one more
        CAPTURE(step);
        const TensorMap batch = wrn_batch(2, static_cast<uint64_t>(step + 11));
        CHECK(a.step(batch, 0.05f) == b.step(batch, 0.05f));
        for (const std::string& name : a.state_names()) {
          CAPTURE(name);
          CHECK(bitwise_equal(a.state(name), b.state(name)));
        }
      }
    }
  }
}

TEST_CASE("stand-in device: a step whose checks fail skips the one MultiSGD node; the state stays as it was") {
  const Graph g = small_wrn();
  auto owned = std::make_unique<StandinDevice>();
  StandinDevice& dev = *owned;
  TrainingSession s(wrn_training(g), std::move(owned), {.seed = 6});  // fused: one MultiSGD
  size_t multi = 0;
  for (const Node& n : s.training().graph.nodes) multi += n.op_type == "MultiSGD";
  REQUIRE(multi == 1);
  s.step(wrn_batch(2, 1), 0.05f);
  std::map<std::string, Tensor> before;
  for (const std::string& name : s.state_names()) before[name] = s.state(name).clone();
  TensorMap bad = wrn_batch(2, 2);
  bad.at("input").data<float>()[5] = std::nanf("");
  dev.reset_counts();
  CHECK(error_of([&] { s.step(bad, 0.05f); }).find("has NaN") != std::string::npos);
  CHECK(dev.counts().skipped > 0);  // the state writers, on the device's flag
  for (const std::string& name : s.state_names()) {
    CAPTURE(name);
    CHECK(bitwise_equal(s.state(name), before.at(name)));
  }
}

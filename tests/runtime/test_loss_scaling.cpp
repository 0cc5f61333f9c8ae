// Loss scaling (TrainingOptions::loss_scale_name, runtime/loss_scaler.h) and fp16
// arithmetic (MathPrecision::fp16) in training steps:
// - scaling by a power of two changes no bit of an fp32 step (every gradient is
//   multiplied and divided exactly), on the reference and cpu backends;
// - in fp16 a scale large enough to overflow the rounded gradients skips the step:
//   no state changes, the step counts, the scale halves; a run of good steps doubles it;
// - the scaler's state is part of the checkpoint state and restores exactly;
// - a non-finite loss is still an error, not a skipped step.
#include <doctest/doctest.h>

#include <cmath>

#include "runtime/loss_scaler.h"
#include "runtime/training_session.h"
#include "runtime_util.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

TrainingGraph scaled_training(const Graph& g, bool loss_scaling) {
  TrainingOptions o;
  o.optimizer = "sgd";
  o.momentum = 0.9f;
  o.weight_decay = 5e-4f;
  if (loss_scaling) o.loss_scale_name = "loss_scale";
  return build_training_graph(g, o);
}

std::map<std::string, Tensor> snapshot(const TrainingSession& s) {
  std::map<std::string, Tensor> m;
  for (const std::string& n : s.state_names()) m[n] = s.state(n).clone();
  return m;
}

}  // namespace

TEST_CASE("loss scaling: the training graph feeds the scale as the loss gradient and divides each gradient by it") {
  const TrainingGraph t = scaled_training(small_wrn({3, 5, 6, 7}), true);
  REQUIRE(t.loss_scale == "loss_scale");
  CHECK(std::find(t.graph.inputs.begin(), t.graph.inputs.end(), t.loss_scale) != t.graph.inputs.end());
  REQUIRE(t.scaled_gradients.size() == t.params.size());
  for (const std::string& p : t.params) {
    CAPTURE(p);
    const Node* div = nullptr;
    for (const Node& n : t.graph.nodes)
      if (!n.outputs.empty() && n.outputs[0] == t.gradients.at(p)) div = &n;
    REQUIRE(div != nullptr);
    CHECK(div->op_type == "Div");
    CHECK(div->inputs == std::vector<std::string>{t.scaled_gradients.at(p), t.loss_scale});
  }
  CHECK(scaled_training(small_wrn({3, 5, 6, 7}), false).loss_scale.empty());
}

TEST_CASE("loss scaling: a power-of-two scale leaves fp32 steps bit-identical") {
  const Graph g = small_wrn({3, 5, 6, 7});
  for (const std::string backend : {"reference", "cpu"}) {
    CAPTURE(backend);
    TrainingSession plain(scaled_training(g, false), make_backend(backend), {.seed = 4});
    TrainingSession scaled(scaled_training(g, true), make_backend(backend),
                           {.seed = 4, .loss_scaling = {.init_scale = 1024.f}});
    for (int i = 0; i < 3; ++i) {
      const double a = plain.step(wrn_batch(3, 10 + i), 0.05f), b = scaled.step(wrn_batch(3, 10 + i), 0.05f);
      CHECK(a == b);
      CHECK_FALSE(scaled.last_step_skipped());
    }
    for (const std::string& n : plain.state_names()) {
      CAPTURE(n);
      CHECK(bitwise_equal(plain.state(n), scaled.state(n)));
    }
    CHECK(scaled.loss_scale() == 1024.f);
  }
}

TEST_CASE("loss scaling: in fp16 an overflowing scale skips the step and halves; good steps grow it") {
  const Graph g = small_wrn({3, 5, 6, 7});
  // 2^60 times any gradient of O(1e-3) is far beyond fp16's 65504: the rounded dY of the
  // last convolution's backward pass is Inf.
  TrainingSession s(scaled_training(g, true), make_backend("cpu"),
                    {.seed = 1,
                     .math = MathPrecision::fp16,
                     .loss_scaling = {.init_scale = std::ldexp(1.f, 60), .growth_interval = 2}});
  const std::map<std::string, Tensor> before = snapshot(s);
  const double loss = s.step(wrn_batch(3, 1), 0.05f);
  CHECK(std::isfinite(loss));
  CHECK(s.last_step_skipped());
  CHECK(s.skipped_steps() == 1);
  CHECK(s.steps_done() == 1);
  CHECK(s.loss_scale() == std::ldexp(1.f, 59));
  for (const auto& [n, t] : before) {
    CAPTURE(n);
    if (n.rfind("loss_scaler.", 0) == 0) continue;
    CHECK(bitwise_equal(s.state(n), t));  // nothing written, running statistics included
  }
  // Halving until the gradients fit, then two good steps in a row double the scale.
  int skipped = 1;
  while (s.step(wrn_batch(3, 1), 0.05f), s.last_step_skipped()) REQUIRE(++skipped < 60);
  const float fits = s.loss_scale();
  CHECK(fits < std::ldexp(1.f, 20));  // fp16's range is ~2^16 above the gradients' size
  CHECK(s.state("loss_scaler.good_steps").data<int64_t>()[0] == 1);
  s.step(wrn_batch(3, 2), 0.05f);
  REQUIRE_FALSE(s.last_step_skipped());
  CHECK(s.loss_scale() == 2 * fits);
  CHECK(s.state("loss_scaler.good_steps").data<int64_t>()[0] == 0);
  CHECK_FALSE(bitwise_equal(s.state("fc.weight"), before.at("fc.weight")));

  // The same scale in fp32 overflows nothing: the skips above came from fp16's range.
  TrainingSession f(scaled_training(g, true), make_backend("cpu"),
                    {.seed = 1, .loss_scaling = {.init_scale = std::ldexp(1.f, 60)}});
  f.step(wrn_batch(3, 1), 0.05f);
  CHECK_FALSE(f.last_step_skipped());
}

TEST_CASE("loss scaling: the scaler's state restores from the checkpoint state, and bad values are refused") {
  const Graph g = small_wrn({3, 5, 6, 7});
  TrainingSession a(scaled_training(g, true), make_backend("cpu"),
                    {.seed = 2, .math = MathPrecision::fp16, .loss_scaling = {.growth_interval = 3}});
  a.step(wrn_batch(3, 1), 0.05f);
  a.step(wrn_batch(3, 2), 0.05f);
  const std::map<std::string, Tensor> saved = snapshot(a);
  REQUIRE(saved.count("loss_scaler.scale"));
  REQUIRE(saved.count("loss_scaler.good_steps"));

  TrainingSession b(scaled_training(g, true), make_backend("cpu"),
                    {.seed = 2, .math = MathPrecision::fp16, .loss_scaling = {.growth_interval = 3}});
  for (const auto& [n, t] : saved) b.set_state(n, t);
  b.set_steps_done(a.steps_done());
  CHECK(b.loss_scale() == a.loss_scale());
  for (int i = 3; i < 6; ++i) CHECK(a.step(wrn_batch(3, i), 0.05f) == b.step(wrn_batch(3, i), 0.05f));
  CHECK(a.loss_scale() == b.loss_scale());
  for (const std::string& n : a.state_names()) CHECK(bitwise_equal(a.state(n), b.state(n)));

  CHECK(error_of([&] {
          b.set_state("loss_scaler.scale", make(DataType::Float32, {}, {-1}));
        }).find("not a valid loss scaler state") != std::string::npos);
  CHECK(error_of([&] {
          b.set_state("loss_scaler.good_steps", make(DataType::Float32, {}, {1}));
        }).find("must be a int64 scalar") != std::string::npos);
  // check_state makes set_state's checks without applying anything (a restore checks
  // every tensor before it writes one): a refused value leaves the state as it was.
  const std::string p = b.training().params[0];
  const Tensor before = b.state(p).clone();
  Tensor wrong(DataType::Float32, {before.numel() + 1});
  CHECK(error_of([&] { b.check_state(p, wrong); }).find("expected float32") != std::string::npos);
  CHECK(error_of([&] { b.check_state("no_such_state", before); }).find("is not a state") != std::string::npos);
  CHECK(error_of([&] {
          b.check_state("loss_scaler.scale", make(DataType::Float32, {}, {0}));
        }).find("not a valid loss scaler state") != std::string::npos);
  const float scale = b.loss_scale();
  Tensor changed = before.clone();
  changed.data<float>()[0] += 1;
  b.check_state(p, changed);
  CHECK(bitwise_equal(b.state(p), before));
  CHECK(b.loss_scale() == scale);
  b.set_state(p, changed);
  CHECK(bitwise_equal(b.state(p), changed));
}

TEST_CASE("loss scaling: a non-finite loss is an error, not a skipped step") {
  const Graph g = small_wrn({3, 5, 6, 7});
  TrainingSession s(scaled_training(g, true), make_backend("cpu"), {.seed = 1, .math = MathPrecision::fp16});
  TensorMap batch = wrn_batch(3, 1);
  batch["input"].data<float>()[0] = std::nanf("");
  ErrorKind kind{};
  const std::string msg = error_of([&] { s.step(batch, 0.05f); }, &kind);
  CHECK(kind == ErrorKind::BadInput);
  CHECK(msg.find("NaN") != std::string::npos);
  CHECK(s.skipped_steps() == 0);
  CHECK(s.steps_done() == 0);
}

// The training run through its C++ API (training/trainer.h), no command line: a tiny
// Wide ResNet on synthetic 28x28 images. Steps taken by Trainer::run() must equal, bit
// for bit, the same batches and learning rates stepped directly on a TrainingSession;
// a checkpoint saved with Trainer::save_checkpoint() must resume into the uninterrupted
// run's weights and validation figures; Trainer::evaluate() must be the epoch's
// validation; a checkpoint written with other settings is refused.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "datasets/pipeline.h"
#include "graph/error.h"
#include "passes/passes.h"
#include "runtime/backend.h"
#include "runtime/runtime_util.h"
#include "test_util.h"
#include "training/trainer.h"

namespace fs = std::filesystem;
using namespace trainrt;
using trainrt::test::small_wrn;

namespace {

using trainrt::test::TempDir;

// n Fashion-MNIST-shaped samples: uint8 1x28x28 images, labels in 0..9.
Dataset synthetic(int64_t n, uint64_t seed) {
  Dataset d;
  d.name = "synthetic";
  d.images = Tensor(DataType::UInt8, {n, 1, 28, 28});
  d.labels = Tensor(DataType::Int64, {n});
  d.classes = 10;
  d.mean = {0.5f};
  d.std = {0.25f};
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < d.images.numel(); ++i) d.images.data<uint8_t>()[i] = static_cast<uint8_t>(rng() % 256);
  for (int64_t i = 0; i < n; ++i) d.labels.data<int64_t>()[i] = static_cast<int64_t>(rng() % 10);
  return d;
}

const Dataset& train_set() {
  static const Dataset d = synthetic(48, 1);  // 6 steps of 8 per epoch
  return d;
}
const Dataset& test_set() {
  static const Dataset d = synthetic(16, 2);
  return d;
}

// A quiet config (no progress lines, no metrics) whose rate changes every step (cosine with a warm-up) and whose model
// has Dropout and momentum, so that a wrong step number, rate or order shows.
TrainConfig tiny_config() {
  TrainConfig c;
  c.model_path = "small_wrn";
  c.data.dataset = "synthetic";
  c.batch_size = 8;
  c.epochs = 2;
  c.seed = 11;
  c.backend = "reference";  // the cpu backend spent 10x longer creating oneDNN primitives than stepping
  c.augment = "none";
  c.log_every = 0;
  c.metrics_every = 0;
  c.optimizer.optimizer = "sgd";
  c.optimizer.momentum = 0.9f;
  c.optimizer.weight_decay = 5e-4f;
  c.schedule.kind = "cosine";
  c.schedule.base_lr = 0.05;
  c.schedule.warmup_epochs = 0.5;
  c.schedule.epochs = c.epochs;
  return c;
}

// The threads of the trainer's backend (TrainConfig::threads 0): the direct runs use as
// many, since the host kernels are deterministic for a given thread count.
int rank_threads() { return default_rank_threads(1); }

Trainer make_trainer(const TrainConfig& c) { return Trainer(c, small_wrn(), train_set(), test_set()); }

// Every state tensor of `a` equal to `b`'s, byte for byte.
void check_same_states(TrainingSession& a, TrainingSession& b) {
  const std::vector<std::string> names = a.state_names();
  REQUIRE(names == b.state_names());
  for (const std::string& n : names) {
    const Tensor x = a.state(n), y = b.state(n);
    REQUIRE(x.nbytes() == y.nbytes());
    CHECK_MESSAGE(std::memcmp(x.raw(), y.raw(), x.nbytes()) == 0, n);
  }
}

}  // namespace

TEST_CASE("Trainer::run: steps equal the same steps on a TrainingSession, bit for bit") {
  TrainConfig c = tiny_config();
  c.max_steps = 4;  // stops mid-epoch
  Trainer t = make_trainer(c);
  CHECK(t.run() == 0);
  CHECK(t.state().global_step == 4);
  CHECK(t.state().step_in_epoch == 4);

  // The same run by hand: the session the trainer builds, the pipeline's batches, the schedule's rates.
  const Graph model = small_wrn();
  TrainingSession s(build_training_graph(model, c.optimizer), make_backend(c.backend, rank_threads()),
                    SessionOptions{.seed = c.seed, .fuse = c.fuse, .blocked_layouts = c.channels_last, .conv = c.conv});
  PipelineOptions po;
  po.batch_size = c.batch_size;
  po.seed = c.seed;
  po.shuffle = c.shuffle;
  BatchStream stream(train_set(), po);
  double loss_sum = 0, lr = 0;
  for (int64_t step = 0; step < c.max_steps; ++step) {
    std::optional<Batch> b = stream.next();
    REQUIRE(b);
    lr = c.schedule.at(0, step, stream.size());
    loss_sum += s.step({{model.inputs[0], b->images}, {s.training().labels, b->labels}}, static_cast<float>(lr));
  }
  CHECK(t.state().epoch_loss_sum == loss_sum);
  CHECK(t.state().lr == lr);
  check_same_states(t.session(), s);
  // It trained: the first weight moved from its initial value.
  const std::string w = t.session().training().params.at(0);
  const Tensor before = model.initializers.at(w), after = t.session().state(w);
  CHECK(std::memcmp(before.raw(), after.raw(), before.nbytes()) != 0);
}

TEST_CASE("Trainer::save_checkpoint: a run resumed from it ends where the uninterrupted run does") {
  TempDir dir;
  TrainConfig first = tiny_config();
  first.max_steps = 3;
  Trainer a = make_trainer(first);
  a.run();
  const std::string path = a.save_checkpoint(dir.path.string());
  CHECK(path == checkpoint_path(dir.path.string(), 3));

  TrainConfig whole = tiny_config();
  whole.max_steps = 8;  // through the first epoch's end (validation) into the second
  Trainer resumed = make_trainer(whole);
  resumed.restore(read_checkpoint(path));
  CHECK(resumed.state().global_step == 3);
  resumed.run();
  Trainer straight = make_trainer(whole);
  straight.run();

  CHECK(resumed.state().global_step == 8);
  CHECK(resumed.state().epoch == 1);
  REQUIRE(straight.state().val_accuracy.size() == 1);
  CHECK(resumed.state().val_accuracy == straight.state().val_accuracy);
  CHECK(resumed.state().epoch_loss_sum == straight.state().epoch_loss_sum);
  check_same_states(resumed.session(), straight.session());
}

TEST_CASE("Trainer::evaluate: the epoch's validation, and evaluate() of the trained inference graph") {
  TrainConfig c = tiny_config();
  c.epochs = 1;
  c.schedule.epochs = 1;
  Trainer t = make_trainer(c);
  t.run();
  REQUIRE(t.state().val_accuracy.size() == 1);
  const Evaluation e = t.evaluate();
  CHECK(e.images == test_set().size());
  CHECK(e.accuracy == t.state().val_accuracy[0]);
  const Graph inference = optimize_for_inference(t.session().trained_forward(t.model()));
  const ModelIo io = model_io(t.model(), test_set(), "small_wrn");
  const Evaluation direct = evaluate(inference, io, test_set(), c.batch_size, *make_backend(c.backend, rank_threads()));
  CHECK(e.loss == direct.loss);
  CHECK(e.correct == direct.correct);
}

TEST_CASE("read_resume_checkpoint: a checkpoint of other settings or another seed is refused") {
  TempDir dir;
  Checkpoint ck;
  ck.trainer.seed = 11;
  ck.trainer.config = {{"batch-size", "8"}};
  const std::string path = checkpoint_path(dir.path.string(), 3);
  write_checkpoint(ck, path);

  TrainConfig c = tiny_config();
  c.resume = path;
  c.resume_key = {{"batch-size", "8"}};
  CHECK(read_resume_checkpoint(c).trainer.seed == 11);
  c.resume_key = {{"batch-size", "16"}};
  CHECK(test::error_of([&] { read_resume_checkpoint(c); }) ==
        "--resume " + path + ": --batch-size: the checkpoint was written with '8', this run has '16'");
  c.resume_key = {{"batch-size", "8"}};
  c.seed = 12;
  CHECK(test::error_of([&] { read_resume_checkpoint(c); }) == "--resume " + path + ": the checkpoint's seed differs");
}

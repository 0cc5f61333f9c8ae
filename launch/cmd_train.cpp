// `trainrt train MODEL.onnx --dataset fashion-mnist ...`: the seed's training job.
//
// Per epoch it prints the seed's line (epoch, epoch time, validation loss and
// accuracy, images/sec, cumulative time), stops early like the seed (the last
// --patience validation accuracies all >= --target-accuracy), and at the end the
// seed's summary. --export writes the trained model with the input model's
// interface; --metrics writes one JSON object per epoch.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "autodiff/training_graph.h"
#include "graph/error.h"
#include "graph/onnx_io.h"
#include "launch/cli.h"
#include "launch/commands.h"
#include "launch/pipeline.h"
#include "launch/train_util.h"
#include "runtime/training_session.h"

namespace trainrt {

namespace {

const CommandSpec kSpec{
    "train",
    "trainrt train MODEL.onnx --dataset fashion-mnist|cifar10|cifar100 [options]",
    "Train an ONNX model (its float initializers are the parameters) on an image dataset,\n"
    "printing the seed's per-epoch line, and export the trained model.",
    {{"dataset", "fashion-mnist", "fashion-mnist, mnist, cifar10 or cifar100"},
     {"data-dir", "", "dataset folder (default: Debian's /usr/share/datasets/fashion-mnist)"},
     {"batch-size", "32", "images per step"},
     {"epochs", "100", "maximum number of epochs"},
     {"base-lr", "0.01", "learning rate"},
     {"optimizer", "sgd", "sgd, adam or adamw"},
     {"momentum", "0", "SGD momentum"},
     {"weight-decay", "0", "weight decay (L2 for sgd/adam, decoupled for adamw)"},
     {"nesterov", "", "Nesterov momentum (sgd)", Flag::Switch},
     {"lr-schedule", "constant", "constant, step (x0.1 every --lr-step-epochs) or cosine"},
     {"lr-step-epochs", "30", "epochs between x0.1 steps of the step schedule"},
     {"warmup-epochs", "0", "linear warm-up of the learning rate over this many epochs"},
     {"target-accuracy", "0.95", "early stopping: accuracy the last --patience epochs must reach"},
     {"patience", "2", "early stopping: number of epochs at or above the target"},
     {"precision", "fp32", "fp32 (bf16 and fp16 are not implemented yet)"},
     {"device", "cpu", "cpu (cuda needs a CUDA build and a GPU)"},
     {"backend", "cpu", "cpu or reference"},
     {"threads", "0", "CPU threads (0 = all cores)"},
     {"seed", "0", "seed of shuffling, augmentation and dropout"},
     {"shuffle", "on", "on or off (off: the file's order every epoch)"},
     {"augment", "auto", "auto (CIFAR: crop+flip; MNIST-like: none), on or none"},
     {"limit-train", "0", "use only the first N training images (0 = all)"},
     {"limit-test", "0", "use only the first N test images (0 = all)"},
     {"log-every", "50", "print a progress line every N steps (0 = never)"},
     {"export", "", "write the trained model (same inputs/outputs, trained initializers) here"},
     {"metrics", "", "write one JSON object per epoch to this file"}},
    1,
    1};

std::string choice(const Args& a, const std::string& flag, std::initializer_list<const char*> allowed) {
  std::string v = a.str(flag);
  std::string list;
  for (const char* c : allowed) {
    if (v == c) return v;
    list += (list.empty() ? "" : ", ") + std::string(c);
  }
  throw_bad_input("--" + flag, "expected one of " + list + ", got '" + v + "'");
}

int64_t positive(const Args& a, const std::string& flag, bool allow_zero = false) {
  int64_t v = a.integer(flag);
  if (v < 0 || (!allow_zero && v == 0))
    throw_bad_input("--" + flag, std::string("must be ") + (allow_zero ? ">= 0" : "> 0") + ", got " + std::to_string(v));
  return v;
}

}  // namespace

int cmd_train(const Argv& argv) {
  Args a = parse_args(kSpec, argv);
  if (a.help) return print_help(kSpec), 0;

  // Flags first: every mistake is reported before any work starts.
  const std::string dataset = choice(a, "dataset", {"fashion-mnist", "mnist", "cifar10", "cifar100"});
  const int64_t batch_size = positive(a, "batch-size"), epochs = positive(a, "epochs");
  const int64_t patience = positive(a, "patience"), log_every = positive(a, "log-every", true);
  const int64_t threads = positive(a, "threads", true);
  LrSchedule schedule;
  schedule.base_lr = a.number("base-lr");
  schedule.kind = choice(a, "lr-schedule", {"constant", "step", "cosine"});
  schedule.step_epochs = positive(a, "lr-step-epochs");
  schedule.warmup_epochs = a.number("warmup-epochs");
  schedule.epochs = epochs;
  if (!(schedule.base_lr > 0)) throw_bad_input("--base-lr", "must be > 0");
  if (schedule.warmup_epochs < 0) throw_bad_input("--warmup-epochs", "must be >= 0");
  const double target = a.number("target-accuracy");
  TrainingOptions topts;
  topts.optimizer = choice(a, "optimizer", {"sgd", "adam", "adamw"});
  topts.momentum = static_cast<float>(a.number("momentum"));
  topts.weight_decay = static_cast<float>(a.number("weight-decay"));
  topts.nesterov = a.on("nesterov");
  if (topts.nesterov && (topts.optimizer != "sgd" || topts.momentum <= 0))
    throw_bad_input("--nesterov", "needs --optimizer sgd and --momentum > 0");
  if (topts.optimizer != "sgd" && topts.momentum != 0)
    throw_bad_input("--momentum", "applies to --optimizer sgd only");
  const std::string precision = choice(a, "precision", {"fp32", "bf16", "fp16"});
  if (precision != "fp32") throw_unsupported("--precision " + precision, "only fp32 is implemented so far");
  const std::string device = choice(a, "device", {"cpu", "cuda"});
  if (device == "cuda") throw_unsupported("--device cuda", "the CUDA training backend is not implemented yet");
  const std::string augment = choice(a, "augment", {"auto", "on", "none"});
  const bool shuffle = choice(a, "shuffle", {"on", "off"}) == "on";
  const uint64_t seed = static_cast<uint64_t>(a.integer("seed"));
  const std::string model_path = a.positional[0];
  configure_threads(static_cast<int>(threads));
  auto backend = make_backend(a.str("backend"), static_cast<int>(threads));

  // Data and model.
  DatasetOptions dopt;
  dopt.name = dataset;
  dopt.data_dir = a.str("data-dir");
  dopt.limit = positive(a, "limit-train", true);
  Dataset train = load_dataset(dopt);
  dopt.train = false;
  dopt.limit = positive(a, "limit-test", true);
  Dataset test = load_dataset(dopt);
  Graph forward = import_onnx_file(model_path, registry().schemas);
  const ModelIo io = model_io(forward, train, model_path);

  TrainingSession session(build_training_graph(forward, topts), std::move(backend), seed);
  std::unique_ptr<Backend> eval_backend = make_backend(a.str("backend"), static_cast<int>(threads));
  MetricsWriter metrics(a.str("metrics"));

  std::printf("Training %s on %s with Batch Size: %lld (%lld training images, %lld test images, %zu parameter tensors)\n",
              model_path.c_str(), dataset.c_str(), static_cast<long long>(batch_size),
              static_cast<long long>(train.size()), static_cast<long long>(test.size()), session.training().params.size());
  std::fflush(stdout);

  const bool tty = ::isatty(STDOUT_FILENO);
  std::vector<double> val_accuracy;
  double total_time = 0;
  int64_t total_images = 0, global_step = 0;
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    PipelineOptions po;
    po.batch_size = batch_size;
    po.seed = seed;
    po.epoch = epoch;
    po.shuffle = shuffle;
    po.augment = augment == "auto" ? augment_by_default(train) : augment == "on";
    BatchStream stream(train, po);
    if (stream.size() == 0)
      throw_bad_input("--batch-size", "is larger than the training set (" + std::to_string(train.size()) + " images)");
    const auto t0 = std::chrono::steady_clock::now();
    double loss_sum = 0, lr = 0;
    int64_t steps = 0;
    while (auto batch = stream.next()) {
      lr = schedule.at(epoch, steps, stream.size());
      double loss = session.step({{io.input, batch->images}, {session.training().labels, batch->labels}},
                                 static_cast<float>(lr));
      if (!std::isfinite(loss))
        throw_bad_input("training", "loss became " + std::to_string(loss) + " at epoch " + std::to_string(epoch + 1) +
                                        " step " + std::to_string(steps + 1) + "; lower --base-lr");
      loss_sum += loss;
      ++steps;
      ++global_step;
      if (log_every > 0 && (steps % log_every == 0 || steps == stream.size())) {
        double secs = seconds_since(t0);
        std::printf(tty ? "\rEpoch %lld: step %lld/%lld, loss %.4f, %.1f images/sec   " : "Epoch %lld: step %lld/%lld, loss %.4f, %.1f images/sec\n",
                    static_cast<long long>(epoch + 1), static_cast<long long>(steps),
                    static_cast<long long>(stream.size()), loss, static_cast<double>(steps * batch_size) / secs);
        std::fflush(stdout);
        metrics.step(global_step, epoch + 1, loss, lr);
      }
    }
    if (tty && log_every > 0) std::printf("\n");
    const double epoch_time = seconds_since(t0);
    total_time += epoch_time;
    const double images_per_sec = static_cast<double>(steps * batch_size) / epoch_time;
    total_images += steps * batch_size;

    Evaluation ev = evaluate(session.trained_forward(forward), io, test, batch_size, *eval_backend);
    val_accuracy.push_back(ev.accuracy);
    std::printf(
        "Epoch = %2lld: Epoch Time = %5.3f, Validation Loss = %5.3f, Validation Accuracy = %5.3f, Images/sec = %5.3f, "
        "Cumulative Time = %5.3f\n",
        static_cast<long long>(epoch + 1), epoch_time, ev.loss, ev.accuracy, images_per_sec, total_time);
    std::fflush(stdout);
    metrics.epoch(epoch + 1, epoch_time, loss_sum / static_cast<double>(steps), ev.loss, ev.accuracy, images_per_sec,
                  total_time, lr);
    if (static_cast<int64_t>(val_accuracy.size()) >= patience &&
        std::all_of(val_accuracy.end() - patience, val_accuracy.end(), [&](double acc) { return acc >= target; })) {
      std::printf("Early stopping after epoch %lld\n", static_cast<long long>(epoch + 1));
      break;
    }
  }
  std::printf("\nTraining complete. Final Validation Accuracy = %5.3f\n", val_accuracy.back());
  std::printf("Total Training Time: %5.3f seconds\n", total_time);
  std::printf("Throughput: %5.3f images/second\n", static_cast<double>(total_images) / total_time);
  if (a.on("export")) {
    export_onnx_file(session.trained_forward(forward), a.str("export"));
    std::printf("Trained model written to %s\n", a.str("export").c_str());
  }
  return 0;
}

}  // namespace trainrt

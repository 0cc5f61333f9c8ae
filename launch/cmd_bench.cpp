// `trainrt bench MODEL.onnx --batch N`: times the full training step.
//
//   trainrt bench wrn.onnx --batch 64 --steps 5 --warmup 1 --threads 2 [--profile]
//
// Builds the training graph (appended SoftmaxCrossEntropyLoss, SGD momentum 0.9
// like the seed), feeds one batch of random images (normal) and labels (uniform
// over the classes) of the model's input shape with the symbolic batch set to N,
// runs --warmup untimed steps, then --steps timed TrainingSession::step calls
// (forward, loss, backward, update) and prints images/s, ms/step (median, mean),
// the FLOP rate, and peak memory (peak RSS from getrusage; the runtime has no
// planned arena to report yet). The same batch is reused every step: the data
// pipeline is not what is measured. --profile wraps the backend to time each
// kernel call and prints a per-op-type table of the timed steps.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>

#include "autodiff/training_graph.h"
#include "graph/error.h"
#include "graph/onnx_io.h"
#include "launch/cli.h"
#include "launch/commands.h"
#include "launch/train_util.h"
#include "runtime/training_session.h"

namespace trainrt {

namespace {

const CommandSpec kSpec{
    "bench",
    "trainrt bench MODEL.onnx --batch N [options]",
    "Time the full training step (forward, loss, backward, optimizer update) of a model that\n"
    "takes one float image batch [N,C,H,W] and gives logits [N,classes], on random data.",
    {{"batch", "", "images per step (required)"},
     {"steps", "10", "timed steps"},
     {"warmup", "2", "untimed steps first (kernel and plan caches, first-touch memory)"},
     {"threads", "0", "CPU threads (0 = all cores)"},
     {"backend", "cpu", "cpu or reference"},
     {"precision", "fp32", "fp32 (bf16 is not implemented yet)"},
     {"optimizer", "sgd", "sgd (momentum 0.9, as the seed)"},
     {"lr", "0.01", "learning rate"},
     {"seed", "0", "seed of the random batch and of Dropout"},
     {"profile", "", "print time per op type over the timed steps", Flag::Switch}},
    1,
    1};

int64_t at_least(const Args& a, const std::string& flag, int64_t lowest) {
  const int64_t v = a.integer(flag);
  if (v < lowest) throw_bad_input("--" + flag, "must be >= " + std::to_string(lowest) + ", got " + std::to_string(v));
  return v;
}

std::string one_of(const Args& a, const std::string& flag, std::initializer_list<const char*> allowed) {
  const std::string v = a.str(flag);
  std::string list;
  for (const char* c : allowed) {
    if (v == c) return v;
    list += (list.empty() ? "" : ", ") + std::string(c);
  }
  throw_bad_input("--" + flag, "expected one of " + list + ", got '" + v + "'");
}

// Per op type: kernel calls and time, gathered by wrapping another backend's kernels.
class ProfilingBackend : public Backend {
 public:
  struct Stat {
    int64_t calls = 0;
    double seconds = 0;
  };
  explicit ProfilingBackend(std::unique_ptr<Backend> inner) : Backend("", false), inner_(std::move(inner)) {
    threads = inner_->threads;
  }
  std::string name() const override { return inner_->name(); }
  const Kernel& kernel(const Node& n) const override {
    const std::string key = n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type;
    auto it = wrapped_.find(key);
    if (it != wrapped_.end()) return it->second;
    (void)inner_->kernel(n);  // Unsupported now, not at the first call
    return wrapped_[key] = [this, key](KernelContext& ctx) {
      const Kernel& k = inner_->kernel(ctx.node);
      const auto t0 = std::chrono::steady_clock::now();
      k(ctx);
      if (!on_) return;
      Stat& s = stats_[key];
      ++s.calls;
      s.seconds += seconds_since(t0);
    };
  }
  void record(bool on) { on_ = on; }
  const std::map<std::string, Stat>& stats() const { return stats_; }

 private:
  std::unique_ptr<Backend> inner_;
  mutable std::map<std::string, Kernel> wrapped_;
  mutable std::map<std::string, Stat> stats_;
  bool on_ = false;
};

// Forward FLOPs (multiply-add = 2) of each op type in the specialised training
// graph, from the op schemas' FLOP rules; ops without a rule count 0.
std::map<std::string, double> flops_per_op(const Graph& g) {
  std::map<std::string, double> out;
  for (const Node& n : g.nodes) {
    const OpSchema* s = registry().schemas.find(n.domain, n.op_type);
    const std::string key = n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type;
    out[key] += s && s->flops ? s->flops(g, n) : 0.0;
  }
  return out;
}

double peak_rss_mib() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // Linux: kilobytes
}

}  // namespace

int cmd_bench(const Argv& argv) {
  Args a = parse_args(kSpec, argv);
  if (a.help) return print_help(kSpec), 0;

  // Flags first: every mistake is reported before the model is read.
  if (!a.on("batch")) throw_bad_input("trainrt bench", "--batch is required");
  const int64_t batch = at_least(a, "batch", 1), steps = at_least(a, "steps", 1);
  const int64_t warmup = at_least(a, "warmup", 0), threads = at_least(a, "threads", 0);
  const std::string backend_name = one_of(a, "backend", {"cpu", "reference"});
  const std::string precision = one_of(a, "precision", {"fp32", "bf16"});
  if (precision == "bf16") throw_unsupported("--precision bf16", "bf16 training is not implemented yet; use fp32");
  const std::string optimizer = one_of(a, "optimizer", {"sgd"});
  const double lr = a.number("lr");
  if (!(lr > 0)) throw_bad_input("--lr", "must be > 0");
  const uint64_t seed = static_cast<uint64_t>(at_least(a, "seed", 0));
  const std::string path = a.positional[0];
  configure_threads(static_cast<int>(threads));

  Graph forward = import_onnx_file(path, registry().schemas);
  if (forward.inputs.size() != 1)
    throw_bad_input(path, "bench needs one graph input (the images), the model has " +
                              std::to_string(forward.inputs.size()));
  if (forward.outputs.empty()) throw_bad_input(path, "the model has no outputs");
  const std::string input = forward.inputs[0], logits = forward.outputs[0];
  const ValueInfo& in = forward.info(input);
  if (in.dtype != DataType::Float32 || !in.shape || in.shape->size() < 2)
    throw_bad_input(path, "input '" + input + "' is " + dtype_name(in.dtype) +
                              shape_to_string(in.shape.value_or(Shape{})) + "; bench needs float32 [N,C,...]");
  if ((*in.shape)[0].known() && (*in.shape)[0].value != batch)
    throw_bad_input(path, "input '" + input + "' has a fixed batch of " + std::to_string((*in.shape)[0].value) +
                              ", so --batch must be " + std::to_string((*in.shape)[0].value));
  std::vector<int64_t> dims{batch};
  for (size_t i = 1; i < in.shape->size(); ++i) {
    if (!(*in.shape)[i].known())
      throw_bad_input(path, "input '" + input + "' has symbolic dimension " + std::to_string(i) +
                                " (only the batch dimension may be symbolic): " + shape_to_string(*in.shape));
    dims.push_back((*in.shape)[i].value);
  }
  const ValueInfo& out = forward.info(logits);
  if (!out.shape || out.shape->size() != 2 || !(*out.shape)[1].known() || (*out.shape)[1].value < 1)
    throw_bad_input(path, "output '" + logits + "' is " + shape_to_string(out.shape.value_or(Shape{})) +
                              "; bench needs logits [N,classes] with a known class count");
  const int64_t classes = (*out.shape)[1].value;

  // One random batch, reused by every step.
  std::mt19937_64 rng(seed);
  Tensor images(DataType::Float32, dims), labels(DataType::Int64, {batch});
  std::normal_distribution<float> pixel(0.f, 1.f);
  std::uniform_int_distribution<int64_t> label(0, classes - 1);
  for (int64_t i = 0; i < images.numel(); ++i) images.data<float>()[i] = pixel(rng);
  for (int64_t i = 0; i < batch; ++i) labels.data<int64_t>()[i] = label(rng);

  TrainingOptions topts;
  topts.optimizer = optimizer;
  topts.momentum = 0.9f;
  TrainingGraph t = build_training_graph(forward, topts);
  const size_t params = t.params.size();
  int64_t param_values = 0;
  for (const std::string& p : t.params) param_values += t.graph.initializers.at(p).numel();
  TensorMap feeds{{input, images}, {t.labels, labels}};
  TensorMap typed = feeds;
  typed[t.lr] = Tensor(DataType::Float32, {});
  const std::map<std::string, double> op_flops = flops_per_op(specialize(t.graph, typed));
  double step_flops = 0;
  for (const auto& [op, f] : op_flops) step_flops += f;

  std::unique_ptr<Backend> backend = make_backend(backend_name, static_cast<int>(threads));
  ProfilingBackend* prof = nullptr;
  if (a.on("profile")) {
    auto wrapped = std::make_unique<ProfilingBackend>(std::move(backend));
    prof = wrapped.get();
    backend = std::move(wrapped);
  }
  TrainingSession session(std::move(t), std::move(backend), seed);

  std::printf("model: %s, input '%s' %s, %lld classes, %zu parameter tensors (%lld values)\n", path.c_str(),
              input.c_str(), dims_to_string(dims).c_str(), static_cast<long long>(classes), params,
              static_cast<long long>(param_values));
  std::printf("setup: backend %s, threads %lld, precision %s, optimizer %s (momentum 0.9, lr %g), batch %lld, "
              "warmup %lld, steps %lld\n",
              backend_name.c_str(), static_cast<long long>(threads), precision.c_str(), optimizer.c_str(), lr,
              static_cast<long long>(batch), static_cast<long long>(warmup), static_cast<long long>(steps));
  std::fflush(stdout);

  double first_loss = 0, last_loss = 0;
  for (int64_t i = 0; i < warmup; ++i) first_loss = session.step(feeds, static_cast<float>(lr));
  std::vector<double> ms;
  if (prof) prof->record(true);
  for (int64_t i = 0; i < steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    last_loss = session.step(feeds, static_cast<float>(lr));
    ms.push_back(seconds_since(t0) * 1e3);
    if (warmup == 0 && i == 0) first_loss = last_loss;
  }
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  double mean = 0;
  for (double v : ms) mean += v / static_cast<double>(n);

  std::string each;
  for (double v : ms) {
    char b[32];
    std::snprintf(b, sizeof b, "%s%.1f", each.empty() ? "" : " ", v);
    each += b;
  }
  std::printf("step times (ms): %s\n", each.c_str());
  std::printf("ms/step: median %.1f, mean %.1f\n", median, mean);
  std::printf("images/s: %.2f (batch %lld / median step)\n", static_cast<double>(batch) * 1e3 / median,
              static_cast<long long>(batch));
  std::printf("GFLOP/step: %.2f (forward+backward ops with a FLOP rule), %.1f GFLOP/s at the median step\n",
              step_flops * 1e-9, step_flops * 1e-9 / (median * 1e-3));
  std::printf("peak memory: RSS %.1f MiB (getrusage ru_maxrss, whole process); planned arena: not available "
              "(runtime/ has no memory planner yet)\n",
              peak_rss_mib());
  std::printf("loss: %.4f (first step) -> %.4f (last step)\n", first_loss, last_loss);

  if (prof) {
    double total = 0;
    for (const auto& [op, s] : prof->stats()) total += s.seconds;
    std::vector<std::pair<std::string, ProfilingBackend::Stat>> rows(prof->stats().begin(), prof->stats().end());
    std::sort(rows.begin(), rows.end(), [](const auto& x, const auto& y) { return x.second.seconds > y.second.seconds; });
    std::printf("\nprofile over %lld timed steps (kernel time %.1f ms/step of %.1f):\n", static_cast<long long>(steps),
                total * 1e3 / static_cast<double>(steps), mean);
    std::printf("%-40s %8s %12s %7s %9s\n", "op", "calls", "ms/step", "%", "GFLOP/s");
    for (const auto& [op, s] : rows) {
      const double per_step = s.seconds / static_cast<double>(steps);
      const double f = op_flops.count(op) ? op_flops.at(op) : 0.0;
      char rate[32] = "-";
      if (f > 0 && per_step > 0) std::snprintf(rate, sizeof rate, "%.1f", f * 1e-9 / per_step);
      std::printf("%-40s %8lld %12.2f %6.1f%% %9s\n", op.c_str(), static_cast<long long>(s.calls / steps),
                  per_step * 1e3, 100.0 * s.seconds / total, rate);
    }
  }
  return 0;
}

}  // namespace trainrt

// `trainrt bench MODEL.onnx --batch N`: times the full training step.
//
//   trainrt bench wrn.onnx --batch 64 --steps 5 --warmup 1 --threads 2 [--profile]
//
// Builds the training graph (appended SoftmaxCrossEntropyLoss, SGD momentum 0.9
// like the seed), feeds one batch of random images (normal) and labels (uniform
// over the classes) of the model's input shape with the symbolic batch set to N,
// runs --warmup untimed steps, then --steps timed TrainingSession::step calls
// (forward, loss, backward, update) and prints images/s, ms/step (median, mean),
// the FLOP rate, and memory: peak RSS (getrusage) and the runtime's plan (arena
// bytes against a naive one-buffer-per-value plan, persistent state bytes). The
// same batch is reused every step: the data pipeline is not what is measured.
// --profile prints the runtime's per-op-type table (runtime/trace.h) of the timed
// steps; --trace writes them as a Chrome/Perfetto trace. --fuse off runs the
// training graph without its fusions (TrainingSession), to measure what they gain.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>

#include "autodiff/training_graph.h"
#include "graph/error.h"
#include "graph/onnx_io.h"
#include "launch/cli.h"
#include "launch/commands.h"
#include "launch/train_util.h"
#include "ops/core/dnnl_util.h"
#include "runtime/trace.h"
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
     {"device", "cpu", "cpu or cuda (a CUDA build and a GPU)"},
     {"backend", "cpu", "with --device cpu: cpu or reference"},
     {"precision", "fp32", "fp32, or bf16: convolutions read bf16 copies, accumulate in fp32 (needs AVX-512 BF16)"},
     {"conv-algorithm", "winograd",
      "fp32 3x3 stride-1 convolutions: winograd (oneDNN F(4x4,3x3), where it applies) or direct"},
     {"optimizer", "sgd", "sgd (momentum 0.9, as the seed)"},
     {"lr", "0.01", "learning rate"},
     {"seed", "0", "seed of the random batch and of Dropout"},
     {"fuse", "on", "training-graph fusions (BN+Relu, Conv+residual Add): on, or off to compare"},
     {"layouts", "blocked",
      "activations between oneDNN kernels: blocked (nChw16c kept), or plain (reorder at every kernel) to compare"},
     {"branches", "serial",
      "serial, or concurrent: independent neighbouring nodes two at a time, each with half the threads"},
     {"profile", "", "print time per op type over the timed steps", Flag::Switch},
     {"trace", "", "write the timed steps as a Chrome/Perfetto trace (JSON) to this file"}},
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

// FLOPs of one step (multiply-add = 2): the op schemas' FLOP rules summed over the
// specialised training graph; ops without a rule count 0.
double step_flops(const Graph& g) {
  double sum = 0;
  for (const Node& n : g.nodes)
    if (const OpSchema* s = registry().schemas.find(n.domain, n.op_type); s && s->flops) sum += s->flops(g, n);
  return sum;
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
  const std::string backend_name = backend_for_device(a);
  const std::string precision = one_of(a, "precision", {"fp32", "bf16"});
  const MathPrecision math = precision == "bf16" ? MathPrecision::bf16 : MathPrecision::fp32;
  const ConvAlgorithm conv = one_of(a, "conv-algorithm", {"direct", "winograd"}) == "winograd" ? ConvAlgorithm::winograd
                                                                                               : ConvAlgorithm::direct;
  const std::string optimizer = one_of(a, "optimizer", {"sgd"});
  const double lr = a.number("lr");
  if (!(lr > 0)) throw_bad_input("--lr", "must be > 0");
  const uint64_t seed = static_cast<uint64_t>(at_least(a, "seed", 0));
  const bool fuse = one_of(a, "fuse", {"on", "off"}) == "on";
  const bool blocked = one_of(a, "layouts", {"blocked", "plain"}) == "blocked";
  const bool concurrent = one_of(a, "branches", {"serial", "concurrent"}) == "concurrent";
  const std::string path = a.positional[0];
  if (a.on("trace")) {
    const std::filesystem::path dir = std::filesystem::absolute(a.str("trace")).parent_path();
    if (!std::filesystem::is_directory(dir)) throw_bad_input("--trace " + a.str("trace"), "its folder does not exist");
  }
  configure_threads(static_cast<int>(threads));

  Graph forward = import_onnx_file(path, registry().schemas);
  if (forward.inputs.size() != 1)
    throw_bad_input(path,
                    "bench needs one graph input (the images), the model has " + std::to_string(forward.inputs.size()));
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
  const double flops = step_flops(specialize(t.graph, typed));

  const size_t nodes = t.graph.nodes.size();
  std::unique_ptr<Backend> backend = make_backend(backend_name, static_cast<int>(threads));
  backend->check_math(math);
  TrainingSession session(std::move(t), std::move(backend),
                          {.seed = seed,
                           .fuse = fuse,
                           .blocked_layouts = blocked,
                           .math = math,
                           .conv = conv,
                           .concurrent_branches = concurrent});
  ProfileCollector prof;
  const bool profile = a.on("profile") || a.on("trace");

  std::printf("model: %s, input '%s' %s, %lld classes, %zu parameter tensors (%lld values)\n", path.c_str(),
              input.c_str(), dims_to_string(dims).c_str(), static_cast<long long>(classes), params,
              static_cast<long long>(param_values));
  std::printf(
      "setup: backend %s, threads %lld, precision %s, optimizer %s (momentum 0.9, lr %g), batch %lld, "
      "warmup %lld, steps %lld\n",
      backend_name.c_str(), static_cast<long long>(threads), precision.c_str(), optimizer.c_str(), lr,
      static_cast<long long>(batch), static_cast<long long>(warmup), static_cast<long long>(steps));
  // What runs: without AVX-512 oneDNN has neither nChw16c kernels nor Winograd, so the
  // cpu backend keeps every value plain and convolves directly (ops/dnnl_util.h).
  const bool avx512 = backend_name != "cpu" || dnnl_util::cpu_has_avx512_core();
  const std::string layouts = !blocked ? "plain" : avx512 ? "blocked" : "plain (blocked needs AVX-512)";
  const std::string convs = conv != ConvAlgorithm::winograd ? "direct"
                            : avx512                        ? "winograd"
                                                            : "direct (winograd needs AVX-512)";
  std::printf("training graph: %zu nodes, fusions %s (%zu nodes run), layouts %s, convolutions %s\n", nodes,
              fuse ? "on" : "off", session.training().graph.nodes.size(), layouts.c_str(), convs.c_str());
  std::fflush(stdout);

  double first_loss = 0, last_loss = 0;
  for (int64_t i = 0; i < warmup; ++i) first_loss = session.step(feeds, static_cast<float>(lr));
  if (concurrent)
    std::printf("branches: %zu pairs of independent nodes run concurrently (of %zu nodes)\n", session.plan().pairs,
                session.plan().steps.size());
  std::vector<double> ms;
  if (profile) session.set_profile(&prof);
  const uint64_t reordered = dnnl_util::reorder_bytes();
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
              flops * 1e-9, flops * 1e-9 / (median * 1e-3));
  const Plan& plan = session.plan();
  const double mib = 1.0 / (1024.0 * 1024.0);
  std::printf(
      "peak memory: RSS %.1f MiB (getrusage ru_maxrss, whole process); planned arena %.1f MiB "
      "(naive one buffer per value %.1f MiB), persistent state %.3f MiB\n",
      peak_rss_mib(), static_cast<double>(plan.arena_bytes) * mib, static_cast<double>(plan.naive_bytes) * mib,
      static_cast<double>(session.persistent_bytes()) * mib);
  std::printf("layout reorders: %.1f MiB per step (oneDNN reorders between row-major and blocked layouts)\n",
              static_cast<double>(dnnl_util::reorder_bytes() - reordered) * mib / static_cast<double>(steps));
  std::printf("loss: %.4f (first step) -> %.4f (last step)\n", first_loss, last_loss);

  if (a.on("profile"))
    std::printf("\nprofile over %lld timed steps (kernel time per op type, all steps):\n%s",
                static_cast<long long>(steps), profile_table(prof.events).c_str());
  if (a.on("trace")) {
    write_chrome_trace(a.str("trace"), prof.events);
    std::printf("trace of the timed steps written to %s\n", a.str("trace").c_str());
  }
  return 0;
}

}  // namespace trainrt

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
// steps, each op's GB/s beside the backend's copy speed measured in the same run
// (copy_bandwidth_gbps, runtime/backend.h); --trace writes them as a Chrome/Perfetto
// trace. --fuse off runs the training graph without its fusions (TrainingSession), to
// measure what they gain; --fuse-dropout off leaves only BatchNormalizationRelu +
// Dropout unfused.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>

#include "autodiff/training_graph.h"
#include "graph/error.h"
#include "graph/onnx_io.h"
#include "launch/cli.h"
#include "launch/commands.h"
#include "launch/train_util.h"
#include "ops/onednn/dnnl_util.h"
#include "ops/onednn/winograd.h"
#include "runtime/backend.h"
#include "runtime/timing_cache.h"
#include "runtime/trace.h"
#include "runtime/training_session.h"

namespace trainrt {

namespace {

const CommandSpec kSpec{
    "bench",
    "trainrt bench MODEL.onnx --batch N [options]",
    "Time the full training step (forward, loss, backward, optimizer update) of a model that\n"
    "takes one float image batch [N,C,H,W] and gives logits [N,classes], on random data.",
    with_engine_choice_flags(
        {
            {"batch", "", "images per step (required)"},
            {"steps", "10", "timed steps"},
            {"warmup", "2", "untimed steps first (kernel and plan caches, first-touch memory)"},
            {"threads", "0", "CPU threads (0 = all cores)"},
            {"device", "cpu", "cpu or cuda (a CUDA build and a GPU)"},
            {"backend", "cpu", "with --device cpu: cpu or reference"},
        },
        {{"fp32-math", "tf32",
          "with --device cuda: tf32 (convolutions and Gemm on TF32 tensor cores, as PyTorch) or strict (full fp32)"},
         {"precision", "fp32",
          "fp32, bf16 or fp16: convolutions read bf16 / half copies, accumulate in fp32 (bf16 on --device cpu needs "
          "AVX-512 BF16; fp16 adds dynamic loss scaling, emulated on cpu)"},
         {"conv-algorithm", "winograd",
          "fp32 3x3 stride-1 convolutions: winograd (F(4x4,3x3): oneDNN's on AVX-512, the cpu backend's own on AVX2 "
          "for >= 64 channels) or direct"},
         {"optimizer", "sgd", "sgd (momentum 0.9, as the seed)"},
         {"lr", "0.01", "learning rate"},
         {"seed", "0", "seed of the random batch and of Dropout"},
         {"fuse", "on", "training-graph fusions (BN+Relu, Conv+residual Add): on, or off to compare"},
         {"fuse-dropout", "on", "with --fuse on: BN+Relu+Dropout into one node; off to measure that fusion alone"},
         {"narrow-storage", "on",
          "with --device cuda and --precision bf16/fp16: values the kernels read and write in 16 bits stored so "
          "(on), or every activation kept float32 (off) to measure what 16-bit storage brings"},
         {"layouts", "blocked",
          "activations between kernels: blocked (the backend's layout kept: oneDNN's nChw16c on cpu, NHWC on cuda), or "
          "plain (cpu: a reorder at every oneDNN kernel; cuda: NCHW) to compare"},
         {"branches", "serial",
          "serial, or concurrent: independent neighbouring nodes two at a time (cpu: each with half the threads; cuda: "
          "the second on a second compute stream)"},
         {"profile", "", "print time and GB/s per op type over the timed steps, and the memory copy speed",
          Flag::Switch},
         {"trace", "", "write the timed steps as a Chrome/Perfetto trace (JSON) to this file"}}),
    1,
    1};

struct BenchConfig {
  std::string path, backend, precision, optimizer, trace, timing_cache;
  int64_t batch = 0, steps = 0, warmup = 0, threads = 0;
  size_t autotune = 4;  // engine candidates timed per problem (cuda)
  bool deterministic = false;
  MathPrecision math = MathPrecision::fp32;
  ConvAlgorithm conv = ConvAlgorithm::winograd;
  Fp32Math fp32_math = Fp32Math::strict;
  double lr = 0;
  uint64_t seed = 0;
  bool fuse = true, fuse_dropout = true, blocked = true, concurrent = false, profile = false;
  bool narrow_storage = true;  // Backend::narrow_storage
};

// Flags first: every mistake is reported before the model is read.
BenchConfig bench_config(const Args& a) {
  BenchConfig c;
  if (!a.on("batch")) throw_bad_input("trainrt bench", "--batch is required");
  c.path = a.positional[0];
  c.batch = a.at_least("batch", 1);
  c.steps = a.at_least("steps", 1);
  c.warmup = a.at_least("warmup", 0);
  c.threads = a.at_least("threads", 0);
  c.backend = backend_for_device(a);
  c.timing_cache = timing_cache_for_device(a, c.path);
  c.fp32_math = fp32_math_for_device(a, Fp32Math::tf32);
  c.autotune = autotune_for_device(a);
  c.deterministic = deterministic_for_device(a, false);
  c.precision = a.one_of("precision", {"fp32", "bf16", "fp16"});
  c.math = c.precision == "bf16"   ? MathPrecision::bf16
           : c.precision == "fp16" ? MathPrecision::fp16
                                   : MathPrecision::fp32;
  c.conv = a.one_of("conv-algorithm", {"direct", "winograd"}) == "winograd" ? ConvAlgorithm::winograd
                                                                            : ConvAlgorithm::direct;
  c.optimizer = a.one_of("optimizer", {"sgd"});
  c.lr = a.positive_number("lr");
  c.seed = static_cast<uint64_t>(a.at_least("seed", 0));
  c.fuse = a.on_off("fuse");
  c.fuse_dropout = a.on_off("fuse-dropout");
  c.narrow_storage = a.on_off("narrow-storage");
  c.blocked = a.one_of("layouts", {"blocked", "plain"}) == "blocked";
  c.concurrent = a.one_of("branches", {"serial", "concurrent"}) == "concurrent";
  c.trace = a.output_path("trace");
  c.profile = a.on("profile");
  return c;
}

// The model's image input and logits: [N,C,...] float32 with N symbolic or --batch, and
// [N,classes] with a known class count; BadInput naming the model otherwise.
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

// The timed steps: each one's milliseconds, and the loss of the first and last step
// (the first warm-up step when there is one).
struct StepTimes {
  std::vector<double> ms;
  double first_loss = 0, last_loss = 0;
  uint64_t reorder_bytes = 0;  // oneDNN layout reorders during the timed steps
};

StepTimes time_steps(TrainingSession& session, const TensorMap& feeds, const BenchConfig& c, ProfileCollector* prof) {
  StepTimes t;
  const float lr = static_cast<float>(c.lr);
  for (int64_t i = 0; i < c.warmup; ++i) t.first_loss = session.step(feeds, lr);
  if (c.concurrent)
    std::printf("branches: %zu pairs of independent nodes run concurrently (of %zu nodes)\n", session.plan().pairs,
                session.plan().steps.size());
  session.set_profile(prof);
  const uint64_t reordered = dnnl_util::reorder_bytes();
  for (int64_t i = 0; i < c.steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    t.last_loss = session.step(feeds, lr);
    t.ms.push_back(seconds_since(t0) * 1e3);
    if (c.warmup == 0 && i == 0) t.first_loss = t.last_loss;
  }
  t.reorder_bytes = dnnl_util::reorder_bytes() - reordered;
  return t;
}

void print_times(const StepTimes& t, const TrainingSession& session, const BenchConfig& c, double flops) {
  std::vector<double> sorted = t.ms;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  double mean = 0;
  std::string each;
  for (double v : t.ms) {
    mean += v / static_cast<double>(n);
    char b[32];
    std::snprintf(b, sizeof b, "%s%.1f", each.empty() ? "" : " ", v);
    each += b;
  }
  std::printf("step times (ms): %s\n", each.c_str());
  std::printf("ms/step: median %.1f, mean %.1f\n", median, mean);
  std::printf("images/s: %.2f (batch %lld / median step)\n", static_cast<double>(c.batch) * 1e3 / median,
              static_cast<long long>(c.batch));
  std::printf("GFLOP/step: %.2f (forward+backward ops with a FLOP rule), %.1f GFLOP/s at the median step\n",
              flops * 1e-9, flops * 1e-9 / (median * 1e-3));
  const Plan& plan = session.plan();
  const double mib = 1.0 / (1024.0 * 1024.0);
  std::printf(
      "peak memory: RSS %.1f MiB (getrusage ru_maxrss, whole process); planned arena %.1f MiB "
      "(naive one buffer per value %.1f MiB), persistent state %.3f MiB\n",
      peak_rss_mib(), static_cast<double>(plan.arena_bytes) * mib, static_cast<double>(plan.naive_bytes) * mib,
      static_cast<double>(session.persistent_bytes()) * mib);
  {  // float32 values the plan stores in 16 bits (runtime/narrow.h: cuda under bf16/fp16)
    size_t count = 0, bytes = 0;
    for (const PlannedValue& v : plan.values)
      if ((v.dtype == DataType::BFloat16 || v.dtype == DataType::Float16) && plan.graph.find_info(v.name) &&
          plan.graph.find_info(v.name)->dtype == DataType::Float32)
        ++count, bytes += v.bytes;
    std::printf("16-bit storage: %zu float32 values stored in 16 bits, %.1f MiB (runtime/narrow.h)\n", count,
                static_cast<double>(bytes) * mib);
  }
  std::printf("layout reorders: %.1f MiB per step (oneDNN reorders between row-major and blocked layouts)\n",
              static_cast<double>(t.reorder_bytes) * mib / static_cast<double>(c.steps));
  std::printf("loss: %.4f (first step) -> %.4f (last step)\n", t.first_loss, t.last_loss);
  print_fusion_tally();
}

// How the run ran, one line per item: CUDA-graph capture (Executor::capture_status), each
// fallback (ops/cuda/graph_fallback.h FallbackLog), the engine of each convolution pass
// and matrix product and the convolutions' TFLOP/s (ops/core/engine_record.h).
void print_run_report(const TrainingSession& session, const BenchConfig& c) {
  std::printf("%s\n", capture_line(session.capture_status()).c_str());
  print_fallbacks();
  if (c.backend != "cuda") {
    std::printf("engines: none chosen (the %s backend's kernels are %s)\n", c.backend.c_str(),
                c.backend == "cpu" ? "oneDNN primitives and oneTBB loops" : "plain loops");
    return;
  }
  print_engines();
  std::printf("engine choice: %s, %s engines\n",
              c.autotune == 0 ? "not timed (--autotune 0: the heuristics' first)"
                              : ("the heuristics' first " + std::to_string(c.autotune) + " timed").c_str(),
              c.deterministic ? "deterministic" : "non-deterministic allowed");
}

// What runs: without AVX-512 oneDNN has neither nChw16c kernels nor Winograd, so the
// cpu backend keeps every value plain (ops/onednn/dnnl_util.h) and runs its own Winograd
// where the CPU has AVX2+FMA (ops/onednn/winograd.h), else direct.
struct GraphSize {
  size_t nodes = 0, params = 0;  // nodes as built (before fusions), parameter tensors
  int64_t param_values = 0;
};

GraphSize graph_size(const TrainingGraph& t) {
  GraphSize g{t.graph.nodes.size(), t.params.size(), 0};
  for (const std::string& p : t.params) g.param_values += t.graph.initializers.at(p).numel();
  return g;
}

void print_setup(const BenchConfig& c, const BatchIo& io, const GraphSize& size, const TrainingSession& session) {
  std::printf("model: %s, input '%s' %s, %lld classes, %zu parameter tensors (%lld values)\n", c.path.c_str(),
              io.input.c_str(), dims_to_string(io.dims).c_str(), static_cast<long long>(io.classes), size.params,
              static_cast<long long>(size.param_values));
  std::printf(
      "setup: backend %s, threads %lld, precision %s, optimizer %s (momentum 0.9, lr %g), batch %lld, "
      "warmup %lld, steps %lld\n",
      c.backend.c_str(), static_cast<long long>(c.threads), c.precision.c_str(), c.optimizer.c_str(), c.lr,
      static_cast<long long>(c.batch), static_cast<long long>(c.warmup), static_cast<long long>(c.steps));
  const bool avx512 = c.backend != "cpu" || dnnl_util::cpu_has_avx512_core();
  const std::string layouts = !c.blocked            ? "plain"
                              : c.backend == "cuda" ? "blocked (NHWC)"
                              : avx512              ? "blocked"
                                                    : "plain (blocked needs AVX-512)";
  // On the cpu: oneDNN's Winograd on AVX-512 (with blocked layouts, or unless TRAINRT_WINOGRAD=own), else its own.
  const bool own =
      c.backend == "cpu" && winograd::supported() && (!avx512 || (!c.blocked && winograd::own_requested()));
  const std::string convs = c.conv != ConvAlgorithm::winograd ? "direct"
                            : own    ? "winograd (the backend's own F(4x4,3x3) from 64 channels in and out)"
                            : avx512 ? std::string("winograd") + (c.backend == "cpu" ? " (oneDNN's)" : "")
                                     : "direct (winograd needs AVX2 and FMA)";
  // The session adds an Assign node per state update its producer cannot write in place.
  const Graph& run = session.training().graph;
  const auto assigns = static_cast<size_t>(std::count_if(run.nodes.begin(), run.nodes.end(), [](const Node& n) {
    return n.domain == kTrainrtDomain && n.op_type == "Assign";
  }));
  std::printf(
      "training graph: %zu nodes, fusions %s (%zu nodes run, plus %zu state writes), layouts %s, "
      "convolutions %s\n",
      size.nodes, c.fuse ? "on" : "off", run.nodes.size() - assigns, assigns, layouts.c_str(), convs.c_str());
  std::fflush(stdout);
}

}  // namespace

int cmd_bench(const Argv& argv) {
  Args a = parse_args(kSpec, argv);
  if (a.help) return print_help(kSpec), 0;
  const BenchConfig c = bench_config(a);
  configure_threads(static_cast<int>(c.threads));

  const Graph forward = import_onnx_file(c.path, registry().schemas);
  const BatchIo io = batch_io(forward, c.batch, c.path, "bench");
  TrainingOptions topts;
  topts.optimizer = c.optimizer;
  topts.momentum = 0.9f;
  if (c.math == MathPrecision::fp16) topts.loss_scale_name = "loss_scale";  // as train: fp16 steps are loss-scaled
  TrainingGraph t = build_training_graph(forward, topts);
  const TensorMap feeds = random_batch(io, t.labels, c.seed);
  TensorMap typed = feeds;
  typed[t.lr] = Tensor(DataType::Float32, {});
  if (!t.loss_scale.empty()) typed[t.loss_scale] = Tensor(DataType::Float32, {});
  const double flops = step_flops(specialize(t.graph, typed));

  set_default_fp32_math(c.fp32_math);
  set_default_deterministic(c.deterministic);
  std::unique_ptr<Backend> backend = make_backend(c.backend, static_cast<int>(c.threads));
  backend->check_math(c.math);
  backend->narrow_storage = c.narrow_storage;
  const GraphSize size = graph_size(t);
  // --device cuda: engine choices timed once (the first --autotune candidates), kept in the file
  std::unique_ptr<EngineChooser> chooser = make_engine_chooser(c.backend, c.timing_cache, c.autotune);
  TrainingSession session(std::move(t), std::move(backend),
                          {.seed = c.seed,
                           .fuse = c.fuse,
                           .fuse_dropout = c.fuse_dropout,
                           .blocked_layouts = c.blocked,
                           .math = c.math,
                           .conv = c.conv,
                           .concurrent_branches = c.concurrent,
                           .chooser = chooser.get()});
  print_setup(c, io, size, session);
  ProfileCollector prof;
  const StepTimes times = time_steps(session, feeds, c, c.profile || !c.trace.empty() ? &prof : nullptr);
  print_times(times, session, c, flops);
  print_run_report(session, c);
  save_engine_choices(chooser.get(), c.timing_cache);
  if (c.profile) {
    // Measured after the steps, in the same run: the GB/s column's roofline.
    // A device too full for two more buffers still gets its table, without the share.
    const size_t copy_bytes = size_t{256} << 20;
    double copy = 0;
    try {
      copy = copy_bandwidth_gbps(session.backend(), copy_bytes);
      std::printf(
          "\nmemory: %.1f GB/s, the %s backend's copy of %zu MiB (bytes read + written per second, best of 3)\n", copy,
          c.backend.c_str(), copy_bytes >> 20);
    } catch (const std::exception& e) {  // Error, or the host's std::bad_alloc
      std::printf("\nmemory: not measured (%s)\n", e.what());
    }
    std::printf(
        "profile over %lld timed steps (kernel time per op type, all steps; GB/s: the nodes' inputs and outputs "
        "as stored, per second):\n%s",
        static_cast<long long>(c.steps), profile_table(prof.events, copy).c_str());
  }
  if (!c.trace.empty()) {
    write_chrome_trace(c.trace, prof.events);
    std::printf("trace of the timed steps written to %s\n", c.trace.c_str());
  }
  return 0;
}

}  // namespace trainrt

// `trainrt selftest [MODEL.onnx] --device cpu|cuda`: this machine's kernels against the
// reference backend, on a small Wide ResNet or the given model (one float input
// [N,C,...], logits [N,classes]; its own weights, synthetic batches), node by node: the
// forward pass, one training step (forward, backward and optimizer outputs) and a third
// step that starts from the state two steps left. Every node reruns alone on the
// reference on the inputs the device gave it. Exit 0 when every value agrees within
// --tolerance, 1 naming the first node that does not (a kernel bug, or a broken
// GPU/driver), 2 for bad flags.
//
// Why node by node, in fp32 too: whole runs of a deep network drift apart. A batch norm
// over a few values per channel amplifies a last-place difference (torchvision's
// MobileNetV3 at batch 4 differs by 3% after a dozen layers on two correct backends),
// and two steps of SGD move the weights apart further. Per node, only a kernel's own
// arithmetic differs, whatever the model.
//
// Why: the cuda backend can only be run where a GPU is, which is not where trainrt is
// built and tested; a user checks their node with one command before a long job, and
// the report names the op to look at. With --device cpu the same comparison runs in
// CI, so the command itself is tested.
//
// Error measure per value: max |device - reference| / max(max |reference|, 1e-6) --
// relative to the value's scale, so gradients near zero do not turn rounding noise into
// failures. The reference accumulates in double; fp32 kernels differ by ~1e-6 here,
// TF32 tensor cores (inputs rounded to 10 bits) by ~1e-3.
#include <algorithm>
#include <cstdio>

#include "autodiff/training_graph.h"
#include "graph/error.h"
#include "graph/infer.h"
#include "graph/onnx_io.h"
#include "launch/cli.h"
#include "launch/commands.h"
#include "launch/selftest_compare.h"
#include "launch/train_util.h"
#include "models/wrn.h"
#include "ops/core/register_all.h"
#include "runtime/training_session.h"

namespace trainrt {

namespace {

const CommandSpec kSpec{
    "selftest",
    "trainrt selftest [MODEL.onnx] [--device cpu|cuda] [options]",
    "Compare this machine's kernels with the reference backend on a small Wide ResNet, or on MODEL.onnx\n"
    "(one float input [N,C,...] with only N symbolic, logits [N,classes]; its own weights, random\n"
    "batches), node by node (each node rerun alone on the reference, on the device's inputs): the\n"
    "forward pass, training step 1 and step 3 (from the state two steps left). Exit 0 when all agree\n"
    "within --tolerance; 1 naming the first node that does not.",
    {{"device", "cpu", "cpu or cuda (the cuda backend on this node's GPU)"},
     {"widths", "4,8,12,16", "Wide ResNet widths (input block, stages 1-3); not with MODEL.onnx"},
     {"batch", "8", "images per step"},
     {"tolerance", "",
      "largest relative error allowed per value (default from the arithmetic, u = unit roundoff: fp32 1e-4; "
      "--fp32-math tf32 10 u(TF32) = 0.0049; bf16 u(bf16)/8 = 0.00049; fp16 max(u(fp16)/8, 1e-4) = 1e-4)"},
     {"fp32-math", "strict",
      "with --device cuda: strict (full fp32, the reference's arithmetic) or tf32 (TF32 tensor cores: "
      "errors near 1e-3)"},
     {"precision", "fp32",
      "fp32, bf16 or fp16: the convolutions and matrix products read inputs rounded to that type on both "
      "backends (the reference rounds the same inputs); bf16 on --device cpu needs AVX-512 BF16"},
     {"layout", "nhwc",
      "with --device cuda: nhwc (the training step's activations NHWC between the kernels that take it) or nchw"},
     {"deterministic", "on",
      "on: deterministic library engines only (cuda; the cpu kernels are deterministic either way); off: also "
      "non-deterministic ones (split-K weight gradients), as train and bench by default"},
     {"narrow-storage", "on",
      "with --device cuda and --precision bf16/fp16: values the kernels read and write in 16 bits stored so "
      "(on), or every activation kept float32 (off) to tell a 16-bit storage fault from a kernel's"},
     {"threads", "0", "CPU threads (0 = all cores)"}},
    0,
    1};

void report(const char* what, const SelftestWorst& w, const std::string& failure) {
  std::string sensitive;
  if (w.sensitive > 0)
    sensitive = "; " + std::to_string(w.sensitive) + " over it but within their inputs' rounding (sums that cancel)";
  std::printf("  %-36s %5zu values, worst relative error %.2g%s%s%s  %s\n", what, w.values, w.error,
              w.where.empty() ? "" : " at ", w.where.c_str(), sensitive.c_str(), failure.empty() ? "ok" : "FAILED");
  std::fflush(stdout);
}

// Every output of every step of one training step, by value name (as the host sees it).
struct Recorder : StepHooks {
  explicit Recorder(TrainingSession& session) : s(session) {}
  TrainingSession& s;
  TensorMap values;
  void after_step(int step) override {
    const Plan& p = s.plan();
    const PlanStep& st = p.steps[static_cast<size_t>(step)];
    const Node& n = p.graph.nodes[st.node];
    for (size_t k = 0; k < st.outputs.size(); ++k) {
      if (st.outputs[k] < 0) continue;
      values[n.outputs[k]] = to_plain(s.backend().to_host(s.value(n.outputs[k])));
    }
  }
};

// Inference: the device's whole run, then every node alone on the reference. "" or
// what failed.
std::string selftest_inference(const Graph& g, Backend& backend, const BatchIo& io, MathPrecision math, double tol) {
  const TensorMap feeds{{io.input, random_batch(io, "labels", 1).at(io.input)}};
  RunOptions ro;
  for (const Node& n : g.nodes)
    for (const std::string& out : n.outputs)
      if (!out.empty() && std::find(g.outputs.begin(), g.outputs.end(), out) == g.outputs.end())
        ro.extra_outputs.push_back(out);
  ExecutorOptions eo;
  eo.plan.kept_outside = true;  // the results outlive the executor
  eo.math = math;
  const TensorMap got = Executor(g, backend, eo).run(feeds, ro);
  TensorMap given = feeds;
  for (const auto& [name, t] : g.initializers) given[name] = t;
  SelftestWorst w;
  const std::string failure = selftest_replay(g, given, got, math, /*training=*/false, tol, w);
  report("forward (inference, node by node)", w, failure);
  return failure;
}

// Training: step 1 node by node, then step 3 node by node from the state two steps
// left (the optimizer's state carried across steps, as the device keeps it). "" or what
// failed.
std::string selftest_training(const Graph& g, std::unique_ptr<Backend> backend, const BatchIo& io, MathPrecision math,
                              bool channels_last, double tol) {
  std::string failure;
  TrainingOptions t;
  t.momentum = 0.9f;
  t.weight_decay = 5e-4f;
  // fp16 trains with dynamic loss scaling, as `trainrt train` does: unscaled gradients
  // this small are half subnormals, where both backends' rounding would differ by whole
  // units in the last place for differences of an fp32 ulp.
  if (math == MathPrecision::fp16) t.loss_scale_name = "loss_scale";
  TrainingSession dev(build_training_graph(g, t), std::move(backend),
                      {.seed = 2, .blocked_layouts = channels_last, .math = math});
  auto batch_of = [&](uint64_t seed) { return random_batch(io, dev.training().labels, seed); };
  // What the device's step starts from: its state now, the batch, lr, the loss scale
  // (and, added after the step, the constants the passes folded into its plan).
  auto start_of = [&](const TensorMap& batch) {
    TensorMap given = batch;
    for (const auto& [name, t] : dev.training().graph.initializers) given[name] = to_plain(dev.state(name)).clone();
    given[dev.training().lr] = Tensor(DataType::Float32, {});
    given[dev.training().lr].data<float>()[0] = 0.05f;
    if (dev.loss_scaling()) {
      given[dev.training().loss_scale] = Tensor(DataType::Float32, {});
      given[dev.training().loss_scale].data<float>()[0] = dev.loss_scale();
    }
    return given;
  };
  for (uint64_t step = 1; step <= 3 && failure.empty(); ++step) {
    const TensorMap batch = batch_of(9 + step);
    if (step == 2) {  // not compared: it moves the state step 3 starts from
      dev.step(batch, 0.05f);
      continue;
    }
    // Under fp16 the first steps may overflow at the loss scaler's starting scale: the
    // step is skipped (nothing written) and the scale halves, as in `trainrt train`.
    // The comparison takes the first step that ran through.
    TensorMap given;
    Recorder rd(dev);
    uint64_t run_seed = 0;  // the step's Dropout masks derive from it
    for (int attempt = 0;; ++attempt) {
      given = start_of(batch);
      run_seed = dev.next_run_seed();
      rd.values.clear();
      dev.set_step_hooks(&rd);
      dev.step(batch, 0.05f);
      dev.set_step_hooks(nullptr);
      if (!dev.last_step_skipped()) break;
      if (attempt == 30) {
        failure = "training step " + std::to_string(step) + ": 30 tries in a row overflowed under loss scaling";
        break;
      }
      std::printf("  training step %d skipped by the loss scaler (gradients not finite); again at scale %g\n",
                  static_cast<int>(step), static_cast<double>(dev.loss_scale()));
    }
    if (!failure.empty()) break;
    for (const auto& [name, t] : dev.plan().graph.initializers) given.emplace(name, t);
    SelftestWorst w;
    failure = selftest_replay(dev.plan().graph, given, rd.values, math, /*training=*/true, tol, w, run_seed);
    report(step == 1 ? "training step 1 (node by node)" : "training step 3 (node by node)", w, failure);
  }
  return failure;
}

}  // namespace

int cmd_selftest(const Argv& argv) {
  Args a = parse_args(kSpec, argv);
  if (a.help) return print_help(kSpec), 0;
  const std::string device = a.str("device");
  if (device != "cpu" && device != "cuda") throw_bad_input("--device " + device, "expected cpu or cuda");
  const int64_t batch = a.at_least("batch", 2);  // BatchNormalization needs two images
  const int64_t threads = a.at_least("threads", 0);
  const std::string model_path = a.positional.empty() ? "" : a.positional[0];
  if (!model_path.empty() && a.on("widths"))
    throw_bad_input("--widths", "sizes the built-in Wide ResNet; " + model_path + " has its own");
  WrnOptions o = wrn_options_for_dataset("fashion-mnist");
  o.widths = parse_widths(a.str("widths"));
  configure_threads(static_cast<int>(threads));
  const Fp32Math fp32_math = fp32_math_for_device(a, Fp32Math::strict);
  const bool channels_last = channels_last_for_device(a);
  set_default_fp32_math(fp32_math);
  set_default_deterministic(deterministic_for_device(a, true));
  const std::string precision = a.one_of("precision", {"fp32", "bf16", "fp16"});
  const MathPrecision math = precision == "bf16"   ? MathPrecision::bf16
                             : precision == "fp16" ? MathPrecision::fp16
                                                   : MathPrecision::fp32;
  // Node by node only a kernel's own summation order differs from the reference's, and
  // TF32's rounding of its inputs, which the reference does not do; a kernel that did not
  // round its inputs to bf16/fp16 is off by about that type's unit roundoff
  // (selftest_default_tolerance, launch/selftest_compare.h, says how the default follows).
  const bool tf32 = fp32_math == Fp32Math::tf32 && math == MathPrecision::fp32;
  const double tol =
      a.str("tolerance").empty() ? selftest_default_tolerance(math, tf32) : a.positive_number("tolerance");
  std::unique_ptr<Backend> backend = make_backend(device, static_cast<int>(threads));
  backend->check_math(math);
  backend->narrow_storage = a.on_off("narrow-storage");
  Graph g = model_path.empty() ? build_wide_resnet(o) : import_onnx_file(model_path, registry().schemas);
  infer_shapes(g, registry().schemas, "selftest");
  const BatchIo io = batch_io(g, batch, model_path.empty() ? "the Wide ResNet" : model_path, "selftest");

  std::printf("trainrt selftest: backend %s against the reference backend\n", backend->name().c_str());
  std::vector<std::string> host = backend->fallback_ops();
  std::string host_list;
  for (const std::string& op : host) host_list += (host_list.empty() ? "" : ", ") + op;
  if (backend->asynchronous()) {
    std::printf("  ops run on the host: %s\n", host_list.empty() ? "none" : host_list.c_str());
    std::printf("  fp32 math of convolutions and Gemm: %s\n", fp32_math_name(fp32_math));
  }
  std::printf("  precision %s (arithmetic of the convolutions and matrix products)\n", math_precision_name(math));
  std::printf("  tolerance %.2g (%s)\n", tol,
              a.str("tolerance").empty() ? "derived from the arithmetic" : "--tolerance");
  if (backend->asynchronous())
    std::printf("  training step's activations: %s\n",
                channels_last ? "NHWC between the kernels that take it" : "NCHW");
  if (model_path.empty())
    std::printf("  Wide ResNet widths %s", a.str("widths").c_str());
  else
    std::printf("  %s, input '%s'", model_path.c_str(), io.input.c_str());
  std::printf(" on %s, %lld classes; SGD momentum 0.9, weight decay 5e-4\n", dims_to_string(io.dims).c_str(),
              static_cast<long long>(io.classes));

  std::string failure = selftest_inference(g, *backend, io, math, tol);
  if (failure.empty()) failure = selftest_training(g, std::move(backend), io, math, channels_last, tol);
  if (!failure.empty()) {
    std::printf("selftest FAILED: %s\n", failure.c_str());
    // Which library path each problem took up to here, the failing node's among them (the
    // cuda backend's graphs, fallbacks and engines; empty logs elsewhere).
    std::printf("how the library kernels ran up to the failure (cuda only):\n");
    print_fusion_tally();
    print_fallbacks();
    print_engines();
    std::fflush(stdout);
    throw_internal("selftest --device " + device, failure);
  }
  std::printf("selftest passed\n");
  return 0;
}

}  // namespace trainrt

// `trainrt selftest [MODEL.onnx] --device cpu|cuda`: this machine's kernels against the
// reference backend, on a small Wide ResNet or the given model (one float input
// [N,C,...], logits [N,classes]; its own weights, synthetic batches): the forward pass
// value by value, one training step node by node (forward, backward and optimizer
// outputs), then two more steps' losses and the whole state. Exit 0 when every value
// agrees within --tolerance, 1 naming the first node that does not (a kernel bug, or a
// broken GPU/driver), 2 for bad flags.
//
// Why: the cuda backend can only be run where a GPU is, which is not where trainrt is
// built and tested; a user checks their node with one command before a long job, and
// the report names the op to look at. With --device cpu the same comparison runs in
// CI, so the command itself is tested.
//
// Error measure per value: max |device - reference| / max(max |reference|, 1e-6) --
// relative to the value's scale, so gradients near zero do not turn rounding noise into
// failures. The reference accumulates in double; fp32 kernels differ by ~1e-6 here.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "autodiff/training_graph.h"
#include "graph/error.h"
#include "graph/infer.h"
#include "graph/onnx_io.h"
#include "launch/cli.h"
#include "launch/commands.h"
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
    "batches): the forward pass value by value, one training step node by node, then three steps'\n"
    "losses and state. Exit 0 when all agree within --tolerance; 1 naming the first node that does not.",
    {{"device", "cpu", "cpu or cuda (the cuda backend on this node's GPU)"},
     {"widths", "4,8,12,16", "Wide ResNet widths (input block, stages 1-3); not with MODEL.onnx"},
     {"batch", "8", "images per step"},
     {"tolerance", "",
      "largest relative error allowed per value (default: 0.002 comparing whole fp32 runs, 0.0001 node by node in "
      "bf16/fp16)"},
     {"fp32-math", "strict",
      "with --device cuda: strict (full fp32, the reference's arithmetic) or tf32 (TF32 tensor cores: "
      "expect errors near 1e-3, raise --tolerance)"},
     {"precision", "fp32",
      "fp32, bf16 or fp16: the convolutions and matrix products read inputs rounded to that type on both "
      "backends (the reference rounds the same inputs); bf16 on --device cpu needs AVX-512 BF16"},
     {"layout", "nhwc",
      "with --device cuda: nhwc (the training step's activations NHWC between the kernels that take it) or nchw"},
     {"threads", "0", "CPU threads (0 = all cores)"}},
    0,
    1};

struct Worst {
  double error = 0;
  std::string where;
  size_t values = 0;
};

// Scale-relative difference of two tensors of one shape (any layout).
double relative_error(const Tensor& got, const Tensor& want) {
  const Tensor a = to_plain(got), b = to_plain(want);
  if (a.dims() != b.dims()) return INFINITY;
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double x = a.get_as_double(i), y = b.get_as_double(i);
    diff = std::max(diff, std::isnan(x) != std::isnan(y) ? INFINITY : std::fabs(x - y));
    scale = std::max(scale, std::fabs(y));
  }
  return diff / std::max(scale, 1e-6);
}

// Compares every value `want` has, in `order`; the first one over `tol` is returned as a
// failure message, and the worst is kept.
std::string compare(const std::vector<std::pair<std::string, std::string>>& order, const TensorMap& got,
                    const TensorMap& want, double tol, Worst& worst) {
  for (const auto& [value, node] : order) {
    auto g = got.find(value), w = want.find(value);
    if (w == want.end() || !dtype_is_float(w->second.dtype())) continue;
    if (g == got.end()) return "value '" + value + "' of " + node + " was not produced";
    const double e = relative_error(g->second, w->second);
    ++worst.values;
    if (e > worst.error) worst = {e, node + " output '" + value + "'", worst.values};
    if (!(e <= tol)) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.3g", e);
      char limit[32];
      std::snprintf(limit, sizeof limit, "%g", tol);
      return node + " output '" + value + "': relative error " + buf + " (tolerance " + limit + ")";
    }
  }
  return "";
}

std::string describe(const Node& n) { return "node '" + n.name + "' (" + n.op_type + ")"; }

// Node by node on the device's own inputs: each node of `g` runs alone on the reference
// backend, in `math`, on the values the device's run gave its inputs (`got`, else
// `given`: feeds, initializers, state before the step), and its outputs are compared with
// the device's. Under bf16/fp16 this is the comparison that means something: two whole
// runs drift apart, because a difference in an fp32 value's last place moves it across a
// bf16/half rounding boundary now and then, and what that changes grows layer by layer (a
// ReLU mask flips). Dropout in training draws from the node's seed, which a graph of one
// node does not reproduce: it is not rerun, and its outputs pass on as the device made them.
std::string replay(const Graph& g, const TensorMap& given, const TensorMap& got, MathPrecision math, bool training,
                   double tol, Worst& worst) {
  const std::unique_ptr<Backend> reference = make_backend("reference");
  for (const Node& n : g.nodes) {
    if (training && n.op_type == "Dropout") continue;
    Graph one;
    one.name = "selftest";
    one.opsets = g.opsets;
    TensorMap feeds;
    for (const std::string& in : n.inputs) {
      if (in.empty() || feeds.count(in)) continue;
      auto it = got.find(in);
      if (it == got.end() && (it = given.find(in)) == given.end())
        return "value '" + in + "' read by " + describe(n) + " was not recorded";
      feeds[in] = it->second;
      one.inputs.push_back(in);
      one.values[in] = ValueInfo{it->second.dtype(), shape_of(it->second.dims())};
    }
    one.nodes.push_back(n);
    std::vector<std::pair<std::string, std::string>> order;
    for (const std::string& out : n.outputs)
      if (!out.empty()) {
        one.outputs.push_back(out);
        if (got.count(out)) order.push_back({out, describe(n)});
      }
    infer_shapes(one, registry().schemas, "selftest");
    ExecutorOptions eo;
    eo.plan.kept_outside = true;  // the results outlive the executor
    eo.math = math;
    RunOptions ro;
    ro.training = training;
    const TensorMap want = Executor(one, *reference, eo).run(feeds, ro);
    if (std::string failure = compare(order, got, want, tol, worst); !failure.empty()) return failure;
  }
  return "";
}

void report(const char* what, const Worst& w, const std::string& failure) {
  std::printf("  %-36s %5zu values, worst relative error %.2g%s%s  %s\n", what, w.values, w.error,
              w.where.empty() ? "" : " at ", w.where.c_str(), failure.empty() ? "ok" : "FAILED");
  std::fflush(stdout);
}

// Every output of every step of one training step, by value name (as the host sees it).
struct Recorder {
  TrainingSession& s;
  TensorMap values;
  std::vector<std::pair<std::string, std::string>> order;  // value, node description
  void operator()(int step) {
    const Plan& p = s.plan();
    const PlanStep& st = p.steps[static_cast<size_t>(step)];
    const Node& n = p.graph.nodes[st.node];
    for (size_t k = 0; k < st.outputs.size(); ++k) {
      if (st.outputs[k] < 0) continue;
      values[n.outputs[k]] = to_plain(s.backend().to_host(s.value(n.outputs[k])));
      order.push_back({n.outputs[k], describe(n)});
    }
  }
};

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
  const std::string precision = a.one_of("precision", {"fp32", "bf16", "fp16"});
  const MathPrecision math = precision == "bf16"   ? MathPrecision::bf16
                             : precision == "fp16" ? MathPrecision::fp16
                                                   : MathPrecision::fp32;
  // Node by node (bf16/fp16) only a kernel's own summation order differs from the
  // reference's; a kernel that did not round its inputs would be off by ~1e-3.
  const double tol =
      a.str("tolerance").empty() ? (math == MathPrecision::fp32 ? 0.002 : 1e-4) : a.positive_number("tolerance");
  std::unique_ptr<Backend> backend = make_backend(device, static_cast<int>(threads));
  backend->check_math(math);
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
  if (backend->asynchronous())
    std::printf("  training step's activations: %s\n",
                channels_last ? "NHWC between the kernels that take it" : "NCHW");
  if (model_path.empty())
    std::printf("  Wide ResNet widths %s", a.str("widths").c_str());
  else
    std::printf("  %s, input '%s'", model_path.c_str(), io.input.c_str());
  std::printf(" on %s, %lld classes; SGD momentum 0.9, weight decay 5e-4\n", dims_to_string(io.dims).c_str(),
              static_cast<long long>(io.classes));
  std::string failure;

  // Inference, value by value.
  const TensorMap feeds{{io.input, random_batch(io, "labels", 1).at(io.input)}};
  RunOptions ro;
  std::vector<std::pair<std::string, std::string>> order;
  for (const Node& n : g.nodes)
    for (const std::string& out : n.outputs)
      if (!out.empty()) {
        ro.extra_outputs.push_back(out);
        order.push_back({out, describe(n)});
      }
  ro.extra_outputs.erase(std::remove_if(ro.extra_outputs.begin(), ro.extra_outputs.end(),
                                        [&](const std::string& v) {
                                          return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end();
                                        }),
                         ro.extra_outputs.end());
  {
    Worst w;
    auto run = [&](const Backend& b) {
      ExecutorOptions eo;
      eo.plan.kept_outside = true;  // the results outlive the executor
      eo.math = math;
      return Executor(g, b, eo).run(feeds, ro);
    };
    const TensorMap got = run(*backend);
    if (math == MathPrecision::fp32) {
      const std::unique_ptr<Backend> reference = make_backend("reference");
      failure = compare(order, got, run(*reference), tol, w);
    } else {
      TensorMap given = feeds;
      for (const auto& [name, t] : g.initializers) given[name] = t;
      failure = replay(g, given, got, math, /*training=*/false, tol, w);
    }
    report(math == MathPrecision::fp32 ? "forward (inference)" : "forward (inference, node by node)", w, failure);
  }

  // Training: step 1 node by node, then steps 2-3 by loss and the state after them.
  if (failure.empty()) {
    TrainingOptions t;
    t.momentum = 0.9f;
    t.weight_decay = 5e-4f;
    // fp16 trains with dynamic loss scaling, as `trainrt train` does: unscaled gradients
    // this small are half subnormals, where both backends' rounding would differ by whole
    // units in the last place for differences of an fp32 ulp.
    if (math == MathPrecision::fp16) t.loss_scale_name = "loss_scale";
    TrainingSession dev(build_training_graph(g, t), std::move(backend),
                        {.seed = 2, .blocked_layouts = channels_last, .math = math});
    TrainingSession ref(build_training_graph(g, t), make_backend("reference"), {.seed = 2, .math = math});
    Recorder rd{dev, {}, {}}, rr{ref, {}, {}};
    dev.set_after_step([&](int s) { rd(s); });
    ref.set_after_step([&](int s) { rr(s); });
    auto batch_of = [&](uint64_t seed) { return random_batch(io, dev.training().labels, seed); };
    // What the device's step starts from, for the node-by-node replay in bf16/fp16.
    TensorMap given = batch_of(10);
    for (const auto& [name, t] : dev.training().graph.initializers) given[name] = to_plain(dev.state(name)).clone();
    given[dev.training().lr] = Tensor(DataType::Float32, {});
    given[dev.training().lr].data<float>()[0] = 0.05f;
    if (dev.loss_scaling()) {
      given[dev.training().loss_scale] = Tensor(DataType::Float32, {});
      given[dev.training().loss_scale].data<float>()[0] = dev.loss_scale();
    }
    dev.step(batch_of(10), 0.05f);
    ref.step(batch_of(10), 0.05f);
    Worst w;
    if (math == MathPrecision::fp32) {
      failure = compare(rr.order, rd.values, rr.values, tol, w);
      report("training step 1 (every node)", w, failure);
    } else {
      failure = replay(dev.plan().graph, given, rd.values, math, /*training=*/true, tol, w);
      report("training step 1 (node by node)", w, failure);
      if (failure.empty())
        std::printf("  training steps 2-3: not compared in %s (whole runs drift apart; see replay above)\n",
                    math_precision_name(math));
    }
    if (failure.empty() && math == MathPrecision::fp32) {
      dev.set_after_step(nullptr);
      ref.set_after_step(nullptr);
      Worst ws;
      for (uint64_t step = 2; step <= 3 && failure.empty(); ++step) {
        const TensorMap b = batch_of(10 + step);
        TensorMap ld{{"loss", Tensor(DataType::Float64, {})}}, lr{{"loss", Tensor(DataType::Float64, {})}};
        ld.at("loss").data<double>()[0] = dev.step(b, 0.05f);
        lr.at("loss").data<double>()[0] = ref.step(b, 0.05f);
        failure = compare({{"loss", "step " + std::to_string(step)}}, ld, lr, tol, ws);
      }
      TensorMap sd, sr;
      std::vector<std::pair<std::string, std::string>> names;
      for (const std::string& n : ref.state_names()) {
        sd[n] = dev.state(n);
        sr[n] = ref.state(n);
        names.push_back({n, "state"});
      }
      if (failure.empty()) failure = compare(names, sd, sr, tol, ws);
      report("training steps 2-3 (loss, state)", ws, failure);
    }
  }
  if (!failure.empty()) {
    std::printf("selftest FAILED: %s\n", failure.c_str());
    std::fflush(stdout);
    throw_internal("selftest --device " + device, failure);
  }
  std::printf("selftest passed\n");
  return 0;
}

}  // namespace trainrt

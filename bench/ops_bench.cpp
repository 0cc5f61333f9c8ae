// trainrt_bench_ops: forward speed of each op family on the Wide ResNet's real
// layer shapes, cpu (oneDNN) backend against the reference backend.
//
//   ./build/bench/trainrt_bench_ops                      # all families, batch 32 and 64
//   ./build/bench/trainrt_bench_ops --family conv --batches 32 --ref-batch 0
//   OMP_NUM_THREADS=1 ./build/bench/trainrt_bench_ops    # oneDNN threads are OpenMP's
//
// Each line: family, layer, shape, batch, backend, ms per call, GFLOP/s (FLOPs from
// the op's schema rule, multiply-add = 2) and, for the reference batch, the ratio
// cpu/reference of the two throughputs measured in this run. The kernel is called
// directly with preallocated outputs (no executor, no allocation) after one warm-up
// call, so the cpu figure includes oneDNN's per-call reorders but not plan creation.
// The reference backend is timed at a small batch only (--ref-batch, default 2):
// its plain loops take seconds per large layer. Not a test: nothing is asserted.
// On a machine whose cores are busy with other work, OpenMP's barriers make every
// multi-threaded call wait for a descheduled thread (a ~3 ms floor per call was seen
// on 2 shared cores); OMP_NUM_THREADS=1 then gives the cleaner per-core figure.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "graph/error.h"
#include "graph/infer.h"
#include "ops/core/register_all.h"
#include "ops/onednn/dnnl_util.h"
#include "runtime/backend.h"

using namespace trainrt;

namespace {

struct Options {
  std::vector<int64_t> batches{32, 64};
  int64_t ref_batch = 2;
  std::string family;  // empty: all
  double min_seconds = 0.3;
};

// One op on concrete inputs: a graph of one node whose outputs are typed by the
// op's shape rule, plus preallocated tensors for every value.
struct Bench {
  Graph g;
  std::vector<Tensor> inputs, outputs;
  double flops = 0;
};

Bench make_bench(const Node& n, const std::vector<Tensor>& inputs, bool training_outputs_ok = true) {
  Bench b;
  b.g.name = "bench";
  b.g.opsets[""] = 17;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    b.g.inputs.push_back(n.inputs[i]);
    b.g.values[n.inputs[i]] = ValueInfo{inputs[i].dtype(), shape_of(inputs[i].dims())};
  }
  b.g.nodes.push_back(n);
  for (const std::string& o : n.outputs) b.g.outputs.push_back(o);
  infer_shapes(b.g, registry().schemas, "bench");
  b.inputs = inputs;
  for (const std::string& o : n.outputs) {
    const ValueInfo& info = b.g.info(o);
    b.outputs.emplace_back(info.dtype, shape_dims(*info.shape));
  }
  const OpSchema* s = registry().schemas.find("", n.op_type);
  b.flops = s && s->flops ? s->flops(b.g, b.g.nodes[0]) : static_cast<double>(b.outputs[0].numel());
  return b;
}

// Seconds per call of `backend`'s kernel (mean over >= 3 calls and >= min_seconds,
// after one warm-up call; a call slower than 2 s is timed once).
double time_kernel(Bench& b, const Backend& backend, bool training, double min_seconds) {
  const Node& n = b.g.nodes[0];
  const Kernel& k = backend.kernel(n);
  KernelContext ctx{n, {}, {}, training, 0};
  for (const Tensor& t : b.inputs) ctx.inputs.push_back(&t);
  for (Tensor& t : b.outputs) ctx.outputs.push_back(&t);
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  k(ctx);
  double first = std::chrono::duration<double>(clock::now() - t0).count();
  if (first > 2.0) return first;
  int calls = 0;
  t0 = clock::now();
  double elapsed = 0;
  while (calls < 3 || elapsed < min_seconds) {
    k(ctx);
    ++calls;
    elapsed = std::chrono::duration<double>(clock::now() - t0).count();
  }
  return elapsed / calls;
}

Tensor rnd(std::vector<int64_t> dims, float lo = -1.f, float hi = 1.f) {
  Tensor t(DataType::Float32, std::move(dims));
  uint32_t s = 12345;
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = lo + (hi - lo) * static_cast<float>(s >> 8) / 16777216.f;
  }
  return t;
}

Node node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
          std::map<std::string, Attribute> attrs = {}) {
  Node n;
  n.name = op;
  n.op_type = op;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.attrs = std::move(attrs);
  return n;
}

// A benchmark case: family, layer label, and a builder for a given batch.
struct Case {
  std::string family, label;
  std::function<Bench(int64_t batch)> build;
  bool training = false;
};

std::vector<Case> wide_resnet_cases(int64_t hw, int64_t in_channels, int64_t classes) {
  std::vector<Case> cases;
  const std::string res = std::to_string(hw);
  const int64_t h1 = hw, h2 = hw / 2, h3 = hw / 4;
  auto conv = [&](int64_t c, int64_t m, int64_t h, int64_t k) {
    std::string label = "conv" + std::to_string(k) + "x" + std::to_string(k) + " " + std::to_string(c) + "->" +
                        std::to_string(m) + " @" + std::to_string(h);
    bool bias = k == 1;
    cases.push_back({"conv", label, [=](int64_t n) {
                       int64_t p = k / 2;
                       std::vector<std::string> in{"x", "w"};
                       std::vector<Tensor> t{rnd({n, c, h, h}), rnd({m, c, k, k}, -0.05f, 0.05f)};
                       if (bias) in.push_back("b"), t.push_back(rnd({m}));
                       return make_bench(node("Conv", in, {"y"}, {{"pads", Attribute::of_ints({p, p, p, p})}}), t);
                     }});
  };
  conv(in_channels, 16, h1, 3);
  conv(16, 160, h1, 3);
  conv(160, 160, h1, 3);
  conv(16, 160, h1, 1);
  conv(160, 320, h2, 3);
  conv(320, 320, h2, 3);
  conv(160, 320, h2, 1);
  conv(320, 640, h3, 3);
  conv(640, 640, h3, 3);
  conv(320, 640, h3, 1);

  for (bool train : {false, true}) {
    for (auto [c, h] : {std::pair<int64_t, int64_t>{16, h1}, {160, h1}, {320, h2}, {640, h3}}) {
      std::string label = std::string(train ? "bn-train " : "bn-infer ") + std::to_string(c) + " @" + std::to_string(h);
      cases.push_back({"bn", label,
                       [=](int64_t n) {
                         std::map<std::string, Attribute> a;
                         std::vector<std::string> out{"y"};
                         if (train) a["training_mode"] = Attribute::of_int(1), out = {"y", "rm", "rv"};
                         return make_bench(node("BatchNormalization", {"x", "s", "b", "m", "v"}, out, a),
                                           {rnd({n, c, h, h}), rnd({c}), rnd({c}), rnd({c}), rnd({c}, 0.5f, 1.5f)});
                       },
                       train});
    }
  }
  for (auto [c, h] : {std::pair<int64_t, int64_t>{160, h1}, {320, h2}, {640, h3}}) {
    std::string at = std::to_string(c) + " @" + std::to_string(h);
    cases.push_back({"relu", "relu " + at, [=](int64_t n) {
                       return make_bench(node("Relu", {"x"}, {"y"}), {rnd({n, c, h, h})});
                     }});
    cases.push_back({"add", "residual add " + at, [=](int64_t n) {
                       return make_bench(node("Add", {"a", "b"}, {"y"}), {rnd({n, c, h, h}), rnd({n, c, h, h})});
                     }});
  }
  auto two = Attribute::of_ints({2, 2}), seven = Attribute::of_ints({7, 7});
  for (auto [c, h] : {std::pair<int64_t, int64_t>{160, h1}, {320, h2}}) {
    cases.push_back({"pool", "maxpool2 " + std::to_string(c) + " @" + std::to_string(h), [=](int64_t n) {
                       return make_bench(node("MaxPool", {"x"}, {"y"}, {{"kernel_shape", two}, {"strides", two}}),
                                         {rnd({n, c, h, h})});
                     }});
  }
  cases.push_back({"pool", "avgpool7 640 @" + std::to_string(h3), [=](int64_t n) {
                     return make_bench(node("AveragePool", {"x"}, {"y"}, {{"kernel_shape", seven}, {"strides", seven}}),
                                       {rnd({n, 640, h3, h3})});
                   }});
  cases.push_back({"gemm", "gemm 640->" + std::to_string(classes), [=](int64_t n) {
                     return make_bench(node("Gemm", {"x", "w", "b"}, {"y"}, {{"transB", Attribute::of_int(1)}}),
                                       {rnd({n, 640}), rnd({classes, 640}), rnd({classes})});
                   }});
  cases.push_back({"softmax", "softmax " + std::to_string(classes), [=](int64_t n) {
                     return make_bench(node("Softmax", {"x"}, {"y"}), {rnd({n, classes}, -5.f, 5.f)});
                   }});
  (void)res;
  return cases;
}

void usage() {
  std::fprintf(stderr,
               "usage: trainrt_bench_ops [--family conv|bn|relu|add|pool|gemm|softmax] [--batches 32,64]\n"
               "                         [--ref-batch N (0: skip the reference)] [--min-seconds S]\n");
}

std::vector<int64_t> parse_list(const char* s) {
  std::vector<int64_t> v;
  for (const char* p = s; *p;) {
    char* end;
    v.push_back(std::strtoll(p, &end, 10));
    p = *end == ',' ? end + 1 : end;
    if (end == p && *p) break;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage(), std::exit(2);
      return argv[++i];
    };
    if (a == "--family")
      opt.family = value();
    else if (a == "--batches")
      opt.batches = parse_list(value());
    else if (a == "--ref-batch")
      opt.ref_batch = std::atoll(value());
    else if (a == "--min-seconds")
      opt.min_seconds = std::atof(value());
    else {
      usage();
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  try {
    auto cpu = make_backend("cpu");
    auto ref = make_backend("reference");
    const char* omp = std::getenv("OMP_NUM_THREADS");
    std::printf("# trainrt_bench_ops: oneDNN %d.%d.%d, OMP_NUM_THREADS=%s\n", dnnl::version()->major,
                dnnl::version()->minor, dnnl::version()->patch, omp ? omp : "(unset: all cores)");
    std::printf("%-8s %-26s %-6s %6s %-9s %10s %9s %9s\n", "family", "layer", "input", "batch", "backend", "ms/call",
                "GFLOP/s", "cpu/ref");
    struct Dataset {
      const char* name;
      int64_t hw, channels, classes;
    };
    for (Dataset ds : {Dataset{"fmnist", 28, 1, 10}, Dataset{"cifar", 32, 3, 100}}) {
      for (const Case& c : wide_resnet_cases(ds.hw, ds.channels, ds.classes)) {
        if (!opt.family.empty() && c.family != opt.family) continue;
        auto line = [&](int64_t batch, const Backend& b, double gflops_other) {
          Bench bench = c.build(batch);
          uint64_t before = dnnl_util::reference_fallbacks();
          double s = time_kernel(bench, b, c.training, opt.min_seconds);
          double gflops = bench.flops / s * 1e-9;
          bool fell_back = &b == cpu.get() && dnnl_util::reference_fallbacks() != before;
          std::printf("%-8s %-26s %-6s %6lld %-9s %10.3f %9.2f", c.family.c_str(), c.label.c_str(), ds.name,
                      static_cast<long long>(batch), fell_back ? "cpu(ref!)" : b.name().c_str(), s * 1e3, gflops);
          if (gflops_other > 0) std::printf(" %8.1fx", gflops / gflops_other);
          std::printf("\n");
          std::fflush(stdout);
          return gflops;
        };
        for (int64_t batch : opt.batches) line(batch, *cpu, 0);
        if (opt.ref_batch > 0) {
          double r = line(opt.ref_batch, *ref, 0);
          line(opt.ref_batch, *cpu, r);
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}

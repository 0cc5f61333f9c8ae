// cudnn_conv: every engine config cuDNN's heuristics list for the Wide ResNet's
// convolutions, each timed, with its numerical notes, its workspace and whether the cuda
// backend's engine filter (ops/core/engine_choice.h: keep_engine) would keep it. It says
// why a problem runs the engine it runs, and what the filter or the graph's data types
// cost against the fastest config cuDNN has. It includes nothing of trainrt, so it builds
// and runs from the GPU bundle on its own.
//
//   cudnn_conv [--batch N] [--dtype bf16|fp16|fp32] [--passes forward,data,filter]
//              [--out same|float|both] [--reps N] [--top N]
//
// --out: the data type of each pass's output (forward y, data dx, filter dw):
// `float` is what the backend describes for dw (the parameter's gradient is float32),
// `same` the inputs' 16-bit type (what PyTorch's autocast writes), `both` each in turn.
// One line per config: problem, heuristics mode and rank, engine tag (as the engine log
// writes it), notes, workspace MiB, mean ms over --reps calls after two warm-up calls,
// TFLOP/s (multiply-add = 2), and "kept" or the filter's reason. Then one line per
// problem: the first config the filter keeps against the fastest config. Configs past
// --top per heuristics mode are not tried. Not a test: nothing is asserted.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

// cuDNN 9.x marks the HANDLE attributes deprecated (ops/cuda/cudnn_graph.cu says why they are used).
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

struct Shape {
  int64_t cin, cout, size, kernel;
};

// The seed's Wide ResNet (widths 16, 160, 320, 640) on CIFAR-100's 32x32 images: its
// distinct convolutions, stride 1, "same" padding.
const Shape kShapes[] = {{3, 16, 32, 3},   {16, 160, 32, 3}, {160, 160, 32, 3}, {160, 320, 16, 3}, {320, 320, 16, 3},
                         {320, 640, 8, 3}, {640, 640, 8, 3}, {16, 160, 32, 1},  {160, 320, 16, 1}, {320, 640, 8, 1}};

// Descriptors made while one graph is tried, destroyed together.
struct Pool {
  std::vector<cudnnBackendDescriptor_t> all;
  std::string why;  // the first failing call
  ~Pool() {
    for (auto d : all) cudnnBackendDestroyDescriptor(d);
  }
  bool ok() const { return why.empty(); }
  bool note(cudnnStatus_t s, const char* what) {
    if (ok() && s != CUDNN_STATUS_SUCCESS) why = std::string(what) + ": " + cudnnGetErrorString(s);
    return ok();
  }
  cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t t, const char* what) {
    cudnnBackendDescriptor_t d = nullptr;
    if (ok() && note(cudnnBackendCreateDescriptor(t, &d), what)) all.push_back(d);
    return d;
  }
  void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t n, cudnnBackendAttributeType_t t, int64_t count,
           const void* v, const char* what) {
    if (ok()) note(cudnnBackendSetAttribute(d, n, t, count, v), what);
  }
  void set_desc(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t n, cudnnBackendDescriptor_t v,
                const char* what) {
    set(d, n, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v, what);
  }
  void finalize(cudnnBackendDescriptor_t d, const char* what) {
    if (ok()) note(cudnnBackendFinalize(d), what);
  }
};

// A 4-d tensor stored channels-last (NHWC; KRSC for a filter), 16-byte aligned.
cudnnBackendDescriptor_t tensor(Pool& p, int64_t uid, const int64_t d[4], cudnnDataType_t type) {
  const int64_t strides[4] = {d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]};
  const int64_t align = 16;
  cudnnBackendDescriptor_t t = p.make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor");
  p.set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "tensor type");
  p.set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, d, "tensor dims");
  p.set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, "tensor strides");
  p.set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor uid");
  p.set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
  p.finalize(t, "tensor finalize");
  return t;
}

enum class Pass { forward, data, filter };
const char* pass_name(Pass p) { return p == Pass::forward ? "forward" : p == Pass::data ? "data" : "filter"; }
const char* type_name(cudnnDataType_t t) {
  return t == CUDNN_DATA_BFLOAT16 ? "bf16" : t == CUDNN_DATA_HALF ? "fp16" : "float";
}

// The operation graph of one pass; uids 1 x, 2 w, 3 y.
cudnnBackendDescriptor_t op_graph(Pool& p, cudnnHandle_t h, Pass pass, const int64_t x[4], const int64_t w[4],
                                  const int64_t y[4], cudnnDataType_t in, cudnnDataType_t out) {
  const int64_t pad = w[2] / 2, one[2] = {1, 1}, pads[2] = {pad, pad}, spatial = 2;
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnBackendDescriptor_t conv = p.make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, "convolution");
  p.set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, "compute type");
  p.set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode, "mode");
  p.set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial, "spatial dims");
  p.set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, one, "strides");
  p.set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one, "dilations");
  p.set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pads, "pre-paddings");
  p.set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pads, "post-paddings");
  p.finalize(conv, "convolution finalize");
  cudnnBackendDescriptor_t tx = tensor(p, 1, x, pass == Pass::data ? out : in);
  cudnnBackendDescriptor_t tw = tensor(p, 2, w, pass == Pass::filter ? out : in);
  cudnnBackendDescriptor_t ty = tensor(p, 3, y, pass == Pass::forward ? out : in);
  const float alpha = 1.f, beta = 0.f;
  cudnnBackendDescriptor_t op = nullptr;
  if (pass == Pass::forward) {
    op = p.make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, "forward op");
    p.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, tx, "fwd x");
    p.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, tw, "fwd w");
    p.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, ty, "fwd y");
    p.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv, "fwd conv");
    p.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha, "fwd alpha");
    p.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta, "fwd beta");
  } else if (pass == Pass::data) {
    op = p.make(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, "data op");
    p.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, tx, "data dx");
    p.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, tw, "data w");
    p.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, ty, "data dy");
    p.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, conv, "data conv");
    p.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha, "data alpha");
    p.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, 1, &beta, "data beta");
  } else {
    op = p.make(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, "filter op");
    p.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, tx, "filter x");
    p.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, tw, "filter dw");
    p.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, ty, "filter dy");
    p.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, conv, "filter conv");
    p.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha, "filter alpha");
    p.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, 1, &beta, "filter beta");
  }
  p.finalize(op, "operation finalize");
  cudnnBackendDescriptor_t g = p.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
  p.set(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "graph handle");
  p.set(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op, "graph ops");
  p.finalize(g, "graph finalize");
  return g;
}

bool has(const std::vector<cudnnBackendNumericalNote_t>& notes, cudnnBackendNumericalNote_t n) {
  return std::find(notes.begin(), notes.end(), n) != notes.end();
}

// The backend's filter (keep_engine with deterministic off, TF32 or 16-bit inputs allowed).
std::string verdict(const std::vector<cudnnBackendNumericalNote_t>& notes, int64_t ws) {
  if (has(notes, CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS)) return "left out: down-converts inputs";
  if (has(notes, CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION)) return "left out: reduced-precision reduction";
  if (ws > (int64_t{256} << 20)) return "left out: workspace over 256 MiB";
  return "kept";
}

std::string notes_text(const std::vector<cudnnBackendNumericalNote_t>& notes) {
  std::string s;
  auto add = [&](cudnnBackendNumericalNote_t n, const char* w) {
    if (has(notes, n)) s += s.empty() ? w : std::string("+") + w;
  };
  add(CUDNN_NUMERICAL_NOTE_TENSOR_CORE, "tc");
  add(CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS, "down-convert");
  add(CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION, "rpr");
  add(CUDNN_NUMERICAL_NOTE_FFT, "fft");
  add(CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC, "nondet");
  add(CUDNN_NUMERICAL_NOTE_WINOGRAD, "winograd");
  add(CUDNN_NUMERICAL_NOTE_STRICT_NAN_PROP, "strict-nan");
  return s.empty() ? "-" : s;
}

// "eng<index>_k<type>=<value>..." as the engine log writes it.
std::string tag_of(Pool& p, cudnnBackendDescriptor_t cfg, cudnnBackendDescriptor_t engine) {
  int64_t index = 0, n = 0;
  p.note(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index),
         "global index");
  std::vector<cudnnBackendDescriptor_t> knobs;
  for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS && p.ok(); ++i)
    knobs.push_back(p.make(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, "knob"));
  int64_t count = 0;
  if (p.ok())
    p.note(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                    static_cast<int64_t>(knobs.size()), &count, knobs.data()),
           "knob choices");
  std::string tag = "eng" + std::to_string(index);
  for (int64_t i = 0; i < count && p.ok(); ++i) {
    cudnnBackendKnobType_t type{};
    int64_t value = 0;
    p.note(cudnnBackendGetAttribute(knobs[static_cast<size_t>(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                                    CUDNN_TYPE_KNOB_TYPE, 1, &n, &type),
           "knob type");
    p.note(cudnnBackendGetAttribute(knobs[static_cast<size_t>(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64,
                                    1, &n, &value),
           "knob value");
    tag += "_k" + std::to_string(static_cast<int>(type)) + "=" + std::to_string(value);
  }
  return tag;
}

struct Buffers {
  void* x = nullptr;
  void* w = nullptr;
  void* y = nullptr;
  void* ws = nullptr;
  int64_t ws_size = 0;
};

// Mean ms of `reps` executions of `plan` after two warm-up ones; negative when cuDNN
// refuses to run it.
double time_plan(Pool& p, cudnnHandle_t h, cudnnBackendDescriptor_t plan, const Buffers& b, int reps) {
  int64_t uids[3] = {1, 2, 3};
  void* ptrs[3] = {b.x, b.w, b.y};
  cudnnBackendDescriptor_t pack = p.make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack");
  p.set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids, "pack uids");
  p.set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs, "pack pointers");
  p.set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &b.ws, "pack workspace");
  p.finalize(pack, "pack finalize");
  if (!p.ok()) return -1;
  for (int i = 0; i < 2; ++i)
    if (cudnnBackendExecute(h, plan, pack) != CUDNN_STATUS_SUCCESS) return -1;
  cudaEvent_t start = nullptr, stop = nullptr;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start);
  bool ok = true;
  for (int i = 0; i < reps && ok; ++i) ok = cudnnBackendExecute(h, plan, pack) == CUDNN_STATUS_SUCCESS;
  cudaEventRecord(stop);
  float ms = 0;
  ok = ok && cudaEventSynchronize(stop) == cudaSuccess && cudaEventElapsedTime(&ms, start, stop) == cudaSuccess;
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ok ? ms / reps : -1;
}

struct Options {
  int64_t batch = 1024;
  cudnnDataType_t in = CUDNN_DATA_BFLOAT16;
  std::vector<Pass> passes{Pass::filter};
  std::vector<bool> outs_same{false, true};  // float, then the inputs' type
  int reps = 5;
  int top = 12;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "cudnn_conv: %s\nusage: cudnn_conv [--batch N] [--dtype bf16|fp16|fp32] "
               "[--passes forward,data,filter] [--out same|float|both] [--reps N] [--top N]\n",
               why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: cudnn_conv [--batch N] [--dtype bf16|fp16|fp32] [--passes forward,data,filter] "
          "[--out same|float|both] [--reps N] [--top N]\n");
      std::exit(0);
    }
    if (i + 1 >= argc) usage(("missing value after " + a).c_str());
    const std::string v = argv[++i];
    if (a == "--batch") {
      o.batch = std::atoll(v.c_str());
      if (o.batch <= 0) usage("--batch: expected a positive count");
    } else if (a == "--dtype") {
      if (v == "bf16")
        o.in = CUDNN_DATA_BFLOAT16;
      else if (v == "fp16")
        o.in = CUDNN_DATA_HALF;
      else if (v == "fp32")
        o.in = CUDNN_DATA_FLOAT;
      else
        usage("--dtype: expected bf16, fp16 or fp32");
    } else if (a == "--passes") {
      o.passes.clear();
      for (const char* w : {"forward", "data", "filter"})
        if (v.find(w) != std::string::npos)
          o.passes.push_back(w[0] == 'f' && w[1] == 'o' ? Pass::forward : w[0] == 'd' ? Pass::data : Pass::filter);
      if (o.passes.empty()) usage("--passes: expected forward, data and/or filter");
    } else if (a == "--out") {
      if (v == "same")
        o.outs_same = {true};
      else if (v == "float")
        o.outs_same = {false};
      else if (v == "both")
        o.outs_same = {false, true};
      else
        usage("--out: expected same, float or both");
    } else if (a == "--reps") {
      o.reps = std::max(1, std::atoi(v.c_str()));
    } else if (a == "--top") {
      o.top = std::max(1, std::atoi(v.c_str()));
    } else {
      usage(("unknown flag " + a).c_str());
    }
  }
  return o;
}

// Every config of one problem; the summary line at the end.
void try_problem(cudnnHandle_t h, const Options& o, const Shape& s, Pass pass, cudnnDataType_t out, Buffers& buf) {
  const int64_t x[4] = {o.batch, s.cin, s.size, s.size}, w[4] = {s.cout, s.cin, s.kernel, s.kernel},
                y[4] = {o.batch, s.cout, s.size, s.size};
  const double flops = 2.0 * static_cast<double>(y[0] * y[1] * y[2] * y[3]) * static_cast<double>(w[1] * w[2] * w[3]);
  char problem[160];
  std::snprintf(problem, sizeof problem, "%s x %lld,%lld,%lld,%lld w %lld,%lld,%lld,%lld %s->%s", pass_name(pass),
                static_cast<long long>(x[0]), static_cast<long long>(x[1]), static_cast<long long>(x[2]),
                static_cast<long long>(x[3]), static_cast<long long>(w[0]), static_cast<long long>(w[1]),
                static_cast<long long>(w[2]), static_cast<long long>(w[3]), type_name(o.in), type_name(out));
  Pool g;
  cudnnBackendDescriptor_t graph = op_graph(g, h, pass, x, w, y, o.in, out);
  if (!g.ok()) {
    std::printf("%s: no graph (%s)\n", problem, g.why.c_str());
    return;
  }
  double best = -1, kept = -1;
  std::string best_tag, kept_tag;
  std::vector<std::string> seen;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    Pool p;
    cudnnBackendDescriptor_t heur = p.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
    p.set_desc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph, "heuristics graph");
    p.set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
    p.finalize(heur, "heuristics finalize");
    int64_t count = 0;
    if (p.ok())
      p.note(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                      nullptr),
             "result count");
    count = std::min<int64_t>(count, o.top);
    std::vector<cudnnBackendDescriptor_t> cfgs;
    for (int64_t i = 0; i < count && p.ok(); ++i) cfgs.push_back(p.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "config"));
    if (p.ok() && count > 0)
      p.note(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count,
                                      cfgs.data()),
             "results");
    const char* mode_word = mode == CUDNN_HEUR_MODE_A ? "A" : "fallback";
    if (!p.ok()) {
      std::printf("%s: heuristics %s: %s\n", problem, mode_word, p.why.c_str());
      continue;
    }
    for (int64_t i = 0; i < count; ++i) {
      Pool e;
      cudnnBackendDescriptor_t engine = e.make(CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine");
      int64_t n = 0;
      if (e.ok())
        e.note(cudnnBackendGetAttribute(cfgs[static_cast<size_t>(i)], CUDNN_ATTR_ENGINECFG_ENGINE,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine),
               "engine of config");
      std::vector<cudnnBackendNumericalNote_t> notes(CUDNN_NUMERICAL_NOTE_TYPE_COUNT);
      if (e.ok())
        e.note(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                        static_cast<int64_t>(notes.size()), &n, notes.data()),
               "notes");
      if (e.ok()) notes.resize(static_cast<size_t>(n));
      const std::string tag = e.ok() ? tag_of(e, cfgs[static_cast<size_t>(i)], engine) : "?";
      if (std::find(seen.begin(), seen.end(), tag) != seen.end()) continue;
      seen.push_back(tag);
      cudnnBackendDescriptor_t plan = e.make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "plan");
      e.set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "plan handle");
      e.set_desc(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfgs[static_cast<size_t>(i)], "plan config");
      e.finalize(plan, "plan finalize");
      int64_t ws = 0;
      if (e.ok())
        e.note(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws),
               "workspace size");
      if (!e.ok()) {
        std::printf("%s: %s #%lld %s: %s\n", problem, mode_word, static_cast<long long>(i), tag.c_str(), e.why.c_str());
        continue;
      }
      if (ws > buf.ws_size) {
        std::printf("%s: %s #%lld %s %s ws %.1f MiB: more workspace than the probe has\n", problem, mode_word,
                    static_cast<long long>(i), tag.c_str(), notes_text(notes).c_str(),
                    static_cast<double>(ws) / 1048576);
        continue;
      }
      const double ms = time_plan(e, h, plan, buf, o.reps);
      const std::string v = verdict(notes, ws);
      std::printf("%s: %s #%lld %s %s ws %.1f MiB: ", problem, mode_word, static_cast<long long>(i), tag.c_str(),
                  notes_text(notes).c_str(), static_cast<double>(ws) / 1048576);
      if (ms < 0) {
        std::printf("did not run (%s), %s\n", e.ok() ? "cuDNN refused the execution" : e.why.c_str(), v.c_str());
        continue;
      }
      std::printf("%.3f ms, %.1f TFLOP/s, %s\n", ms, flops / ms * 1e-9, v.c_str());
      if (best < 0 || ms < best) best = ms, best_tag = tag;
      if (v == "kept" && kept < 0) kept = ms, kept_tag = tag;
    }
  }
  if (best < 0) {
    std::printf("%s: SUMMARY no config ran\n", problem);
    return;
  }
  std::printf("%s: SUMMARY fastest %s %.3f ms (%.1f TFLOP/s); the filter's first kept %s\n", problem, best_tag.c_str(),
              best, flops / best * 1e-9,
              kept < 0 ? "none"
                       : (kept_tag + " " + std::to_string(kept) + " ms (" +
                          std::to_string(static_cast<int>(best / kept * 100)) + " % of the fastest's speed)")
                             .c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  cudnnHandle_t h = nullptr;
  if (cudnnCreate(&h) != CUDNN_STATUS_SUCCESS) {
    std::fprintf(stderr, "cudnn_conv: cudnnCreate failed: no usable GPU or cuDNN\n");
    return 1;
  }
  // The largest tensors: batch x 160 x 32 x 32 (x, dx) and batch x 640 x 8 x 8; float covers any dtype.
  Buffers b;
  const size_t act = static_cast<size_t>(o.batch) * 160 * 32 * 32 * 4, wts = size_t{640} * 640 * 9 * 4;
  b.ws_size = int64_t{1} << 30;
  if (cudaMalloc(&b.x, act) != cudaSuccess || cudaMalloc(&b.y, act) != cudaSuccess ||
      cudaMalloc(&b.w, wts) != cudaSuccess || cudaMalloc(&b.ws, static_cast<size_t>(b.ws_size)) != cudaSuccess) {
    std::fprintf(stderr, "cudnn_conv: cudaMalloc of %.1f GiB failed\n",
                 static_cast<double>(2 * act + wts) / 1073741824 + 1);
    return 1;
  }
  // Small finite values in every dtype: the byte 0x3c makes bf16 0.0115, fp16 1.06, float 0.0115.
  cudaMemset(b.x, 0x3c, act);
  cudaMemset(b.y, 0x3c, act);
  cudaMemset(b.w, 0x3c, wts);
  std::printf("cudnn_conv: cuDNN %zu, batch %lld, inputs %s, NHWC activations, KRSC filters, fp32 accumulation\n",
              cudnnGetVersion(), static_cast<long long>(o.batch), type_name(o.in));
  for (Pass pass : o.passes)
    for (const Shape& s : kShapes)
      for (bool same : o.outs_same) {
        if (same && o.in == CUDNN_DATA_FLOAT) continue;
        try_problem(h, o, s, pass, same ? o.in : CUDNN_DATA_FLOAT, b);
        std::fflush(stdout);
      }
  cudnnDestroy(h);
  return 0;
}

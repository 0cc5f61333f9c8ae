// Convolutions as cuDNN graphs: ops/conv_graph_cuda.h says what and why.
// Host code only (no kernels of its own). Compiled in CI, never run on a GPU.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "graph/error.h"
#include "ops/conv_graph_cuda.h"
#include "ops/core/graph_fallback.h"

// cuDNN 9.x marks the HANDLE attributes of the operation graph and execution plan
// deprecated (when CUDNN_WARN_DEPRECATED is defined) in favour of device-property
// descriptors; the handle is what binds the plan to the context's stream, so use it.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace trainrt::cuda {

namespace {

constexpr int64_t kMaxGraphWorkspace = int64_t{256} << 20;

// Unique ids of the graph's tensors (the variant pack names buffers by them).
enum Uid : int64_t { kX = 1, kW, kB, kZ, kY, kReluX, kConvOut = 101, kBiasOut, kReluOut };

// One backend descriptor, destroyed with its last owner.
struct Desc {
  cudnnBackendDescriptor_t d = nullptr;
  Desc() = default;
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  ~Desc() {
    if (d) cudnnBackendDestroyDescriptor(d);
  }
};
using DescPtr = std::shared_ptr<Desc>;

std::string status_text(cudnnStatus_t s) { return cudnnGetErrorString(s); }

// Builds descriptors; the first failing call (its name and cuDNN's status) becomes
// `why`, and every later call does nothing.
struct Builder {
  std::string why;
  std::vector<DescPtr> keep;  // every descriptor the plan refers to, alive as long as it

  bool ok() const { return why.empty(); }
  bool note(cudnnStatus_t s, const char* call) {
    if (ok() && s != CUDNN_STATUS_SUCCESS) why = std::string(call) + ": " + status_text(s);
    return ok();
  }
  cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t type, const char* what) {
    auto d = std::make_shared<Desc>();
    if (ok()) note(cudnnBackendCreateDescriptor(type, &d->d), what);
    keep.push_back(d);
    return d->d;
  }
  void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
           int64_t count, const void* values, const char* what) {
    if (ok()) note(cudnnBackendSetAttribute(d, name, type, count, values), what);
  }
  void set_desc(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t v,
                const char* what) {
    set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v, what);
  }
  void finalize(cudnnBackendDescriptor_t d, const char* what) {
    if (ok()) note(cudnnBackendFinalize(d), what);
  }
};

// A tensor of `type` (fp32 unless said) and `dims`, dense row-major, or with `last` a
// rank-4 N,C,H,W tensor stored ChannelsLast (NHWC: C innermost).
cudnnBackendDescriptor_t tensor(Builder& b, int64_t uid, const std::vector<int64_t>& dims, int64_t align,
                                bool is_virtual, cudnnDataType_t type = CUDNN_DATA_FLOAT, bool last = false) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (size_t i = dims.size() - 1; i > 0; --i) strides[i - 1] = strides[i] * dims[i];
  if (last && dims.size() == 4) strides = {dims[1] * dims[2] * dims[3], 1, dims[3] * dims[1], dims[1]};
  cudnnBackendDescriptor_t d = b.make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor descriptor");
  b.set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "tensor data type");
  b.set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, static_cast<int64_t>(dims.size()), dims.data(),
        "tensor dimensions");
  b.set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, static_cast<int64_t>(strides.size()), strides.data(),
        "tensor strides");
  b.set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor unique id");
  b.set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
  b.set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, "tensor is-virtual");
  b.finalize(d, "tensor finalize");
  return d;
}

// The pointwise descriptor of `mode`, computing in fp32.
cudnnBackendDescriptor_t pointwise_mode(Builder& b, cudnnPointwiseMode_t mode) {
  const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t pw = b.make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise descriptor");
  b.set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
  b.set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise math precision");
  b.finalize(pw, "pointwise finalize");
  return pw;
}

// y = mode(x) or y = mode(x, second): one pointwise operation in fp32.
cudnnBackendDescriptor_t pointwise(Builder& b, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                                   cudnnBackendDescriptor_t second, cudnnBackendDescriptor_t y) {
  cudnnBackendDescriptor_t pw = pointwise_mode(b, mode);
  cudnnBackendDescriptor_t op = b.make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise operation");
  b.set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw, "pointwise operation descriptor");
  b.set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x, "pointwise x");
  if (second) b.set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, second, "pointwise b");
  b.set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y, "pointwise y");
  b.finalize(op, "pointwise operation finalize");
  return op;
}

// What the cache key and the graph depend on. x, w, y are the forward's shapes whatever
// the pass (data writes x's shape from y and w; filter writes w's from x and y).
struct Problem {
  ConvPass pass = ConvPass::forward;
  cudnnDataType_t in = CUDNN_DATA_FLOAT;  // the dtype of the pass's inputs (outputs are fp32)
  std::vector<int64_t> x, w, y, strides, dilations, pre, post;
  bool bias = false, relu = false, residual = false, tf32 = false;
  // x-shaped (x, dx, relu_x) and y-shaped (y, z, dy) tensors stored ChannelsLast
  bool x_last = false, y_last = false;
  int64_t align[5] = {};  // of x, w, b, z, y (bytes, at most 16)
};

// One engine config that finalized into an execution plan within the workspace cap.
struct Candidate {
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspace = 0;
  std::string tag;  // "eng<global index>_k<knob>=<value>...": the timing cache's name of it
};

struct GraphPlan {
  std::vector<DescPtr> keep;          // the operation graph, engine configs and what they refer to
  std::vector<Candidate> candidates;  // one without a chooser: the first acceptable
  int64_t workspace = 0;              // the most any candidate needs (the planner reserves it)
  // The candidate this problem runs with, once chosen (timed or found in the timing cache);
  // -1 until then (only while there are several).
  mutable std::mutex mu;
  mutable int chosen = -1;
};

bool has_note(const std::vector<cudnnBackendNumericalNote_t>& notes, cudnnBackendNumericalNote_t n) {
  for (cudnnBackendNumericalNote_t v : notes)
    if (v == n) return true;
  return false;
}

// "eng<global index>_k<knob type>=<value>..." for engine config `cfg` (the knobs in
// cuDNN's order), as cudnn-frontend names its configs; "" and `why` set in `b` on failure.
std::string engine_tag(Builder& b, cudnnBackendDescriptor_t cfg, cudnnBackendDescriptor_t engine) {
  int64_t index = 0, n = 0;
  if (b.ok())
    b.note(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index),
           "engine global index");
  std::vector<cudnnBackendDescriptor_t> knobs;
  for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS && b.ok(); ++i)
    knobs.push_back(b.make(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, "knob choice"));
  int64_t count = 0;
  if (b.ok())
    b.note(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                    static_cast<int64_t>(knobs.size()), &count, knobs.data()),
           "engine config knob choices");
  std::string tag = "eng" + std::to_string(index);
  for (int64_t i = 0; i < count && b.ok(); ++i) {
    cudnnBackendKnobType_t type{};
    int64_t value = 0;
    b.note(cudnnBackendGetAttribute(knobs[static_cast<size_t>(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                                    CUDNN_TYPE_KNOB_TYPE, 1, &n, &type),
           "knob choice type");
    if (b.ok())
      b.note(cudnnBackendGetAttribute(knobs[static_cast<size_t>(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE,
                                      CUDNN_TYPE_INT64, 1, &n, &value),
             "knob choice value");
    tag += "_k" + std::to_string(static_cast<int>(type)) + "=" + std::to_string(value);
  }
  return b.ok() ? tag : "";
}

// The engine configs of the heuristics (mode A, then the fallback list) that the
// precision allows and that finalize into an execution plan within the workspace cap:
// without `all`, the first one (no timing: the heuristics' own choice); with it, every
// deterministic one, or every one when none is deterministic (the candidates the timing
// cache chooses among; repeats of a config across the two lists are left out). Null and
// `why` when none does.
std::shared_ptr<const GraphPlan> pick_plan(cudnnBackendDescriptor_t graph, std::vector<DescPtr> keep, bool tf32,
                                           bool all, std::string* why) {
  cudnnHandle_t handle = context().cudnn;
  auto found = std::make_shared<GraphPlan>();
  found->keep = std::move(keep);
  std::string first;  // the first reason a heuristics mode or engine config was turned down
  auto reason = [&](const std::string& r) {
    if (first.empty()) first = r;
  };
  int64_t candidates = 0;
  for (bool need_deterministic : {true, false}) {
    if (!found->candidates.empty()) break;  // non-deterministic engines only when no deterministic one finalizes
    for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      Builder b;
      cudnnBackendDescriptor_t heur = b.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "engine heuristics");
      b.set_desc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph, "heuristics graph");
      b.set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
      b.finalize(heur, "heuristics finalize");
      int64_t count = 0;
      if (b.ok())
        b.note(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                        nullptr),
               "heuristics result count");
      std::vector<cudnnBackendDescriptor_t> cfgs;
      for (int64_t i = 0; i < count && b.ok(); ++i)
        cfgs.push_back(b.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config"));
      if (b.ok() && count > 0)
        b.note(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                        &count, cfgs.data()),
               "heuristics results");
      if (!b.ok()) {
        reason(b.why);
        continue;
      }
      for (int64_t i = 0; i < count; ++i) {
        if (need_deterministic) ++candidates;  // the second pass looks at the same configs again
        Builder e;
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
                 "engine numerical notes");
        if (!e.ok()) {
          reason(e.why);
          continue;
        }
        notes.resize(static_cast<size_t>(n));
        if (has_note(notes, CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) ||
            has_note(notes, CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION) ||
            (!tf32 && has_note(notes, CUDNN_NUMERICAL_NOTE_TENSOR_CORE)) ||
            (need_deterministic && has_note(notes, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC))) {
          reason(!tf32 && has_note(notes, CUDNN_NUMERICAL_NOTE_TENSOR_CORE)
                     ? "engines left out: TF32 tensor cores under strict fp32 math"
                     : "engines left out: down-converting or non-deterministic");
          continue;
        }
        cudnnBackendDescriptor_t plan = e.make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan");
        e.set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "plan handle");
        e.set_desc(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfgs[static_cast<size_t>(i)], "plan engine config");
        e.finalize(plan, "execution plan finalize");
        int64_t ws = 0;
        if (e.ok())
          e.note(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws),
                 "plan workspace size");
        if (!e.ok()) {
          reason(e.why);
          continue;
        }
        if (ws > kMaxGraphWorkspace) {
          reason("engines left out: more than 256 MiB of workspace");
          continue;
        }
        const std::string tag = all ? engine_tag(e, cfgs[static_cast<size_t>(i)], engine) : "first";
        if (!e.ok()) {
          reason(e.why);
          continue;
        }
        bool seen = false;
        for (const Candidate& c : found->candidates) seen = seen || c.tag == tag;
        if (seen) continue;
        found->keep.insert(found->keep.end(), b.keep.begin(), b.keep.end());
        found->keep.insert(found->keep.end(), e.keep.begin(), e.keep.end());
        found->candidates.push_back(Candidate{plan, ws, tag});
        found->workspace = std::max(found->workspace, ws);
        if (!all) {
          found->chosen = 0;
          return found;
        }
      }
    }
  }
  if (!found->candidates.empty()) {
    if (found->candidates.size() == 1) found->chosen = 0;
    return found;
  }
  if (first.empty()) first = "no engine from the heuristics";
  *why = candidates == 0 ? first : first + "; " + std::to_string(candidates) + " engine configs tried";
  return nullptr;
}

// The convolution descriptor of `p` (fp32 accumulation).
cudnnBackendDescriptor_t conv_descriptor(Builder& b, const Problem& p) {
  const int64_t spatial = 2;
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnBackendDescriptor_t conv = b.make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, "convolution descriptor");
  b.set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, "convolution compute type");
  b.set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode, "convolution mode");
  b.set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial, "convolution spatial dims");
  b.set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, spatial, p.strides.data(),
        "convolution strides");
  b.set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, spatial, p.dilations.data(), "convolution dilations");
  b.set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, spatial, p.pre.data(), "convolution pre-paddings");
  b.set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, spatial, p.post.data(),
        "convolution post-paddings");
  b.finalize(conv, "convolution finalize");
  return conv;
}

// The forward's operations: the convolution, then the epilogue in FusedConv's order
// (bias, activation, then the residual), each writing a virtual tensor but the last.
std::vector<cudnnBackendDescriptor_t> forward_ops(Builder& b, const Problem& p) {
  cudnnBackendDescriptor_t x = tensor(b, kX, p.x, p.align[0], false, p.in, p.x_last);
  cudnnBackendDescriptor_t w = tensor(b, kW, p.w, p.align[1], false, p.in);
  const std::vector<int64_t> channel{1, p.y[1], 1, 1};
  cudnnBackendDescriptor_t bias = p.bias ? tensor(b, kB, channel, p.align[2], false) : nullptr;
  cudnnBackendDescriptor_t z = p.residual ? tensor(b, kZ, p.y, p.align[3], false, CUDNN_DATA_FLOAT, p.y_last) : nullptr;
  const int stages = 1 + (p.bias ? 1 : 0) + (p.relu ? 1 : 0) + (p.residual ? 1 : 0);
  int stage = 0;
  auto out = [&](int64_t uid) {
    ++stage;
    return stage == stages ? tensor(b, kY, p.y, p.align[4], false, CUDNN_DATA_FLOAT, p.y_last)
                           : tensor(b, uid, p.y, 16, true, CUDNN_DATA_FLOAT, p.y_last);
  };
  cudnnBackendDescriptor_t conv = conv_descriptor(b, p);
  std::vector<cudnnBackendDescriptor_t> ops;
  cudnnBackendDescriptor_t cur = out(kConvOut);
  const float alpha = 1.f, beta = 0.f;
  cudnnBackendDescriptor_t fwd =
      b.make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, "convolution forward operation");
  b.set_desc(fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, x, "convolution x");
  b.set_desc(fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, w, "convolution w");
  b.set_desc(fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, cur, "convolution y");
  b.set_desc(fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv, "convolution descriptor");
  b.set(fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha, "convolution alpha");
  b.set(fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta, "convolution beta");
  b.finalize(fwd, "convolution forward finalize");
  ops.push_back(fwd);
  if (p.bias) {
    cudnnBackendDescriptor_t next = out(kBiasOut);
    ops.push_back(pointwise(b, CUDNN_POINTWISE_ADD, cur, bias, next));
    cur = next;
  }
  if (p.relu) {
    cudnnBackendDescriptor_t next = out(kReluOut);
    ops.push_back(pointwise(b, CUDNN_POINTWISE_RELU_FWD, cur, nullptr, next));
    cur = next;
  }
  if (p.residual) ops.push_back(pointwise(b, CUDNN_POINTWISE_ADD, cur, z, out(kY)));
  return ops;
}

// dx = relu_x > 0 ? dy : 0: one pointwise RELU_BWD in fp32.
cudnnBackendDescriptor_t relu_backward(Builder& b, cudnnBackendDescriptor_t dy, cudnnBackendDescriptor_t relu_x,
                                       cudnnBackendDescriptor_t dx) {
  cudnnBackendDescriptor_t pw = pointwise_mode(b, CUDNN_POINTWISE_RELU_BWD);
  cudnnBackendDescriptor_t op = b.make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise operation");
  b.set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw, "pointwise operation descriptor");
  b.set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, dy, "relu backward dy");
  b.set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, relu_x, "relu backward x");
  b.set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, dx, "relu backward dx");
  b.finalize(op, "pointwise operation finalize");
  return op;
}

// A backward pass's operations. The uids keep the forward's names: data reads kY (dy)
// and kW and writes kX (dx; with p.relu through RELU_BWD against kReluX); filter reads
// kX and kY (dy) and writes kW (dw).
std::vector<cudnnBackendDescriptor_t> backward_ops(Builder& b, const Problem& p) {
  const bool data = p.pass == ConvPass::data;
  const bool relu = data && p.relu;
  cudnnBackendDescriptor_t x = relu ? tensor(b, kConvOut, p.x, 16, true, CUDNN_DATA_FLOAT, p.x_last)
                                    : tensor(b, kX, p.x, p.align[0], false, data ? CUDNN_DATA_FLOAT : p.in, p.x_last);
  cudnnBackendDescriptor_t w = tensor(b, kW, p.w, p.align[1], false, data ? p.in : CUDNN_DATA_FLOAT);
  cudnnBackendDescriptor_t dy = tensor(b, kY, p.y, p.align[4], false, p.in, p.y_last);
  cudnnBackendDescriptor_t conv = conv_descriptor(b, p);
  const float alpha = 1.f, beta = 0.f;
  if (data) {
    cudnnBackendDescriptor_t op =
        b.make(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, "convolution data gradient operation");
    b.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, w, "data gradient w");
    b.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, dy, "data gradient dy");
    b.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, x, "data gradient dx");
    b.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, conv, "data gradient descriptor");
    b.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha, "data gradient alpha");
    b.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, 1, &beta, "data gradient beta");
    b.finalize(op, "convolution data gradient finalize");
    if (!relu) return {op};
    cudnnBackendDescriptor_t relu_x = tensor(b, kReluX, p.x, p.align[3], false, CUDNN_DATA_FLOAT, p.x_last);
    cudnnBackendDescriptor_t dx = tensor(b, kX, p.x, p.align[0], false, CUDNN_DATA_FLOAT, p.x_last);
    return {op, relu_backward(b, x, relu_x, dx)};
  }
  cudnnBackendDescriptor_t op =
      b.make(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, "convolution filter gradient operation");
  b.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, x, "filter gradient x");
  b.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, dy, "filter gradient dy");
  b.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, w, "filter gradient dw");
  b.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, conv, "filter gradient descriptor");
  b.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha, "filter gradient alpha");
  b.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, 1, &beta, "filter gradient beta");
  b.finalize(op, "convolution filter gradient finalize");
  return {op};
}

// The operation graph of `p` and its execution plan; null and `why` when cuDNN does not support it.
std::shared_ptr<const GraphPlan> build_plan(const Problem& p, bool all, std::string* why) {
  Builder b;
  const std::vector<cudnnBackendDescriptor_t> ops =
      p.pass == ConvPass::forward ? forward_ops(b, p) : backward_ops(b, p);
  cudnnHandle_t handle = context().cudnn;
  cudnnBackendDescriptor_t graph = b.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
  b.set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "graph handle");
  b.set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops.size()),
        ops.data(), "graph operations");
  b.finalize(graph, "operation graph finalize");
  if (!b.ok()) {
    *why = b.why;
    return nullptr;
  }
  return pick_plan(graph, b.keep, p.tf32, all, why);
}

// One call's buffers: the variant pack's uids and pointers, the output among them, and
// where the graph's workspace starts.
struct Buffers {
  std::vector<int64_t> uids;
  std::vector<void*> ptrs;
  const void* out = nullptr;
  size_t workspace_offset = 0;
  void add(int64_t uid, const void* p) {
    uids.push_back(uid);
    ptrs.push_back(const_cast<void*>(p));
  }
  bool aliased() const {  // the output shares an input's memory (it is in ptrs once itself)
    return std::count(ptrs.begin(), ptrs.end(), out) > 1;
  }
};

// Queues candidate `c` on this call's buffers; cuDNN's status. A variant pack that cannot
// be built throws.
cudnnStatus_t launch(const Node& node, const Candidate& c, const Buffers& bufs) {
  void* ws = c.workspace > 0 ? static_cast<char*>(workspace(bufs.workspace_offset + static_cast<size_t>(c.workspace))) +
                                   bufs.workspace_offset
                             : nullptr;
  Builder b;
  cudnnBackendDescriptor_t pack = b.make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack");
  b.set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(bufs.uids.size()),
        bufs.uids.data(), "variant pack ids");
  b.set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(bufs.ptrs.size()),
        bufs.ptrs.data(), "variant pack pointers");
  b.set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws, "variant pack workspace");
  b.finalize(pack, "variant pack finalize");
  if (!b.ok()) throw_internal(what(node, "cuDNN graph variant pack"), b.why);
  return cudnnBackendExecute(context().cudnn, c.plan, pack);
}

// Runs candidate `c` on this call's buffers; "" when it ran, cuDNN's reason when it does
// not support it (nothing was written). Other errors throw.
std::string execute(const Node& node, const Candidate& c, const Buffers& bufs) {
  const cudnnStatus_t s = launch(node, c, bufs);
  if (CUDNN_STATUS_CATEGORY(s) == CUDNN_STATUS_NOT_SUPPORTED) return "execute: " + status_text(s);
  check(s, what(node, "cudnnBackendExecute"));
  return "";
}

// Mean ms per call of candidate `c` on this call's buffers (time_calls); nullopt when
// cuDNN turns a call down. Writes the output each call (the caller's real call writes it last).
std::optional<double> time_candidate(const Node& node, const Candidate& c, const Buffers& bufs, const TimingPolicy& p) {
  return time_calls(node, p, [&] { return launch(node, c, bufs) == CUDNN_STATUS_SUCCESS; });
}

// Largest power of two up to 16 dividing the address: the alignment the graph may assume.
int64_t alignment(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  int64_t bytes = 4;
  while (bytes < 16 && a % static_cast<std::uintptr_t>(2 * bytes) == 0) bytes *= 2;
  return bytes;
}

std::string dims_text(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t d : v) s += (s.empty() ? "" : ",") + std::to_string(d);
  return s;
}

// cuDNN's name of an input dtype the graphs take; false for others (outside the scope).
bool graph_dtype(DataType t, cudnnDataType_t* out) {
  if (t == DataType::Float32)
    *out = CUDNN_DATA_FLOAT;
  else if (t == DataType::BFloat16)
    *out = CUDNN_DATA_BFLOAT16;
  else if (t == DataType::Float16)
    *out = CUDNN_DATA_HALF;
  else
    return false;
  return true;
}

const char* dtype_word(DataType t) {
  return t == DataType::BFloat16 ? "bf16" : t == DataType::Float16 ? "fp16" : "fp32";
}

// A call as the graph sees it, with its cache key, its buffers and the notice's words;
// false outside the graph's scope. `x`, `w`, `y` have the forward's shapes whatever the
// pass; `inputs` is the dtype of the pass's inputs.
struct GraphCall {
  Problem p;
  Buffers bufs;
  std::string key, problem, pattern, label;
  bool all = false;  // every acceptable engine config is a candidate (a chooser times them)
};
bool graph_call(const KernelContext& ctx, ConvPass pass, DataType inputs, const Tensor& x, const Tensor& w,
                const Tensor& y, const Window& win, int64_t group, const int64_t align[5], GraphCall& c) {
  Problem& p = c.p;
  p.pass = pass;
  // fp32 inputs: FusedConv's forward and the data pass with its ReLU gradient only (the
  // fused epilogue is what the graph adds); 16-bit inputs: any pass (the tensor cores'
  // 16-bit rate is). The caller sets p.relu of a data pass before.
  const bool fused =
      (ctx.node.op_type == "FusedConv" && pass == ConvPass::forward) || (pass == ConvPass::data && p.relu);
  if (!graph_dtype(inputs, &p.in) || (inputs == DataType::Float32 && !fused)) return false;
  if (x.rank() != 4 || w.rank() != 4 || y.rank() != 4 || group != 1 || win.dilations[0] != 1 || win.dilations[1] != 1 ||
      x.numel() == 0 || w.numel() == 0 || y.numel() == 0)
    return false;
  p.x = x.dims(), p.w = w.dims(), p.y = y.dims();
  p.x_last = x.layout() == Layout::ChannelsLast, p.y_last = y.layout() == Layout::ChannelsLast;
  p.strides = win.strides, p.dilations = win.dilations;
  p.pre = {win.pads[0], win.pads[1]}, p.post = {win.pads[2], win.pads[3]};
  p.tf32 = tf32_allowed(ctx);
  const char* math = inputs != DataType::Float32 ? dtype_word(inputs) : p.tf32 ? "tf32" : "strict";
  for (int i = 0; i < 5; ++i) p.align[i] = align[i];
  const bool drelu = pass == ConvPass::data && p.relu;
  const std::string pass_word = std::string(pass == ConvPass::forward ? "forward"
                                            : pass == ConvPass::data  ? "data"
                                                                      : "filter") +
                                (drelu ? "+drelu" : "");
  c.key = pass_word + "|x" + dims_text(p.x) + "|w" + dims_text(p.w) + "|y" + dims_text(p.y) + "|s" +
          dims_text(p.strides) + "|p" + dims_text(p.pre) + "," + dims_text(p.post) + "|" + math + "|a";
  for (int64_t v : p.align) c.key += std::to_string(v);
  if (p.x_last || p.y_last) c.key += std::string("|nhwc") + (p.x_last ? "x" : "") + (p.y_last ? "y" : "");
  c.all = ctx.chooser != nullptr;
  if (c.all) c.key += "|timed";
  c.label = graph_label(ctx.node.op_type, pass, inputs) + (drelu ? " +drelu" : "");
  c.pattern = ctx.node.op_type + "." + pass_word;
  c.problem = "x " + dims_text(p.x) + " w " + dims_text(p.w) + " " + pass_word + ", " + math +
              (p.x_last || p.y_last ? ", NHWC" : "");
  return true;
}

// Adds the forward's epilogue to `c` (its key, pattern and words).
void forward_epilogue(GraphCall& c, bool bias, bool relu, bool residual) {
  c.p.bias = bias, c.p.relu = relu, c.p.residual = residual;
  std::string epilogue = "conv";
  if (bias) epilogue += "+bias";
  if (relu) epilogue += "+relu";
  if (residual) epilogue += "+add";
  c.key += std::string("|") + (bias ? "b" : "") + (relu ? "r" : "") + (residual ? "z" : "");
  c.pattern = c.p.in == CUDNN_DATA_FLOAT ? "FusedConv." + epilogue : c.pattern + "." + epilogue;
  c.problem += ", " + epilogue;
}

// The candidate of `g` this call runs: the only one, the one chosen before, else the
// context's chooser's (ops/core/engine_choice.h: the timing cache's entry, or each
// candidate timed on this call's buffers). No timing while the stream is being captured
// into a CUDA graph or when the output shares an input's memory (repeated calls would
// read their own output): the cached or the first candidate then, chosen for this call
// only. Null when every candidate failed.
const Candidate* choose(const KernelContext& ctx, const GraphPlan& g, const GraphCall& c) {
  {
    std::lock_guard<std::mutex> lock(g.mu);
    if (g.chosen >= 0) return &g.candidates[static_cast<size_t>(g.chosen)];
  }
  if (!ctx.chooser) return &g.candidates.front();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(context().stream, &capture), what(ctx.node, "cudaStreamIsCapturing"));
  const bool can_time = capture == cudaStreamCaptureStatusNone && !c.bufs.aliased();
  std::vector<std::string> tags;
  for (const Candidate& k : g.candidates) tags.push_back(k.tag);
  const char* precision = c.p.in == CUDNN_DATA_BFLOAT16 ? "bf16"
                          : c.p.in == CUDNN_DATA_HALF   ? "fp16"
                          : c.p.tf32                    ? "tf32"
                                                        : "fp32";
  const EngineKey key{c.pattern, c.key, precision, gpu_name(), cudnn_version()};
  EngineChooser::Time time;
  if (can_time)
    time = [&](size_t i, const TimingPolicy& p) { return time_candidate(ctx.node, g.candidates[i], c.bufs, p); };
  const EngineChoice choice = ctx.chooser->choose(key, tags, time);
  if (!choice.index) return nullptr;
  if (choice.cached || choice.timed) {
    std::lock_guard<std::mutex> lock(g.mu);
    g.chosen = static_cast<int>(*choice.index);
  }
  return &g.candidates[*choice.index];
}

GraphFallback<GraphPlan>& graphs() {
  static auto* g = new GraphFallback<GraphPlan>();  // like the plan cache: lives as long as the process
  return *g;
}

// Runs `c`'s graph (after `prepare`, when given) or says why not, once per problem; records
// the node's outcome in the fusion tally.
bool run_graph(const KernelContext& ctx, const GraphCall& c, const std::function<void()>* prepare,
               const char* instead) {
  const bool ran = graphs().try_run(
      c.key, [&](std::string* why) { return build_plan(c.p, c.all, why); },
      [&](const GraphPlan& g) {
        if (prepare && *prepare) (*prepare)();
        const Candidate* chosen = choose(ctx, g, c);
        if (!chosen) return std::string("every candidate engine failed when timed");
        return execute(ctx.node, *chosen, c.bufs);
      },
      [&](const std::string& why) {
        const std::string line = graph_fallback_notice(ctx.node.op_type, ctx.node.name, c.problem, why, instead);
        std::fprintf(stderr, "%s\n", line.c_str());
      });
  fusion_tally().record(c.label, ctx.node.name, ran);
  return ran;
}

int64_t plan_workspace(const GraphCall& c) {
  const auto plan = graphs().plan(c.key, [&](std::string* why) { return build_plan(c.p, c.all, why); });
  return plan ? plan->workspace : -1;
}

// The forward's call for `a` with pointer alignments `align` (x, w, b, z, y).
bool forward_call(const KernelContext& ctx, const ConvGraphArgs& a, const int64_t align[5], GraphCall& c) {
  if (a.x.dtype() != a.w.dtype() || a.y.dtype() != DataType::Float32 || (a.b && a.b->dtype() != DataType::Float32) ||
      (a.z && (a.z->dtype() != DataType::Float32 || a.z->layout() != a.y.layout())))
    return false;
  if (!graph_call(ctx, ConvPass::forward, a.x.dtype(), a.x, a.w, a.y, a.win, a.group, align, c)) return false;
  forward_epilogue(c, a.b != nullptr, a.relu, a.z != nullptr);
  c.bufs.add(kX, a.x.raw());
  c.bufs.add(kW, a.w.raw());
  c.bufs.add(kY, a.y.raw());
  if (a.b) c.bufs.add(kB, a.b->raw());
  if (a.z) c.bufs.add(kZ, a.z->raw());
  c.bufs.out = a.y.raw();
  c.bufs.workspace_offset = a.workspace_offset;
  return true;
}

// A backward pass's call: x, w, y of the forward's shapes from the pass's tensors.
bool backward_call(const KernelContext& ctx, const ConvGradGraphArgs& a, const int64_t align[5], GraphCall& c) {
  if (a.pass == ConvPass::forward || a.dy.dtype() != a.other.dtype() || a.out.dtype() != DataType::Float32)
    return false;
  const bool data = a.pass == ConvPass::data;
  if (a.relu_x && (!data || a.relu_x->dtype() != DataType::Float32 || a.relu_x->dims() != a.out.dims() ||
                   a.relu_x->layout() != a.out.layout()))
    return false;
  const Tensor& x = data ? a.out : a.other;
  const Tensor& w = data ? a.other : a.out;
  c.p.relu = a.relu_x != nullptr;
  if (!graph_call(ctx, a.pass, a.dy.dtype(), x, w, a.dy, a.win, a.group, align, c)) return false;
  c.bufs.add(kX, x.raw());
  c.bufs.add(kW, w.raw());
  c.bufs.add(kY, a.dy.raw());
  if (a.relu_x) c.bufs.add(kReluX, a.relu_x->raw());
  c.bufs.out = a.out.raw();
  c.bufs.workspace_offset = a.workspace_offset;
  return true;
}

}  // namespace

std::string graph_label(const std::string& op_type, ConvPass pass, DataType inputs) {
  const char* pass_word = pass == ConvPass::forward ? "" : pass == ConvPass::data ? ".data" : ".filter";
  if (inputs == DataType::Float32) return op_type + pass_word;
  return op_type + pass_word + " (" + dtype_word(inputs) + " inputs)";
}

bool conv_graph_forward(const KernelContext& ctx, const ConvGraphArgs& a) {
  const void* ptrs[5] = {a.x.raw(), a.w.raw(), a.b ? a.b->raw() : nullptr, a.z ? a.z->raw() : nullptr, a.y.raw()};
  int64_t align[5];
  for (int i = 0; i < 5; ++i) align[i] = ptrs[i] ? alignment(ptrs[i]) : 16;
  GraphCall c;
  if (!forward_call(ctx, a, align, c)) {  // outside the graph's scope: the legacy path
    fusion_tally().record(graph_label(ctx.node.op_type, ConvPass::forward, a.x.dtype()), ctx.node.name, false);
    return false;
  }
  return run_graph(ctx, c, a.prepare, "the unfused convolution + epilogue");
}

bool conv_graph_backward(const KernelContext& ctx, const ConvGradGraphArgs& a) {
  const bool data = a.pass == ConvPass::data;
  const void* x = data ? a.out.raw() : a.other.raw();
  const void* w = data ? a.other.raw() : a.out.raw();
  const int64_t align[5] = {alignment(x), alignment(w), 16, a.relu_x ? alignment(a.relu_x->raw()) : 16,
                            alignment(a.dy.raw())};
  GraphCall c;
  if (!backward_call(ctx, a, align, c)) {
    fusion_tally().record(graph_label(ctx.node.op_type, a.pass, a.dy.dtype()) + (a.relu_x ? " +drelu" : ""),
                          ctx.node.name, false);
    return false;
  }
  return run_graph(ctx, c, a.prepare, "cuDNN's legacy convolution API on fp32 copies");
}

int64_t conv_graph_workspace(const KernelContext& ctx, const ConvGraphArgs& a) {
  const int64_t align[5] = {16, 16, 16, 16, 16};
  GraphCall c;
  return forward_call(ctx, a, align, c) ? plan_workspace(c) : -1;
}

int64_t conv_graph_backward_workspace(const KernelContext& ctx, const ConvGradGraphArgs& a) {
  const int64_t align[5] = {16, 16, 16, 16, 16};
  GraphCall c;
  return backward_call(ctx, a, align, c) ? plan_workspace(c) : -1;
}

}  // namespace trainrt::cuda

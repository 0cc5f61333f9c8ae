// The cuDNN graph machinery the cuda backend's graphs share: ops/cuda/cudnn_graph.h.
// Host code only. Compiled in CI, never run on a GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <optional>

#include "graph/error.h"
#include "ops/cuda/cudnn_graph.h"
#include "ops/cuda/graph_fallback.h"

// cuDNN 9.x marks the HANDLE attributes of the operation graph and execution plan
// deprecated (when CUDNN_WARN_DEPRECATED is defined) in favour of device-property
// descriptors; the handle is what binds the plan to the context's stream, so use it.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace trainrt::cuda::cudnn_graph {

namespace {

std::string status_text(cudnnStatus_t s) { return cudnnGetErrorString(s); }

// The pointwise descriptor of `mode`, computing in fp32.
cudnnBackendDescriptor_t pointwise_mode(Builder& b, cudnnPointwiseMode_t mode) {
  const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t pw = b.make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise descriptor");
  b.set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
  b.set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise math precision");
  b.finalize(pw, "pointwise finalize");
  return pw;
}

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
// precision and the determinism allow (keep_engine) and that finalize into an execution
// plan within the workspace cap: the first choice.candidates of them in the heuristics'
// order (1 without a chooser: the heuristics' own choice; the candidates the timing cache
// chooses among; repeats of a config across the two lists are left out), deterministic
// ones first when choice.deterministic. Configs after the last candidate are never
// finalized. Null and `why` when none does.
std::shared_ptr<const GraphPlan> pick_plan(cudnnBackendDescriptor_t graph, std::vector<DescPtr> keep, bool tf32,
                                           const PlanChoice& choice, std::string* why) {
  cudnnHandle_t handle = context().cudnn;
  auto found = std::make_shared<GraphPlan>();
  found->keep = std::move(keep);
  std::string first;  // the first reason a heuristics mode or engine config was turned down
  auto reason = [&](const std::string& r) {
    if (first.empty()) first = r;
  };
  int64_t candidates = 0;
  const size_t wanted = std::max<size_t>(choice.candidates, 1);
  const std::vector<bool> passes = determinism_passes(choice.deterministic);
  for (bool need_deterministic : passes) {
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
        if (need_deterministic || passes.size() == 1) ++candidates;  // a second pass looks at the same configs again
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
        const std::string left_out =
            keep_engine(EngineNotes{has_note(notes, CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS),
                                    has_note(notes, CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION),
                                    has_note(notes, CUDNN_NUMERICAL_NOTE_TENSOR_CORE),
                                    has_note(notes, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)},
                        tf32, need_deterministic);
        if (!left_out.empty()) {
          reason(left_out);
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
        std::string tag;
        if (choice.timed) {
          tag = engine_tag(e, cfgs[static_cast<size_t>(i)], engine);
        } else {  // only the engine log reads it: a config whose knobs cannot be read still runs
          Builder t;
          tag = engine_tag(t, cfgs[static_cast<size_t>(i)], engine);
          if (!t.ok()) tag = "the heuristics' first";
        }
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
        if (!choice.timed) found->chosen = 0;
        if (found->candidates.size() >= wanted) return found;
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

GraphFallback<GraphPlan>& graphs() {
  static auto* g = new GraphFallback<GraphPlan>();  // like the plan cache: lives as long as the process
  return *g;
}

}  // namespace

bool Builder::note(cudnnStatus_t s, const char* call) {
  if (ok() && s != CUDNN_STATUS_SUCCESS) why = std::string(call) + ": " + status_text(s);
  return ok();
}

cudnnBackendDescriptor_t Builder::make(cudnnBackendDescriptorType_t type, const char* what) {
  auto d = std::make_shared<Desc>();
  if (ok()) note(cudnnBackendCreateDescriptor(type, &d->d), what);
  keep.push_back(d);
  return d->d;
}

void Builder::set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                  int64_t count, const void* values, const char* what) {
  if (ok()) note(cudnnBackendSetAttribute(d, name, type, count, values), what);
}

void Builder::set_desc(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t v,
                       const char* what) {
  set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v, what);
}

void Builder::finalize(cudnnBackendDescriptor_t d, const char* what) {
  if (ok()) note(cudnnBackendFinalize(d), what);
}

namespace {

cudnnBackendDescriptor_t tensor_of(Builder& b, int64_t uid, const std::vector<int64_t>& dims,
                                   const std::vector<int64_t>& strides, int64_t align, bool is_virtual, bool by_value,
                                   cudnnDataType_t type) {
  cudnnBackendDescriptor_t d = b.make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor descriptor");
  b.set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "tensor data type");
  b.set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, static_cast<int64_t>(dims.size()), dims.data(),
        "tensor dimensions");
  b.set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, static_cast<int64_t>(strides.size()), strides.data(),
        "tensor strides");
  b.set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor unique id");
  b.set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
  b.set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, "tensor is-virtual");
  if (by_value) b.set(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, "tensor by-value");
  b.finalize(d, "tensor finalize");
  return d;
}

}  // namespace

cudnnBackendDescriptor_t tensor(Builder& b, int64_t uid, const std::vector<int64_t>& dims, int64_t align,
                                bool is_virtual, cudnnDataType_t type, bool last) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (size_t i = dims.size() - 1; i > 0; --i) strides[i - 1] = strides[i] * dims[i];
  if (last && dims.size() == 4) strides = {dims[1] * dims[2] * dims[3], 1, dims[3] * dims[1], dims[1]};
  return tensor_of(b, uid, dims, strides, align, is_virtual, false, type);
}

cudnnBackendDescriptor_t scalar_tensor(Builder& b, int64_t uid, cudnnDataType_t type) {
  const std::vector<int64_t> ones{1, 1, 1, 1};
  return tensor_of(b, uid, ones, ones, 16, false, true, type);
}

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

std::shared_ptr<const GraphPlan> plan_of(Builder& b, const std::vector<cudnnBackendDescriptor_t>& ops, bool tf32,
                                         const PlanChoice& choice, std::string* why) {
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
  return pick_plan(graph, b.keep, tf32, choice, why);
}

PlanChoice plan_choice(const KernelContext& ctx) {
  PlanChoice p;
  p.timed = ctx.chooser != nullptr && ctx.chooser->policy().max_candidates > 0;
  p.candidates = p.timed ? ctx.chooser->policy().max_candidates : 1;
  p.deterministic = ctx.deterministic;
  return p;
}

bool Buffers::aliased() const { return std::count(ptrs.begin(), ptrs.end(), out) > 1; }

namespace {

// Puts the engine `c`'s problem runs with into engine_log(), with the chooser's timing.
void log_engine(const KernelContext& ctx, const GraphCall& c, const std::string& tag, const EngineChoice* choice) {
  EngineRecord r = engine_record(ctx.node.op_type, c.pass, c.problem, "cuDNN graph " + cudnn_version(), c.flops);
  r.engine = tag;
  if (choice && choice->cached) r.engine += " (the timing cache's choice)";
  r.timed = choice && choice->timed;
  r.time_ms = r.timed ? choice->time_ms : 0;
  engine_log().record(std::move(r));
}

// The candidate of `g` this call runs (see run() in the header); null when every
// candidate failed when timed.
const Candidate* choose(const KernelContext& ctx, const GraphPlan& g, const GraphCall& c) {
  {
    std::lock_guard<std::mutex> lock(g.mu);
    if (g.chosen >= 0) {
      const Candidate& k = g.candidates[static_cast<size_t>(g.chosen)];
      if (!g.logged) g.logged = true, log_engine(ctx, c, k.tag, nullptr);
      return &k;
    }
  }
  if (!ctx.chooser) return &g.candidates.front();
  const bool can_time = !capturing(ctx.node) && !c.bufs.aliased();
  std::vector<std::string> tags;
  for (const Candidate& k : g.candidates) tags.push_back(k.tag);
  const EngineKey key{c.pattern, c.key, c.precision, gpu_name(), cudnn_version()};
  EngineChooser::Time time;
  if (can_time)
    time = [&](size_t i, const TimingPolicy& p) { return time_candidate(ctx.node, g.candidates[i], c.bufs, p); };
  const EngineChoice choice = ctx.chooser->choose(key, tags, time);
  if (!choice.index) return nullptr;
  if (choice.cached || choice.timed) {
    std::lock_guard<std::mutex> lock(g.mu);
    g.chosen = static_cast<int>(*choice.index);
    g.logged = true;
    log_engine(ctx, c, g.candidates[*choice.index].tag, &choice);
  }
  return &g.candidates[*choice.index];
}

}  // namespace

bool run(const KernelContext& ctx, const GraphCall& c, const std::function<void()>* prepare, const char* instead) {
  const bool ran = graphs().try_run(
      c.key, [&](std::string* why) { return c.build(c.choice, why); },
      [&](const GraphPlan& g) {
        if (prepare && *prepare) (*prepare)();
        const Candidate* chosen = choose(ctx, g, c);
        if (!chosen) return std::string("every candidate engine failed when timed");
        return execute(ctx.node, *chosen, c.bufs);
      },
      [&](const std::string& why) {
        const std::string line = graph_fallback_notice(ctx.node.op_type, ctx.node.name, c.problem, why, instead);
        std::fprintf(stderr, "%s\n", line.c_str());
        fallback_log().record(
            {ctx.node.op_type, ctx.node.name, c.problem, "cuDNN graph unsupported (" + why + ")", instead});
      });
  fusion_tally().record(c.label, ctx.node.name, ran);
  return ran;
}

int64_t plan_workspace(const GraphCall& c) {
  const auto plan = graphs().plan(c.key, [&](std::string* why) { return c.build(c.choice, why); });
  return plan ? plan->workspace : -1;
}

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

}  // namespace trainrt::cuda::cudnn_graph

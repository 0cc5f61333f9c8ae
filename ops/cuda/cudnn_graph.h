// What every cuDNN graph of the cuda backend shares (the backend descriptor API):
// descriptor building with the first failure kept, tensors (dense or NHWC, virtual, by
// value), pointwise operations, the engine choice, the variant pack, and one call's way
// through the per-problem fallback, the timing cache and the fusion tally.
//
//   cudnn_graph::GraphCall c;                 // its key, words, buffers and builder
//   c.key = "...";  c.label = "BatchNormalizationRelu";  c.precision = "fp32";
//   c.bufs.add(kX, x.raw());  ...  c.bufs.out = y.raw();
//   c.build = [p](bool all, std::string* why) {
//     cudnn_graph::Builder b;
//     std::vector<cudnnBackendDescriptor_t> ops = my_ops(b, p);
//     return cudnn_graph::plan_of(b, ops, /*tf32=*/false, all, why);
//   };
//   if (!cudnn_graph::run(ctx, c, nullptr, "the own kernels")) own_kernels();
//
// Why one place: the convolution graphs (ops/conv_graph_cuda.cu) and the batch-norm
// graphs (ops/norm_graph_cuda.cu) differ only in their operations; the engine filters
// (deterministic first, no down-converting engines, TF32 only where allowed, a 256 MiB
// workspace cap), the timing of candidates with a chooser, and "unsupported means the
// fallback from then on, said once" must be the same for all of them.
//
// Host code (no kernels). Compiled in CI, never run on a GPU.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ops/cuda/cuda_util.h"

namespace trainrt::cuda::cudnn_graph {

constexpr int64_t kMaxGraphWorkspace = int64_t{256} << 20;

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

// Builds descriptors; the first failing call (its name and cuDNN's status) becomes
// `why`, and every later call does nothing.
struct Builder {
  std::string why;
  std::vector<DescPtr> keep;  // every descriptor the plan refers to, alive as long as it

  bool ok() const { return why.empty(); }
  bool note(cudnnStatus_t s, const char* call);
  cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t type, const char* what);
  void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
           int64_t count, const void* values, const char* what);
  void set_desc(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t v,
                const char* what);
  // An operation's descriptor-valued attributes, in order, as (name, value, what) rows.
  struct DescAttr {
    cudnnBackendAttributeName_t name;
    cudnnBackendDescriptor_t value;
    const char* what;
  };
  void set_descs(cudnnBackendDescriptor_t d, std::initializer_list<DescAttr> attrs) {
    for (const DescAttr& a : attrs) set_desc(d, a.name, a.value, a.what);
  }
  void finalize(cudnnBackendDescriptor_t d, const char* what);
};

// A tensor of `type` and `dims`, dense row-major, or with `last` a rank-4 N,C,H,W tensor
// stored ChannelsLast (NHWC: C innermost; a 1,C,1,1 per-channel tensor is then C values).
cudnnBackendDescriptor_t tensor(Builder& b, int64_t uid, const std::vector<int64_t>& dims, int64_t align,
                                bool is_virtual, cudnnDataType_t type = CUDNN_DATA_FLOAT, bool last = false);
// A 1,1,1,1 scalar of `type` passed by value: the variant pack points at host memory.
cudnnBackendDescriptor_t scalar_tensor(Builder& b, int64_t uid, cudnnDataType_t type);
// y = mode(x) or y = mode(x, second): one pointwise operation computing in fp32.
cudnnBackendDescriptor_t pointwise(Builder& b, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                                   cudnnBackendDescriptor_t second, cudnnBackendDescriptor_t y);
// dx = relu_x > 0 ? dy : 0: one pointwise RELU_BWD in fp32.
cudnnBackendDescriptor_t relu_backward(Builder& b, cudnnBackendDescriptor_t dy, cudnnBackendDescriptor_t relu_x,
                                       cudnnBackendDescriptor_t dx);

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
  mutable bool logged = false;  // the choice is in engine_log()
};

// Which of the heuristics' engine configs a problem's plan keeps: the first `candidates`
// acceptable ones (1 without a chooser: the heuristics' own choice; the chooser's
// TimingPolicy::max_candidates with one, `timed`: the chooser times them), and whether
// non-deterministic engines are acceptable (KernelContext::deterministic). Its key()
// is part of the problem's key (another choice, another plan).
struct PlanChoice {
  size_t candidates = 1;
  bool timed = false;
  bool deterministic = true;
  std::string key() const {
    return (timed ? "|timed" + std::to_string(candidates) : std::string()) + (deterministic ? "" : "|nondet");
  }
};
PlanChoice plan_choice(const KernelContext& ctx);

// The operation graph of `ops` (built with `b`) and its execution plans: the engine
// configs of the heuristics (mode A, then the fallback list) that finalize within the
// workspace cap, never one that down-converts its inputs or reduces in reduced
// precision, none with the TENSOR_CORE note unless `tf32` (keep_engine,
// ops/core/engine_choice.h); with `choice.deterministic` deterministic ones first
// (non-deterministic only when none is), else every one in the heuristics' order. The
// first choice.candidates such configs (the others are never finalized). Null and `why`
// when cuDNN supports none.
std::shared_ptr<const GraphPlan> plan_of(Builder& b, const std::vector<cudnnBackendDescriptor_t>& ops, bool tf32,
                                         const PlanChoice& choice, std::string* why);

// One call's buffers: the variant pack's uids and pointers (by-value scalars point at
// host memory that outlives the call), the output among them, and where the graph's
// workspace starts in the context's workspace.
struct Buffers {
  std::vector<int64_t> uids;
  std::vector<void*> ptrs;
  const void* out = nullptr;
  size_t workspace_offset = 0;
  void add(int64_t uid, const void* p) {
    uids.push_back(uid);
    ptrs.push_back(const_cast<void*>(p));
  }
  bool aliased() const;  // the output shares an input's memory (it is in ptrs more than once)
};

// A call as a graph sees it: the problem's key (everything the plan depends on: the
// per-problem fallback and plan cache key it), the timing cache's pattern and the
// notice's words, the tally's label, the precision the timing cache files it under, the
// engine log's pass and FLOPs, its buffers and how to build its plan.
struct GraphCall {
  Buffers bufs;
  std::string key, problem, pattern, label;
  std::string pass = "forward";    // the engine log's (ops/core/engine_record.h)
  double flops = 0;                // of one call; 0 where FLOPs mean nothing (batch norm)
  const char* precision = "fp32";  // "fp32", "tf32", "bf16", "fp16"
  PlanChoice choice;               // which engine configs are candidates (plan_choice(ctx))
  std::function<std::shared_ptr<const GraphPlan>(const PlanChoice& choice, std::string* why)> build;
};

// Runs `c`'s graph (after `prepare`, when given) on the context's stream, or says once
// per problem on stderr why not ("... running <instead>") and returns false: the caller
// then runs its fallback. The candidate is the only one, the one chosen before, else the
// context's chooser's (the timing cache's entry, or each candidate timed on this call's
// buffers; not while the stream is captured or when the output shares an input's
// memory). Records into fusion_tally() whether the node ran its graph.
bool run(const KernelContext& ctx, const GraphCall& c, const std::function<void()>* prepare, const char* instead);
// The workspace `c`'s plan needs (the most any candidate needs); -1 when cuDNN does not
// support the problem (its notice comes with the first call).
int64_t plan_workspace(const GraphCall& c);

// Largest power of two up to 16 dividing the address: the alignment a graph may assume.
int64_t alignment(const void* p);
std::string dims_text(const std::vector<int64_t>& v);
// cuDNN's name of a dtype the graphs take (fp32, bf16, fp16); false for others.
bool graph_dtype(DataType t, cudnnDataType_t* out);
const char* dtype_word(DataType t);  // "bf16", "fp16", else "fp32"

}  // namespace trainrt::cuda::cudnn_graph

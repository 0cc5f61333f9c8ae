// Gemm, FusedGemm and MatMul of the cuda backend on cuBLASLt (cublasLtMatmul); MatMul
// (numpy batches) is at the end of the file.
//
//   Y[M,N] = act(alpha * A'[M,K] B'[K,N] + beta * C)   (A' = A or A^T by transA, B' likewise;
//            C optional, broadcast from [], [1], [N], [1,N], [M,1], [M,N] ... as ONNX;
//            act: none for Gemm, FusedGemm's activation: none | Relu)
//
// cuBLASLt is column-major and Y is row-major, so it computes Y^T = B'^T A'^T: its "A"
// is our B and its "B" our A, each read in place with the transpose as the operation.
// fp32 runs in CUBLAS_COMPUTE_32F_FAST_TF32 with KernelContext::fp32 tf32 (the CLI's
// default on --device cuda: TF32 tensor cores, fp32 accumulation, as PyTorch allows for
// convolutions) and CUBLAS_COMPUTE_32F with strict (the reference's arithmetic); fp64 in
// CUBLAS_COMPUTE_64F. Under --precision bf16/fp16 (KernelContext::math) fp32 A and B are
// first narrowed to 16-bit copies in the call's workspace (bfloat16 / IEEE half, the
// reference's rounding: ops/core/kernel.h) and multiplied at the tensor cores' 16-bit
// rate in CUBLAS_COMPUTE_32F with fp32 C and Y (the products are exact, the sum is
// fp32's), as the reference rounds them; FusedGemm's sums then read the fp32 operand
// (operand_sums, not the BGRAD epilogue, which would sum the rounded copy). A C of Y's
// full size is passed to cuBLASLt as its C (out of place). A bias (fp32 C of shape [N]
// or [1,N], beta 1: a Linear layer's) is added by cuBLASLt's epilogue
// (CUBLASLT_EPILOGUE_BIAS: one vector per row of cuBLASLt's column-major D, which are
// Y's columns), so the product is one kernel; where the heuristic has no algorithm with
// that epilogue, and for other broadcast C, C is first expanded into Y by a kernel and
// the product added in place (C == D). beta == 0 ignores C, as BLAS and the cpu kernel
// do. K == 0 is no product: Y = beta * C (or 0) by the same kernel. FusedGemm's ReLU is
// cuBLASLt's epilogue too (CUBLASLT_EPILOGUE_RELU, or RELU_BIAS with a bias: the Linear
// layer and its activation in one kernel); where the heuristic offers no algorithm with
// it, a ReLU kernel runs after the product. FusedGemm's sums (sum_of A or B: a Linear
// layer's bias gradient beside its weight gradient) are the BGRADB or BGRADA epilogue
// (cuBLASLt's B is our A), or operand_sums after the product.
//
// The matmul descriptor, layouts and the heuristic's algorithms are cached by dtype, M,
// N, K, transA/transB, fp32 math, the 16-bit input type, the epilogue and the pointers'
// alignments, up to 16 bytes (the heuristic assumes 256-byte aligned buffers unless told
// otherwise); like the context, they live as long as the process. Without a chooser a
// call runs the heuristic's first algorithm; with one (a timing cache) up to 8 are
// timed on the problem's first call and the fastest kept (choose_algo). Falls back to
// the host reference kernel (after synchronising the stream) when the heuristic offers
// no algorithm within 32 MiB of workspace.
//
// Compiled in CI, run only where a GPU exists (trainrt selftest --device cuda).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "graph/error.h"
#include "ops/core/common.h"
#include "ops/core/engine_choice.h"
#include "ops/core/matmul_shape.h"
#include "ops/cuda/cuda_util.h"
#include "ops/cuda/graph_fallback.h"

namespace trainrt::cuda {

namespace {

constexpr uint64_t kMaxLtWorkspace = uint64_t{32} << 20;

// y[i,j] = scale * c[i or 0, j or 0]: C broadcast to M,N (cm, cn: C's dims right-aligned, 1 or full).
template <typename T>
__global__ void broadcast_c(const T* c, T* y, int64_t cm, int64_t cn, int64_t n, T scale, int64_t count) {
  TRAINRT_GRID_STRIDE(idx, count) {
    const int64_t i = idx / n, j = idx % n;
    y[idx] = scale * c[(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)];
  }
}

// y = max(y, 0), NaN to 0 as the reference's Relu: FusedGemm's activation where cuBLASLt's
// epilogue does not apply it.
template <typename T>
__global__ void relu_in_place(T* y, int64_t count) {
  TRAINRT_GRID_STRIDE(i, count) {
    if (!(y[i] > T(0))) y[i] = T(0);
  }
}

// s[r] = the sum over k of x[r * row + k * step] (fp64 partial sums): FusedGemm's sums
// where cuBLASLt's BGRAD epilogue does not compute them. One thread per r.
template <typename T>
__global__ void operand_sums(const T* x, T* s, int64_t rows, int64_t k, int64_t row, int64_t step) {
  TRAINRT_GRID_STRIDE(r, rows) {
    double acc = 0;
    for (int64_t j = 0; j < k; ++j) acc += static_cast<double>(x[r * row + j * step]);
    s[r] = static_cast<T>(acc);
  }
}

// Largest power of two up to 16 dividing the address: what the heuristic may assume. At
// most the 16 bytes the plan-time workspace rule assumes (gemm_workspace), so a call
// never takes an algorithm that needs more workspace than the plan reserved (arena
// values are 64-byte aligned: every call of a plan then has the rule's plan).
uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  uint32_t bytes = 1;
  while (bytes < 16 && a % (2 * bytes) == 0) bytes *= 2;
  return bytes;
}

// Strided batches of one cuBLASLt call: `count` products, the k-th at k * stride
// elements of our A, our B and Y (a stride 0 repeats that operand: a broadcast batch).
struct Batch {
  int32_t count = 1;
  int64_t a = 0, b = 0, y = 0;
};

// The heuristic's candidates a chooser times (kMaxLtCandidates) and the one a plan runs
// without one.
constexpr int kMaxLtCandidates = 8;

// A cuBLASLt algorithm in a named struct: nvcc 13's front end stops with an internal
// error on a std::vector of cuBLASLt's anonymous typedef structs (destroying one).
struct Algo {
  cublasLtMatmulAlgo_t algo;
};

struct GemmPlan {
  bool use_reference = false;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;  // cuBLASLt's A (our B), B (our A), C and D
  // The heuristic's algorithms within the workspace cap, best first: all of them when
  // a chooser times them (KernelContext::chooser), else its first; their tags name them
  // in the timing cache (algo_tag).
  std::vector<Algo> algos;
  std::vector<std::string> tags;
  size_t workspace = 0;   // the most any of them needs
  std::string key;        // the plan cache's key, the timing cache's problem
  std::string precision;  // of the timing cache's key: "fp32", "tf32", "bf16", "fp16", "fp64"
  std::string problem;    // the engine log's words for it: "m,n,k NT, tf32" (batched: "b x ...")
  double flops = 0;       // of one call
  std::shared_ptr<std::atomic<int>> choice = std::make_shared<std::atomic<int>>(-1);  // chosen index, once timed
};

// An algorithm's configuration as the timing cache names it: "id 21 tile 20 stages 8
// splitk 1 reduction 0 swizzle 0 custom 0 inner 0 cluster 0" (cuBLASLt's
// CUBLASLT_ALGO_CONFIG_* attributes, each read at the size the header gives it).
std::string algo_tag(const cublasLtMatmulAlgo_t& algo) {
  struct Field {
    const char* name;
    cublasLtMatmulAlgoConfigAttributes_t attr;
    size_t bytes;
  };
  static const Field fields[] = {{"id", CUBLASLT_ALGO_CONFIG_ID, 4},
                                 {"tile", CUBLASLT_ALGO_CONFIG_TILE_ID, 4},
                                 {"stages", CUBLASLT_ALGO_CONFIG_STAGES_ID, 4},
                                 {"splitk", CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 4},
                                 {"reduction", CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, 4},
                                 {"swizzle", CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, 4},
                                 {"custom", CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, 4},
                                 {"inner", CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, 2},
                                 {"cluster", CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, 2}};
  std::string tag;
  for (const Field& f : fields) {
    uint32_t v32 = 0;
    uint16_t v16 = 0;
    void* buf = f.bytes == 4 ? static_cast<void*>(&v32) : static_cast<void*>(&v16);
    size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, f.attr, buf, f.bytes, &written) != CUBLAS_STATUS_SUCCESS) continue;
    tag += std::string(tag.empty() ? "" : " ") + f.name + ' ' + std::to_string(f.bytes == 4 ? v32 : v16);
  }
  return tag;
}

// cuBLASLt's version, of the timing cache's key ("cuBLASLt 130100").
const std::string& lt_version() {
  static const std::string v = "cuBLASLt " + std::to_string(cublasLtGetVersion());
  return v;
}

// The type cuBLASLt reads A and B in: 16-bit copies of fp32 ones under bf16/fp16, else
// their own (CUDA_R_32F / CUDA_R_64F, `t`).
cudaDataType_t operand_type(MathPrecision math, DataType t) {
  if (math == MathPrecision::bf16) return CUDA_R_16BF;
  if (math == MathPrecision::fp16) return CUDA_R_16F;
  return t == DataType::Float64 ? CUDA_R_64F : CUDA_R_32F;
}

// align: of our B, our A, C and Y (cuBLASLt's A, B, C, D). `narrow`: A and B are 16-bit
// copies in `math`. `timed`: every candidate of the heuristic, for a chooser.
GemmPlan make_gemm_plan(const Node& node, DataType t, int64_t m, int64_t n, int64_t k, bool ta, bool tb,
                        const uint32_t align[4], bool tf32, MathPrecision narrow, cublasLtEpilogue_t epilogue,
                        bool timed, const std::string& key, const Batch& batch = {}) {
  GemmPlan p;
  p.key = key;
  const int64_t batches = batch.count > 1 ? batch.count : 1;
  p.flops =
      2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) * static_cast<double>(batches);
  p.precision = narrow != MathPrecision::fp32 ? math_precision_name(narrow)
                : t == DataType::Float64      ? "fp64"
                : tf32                        ? "tf32"
                                              : "fp32";
  p.problem = (batches > 1 ? std::to_string(batches) + " x " : std::string()) + "m,n,k " + std::to_string(m) + "," +
              std::to_string(n) + "," + std::to_string(k) + " " + (ta ? "T" : "N") + (tb ? "T" : "N") + ", " +
              p.precision;
  const bool f64 = t == DataType::Float64;
  const cudaDataType_t type = f64 ? CUDA_R_64F : CUDA_R_32F, in_type = operand_type(narrow, t);
  const cublasComputeType_t compute = f64    ? CUBLAS_COMPUTE_64F
                                      : tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                             : CUBLAS_COMPUTE_32F;
  const std::string where = what(node, "cuBLASLt matmul descriptors");
  check(cublasLtMatmulDescCreate(&p.op, compute, type), where);
  const cublasOperation_t op_a = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)), where);
  check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)), where);
  if (epilogue != CUBLASLT_EPILOGUE_DEFAULT)  // a bias pointer is set per call (gemm)
    check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)), where);
  // Column-major views of the row-major buffers: B is N,K (or K,N stored when transB),
  // A is K,M (or M,K stored when transA), Y is N,M.
  const int64_t a_rows = tb ? k : n, b_rows = ta ? m : k;
  check(cublasLtMatrixLayoutCreate(&p.a, in_type, a_rows, tb ? n : k, a_rows), where);
  check(cublasLtMatrixLayoutCreate(&p.b, in_type, b_rows, ta ? k : m, b_rows), where);
  check(cublasLtMatrixLayoutCreate(&p.d, type, n, m, n), where);
  if (batch.count > 1) {
    // cuBLASLt's A, B, D are our B, our A, Y.
    const std::pair<cublasLtMatrixLayout_t, int64_t> strided[3] = {{p.a, batch.b}, {p.b, batch.a}, {p.d, batch.y}};
    for (const auto& [layout, stride] : strided) {
      check(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch.count,
                                             sizeof(batch.count)),
            where);
      check(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                             sizeof(stride)),
            where);
    }
  }

  cublasLtMatmulPreference_t pref = nullptr;
  check(cublasLtMatmulPreferenceCreate(&pref), where);
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kMaxLtWorkspace,
                                             sizeof(kMaxLtWorkspace)),
        where);
  const cublasLtMatmulPreferenceAttributes_t aligned[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i)
    check(cublasLtMatmulPreferenceSetAttribute(pref, aligned[i], &align[i], sizeof(align[i])), where);
  cublasLtMatmulHeuristicResult_t results[kMaxLtCandidates] = {};
  int returned = 0;
  const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(context().lt, p.op, p.a, p.b, p.d, p.d, pref,
                                                          timed ? kMaxLtCandidates : 1, results, &returned);
  check(cublasLtMatmulPreferenceDestroy(pref), where);
  for (int i = 0; s == CUBLAS_STATUS_SUCCESS && i < returned; ++i) {
    const cublasLtMatmulHeuristicResult_t& r = results[i];
    if (r.state != CUBLAS_STATUS_SUCCESS || r.workspaceSize > kMaxLtWorkspace) continue;
    std::string tag = algo_tag(r.algo);
    if (std::find(p.tags.begin(), p.tags.end(), tag) != p.tags.end()) tag += " #" + std::to_string(i);
    p.algos.push_back(Algo{r.algo});
    p.tags.push_back(tag);
    p.workspace = std::max(p.workspace, r.workspaceSize);
  }
  p.use_reference = p.algos.empty();
  return p;
}

// The algorithm a call runs (chosen_candidate, ops/cuda/cuda_util.h): `call(i)` runs
// algorithm i on this call's buffers and returns cuBLASLt's status; `repeatable`: a call
// writes the same outputs when run again (its D is not also its C).
template <typename Call>
const cublasLtMatmulAlgo_t& choose_algo(const KernelContext& ctx, const GemmPlan& p, const char* pattern,
                                        bool repeatable, Call&& call) {
  return p
      .algos[chosen_candidate(
          ctx, *p.choice, pattern, p.key, p.precision, lt_version(), p.tags, repeatable,
          [&](size_t i) { return call(i) == CUBLAS_STATUS_SUCCESS; },
          engine_record(ctx.node.op_type, "forward", p.problem, lt_version(), p.flops))]
      .algo;
}

// Whether ctx's C is a bias cuBLASLt's epilogue adds: fp32, [N] or [1,N], beta 1, K > 0.
bool bias_c(const KernelContext& ctx) {
  if (!ctx.has_input(2) || ctx.out(0).dtype() != DataType::Float32 || ctx.node.attr_float("beta", 1.f) != 1.f)
    return false;
  const Tensor& c = ctx.in(2);
  const Tensor& a = ctx.in(0);
  const int64_t n = ctx.out(0).dims()[1];
  const int64_t k = ctx.node.attr_int("transA", 0) != 0 ? a.dims()[0] : a.dims()[1];
  const bool row = (c.rank() == 1 && c.dims()[0] == n) || (c.rank() == 2 && c.dims()[0] == 1 && c.dims()[1] == n);
  return k > 0 && row && ctx.out(0).dims()[0] > 1;  // M == 1: C is Y's full size, read directly
}

// The precision A and B are narrowed to for the product: ctx's math when they are fp32
// (rounded_inputs: both or neither, one dtype), else fp32 (no copies). The copies are
// narrow_inputs', in the first math_bytes of the call's workspace.
MathPrecision narrowed(const KernelContext& ctx) {
  return rounded_inputs(ctx).empty() ? MathPrecision::fp32 : ctx.math;
}

// A call's buffers: its workspace (the copies' math_bytes first, then cuBLASLt's
// `lt_bytes`) and the A and B it multiplies: narrow_inputs' 16-bit copies, written now
// (`narrow`), or the inputs themselves.
struct Operands {
  const void* a;
  const void* b;
  void* ws;
  bool narrow;
};
Operands operands(const KernelContext& ctx, size_t lt_bytes) {
  const size_t copies = math_bytes(ctx);
  auto* base = static_cast<std::byte*>(workspace(copies + lt_bytes));
  const NarrowInputs narrow = narrow_inputs(ctx, base);
  if (narrow.ok) narrow.prepare();
  return {narrow.ok ? narrow.t[0].raw() : ctx.in(0).raw(), narrow.ok ? narrow.t[1].raw() : ctx.in(1).raw(),
          base + copies, narrow.ok};
}

// Whether a product of ctx in dtype `t` runs TF32 math, and its words in a plan key.
bool tf32_math(const KernelContext& ctx, DataType t) {
  return ctx.fp32 == Fp32Math::tf32 && t == DataType::Float32 && narrowed(ctx) == MathPrecision::fp32;
}
std::string math_key(const KernelContext& ctx, DataType t) {
  if (narrowed(ctx) != MathPrecision::fp32) return std::string("|") + math_precision_name(narrowed(ctx));
  return tf32_math(ctx, t) ? "|tf32" : "";
}

// A: M,K (K,M if transA)  B: K,N (N,K if transB)  C: broadcast to M,N  ->  Y: M,N
// The cached plan of ctx's problem for operand alignments `align` (B, A, C, Y as
// cuBLASLt sees them), with `epilogue`; null when K == 0 (no product).
std::shared_ptr<const GemmPlan> gemm_plan(const KernelContext& ctx, const uint32_t align[4],
                                          cublasLtEpilogue_t epilogue) {
  const Node& node = ctx.node;
  const Tensor& a = ctx.in(0);
  const Tensor& y = ctx.out(0);
  const bool ta = node.attr_int("transA", 0) != 0, tb = node.attr_int("transB", 0) != 0;
  const int64_t m = y.dims()[0], n = y.dims()[1], k = ta ? a.dims()[0] : a.dims()[1];
  if (k == 0) return nullptr;
  std::string key = std::string(dtype_name(y.dtype())) + '|' + std::to_string(m) + ',' + std::to_string(n) + ',' +
                    std::to_string(k) + (ta ? "T" : "N") + (tb ? "T" : "N");
  for (int i = 0; i < 4; ++i) key += ',' + std::to_string(align[i]);
  // With a chooser every candidate is in the plan, and the workspace is the most any
  // needs: another plan than without one.
  const bool timed = ctx.chooser != nullptr;
  key += math_key(ctx, y.dtype()) + "|e" + std::to_string(static_cast<int>(epilogue)) + (timed ? "|timed" : "");
  return cached<GemmPlan>(key, [&] {
    return make_gemm_plan(node, y.dtype(), m, n, k, ta, tb, align, tf32_math(ctx, y.dtype()), narrowed(ctx), epilogue,
                          timed, key);
  });
}

// Whether the node is a FusedGemm with a ReLU.
bool wants_relu(const KernelContext& ctx) {
  return ctx.node.op_type == "FusedGemm" && ctx.node.attr_string("activation", "") == "Relu";
}

// Whether the node is a FusedGemm writing the sums of op(A) ('A') or op(B) ('B'); 0 if not.
char wants_sums(const KernelContext& ctx) {
  if (ctx.node.op_type != "FusedGemm" || !ctx.has_output(1)) return 0;
  return ctx.node.attr_string("sum_of", "") == "A" ? 'A' : 'B';
}

// What a call's epilogue does.
struct Epilogue {
  bool bias = false;  // C added by it (no broadcast kernel, beta 0 for cuBLASLt's C)
  bool relu = false;  // the activation applied by it (else by relu_in_place, when wanted)
  bool sums = false;  // FusedGemm's sums computed by it (else by operand_sums)
};

// The plan a call takes: the richest epilogue the heuristic has an algorithm for, among
// those that apply (ReLU with the bias, ReLU, the bias; the sums; none), said in `e`.
std::shared_ptr<const GemmPlan> call_plan(const KernelContext& ctx, const uint32_t align[4], Epilogue& e) {
  // The sums by the epilogue only where nothing else could enter them: alpha 1, no C
  // (whether cuBLASLt scales or adds to them is not what FusedGemm's sums mean), and
  // the operand unrounded (its 16-bit copy is the product's input, not the sums').
  const char sums = wants_sums(ctx) && ctx.node.attr_float("alpha", 1.f) == 1.f && !ctx.has_input(2) &&
                            narrowed(ctx) == MathPrecision::fp32
                        ? wants_sums(ctx)
                        : 0;
  const bool bias = bias_c(ctx), relu = wants_relu(ctx);
  for (const Epilogue c : {Epilogue{true, true, false}, Epilogue{false, true, false}, Epilogue{true, false, false},
                           Epilogue{false, false, true}, Epilogue{}}) {
    if ((c.bias && !bias) || (c.relu && !relu) || (c.sums && !sums)) continue;
    const cublasLtEpilogue_t epilogue = c.bias && c.relu ? CUBLASLT_EPILOGUE_RELU_BIAS
                                        : c.bias         ? CUBLASLT_EPILOGUE_BIAS
                                        : c.relu         ? CUBLASLT_EPILOGUE_RELU
                                        : c.sums ? (sums == 'A' ? CUBLASLT_EPILOGUE_BGRADB  // cuBLASLt's B: our A
                                                                : CUBLASLT_EPILOGUE_BGRADA)
                                                 : CUBLASLT_EPILOGUE_DEFAULT;
    auto p = gemm_plan(ctx, align, epilogue);
    if (!p || !p->use_reference || epilogue == CUBLASLT_EPILOGUE_DEFAULT) {
      e = p ? c : Epilogue{};
      return p;
    }
  }
  e = Epilogue{};
  return gemm_plan(ctx, align, CUBLASLT_EPILOGUE_DEFAULT);
}

// The workspace a call needs (KernelRegistry::set_workspace), asked before the buffers
// exist: the 16-bit copies, then cuBLASLt's, planned for 16-byte-aligned operands, the
// least the arena gives and the most a call assumes (alignment()), so the call's plan is
// this one.
size_t gemm_workspace(const KernelContext& ctx) {
  if (ctx.out(0).numel() == 0) return 0;
  const uint32_t align[4] = {16, 16, 16, 16};
  Epilogue e;
  const auto plan = call_plan(ctx, align, e);
  return math_bytes(ctx) + (plan && !plan->use_reference ? plan->workspace : 0);
}

void gemm(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  Tensor& y = ctx.out(0);
  if (y.numel() == 0) {  // FusedGemm's sums may still have values (K > 0): the host computes them
    if (wants_sums(ctx) && ctx.out(1).numel() > 0) run_reference(ctx);
    return;
  }
  const bool ta = node.attr_int("transA", 0) != 0, tb = node.attr_int("transB", 0) != 0;
  const float alpha = node.attr_float("alpha", 1.f), beta = node.attr_float("beta", 1.f);
  const int64_t m = y.dims()[0], n = y.dims()[1], k = ta ? a.dims()[0] : a.dims()[1];
  const Tensor* c = ctx.has_input(2) ? &ctx.in(2) : nullptr;
  int64_t cm = 1, cn = 1;  // C's dims right-aligned to M,N
  if (c && c->rank() == 2) cm = c->dims()[0], cn = c->dims()[1];
  if (c && c->rank() == 1) cn = c->dims()[0];
  const bool use_c = c && beta != 0.f;
  const bool full_c = use_c && c->numel() == y.numel();  // C's layout is Y's: cuBLASLt reads it directly
  const void* c_ptr = full_c ? c->raw() : y.raw();

  std::shared_ptr<const GemmPlan> plan;
  Epilogue e;
  const size_t copies = math_bytes(ctx);
  if (k > 0) {
    // 16-bit copies: at 256-byte offsets of cudaMalloc's buffer, so 16-byte aligned as
    // the plan-time rule assumes.
    const uint32_t align[4] = {copies ? 16u : alignment(b.raw()), copies ? 16u : alignment(a.raw()), alignment(c_ptr),
                               alignment(y.raw())};
    plan = call_plan(ctx, align, e);
    if (plan->use_reference) return run_reference(ctx, "cuBLASLt's heuristic has no algorithm for this problem");
    if (e.bias || e.sums) {  // read when cublasLtMatmul is called (or captured): set for this call
      const void* bias_ptr = e.bias ? c->raw() : ctx.out(1).raw();
      check(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)),
            what(node, "cuBLASLt bias pointer"));
    }
  }
  Context& cx = context();
  dispatch_float(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    // K == 0: no products, Y = beta * C; else a broadcast C is expanded into Y first.
    if ((k == 0 && c) || (use_c && !full_c && !e.bias)) {
      broadcast_c<T><<<blocks_for(y.numel(), kThreads), kThreads, 0, cx.stream>>>(
          c->data<T>(), y.data<T>(), cm, cn, n, k == 0 ? static_cast<T>(beta) : T(1), y.numel());
      check_launch(node, "broadcast_c");
    } else if (k == 0) {
      check(cudaMemsetAsync(y.raw(), 0, y.nbytes(), cx.stream), what(node, "cudaMemsetAsync"));
    }
    if (k > 0) {
      const T alpha_t = static_cast<T>(alpha), beta_t = use_c && !e.bias ? static_cast<T>(beta) : T(0);
      const Operands in = operands(ctx, plan->workspace);
      auto run = [&](const cublasLtMatmulAlgo_t& algo) {
        return cublasLtMatmul(cx.lt, plan->op, &alpha_t, in.b, plan->a, in.a, plan->b, &beta_t, c_ptr, plan->d, y.raw(),
                              plan->d, &algo, in.ws, plan->workspace, cx.stream);
      };
      // Y accumulating onto itself (a broadcast C expanded into it, beta != 0) changes with each run.
      const bool repeatable = beta_t == T(0) || c_ptr != y.raw();
      const cublasLtMatmulAlgo_t& algo =
          choose_algo(ctx, *plan, node.op_type.c_str(), repeatable, [&](size_t i) { return run(plan->algos[i].algo); });
      check(run(algo), what(node, "cublasLtMatmul"));
    }
    // `trainrt bench` says how FusedGemm nodes ran: their ReLU or sums in cuBLASLt's epilogue or not.
    if (node.op_type == "FusedGemm")
      fusion_tally().record(wants_relu(ctx) ? "FusedGemm (ReLU epilogue)" : "FusedGemm (bias-gradient epilogue)",
                            node.name, wants_relu(ctx) ? e.relu : e.sums);
    if (wants_relu(ctx) && !e.relu) {
      relu_in_place<T><<<blocks_for(y.numel(), kThreads), kThreads, 0, cx.stream>>>(y.data<T>(), y.numel());
      check_launch(node, "relu_in_place");
    }
    if (const char of = wants_sums(ctx); of && !e.sums) {
      // As ops/fused.cpp's fused_gemm_sums: rows of op(A) (M of them) or columns of op(B) (N).
      const Tensor& x = of == 'A' ? a : b;
      const bool trans = of == 'A' ? ta : tb;
      const int64_t d0 = x.dims()[0], d1 = x.dims()[1];
      const bool rows_first = (of == 'A') != trans;
      const int64_t rows = rows_first ? d0 : d1, kk = rows_first ? d1 : d0;
      operand_sums<T><<<blocks_for(rows, kThreads), kThreads, 0, cx.stream>>>(
          x.data<T>(), ctx.out(1).data<T>(), rows, kk, rows_first ? d1 : 1, rows_first ? 1 : d1);
      check_launch(node, "operand_sums");
    }
  });
}

// ---- MatMul -------------------------------------------------------------------------

// MatMul's shapes (ops/core/matmul_shape.h): with `strided` (each operand's batch is Y's
// whole batch or one matrix) one strided-batched cuBLASLt call does every batch, a stride
// 0 repeating a broadcast operand; other broadcasts (a 1 among other batch dims) run one
// call per batch, at the matrices the reference multiplies.
int64_t a_stride(const MatmulShape& s) { return s.a_step * s.m * s.k; }
int64_t b_stride(const MatmulShape& s) { return s.b_step * s.k * s.n; }
bool one_call(const MatmulShape& s) { return s.strided && s.batches <= INT32_MAX; }

// What the heuristic may assume of an operand at `base` whose batches start `stride_bytes`
// apart: the alignment of every batch's start; `base` null: 16, the arena's and the
// workspace copies' (at plan time, and for narrow_inputs' copies).
uint32_t batch_alignment(const void* base, int64_t stride_bytes, bool batched) {
  uint32_t a = base ? alignment(base) : 16;
  if (batched && stride_bytes != 0) a = std::min(a, alignment(reinterpret_cast<const void*>(stride_bytes)));
  return a;
}

// The plan of a MatMul call (`a`, `b`, `y`: the buffers cuBLASLt reads, or null at plan
// time), cached by shape, batching, alignments and math.
std::shared_ptr<const GemmPlan> matmul_plan(const KernelContext& ctx, const MatmulShape& s, bool strided, const void* a,
                                            const void* b, const void* y) {
  const DataType t = ctx.out(0).dtype();
  const int64_t in_bytes = narrowed(ctx) != MathPrecision::fp32 ? 2 : static_cast<int64_t>(dtype_size(t));
  const bool many = s.batches > 1;
  const Batch batch =
      strided && many ? Batch{static_cast<int32_t>(s.batches), a_stride(s), b_stride(s), s.m * s.n} : Batch{};
  const uint32_t y_align = batch_alignment(y, s.m * s.n * static_cast<int64_t>(dtype_size(t)), many);
  const uint32_t align[4] = {batch_alignment(b, (strided ? b_stride(s) : s.k * s.n) * in_bytes, many),
                             batch_alignment(a, (strided ? a_stride(s) : s.m * s.k) * in_bytes, many), y_align,
                             y_align};
  std::string key = std::string("MatMul|") + dtype_name(t) + '|' + std::to_string(s.m) + ',' + std::to_string(s.n) +
                    ',' + std::to_string(s.k) + "|b" + std::to_string(batch.count) + ',' + std::to_string(batch.a) +
                    ',' + std::to_string(batch.b);
  for (uint32_t v : align) key += ',' + std::to_string(v);
  const bool timed = ctx.chooser != nullptr;  // every candidate in the plan (gemm_plan)
  key += math_key(ctx, t) + (timed ? "|timed" : "");
  return cached<GemmPlan>(key, [&] {
    return make_gemm_plan(ctx.node, t, s.m, s.n, s.k, false, false, align, tf32_math(ctx, t), narrowed(ctx),
                          CUBLASLT_EPILOGUE_DEFAULT, timed, key, batch);
  });
}

// The plan a call runs: the one strided call where the shape allows it and the heuristic
// has an algorithm for it (a stride 0 included), else one call per batch. `strided`
// says which. Pointers null at plan time.
std::shared_ptr<const GemmPlan> matmul_call(const KernelContext& ctx, const MatmulShape& s, const void* a,
                                            const void* b, const void* y, bool& strided) {
  strided = one_call(s);
  if (strided) {
    auto p = matmul_plan(ctx, s, true, a, b, y);
    if (!p->use_reference || s.batches == 1) return p;
    strided = false;
  }
  return matmul_plan(ctx, s, false, a, b, y);
}

size_t matmul_workspace(const KernelContext& ctx) {
  if (ctx.out(0).numel() == 0) return 0;
  const MatmulShape s = matmul_shape(ctx.in(0).dims(), ctx.in(1).dims());
  if (s.k == 0) return 0;
  bool strided = false;
  const auto plan = matmul_call(ctx, s, nullptr, nullptr, nullptr, strided);
  return math_bytes(ctx) + (plan->use_reference ? 0 : plan->workspace);
}

void matmul(KernelContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  Tensor& y = ctx.out(0);
  if (y.numel() == 0) return;
  if (y.dtype() != DataType::Float32 && y.dtype() != DataType::Float64)
    return run_reference(ctx, "the device MatMul takes float32 and float64");
  const MatmulShape s = matmul_shape(a.dims(), b.dims());
  Context& cx = context();
  if (s.k == 0) {  // sums over nothing
    check(cudaMemsetAsync(y.raw(), 0, y.nbytes(), cx.stream), what(ctx.node, "cudaMemsetAsync"));
    return;
  }
  // The workspace: the 16-bit copies (256-byte offsets of cudaMalloc's buffer, so planned
  // as 16-byte aligned: null pointers), then cuBLASLt's.
  const size_t copies = math_bytes(ctx);
  bool strided = false;
  const auto plan = matmul_call(ctx, s, copies ? nullptr : a.raw(), copies ? nullptr : b.raw(), y.raw(), strided);
  if (plan->use_reference) return run_reference(ctx, "cuBLASLt's heuristic has no algorithm for this problem");
  const Operands in = operands(ctx, plan->workspace);
  const size_t in_bytes = in.narrow ? 2 : dtype_size(y.dtype()), y_bytes = dtype_size(y.dtype());
  dispatch_float(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T one = 1, zero = 0;
    auto call = [&](const cublasLtMatmulAlgo_t& algo, int64_t oa, int64_t ob, int64_t oy) {
      return cublasLtMatmul(cx.lt, plan->op, &one, static_cast<const std::byte*>(in.b) + ob * in_bytes, plan->a,
                            static_cast<const std::byte*>(in.a) + oa * in_bytes, plan->b, &zero,
                            static_cast<std::byte*>(y.raw()) + oy * y_bytes, plan->d,
                            static_cast<std::byte*>(y.raw()) + oy * y_bytes, plan->d, &algo, in.ws, plan->workspace,
                            cx.stream);
    };
    // Every batch with one algorithm (one call when strided: the plan holds the batch);
    // the first status that is not success.
    auto all = [&](const cublasLtMatmulAlgo_t& algo) {
      if (strided) return call(algo, 0, 0, 0);
      for (int64_t p = 0; p < s.batches; ++p) {
        const std::pair<int64_t, int64_t> o = s.operands_of(p);
        const cublasStatus_t st = call(algo, o.first * s.m * s.k, o.second * s.k * s.n, p * s.m * s.n);
        if (st != CUBLAS_STATUS_SUCCESS) return st;
      }
      return CUBLAS_STATUS_SUCCESS;
    };
    const cublasLtMatmulAlgo_t& algo =
        choose_algo(ctx, *plan, "MatMul", /*repeatable=*/true, [&](size_t i) { return all(plan->algos[i].algo); });
    check(all(algo), what(ctx.node, "cublasLtMatmul"));
  });
}

}  // namespace

void register_gemm_cuda(Registry& r) {
  add_if_schema(r, "cuda", "", "MatMul", matmul);
  if (r.kernels.find("cuda", "", "MatMul")) r.kernels.set_workspace("cuda", "", "MatMul", matmul_workspace);
  add_if_schema(r, "cuda", "", "Gemm", gemm);
  add_if_schema(r, "cuda", kTrainrtDomain, "FusedGemm", gemm);
  if (r.kernels.find("cuda", "", "Gemm")) r.kernels.set_workspace("cuda", "", "Gemm", gemm_workspace);
  if (r.kernels.find("cuda", kTrainrtDomain, "FusedGemm"))
    r.kernels.set_workspace("cuda", kTrainrtDomain, "FusedGemm", gemm_workspace);
}

}  // namespace trainrt::cuda

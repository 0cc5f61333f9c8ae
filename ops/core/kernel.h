// Kernels: the per-backend implementations of an op, looked up by op type.
//
//   KernelRegistry& k = ...;
//   k.add("reference", "", "Relu", relu_reference);
//   const Kernel* f = k.find("reference", "", "Relu");
//   KernelContext ctx{node, {&x}, {&y}};  (*f)(ctx);
//
// Why: a kernel receives its inputs and preallocated outputs, already shaped by
// the op's shape rule (the executor specialises the graph to the batch's shapes
// first), so kernels never allocate graph values and never re-check shapes that
// the rule checked. Layout is dense row-major (N,C,H,W) at this interface, unless a
// kernel declared with set_layouts() that it also takes Blocked16c arguments
// (graph/tensor.h); the runtime then keeps such values blocked between the kernels
// that take them (runtime/layout.h), so consecutive oneDNN nodes skip the reorders.
// An op declares with set_in_place() which outputs may share an input's storage
// (runtime/plan.cpp). Both are declared where the kernel registers (ops/core/kernel_facts.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "graph/ir.h"
#include "ops/core/engine_choice.h"

namespace trainrt {

// Arithmetic of the convolutions (Conv, FusedConv, ConvGrad, ConvTranspose and its
// gradient) and matrix products (Gemm,
// FusedGemm, MatMul). bf16: each reads bfloat16 copies of its fp32 inputs (round to
// nearest even) and accumulates in fp32 into fp32 outputs, as mixed-precision training
// does (PyTorch's autocast runs exactly these ops in 16 bits). fp16: the same with IEEE
// half copies (overflow to Inf, subnormals kept); on the cpu backend fp16, and bf16
// products, are emulated (rounded fp32 copies, fp32 kernels), so that a GPU run's
// numerics and dynamic loss scaling can be checked on a CPU. The activations and their
// gradients that autocast keeps in 16 bits are rounded after the kernel that writes
// them, on every backend (math_rounded_outputs, ops/core/rounded_outputs.h; FusedConv
// with a residual rounds act(conv + B) in its kernels, before adding Z). Values stay
// fp32 in memory, parameters included (the fp32 master weights), except on a backend
// whose kernels declare 16-bit slots (cuda): a value its writer or every reader rounds
// is stored rounded (runtime/narrow.h), with the same bits. Other kernels ignore it, but for
// DropoutReluGrad's sign test (math_rounded_inputs). The reference kernels round the same
// way, so they stay the oracle.
enum class MathPrecision : uint8_t { fp32, bf16, fp16 };
const char* math_precision_name(MathPrecision m);

// `v` as a kernel in MathPrecision `m` reads it: rounded to the nearest bfloat16 or IEEE
// half (ties to even; half overflows to Inf), still a float; fp32 returns `v`. The one
// rounding of the reference, cpu and cuda kernels (graph/float16.h, host and device).
TRAINRT_HOST_DEVICE inline float round_to_math(float v, MathPrecision m) {
  if (m == MathPrecision::bf16) return bfloat16_to_float(float_to_bfloat16(v));
  if (m == MathPrecision::fp16) return half_to_float(float_to_half(v));
  return v;
}
// The 16-bit type float32 values are stored in under `m` on a backend that stores them
// so (runtime/narrow.h): bfloat16 under bf16, IEEE half under fp16.
inline DataType math_storage_type(MathPrecision m) {
  return m == MathPrecision::bf16 ? DataType::BFloat16 : DataType::Float16;
}
// Whether `t` is a float32 value stored in 16 bits under `m` (Tensor::narrowed).
inline bool stored_16bit(const Tensor& t, MathPrecision m) {
  return t.narrowed() && m != MathPrecision::fp32 && t.dtype() == math_storage_type(m);
}
// The inputs of node `n` its kernels read rounded by round_to_math under bf16/fp16, when
// `wanted[i]` says whether output i is computed: Conv, FusedConv and ConvTranspose x and
// w (never the bias or the residual); ConvGrad and ConvTransposeGrad dY, X when dW is
// wanted and W when dX is (X and W are read for nothing else); Gemm, FusedGemm and MatMul A and B (never Gemm's C).
// FusedGemm's sums (sum_of) read their operand unrounded, as the SumToShape they replace: the rounding is the
// product's. DropoutReluGrad's Z, whose sign it tests (a positive Z below half the smallest 16-bit subnormal counts as
// 0, as a Z stored in 16 bits does). No input of any other op. The cuda kernels round exactly these (ops/conv_cuda.cu,
// ops/gemm_cuda.cu), and tests/ops/test_math_precision.cpp checks the list against the reference's results.
std::vector<size_t> math_rounded_inputs(const Node& n, const std::vector<bool>& wanted);

// The algorithm of fp32 3x3 stride-1 convolutions on the cpu backend. winograd:
// oneDNN's Winograd F(4x4, 3x3) (forward, backward data and weights) where it has an
// implementation for the shape, direct elsewhere; it does ~4x fewer multiplications
// and rounds differently (tests/ops/test_conv_algorithm.cpp measures how much). The
// reference backend always runs the direct sum; bf16 arithmetic is always direct.
enum class ConvAlgorithm : uint8_t { direct, winograd };
const char* conv_algorithm_name(ConvAlgorithm a);

// KernelContext::seed of the node at graph index `node` in a run with seed `run_seed`:
// any order of the nodes gives the same masks. Device kernels derive it from the run's
// seed in device memory (KernelContext::run_seed).
TRAINRT_HOST_DEVICE constexpr uint64_t node_seed(uint64_t run_seed, uint64_t node) {
  return run_seed * 1000003u + node;
}

// The run seed under which node 0 gets the seed node `node` gets under `run_seed`:
// node_seed(seed_placing(r, k), 0) == node_seed(r, k), so a graph of that one node redraws
// its masks (selftest's replay). 1000003 is odd, so it has an inverse modulo 2^64 (Newton's
// iteration x <- x (2 - a x) doubles the correct low bits from x = a, right to 3 bits).
constexpr uint64_t seed_placing(uint64_t run_seed, uint64_t node) {
  uint64_t inverse = 1000003u;
  for (int i = 0; i < 5; ++i) inverse *= 2 - 1000003u * inverse;
  return run_seed + node * inverse;
}

// How the cuda kernels may compute fp32 convolutions (cuDNN) and Gemm (cuBLASLt). tf32:
// on Ampere and later GPUs, tensor cores with the inputs rounded to TF32 (10-bit
// mantissa) and fp32 accumulation, as PyTorch lets cuDNN convolutions do by default;
// strict: FMA arithmetic in full fp32, the reference's. Host kernels ignore it.
// KernelContext::fp32 starts as the process's default (strict, unless set: the CLI's
// --fp32-math sets it once, before any executor is built), so it reaches every kernel
// without each layer between the CLI and the kernels carrying it.
enum class Fp32Math : uint8_t { strict, tf32 };
const char* fp32_math_name(Fp32Math m);
Fp32Math default_fp32_math();
void set_default_fp32_math(Fp32Math m);

// Whether the cuda kernels keep to deterministic library engines and algorithms (a run
// repeats bit for bit) or may also take the non-deterministic ones, the split-K and
// atomics-based weight-gradient engines among them, which PyTorch's users get with
// torch.backends.cudnn.benchmark = True and deterministic algorithms off (the CLI's
// default for train, bench and evaluate; selftest keeps deterministic). As with
// Fp32Math, KernelContext::deterministic starts as the process's default (true unless
// set: the CLI's --deterministic sets it once, before any executor is built). Host
// kernels ignore it: they are deterministic for a given thread count.
bool default_deterministic();
void set_default_deterministic(bool on);

struct KernelContext {
  const Node& node;
  std::vector<const Tensor*> inputs;  // nullptr where an optional input is omitted
  std::vector<Tensor*> outputs;       // nullptr where an optional output is not requested
  bool training = false;              // Dropout / BatchNormalization training semantics
  uint64_t seed = 0;                  // per node and step: Dropout masks derive from it
  MathPrecision math = MathPrecision::fp32;
  ConvAlgorithm conv = ConvAlgorithm::direct;
  Fp32Math fp32 = default_fp32_math();
  bool deterministic = default_deterministic();  // library engines: deterministic ones only
  // Set by the executor on an asynchronous backend for kernels that write state, where
  // the backend's kernel declared it (KernelRegistry::set_skips_when_flagged): 8 bytes of
  // the backend's memory that the NaN/Inf checks of the step lowered from ~0 when a
  // checked value was not finite. Such a kernel then writes nothing, so the state stays
  // unchanged without the host waiting for the checks before the first state write.
  const uint64_t* skip_if_flagged = nullptr;
  // On an asynchronous backend: the run's seed in the backend's memory (8 bytes), written
  // in stream order before the run's kernels, and this node's graph index. A device kernel
  // that draws random numbers reads node_seed(*run_seed, node_index) when it runs instead
  // of `seed` (the same value), so a captured step replayed in a later run draws that
  // run's masks (Backend::replay).
  const uint64_t* run_seed = nullptr;
  uint64_t node_index = 0;
  // Times a library's candidate engines once per problem and device and remembers the
  // fastest (ops/core/engine_choice.h; the runtime keeps it in its timing cache). Null: no
  // timing, a kernel runs the first engine it accepts.
  EngineChooser* chooser = nullptr;

  bool has_input(size_t i) const { return i < inputs.size() && inputs[i]; }
  bool has_output(size_t i) const { return i < outputs.size() && outputs[i]; }
  const Tensor& in(size_t i) const { return *inputs.at(i); }
  Tensor& out(size_t i) const { return *outputs.at(i); }
};

// `ctx` for node `n` instead of its own: every other field copied (a kernel that runs
// its node as another, e.g. a 1-D convolution as a 2-D one).
inline KernelContext ctx_with_node(const KernelContext& ctx, const Node& n) {
  KernelContext c{n, ctx.inputs, ctx.outputs, ctx.training, ctx.seed, ctx.math, ctx.conv, ctx.fp32, ctx.deterministic};
  c.skip_if_flagged = ctx.skip_if_flagged;
  c.run_seed = ctx.run_seed;
  c.node_index = ctx.node_index;
  c.chooser = ctx.chooser;
  return c;
}

using Kernel = std::function<void(KernelContext&)>;

// Runs `k`, a kernel that reads row-major data (a reference kernel), on `ctx`: directly
// where every argument is Plain and none is narrowed, else on Plain float32 copies of the
// arguments in another layout (graph/tensor.h) or stored in 16 bits (Tensor::narrowed),
// copying those outputs back into their layout and width (rounded to nearest even). All
// other context fields pass through.
void run_on_plain_copies(const Kernel& k, KernelContext& ctx);

// Runs host kernel `k` on host copies of `ctx`'s tensors that live in device memory
// (`on_device`), for a backend whose memory the host cannot see: copies them in with
// `copy` (to, from, bytes), calls `sync`, runs `k` and copies its outputs back (they are
// read at the call: pageable memory). An output sharing an input's buffer (an update in
// place) shares its host copy; outputs are copied in too, for kernels that accumulate.
// With ctx.skip_if_flagged set and the flag lowered, nothing runs.
void run_on_host_copies(const Kernel& k, KernelContext& ctx,
                        const std::function<void(void*, const void*, size_t)>& copy, const std::function<void()>& sync,
                        const std::function<bool(const void*)>& on_device);

// What a kernel accepts for one argument: only Plain; Any (Plain or Blocked16c, each
// argument on its own); Shared (either, but every Shared argument of the node in the
// same layout: elementwise loops, oneDNN primitives with one data descriptor).
// Converted: Any, and the kernel wants the blocked layout even where the value is one
// the layout chooser keeps Plain: an input the step does not write (a parameter), an
// output that Plain readers take (a parameter's gradient). The runtime then puts a
// conversion between them (runtime/layout.h add_layout_copies): an Identity node writes
// the parameter's blocked copy once per step for every such reader, or converts the
// kernel's blocked output into the Plain value the other readers see. The cuda
// convolutions' weights and weight gradients: KRSC filters (ChannelsLast of K,C,R,S).
enum class SlotLayout : uint8_t { Plain, Any, Shared, Converted };
struct NodeLayouts {
  std::vector<SlotLayout> inputs, outputs;  // missing entries are Plain
};
// Decides per node (shapes are known: the graph is specialised).
using LayoutRule = std::function<NodeLayouts(const Graph& g, const Node& n)>;

// Which float32 arguments a kernel takes stored in 16 bits (Tensor::narrowed: the
// KernelContext::math type, Float16 or BFloat16): an input it reads from the 16-bit
// elements, an output it writes rounded to nearest even. runtime/narrow.h stores a value
// so only where its writer and every reader declared it and its writer rounds it
// (math_rounded_outputs) or every reader rounds it anyway (math_rounded_inputs), so the
// results are the same bits.
struct NodeSlots {
  std::vector<bool> inputs, outputs;  // missing entries: false
  bool input(size_t i) const { return i < inputs.size() && inputs[i]; }
  bool output(size_t i) const { return i < outputs.size() && outputs[i]; }
};
using NarrowRule = std::function<NodeSlots(const Graph& g, const Node& n)>;

// An output slot the op's kernels may write over an input slot's storage (the planner
// checks the rest: same dtype and bytes, the input read by no later node).
struct InPlacePair {
  size_t out, in;
};
// Decides per node from the node (its argument counts, for variadic ops), the dims of
// input j (nullptr: omitted or not planned) and of output 0 (nullptr: not known where
// the planner asks).
using InPlaceDims = std::function<const std::vector<int64_t>*(size_t j)>;
using InPlaceRule =
    std::function<std::vector<InPlacePair>(const Node& n, const InPlaceDims& in, const std::vector<int64_t>* out0)>;
// Bytes of scratch memory a call needs (cuda: cuDNN's and cuBLASLt's workspace, padded
// copies), decided from the node, its arguments' dtypes and dims and the context's
// settings; the tensors' memory is not there yet (the planner asks before allocating).
using WorkspaceRule = std::function<size_t(const KernelContext& ctx)>;

class KernelRegistry {
 public:
  void add(const std::string& backend, const std::string& domain, const std::string& op_type, Kernel k);
  const Kernel* find(const std::string& backend, const std::string& domain, const std::string& op_type) const;
  std::vector<std::string> ops_of(const std::string& backend) const;  // "domain::op" or "op"
  // The source file whose registration function adds the kernels that follow (set by
  // register_all before each family's function), and the file each kernel came from
  // ("" where none was set): `trainrt ops --kernels` groups a backend's kernels by it.
  void set_source(std::string file) { source_ = std::move(file); }
  std::string source(const std::string& backend, const std::string& domain, const std::string& op_type) const;
  // Declares which arguments the backend's kernel for the op takes in Blocked16c.
  void set_layouts(const std::string& backend, const std::string& domain, const std::string& op_type, LayoutRule r);
  // The declared layouts of `n`'s kernel on `backend`; all Plain when none was declared.
  NodeLayouts layouts(const std::string& backend, const Graph& g, const Node& n) const;
  // Declares which float32 arguments the backend's kernel for the op takes in 16 bits.
  void set_narrow(const std::string& backend, const std::string& domain, const std::string& op_type, NarrowRule r);
  // The declared 16-bit slots of `n`'s kernel on `backend`; none when none was declared.
  NodeSlots narrow(const std::string& backend, const Graph& g, const Node& n) const;
  // Declares which outputs the op's kernels may write over an input: one rule for every
  // backend (plans are backend-independent), so each backend's kernel must allow it.
  void set_in_place(const std::string& domain, const std::string& op_type, InPlaceRule r);
  // The declared pairs of `n`'s op; none when none was declared.
  std::vector<InPlacePair> in_place(const Node& n, const InPlaceDims& in, const std::vector<int64_t>* out0) const;
  // Declares that the backend's kernel for the op honours KernelContext::skip_if_flagged.
  void set_skips_when_flagged(const std::string& backend, const std::string& domain, const std::string& op_type);
  bool skips_when_flagged(const std::string& backend, const std::string& domain, const std::string& op_type) const;
  // Declares the scratch memory the backend's kernel for the op needs per call; 0 where
  // none was declared.
  void set_workspace(const std::string& backend, const std::string& domain, const std::string& op_type,
                     WorkspaceRule r);
  size_t workspace(const std::string& backend, const KernelContext& ctx) const;

 private:
  std::map<std::tuple<std::string, std::string, std::string>, Kernel> kernels_;
  std::map<std::tuple<std::string, std::string, std::string>, LayoutRule> layouts_;
  std::map<std::tuple<std::string, std::string, std::string>, NarrowRule> narrow_;
  std::map<std::pair<std::string, std::string>, InPlaceRule> in_place_;
  std::set<std::tuple<std::string, std::string, std::string>> skips_;
  std::map<std::tuple<std::string, std::string, std::string>, WorkspaceRule> workspace_;
  std::map<std::tuple<std::string, std::string, std::string>, std::string> sources_;
  std::string source_;
};

}  // namespace trainrt

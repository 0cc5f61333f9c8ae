// Fused ops written by the graph passes (passes/passes.h), domain ai.trainrt.
//
//   FusedConv(X: N,C,H,W, W: M,C/group,kH,kW, [B: M], [Z: N,M,Ho,Wo]) -> Y: N,M,Ho,Wo
//     attributes: Conv's, plus activation = "" (none) | "Relu"
//     Y = act(Conv(X, W, B)) + Z                       (Z, a residual, is optional)
//     Under bf16/fp16 with Z: act(round(Conv(X, W, B))) + Z, the sum in fp32 (the unfused
//     Conv's output is rounded, ops/core/rounded_outputs.h, the Add's is not).
//   FusedGemm(A, B, [C]) -> (Y: M,N, [S])
//     attributes: Gemm's, plus activation = "" (none) | "Relu", sum_of = "" | "A" | "B"
//     Y = act(Gemm(A, B, C))                           (a Linear layer and its ReLU)
//     S = the sums of op(A) over K (sum_of A: S[m], M of them) or of op(B) over K
//         (sum_of B: S[n], N of them), 1-D: a Linear layer's bias gradient computed with
//         its weight gradient (dW = dY^T X, db = the column sums of dY), as cuBLASLt's
//         BGRADA/BGRADB epilogues do. Only with sum_of set; not with an activation.
//   BatchNormalizationRelu(X, scale, B, input_mean, input_var) -> (Y, [running_mean, running_var, ...])
//     attributes: BatchNormalization's;  Y = Relu(BatchNormalization(...)), the other
//     outputs and the training rule exactly BatchNormalization's (ops/norm.cpp).
//   BatchNormalizationReluDropout(X, scale, B, input_mean, input_var, [ratio], [training_mode])
//       -> (Z, [running_mean, running_var, ...])
//     attributes: BatchNormalization's, plus dropout_node (int) and Dropout's optional seed;
//     Z = Dropout(Relu(BatchNormalization(...)), ratio, training_mode) without its mask,
//     the other outputs BatchNormalizationRelu's. The mask is the one the Dropout node
//     at graph index dropout_node draws (passes/fuse_dropout.cpp): its seed is
//     node_seed(run seed, dropout_node) = ctx.seed - ctx.node_index + dropout_node
//     (ops/core/kernel.h's rule is linear in the index), whatever index the fused node has.
//
// Why no gradient rules: fusion runs after autodiff (passes/passes.h), and every
// backward node reads values the fused node still writes under the same names.
// The shape rules and reference kernels are Conv's, Gemm's and BatchNormalization's, taken
// from the registry when these ops register (so they must register after them),
// followed by the activation and the residual add. cpu kernels: ops/fused_cpu.cpp.
#include "ops/fused.h"

#include <string>

#include "ops/core/common.h"
#include "ops/core/dropout_mask.h"
#include "ops/core/register_all.h"
#include "ops/core/rounded_outputs.h"
#include "ops/misc_loops.h"

namespace trainrt {

namespace {

// Index of `n` in its graph (for error messages of a rule run on a local context).
size_t node_index(const InferContext& ctx) {
  const std::vector<Node>& nodes = ctx.graph().nodes;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (&nodes[i] == &ctx.node()) return i;
  return 0;
}

void check_activation(const InferContext& ctx) {
  const std::string act = ctx.node().attr_string("activation", "");
  if (!act.empty() && act != "Relu")
    throw_unsupported(ctx.where(), "attribute 'activation' must be \"\" or \"Relu\", got \"" + act + "\"");
}

void fused_conv_infer(InferContext& ctx, const ShapeRule& conv_rule) {
  check_activation(ctx);
  std::vector<ValueInfo> out(1);
  InferContext conv_ctx(ctx.graph(), ctx.node(), node_index(ctx), out);
  conv_rule(conv_ctx);
  if (ctx.has_input(3)) {
    require_same_dtype(ctx, 0, 3);
    const ValueInfo& z = ctx.input(3);
    bool same = z.shape && out[0].shape && z.shape->size() == out[0].shape->size();
    for (size_t i = 0; same && i < z.shape->size(); ++i) {
      const Dim &a = (*z.shape)[i], &b = (*out[0].shape)[i];
      same = !(a.known() && b.known() && a.value != b.value);
    }
    if (!same)
      ctx.fail("input 3 '" + ctx.node().inputs[3] + "' (Z) has shape " + shape_to_string(z.shape.value_or(Shape{})) +
               " but the convolution's output is " + shape_to_string(out[0].shape.value_or(Shape{})));
  }
  ctx.set_output(0, out[0]);
}

// y = act(y) + z elementwise (z may be null).
template <typename T>
void finish(Tensor& y, const Tensor* z, bool relu) {
  T* py = y.data<T>();
  const T* pz = z ? z->data<T>() : nullptr;
  for (int64_t i = 0; i < y.numel(); ++i) {
    T v = py[i];
    if (relu && !(v > T(0))) v = T(0);
    py[i] = pz ? v + pz[i] : v;
  }
}

void fused_conv_reference(KernelContext& ctx, const Kernel& conv) {
  KernelContext c{ctx.node,         {ctx.inputs.begin(), ctx.inputs.begin() + std::min<size_t>(3, ctx.inputs.size())},
                  {ctx.outputs[0]}, ctx.training,
                  ctx.seed,         ctx.math,
                  ctx.conv};
  conv(c);
  const bool relu = ctx.node.attr_string("activation", "") == "Relu";
  const Tensor* z = ctx.has_input(3) ? &ctx.in(3) : nullptr;
  // bf16/fp16 with a residual: conv + B rounded before Z is added, as the unfused graph's
  // Conv output is (math_rounded_outputs; the ReLU commutes with the rounding). Without Z
  // the executor rounds Y after the kernel, as it does Conv's.
  if (z && rounds_before_residual(ctx.math, ctx.out(0).dtype())) {
    float* p = ctx.out(0).data<float>();
    round_floats(p, p, ctx.out(0).numel(), ctx.math, true);
  }
  dispatch_float(ctx.out(0).dtype(), [&](auto tag) { finish<decltype(tag)>(ctx.out(0), z, relu); });
}

void fused_gemm_infer(InferContext& ctx, const ShapeRule& gemm_rule) {
  check_activation(ctx);
  const std::string sum_of = ctx.node().attr_string("sum_of", "");
  if (!sum_of.empty() && sum_of != "A" && sum_of != "B")
    throw_unsupported(ctx.where(), "attribute 'sum_of' must be \"\", \"A\" or \"B\", got \"" + sum_of + "\"");
  const bool wants_sums = ctx.node().has_output(1);
  if (wants_sums != !sum_of.empty())
    ctx.fail(wants_sums ? "output 1 (the sums) needs attribute 'sum_of'" : "attribute 'sum_of' needs output 1");
  if (wants_sums && !ctx.node().attr_string("activation", "").empty())
    ctx.fail("the sums (sum_of) and an activation cannot be combined");
  std::vector<ValueInfo> out(1);
  InferContext gemm_ctx(ctx.graph(), ctx.node(), node_index(ctx), out);
  gemm_rule(gemm_ctx);
  ctx.set_output(0, out[0]);
  if (wants_sums) {
    ValueInfo s{out[0].dtype, std::nullopt};
    if (out[0].shape) s.shape = Shape{(*out[0].shape)[sum_of == "A" ? 0 : 1]};
    ctx.set_output(1, s);
  }
}

// s[r] = the sum over k of x[r * row + k * step], k ascending, in T.
template <typename T>
void sums(const T* x, T* s, int64_t rows, int64_t k, int64_t row, int64_t step) {
  for (int64_t r = 0; r < rows; ++r) s[r] = T(0);
  for (int64_t j = 0; j < k; ++j)  // the outer loop over k: SumToShape's order for a dY of [K, rows]
    for (int64_t r = 0; r < rows; ++r) s[r] += x[r * row + j * step];
}

void fused_gemm_reference(KernelContext& ctx, const Kernel& gemm) {
  KernelContext g = ctx;
  g.outputs.resize(1);
  gemm(g);
  const bool relu = ctx.node.attr_string("activation", "") == "Relu";
  dispatch_float(ctx.out(0).dtype(), [&](auto tag) { finish<decltype(tag)>(ctx.out(0), nullptr, relu); });
  if (ctx.has_output(1)) fused_gemm_sums(ctx);
}

void bn_relu_reference(KernelContext& ctx, const Kernel& bn) {
  bn(ctx);
  dispatch_float(ctx.out(0).dtype(), [&](auto tag) { finish<decltype(tag)>(ctx.out(0), nullptr, true); });
}

// BatchNormalizationRelu's reference on inputs 0..4, Y rounded as the executor rounds
// that node's (bf16/fp16), then Dropout's reference loop in place: the unfused pair's bits.
void bn_relu_dropout_reference(KernelContext& ctx, const Kernel& bn) {
  run_as_bn_relu(ctx, [&](KernelContext& c) { bn_relu_reference(c, bn); });
  round_bn_relu_output(ctx, /*parallel=*/false);
  apply_dropout_in_place(ctx, misc_loops::dropout_kernel<false>);
}

}  // namespace

void run_as_bn_relu(const KernelContext& ctx, const Kernel& bn_relu) {
  Node node = ctx.node;  // a kernel that falls back to the reference finds BatchNormalizationRelu's
  node.op_type = "BatchNormalizationRelu";
  node.inputs.resize(std::min<size_t>(5, node.inputs.size()));
  node.attrs.erase("dropout_node");
  node.attrs.erase("seed");
  KernelContext c = ctx_with_node(ctx, node);
  c.inputs.resize(std::min<size_t>(5, c.inputs.size()));
  bn_relu(c);
}

uint64_t dropout_node_seed(const KernelContext& ctx) {
  return ctx.seed - ctx.node_index + static_cast<uint64_t>(ctx.node.attr_int("dropout_node", 0));
}

void round_bn_relu_output(const KernelContext& ctx, bool parallel) {
  Tensor& z = ctx.out(0);
  if (ctx.math == MathPrecision::fp32 || z.dtype() != DataType::Float32) return;
  float* p = z.data<float>();
  round_floats(p, p, static_cast<int64_t>(z.nbytes() / sizeof(float)), ctx.math, parallel);  // Backend::round_outputs
}

bool dropout_trains(const KernelContext& ctx) {
  return ctx.training || (ctx.has_input(6) && ctx.in(6).get_as_double(0) != 0.0);
}

uint64_t dropout_key(const KernelContext& ctx) {
  const Node& n = ctx.node;
  return dropout_mask::key_of(
      dropout_node_seed(ctx),
      n.has_attr("seed") ? dropout_mask::splitmix64(static_cast<uint64_t>(n.attr_int("seed", 0))) : 0);
}

double dropout_ratio(const KernelContext& ctx) {
  const double ratio = ctx.has_input(5) ? ctx.in(5).get_as_double(0) : 0.5;
  if (!(ratio >= 0.0 && ratio < 1.0)) throw_bad_input("", "ratio must be in [0, 1), got " + std::to_string(ratio));
  return ratio;
}

void apply_dropout_in_place(KernelContext& ctx, const Kernel& dropout) {
  if (!dropout_trains(ctx)) return;  // Dropout's identity: Z is Relu(BN(X)) already
  run_dropout_in_place(ctx, dropout);
}

void run_dropout_in_place(KernelContext& ctx, const Kernel& dropout) {
  Tensor& z = ctx.out(0);
  KernelContext d = ctx;  // the node's `seed` attribute, if any, is the Dropout's
  d.inputs = {&z, ctx.has_input(5) ? &ctx.in(5) : nullptr, ctx.has_input(6) ? &ctx.in(6) : nullptr};
  d.outputs = {&z};
  d.seed = dropout_node_seed(ctx);
  d.node_index = static_cast<uint64_t>(ctx.node.attr_int("dropout_node", 0));
  dropout(d);
}

void fused_gemm_sums(KernelContext& ctx) {
  const Node& n = ctx.node;
  const bool of_a = n.attr_string("sum_of", "") == "A";
  const Tensor& x = ctx.in(of_a ? 0 : 1);
  Tensor& s = ctx.out(1);
  // op(A) is M x K: A stored M,K (row K, step 1) or, with transA, K,M (row 1, step M).
  // op(B) is K x N, summed per column n: B stored K,N (row 1, step N) or, with transB, N,K.
  const bool trans = n.attr_int(of_a ? "transA" : "transB", 0) != 0;
  const int64_t d0 = x.dims()[0], d1 = x.dims()[1];
  const bool rows_first = of_a != trans;  // the summed rows are x's first dim
  const int64_t rows = rows_first ? d0 : d1, k = rows_first ? d1 : d0;
  if (s.numel() != rows)
    throw_internal("FusedGemm '" + n.name + "'",
                   "output 1 has " + std::to_string(s.numel()) + " values, not " + std::to_string(rows));
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    sums<T>(x.data<T>(), s.data<T>(), rows, k, rows_first ? d1 : 1, rows_first ? 1 : d1);
  });
}

void register_fused(Registry& r) {
  const OpSchema* conv = r.schemas.find("", "Conv");
  const OpSchema* bn = r.schemas.find("", "BatchNormalization");
  const Kernel* conv_ref = r.kernels.find("reference", "", "Conv");
  const Kernel* bn_ref = r.kernels.find("reference", "", "BatchNormalization");
  const OpSchema* gemm = r.schemas.find("", "Gemm");
  const Kernel* gemm_ref = r.kernels.find("reference", "", "Gemm");
  if (!conv || !bn || !conv_ref || !bn_ref || !gemm || !gemm_ref)
    throw_internal("register_fused", "Conv, Gemm and BatchNormalization must be registered first");

  OpSchema fc;
  fc.domain = kTrainrtDomain;
  fc.op_type = "FusedConv";
  fc.min_inputs = 2;
  fc.max_inputs = 4;
  fc.infer = [rule = conv->infer](InferContext& ctx) { fused_conv_infer(ctx, rule); };
  fc.flops = conv->flops;
  fc.attributes = conv->attributes;
  fc.attributes.push_back("activation");
  r.schemas.add(std::move(fc));
  r.kernels.add("reference", kTrainrtDomain, "FusedConv",
                [k = *conv_ref](KernelContext& ctx) { fused_conv_reference(ctx, k); });

  OpSchema fg;
  fg.domain = kTrainrtDomain;
  fg.op_type = "FusedGemm";
  fg.min_inputs = 2;
  fg.max_inputs = 3;
  fg.min_outputs = 1;
  fg.max_outputs = 2;
  fg.infer = [rule = gemm->infer](InferContext& ctx) { fused_gemm_infer(ctx, rule); };
  fg.flops = gemm->flops;
  fg.attributes = gemm->attributes;
  fg.attributes.push_back("activation");
  fg.attributes.push_back("sum_of");
  r.schemas.add(std::move(fg));
  r.kernels.add("reference", kTrainrtDomain, "FusedGemm",
                [k = *gemm_ref](KernelContext& ctx) { fused_gemm_reference(ctx, k); });

  OpSchema br = *bn;
  br.domain = kTrainrtDomain;
  br.op_type = "BatchNormalizationRelu";
  br.since_version = 1;
  r.schemas.add(std::move(br));
  r.kernels.add("reference", kTrainrtDomain, "BatchNormalizationRelu",
                [k = *bn_ref](KernelContext& ctx) { bn_relu_reference(ctx, k); });

  OpSchema brd = *bn;
  brd.domain = kTrainrtDomain;
  brd.op_type = "BatchNormalizationReluDropout";
  brd.since_version = 1;
  brd.max_inputs = 7;
  brd.attributes.push_back("dropout_node");
  brd.attributes.push_back("seed");
  r.schemas.add(std::move(brd));
  r.kernels.add("reference", kTrainrtDomain, "BatchNormalizationReluDropout",
                [k = *bn_ref](KernelContext& ctx) { bn_relu_dropout_reference(ctx, k); });
}

}  // namespace trainrt

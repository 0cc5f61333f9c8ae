// Every registered op has what training needs of it (STYLE.md point 3): a schema,
// a reference kernel (the oracle), a kernel on the cpu backend or a deliberate
// fallback to the reference kernel, and a gradient rule or a deliberate reason to
// have none. The exceptions are listed below, each with its reason. Adding an op to
// one table (schemas, kernels, gradient rules) but not the others fails here, and so
// does an exception that no longer is one (a stale line in a list).
#include <doctest/doctest.h>

#include <map>
#include <set>
#include <string>

#include "autodiff/gradient.h"
#include "graph/expand_recurrent.h"
#include "ops/core/register_all.h"
#include "ops/unary_ops.h"
#include "runtime/backend.h"

using namespace trainrt;

namespace {

// Backward ops: written by gradient rules (or fused from their output), so they
// run only in a training graph's backward part; nothing differentiates them
// (trainrt has no second-order gradients). Those of the unary table (ops/unary_ops.h)
// are added from the table by backward_ops().
const std::map<std::string, std::string> kBackwardOpsByHand{
    {"ai.trainrt::SumToShape", "the broadcasting binary ops' rules"},
    {"ai.trainrt::ClipGrad", "Clip's rule"},
    {"ai.trainrt::PowGrad", "Pow's rule"},
    {"ai.trainrt::ConvGrad", "Conv's rule"},
    {"ai.trainrt::ConvTransposeGrad", "ConvTranspose's rule"},
    {"ai.trainrt::ResizeGrad", "Resize's and Upsample's rules"},
    {"ai.trainrt::BatchNormalizationGrad", "BatchNormalization's rule"},
    {"ai.trainrt::LayerNormalizationGrad", "LayerNormalization's rule"},
    {"ai.trainrt::GroupNormalizationGrad", "InstanceNormalization's and GroupNormalization's rule"},
    {"ai.trainrt::MaxPoolGrad", "MaxPool's rule"},
    {"ai.trainrt::AveragePoolGrad", "AveragePool's rule"},
    {"ai.trainrt::GlobalAveragePoolGrad", "GlobalAveragePool's rule"},
    {"ai.trainrt::GlobalMaxPoolGrad", "GlobalMaxPool's rule"},
    {"ai.trainrt::LpPoolGrad", "LpPool's rule"},
    {"ai.trainrt::DropoutGrad", "Dropout's rule"},
    {"ai.trainrt::DropoutReluGrad", "the training fusion of DropoutGrad and ReluGrad"},
    {"ai.trainrt::ReshapeLike", "Flatten's and Reshape's rule"},
    {"ai.trainrt::ConcatGrad", "Concat's rule"},
    {"ai.trainrt::GatherGrad", "Gather's rule"},
    {"ai.trainrt::SliceGrad", "Slice's rule"},
    {"ai.trainrt::SoftmaxGrad", "Softmax's rule"},
    {"ai.trainrt::LogSoftmaxGrad", "LogSoftmax's rule"},
    {"ai.trainrt::SoftmaxCrossEntropyLossGrad", "SoftmaxCrossEntropyLoss's rule"},
    {"ai.trainrt::ReduceMeanGrad", "ReduceMean's rule"},
    {"ai.trainrt::ReduceSumGrad", "ReduceSum's rule"},
    {"ai.trainrt::ReduceMaxGrad", "ReduceMax's rule"},
};

std::map<std::string, std::string> backward_ops() {
  std::map<std::string, std::string> out = kBackwardOpsByHand;
  for (const UnaryOpInfo& u : unary_op_table())
    if (u.grad) out[std::string(kTrainrtDomain) + "::" + u.grad] = std::string(u.op) + "'s rule (the unary table)";
  return out;
}
const std::map<std::string, std::string> kBackwardOps = backward_ops();

// Forward ops without a gradient rule, on purpose.
const std::map<std::string, std::string> kNoGradientRule{
    {"Constant", "no inputs; registered non-differentiable in autodiff/rules_misc.cpp"},
    {"Equal", "bool output; registered non-differentiable in autodiff/rules_elementwise.cpp"},
    {"Greater", "bool output; registered non-differentiable in autodiff/rules_elementwise.cpp"},
    {"Less", "bool output; registered non-differentiable in autodiff/rules_elementwise.cpp"},
    {"GreaterOrEqual", "bool output; registered non-differentiable in autodiff/rules_elementwise.cpp"},
    {"LessOrEqual", "bool output; registered non-differentiable in autodiff/rules_elementwise.cpp"},
    {"Not", "bool output; registered non-differentiable in autodiff/rules_elementwise.cpp"},
    {"Mod", "integer shape arithmetic in exported graphs; registered non-differentiable"},
    {"Shape", "int64 output; registered non-differentiable in autodiff/rules_shape.cpp"},
    {"ConstantOfShape", "its output does not depend on its input's values; non-differentiable"},
    {"Range", "computes indices from scalars; registered non-differentiable"},
    {"ScatterND", "builds masks from constants in exported graphs; registered non-differentiable"},
    {"ai.trainrt::SGD", "optimizer update, appended after differentiation"},
    {"ai.trainrt::Adam", "optimizer update, appended after differentiation"},
    {"ai.trainrt::MultiSGD", "optimizer update of many parameters (passes/fuse_optimizer.cpp), after differentiation"},
    {"ai.trainrt::MultiAdam", "optimizer update of many parameters (passes/fuse_optimizer.cpp), after differentiation"},
    {"ai.trainrt::Increment", "the optimizer's step counter, appended after differentiation"},
    {"ai.trainrt::Assign", "writes a state update in place, appended by the training session"},
    {"ai.onnx.preview.training::Momentum", "optimizer update (ONNX training preview), never differentiated"},
    {"ai.onnx.preview.training::Adam", "optimizer update (ONNX training preview), never differentiated"},
    {"ai.onnx.preview.training::Adagrad", "optimizer update (ONNX training preview), never differentiated"},
    {"ai.trainrt::FusedConv", "made by the fusion passes, which run after differentiation"},
    {"ai.trainrt::FusedGemm", "made by the fusion passes, which run after differentiation"},
    {"ai.trainrt::BatchNormalizationRelu", "made by the fusion passes, which run after differentiation"},
    {"ai.trainrt::BatchNormalizationReluDropout", "made by the fusion passes, which run after differentiation"},
};

// Ops the cpu backend runs with the reference kernel (Backend::fallback_ops).
const std::map<std::string, std::string> kCpuFallbacks{
    {"ai.onnx.preview.training::Momentum", "ONNX's preview optimizer, for conformance; train uses ai.trainrt::SGD"},
    {"ai.onnx.preview.training::Adam", "ONNX's preview optimizer, for conformance; train uses ai.trainrt::Adam"},
    {"ai.onnx.preview.training::Adagrad", "ONNX's preview optimizer, for conformance"},
    {"ai.trainrt::Increment", "the optimizer's scalar step counter"},
    {"ai.trainrt::Assign", "one copy, run once per state update"},
    {"ai.trainrt::SoftmaxGrad", "backward of a Softmax outside SoftmaxCrossEntropyLoss (not in the Wide ResNet)"},
    {"ai.trainrt::LogSoftmaxGrad", "backward of a LogSoftmax outside SoftmaxCrossEntropyLoss (not in the Wide ResNet)"},
    {"ai.trainrt::ReduceMeanGrad", "backward of ReduceMean (not in the Wide ResNet)"},
    {"ai.trainrt::ReduceSumGrad", "backward of ReduceSum (not in the Wide ResNet)"},
    {"ai.trainrt::ReduceMaxGrad", "backward of ReduceMax (not in the Wide ResNet)"},
    {"ai.trainrt::ConcatGrad", "backward of Concat (not in the Wide ResNet)"},
};

// Ops import rewrites into other ops (graph/expand_recurrent.h): schemas and shape rules
// only, never run nor differentiated themselves.
const std::set<std::string> kExpandedAtImport{"LSTM", "GRU", "RNN"};

std::string key(const std::string& domain, const std::string& op) {
  const std::string d = canonical_domain(domain);
  return d.empty() ? op : d + "::" + op;
}

std::pair<std::string, std::string> split(const std::string& k) {
  const size_t sep = k.find("::");
  return sep == std::string::npos ? std::pair<std::string, std::string>{"", k}
                                  : std::pair<std::string, std::string>{k.substr(0, sep), k.substr(sep + 2)};
}

std::set<std::string> schema_keys() {
  std::set<std::string> out;
  for (const OpSchema* s : registry().schemas.all()) out.insert(key(s->domain, s->op_type));
  return out;
}

}  // namespace

TEST_CASE("registry: every op has a schema, a reference kernel, and a cpu kernel or a listed fallback") {
  const Registry& r = registry();
  const std::set<std::string> schemas = schema_keys();
  REQUIRE(schemas.size() > 40);
  for (const std::string& op : schemas) {
    CAPTURE(op);
    const auto [domain, type] = split(op);
    if (kExpandedAtImport.count(op)) {
      CHECK(is_recurrent_op(domain, type));
      for (const char* backend : {"reference", "cpu", "cuda"})
        CHECK_MESSAGE(!r.kernels.find(backend, domain, type), op << " is expanded at import but has a kernel");
      continue;
    }
    CHECK_MESSAGE(r.kernels.find("reference", domain, type), "no reference kernel for " << op);
    const bool cpu = r.kernels.find("cpu", domain, type) != nullptr;
    if (kCpuFallbacks.count(op))
      CHECK_MESSAGE(!cpu, op << " has a cpu kernel now: remove it from kCpuFallbacks");
    else
      CHECK_MESSAGE(cpu, "no cpu kernel for " << op << " (add one, or list it in kCpuFallbacks with a reason)");
  }
  for (const char* backend : {"reference", "cpu", "cuda"})
    for (const std::string& op : r.kernels.ops_of(backend))
      CHECK_MESSAGE(schemas.count(op), backend << " kernel for " << op << " without a schema");
  for (const auto& [op, reason] : kCpuFallbacks) CHECK_MESSAGE(schemas.count(op), "kCpuFallbacks lists unknown " << op);

  // The cpu backend reports the same fallbacks (what `trainrt inspect` shows).
  const std::vector<std::string> reported = make_backend("cpu")->fallback_ops();
  std::set<std::string> listed;
  for (const auto& [op, reason] : kCpuFallbacks) listed.insert(op);
  CHECK(std::set<std::string>(reported.begin(), reported.end()) == listed);
  CHECK(make_backend("reference")->fallback_ops().empty());
}

TEST_CASE("registry: every forward op has a gradient rule or a listed reason not to; backward ops are listed") {
  const GradRegistry& gr = gradients();
  const std::set<std::string> schemas = schema_keys();
  for (const std::string& op : schemas) {
    CAPTURE(op);
    const auto [domain, type] = split(op);
    const bool rule = gr.find(domain, type) != nullptr;
    if (kExpandedAtImport.count(op)) {
      CHECK_MESSAGE(!rule, op << " is expanded at import but has a gradient rule");
    } else if (kBackwardOps.count(op)) {
      CHECK_MESSAGE(!rule, "backward op " << op << " has a gradient rule: remove it from kBackwardOps");
    } else if (kNoGradientRule.count(op)) {
      CHECK_MESSAGE(!rule, op << " has a gradient rule now: remove it from kNoGradientRule");
    } else {
      CHECK_MESSAGE(rule, "no gradient rule for " << op
                                                  << " (add one, or list it in kNoGradientRule or kBackwardOps with a "
                                                     "reason)");
      CHECK_MESSAGE(!gr.is_non_differentiable(domain, type), op << " has a rule and is non-differentiable");
    }
    // Only listed ops may be registered non-differentiable.
    if (gr.is_non_differentiable(domain, type))
      CHECK_MESSAGE(kNoGradientRule.count(op), op << " is non-differentiable in autodiff but not listed here");
  }
  // Every rule is for an op with a schema; every listed op exists.
  for (const std::string& op : gr.ops_with_rules())
    CHECK_MESSAGE(schemas.count(op), "gradient rule for unknown " << op);
  for (const auto* list : {&kBackwardOps, &kNoGradientRule})
    for (const auto& [op, reason] : *list) CHECK_MESSAGE(schemas.count(op), "listed op " << op << " has no schema");
  // Constant is the one op autodiff itself declares non-differentiable.
  CHECK(gr.is_non_differentiable("", "Constant"));
}

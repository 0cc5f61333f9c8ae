// Which arguments the cpu backend's kernels take in Blocked16c (nChw16c), declared in
// one table (ops/core/kernel.h, runtime/layout.h explain the scheme).
//
//   Any:    convolution forward/backward and pooling reorder each argument on its
//           own, so X, Y, Z, dY, dX may each be blocked or not (weights and biases
//           stay row-major).
//   Shared: batch normalization (one data descriptor for X/Y, dY/X/dX), MaxPoolGrad
//           (a loop over planes in one layout) and every
//           elementwise kernel over same-shape tensors: a position-independent loop
//           gives the same bits in any layout as long as all its arguments share it.
// The cpu backend uses these only where oneDNN has nChw16c kernels (AVX-512; see
// Backend::blocked_layouts in runtime/backend.h). A kernel whose arguments are listed here must describe them with
// dnnl_util::desc_of (or be elementwise over same-shape arguments) and fall back
// through dnnl_util::run_reference, which converts blocked arguments.
#include "graph/ir.h"
#include "ops/core/register_all.h"

namespace trainrt {
namespace {

constexpr SlotLayout P = SlotLayout::Plain, A = SlotLayout::Any, S = SlotLayout::Shared;

// True when every named value (empty names skipped) has one known shape.
bool same_shapes(const Graph& g, const std::vector<std::string>& values) {
  const Shape* first = nullptr;
  for (const std::string& v : values) {
    if (v.empty()) continue;
    const ValueInfo* info = g.find_info(v);
    if (!info || !info->shape || !shape_is_known(*info->shape)) return false;
    if (!first) first = &*info->shape;
    if (*info->shape != *first) return false;
  }
  return true;
}

bool node_shapes_agree(const Graph& g, const Node& n) {
  std::vector<std::string> all = n.inputs;
  all.insert(all.end(), n.outputs.begin(), n.outputs.end());
  return same_shapes(g, all);
}

// Every argument Shared when all have one shape, else every argument Plain.
NodeLayouts elementwise(const Graph& g, const Node& n) {
  if (!node_shapes_agree(g, n)) return {};
  return {std::vector<SlotLayout>(n.inputs.size(), S), std::vector<SlotLayout>(n.outputs.size(), S)};
}

LayoutRule fixed(NodeLayouts l) {
  return [l](const Graph&, const Node&) { return l; };
}

void declare(Registry& r, const std::string& domain, const std::string& op, LayoutRule rule) {
  if (r.kernels.find("cpu", domain, op)) r.kernels.set_layouts("cpu", domain, op, std::move(rule));
}

}  // namespace

void register_cpu_layouts(Registry& r) {
  const std::string trt = kTrainrtDomain;
  declare(r, "", "Conv", fixed({{A, P, P}, {A}}));
  declare(r, trt, "FusedConv", fixed({{A, P, P, A}, {A}}));
  declare(r, trt, "ConvGrad", fixed({{A, A, P}, {A, P, P}}));
  declare(r, "", "BatchNormalization", fixed({{S}, {S}}));
  declare(r, trt, "BatchNormalizationRelu", fixed({{S}, {S}}));
  declare(r, trt, "BatchNormalizationGrad", fixed({{S, S}, {S}}));
  for (const char* op : {"MaxPool", "AveragePool", "GlobalAveragePool"}) declare(r, "", op, fixed({{A}, {A}}));
  declare(r, trt, "MaxPoolGrad", fixed({{S, S}, {S}}));
  declare(r, trt, "AveragePoolGrad", fixed({{A, A}, {A}}));
  for (const char* op : {"Relu", "LeakyRelu", "Sigmoid", "Tanh", "Add", "Sub", "Mul", "Div"})
    declare(r, "", op, elementwise);
  declare(r, trt, "ReluGrad", elementwise);
  // Dropout draws its mask from each element's row-major index (ops/misc.cpp).
  declare(r, "", "Dropout", [](const Graph& g, const Node& n) {
    if (!same_shapes(g, {n.inputs.at(0), n.outputs.at(0), n.outputs.size() > 1 ? n.outputs[1] : ""}))
      return NodeLayouts{};
    return NodeLayouts{{S}, {S, S}};  // data; output, mask (ratio, training_mode: Plain scalars)
  });
  declare(r, trt, "DropoutGrad", [](const Graph& g, const Node& n) {
    if (!same_shapes(g, {n.inputs.at(0), n.inputs.at(1), n.outputs.at(0)})) return NodeLayouts{};
    return NodeLayouts{{S, S}, {S}};  // dY, mask; dX
  });
  declare(r, trt, "DropoutReluGrad", [](const Graph& g, const Node& n) {
    if (!same_shapes(g, {n.inputs.at(0), n.inputs.at(1), n.outputs.at(0)})) return NodeLayouts{};
    return NodeLayouts{{S, S}, {S}};  // dZ, Z; dX
  });
  declare(r, "", "Sum", elementwise);
  // SumToShape(dY, like): a copy when the shapes agree; `like` only lends its dims.
  declare(r, trt, "SumToShape", [](const Graph& g, const Node& n) {
    if (!node_shapes_agree(g, n)) return NodeLayouts{};
    return NodeLayouts{{S, A}, {S}};
  });
}

}  // namespace trainrt

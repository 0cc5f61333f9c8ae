#include "runtime/cudnn_fusion.h"

#include <algorithm>
#include <unordered_map>

#include "graph/tensor.h"
#include "ops/core/bn_graph_scope.h"
#include "passes/fuse_util.h"

namespace trainrt {

namespace {

using passes::is_trainrt;

// Why values `names` of g cannot go to a fused cuDNN kernel ("" when they can): the
// runtime fusion engines take fp16, bf16 and fp32; the fused kernels take 4-D N,C,H,W.
std::string value_reason(const Graph& g, const std::vector<std::string>& names) {
  for (const std::string& v : names) {
    if (v.empty()) continue;
    const ValueInfo* info = g.find_info(v);
    if (!info || !info->shape) return "shape of '" + v + "' unknown";
    if (info->dtype != DataType::Float32 && info->dtype != DataType::Float16 && info->dtype != DataType::BFloat16)
      return std::string("dtype ") + dtype_name(info->dtype) + " (cuDNN fusion takes float32, float16, bfloat16)";
    if (info->shape->size() != 4)
      return "rank " + std::to_string(info->shape->size()) + " (fused kernels take 4-D N,C,H,W)";
  }
  return "";
}

// BnAddRelu and DReluForkDBn need the channel count a multiple of 4 (fp32) or 8 (fp16, bf16).
std::string channel_reason(const Graph& g, const std::string& x) {
  const ValueInfo* info = g.find_info(x);
  if (!info || !info->shape || info->shape->size() < 2) return "";
  const Dim& c = (*info->shape)[1];
  if (!c.known()) return "channel count unknown";
  const int64_t multiple = bn_graph_scope::channel_multiple(info->dtype != DataType::Float32);
  if (c.value % multiple != 0)
    return "C=" + std::to_string(c.value) + " not a multiple of " + std::to_string(multiple) + " (" +
           dtype_name(info->dtype) + ")";
  return "";
}

std::string conv_reason(const Node& n) {
  const int64_t group = n.attr_int("group", 1);
  if (group != 1) return "grouped convolution (group=" + std::to_string(group) + ")";
  for (int64_t d : n.attr_ints("dilations"))
    if (d != 1) return "dilated convolution";
  const std::string act = n.attr_string("activation", "");
  if (!act.empty() && act != "Relu") return "activation " + act;
  return "";
}

std::string conv_pattern(const Node& n) {
  std::string p = "conv";
  if (n.has_input(2)) p += "_bias";
  if (n.attr_string("activation", "") == "Relu") p += "_relu";
  if (n.has_input(3)) p += "_add";
  return p;
}

std::string first_of(std::initializer_list<std::string> reasons) {
  for (const std::string& r : reasons)
    if (!r.empty()) return r;
  return "";
}

}  // namespace

std::vector<FusionSite> cudnn_fusion_sites(const Graph& g) {
  std::unordered_map<std::string, size_t> producer;
  std::unordered_map<std::string, std::vector<size_t>> readers;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const std::string& o : g.nodes[i].outputs)
      if (!o.empty()) producer[o] = i;
    for (const std::string& in : g.nodes[i].inputs)
      if (!in.empty()) readers[in].push_back(i);
  }
  auto produced_by = [&](const std::string& v) -> const Node* {
    auto it = producer.find(v);
    return it == producer.end() ? nullptr : &g.nodes[it->second];
  };
  // The single node reading v, when v has exactly one reader and is no graph output.
  auto sole_reader = [&](const std::string& v) -> const Node* {
    auto it = readers.find(v);
    if (it == readers.end() || it->second.size() != 1) return nullptr;
    if (std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end()) return nullptr;
    return &g.nodes[it->second[0]];
  };

  std::vector<FusionSite> out;
  for (const Node& n : g.nodes) {
    if (is_trainrt(n, "FusedConv")) {
      out.push_back({n.name, n.op_type, conv_pattern(n),
                     first_of({conv_reason(n), value_reason(g, {n.inputs[0], n.inputs[1], n.outputs[0]})})});
    } else if (is_trainrt(n, "BatchNormalizationRelu")) {  // not ...Dropout: own kernels (ops/fused_cuda.cu)
      out.push_back({n.name, n.op_type, "bn_relu_fwd",
                     first_of({value_reason(g, {n.inputs[0], n.outputs[0]}), channel_reason(g, n.inputs[0])})});
    } else if (is_trainrt(n, "ConvGrad") && n.attr_int("dx_relu", 0) != 0 && n.inputs.size() == 3 &&
               n.has_output(0)) {  // fused by trainrt (passes/passes.h): the data pass with its ReLU gradient
      out.push_back({n.name, n.op_type, "dgrad_drelu",
                     first_of({conv_reason(n), value_reason(g, {n.inputs[0], n.inputs[2], n.outputs[0]})})});
    } else if (is_trainrt(n, "BatchNormalizationGrad") && n.inputs.size() > 5 && n.has_input(5)) {
      // fused by trainrt (passes/passes.h): the ReLU's gradient read with the batch norm's
      const bool saved = n.has_input(3) && n.has_input(4);
      out.push_back({n.name, n.op_type, "bn_relu_bwd",
                     first_of({saved ? "" : "no saved statistics (cuDNN's backward reads the forward's)",
                               value_reason(g, {n.inputs[0], n.inputs[1]}), channel_reason(g, n.inputs[1])})});
    } else if (is_trainrt(n, "ReluGrad") || is_trainrt(n, "DropoutReluGrad")) {
      if (n.inputs.size() < 2 || !n.has_output(0)) continue;
      const bool dropout = n.op_type == "DropoutReluGrad";
      const Node* dy = produced_by(n.inputs[0]);
      const Node* y = produced_by(n.inputs[1]);  // the ReLU's output, or for DropoutReluGrad the Dropout's
      if (dropout && y && y->op_type == "Dropout" && !y->inputs.empty()) y = produced_by(y->inputs[0]);
      const Node* next = sole_reader(n.outputs[0]);
      const bool from_dgrad = dy && is_trainrt(*dy, "ConvGrad") && !dy->outputs.empty() &&
                              dy->outputs[0] == n.inputs[0] && sole_reader(n.inputs[0]) == &n;
      const bool into_dbn = next && is_trainrt(*next, "BatchNormalizationGrad") && next->inputs[0] == n.outputs[0] &&
                            y && is_trainrt(*y, "BatchNormalizationRelu");
      if (from_dgrad) {
        out.push_back({n.name, n.op_type, "dgrad_drelu",
                       first_of({dropout ? "dropout between the convolution and ReLU gradients" : "", conv_reason(*dy),
                                 value_reason(g, {dy->inputs[0], dy->inputs[2], n.outputs[0]})})});
      } else if (into_dbn) {
        out.push_back(
            {n.name, n.op_type, "bn_relu_bwd",
             first_of({dropout ? "dropout between the ReLU and batch-norm gradients" : "",
                       value_reason(g, {n.inputs[0], next->inputs[1]}), channel_reason(g, next->inputs[1])})});
      }
    }
  }
  return out;
}

std::vector<FusionSite> cudnn_conv16_sites(const Graph& g) {
  // Why values `names` cannot be read as 16-bit copies by the graph ("" when they can).
  auto fp32_reason = [&](const std::vector<std::string>& names) -> std::string {
    for (const std::string& v : names) {
      const ValueInfo* info = g.find_info(v);
      if (!info || !info->shape) return "shape of '" + v + "' unknown";
      if (info->dtype != DataType::Float32)
        return std::string("dtype ") + dtype_name(info->dtype) + " (16-bit copies are made of float32 values)";
      // 1-D convolutions run as 2-D ones over N,C,1,L (ops/core/window.h one_d_as_two_d).
      if (info->shape->size() != 4 && info->shape->size() != 3)
        return "rank " + std::to_string(info->shape->size()) + " (the graphs take N,C,L and N,C,H,W)";
    }
    return "";
  };
  auto conv_geometry = [](const Node& n) {
    std::string r = conv_reason(n);
    return r.rfind("activation", 0) == 0 ? "" : r;  // FusedConv's activation is the epilogue's business
  };
  std::vector<FusionSite> out;
  for (const Node& n : g.nodes) {
    const bool conv = n.domain.empty() && n.op_type == "Conv";
    if ((conv || is_trainrt(n, "FusedConv")) && n.inputs.size() >= 2 && n.has_output(0)) {
      out.push_back({n.name, n.op_type, "conv_fwd",
                     first_of({conv_geometry(n), fp32_reason({n.inputs[0], n.inputs[1], n.outputs[0]})})});
    } else if (is_trainrt(n, "ConvGrad") && n.inputs.size() == 3) {
      if (n.has_output(0))
        out.push_back({n.name, n.op_type, "conv_dgrad",
                       first_of({conv_geometry(n), fp32_reason({n.inputs[0], n.inputs[2], n.outputs[0]})})});
      if (n.has_output(1))
        out.push_back({n.name, n.op_type, "conv_wgrad",
                       first_of({conv_geometry(n), fp32_reason({n.inputs[0], n.inputs[1], n.outputs[1]})})});
    }
  }
  return out;
}

std::vector<FusionRow> cudnn_fusion_table(const std::vector<FusionSite>& sites) {
  std::vector<FusionRow> rows;
  for (const FusionSite& s : sites) {
    auto it = std::find_if(rows.begin(), rows.end(), [&](const FusionRow& r) { return r.pattern == s.pattern; });
    if (it == rows.end()) it = rows.insert(rows.end(), FusionRow{s.pattern, 0, {}});
    if (s.reason.empty())
      ++it->fused;
    else
      ++it->unfused[s.reason];
  }
  return rows;
}

}  // namespace trainrt

// The cuDNN fusion plan of a fused training graph (runtime/cudnn_fusion.h): on the
// Wide ResNet every fused step is classified, with the counts its structure implies,
// and a channel count BnAddRelu cannot take, a grouped or dilated convolution and a
// dtype outside fp16/bf16/fp32 each name their reason.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <map>

#include "passes/fuse_util.h"
#include "passes/passes.h"
#include "runtime/cudnn_fusion.h"
#include "runtime_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

Graph fused_wrn(std::vector<int64_t> widths) {
  TrainingGraph t = wrn_training(small_wrn(std::move(widths)));
  fuse_training_graph(t.graph);
  return t.graph;
}

const FusionRow& row(const std::vector<FusionRow>& rows, const std::string& pattern) {
  for (const FusionRow& r : rows)
    if (r.pattern == pattern) return r;
  FAIL("no row " << pattern);
  return rows.front();
}

}  // namespace

TEST_CASE("cudnn fusion plan: the Wide ResNet's fused training graph") {
  const Graph g = fused_wrn({4, 8, 12, 16});
  const std::vector<FusionSite> sites = cudnn_fusion_sites(g);
  const std::vector<FusionRow> rows = cudnn_fusion_table(sites);
  REQUIRE(rows.size() == 4);
  // 7 BatchNormalization+Relu (the other 6 fused with their Dropout run own kernels), all
  // channel counts multiples of 4.
  CHECK(row(rows, "bn_relu_fwd").fused == 7);
  CHECK(row(rows, "bn_relu_fwd").unfused.empty());
  // The three 1x1 skip convolutions (with bias) that take the residual Add.
  CHECK(row(rows, "conv_bias_add").fused == 3);
  // The second ReLU of each of the 6 blocks and the input block's: ReLU gradient into the BN gradient.
  CHECK(row(rows, "bn_relu_bwd").fused == 7);
  // The first ReLU of each block is followed by Dropout: its gradient, fused with the
  // dropout's (DropoutReluGrad), follows the second convolution's dgrad but is no pattern.
  const FusionRow& dgrad = row(rows, "dgrad_drelu");
  CHECK(dgrad.fused == 0);
  REQUIRE(dgrad.unfused.size() == 1);
  CHECK(dgrad.unfused.begin()->first == "dropout between the convolution and ReLU gradients");
  CHECK(dgrad.unfused.begin()->second == 6);
  // Every site names a node of the graph, of the op it says.
  for (const FusionSite& s : sites) {
    auto it = std::find_if(g.nodes.begin(), g.nodes.end(), [&](const Node& n) { return n.name == s.node; });
    REQUIRE(it != g.nodes.end());
    CHECK(it->op_type == s.op);
  }
  // The unfused graph (--fuse off): no fused forward node, and no ReLU gradient between
  // a BatchNormalizationRelu and its gradient or right after a dgrad.
  CHECK(cudnn_fusion_sites(wrn_training(small_wrn()).graph).empty());
}

TEST_CASE("cudnn fusion plan: the ReLU gradient folded into the batch-norm gradient, as the cuda backend runs it") {
  Graph g = fused_wrn({4, 8, 12, 16});
  REQUIRE(passes::fuse_relu_grad_into_bn_grad(g) == 7);
  std::vector<FusionRow> rows = cudnn_fusion_table(cudnn_fusion_sites(g));
  CHECK(row(rows, "bn_relu_bwd").fused == 7);  // now anchored at the BatchNormalizationGrad nodes
  CHECK(row(rows, "bn_relu_bwd").unfused.empty());
  // cuDNN's backward reads the forward's mean and inverse std: without saved statistics
  // (inputs 3/4) the node stays on the own kernels.
  for (Node& n : g.nodes)
    if (n.op_type == "BatchNormalizationGrad" && n.inputs.size() > 5 && !n.inputs[5].empty()) {
      n.inputs[3].clear();
      n.inputs[4].clear();
      break;
    }
  rows = cudnn_fusion_table(cudnn_fusion_sites(g));
  CHECK(row(rows, "bn_relu_bwd").fused == 6);
  CHECK(row(rows, "bn_relu_bwd").unfused.count("no saved statistics (cuDNN's backward reads the forward's)") == 1);
}

TEST_CASE("cudnn fusion plan: the reasons a site runs unfused") {
  // Width 6: BnAddRelu and DReluForkDBn need fp32 channels in multiples of 4.
  const std::vector<FusionRow> rows = cudnn_fusion_table(cudnn_fusion_sites(fused_wrn({4, 6, 12, 16})));
  const FusionRow& fwd = row(rows, "bn_relu_fwd");
  CHECK(fwd.unfused.count("C=6 not a multiple of 4 (float32)") == 1);
  CHECK(fwd.fused + fwd.unfused.at("C=6 not a multiple of 4 (float32)") == 7);
  CHECK(row(rows, "bn_relu_bwd").unfused.count("C=6 not a multiple of 4 (float32)") == 1);

  // Grouped, dilated, float64: the skip convolutions of the Wide ResNet, changed.
  auto first_conv_reason = [](const std::function<void(Graph&, Node&)>& change) {
    Graph g = fused_wrn({4, 8, 12, 16});
    for (Node& n : g.nodes)
      if (n.op_type == "FusedConv") {
        change(g, n);
        break;
      }
    for (const FusionSite& s : cudnn_fusion_sites(g))
      if (s.op == "FusedConv") return s.reason;
    return std::string("no FusedConv");
  };
  CHECK(first_conv_reason([](Graph&, Node& n) { n.attrs["group"] = Attribute::of_int(2); }) ==
        "grouped convolution (group=2)");
  CHECK(first_conv_reason([](Graph&, Node& n) {
          n.attrs["dilations"] = Attribute::of_ints({2, 2});
        }) == "dilated convolution");
  CHECK(first_conv_reason([](Graph& g, Node& n) { g.values[n.outputs[0]].dtype = DataType::Float64; }) ==
        "dtype float64 (cuDNN fusion takes float32, float16, bfloat16)");
  CHECK(first_conv_reason([](Graph& g, Node& n) {
          Shape& s = *g.values[n.outputs[0]].shape;
          s.push_back(Dim::of(1));
        }) == "rank 5 (fused kernels take 4-D N,C,H,W)");
  CHECK(first_conv_reason([](Graph&, Node&) {}) == "");
}

// The 16-bit tensor-core graphs under --precision bf16/fp16 (cudnn_conv16_sites): every
// convolution pass of the Wide ResNet is in their scope; a grouped or dilated convolution,
// or a value that is not float32, is not, with its reason, pass by pass.
TEST_CASE("cudnn fusion plan: convolution passes on 16-bit graphs") {
  const Graph g = fused_wrn({4, 8, 12, 16});
  size_t convs = 0, grads = 0, dx = 0;
  for (const Node& n : g.nodes) {
    convs += n.op_type == "Conv" || n.op_type == "FusedConv";
    if (n.op_type == "ConvGrad") ++grads, dx += n.has_output(0);
  }
  // The input convolution, two per block of 6, three 1x1 skips; each has a gradient, all
  // but the input convolution's (its input is the image) with dX.
  REQUIRE(convs == 16);
  REQUIRE(grads == 16);
  REQUIRE(dx == 15);
  const std::vector<FusionSite> sites = cudnn_conv16_sites(g);
  const std::vector<FusionRow> rows = cudnn_fusion_table(sites);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].pattern == "conv_fwd");
  CHECK(row(rows, "conv_fwd").fused == 16);
  CHECK(row(rows, "conv_dgrad").fused == 15);
  CHECK(row(rows, "conv_wgrad").fused == 16);
  for (const FusionRow& r : rows) CHECK(r.unfused.empty());
  for (const FusionSite& s : sites) {
    auto it = std::find_if(g.nodes.begin(), g.nodes.end(), [&](const Node& n) { return n.name == s.node; });
    REQUIRE(it != g.nodes.end());
    CHECK(it->op_type == s.op);
  }

  // One convolution changed (the first ConvGrad and the Conv it differentiates keep the
  // same attributes): the reasons of its passes.
  auto reasons = [](const std::function<void(Graph&, Node&)>& change) {
    Graph h = fused_wrn({4, 8, 12, 16});
    for (Node& n : h.nodes)
      if (n.op_type == "ConvGrad" && n.has_output(0)) {
        change(h, n);
        break;
      }
    std::map<std::string, std::string> out;  // pattern -> the reason of the changed node's site
    for (const FusionSite& s : cudnn_conv16_sites(h))
      if (!s.reason.empty()) out[s.pattern] = s.reason;
    return out;
  };
  auto grouped = reasons([](Graph&, Node& n) { n.attrs["group"] = Attribute::of_int(2); });
  CHECK(grouped.size() == 2);
  CHECK(grouped["conv_dgrad"] == "grouped convolution (group=2)");
  CHECK(grouped["conv_wgrad"] == "grouped convolution (group=2)");
  CHECK(reasons([](Graph&, Node& n) {
          n.attrs["dilations"] = Attribute::of_ints({2, 2});
        })["conv_wgrad"] == "dilated convolution");
  // dX in float64: only the data pass writes it.
  auto f64 = reasons([](Graph& h, Node& n) { h.values[n.outputs[0]].dtype = DataType::Float64; });
  CHECK(f64.size() == 1);
  CHECK(f64["conv_dgrad"] == "dtype float64 (16-bit copies are made of float32 values)");
  // A 5-D dY: both passes read it.
  auto rank5 = reasons([](Graph& h, Node& n) { h.values[n.inputs[0]].shape->push_back(Dim::of(1)); });
  CHECK(rank5.size() == 2);
  CHECK(rank5["conv_wgrad"] == "rank 5 (the graphs take N,C,L and N,C,H,W)");
  // A 3-D dY (a 1-D convolution's N,C,L): in scope, as the kernels run it over N,C,1,L.
  CHECK(reasons([](Graph& h, Node& n) { h.values[n.inputs[0]].shape->pop_back(); }).empty());
  CHECK(reasons([](Graph&, Node&) {}).empty());
}

// The cuDNN fusion plan of a fused training graph (runtime/cudnn_fusion.h): on the
// Wide ResNet every fused step is classified, with the counts its structure implies,
// and a channel count BnAddRelu cannot take, a grouped or dilated convolution and a
// dtype outside fp16/bf16/fp32 each name their reason.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>

#include "graph/passes.h"
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
  // 13 BatchNormalization+Relu, all channel counts multiples of 4.
  CHECK(row(rows, "bn_relu_fwd").fused == 13);
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

TEST_CASE("cudnn fusion plan: the reasons a site runs unfused") {
  // Width 6: BnAddRelu and DReluForkDBn need fp32 channels in multiples of 4.
  const std::vector<FusionRow> rows = cudnn_fusion_table(cudnn_fusion_sites(fused_wrn({4, 6, 12, 16})));
  const FusionRow& fwd = row(rows, "bn_relu_fwd");
  CHECK(fwd.unfused.count("C=6 not a multiple of 4 (float32)") == 1);
  CHECK(fwd.fused + fwd.unfused.at("C=6 not a multiple of 4 (float32)") == 13);
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

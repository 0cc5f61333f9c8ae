// The reference Wide ResNet (seeds/pytorch-on-olivia-single-gpu.md, model.py) as a Graph.
//
//   WrnOptions o = wrn_options_for_dataset("cifar100");   // [N,3,32,32] -> [N,100]
//   o.widths = {4, 8, 12, 16};                              // optional: a small model
//   Graph g = build_wide_resnet(o);
//   validate_graph(g, registry().schemas, "wrn");           // the caller types it:
//   infer_shapes(g, registry().schemas, "wrn");             // models/ only knows graph/
//   export_onnx_file(g, "wrn.onnx");
//
// Why it is written node by node: the model must be the seed's exactly, so that a
// trained file maps onto PyTorch. Layout (widths w0..w3, in = input channels):
//   input_block: Conv3x3(in->w0, pads 1, no bias) + BatchNormalization + Relu
//   stage s = 1..3: blocks_per_stage residual blocks, block k (numbered 1.. over all
//     stages): cbr(c->w_s), Dropout(0.01), cbr(w_s->w_s), skip = 1x1 Conv with bias
//     when c != w_s, else identity; Add. MaxPool 2x2/2 (pool1, pool2) after stage 1, 2.
//   pool: AveragePool 7x7 stride 7 (on 32x32 inputs the last map is 8x8 and only
//     the top-left 7x7 window is averaged: the seed's quirk, kept on purpose),
//   flat: Flatten, fc: Gemm(transB=1) -> "logits" [N,classes].
// ai.onnx opset 17; BatchNormalization in inference form (1 output, epsilon 1e-5,
// momentum 0.9 = PyTorch's 0.1); Dropout ratio is a scalar initializer
// "<block>.dropout.ratio" (no training_mode input: the trainer sets training).
// Initializer names are PyTorch's state_dict names (input_block.cbr.0.weight,
// block1.scale.bias, block1.layer1.cbr.1.running_mean, fc.weight, ...). Weights are
// drawn like PyTorch's defaults: Conv/Linear weight and bias U(-1/sqrt(fan_in),
// 1/sqrt(fan_in)) (kaiming_uniform with a=sqrt(5)), BN scale 1, bias 0, running
// mean 0, running var 1; each tensor has its own stream from (seed, name), so a
// tensor's values do not depend on the other options.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace trainrt {

struct WrnOptions {
  int64_t in_channels = 3;
  int64_t image_size = 32;  // square H = W
  int64_t num_classes = 100;
  std::vector<int64_t> widths{16, 160, 320, 640};  // input block, stage 1, 2, 3
  int64_t blocks_per_stage = 2;
  uint64_t seed = 0;
  float dropout_ratio = 0.01f;
  std::string batch_symbol = "N";
};

// Datasets trainrt reads: "cifar100" [3,32,32]/100, "cifar10" [3,32,32]/10,
// "fashion-mnist" [1,28,28]/10. BadInput naming the choices otherwise.
WrnOptions wrn_options_for_dataset(const std::string& dataset);
const std::vector<std::string>& wrn_datasets();

// BadInput (one line naming the option) unless widths are 4 positive values,
// blocks_per_stage >= 1, classes, channels and image size positive, 0 <= ratio < 1.
void check_wrn_options(const WrnOptions& o);

// The untyped graph: input "input" [N,C,H,W] float32, output "logits". Calls
// check_wrn_options first.
Graph build_wide_resnet(const WrnOptions& o);

// What PyTorch's model.parameters() counts: float initializers except those read
// only as BatchNormalization running statistics (inputs 3, 4) or Dropout
// ratio/training_mode (inputs 1, 2). Graph::parameter_count() counts them all.
int64_t trainable_parameter_count(const Graph& g);

}  // namespace trainrt

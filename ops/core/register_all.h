// One explicit registration call for every op family (no static initialisers:
// a static library would silently drop them).
//
//   const Registry& r = registry();      // built once, on first use
//   r.schemas.find("", "Conv");  r.kernels.find("cpu", "", "Conv");
#pragma once

#include "graph/schema.h"
#include "ops/core/kernel.h"

namespace trainrt {

struct Registry {
  OpRegistry schemas;
  KernelRegistry kernels;
};

// Adds every op family's schemas and reference kernels, then every family's cpu
// kernels, then (in a CUDA build) every family's cuda kernels.
void register_all(Registry& r);

// The process-wide registry, filled by register_all() on first use.
const Registry& registry();

// Adds k as `backend`'s kernel for domain::op, only if the op's schema is registered
// (a build or test registry without the op's family gets none of its kernels), with
// the arguments it takes in Blocked16c when `layouts` is given (ops/core/kernel_facts.h).
void add_if_schema(Registry& r, const std::string& backend, const std::string& domain, const std::string& op, Kernel k,
                   LayoutRule layouts = nullptr);

// Each op family provides one function per registration list (ops/<family>.cpp,
// ops/<family>_cpu.cpp, ops/<family>_cuda.cu); a new family adds one line to each list
// in register_all.cpp.
// Schemas, shape and FLOP rules, reference kernels, in-place pairs:
void register_elementwise(Registry& r);
void register_conv(Registry& r);
void register_conv_transpose(Registry& r);
void register_resize(Registry& r);  // Resize, Upsample (as Resize), ResizeGrad
void register_pool(Registry& r);
void register_norm(Registry& r);
void register_gemm(Registry& r);
void register_shape_ops(Registry& r);
void register_softmax_loss(Registry& r);
void register_misc(Registry& r);
void register_optimizer(Registry& r);         // ai.trainrt SGD, Adam, Increment, Assign
void register_preview_training(Registry& r);  // ai.onnx.preview.training Momentum, Adam, Adagrad
void register_fused(Registry& r);             // ai.trainrt FusedConv, BatchNormalizationRelu (passes/passes.h)
// The cpu backend's kernels (oneDNN, oneTBB) and their layouts, after every schema:
void register_elementwise_cpu(Registry& r);
void register_conv_cpu(Registry& r);
void register_conv_transpose_cpu(Registry& r);
void register_resize_cpu(Registry& r);
void register_pool_cpu(Registry& r);
void register_norm_cpu(Registry& r);
void register_gemm_cpu(Registry& r);
void register_shape_ops_cpu(Registry& r);
void register_softmax_loss_cpu(Registry& r);
void register_misc_cpu(Registry& r);
void register_optimizer_cpu(Registry& r);
void register_fused_cpu(Registry& r);

// The cuda backend's kernels (cuDNN, cuBLASLt, own kernels; plain layouts only),
// compiled by nvcc (ops/*_cuda.cu) and declared here so that register_all.cpp stays C++.
namespace cuda {
void register_elementwise_cuda(Registry& r);
void register_conv_cuda(Registry& r);
void register_pool_cuda(Registry& r);
void register_norm_cuda(Registry& r);
void register_gemm_cuda(Registry& r);
void register_shape_ops_cuda(Registry& r);
void register_softmax_loss_cuda(Registry& r);
void register_misc_cuda(Registry& r);
void register_optimizer_cuda(Registry& r);
void register_fused_cuda(Registry& r);  // after norm and misc, whose kernels it runs
}  // namespace cuda

}  // namespace trainrt

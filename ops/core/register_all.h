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

// Adds every op family's schemas and kernels.
void register_all(Registry& r);

// The process-wide registry, filled by register_all() on first use.
const Registry& registry();

// Adds k as `backend`'s kernel for domain::op, only if the op's schema is registered
// (a build or test registry without the op's family gets none of its kernels).
void add_if_schema(Registry& r, const std::string& backend, const std::string& domain, const std::string& op, Kernel k);

// Each op family file provides one of these (ops/<family>.cpp).
void register_elementwise(Registry& r);
void register_conv(Registry& r);
void register_pool(Registry& r);
void register_norm(Registry& r);
void register_gemm(Registry& r);
void register_shape_ops(Registry& r);
void register_softmax_loss(Registry& r);
void register_misc(Registry& r);
void register_optimizer(Registry& r);  // ai.trainrt SGD, Adam, Increment
void register_preview_training(Registry& r);  // ai.onnx.preview.training Momentum, Adam, Adagrad
// oneDNN/oneTBB kernels of the cpu backend (ops/*_dnnl.cpp), after all schemas.
void register_cpu_kernels(Registry& r);
void register_fused(Registry& r);  // ai.trainrt FusedConv, BatchNormalizationRelu (graph/passes.h)
// Which cpu kernels take blocked layouts (ops/layouts_cpu.cpp), after every kernel.
void register_cpu_layouts(Registry& r);

}  // namespace trainrt

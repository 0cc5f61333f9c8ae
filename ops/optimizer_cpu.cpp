// The optimizer ops on the cpu backend (ops/optimizer.cpp has the schemas, the reference
// kernels and the in-place pairs): SGD, Adam, MultiSGD and MultiAdam run the reference's
// update loops (ops/optimizer_loops.h) over oneTBB chunks (the multi ops over the chunks
// of all their parameters at once), so they equal the reference bit for bit.
// Increment (one int64) stays the reference kernel.
//
//   SGD(param, grad, lr, step [, momentum_buf]) -> param' [, momentum_buf']
//   MultiSGD(lr, step, p_1, g_1, [m_1], ...) -> p_1', [m_1'], ...
#include "ops/core/register_all.h"
#include "ops/optimizer_loops.h"

namespace trainrt {

void register_optimizer_cpu(Registry& r) {
  add_if_schema(r, "cpu", kTrainrtDomain, "SGD", [](KernelContext& k) {
    dispatch_float(k.in(0).dtype(), [&](auto tag) { optimizer_loops::sgd<decltype(tag), true>(k); });
  });
  add_if_schema(r, "cpu", kTrainrtDomain, "Adam", [](KernelContext& k) {
    dispatch_float(k.in(0).dtype(), [&](auto tag) { optimizer_loops::adam<decltype(tag), true>(k); });
  });
  add_if_schema(r, "cpu", kTrainrtDomain, "MultiSGD", [](KernelContext& k) {
    dispatch_float(k.in(2).dtype(), [&](auto tag) { optimizer_loops::multi_sgd<decltype(tag), true>(k); });
  });
  add_if_schema(r, "cpu", kTrainrtDomain, "MultiAdam", [](KernelContext& k) {
    dispatch_float(k.in(2).dtype(), [&](auto tag) { optimizer_loops::multi_adam<decltype(tag), true>(k); });
  });
}

}  // namespace trainrt

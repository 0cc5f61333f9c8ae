// The optimizer ops on the cpu backend (ops/optimizer.cpp has the schemas, the reference
// kernels and the in-place pairs): SGD and Adam run the reference's update loops
// (ops/optimizer_loops.h) over oneTBB chunks, so they equal the reference bit for bit.
// Increment (one int64) stays the reference kernel.
//
//   SGD(param, grad, lr, step [, momentum_buf]) -> param' [, momentum_buf']
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
}

}  // namespace trainrt

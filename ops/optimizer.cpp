// Optimizer update ops (domain ai.trainrt), one node per parameter.
//
//   SGD(param, grad, lr, step [, momentum_buf]) -> param' [, momentum_buf']
//     attrs momentum, dampening, nesterov, weight_decay: torch.optim.SGD's rule.
//   Adam(param, grad, lr, step, exp_avg, exp_avg_sq) -> param', exp_avg', exp_avg_sq'
//     attrs beta1, beta2, epsilon, weight_decay, decoupled_weight_decay (1 = AdamW).
//   Increment(step) -> step + 1 (int64 scalar: the number of completed steps)
//   Assign(state, value) -> state' = value (any dtype; in place: the state's own buffer)
//
// `step` counts completed steps before this one (0 on the first step); lr is a
// float32 scalar input so schedules change it without rebuilding the graph.
// The update loops are in ops/optimizer_loops.h; the cpu kernels (ops/optimizer_cpu.cpp)
// run them over parallel chunks (ops/core/parallel.h). Updates are in place (the pairs
// registered below), and each element is read before it is written, so chunks never see
// each other's writes. Assign is how a state update whose producer cannot write it in
// place (BatchNormalization's running statistics) is written by the plan itself, after
// the step's checks, like the optimizer's updates (runtime/training_session.cpp).
#include <cmath>
#include <cstring>

#include "ops/core/common.h"
#include "ops/core/kernel_facts.h"
#include "ops/core/parallel.h"
#include "ops/core/register_all.h"
#include "ops/optimizer_loops.h"

namespace trainrt {

namespace {

void require_same_type(const InferContext& c, size_t a, size_t b) {
  const ValueInfo &x = c.input(a), &y = c.input(b);
  if (x.dtype != y.dtype || x.shape != y.shape)
    c.fail("input " + std::to_string(b) + " '" + c.node().inputs[b] + "' must match input " + std::to_string(a) + " (" +
           dtype_name(x.dtype) + shape_to_string(x.shape.value_or(Shape{})) + "), got " + dtype_name(y.dtype) +
           shape_to_string(y.shape.value_or(Shape{})));
}

void require_scalar(const InferContext& c, size_t i, DataType t) {
  const ValueInfo& v = c.input(i);
  if (v.dtype != t || !v.shape || !v.shape->empty())
    c.fail("input " + std::to_string(i) + " '" + c.node().inputs[i] + "' must be a " + dtype_name(t) + " scalar");
}

}  // namespace

void register_optimizer(Registry& r) {
  OpSchema s;
  s.domain = kTrainrtDomain;
  s.op_type = "SGD";
  s.min_inputs = 4;
  s.max_inputs = 5;
  s.min_outputs = 1;
  s.max_outputs = 2;
  s.attributes = {"momentum", "dampening", "nesterov", "weight_decay"};
  s.infer = [](InferContext& c) {
    require_float(c, 0);
    require_same_type(c, 0, 1);
    require_scalar(c, 2, DataType::Float32);
    require_scalar(c, 3, DataType::Int64);
    if (c.has_input(4)) require_same_type(c, 0, 4);
    if (c.output_count() > 1 && !c.has_input(4)) c.fail("a momentum output needs a momentum buffer input");
    c.set_output(0, c.input(0));
    if (c.has_input(4)) c.set_output(1, c.input(4));
  };
  r.schemas.add(s);
  r.kernels.add("reference", kTrainrtDomain, "SGD", [](KernelContext& k) {
    dispatch_float(k.in(0).dtype(), [&](auto tag) { optimizer_loops::sgd<decltype(tag), false>(k); });
  });
  // In place (here and for Adam, Increment): each element is read before it is written.
  r.kernels.set_in_place(kTrainrtDomain, "SGD", facts::in_place({{0, 0}, {1, 4}}));

  OpSchema a;
  a.domain = kTrainrtDomain;
  a.op_type = "Adam";
  a.min_inputs = a.max_inputs = 6;
  a.min_outputs = a.max_outputs = 3;
  a.attributes = {"beta1", "beta2", "epsilon", "weight_decay", "decoupled_weight_decay"};
  a.infer = [](InferContext& c) {
    require_float(c, 0);
    require_same_type(c, 0, 1);
    require_scalar(c, 2, DataType::Float32);
    require_scalar(c, 3, DataType::Int64);
    require_same_type(c, 0, 4);
    require_same_type(c, 0, 5);
    for (size_t i = 0; i < 3; ++i) c.set_output(i, c.input(i == 0 ? 0 : i + 3));
  };
  r.schemas.add(a);
  r.kernels.add("reference", kTrainrtDomain, "Adam", [](KernelContext& k) {
    dispatch_float(k.in(0).dtype(), [&](auto tag) { optimizer_loops::adam<decltype(tag), false>(k); });
  });
  r.kernels.set_in_place(kTrainrtDomain, "Adam", facts::in_place({{0, 0}, {1, 4}, {2, 5}}));

  OpSchema inc;
  inc.domain = kTrainrtDomain;
  inc.op_type = "Increment";
  inc.infer = [](InferContext& c) {
    require_scalar(c, 0, DataType::Int64);
    c.set_output(0, c.input(0));
  };
  r.schemas.add(inc);
  r.kernels.add("reference", kTrainrtDomain, "Increment",
                [](KernelContext& k) { k.out(0).data<int64_t>()[0] = k.in(0).data<int64_t>()[0] + 1; });
  r.kernels.set_in_place(kTrainrtDomain, "Increment", facts::in_place({{0, 0}}));

  OpSchema as;
  as.domain = kTrainrtDomain;
  as.op_type = "Assign";
  as.min_inputs = as.max_inputs = 2;
  as.infer = [](InferContext& c) {
    require_same_type(c, 0, 1);
    c.set_output(0, c.input(0));
  };
  r.schemas.add(as);
  r.kernels.add("reference", kTrainrtDomain, "Assign", [](KernelContext& k) {
    if (k.out(0).raw() != k.in(1).raw()) std::memmove(k.out(0).raw(), k.in(1).raw(), k.in(1).nbytes());
  });
  r.kernels.set_in_place(kTrainrtDomain, "Assign", facts::in_place({{0, 0}}));
}

}  // namespace trainrt

// Optimizer update ops (domain ai.trainrt), one node per parameter.
//
//   SGD(param, grad, lr, step [, momentum_buf]) -> param' [, momentum_buf']
//     attrs momentum, dampening, nesterov, weight_decay: torch.optim.SGD's rule.
//   Adam(param, grad, lr, step, exp_avg, exp_avg_sq) -> param', exp_avg', exp_avg_sq'
//     attrs beta1, beta2, epsilon, weight_decay, decoupled_weight_decay (1 = AdamW).
//   MultiSGD(lr, step, p_1, g_1, [m_1], p_2, g_2, [m_2], ...) -> p_1', [m_1'], p_2', [m_2'], ...
//     SGD's attributes and update for every parameter: 2 + 2n inputs and n outputs without
//     momentum buffers, 2 + 3n inputs and 2n outputs with (one for every parameter or none).
//   MultiAdam(lr, step, p_1, g_1, exp_avg_1, exp_avg_sq_1, ...) -> p_1', exp_avg_1', exp_avg_sq_1', ...
//     Adam's attributes and update for every parameter.
//   Increment(step) -> step + 1 (int64 scalar: the number of completed steps)
//   Assign(state, value) -> state' = value (any dtype; in place: the state's own buffer)
//
// `step` counts completed steps before this one (0 on the first step); lr is a
// float32 scalar input so schedules change it without rebuilding the graph.
// The multi ops are what passes/fuse_optimizer.cpp makes of the per-parameter nodes that
// share lr, step, attributes and dtype: one kernel for all parameters (one launch on a
// GPU), each parameter's elements updated exactly as its own SGD/Adam node would. Every
// parameter of a multi node has one dtype (float32 or float64); each parameter's tensors
// share its shape. The update loops are in ops/optimizer_loops.h; the cpu kernels
// (ops/optimizer_cpu.cpp) run them over parallel chunks (ops/core/parallel.h). Updates
// are in place (the pairs registered below), and each element is read before it is
// written, so chunks never see each other's writes. Assign is how a state update whose producer cannot write it in
// place (BatchNormalization's running statistics) is written by the plan itself, after
// the step's checks, like the optimizer's updates (runtime/training_session.cpp).
#include <cmath>
#include <cstring>
#include <limits>

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

// The `count` inputs of one parameter of a multi node, from input `first` on: float, of
// the node's first parameter's dtype (input 2), of their own parameter's shape.
void require_group(const InferContext& c, size_t first, size_t count) {
  require_float(c, first);
  if (c.input(first).dtype != c.input(2).dtype)
    c.fail("input " + std::to_string(first) + " '" + c.node().inputs[first] + "' is " +
           dtype_name(c.input(first).dtype) + ", input 2 '" + c.node().inputs[2] + "' is " +
           dtype_name(c.input(2).dtype) + ": every parameter of one node must have one dtype");
  for (size_t i = first + 1; i < first + count; ++i) require_same_type(c, first, i);
}

// Every input and output named (no optional argument in a multi node).
void require_all_named(const InferContext& c) {
  for (size_t i = 0; i < c.node().inputs.size(); ++i)
    if (c.node().inputs[i].empty()) c.fail("input " + std::to_string(i) + " is empty: every argument is required");
  for (size_t i = 0; i < c.node().outputs.size(); ++i)
    if (c.node().outputs[i].empty()) c.fail("output " + std::to_string(i) + " is empty: every argument is required");
}

// The in-place pairs of a multi node. Each parameter has one input more than it has
// outputs (its gradient), so there are (inputs - 2) - outputs parameters, each with
// outputs / parameters outputs: its output 0 over its input 0 (the parameter), its output
// k over its input k + 1 (its k-th state).
std::vector<InPlacePair> multi_in_place(const Node& n, const InPlaceDims&, const std::vector<int64_t>*) {
  std::vector<InPlacePair> all;
  const size_t ins = n.inputs.size(), outs = n.outputs.size();
  const size_t params = ins >= 2 + outs ? ins - 2 - outs : 0;
  if (params == 0 || outs % params != 0) return all;
  const size_t per_out = outs / params;
  for (size_t j = 0; j < params; ++j)
    for (size_t k = 0; k < per_out; ++k) all.push_back({j * per_out + k, 2 + j * (per_out + 1) + (k == 0 ? 0 : k + 1)});
  return all;
}

std::vector<std::string> sgd_attributes() { return {"momentum", "dampening", "nesterov", "weight_decay"}; }
std::vector<std::string> adam_attributes() {
  return {"beta1", "beta2", "epsilon", "weight_decay", "decoupled_weight_decay"};
}

void register_sgd(Registry& r) {
  OpSchema s;
  s.domain = kTrainrtDomain;
  s.op_type = "SGD";
  s.min_inputs = 4;
  s.max_inputs = 5;
  s.min_outputs = 1;
  s.max_outputs = 2;
  s.attributes = sgd_attributes();
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
}

void register_adam(Registry& r) {
  OpSchema a;
  a.domain = kTrainrtDomain;
  a.op_type = "Adam";
  a.min_inputs = a.max_inputs = 6;
  a.min_outputs = a.max_outputs = 3;
  a.attributes = adam_attributes();
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
}

// The training graph's fusion of every SGD / Adam node of a step (passes/fuse_optimizer.cpp).
void register_multi(Registry& r) {
  OpSchema ms;
  ms.domain = kTrainrtDomain;
  ms.op_type = "MultiSGD";
  ms.min_inputs = 4;
  ms.max_inputs = std::numeric_limits<int>::max();
  ms.max_outputs = std::numeric_limits<int>::max();
  ms.attributes = sgd_attributes();
  ms.infer = [](InferContext& c) {
    const size_t ins = c.node().inputs.size(), outs = c.output_count();
    const bool buffers = multi_sgd_has_buffers(ins, outs);
    const size_t per_in = buffers ? 3 : 2, per_out = buffers ? 2 : 1;
    if (outs % per_out != 0 || ins - 2 != outs / per_out * per_in)
      c.fail(
          "takes lr, step and per parameter (param, grad) -> param' or (param, grad, momentum_buf) -> (param', "
          "momentum_buf'); got " +
          std::to_string(ins) + " inputs, " + std::to_string(outs) + " outputs");
    require_all_named(c);
    require_scalar(c, 0, DataType::Float32);
    require_scalar(c, 1, DataType::Int64);
    for (size_t i = 2, o = 0; i < ins; i += per_in, o += per_out) {
      require_group(c, i, per_in);
      for (size_t j = 0; j < per_out; ++j) c.set_output(o + j, c.input(j == 0 ? i : i + 2));
    }
  };
  r.schemas.add(ms);
  r.kernels.add("reference", kTrainrtDomain, "MultiSGD", [](KernelContext& k) {
    dispatch_float(k.in(2).dtype(), [&](auto tag) { optimizer_loops::multi_sgd<decltype(tag), false>(k); });
  });
  r.kernels.set_in_place(kTrainrtDomain, "MultiSGD", multi_in_place);

  OpSchema ma;
  ma.domain = kTrainrtDomain;
  ma.op_type = "MultiAdam";
  ma.min_inputs = 6;
  ma.max_inputs = std::numeric_limits<int>::max();
  ma.min_outputs = 3;
  ma.max_outputs = std::numeric_limits<int>::max();
  ma.attributes = adam_attributes();
  ma.infer = [](InferContext& c) {
    const size_t ins = c.node().inputs.size(), outs = c.output_count();
    if ((ins - 2) % 4 != 0 || outs != (ins - 2) / 4 * 3)
      c.fail("takes lr, step and per parameter (param, grad, exp_avg, exp_avg_sq) with three outputs; got " +
             std::to_string(ins) + " inputs and " + std::to_string(outs) + " outputs");
    require_all_named(c);
    require_scalar(c, 0, DataType::Float32);
    require_scalar(c, 1, DataType::Int64);
    for (size_t i = 2, o = 0; i < ins; i += 4, o += 3) {
      require_group(c, i, 4);
      for (size_t j = 0; j < 3; ++j) c.set_output(o + j, c.input(j == 0 ? i : i + j + 1));
    }
  };
  r.schemas.add(ma);
  r.kernels.add("reference", kTrainrtDomain, "MultiAdam", [](KernelContext& k) {
    dispatch_float(k.in(2).dtype(), [&](auto tag) { optimizer_loops::multi_adam<decltype(tag), false>(k); });
  });
  r.kernels.set_in_place(kTrainrtDomain, "MultiAdam", multi_in_place);
}

// The step counter and the state writes of a training step.
void register_state_ops(Registry& r) {
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

}  // namespace

void register_optimizer(Registry& r) {
  register_sgd(r);
  register_adam(r);
  register_multi(r);
  register_state_ops(r);
}

}  // namespace trainrt

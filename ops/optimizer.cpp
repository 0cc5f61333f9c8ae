// Optimizer update ops (domain ai.trainrt), one node per parameter.
//
//   SGD(param, grad, lr, step [, momentum_buf]) -> param' [, momentum_buf']
//     attrs momentum, dampening, nesterov, weight_decay: torch.optim.SGD's rule.
//   Adam(param, grad, lr, step, exp_avg, exp_avg_sq) -> param', exp_avg', exp_avg_sq'
//     attrs beta1, beta2, epsilon, weight_decay, decoupled_weight_decay (1 = AdamW).
//   Increment(step) -> step + 1 (int64 scalar: the number of completed steps)
//
// `step` counts completed steps before this one (0 on the first step); lr is a
// float32 scalar input so schedules change it without rebuilding the graph.
// The cpu kernels run the reference's per-element update over parallel chunks
// (ops/core/parallel.h); updates are in place (runtime/plan.cpp), and each element is
// read before it is written, so chunks never see each other's writes.
#include <cmath>

#include "ops/core/common.h"
#include "ops/core/kernel_facts.h"
#include "ops/core/parallel.h"
#include "ops/core/register_all.h"

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

// kParallel: the cpu kernel, the same per-element update over parallel chunks
// (ops/core/parallel.h), so it equals the reference bit for bit.
template <typename T, bool kParallel>
void sgd(KernelContext& k) {
  const Tensor &p = k.in(0), &g = k.in(1);
  const double lr = k.in(2).data<float>()[0];
  const bool first = k.in(3).data<int64_t>()[0] == 0;
  const double momentum = k.node.attr_float("momentum", 0.f), dampening = k.node.attr_float("dampening", 0.f);
  const double wd = k.node.attr_float("weight_decay", 0.f);
  const bool nesterov = k.node.attr_int("nesterov", 0) != 0;
  const bool has_buf = k.has_input(4);
  const T *pp = p.data<T>(), *gp = g.data<T>();
  T* out = k.out(0).data<T>();
  const T* buf = has_buf ? k.in(4).data<T>() : nullptr;
  T* buf_out = has_buf && k.has_output(1) ? k.out(1).data<T>() : nullptr;
  for_range<kParallel>(p.numel(), [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      double d = gp[i] + wd * pp[i];
      if (has_buf) {
        // torch.optim.SGD: the buffer starts as the first step's d_p (no dampening).
        double b = first ? d : momentum * buf[i] + (1.0 - dampening) * d;
        if (buf_out) buf_out[i] = static_cast<T>(b);
        d = nesterov ? d + momentum * b : b;
      }
      out[i] = static_cast<T>(pp[i] - lr * d);
    }
  });
}

template <typename T, bool kParallel>
void adam(KernelContext& k) {
  const Tensor& p = k.in(0);
  const double lr = k.in(2).data<float>()[0];
  const double t = static_cast<double>(k.in(3).data<int64_t>()[0] + 1);
  const double b1 = k.node.attr_float("beta1", 0.9f), b2 = k.node.attr_float("beta2", 0.999f);
  const double eps = k.node.attr_float("epsilon", 1e-8f), wd = k.node.attr_float("weight_decay", 0.f);
  const bool decoupled = k.node.attr_int("decoupled_weight_decay", 0) != 0;
  const T *pp = p.data<T>(), *gp = k.in(1).data<T>(), *m = k.in(4).data<T>(), *v = k.in(5).data<T>();
  T *out = k.out(0).data<T>(), *m_out = k.out(1).data<T>(), *v_out = k.out(2).data<T>();
  const double bc1 = 1.0 - std::pow(b1, t), bc2 = 1.0 - std::pow(b2, t);
  for_range<kParallel>(p.numel(), [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      double w = pp[i], g = gp[i];
      if (decoupled)
        w *= 1.0 - lr * wd;  // AdamW
      else
        g += wd * w;  // Adam: L2 penalty folded into the gradient
      double mi = b1 * m[i] + (1.0 - b1) * g;
      double vi = b2 * v[i] + (1.0 - b2) * g * g;
      m_out[i] = static_cast<T>(mi);
      v_out[i] = static_cast<T>(vi);
      out[i] = static_cast<T>(w - (lr / bc1) * mi / (std::sqrt(vi) / std::sqrt(bc2) + eps));
    }
  });
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
    dispatch_float(k.in(0).dtype(), [&](auto tag) { sgd<decltype(tag), false>(k); });
  });
  r.kernels.add("cpu", kTrainrtDomain, "SGD", [](KernelContext& k) {
    dispatch_float(k.in(0).dtype(), [&](auto tag) { sgd<decltype(tag), true>(k); });
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
    dispatch_float(k.in(0).dtype(), [&](auto tag) { adam<decltype(tag), false>(k); });
  });
  r.kernels.add("cpu", kTrainrtDomain, "Adam", [](KernelContext& k) {
    dispatch_float(k.in(0).dtype(), [&](auto tag) { adam<decltype(tag), true>(k); });
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
}

}  // namespace trainrt

// ONNX's ai.onnx.preview.training optimizer ops (opset 1): Momentum, Adam, Adagrad.
//
//   Momentum(R, T, X_1..X_n, G_1..G_n, V_1..V_n) -> X_1'..X_n', V_1'..V_n'
//     attrs alpha, beta, norm_coefficient, mode ("standard" | "nesterov"), all required
//   Adagrad(R, T, X_1..X_n, G_1..G_n, H_1..H_n) -> X_1'..X_n', H_1'..H_n'
//     attrs decay_factor (0), epsilon (1e-6), norm_coefficient (0)
//   Adam(R, T, X_1..X_n, G_1..G_n, V_1..V_n, H_1..H_n) -> X_1'..X_n', V_1'..V_n', H_1'..H_n'
//     attrs alpha (0.9), beta (0.999), epsilon (1e-6), norm_coefficient (0), norm_coefficient_post (0)
//
// R is a float/double scalar learning rate, T the int64 scalar update count (0 on
// the first update). The formulas are the spec's pseudo code (onnx/defs/training/
// defs.cc, the same as onnx/backend/test/case/node/{momentum,adam,adagrad}.py):
//   Momentum: g = norm*X + G;  V' = alpha*V + (T > 0 ? beta : 1)*g;
//             X' = X - R*V' (standard)  or  X - R*(g + alpha*V') (nesterov)
//   Adagrad:  r = R / (1 + T*decay);  g = norm*X + G;  H' = H + g*g;  X' = X - r*g/(sqrt(H') + eps)
//   Adam:     g = norm*X + G;  V' = alpha*V + (1-alpha)*g;  H' = beta*H + (1-beta)*g*g;
//             r = T > 0 ? R*sqrt(1 - beta^T)/(1 - alpha^T) : R;
//             X' = (1 - norm_post) * (X - r*V'/(sqrt(H') + eps))
// Why separate from ops/optimizer.cpp: these are ONNX's interface (several tensors
// per node, attribute-driven), kept to run ONNX's own tests and models that carry
// them; trainrt's training graphs use the ai.trainrt SGD/Adam nodes, whose
// semantics are PyTorch's. The spec's "numpy broadcasting" is not needed by any
// producer we know: every X_i, G_i, V_i, H_i must share one shape and dtype.
// Kernels accumulate in double and run on every backend (the cpu backend uses
// these reference loops: they are per-element and memory bound).
#include <cmath>

#include "ops/core/common.h"
#include "ops/core/register_all.h"

namespace trainrt {

namespace {

constexpr const char* kDomain = "ai.onnx.preview.training";

// Per-tensor state inputs after X and G: Momentum V, Adagrad H -> 1; Adam V, H -> 2.
int state_count(const std::string& op) { return op == "Adam" ? 2 : 1; }

// Checks R, T, the group structure and each group's shapes; sets the outputs.
void infer_optimizer(InferContext& c) {
  const Node& n = c.node();
  const size_t k = 2 + static_cast<size_t>(state_count(n.op_type));  // tensors per optimized X
  const size_t inputs = n.inputs.size(), outputs = n.outputs.size();
  if (inputs < 2 + k || (inputs - 2) % k != 0)
    c.fail("expects R, T and then " + std::to_string(k) + " groups of n tensors (X, G" +
           (k == 3 ? std::string(n.op_type == "Momentum" ? ", V" : ", H") : std::string(", V, H")) + "), got " +
           std::to_string(inputs) + " inputs");
  const size_t count = (inputs - 2) / k;
  if (outputs != count * (k - 1))
    c.fail("optimizes " + std::to_string(count) + " tensor(s), so it needs " + std::to_string(count * (k - 1)) +
           " outputs, got " + std::to_string(outputs));
  for (size_t i = 0; i < inputs; ++i)
    if (!c.has_input(i)) c.fail("input " + std::to_string(i) + " is empty; every input is required");
  const ValueInfo &r = c.input(0), &t = c.input(1);
  if ((r.dtype != DataType::Float32 && r.dtype != DataType::Float64) || !r.shape || !r.shape->empty())
    c.fail("input 0 (R, learning rate) '" + n.inputs[0] + "' must be a float32 or float64 scalar");
  if (t.dtype != DataType::Int64 || !t.shape || !t.shape->empty())
    c.fail("input 1 (T, update count) '" + n.inputs[1] + "' must be an int64 scalar");
  for (size_t j = 0; j < count; ++j) {
    const size_t x = 2 + j;
    require_float(c, x);
    for (size_t g = 1; g < k; ++g) {
      const size_t other = x + g * count;
      const ValueInfo &a = c.input(x), &b = c.input(other);
      if (a.dtype != b.dtype || a.shape != b.shape)
        c.fail("input " + std::to_string(other) + " '" + n.inputs[other] + "' must match X input " + std::to_string(x) +
               " '" + n.inputs[x] + "' (" + dtype_name(a.dtype) + shape_to_string(a.shape.value_or(Shape{})) +
               "), got " + dtype_name(b.dtype) + shape_to_string(b.shape.value_or(Shape{})));
    }
    // Outputs: X_new group, then each state group, in input order.
    for (size_t g = 0; g + 1 < k; ++g) c.set_output(g * count + j, c.input(g == 0 ? x : x + (g + 1) * count));
  }
}

void require_attrs(InferContext& c, std::initializer_list<const char*> names) {
  for (const char* a : names)
    if (!c.node().has_attr(a)) c.fail(std::string("attribute '") + a + "' is required");
}

struct Step {
  double r;      // learning rate R
  int64_t t;     // update count T
  size_t count;  // tensors optimized by the node
};

Step step_of(const KernelContext& k, int per_tensor) {
  return {k.in(0).get_as_double(0), k.in(1).data<int64_t>()[0],
          (k.inputs.size() - 2) / static_cast<size_t>(per_tensor)};
}

template <typename T>
void momentum(KernelContext& k) {
  const Step s = step_of(k, 3);
  const double alpha = k.node.attr_float("alpha", 0.f), norm = k.node.attr_float("norm_coefficient", 0.f);
  const double beta = s.t > 0 ? k.node.attr_float("beta", 0.f) : 1.0;  // the first update takes the whole gradient
  const bool nesterov = k.node.attr_string("mode", "standard") == "nesterov";
  for (size_t j = 0; j < s.count; ++j) {
    const Tensor& x = k.in(2 + j);
    const T *xp = x.data<T>(), *gp = k.in(2 + s.count + j).data<T>(), *vp = k.in(2 + 2 * s.count + j).data<T>();
    T *x_out = k.out(j).data<T>(), *v_out = k.out(s.count + j).data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double g = norm * xp[i] + gp[i];
      const double v = alpha * vp[i] + beta * g;
      v_out[i] = static_cast<T>(v);
      x_out[i] = static_cast<T>(xp[i] - s.r * (nesterov ? g + alpha * v : v));
    }
  }
}

template <typename T>
void adagrad(KernelContext& k) {
  const Step s = step_of(k, 3);
  const double decay = k.node.attr_float("decay_factor", 0.f), eps = k.node.attr_float("epsilon", 1e-6f);
  const double norm = k.node.attr_float("norm_coefficient", 0.f);
  const double r = s.r / (1.0 + static_cast<double>(s.t) * decay);
  for (size_t j = 0; j < s.count; ++j) {
    const Tensor& x = k.in(2 + j);
    const T *xp = x.data<T>(), *gp = k.in(2 + s.count + j).data<T>(), *hp = k.in(2 + 2 * s.count + j).data<T>();
    T *x_out = k.out(j).data<T>(), *h_out = k.out(s.count + j).data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double g = norm * xp[i] + gp[i];
      const double h = hp[i] + g * g;
      h_out[i] = static_cast<T>(h);
      x_out[i] = static_cast<T>(xp[i] - r * g / (std::sqrt(h) + eps));
    }
  }
}

template <typename T>
void adam(KernelContext& k) {
  const Step s = step_of(k, 4);
  const double alpha = k.node.attr_float("alpha", 0.9f), beta = k.node.attr_float("beta", 0.999f);
  const double eps = k.node.attr_float("epsilon", 1e-6f), norm = k.node.attr_float("norm_coefficient", 0.f);
  const double post = k.node.attr_float("norm_coefficient_post", 0.f);
  const double t = static_cast<double>(s.t);
  const double r = s.t > 0 ? s.r * std::sqrt(1.0 - std::pow(beta, t)) / (1.0 - std::pow(alpha, t)) : s.r;
  const size_t n = s.count;
  for (size_t j = 0; j < n; ++j) {
    const Tensor& x = k.in(2 + j);
    const T *xp = x.data<T>(), *gp = k.in(2 + n + j).data<T>();
    const T *vp = k.in(2 + 2 * n + j).data<T>(), *hp = k.in(2 + 3 * n + j).data<T>();
    T *x_out = k.out(j).data<T>(), *v_out = k.out(n + j).data<T>(), *h_out = k.out(2 * n + j).data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double g = norm * xp[i] + gp[i];
      const double v = alpha * vp[i] + (1.0 - alpha) * g;
      const double h = beta * hp[i] + (1.0 - beta) * g * g;
      v_out[i] = static_cast<T>(v);
      h_out[i] = static_cast<T>(h);
      x_out[i] = static_cast<T>((1.0 - post) * (xp[i] - r * v / (std::sqrt(h) + eps)));
    }
  }
}

OpSchema optimizer_schema(const std::string& op, std::vector<std::string> attributes) {
  OpSchema s;
  s.domain = kDomain;
  s.op_type = op;
  const int k = 2 + state_count(op);
  s.min_inputs = 2 + k;
  s.max_inputs = 2 + k * 4096;
  s.min_outputs = k - 1;
  s.max_outputs = (k - 1) * 4096;
  s.attributes = std::move(attributes);
  return s;
}

}  // namespace

void register_preview_training(Registry& r) {
  OpSchema m = optimizer_schema("Momentum", {"alpha", "beta", "norm_coefficient", "mode"});
  m.infer = [](InferContext& c) {
    require_attrs(c, {"alpha", "beta", "norm_coefficient", "mode"});
    const std::string mode = c.node().attr_string("mode", "");
    if (mode != "standard" && mode != "nesterov")
      c.fail("attribute 'mode' must be \"standard\" or \"nesterov\", got \"" + mode + "\"");
    infer_optimizer(c);
  };
  r.schemas.add(m);
  r.kernels.add("reference", kDomain, "Momentum", [](KernelContext& k) {
    dispatch_float(k.in(2).dtype(), [&](auto tag) { momentum<decltype(tag)>(k); });
  });

  OpSchema g = optimizer_schema("Adagrad", {"decay_factor", "epsilon", "norm_coefficient"});
  g.infer = [](InferContext& c) {
    if (c.node().attr_float("decay_factor", 0.f) < 0) c.fail("attribute 'decay_factor' must be >= 0");
    infer_optimizer(c);
  };
  r.schemas.add(g);
  r.kernels.add("reference", kDomain, "Adagrad", [](KernelContext& k) {
    dispatch_float(k.in(2).dtype(), [&](auto tag) { adagrad<decltype(tag)>(k); });
  });

  OpSchema a = optimizer_schema("Adam", {"alpha", "beta", "epsilon", "norm_coefficient", "norm_coefficient_post"});
  a.infer = [](InferContext& c) {
    for (const char* name : {"alpha", "beta"}) {
      const float v = c.node().attr_float(name, 0.5f);
      if (!(v >= 0.f && v < 1.f))
        c.fail(std::string("attribute '") + name + "' must be in [0, 1), got " + std::to_string(v));
    }
    infer_optimizer(c);
  };
  r.schemas.add(a);
  r.kernels.add("reference", kDomain, "Adam",
                [](KernelContext& k) { dispatch_float(k.in(2).dtype(), [&](auto tag) { adam<decltype(tag)>(k); }); });
}

}  // namespace trainrt

#include "autodiff/training_graph.h"

#include <algorithm>
#include <deque>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "autodiff/gradient.h"
#include "graph/error.h"
#include "graph/infer.h"
#include "ops/core/register_all.h"
#include "passes/passes.h"

namespace trainrt {

namespace {

bool slot_differentiable(const GradEntry* e, size_t i) {
  return e && (e->differentiable.empty() || e->differentiable.count(i));
}

bool is_bn_statistic(const Node& n, size_t i) {
  return n.op_type == "BatchNormalization" && canonical_domain(n.domain).empty() && (i == 3 || i == 4);
}

std::string unique_name(const Graph& g, const std::string& want) {
  std::string name = want;
  for (int k = 1; g.find_info(name) || g.is_initializer(name); ++k) name = want + "_" + std::to_string(k);
  return name;
}

// Appends SoftmaxCrossEntropyLoss(mean) to a model that ends in logits, or
// returns the model's own float scalar output.
std::string attach_loss(TrainingGraph& t, const TrainingOptions& o) {
  Graph& g = t.graph;
  for (const std::string& out : g.outputs) {
    const ValueInfo& v = g.info(out);
    if (dtype_is_float(v.dtype) && v.shape && v.shape->empty() && g.outputs.size() == 1) return out;
  }
  for (const std::string& out : g.outputs) {
    const ValueInfo& v = g.info(out);
    if (!dtype_is_float(v.dtype) || !v.shape || v.shape->size() < 2) continue;
    t.labels = unique_name(g, o.labels_name);
    Shape label_shape{(*v.shape)[0]};
    for (size_t i = 2; i < v.shape->size(); ++i) label_shape.push_back((*v.shape)[i]);
    g.inputs.push_back(t.labels);
    g.values[t.labels] = ValueInfo{DataType::Int64, label_shape};
    Node loss;
    loss.name = "loss/SoftmaxCrossEntropyLoss";
    loss.op_type = "SoftmaxCrossEntropyLoss";
    loss.inputs = {out, t.labels};
    std::string name = unique_name(g, "loss");
    loss.outputs = {name};
    loss.attrs["reduction"] = Attribute::of_string("mean");
    g.nodes.push_back(std::move(loss));
    return name;
  }
  throw_bad_input("training",
                  "the model has no float scalar loss output and no logits output ([N,C,...]) to attach "
                  "SoftmaxCrossEntropyLoss to");
}

// Describes the path from `param` to `loss` (first one found), marking the first
// node on it that has no usable gradient rule.
std::string path_description(const Graph& g, const std::string& param, const std::string& loss) {
  auto cons = g.consumers();
  std::unordered_map<std::string, std::pair<std::string, size_t>> prev;  // value -> (value before, node)
  std::deque<std::string> q{param};
  std::unordered_set<std::string> seen{param};
  while (!q.empty()) {
    std::string v = q.front();
    q.pop_front();
    if (v == loss) break;
    for (size_t i : cons[v])
      for (const std::string& o : g.nodes[i].outputs)
        if (!o.empty() && seen.insert(o).second) {
          prev[o] = {v, i};
          q.push_back(o);
        }
  }
  if (!seen.count(loss)) return "";
  std::vector<std::string> hops;
  for (std::string v = loss; v != param; v = prev[v].first) {
    const Node& n = g.nodes[prev[v].second];
    hops.push_back(n.name + " (" + n.op_type + ")");
  }
  std::reverse(hops.begin(), hops.end());
  std::string s = param;
  for (const std::string& h : hops) s += " -> " + h;
  return s;
}

void add_state(Graph& g, TrainingGraph& t, const std::string& name, Tensor init) {
  g.values[name] = ValueInfo{init.dtype(), shape_of(init.dims())};
  g.initializers[name] = std::move(init);
  t.optimizer_state.push_back(name);
}

void append_optimizer(TrainingGraph& t, const TrainingOptions& o) {
  Graph& g = t.graph;
  if (o.optimizer == "none") return;
  if (o.optimizer != "sgd" && o.optimizer != "adam" && o.optimizer != "adamw")
    throw_bad_input("--optimizer", "unknown optimizer '" + o.optimizer + "' (expected sgd, adam or adamw)");
  t.lr = unique_name(g, o.lr_name);
  g.inputs.push_back(t.lr);
  g.values[t.lr] = ValueInfo{DataType::Float32, Shape{}};
  const std::string step = "optimizer.step";
  add_state(g, t, step, Tensor(DataType::Int64, {}));
  for (const std::string& p : t.params) {
    const std::string& grad = t.gradients.at(p);
    const Tensor& value = g.initializers.at(p);
    Node n;
    n.name = "optimizer/" + p;
    n.domain = kTrainrtDomain;
    if (o.optimizer == "sgd") {
      n.op_type = "SGD";
      n.inputs = {p, grad, t.lr, step};
      n.outputs = {p + ".updated"};
      if (o.momentum != 0.f) {
        add_state(g, t, p + ".momentum", Tensor(value.dtype(), value.dims()));
        n.inputs.push_back(p + ".momentum");
        n.outputs.push_back(p + ".momentum.updated");
      }
      n.attrs["momentum"] = Attribute::of_float(o.momentum);
      n.attrs["dampening"] = Attribute::of_float(o.dampening);
      n.attrs["nesterov"] = Attribute::of_int(o.nesterov);
      n.attrs["weight_decay"] = Attribute::of_float(o.weight_decay);
    } else {
      n.op_type = "Adam";
      add_state(g, t, p + ".exp_avg", Tensor(value.dtype(), value.dims()));
      add_state(g, t, p + ".exp_avg_sq", Tensor(value.dtype(), value.dims()));
      n.inputs = {p, grad, t.lr, step, p + ".exp_avg", p + ".exp_avg_sq"};
      n.outputs = {p + ".updated", p + ".exp_avg.updated", p + ".exp_avg_sq.updated"};
      n.attrs["beta1"] = Attribute::of_float(o.beta1);
      n.attrs["beta2"] = Attribute::of_float(o.beta2);
      n.attrs["epsilon"] = Attribute::of_float(o.epsilon);
      n.attrs["weight_decay"] = Attribute::of_float(o.weight_decay);
      n.attrs["decoupled_weight_decay"] = Attribute::of_int(o.optimizer == "adamw");
    }
    g.nodes.push_back(std::move(n));
  }
  Node inc;
  inc.name = "optimizer/step";
  inc.domain = kTrainrtDomain;
  inc.op_type = "Increment";
  inc.inputs = {step};
  inc.outputs = {step + ".updated"};
  g.nodes.push_back(std::move(inc));
}

// The forward graph, sorted, with its loss (appended or its own) and each op's
// training semantics and saved values (Dropout masks, BN running statistics...).
// Returns the model's outputs as they were before.
std::vector<std::string> prepare_forward(TrainingGraph& t, const Graph& forward, const TrainingOptions& o) {
  const GradRegistry& gr = gradients();
  const OpRegistry& schemas = registry().schemas;
  Graph& g = t.graph;
  g = forward;
  g.sort_topologically();
  std::vector<std::string> model_outputs = g.outputs;
  t.loss = attach_loss(t, o);
  infer_shapes(g, schemas, "training graph");
  if (!dtype_is_float(g.info(t.loss).dtype) || !g.info(t.loss).shape || !g.info(t.loss).shape->empty())
    throw_bad_input("training", "loss '" + t.loss + "' must be a float scalar");
  // Shape computations whose inputs' shapes are known fold before differentiation, so
  // they neither run nor take part in autodiff; with a symbolic batch the rest folds
  // when the plan is specialised. Float initializers (parameters, BN statistics) stay.
  SimplifyOptions fold;
  for (const auto& [name, value] : g.initializers)
    if (dtype_is_float(value.dtype())) fold.variable.insert(name);
  fold.keep = g.outputs;
  // Constant nodes fold too (a fixed-batch export's Clip bounds): they would run each step.
  const bool constants = std::any_of(g.nodes.begin(), g.nodes.end(), [](const Node& n) {
    return n.op_type == "Constant" && (n.domain.empty() || n.domain == "ai.onnx");
  });
  if (constants || has_shape_computation(g)) fold_shapes(g, schemas, fold);
  for (Node& n : g.nodes)
    if (const GradEntry* e = gr.find(n.domain, n.op_type); e && e->prepare) e->prepare(n, g);
  infer_shapes(g, schemas, "training graph");
  t.forward_nodes = g.nodes.size();
  return model_outputs;
}

// The parameters and every float value computed from one through a differentiable slot.
std::unordered_set<std::string> values_needing_gradients(const Graph& g, const std::vector<std::string>& params) {
  const GradRegistry& gr = gradients();
  std::unordered_set<std::string> needs(params.begin(), params.end());
  for (const Node& n : g.nodes) {
    const GradEntry* e = gr.find(n.domain, n.op_type);
    bool any = false;
    for (size_t i = 0; i < n.inputs.size(); ++i)
      any = any || (e && slot_differentiable(e, i) && !is_bn_statistic(n, i) && needs.count(n.inputs[i]));
    if (any)
      for (const std::string& out : n.outputs)
        if (!out.empty() && dtype_is_float(g.info(out).dtype)) needs.insert(out);
  }
  return needs;
}

// Pending contributions to one value's gradient that are summed into one partial Sum at
// once, where they arrive, instead of all waiting for the final Sum: a weight read by many
// nodes (an unrolled LSTM's R, once per time step) would otherwise keep one gradient of
// its size alive per reader. Fan-outs below it (residual branches, attention's q/k/v)
// keep their single Sum.
constexpr size_t kPartialSumEvery = 8;

// The backward pass under construction. Rules add contributions to a value's gradient;
// the driver sums them (one Sum node per fanned-out value, and a partial Sum every
// kPartialSumEvery contributions) when the gradient is first read.
struct BackwardPass {
  Graph& g;
  std::vector<Node> nodes;                  // appended to g once complete
  std::map<std::string, Tensor> constants;  // initializers the rules need
  std::unordered_map<std::string, std::vector<std::string>> contributions;
  std::unordered_map<std::string, int> partial_sums;  // per value: partial Sums made so far
  std::unordered_map<std::string, std::string> final_grad;
  std::vector<std::pair<std::string, std::string>> grad_of;  // (gradient, value it belongs to)

  // The complete gradient of `v` ("" when nothing contributed); later contributions are not seen.
  std::string gradient(const std::string& v) {
    if (auto it = final_grad.find(v); it != final_grad.end()) return it->second;
    auto& parts = contributions[v];
    std::string name;
    if (parts.size() == 1) {
      name = parts[0];
    } else if (parts.size() > 1) {
      name = unique_name(g, v + "_grad");
      add_sum(v + "/grad/Sum", parts, name);
    }
    final_grad[v] = name;
    return name;
  }

  // Adds `dv` to the gradient of `v`; every kPartialSumEvery pending ones become one.
  void contribute(const std::string& v, const std::string& dv) {
    auto& parts = contributions[v];
    parts.push_back(dv);
    if (parts.size() < kPartialSumEvery) return;
    const std::string name = unique_name(g, v + "_grad_part" + std::to_string(partial_sums[v]++));
    add_sum(name + "/Sum", parts, name);
    parts = {name};
  }

  // Appends the node `out` = Sum(parts), named `node_name`.
  void add_sum(const std::string& node_name, const std::vector<std::string>& parts, const std::string& out) {
    Node sum;
    sum.name = node_name;
    sum.op_type = "Sum";
    sum.inputs = parts;
    sum.outputs = {out};
    nodes.push_back(std::move(sum));
  }
};

// The loss's gradient: a constant 1, or the loss scale (a new float32 scalar input).
void seed_loss_gradient(TrainingGraph& t, BackwardPass& bp, const TrainingOptions& o) {
  Graph& g = t.graph;
  if (o.loss_scale_name.empty()) {
    Tensor seed(g.info(t.loss).dtype, {});
    seed.set_from_double(0, 1.0);
    const std::string seed_name = unique_name(g, t.loss + "_grad");
    bp.constants[seed_name] = seed;
    bp.contributions[t.loss].push_back(seed_name);
  } else {
    if (g.info(t.loss).dtype != DataType::Float32)
      throw_bad_input("loss scaling", "needs a float32 loss, '" + t.loss + "' is " + dtype_name(g.info(t.loss).dtype));
    t.loss_scale = unique_name(g, o.loss_scale_name);
    g.inputs.push_back(t.loss_scale);
    g.values[t.loss_scale] = ValueInfo{DataType::Float32, Shape{}};
    bp.contributions[t.loss].push_back(t.loss_scale);
  }
}

// Forward nodes last to first: each node's rule turns its outputs' gradients into
// contributions to the gradients of the inputs that need one.
void reverse_pass(const TrainingGraph& t, BackwardPass& bp, const std::unordered_set<std::string>& needs) {
  const GradRegistry& gr = gradients();
  Graph& g = bp.g;
  for (size_t idx = t.forward_nodes; idx-- > 0;) {
    const Node& n = g.nodes[idx];
    const GradEntry* e = gr.find(n.domain, n.op_type);
    if (!e) continue;
    std::vector<std::string> dys;
    bool any_dy = false;
    for (const std::string& out : n.outputs) {
      dys.push_back(out.empty() ? "" : bp.gradient(out));
      any_dy = any_dy || !dys.back().empty();
    }
    if (!any_dy) continue;
    std::vector<bool> want(n.inputs.size(), false);
    bool any = false;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      want[i] = !n.inputs[i].empty() && needs.count(n.inputs[i]) && slot_differentiable(e, i) && !is_bn_statistic(n, i);
      any = any || want[i];
    }
    if (!any) continue;
    GradBuilder b(g, n, dys, want, bp.nodes);
    e->rule(b);
    for (auto& [k, v] : b.constants) bp.constants[k] = v;
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (want[i]) {
        bp.contribute(n.inputs[i], b.dx(i));
        bp.grad_of.emplace_back(b.dx(i), n.inputs[i]);
      }
  }
}

// The first node on `path` (path_description) that reads `param` or a value derived
// from it and passes no gradient back, as "<why> Op (node 'name')"; "" if none is found.
std::string gradient_blocker(const Graph& g, const std::string& param, const std::unordered_set<std::string>& needs,
                             const std::string& path) {
  const GradRegistry& gr = gradients();
  for (const Node& n : g.nodes) {
    bool reads = std::find(n.inputs.begin(), n.inputs.end(), param) != n.inputs.end() ||
                 std::any_of(n.inputs.begin(), n.inputs.end(), [&](const std::string& in) { return needs.count(in); });
    // A node with a rule blocks too when no output is float (integer outputs carry no gradient).
    const bool has_rule = gr.find(n.domain, n.op_type) != nullptr;
    const bool float_out = std::any_of(n.outputs.begin(), n.outputs.end(), [&](const std::string& out) {
      const ValueInfo* v = out.empty() ? nullptr : g.find_info(out);
      return v && dtype_is_float(v->dtype);
    });
    if (!reads || (has_rule && float_out)) continue;
    if (path.find(" -> " + n.name + " (") == std::string::npos) continue;
    std::string blocker = has_rule ? "op with non-float outputs (no gradient flows through them) "
                          : gr.is_non_differentiable(n.domain, n.op_type) ? "non-differentiable op "
                                                                          : "op without a gradient rule ";
    return blocker + n.op_type + " (node '" + n.name + "')";
  }
  return "";
}

// Parameters: gradient present, or an error naming the blocking op and path. Fills
// t.params in the order the backward pass completes their gradients.
void collect_parameter_gradients(TrainingGraph& t, BackwardPass& bp, const std::vector<std::string>& params,
                                 const std::unordered_set<std::string>& needs) {
  for (const std::string& p : params) {
    std::string grad = bp.gradient(p);
    if (!grad.empty()) {
      t.params.push_back(p);
      t.gradients[p] = grad;
      continue;
    }
    std::string path = path_description(t.graph, p, t.loss);
    if (path.empty()) continue;  // does not influence the loss: stays as it is
    std::string blocker = gradient_blocker(t.graph, p, needs, path);
    throw_bad_input("training", "parameter '" + p + "' reaches the loss only through " +
                                    (blocker.empty() ? std::string("ops that give it no gradient") : blocker) +
                                    "; path: " + path);
  }
  std::unordered_map<std::string, size_t> produced_at;
  for (size_t i = 0; i < bp.nodes.size(); ++i)
    for (const std::string& out : bp.nodes[i].outputs) produced_at[out] = i;
  std::stable_sort(t.params.begin(), t.params.end(), [&](const std::string& a, const std::string& b) {
    return produced_at[t.gradients[a]] < produced_at[t.gradients[b]];
  });
}

// Loss scaling: each parameter's gradient divided by the scale, right after it is complete.
void append_unscaling(TrainingGraph& t, BackwardPass& bp) {
  if (t.loss_scale.empty()) return;
  for (const std::string& p : t.params) {
    const std::string scaled = t.gradients[p];
    Node div;
    div.name = p + "/grad/unscale";
    div.op_type = "Div";
    div.inputs = {scaled, t.loss_scale};
    div.outputs = {unique_name(t.graph, scaled + ".unscaled")};
    t.scaled_gradients[p] = scaled;
    t.gradients[p] = div.outputs[0];
    bp.nodes.push_back(std::move(div));
  }
}

// Outputs: loss, the model's outputs, then every state update (and, without an
// optimizer, the gradients).
void set_training_outputs(TrainingGraph& t, const std::vector<std::string>& model_outputs, const TrainingOptions& o) {
  Graph& g = t.graph;
  g.outputs = {t.loss};
  for (const std::string& out : model_outputs)
    if (out != t.loss) g.outputs.push_back(out);
  std::set<std::string> produced;
  for (const Node& n : g.nodes)
    for (const std::string& out : n.outputs) produced.insert(out);
  for (const auto& [name, tensor] : g.initializers)
    if (produced.count(name + ".updated")) {
      t.updates.emplace_back(name + ".updated", name);
      g.outputs.push_back(name + ".updated");
    }
  if (o.optimizer == "none")
    for (const std::string& p : t.params) g.outputs.push_back(t.gradients[p]);
}

// Sorts, prunes, validates and re-infers the training graph, then checks that every
// gradient has its value's dtype and shape (a rule bug otherwise).
void finish_and_check(Graph& g, const std::vector<std::pair<std::string, std::string>>& grad_of) {
  const OpRegistry& schemas = registry().schemas;
  g.opsets[kTrainrtDomain] = 1;
  g.sort_topologically();
  eliminate_dead_nodes(g);
  validate_graph(g, schemas, "training graph");
  infer_shapes(g, schemas, "training graph");
  for (const auto& [grad, v] : grad_of) {
    const ValueInfo* b = g.find_info(grad);
    if (!b) continue;  // pruned: nothing needed it
    const ValueInfo& a = g.info(v);
    if (a.dtype != b->dtype || a.shape != b->shape)
      throw_internal("autodiff", "gradient '" + grad + "' is " + dtype_name(b->dtype) +
                                     shape_to_string(b->shape.value_or(Shape{})) + " but '" + v + "' is " +
                                     dtype_name(a.dtype) + shape_to_string(a.shape.value_or(Shape{})));
  }
}

}  // namespace

std::vector<std::string> trainable_parameters(const Graph& g, const std::vector<std::string>& freeze) {
  const GradRegistry& gr = gradients();
  std::set<std::string> frozen(freeze.begin(), freeze.end());
  for (const std::string& f : frozen)
    if (!g.is_initializer(f)) throw_bad_input("--freeze " + f, "is not an initializer of the model");
  std::set<std::string> in_diff_slot, in_other_slot;
  for (const Node& n : g.nodes) {
    const GradEntry* e = gr.find(n.domain, n.op_type);
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.inputs[i].empty()) continue;
      bool diff =
          !is_bn_statistic(n, i) && (e ? slot_differentiable(e, i) : !gr.is_non_differentiable(n.domain, n.op_type));
      (diff ? in_diff_slot : in_other_slot).insert(n.inputs[i]);
    }
  }
  std::vector<std::string> out;
  for (const auto& [name, t] : g.initializers)
    if (dtype_is_float(t.dtype()) && !frozen.count(name) && in_diff_slot.count(name)) out.push_back(name);
  return out;
}

TrainingGraph build_training_graph(const Graph& forward, const TrainingOptions& o) {
  TrainingGraph t;
  const std::vector<std::string> model_outputs = prepare_forward(t, forward, o);
  Graph& g = t.graph;
  // The model's own initializers: a float Constant node that folded into one while
  // shapes were folded (GELU's 0.5, attention's scale) is no parameter.
  std::vector<std::string> params = trainable_parameters(g, o.freeze);
  std::erase_if(params, [&](const std::string& p) { return !forward.is_initializer(p); });
  const std::unordered_set<std::string> needs = values_needing_gradients(g, params);

  BackwardPass bp{g, {}, {}, {}, {}, {}, {}};
  seed_loss_gradient(t, bp, o);
  reverse_pass(t, bp, needs);
  collect_parameter_gradients(t, bp, params, needs);
  append_unscaling(t, bp);
  // The backward pass joins the graph, then the optimizer reads the finished gradients.
  for (auto& [name, c] : bp.constants) {
    g.values[name] = ValueInfo{c.dtype(), shape_of(c.dims())};
    g.initializers[name] = c;
  }
  for (Node& n : bp.nodes) g.nodes.push_back(std::move(n));
  append_optimizer(t, o);

  set_training_outputs(t, model_outputs, o);
  finish_and_check(g, bp.grad_of);
  return t;
}

}  // namespace trainrt

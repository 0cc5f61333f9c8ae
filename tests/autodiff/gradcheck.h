// Finite-difference check of the training graph's gradients (fp64, reference).
//
//   Graph f = ...;                               // float64 forward graph, params as initializers
//   TensorMap feeds{{"x", x}, {"labels", y}};    // model inputs (+ labels when logits)
//   GradCheck r = check_gradients(f, feeds);
//   CHECK(r.max_error < 1e-6);
//
// Central differences (L(p+h) - L(p-h)) / 2h on up to `samples` elements of every
// parameter; the error is |analytic - numeric| / max(1, |numeric|) so it is
// relative for large gradients and absolute for small ones. Dropout masks are
// fixed by the run's seed, so the loss is a deterministic function of the
// parameters; ReLU/MaxPool kinks are avoided by random inputs (a kink within h
// of an input would show as a large error on one element).
//
// GradNet builds the forward graphs these checks take, one node at a time:
//
//   GradNet net(13);                                   // opset; first random seed 1
//   std::string y = net.node("Relu", {net.param("w", {2, 3})});
//   check_net(net, y);                                 // loss = ReduceMean(y * r), r random
#pragma once

#include <sstream>

#include "autodiff/training_graph.h"
#include "test_util.h"

namespace trainrt::test {

struct GradCheck {
  double max_error = 0;
  std::string worst;   // "param[i]: analytic a, numeric n"
  size_t checked = 0;  // elements compared
  TrainingGraph training;
};

inline GradCheck check_gradients(const Graph& forward, const TensorMap& feeds, int samples = 12, double h = 1e-6,
                                 const std::string& backend = "reference", uint64_t seed = 7) {
  TrainingOptions o;
  o.optimizer = "none";
  GradCheck r;
  r.training = build_training_graph(forward, o);
  const TrainingGraph& t = r.training;
  auto b = make_backend(backend);
  RunOptions ro;
  ro.training = true;
  ro.seed = seed;
  TensorMap analytic = run_graph(t.graph, feeds, *b, ro);
  Graph g = t.graph;  // perturbed copy
  auto loss_at = [&]() { return run_graph(g, feeds, *b, ro).at(t.loss).get_as_double(0); };
  for (const std::string& p : t.params) {
    const Tensor& grad = analytic.at(t.gradients.at(p));
    Tensor& w = g.initializers.at(p);
    Tensor original = w.clone();
    const int64_t n = w.numel();
    const int64_t stride = std::max<int64_t>(1, n / samples);
    for (int64_t i = 0; i < n; i += stride) {
      w = original.clone();
      w.set_from_double(i, original.get_as_double(i) + h);
      double up = loss_at();
      w = original.clone();
      w.set_from_double(i, original.get_as_double(i) - h);
      double down = loss_at();
      double numeric = (up - down) / (2 * h), a = grad.get_as_double(i);
      double err = std::fabs(a - numeric) / std::max(1.0, std::fabs(numeric));
      ++r.checked;
      if (err > r.max_error || std::isnan(err)) {
        r.max_error = std::isnan(err) ? INFINITY : err;
        std::ostringstream s;
        s << p << "[" << i << "]: analytic " << a << ", numeric " << numeric;
        r.worst = s.str();
      }
    }
    w = original;
  }
  return r;
}

using GradAttrs = std::map<std::string, Attribute>;

// A forward graph under construction: parameters and constants are initializers, feeds are
// graph inputs, and every random tensor takes the next seed, so a test's values depend only
// on the order of its calls.
struct GradNet {
  Graph g;
  TensorMap feeds;
  uint64_t seed = 1;
  DataType dtype = DataType::Float64;  // of parameters
  double lo = -1, hi = 1;              // range of parameters when a call names none

  explicit GradNet(int64_t opset = 17, uint64_t first_seed = 1) : seed(first_seed) {
    g.name = "gradcheck";
    g.opsets[""] = opset;
  }
  std::string param(const std::string& name, std::vector<int64_t> dims) { return param(name, std::move(dims), lo, hi); }
  std::string param(const std::string& name, std::vector<int64_t> dims, double low, double high) {
    return constant(name, random_tensor(dtype, std::move(dims), seed++, low, high));
  }
  std::string constant(const std::string& name, Tensor t) {
    g.values[name] = ValueInfo{t.dtype(), shape_of(t.dims())};
    g.initializers[name] = std::move(t);
    return name;
  }
  std::string feed(const std::string& name, Tensor t) {
    g.values[name] = ValueInfo{t.dtype(), shape_of(t.dims())};
    g.inputs.push_back(name);
    feeds[name] = std::move(t);
    return name;
  }
  // Appends a node with the given outputs, or with `count` fresh ones ("v<node>_<k>").
  std::vector<std::string> node_n(const std::string& op, std::vector<std::string> ins, size_t count,
                                  GradAttrs attrs = {}) {
    std::vector<std::string> outs;
    for (size_t k = 0; k < count; ++k) outs.push_back("v" + std::to_string(g.nodes.size()) + "_" + std::to_string(k));
    return add(op, std::move(ins), std::move(outs), std::move(attrs));
  }
  // Appends a node; its one output is `out`, or a fresh name. Returns the output.
  std::string node(const std::string& op, std::vector<std::string> ins, GradAttrs attrs = {},
                   const std::string& out = "") {
    return add(op, std::move(ins), {out.empty() ? "v" + std::to_string(g.nodes.size()) : out}, std::move(attrs))[0];
  }
  // A braced list of output names would construct `out` from two pointers: node_outs takes it.
  std::string node(const std::string& op, std::vector<std::string> ins, GradAttrs attrs,
                   std::initializer_list<const char*> outs) = delete;
  // Appends a node with the given outputs (an empty name: an omitted optional output).
  std::vector<std::string> node_outs(const std::string& op, std::vector<std::string> ins, GradAttrs attrs,
                                     std::vector<std::string> outs) {
    return add(op, std::move(ins), std::move(outs), std::move(attrs));
  }
  void infer() {
    validate_graph(g, registry().schemas, "test");
    infer_shapes(g, registry().schemas, "test");
  }
  // Appends `name` = ReduceMean(y * r) for a random r in [r_lo, r_hi) of y's shape.
  std::string weighted_mean(const std::string& y, const std::string& name, double r_lo = -1, double r_hi = 1,
                            const std::string& r_name = "r") {
    const ValueInfo& v = g.info(y);
    REQUIRE(v.dtype == dtype);
    const std::string r = feed(r_name, random_tensor(v.dtype, shape_dims(*v.shape), seed++, r_lo, r_hi));
    return node("ReduceMean", {node("Mul", {y, r})}, {{"keepdims", Attribute::of_int(0)}}, name);
  }
  // Makes loss = ReduceMean(y * r) the graph's one output.
  Graph& finish(const std::string& y, double r_lo = -1, double r_hi = 1) {
    infer();
    weighted_mean(y, "loss", r_lo, r_hi);
    g.outputs = {"loss"};
    infer();
    return g;
  }

 private:
  std::vector<std::string> add(const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs,
                               GradAttrs attrs) {
    Node n = make_node(op, std::move(ins), std::move(outs), std::move(attrs));
    n.name = op + "_" + std::to_string(g.nodes.size());
    g.nodes.push_back(n);
    return g.nodes.back().outputs;
  }
};

// Finite differences of every parameter of `net` with loss ReduceMean(y * r).
inline GradCheck check_net(GradNet& net, const std::string& y, int samples = 12, double tolerance = 1e-6,
                           double r_lo = -1, double r_hi = 1) {
  GradCheck r = check_gradients(net.finish(y, r_lo, r_hi), net.feeds, samples);
  CAPTURE(r.worst);
  CHECK(r.checked > 0);
  CHECK(r.max_error < tolerance);
  return r;
}

}  // namespace trainrt::test

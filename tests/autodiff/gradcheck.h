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

}  // namespace trainrt::test

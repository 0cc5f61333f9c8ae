// A small, typed Wide ResNet for the pass tests, with BatchNormalization parameters
// and running statistics drawn at random so that folding and fusing them matters.
//
//   Graph g = random_bn_wrn({4, 8, 12, 16}, /*dropout=*/0.01f, /*seed=*/3);
#pragma once

#include <algorithm>
#include <random>

#include "graph/infer.h"
#include "models/wrn.h"
#include "test_util.h"

namespace trainrt::test {

inline Graph random_bn_wrn(std::vector<int64_t> widths, float dropout, uint64_t seed) {
  WrnOptions o = wrn_options_for_dataset("fashion-mnist");
  o.widths = std::move(widths);
  o.dropout_ratio = dropout;
  Graph g = build_wide_resnet(o);
  std::mt19937_64 rng(seed);
  // scale in [0.5, 1.5], bias and mean in [-0.5, 0.5], var in [0.5, 2]
  const double lo[] = {0.5, -0.5, -0.5, 0.5}, hi[] = {1.5, 0.5, 0.5, 2.0};
  for (const Node& n : g.nodes) {
    if (n.op_type != "BatchNormalization") continue;
    for (size_t k = 1; k < 5; ++k) {
      Tensor& t = g.initializers.at(n.inputs[k]);
      std::uniform_real_distribution<double> u(lo[k - 1], hi[k - 1]);
      for (int64_t i = 0; i < t.numel(); ++i) t.set_from_double(i, u(rng));
    }
  }
  validate_graph(g, registry().schemas, "wrn");
  infer_shapes(g, registry().schemas, "wrn");
  return g;
}

// Node count per op type (domain-qualified for ai.trainrt).
inline std::map<std::string, size_t> op_counts(const Graph& g) {
  std::map<std::string, size_t> c;
  for (const Node& n : g.nodes) ++c[n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type];
  return c;
}

// max |a - b| / max |b| (0 when both are zero).
inline double rel_diff(const Tensor& a, const Tensor& b) {
  double scale = 0;
  for (int64_t i = 0; i < b.numel(); ++i) scale = std::max(scale, std::fabs(b.get_as_double(i)));
  const double d = max_abs_diff(a, b);
  return scale == 0 ? d : d / scale;
}

}  // namespace trainrt::test

// Finite differences through the whole Wide ResNet (the builder's graph at
// widths 2,3,4,5 on 28x28 inputs, batch 2), in float64 on the reference backend:
// every rule of the model (Conv with and without bias, BatchNormalization in
// training, Relu, Dropout with its seeded mask, Add, MaxPool, AveragePool 7,
// Flatten, Gemm, the appended SoftmaxCrossEntropyLoss) composed as trained.
#include <doctest/doctest.h>

#include "gradcheck.h"
#include "graph/infer.h"
#include "models/wrn.h"

using namespace trainrt;
using namespace trainrt::test;

TEST_CASE("Wide ResNet at small widths: every parameter gradient matches finite differences") {
  WrnOptions o = wrn_options_for_dataset("fashion-mnist");
  o.widths = {2, 3, 4, 5};
  Graph g = build_wide_resnet(o);
  // The same model in float64: parameters, ratios and the input.
  for (auto& [name, t] : g.initializers) {
    if (t.dtype() != DataType::Float32) continue;
    t = t.cast(DataType::Float64);
    g.values[name].dtype = DataType::Float64;
  }
  g.values.at(g.inputs[0]).dtype = DataType::Float64;
  for (auto& [name, v] : g.values)
    if (v.dtype == DataType::Float32) v.dtype = DataType::Float64;
  validate_graph(g, registry().schemas, "wrn");
  infer_shapes(g, registry().schemas, "wrn");
  Tensor labels(DataType::Int64, {2});
  labels.data<int64_t>()[0] = 3;
  labels.data<int64_t>()[1] = 7;
  GradCheck r =
      check_gradients(g, {{g.inputs[0], random_tensor(DataType::Float64, {2, 1, 28, 28}, 5)}, {"labels", labels}},
                      /*samples=*/2);
  CHECK(r.training.params.size() == 47);
  CHECK(r.checked >= 94);
  CHECK_MESSAGE(r.max_error < 1e-6, r.worst);
}

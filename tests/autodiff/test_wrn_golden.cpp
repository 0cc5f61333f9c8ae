// The training graph of PyTorch's own export of the seed's Wide ResNet (small
// widths, Dropout p=0) against PyTorch: loss and every parameter gradient of one
// batch, and every parameter after 3 SGD steps (lr 0.01, momentum 0.9, weight
// decay 5e-4). Golden data: tools/golden_wrn_training.py.
//
// Tolerance: both sides compute in fp32 with different summation orders (conv
// reductions of up to 8*28*28 terms, BN statistics). Measured: the largest
// difference is 4.3e-6 of the tensor's largest magnitude; we allow rtol 1e-4
// plus atol 5e-5 * max|golden| (a wrong rule is off by O(1) of that scale).
#include <doctest/doctest.h>

#include <filesystem>

#include "autodiff/training_graph.h"
#include "golden_files.h"
#include "graph/onnx_io.h"
#include "runtime/training_session.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

const std::string kDir = std::string(TRAINRT_TEST_DATA) + "/wrn_golden/";

Tensor golden(const std::string& name) { return read_tensor_file(golden_file(kDir + name + ".pb")); }

double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(t.get_as_double(i)));
  return m;
}

void check_close(const Tensor& got, const Tensor& want, const std::string& what) {
  CAPTURE(what);
  REQUIRE(got.dims() == want.dims());
  const double atol = 5e-5 * std::max(max_abs(want), 1e-6);
  CHECK_MESSAGE(all_close(got, want, 1e-4, atol),
                what << ": max abs diff " << max_abs_diff(got, want) << " (scale " << max_abs(want) << ")");
}

// The parameter names of the golden files "<prefix><param>.pb".
std::vector<std::string> golden_params(const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(golden_dir(kDir))) {
    std::string f = e.path().filename().string();
    if (f.rfind(prefix, 0) == 0) out.push_back(f.substr(prefix.size(), f.size() - prefix.size() - 3));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("Wide ResNet: loss and gradients equal PyTorch's on both backends") {
  Graph g = import_onnx_file(golden_file(kDir + "model.onnx"), registry().schemas);
  TrainingOptions o;
  o.optimizer = "none";
  TrainingGraph t = build_training_graph(g, o);
  std::vector<std::string> params = t.params;
  std::sort(params.begin(), params.end());
  REQUIRE(params.size() == 47);
  CHECK(params == golden_params("grad."));
  for (const std::string backend : {"reference", "cpu"}) {
    CAPTURE(backend);
    RunOptions ro;
    ro.training = true;
    TensorMap out =
        run_graph(t.graph, {{"input", golden("input")}, {t.labels, golden("labels")}}, *make_backend(backend), ro);
    check_close(out.at(t.loss), golden("loss"), "loss");
    for (const std::string& p : t.params) check_close(out.at(t.gradients.at(p)), golden("grad." + p), "grad of " + p);
  }
}

TEST_CASE("Wide ResNet: parameters after 3 SGD steps equal PyTorch's") {
  Graph g = import_onnx_file(golden_file(kDir + "model.onnx"), registry().schemas);
  TrainingOptions o;
  o.optimizer = "sgd";
  o.momentum = 0.9f;
  o.weight_decay = 5e-4f;
  TrainingSession s(build_training_graph(g, o), make_backend("cpu"));
  const Tensor x = golden("input"), y = golden("labels");
  for (int i = 0; i < 3; ++i) s.step({{"input", x}, {s.training().labels, y}}, 0.01f);
  // One golden file per parameter: none may be missing, or its comparison would be skipped.
  std::vector<std::string> params = s.training().params;
  std::sort(params.begin(), params.end());
  REQUIRE(params.size() == 47);
  CHECK(golden_params("after3.") == params);
  for (const std::string& p : params) check_close(s.state(p), golden("after3." + p), p);
}

// The Wide ResNet builder typed by the op schemas of ops/ (Conv, BatchNormalization,
// Relu, Dropout, Add, MaxPool, AveragePool, Flatten, Gemm; the PyTorch exports also
// use Constant, Pad and Identity): inferred shapes, import round trip, PyTorch files.
#include <doctest/doctest.h>

#include "golden_files.h"
#include "graph/infer.h"
#include "graph/onnx_io.h"
#include "models/wrn.h"
#include "ops/core/register_all.h"

using namespace trainrt;

namespace {

const std::string kData = TRAINRT_TEST_DATA;

Graph typed(Graph g) {
  validate_graph(g, registry().schemas, "wrn");
  infer_shapes(g, registry().schemas, "wrn");
  return g;
}

}  // namespace

TEST_CASE("wrn: shapes infer to logits [N,classes] with the symbolic batch") {
  struct Case {
    std::string dataset;
    int64_t classes, last_side;
  };
  for (const Case& c : {Case{"cifar100", 100, 8}, Case{"cifar10", 10, 8}, Case{"fashion-mnist", 10, 7}}) {
    CAPTURE(c.dataset);
    Graph g = typed(build_wide_resnet(wrn_options_for_dataset(c.dataset)));
    REQUIRE(g.info("logits").shape);
    CHECK(shape_to_string(*g.info("logits").shape) == "[N," + std::to_string(c.classes) + "]");
    CHECK(g.info("logits").dtype == DataType::Float32);
    // The last map is 8x8 on CIFAR, 7x7 on Fashion-MNIST; AveragePool 7/7 makes both 1x1.
    CHECK(shape_to_string(*g.info("block6/add/out").shape) ==
          "[N,640," + std::to_string(c.last_side) + "," + std::to_string(c.last_side) + "]");
    CHECK(shape_to_string(*g.info("pool/out").shape) == "[N,640,1,1]");
    CHECK(shape_to_string(*g.info("pool1/out").shape) ==
          "[N,160," + std::to_string(c.last_side * 2) + "," + std::to_string(c.last_side * 2) + "]");
  }
}

TEST_CASE("wrn: export -> import -> export is byte-identical") {
  for (const std::string& d : wrn_datasets()) {
    CAPTURE(d);
    WrnOptions o = wrn_options_for_dataset(d);
    o.widths = {4, 8, 12, 16};
    Graph g = typed(build_wide_resnet(o));
    const std::string first = export_onnx_bytes(g);
    Graph back = import_onnx_bytes(first, "wrn.onnx", "", registry().schemas);
    CHECK(back.nodes.size() == g.nodes.size());
    CHECK(back.initializers.size() == g.initializers.size());
    CHECK(back.info("logits") == g.info("logits"));
    for (const Node& n : g.nodes) CHECK(back.info(n.outputs[0]) == g.info(n.outputs[0]));
    CHECK(export_onnx_bytes(back) == first);
  }
}

TEST_CASE("wrn: the PyTorch exports import with validation and shape inference") {
  // Training-mode export (opset 13): BatchNormalization with 5 outputs, Dropout with
  // ratio and training_mode inputs; the eval export has BN folded into the convs.
  for (const char* file : {"wrn_small_train.onnx", "wrn_small_eval.onnx"}) {
    CAPTURE(file);
    Graph g = import_onnx_file(test::golden_file(kData + "/" + file), registry().schemas);
    REQUIRE(g.info("logits").shape);
    CHECK(shape_to_string(*g.info("logits").shape) == "[N,10]");
  }
}

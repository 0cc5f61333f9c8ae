// The usage examples at the top of graph/ headers (and ops/core/window.h), written out
// here as they appear there, so an example that names a function or a signature that no
// longer exists stops this file from compiling, and one whose comment promises a result
// fails a check. When a header's example changes, change its case here.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>

#include "graph/error.h"
#include "graph/infer.h"
#include "graph/onnx_io.h"
#include "graph/schema.h"
#include "graph/tensor.h"
#include "ops/core/register_all.h"
#include "ops/core/window.h"
#include "passes/fuse_util.h"
#include "passes/passes.h"

using namespace trainrt;

namespace {
const std::string kModel = std::string(TRAINRT_TEST_DATA) + "/wrn_small_train.onnx";
}

TEST_CASE("graph/error.h: a bad-input message names the file and the node") {
  Node node;
  node.name = "conv1";
  node.op_type = "Conv";
  try {
    throw_bad_input("model.onnx: " + describe_node(node, 3), "attribute 'strides' must be > 0, got 0");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == "model.onnx: node 3 'conv1' (Conv): attribute 'strides' must be > 0, got 0");
    CHECK(e.exit_code() == 2);
  }
}

TEST_CASE("graph/ir.h and graph/onnx_io.h: import, print, export, read a tensor") {
  Graph g = import_onnx_file(kModel, registry().schemas);
  std::ostringstream out;
  for (const Node& n : g.nodes) out << n.op_type << " " << shape_to_string(*g.info(n.outputs[0]).shape) << "\n";
  CHECK(out.str().find("Conv [N,") != std::string::npos);

  const OpRegistry& reg = registry().schemas;
  Graph again = import_onnx_file(kModel, reg);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("header_examples_" + std::to_string(::getpid()) + ".onnx")).string();
  export_onnx_file(again, path);
  CHECK(import_onnx_file(path, reg).nodes.size() == again.nodes.size());
  std::filesystem::remove(path);

  const std::string tensor = std::string(TRAINRT_TEST_DATA) + "/wrn_small_eval_golden/input_0.pb";
  if (std::filesystem::exists(tensor)) {
    Tensor x = read_tensor_file(tensor);
    CHECK(x.numel() > 0);
  }
}

TEST_CASE("graph/infer.h and graph/schema.h: validate, infer, find a schema") {
  const OpRegistry& reg = registry().schemas;
  Graph g = import_onnx_file(kModel, reg);
  validate_graph(g, reg, "model.onnx");
  infer_shapes(g, reg, "model.onnx");
  const OpSchema* s = reg.find("", "Conv");
  REQUIRE(s != nullptr);
  CHECK(s->op_type == "Conv");
}

TEST_CASE("passes/passes.h: dead nodes, simplify, inference and training rewrites") {
  const Graph forward = import_onnx_file(kModel, registry().schemas);
  Graph g = forward;
  eliminate_dead_nodes(g, {});
  simplify(g);
  Graph infer = optimize_for_inference(forward);
  Graph onnx = optimize_for_inference(forward, {.standard_onnx_only = true});
  CHECK(infer.nodes.size() < forward.nodes.size());  // BN folded, Dropout gone
  for (const Node& n : onnx.nodes) CHECK(n.domain.empty());
  CHECK(describe_passes(forward, infer).find("BatchNormalization") != std::string::npos);
}

TEST_CASE("passes/fuse_util.h: the sole reader of a value") {
  Graph g = import_onnx_file(kModel, registry().schemas);
  passes::Uses u(g);  // the header's example runs inside namespace passes
  size_t conv = 0;
  while (g.nodes[conv].op_type != "Conv") ++conv;
  const size_t reader = u.sole_reader(g.nodes[conv].outputs[0]);
  REQUIRE(reader != passes::npos);
  CHECK(g.nodes[reader].op_type == "BatchNormalization");
  std::vector<bool> dead(g.nodes.size(), false);
  passes::erase_marked(g, dead);  // nothing marked: nothing erased
  CHECK(g.nodes.size() == dead.size());
}

TEST_CASE("graph/tensor.h: zero-filled, shared copies, deep clones") {
  Tensor t(DataType::Float32, {2, 3});
  CHECK(t.data<float>()[5] == 0.f);
  t.data<float>()[0] = 1.f;
  Tensor v = t;
  Tensor c = t.clone();
  t.data<float>()[0] = 2.f;
  CHECK(v.data<float>()[0] == 2.f);
  CHECK(c.data<float>()[0] == 1.f);
}

TEST_CASE("ops/core/window.h: a window read from attributes, resolved per dim") {
  Node n;
  n.op_type = "Conv";
  n.attrs["auto_pad"] = Attribute::of_string("SAME_UPPER");
  n.attrs["strides"] = Attribute::of_ints({2, 2});
  Window w = read_window(n, /*spatial=*/2, /*kernel=*/{3, 3}, "conv", {});
  int64_t ho = resolve_window_dim(w, 0, /*in=*/32, "conv");
  CHECK(ho == 16);  // SAME: ceil(32 / 2)
  // total pad max(0, (16-1)*2 + 3 - 32) = 1, the odd pixel at the end (UPPER)
  CHECK(w.pads[0] == 0);
  CHECK(w.pads[2] == 1);
}

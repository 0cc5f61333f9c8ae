// ONNX import: structure, validation and every bad-input path of the importer.
// Models are built here as onnx::ModelProto; a local registry with two tiny ops
// keeps these tests independent of the real op set.
#include <doctest/doctest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "graph/error.h"
#include "graph/infer.h"
#include "graph/onnx_io.h"
#include "test_util.h"

using namespace trainrt;
using trainrt::test::TempDir;
namespace fs = std::filesystem;

namespace {

// "Unary": one float input, same-shape output. "Scale": float x and a float
// parameter of shape [1]; rejects non-float parameters like Conv's weights do.
OpRegistry test_registry() {
  OpRegistry reg;
  OpSchema unary;
  unary.op_type = "Unary";
  unary.since_version = 13;
  unary.attributes = {"alpha"};
  unary.infer = [](InferContext& c) {
    if (!dtype_is_float(c.input(0).dtype)) c.fail("input 0 must be float");
    (void)c.node().attr_float("alpha", 1.f);
    c.set_output(0, c.input(0));
  };
  reg.add(unary);
  OpSchema scale;
  scale.op_type = "Scale";
  scale.min_inputs = scale.max_inputs = 2;
  scale.since_version = 1;
  scale.infer = [](InferContext& c) {
    if (!dtype_is_float(c.input(1).dtype))
      c.fail(std::string("parameter '") + c.node().inputs[1] + "' must be float, got " + dtype_name(c.input(1).dtype));
    c.set_output(0, c.input(0));
  };
  reg.add(scale);
  return reg;
}

void set_type(onnx::ValueInfoProto* v, const std::string& name, int elem, std::vector<int64_t> dims,
              const std::string& batch = "") {
  v->set_name(name);
  v->clear_type();
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  auto* s = tt->mutable_shape();
  if (!batch.empty()) s->add_dim()->set_dim_param(batch);
  for (int64_t d : dims) s->add_dim()->set_dim_value(d);
}

onnx::NodeProto* add_node(onnx::GraphProto* g, const std::string& op, std::vector<std::string> in,
                          std::vector<std::string> out, const std::string& name = "") {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name.empty() ? op + std::to_string(g->node_size()) : name);
  for (auto& i : in) n->add_input(i);
  for (auto& o : out) n->add_output(o);
  return n;
}

// x[N,4] -> Unary -> h -> Scale(h, s) -> y ; s is a float initializer [1].
onnx::ModelProto valid_model(int64_t opset = 17) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("test");
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(opset);
  auto* g = m.mutable_graph();
  g->set_name("g");
  set_type(g->add_input(), "x", onnx::TensorProto::FLOAT, {4}, "N");
  set_type(g->add_output(), "y", onnx::TensorProto::FLOAT, {4}, "N");
  add_node(g, "Unary", {"x"}, {"h"}, "first");
  add_node(g, "Scale", {"h", "s"}, {"y"}, "second");
  auto* s = g->add_initializer();
  s->set_name("s");
  s->set_data_type(onnx::TensorProto::FLOAT);
  s->add_dims(1);
  s->add_float_data(2.f);
  return m;
}

std::string bytes_of(const onnx::ModelProto& m) {
  std::string b;
  REQUIRE(m.SerializeToString(&b));
  return b;
}

Graph import(const onnx::ModelProto& m, const std::string& base_dir = "", ImportLimits limits = {}) {
  static const OpRegistry reg = test_registry();
  return import_onnx_bytes(bytes_of(m), "m.onnx", base_dir, reg, limits);
}

// Runs f and returns the Error's message; fails the test if nothing was thrown.
template <typename F>
std::string error_of(F&& f, ErrorKind kind = ErrorKind::BadInput) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(static_cast<int>(e.kind()) == static_cast<int>(kind));
    CHECK(std::string(e.what()).find('\n') == std::string::npos);  // one line
    return e.what();
  }
  FAIL("no error thrown");
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("a valid model imports with a symbolic batch and inferred shapes") {
  Graph g = import(valid_model());
  REQUIRE(g.nodes.size() == 2);
  CHECK(g.inputs == std::vector<std::string>{"x"});
  CHECK(g.outputs == std::vector<std::string>{"y"});
  CHECK(shape_to_string(*g.info("y").shape) == "[N,4]");
  CHECK(g.initializers.at("s").data<float>()[0] == 2.f);
  CHECK(g.parameter_count() == 1);
}

TEST_CASE("import -> export -> import gives the same graph") {
  Graph a = import(valid_model());
  std::string bytes = export_onnx_bytes(a);
  static const OpRegistry reg = test_registry();
  Graph b = import_onnx_bytes(bytes, "re.onnx", "", reg);
  REQUIRE(a.nodes.size() == b.nodes.size());
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    CHECK(a.nodes[i].name == b.nodes[i].name);
    CHECK(a.nodes[i].op_type == b.nodes[i].op_type);
    CHECK(a.nodes[i].inputs == b.nodes[i].inputs);
    CHECK(a.nodes[i].outputs == b.nodes[i].outputs);
  }
  CHECK(a.inputs == b.inputs);
  CHECK(a.outputs == b.outputs);
  CHECK(a.opsets == b.opsets);
  for (const auto& [name, info] : a.values) CHECK(b.values.at(name) == info);
  REQUIRE(a.initializers.size() == b.initializers.size());
  for (const auto& [name, t] : a.initializers) {
    const Tensor& u = b.initializers.at(name);
    CHECK(u.dims() == t.dims());
    CHECK(std::memcmp(u.raw(), t.raw(), t.nbytes()) == 0);
  }
  CHECK(export_onnx_bytes(b) == bytes);  // a fixed point
}

TEST_CASE("files that are not ONNX models") {
  static const OpRegistry reg = test_registry();
  CHECK(contains(error_of([&] { import_onnx_bytes("", "e.onnx", "", reg); }), "empty"));
  CHECK(contains(error_of([&] { import_onnx_bytes("hello, this is text\n", "t.onnx", "", reg); }), "t.onnx"));
  std::string full = bytes_of(valid_model());
  // Every truncation of a valid model is refused (parse failure or missing data).
  for (size_t cut = 1; cut < full.size(); cut += 3) {
    std::string part = full.substr(0, cut);
    bool threw = false;
    try {
      import_onnx_bytes(part, "cut.onnx", "", reg);
    } catch (const Error& e) {
      threw = true;
      CHECK(e.exit_code() == 2);
    }
    CHECK_MESSAGE(threw, "truncated at " << cut << " of " << full.size() << " bytes was accepted");
  }
  onnx::ModelProto no_graph;
  no_graph.set_ir_version(8);
  CHECK(contains(error_of([&] { import_onnx_bytes(bytes_of(no_graph), "n.onnx", "", reg); }),
                 "no ir_version or no graph"));
}

TEST_CASE("a missing file and a directory are one-line errors") {
  static const OpRegistry reg = test_registry();
  CHECK(contains(error_of([&] { import_onnx_file("/nonexistent/model.onnx", reg); }), "/nonexistent/model.onnx"));
  CHECK(contains(error_of([&] { import_onnx_file("/tmp", reg); }), "directory"));
}

TEST_CASE("every unsupported op is listed at once with node names") {
  auto m = valid_model();
  add_node(m.mutable_graph(), "FancyOp", {"y"}, {"z1"}, "fancy_a");
  add_node(m.mutable_graph(), "OtherOp", {"z1"}, {"z2"}, "other_b");
  std::string e = error_of([&] { import(m); }, ErrorKind::Unsupported);
  CHECK(contains(e, "2 unsupported ops"));
  CHECK(contains(e, "'fancy_a' (FancyOp)"));
  CHECK(contains(e, "'other_b' (OtherOp)"));
}

TEST_CASE("structural errors name the node and the value") {
  SUBCASE("missing input") {
    auto m = valid_model();
    m.mutable_graph()->mutable_node(1)->set_input(1, "nowhere");
    std::string e = error_of([&] { import(m); });
    CHECK(contains(e, "'second' (Scale)"));
    CHECK(contains(e, "'nowhere'"));
  }
  SUBCASE("duplicate output names") {
    auto m = valid_model();
    add_node(m.mutable_graph(), "Unary", {"x"}, {"h"}, "again");
    std::string e = error_of([&] { import(m); });
    CHECK(contains(e, "'again'"));
    CHECK(contains(e, "duplicate"));
  }
  SUBCASE("cycle") {
    auto m = valid_model();
    auto* g = m.mutable_graph();
    g->mutable_node(0)->set_input(0, "loop_b");
    add_node(g, "Unary", {"h"}, {"loop_a"}, "la");
    add_node(g, "Unary", {"loop_a"}, {"loop_b"}, "lb");
    CHECK(contains(error_of([&] { import(m); }), "cycle"));
  }
  SUBCASE("graph output never produced") {
    auto m = valid_model();
    m.mutable_graph()->mutable_output(0)->set_name("ghost");
    CHECK(contains(error_of([&] { import(m); }), "'ghost'"));
  }
  SUBCASE("wrong arity") {
    auto m = valid_model();
    m.mutable_graph()->mutable_node(1)->add_input("s");
    CHECK(contains(error_of([&] { import(m); }), "has 3 inputs, expected 2"));
  }
  SUBCASE("declared output shape disagrees with inference") {
    auto m = valid_model();
    set_type(m.mutable_graph()->mutable_output(0), "y", onnx::TensorProto::FLOAT, {5}, "N");
    std::string e = error_of([&] { import(m); });
    CHECK_MESSAGE(contains(e, "declared [N,5] but computes [N,4]"), e);
  }
  SUBCASE("declared output dtype disagrees") {
    auto m = valid_model();
    set_type(m.mutable_graph()->mutable_output(0), "y", onnx::TensorProto::DOUBLE, {4}, "N");
    CHECK(contains(error_of([&] { import(m); }), "declared float64 but computes float32"));
  }
}

TEST_CASE("attributes") {
  SUBCASE("wrong kind") {
    auto m = valid_model();
    auto* a = m.mutable_graph()->mutable_node(0)->add_attribute();
    a->set_name("alpha");
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s("big");
    std::string e = error_of([&] { import(m); });
    CHECK(contains(e, "'alpha' must be float, got string"));
  }
  SUBCASE("unknown attribute") {
    auto m = valid_model();
    auto* a = m.mutable_graph()->mutable_node(0)->add_attribute();
    a->set_name("beta");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(1);
    CHECK(contains(error_of([&] { import(m); }, ErrorKind::Unsupported), "attribute 'beta'"));
  }
  SUBCASE("subgraph attribute") {
    auto m = valid_model();
    auto* a = m.mutable_graph()->mutable_node(0)->add_attribute();
    a->set_name("body");
    a->set_type(onnx::AttributeProto::GRAPH);
    a->mutable_g()->set_name("sub");
    CHECK(contains(error_of([&] { import(m); }, ErrorKind::Unsupported), "subgraph"));
  }
}

TEST_CASE("non-float parameters where float is required") {
  auto m = valid_model();
  auto* s = m.mutable_graph()->mutable_initializer(0);
  s->set_data_type(onnx::TensorProto::INT64);
  s->clear_float_data();
  s->add_int64_data(2);
  std::string e = error_of([&] { import(m); });
  CHECK(contains(e, "'second' (Scale)"));
  CHECK(contains(e, "must be float, got int64"));
}

TEST_CASE("opsets: 13 and newer accepted; older only where the op's semantics are unchanged") {
  CHECK_NOTHROW(import(valid_model(13)));
  // Unary's semantics date from opset 13: an opset-11 model is refused, naming the node.
  std::string e = error_of([&] { import(valid_model(11)); }, ErrorKind::Unsupported);
  CHECK(contains(e, "'first' (Unary)"));
  CHECK(contains(e, "opset 11"));
  // A model of only Scale (unchanged since opset 1) imports at opset 9.
  auto m = valid_model(9);
  auto* g = m.mutable_graph();
  g->mutable_node()->DeleteSubrange(0, 1);
  g->mutable_node(0)->set_input(0, "x");
  CHECK_NOTHROW(import(m));
  onnx::ModelProto none = valid_model();
  none.clear_opset_import();
  CHECK(contains(error_of([&] { import(none); }), "opset_import"));
}

TEST_CASE("absurd sizes are refused before allocation") {
  SUBCASE("initializer larger than the file") {
    auto m = valid_model();
    auto* s = m.mutable_graph()->mutable_initializer(0);
    s->clear_dims();
    s->add_dims(1000000000);
    s->clear_float_data();
    s->set_raw_data(std::string(16, '\0'));
    CHECK(contains(error_of([&] { import(m); }), "more than the whole file"));
  }
  SUBCASE("typed data count disagrees with dims") {
    auto m = valid_model();
    m.mutable_graph()->mutable_initializer(0)->set_dims(0, 3);
    CHECK(contains(error_of([&] { import(m); }), "float_data holds 1 values, dims need 3"));
  }
  SUBCASE("raw_data size disagrees with dims") {
    auto m = valid_model();
    auto* s = m.mutable_graph()->mutable_initializer(0);
    s->clear_float_data();
    s->set_raw_data(std::string(3, '\0'));
    CHECK(contains(error_of([&] { import(m); }), "raw_data has 3 bytes"));
  }
  SUBCASE("dimension over the configured limit") {
    auto m = valid_model();
    set_type(m.mutable_graph()->mutable_input(0), "x", onnx::TensorProto::FLOAT, {int64_t{1} << 40});
    CHECK(contains(error_of([&] { import(m); }), "dimension"));
  }
  SUBCASE("element count overflow") {
    auto m = valid_model();
    auto* s = m.mutable_graph()->mutable_initializer(0);
    s->clear_dims();
    for (int i = 0; i < 4; ++i) s->add_dims(int64_t{1} << 31);
    CHECK(error_of([&] { import(m); }).size() > 0);
  }
  SUBCASE("negative dimension") {
    auto m = valid_model();
    m.mutable_graph()->mutable_initializer(0)->set_dims(0, -1);
    CHECK(contains(error_of([&] { import(m); }), "negative dimension"));
  }
  SUBCASE("rank over the limit") {
    auto m = valid_model();
    auto* s = m.mutable_graph()->mutable_initializer(0);
    for (int i = 0; i < 9; ++i) s->add_dims(1);
    CHECK(contains(error_of([&] { import(m); }), "rank 10"));
  }
  SUBCASE("file over the configured limit") {
    TempDir d;
    fs::path p = d.path / "m.onnx";
    std::ofstream(p, std::ios::binary) << bytes_of(valid_model());
    ImportLimits small;
    small.max_file_bytes = 10;
    static const OpRegistry reg = test_registry();
    CHECK(contains(error_of([&] { import_onnx_file(p.string(), reg, small); }), "over the limit"));
  }
  SUBCASE("unsupported element type") {
    auto m = valid_model();
    auto* s = m.mutable_graph()->mutable_initializer(0);
    s->set_data_type(onnx::TensorProto::STRING);
    CHECK(contains(error_of([&] { import(m); }, ErrorKind::Unsupported), "not supported"));
  }
}

TEST_CASE("external data stays inside the model's folder") {
  TempDir d;
  fs::create_directories(d.path / "model");
  {
    std::ofstream w(d.path / "model" / "weights.bin", std::ios::binary);
    float v = 3.f;
    w.write("pad!", 4);
    w.write(reinterpret_cast<const char*>(&v), 4);
  }
  std::ofstream(d.path / "secret.bin", std::ios::binary) << std::string(64, 'x');
  auto external = [&](const std::string& location, const std::string& offset = "4") {
    auto m = valid_model();
    auto* s = m.mutable_graph()->mutable_initializer(0);
    s->clear_float_data();
    s->set_data_location(onnx::TensorProto::EXTERNAL);
    auto* kv = s->add_external_data();
    kv->set_key("location");
    kv->set_value(location);
    kv = s->add_external_data();
    kv->set_key("offset");
    kv->set_value(offset);
    return m;
  };
  const std::string base = (d.path / "model").string();
  Graph g = import(external("weights.bin"), base);
  CHECK(g.initializers.at("s").data<float>()[0] == 3.f);
  CHECK(contains(error_of([&] { import(external((d.path / "secret.bin").string()), base); }), "absolute"));
  CHECK(contains(error_of([&] { import(external("../secret.bin"), base); }), "leaves the model's folder"));
  fs::create_symlink(d.path / "secret.bin", d.path / "model" / "link.bin");
  CHECK(contains(error_of([&] { import(external("link.bin"), base); }), "outside the model's folder"));
  CHECK(contains(error_of([&] { import(external("weights.bin", "6"), base); }), "too short"));
  CHECK(contains(error_of([&] { import(external("weights.bin", "x1"), base); }), "not a number"));
  CHECK(contains(error_of([&] { import(external("missing.bin"), base); }), "missing.bin"));
  CHECK(contains(error_of([&] { import(external("weights.bin"), ""); }), "not allowed"));
}

TEST_CASE("atomic writes leave no temporary file and replace the target whole") {
  TempDir d;
  fs::path p = d.path / "out.onnx";
  write_file_atomic(p.string(), "first");
  write_file_atomic(p.string(), "second");
  CHECK(read_file_bytes(p.string(), 100) == "second");
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(d.path)) ++files;
  CHECK(files == 1);
  CHECK(error_of([&] { write_file_atomic((d.path / "no" / "such" / "dir.onnx").string(), "x"); }).size() > 0);
}

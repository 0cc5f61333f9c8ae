// Inputs found by the fuzz targets (fuzz/, tools/ci_reliability.sh) that once crashed
// or hit undefined behaviour, each kept as a test: the saved input in
// tests/data/fuzz_regressions/ and a minimal model written here that reaches the
// same code. All must now be one-line BadInput errors naming the node or value.
#include <doctest/doctest.h>
#include <onnx/onnx_pb.h>

#include <fstream>
#include <limits>
#include <sstream>

#include "golden_files.h"
#include "graph/error.h"
#include "graph/onnx_io.h"
#include "ops/core/register_all.h"
#include "test_util.h"

using namespace trainrt;

namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(test::golden_file(path), std::ios::binary);
  REQUIRE(in);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The BadInput message of importing `bytes` with the real op set; fails if it imports.
std::string import_error(const std::string& bytes) {
  try {
    (void)import_onnx_bytes(bytes, "m.onnx", "", registry().schemas);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::BadInput);
    CHECK(std::string(e.what()).find('\n') == std::string::npos);
    return e.what();
  }
  FAIL("the model imported");
  return "";
}

void set_type(onnx::ValueInfoProto* v, const std::string& name, std::vector<int64_t> dims, bool batch) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  auto* s = tt->mutable_shape();
  if (batch) s->add_dim()->set_dim_param("N");
  for (int64_t d : dims) s->add_dim()->set_dim_value(d);
}

// An empty model of ai.onnx opset 17; its graph.
onnx::GraphProto* new_model(onnx::ModelProto& m) {
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(17);
  return m.mutable_graph();
}

// An int64 initializer: rank 1, or a scalar.
void add_ints(onnx::GraphProto* g, const std::string& name, const std::vector<int64_t>& values, bool scalar = false) {
  auto* p = g->add_initializer();
  p->set_name(name);
  p->set_data_type(onnx::TensorProto::INT64);
  if (!scalar) p->add_dims(static_cast<int64_t>(values.size()));
  for (int64_t v : values) p->add_int64_data(v);
}

std::string serialized(const onnx::ModelProto& m) {
  std::string b;
  REQUIRE(m.SerializeToString(&b));
  return b;
}

// x[N,1,7,7] -> Pad(pads) -> AveragePool 7 -> Flatten -> y, as in the found input
// (the Wide ResNet's tail with one pad value mutated to 7021111819070603264).
std::string pad_pool_flatten(const std::vector<int64_t>& pads, std::vector<int64_t> x_dims = {1, 7, 7}) {
  onnx::ModelProto m;
  auto* g = new_model(m);
  set_type(g->add_input(), "x", x_dims, true);
  g->add_output()->set_name("y");
  add_ints(g, "pads", pads);
  auto node = [&](const std::string& type, std::vector<std::string> in, const std::string& out) {
    auto* n = g->add_node();
    n->set_op_type(type);
    n->set_name(type);
    for (auto& i : in) n->add_input(i);
    n->add_output(out);
    return n;
  };
  node("Pad", {"x", "pads"}, "padded");
  auto* pool = node("AveragePool", {"padded"}, "pooled");
  for (const char* key : {"kernel_shape", "strides"}) {
    auto* a = pool->add_attribute();
    a->set_name(key);
    a->set_type(onnx::AttributeProto::INTS);
    a->add_ints(7);
    a->add_ints(7);
  }
  node("Flatten", {"pooled"}, "y");
  return serialized(m);
}

}  // namespace

TEST_CASE("fuzz: a huge Pad value no longer overflows the dims products downstream (UBSan, ops/shape_ops.cpp)") {
  // The input fuzz_onnx_import found: UBSan "signed integer overflow: 16 * 1003015974152943324" in Flatten.
  std::string e = import_error(read_all(TRAINRT_TEST_DATA "/fuzz_regressions/onnx_import-pad-overflow.onnx"));
  CHECK(e.find("(Pad)") != std::string::npos);
  CHECK(e.find("beyond +-2^40") != std::string::npos);

  // Minimal versions: the same pad value; pads near INT64_MAX whose sum would overflow in Pad itself.
  e = import_error(pad_pool_flatten({0, 0, 0, 0, 0, 0, 7021111819070603264, 29540}));
  CHECK(e.find("(Pad)") != std::string::npos);
  const int64_t big = std::numeric_limits<int64_t>::max() - 1;
  e = import_error(pad_pool_flatten({0, 0, big, big, 0, 0, big, big}));
  CHECK(e.find("beyond +-2^40") != std::string::npos);
}

TEST_CASE("fuzz: inferred and declared shapes over 2^36 elements are refused before any rule multiplies them") {
  // Pads within the Pad limit that still make a [N,1,2^40+7,2^40+7] output.
  const int64_t p = int64_t{1} << 40;
  std::string e = import_error(pad_pool_flatten({0, 0, p, p, 0, 0, 0, 0}));
  CHECK(e.find("(Pad)") != std::string::npos);
  CHECK(e.find("over the limit of 2^36 elements") != std::string::npos);
  // A declared input whose dims are each under ImportLimits::max_dim (2^32) but whose
  // product is 2^96: refused as a value before Pad/Flatten multiply its dims.
  const int64_t d = int64_t{1} << 32;
  e = import_error(pad_pool_flatten({0, 0, 0, 0, 0, 0, 0, 0}, {d, d, d}));
  CHECK(e.find("value 'x'") != std::string::npos);
  CHECK(e.find("over the limit of 2^36 elements") != std::string::npos);
  // Zero dims do not hide the others: [N,0,2^32,2^32,2^32] is refused too.
  e = import_error(pad_pool_flatten({0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {0, d, d, d}));
  CHECK(e.find("over the limit of 2^36 elements") != std::string::npos);
}

namespace {

// One `op` node over x[N,4] (float, when `x` is true) and int64 initializers (rank 1,
// or scalars when `scalars`), with `outputs` outputs.
std::string one_node(const std::string& op, bool x,
                     const std::vector<std::pair<std::string, std::vector<int64_t>>>& ints, size_t outputs = 1,
                     bool scalars = false) {
  onnx::ModelProto m;
  auto* g = new_model(m);
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(op);
  if (x) {
    set_type(g->add_input(), "x", {4}, true);
    n->add_input("x");
  }
  for (const auto& [name, values] : ints) {
    add_ints(g, name, values, scalars);
    n->add_input(name);
  }
  for (size_t i = 0; i < outputs; ++i) {
    n->add_output("y" + std::to_string(i));
    g->add_output()->set_name("y" + std::to_string(i));
  }
  return serialized(m);
}

}  // namespace

TEST_CASE("fuzz: a Reshape to a huge shape is refused before its dims product overflows (UBSan, ops/shape_ops.cpp)") {
  // The input fuzz_onnx_import found: UBSan "signed integer overflow: 3940649657171971 * 1638416" in Reshape.
  std::string e = import_error(read_all(TRAINRT_TEST_DATA "/fuzz_regressions/onnx_import-reshape-overflow.onnx"));
  CHECK(e.find("(Reshape)") != std::string::npos);
  CHECK(e.find("more than 2^36 elements") != std::string::npos);
  // Minimal versions: two dims whose product overflows int64, with and without the -1
  // slot; a product just over the limit. A shape of exactly 2^36 elements still types
  // (the batch N is symbolic, so the element counts are not compared).
  const int64_t big = int64_t{1} << 40;
  for (const auto& shape : {std::vector<int64_t>{big, big}, std::vector<int64_t>{-1, big, big},
                            std::vector<int64_t>{int64_t{1} << 20, (int64_t{1} << 16) + 1}}) {
    e = import_error(one_node("Reshape", true, {{"shape", shape}}));
    CHECK(e.find("(Reshape)") != std::string::npos);
    CHECK(e.find("more than 2^36 elements") != std::string::npos);
  }
  CHECK_NOTHROW((void)import_onnx_bytes(one_node("Reshape", true, {{"shape", {int64_t{1} << 20, int64_t{1} << 16}}}),
                                        "m.onnx", "", registry().schemas));
}

TEST_CASE("fuzz: shape inputs that would overflow or exhaust memory in other shape rules are refused") {
  const int64_t big = int64_t{1} << 40, max = std::numeric_limits<int64_t>::max();
  // Split sizes whose sum overflows int64 (x[N,4] split on axis 0 of unknown N).
  std::string e = import_error(one_node("Split", true, {{"split", {max, max}}}, 2));
  CHECK(e.find("(Split)") != std::string::npos);
  CHECK(e.find("sums to more than 2^36") != std::string::npos);
  // Range whose length is beyond int64 (the cast would be undefined) or just over 2^36.
  for (const auto& v : {std::vector<int64_t>{-max, max, 1}, std::vector<int64_t>{0, (int64_t{1} << 36) + 1, 1}}) {
    e = import_error(one_node("Range", false, {{"start", {v[0]}}, {"limit", {v[1]}}, {"delta", {v[2]}}}, 1, true));
    CHECK(e.find("(Range)") != std::string::npos);
    CHECK(e.find("more than 2^36 elements") != std::string::npos);
  }
  // ConstantOfShape and Expand asking for a product of dims beyond int64, or a rank
  // of 65 (a shape input of 10^9 dims would be a 10^9-element vector in inference).
  e = import_error(one_node("ConstantOfShape", false, {{"shape", {big, big, big}}}));
  CHECK(e.find("(ConstantOfShape)") != std::string::npos);
  CHECK(e.find("more than 2^36 elements") != std::string::npos);
  e = import_error(one_node("Expand", true, {{"shape", {big, big, 4}}}));
  CHECK(e.find("(Expand)") != std::string::npos);
  CHECK(e.find("more than 2^36 elements") != std::string::npos);
  e = import_error(one_node("Expand", true, {{"shape", std::vector<int64_t>(65, 1)}}));
  CHECK(e.find("65 dimensions, more than 64") != std::string::npos);
  // At the limits they still type.
  CHECK_NOTHROW((void)import_onnx_bytes(one_node("Expand", true, {{"shape", std::vector<int64_t>(64, 1)}}), "m.onnx",
                                        "", registry().schemas));
  CHECK_NOTHROW(
      (void)import_onnx_bytes(one_node("Range", false, {{"start", {0}}, {"limit", {1000}}, {"delta", {3}}}, 1, true),
                              "m.onnx", "", registry().schemas));
}

namespace {

// The BadInput message of reading `bytes` as a TensorProto file; fails if it reads.
std::string tensor_error(const std::string& bytes) {
  const test::TempDir dir;
  const std::string path = dir.file("input.pb");
  {
    std::ofstream out(path, std::ios::binary);
    out << bytes;
  }
  try {
    (void)read_tensor_file(path, ImportLimits{});
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::BadInput);
    CHECK(std::string(e.what()).find('\n') == std::string::npos);
    return e.what();
  }
  FAIL("the tensor was read");
  return "";
}

std::string int32_data_tensor(onnx::TensorProto::DataType dtype, std::vector<int32_t> values) {
  onnx::TensorProto p;
  p.set_data_type(dtype);
  p.add_dims(static_cast<int64_t>(values.size()));
  for (int32_t v : values) p.add_int32_data(v);
  std::string b;
  REQUIRE(p.SerializeToString(&b));
  return b;
}

}  // namespace

TEST_CASE("fuzz: int32_data values outside a narrow integer type are refused before conversion (UBSan, onnx_io.cpp)") {
  // The input fuzz_tensor_proto found: an int8 tensor whose int32_data holds 81919;
  // UBSan "81919 is outside the range of representable values of type 'signed char'".
  std::string e = tensor_error(read_all(TRAINRT_TEST_DATA "/fuzz_regressions/tensor_proto-int8-out-of-range.pb"));
  CHECK(e.find("int32_data value 81919 does not fit int8") != std::string::npos);

  // Each narrow type at one past either end of its range.
  using TP = onnx::TensorProto;
  const std::pair<TP::DataType, std::vector<int32_t>> bad[] = {
      {TP::INT8, {-129}},    {TP::INT8, {128}},    {TP::UINT8, {-1}},  {TP::UINT8, {256}},
      {TP::INT16, {-32769}}, {TP::INT16, {32768}}, {TP::UINT16, {-1}}, {TP::UINT16, {65536}}};
  for (const auto& [dtype, values] : bad) {
    CAPTURE(dtype);
    e = tensor_error(int32_data_tensor(dtype, values));
    CHECK(e.find("does not fit") != std::string::npos);
  }

  // The ends of each range, and any value for bool, still read exactly.
  const test::TempDir dir;
  const std::string path = dir.file("input.pb");
  const std::pair<TP::DataType, std::vector<int32_t>> good[] = {{TP::INT8, {-128, 127}},
                                                                {TP::UINT8, {0, 255}},
                                                                {TP::INT16, {-32768, 32767}},
                                                                {TP::UINT16, {0, 65535}},
                                                                {TP::BOOL, {0, 7}}};
  for (const auto& [dtype, values] : good) {
    CAPTURE(dtype);
    {
      std::ofstream out(path, std::ios::binary);
      out << int32_data_tensor(dtype, values);
    }
    Tensor t = read_tensor_file(path, ImportLimits{});
    REQUIRE(t.numel() == 2);
    for (int64_t i = 0; i < 2; ++i)
      CHECK(t.get_as_double(i) == (dtype == TP::BOOL ? (values[i] != 0) : values[static_cast<size_t>(i)]));
  }
}

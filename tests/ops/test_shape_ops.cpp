// Flatten, Reshape, Transpose, Concat, Pad: values by index arithmetic written here,
// int64 and fp64 data (byte-copy kernels), symbolic batch, every error case.
#include <doctest/doctest.h>

#include <map>

#include "graph/error.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

Tensor iota(DataType t, std::vector<int64_t> dims) {
  Tensor x(t, std::move(dims));
  for (int64_t i = 0; i < x.numel(); ++i) x.set_from_double(i, static_cast<double>(i));
  return x;
}

Tensor ints(std::vector<int64_t> v) {
  Tensor t(DataType::Int64, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

std::string error_of(const Node& n, const TensorMap& feeds, const TensorMap& inits = {}) {
  try {
    run_node(n, feeds, "reference", inits);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& part) {
  if (s.find(part) == std::string::npos) MESSAGE("message was: " << s);
  return s.find(part) != std::string::npos;
}

// Types one node with a symbolic batch "N" on input `x` and returns its output shape.
std::string symbolic_shape(const Node& n, Shape x, const TensorMap& inits = {}, DataType t = DataType::Float32) {
  Graph g;
  g.opsets[""] = 17;
  g.inputs = {n.inputs[0]};
  g.values[n.inputs[0]] = ValueInfo{t, std::move(x)};
  for (const auto& [name, v] : inits) {
    g.initializers[name] = v;
    g.values[name] = ValueInfo{v.dtype(), shape_of(v.dims())};
  }
  g.nodes.push_back(n);
  g.outputs = {n.outputs[0]};
  infer_shapes(g, registry().schemas, "test");
  return shape_to_string(*g.info(n.outputs[0]).shape);
}

Shape nshape(std::vector<int64_t> rest) {
  Shape s{Dim::sym("N")};
  for (int64_t d : rest) s.push_back(Dim::of(d));
  return s;
}

}  // namespace

TEST_CASE("Flatten: every axis, negative axes, dtypes keep their bytes") {
  for (DataType t : {DataType::Float32, DataType::Float64, DataType::Int64, DataType::UInt8}) {
    Tensor x = iota(t, {2, 3, 4, 5});
    struct Case {
      int64_t axis;
      std::vector<int64_t> y;
    };
    for (Case c : std::vector<Case>{{0, {1, 120}},
                                    {1, {2, 60}},
                                    {2, {6, 20}},
                                    {3, {24, 5}},
                                    {4, {120, 1}},
                                    {-1, {24, 5}},
                                    {-2, {6, 20}},
                                    {-4, {1, 120}}}) {
      TensorMap out =
          run_node(make_node("Flatten", {"x"}, {"y"}, {{"axis", Attribute::of_int(c.axis)}}), {{"x", x}}, "reference");
      CHECK(out["y"].dims() == c.y);
      CHECK(out["y"].dtype() == t);
      CHECK(max_abs_diff(out["y"], x.reshaped(c.y)) == 0);
    }
  }
  TensorMap out =
      run_node(make_node("Flatten", {"x"}, {"y"}), {{"x", iota(DataType::Float32, {2, 3, 4})}}, "reference");
  CHECK(out["y"].dims() == std::vector<int64_t>{2, 12});
}

TEST_CASE("Flatten: symbolic batch and errors") {
  CHECK(symbolic_shape(make_node("Flatten", {"x"}, {"y"}), nshape({3, 4, 5})) == "[N,60]");
  CHECK(symbolic_shape(make_node("Flatten", {"x"}, {"y"}, {{"axis", Attribute::of_int(0)}}), nshape({3})) == "[1,?]");
  CHECK(symbolic_shape(make_node("Flatten", {"x"}, {"y"}, {{"axis", Attribute::of_int(2)}}), nshape({3, 4})) ==
        "[?,4]");
  CHECK(has(error_of(make_node("Flatten", {"x"}, {"y"}, {{"axis", Attribute::of_int(4)}}),
                     {{"x", iota(DataType::Float32, {2, 3, 4})}}),
            "node 0 'Flatten_test' (Flatten): attribute 'axis' = 4 is out of range [-3, 3]"));
  CHECK(has(error_of(make_node("Flatten", {"x"}, {"y"}, {{"axis", Attribute::of_int(-4)}}),
                     {{"x", iota(DataType::Float32, {2, 3, 4})}}),
            "'Flatten_test' (Flatten): attribute 'axis' = -4 is out of range"));
}

TEST_CASE("Reshape: 0 copies, -1 infers, allowzero, dtypes") {
  struct Case {
    std::vector<int64_t> x, shape, y;
  };
  for (Case c : std::vector<Case>{{{2, 3, 4}, {4, 6}, {4, 6}},
                                  {{2, 3, 4}, {-1}, {24}},
                                  {{2, 3, 4}, {0, -1}, {2, 12}},
                                  {{2, 3, 4}, {0, 0, 2, 2}, {2, 3, 2, 2}},
                                  {{2, 3, 4}, {-1, 0, 2}, {4, 3, 2}},
                                  {{2, 3, 4}, {1, 1, 24, 1}, {1, 1, 24, 1}},
                                  {{2, 3, 4}, {0, 3, 0}, {2, 3, 4}},
                                  {{2, 0, 4}, {0, 4, -1}, {2, 4, 0}}})
    for (DataType t : {DataType::Float32, DataType::Float64, DataType::Int64}) {
      Tensor x = iota(t, c.x);
      TensorMap out =
          run_node(make_node("Reshape", {"x", "s"}, {"y"}), {{"x", x}}, "reference", {{"s", ints(c.shape)}});
      CAPTURE(dims_to_string(c.shape));
      CHECK(out["y"].dims() == c.y);
      CHECK(max_abs_diff(out["y"], x.reshaped(c.y)) == 0);
    }
  // allowzero=1: a 0 is a real zero-size dimension
  TensorMap out = run_node(make_node("Reshape", {"x", "s"}, {"y"}, {{"allowzero", Attribute::of_int(1)}}),
                           {{"x", Tensor(DataType::Float32, {0, 3, 4})}}, "reference", {{"s", ints({3, 4, 0})}});
  CHECK(out["y"].dims() == std::vector<int64_t>{3, 4, 0});
}

TEST_CASE("Reshape: symbolic batch keeps the symbol") {
  Node n = make_node("Reshape", {"x", "s"}, {"y"});
  CHECK(symbolic_shape(n, nshape({3, 4}), {{"s", ints({0, -1})}}) == "[N,12]");
  CHECK(symbolic_shape(n, nshape({3, 4}), {{"s", ints({-1, 12})}}) == "[N,12]");
  CHECK(symbolic_shape(n, nshape({3, 4}), {{"s", ints({-1, 3, 2, 2})}}) == "[N,3,2,2]");
  CHECK(symbolic_shape(n, nshape({3, 4}), {{"s", ints({0, 2, -1})}}) == "[N,2,6]");
  CHECK(symbolic_shape(n, nshape({3, 4}), {{"s", ints({0, 0, 2, 2})}}) == "[N,3,2,2]");
  CHECK(symbolic_shape(n, nshape({3, 4}), {{"s", ints({-1, 6})}}) == "[?,6]");  // 2N: unknown until specialised
  CHECK(symbolic_shape(n, nshape({3, 4}), {{"s", ints({-1})}}) == "[?]");
  // runs once the batch is known
  Graph g;
  g.opsets[""] = 17;
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{DataType::Float32, nshape({3, 4})};
  g.initializers["s"] = ints({-1, 12});
  g.values["s"] = ValueInfo{DataType::Int64, shape_of({2})};
  g.nodes.push_back(n);
  g.outputs = {"y"};
  infer_shapes(g, registry().schemas, "test");
  TensorMap out = run_graph(g, {{"x", iota(DataType::Float32, {5, 3, 4})}}, *make_backend("reference"));
  CHECK(out["y"].dims() == std::vector<int64_t>{5, 12});
}

TEST_CASE("Reshape: errors") {
  Tensor x = iota(DataType::Float32, {2, 3, 4});
  Node n = make_node("Reshape", {"x", "s"}, {"y"});
  CHECK(has(error_of(n, {{"x", x}}, {{"s", ints({5, 5})}}),
            "node 0 'Reshape_test' (Reshape): cannot reshape [2,3,4] to [5,5]: 24 elements vs 25"));
  CHECK(has(error_of(n, {{"x", x}}, {{"s", ints({-1, -1})}}),
            "'Reshape_test' (Reshape): shape [-1,-1] has more than one -1"));
  CHECK(has(error_of(n, {{"x", x}}, {{"s", ints({5, -1})}}),
            "'Reshape_test' (Reshape): cannot reshape [2,3,4] to [5,-1]: 24 elements do not divide by 5"));
  CHECK(has(error_of(n, {{"x", x}}, {{"s", ints({2, -3})}}),
            "'Reshape_test' (Reshape): shape [2,-3] has an invalid value -3"));
  CHECK(has(error_of(n, {{"x", x}}, {{"s", ints({0, 0, 0, 0})}}),
            "'Reshape_test' (Reshape): shape [0,0,0,0] has 0 at index 3 but the input [2,3,4] has rank 3"));
  CHECK(has(error_of(make_node("Reshape", {"x", "s"}, {"y"}, {{"allowzero", Attribute::of_int(1)}}), {{"x", x}},
                     {{"s", ints({0, -1})}}),
            "'Reshape_test' (Reshape): shape [0,-1] has both 0 and -1"));
  // a shape fed at run time is a shape input of the plan: checked when it arrives
  CHECK(run_node(n, {{"x", x}, {"s", ints({4, 6})}}, "reference").at("y").dims() == std::vector<int64_t>{4, 6});
  CHECK(has(error_of(n, {{"x", x}, {"s", ints({5, 6})}}), "'Reshape_test' (Reshape): cannot reshape [2,3,4] to [5,6]"));
  Tensor f(DataType::Float32, {2});
  CHECK(has(error_of(n, {{"x", x}}, {{"s", f}}),
            "'Reshape_test' (Reshape): input 1 's' (shape) must be int64, got float32"));
}

// y[i0,i1,i2] = x at the index whose dim perm[k] is ik.
static Tensor naive_transpose(const Tensor& x, std::vector<int64_t> perm) {
  const auto& d = x.dims();
  std::vector<int64_t> yd;
  for (int64_t p : perm) yd.push_back(d[p]);
  Tensor y(x.dtype(), yd);
  int64_t k = 0;
  for (int64_t a = 0; a < yd[0]; ++a)
    for (int64_t b = 0; b < yd[1]; ++b)
      for (int64_t c = 0; c < yd[2]; ++c) {
        int64_t xi[3];
        xi[perm[0]] = a;
        xi[perm[1]] = b;
        xi[perm[2]] = c;
        y.set_from_double(k++, x.get_as_double((xi[0] * d[1] + xi[1]) * d[2] + xi[2]));
      }
  return y;
}

TEST_CASE("Transpose: all permutations of rank 3, default reverse, dtypes") {
  std::vector<std::vector<int64_t>> perms = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
  for (DataType t : {DataType::Float32, DataType::Float64, DataType::Int64, DataType::Int8})
    for (const auto& p : perms) {
      Tensor x = iota(t, {2, 3, 4});
      TensorMap out =
          run_node(make_node("Transpose", {"x"}, {"y"}, {{"perm", Attribute::of_ints(p)}}), {{"x", x}}, "reference");
      CHECK(max_abs_diff(out["y"], naive_transpose(x, p)) == 0);
    }
  Tensor x = iota(DataType::Float32, {2, 3, 4});
  TensorMap out = run_node(make_node("Transpose", {"x"}, {"y"}), {{"x", x}}, "reference");
  CHECK(max_abs_diff(out["y"], naive_transpose(x, {2, 1, 0})) == 0);
  CHECK(symbolic_shape(make_node("Transpose", {"x"}, {"y"}, {{"perm", Attribute::of_ints({0, 2, 1})}}),
                       nshape({3, 4})) == "[N,4,3]");
  CHECK(has(error_of(make_node("Transpose", {"x"}, {"y"}, {{"perm", Attribute::of_ints({0, 1})}}), {{"x", x}}),
            "'Transpose_test' (Transpose): attribute 'perm' [0,1] has 2 entries, the input [2,3,4] has rank 3"));
  CHECK(has(error_of(make_node("Transpose", {"x"}, {"y"}, {{"perm", Attribute::of_ints({0, 1, 1})}}), {{"x", x}}),
            "'Transpose_test' (Transpose): attribute 'perm' [0,1,1] is not a permutation of 0..2"));
  CHECK(has(error_of(make_node("Transpose", {"x"}, {"y"}, {{"perm", Attribute::of_ints({0, 1, 3})}}), {{"x", x}}),
            "is not a permutation of 0..2"));
}

TEST_CASE("Concat: every axis, negative axes, three inputs, int64") {
  for (DataType t : {DataType::Float32, DataType::Float64, DataType::Int64}) {
    Tensor a = iota(t, {2, 3}), b = iota(t, {2, 3});
    for (int64_t i = 0; i < b.numel(); ++i) b.set_from_double(i, 100 + static_cast<double>(i));
    // axis 0: rows of a then rows of b
    TensorMap out = run_node(make_node("Concat", {"a", "b"}, {"y"}, {{"axis", Attribute::of_int(0)}}),
                             {{"a", a}, {"b", b}}, "reference");
    REQUIRE(out["y"].dims() == std::vector<int64_t>{4, 3});
    for (int64_t i = 0; i < 6; ++i) CHECK(out["y"].get_as_double(i) == a.get_as_double(i));
    for (int64_t i = 0; i < 6; ++i) CHECK(out["y"].get_as_double(6 + i) == b.get_as_double(i));
    // axis -1 with three inputs of different widths
    Tensor c = iota(t, {2, 1});
    out = run_node(make_node("Concat", {"a", "b", "c"}, {"y"}, {{"axis", Attribute::of_int(-1)}}),
                   {{"a", a}, {"b", b}, {"c", c}}, "reference");
    REQUIRE(out["y"].dims() == std::vector<int64_t>{2, 7});
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t j = 0; j < 7; ++j) {
        double want = j < 3 ? a.get_as_double(r * 3 + j) : j < 6 ? b.get_as_double(r * 3 + j - 3) : c.get_as_double(r);
        CHECK(out["y"].get_as_double(r * 7 + j) == want);
      }
  }
  // a zero-size input contributes nothing
  TensorMap out =
      run_node(make_node("Concat", {"a", "b"}, {"y"}, {{"axis", Attribute::of_int(1)}}),
               {{"a", iota(DataType::Float32, {2, 0})}, {"b", iota(DataType::Float32, {2, 2})}}, "reference");
  CHECK(max_abs_diff(out["y"], iota(DataType::Float32, {2, 2})) == 0);
}

TEST_CASE("Concat: symbolic batch and errors") {
  Graph g;
  g.opsets[""] = 17;
  g.inputs = {"a", "b"};
  g.values["a"] = ValueInfo{DataType::Float32, nshape({3})};
  g.values["b"] = ValueInfo{DataType::Float32, nshape({5})};
  g.nodes.push_back(make_node("Concat", {"a", "b"}, {"y"}, {{"axis", Attribute::of_int(1)}}));
  g.outputs = {"y"};
  infer_shapes(g, registry().schemas, "test");
  CHECK(shape_to_string(*g.info("y").shape) == "[N,8]");

  Tensor a = iota(DataType::Float32, {2, 3});
  Node n = make_node("Concat", {"a", "b"}, {"y"}, {{"axis", Attribute::of_int(1)}});
  CHECK(has(error_of(n, {{"a", a}, {"b", iota(DataType::Float32, {3, 3})}}),
            "'Concat_test' (Concat): input 1 'b' [3,3] differs from input 0 [2,3] in dimension 0"));
  CHECK(has(error_of(n, {{"a", a}, {"b", iota(DataType::Float32, {2, 3, 1})}}),
            "'Concat_test' (Concat): input 1 'b' has rank 3, input 0 has rank 2"));
  CHECK(has(error_of(n, {{"a", a}, {"b", iota(DataType::Int64, {2, 3})}}),
            "'Concat_test' (Concat): inputs 0 and 1 must share a dtype"));
  CHECK(has(error_of(make_node("Concat", {"a", "b"}, {"y"}, {{"axis", Attribute::of_int(2)}}), {{"a", a}, {"b", a}}),
            "'Concat_test' (Concat): attribute 'axis' = 2 is out of range [-2, 1]"));
  CHECK(has(error_of(make_node("Concat", {"a", "b"}, {"y"}), {{"a", a}, {"b", a}}),
            "'Concat_test' (Concat): attribute 'axis' is required"));
}

TEST_CASE("Pad: constant mode, value, negative pads crop, dtypes") {
  for (DataType t : {DataType::Float32, DataType::Float64, DataType::Int64}) {
    Tensor x = iota(t, {2, 3});
    Tensor v(t, {});
    v.set_from_double(0, 7);
    // pads [begin0, begin1, end0, end1] = [1, 0, 0, 2]: one row above, two columns right
    TensorMap out = run_node(make_node("Pad", {"x", "p", "v"}, {"y"}), {{"x", x}, {"v", v}}, "reference",
                             {{"p", ints({1, 0, 0, 2})}});
    REQUIRE(out["y"].dims() == std::vector<int64_t>{3, 5});
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 5; ++j) {
        bool inside = i >= 1 && j < 3;
        CHECK(out["y"].get_as_double(i * 5 + j) == (inside ? x.get_as_double((i - 1) * 3 + j) : 7));
      }
    // no value: zeros; negative pads crop the first column and the last row
    out = run_node(make_node("Pad", {"x", "p"}, {"y"}, {{"mode", Attribute::of_string("constant")}}), {{"x", x}},
                   "reference", {{"p", ints({0, -1, -1, 1})}});
    REQUIRE(out["y"].dims() == std::vector<int64_t>{1, 3});
    CHECK(out["y"].get_as_double(0) == 1);
    CHECK(out["y"].get_as_double(1) == 2);
    CHECK(out["y"].get_as_double(2) == 0);
  }
  // N,C,H,W spatial padding
  Tensor x = random_tensor(DataType::Float32, {1, 2, 3, 3}, 1);
  TensorMap out =
      run_node(make_node("Pad", {"x", "p"}, {"y"}), {{"x", x}}, "reference", {{"p", ints({0, 0, 1, 1, 0, 0, 1, 1})}});
  REQUIRE(out["y"].dims() == std::vector<int64_t>{1, 2, 5, 5});
  CHECK(out["y"].get_as_double(0) == 0);
  CHECK(out["y"].get_as_double(6) == x.get_as_double(0));
  CHECK(out["y"].get_as_double(25 + 18) == x.get_as_double(9 + 8));
}

TEST_CASE("Pad: opset 18 axes input") {
  Node n = make_node("Pad", {"x", "p", "", "a"}, {"y"});
  Tensor x = iota(DataType::Float32, {2, 3});
  Graph g = single_node_graph(n, {{"x", x}}, {{"p", ints({1, 1})}, {"a", ints({-1})}}, 18);
  TensorMap out = run_graph(g, {{"x", x}}, *make_backend("reference"));
  REQUIRE(out["y"].dims() == std::vector<int64_t>{2, 5});
  CHECK(out["y"].get_as_double(0) == 0);
  CHECK(out["y"].get_as_double(1) == 0);
  CHECK(out["y"].get_as_double(4) == 0);
  CHECK(out["y"].get_as_double(6) == 3);
  CHECK(has(error_of(n, {{"x", x}}, {{"p", ints({1, 1})}, {"a", ints({-1})}}),
            "'Pad_test' (Pad): input 3 'a' (axes) needs ai.onnx opset 18, the model imports opset 17"));
  std::string e;
  try {
    single_node_graph(n, {{"x", x}}, {{"p", ints({1, 1})}, {"a", ints({2})}}, 18);
  } catch (const Error& err) {
    e = err.what();
  }
  CHECK(has(e, "'Pad_test' (Pad): input 3 'a' (axes) [2] has an out-of-range or repeated axis"));
}

TEST_CASE("Pad: symbolic batch and errors") {
  CHECK(symbolic_shape(make_node("Pad", {"x", "p"}, {"y"}), nshape({3, 4}), {{"p", ints({0, 1, 1, 0, 1, 1})}}) ==
        "[N,5,6]");
  CHECK(symbolic_shape(make_node("Pad", {"x", "p"}, {"y"}), nshape({3}), {{"p", ints({1, 0, 0, 0})}}) == "[?,3]");
  Tensor x = iota(DataType::Float32, {2, 3});
  // x = [[0,1,2],[3,4,5]] padded by one on every side
  const std::map<std::string, std::vector<float>> first_row{{"reflect", {4, 3, 4, 5, 4}}, {"edge", {0, 0, 1, 2, 2}}};
  for (const auto& [mode, want] : first_row) {
    CAPTURE(mode);
    const Node pad = make_node("Pad", {"x", "p"}, {"y"}, {{"mode", Attribute::of_string(mode)}});
    for (const char* backend : {"reference", "cpu"}) {
      const Tensor y = run_node(pad, {{"x", x}}, backend, {{"p", ints({1, 1, 1, 1})}}).at("y");
      REQUIRE(y.dims() == std::vector<int64_t>{4, 5});
      CHECK(std::vector<float>(y.data<float>(), y.data<float>() + 5) == want);
    }
  }
  CHECK(has(error_of(make_node("Pad", {"x", "p"}, {"y"}, {{"mode", Attribute::of_string("reflect")}}), {{"x", x}},
                     {{"p", ints({2, 0, 0, 0})}}),
            "mode 'reflect' pads [2,0,0,0] must be smaller than dimension 0"));
  CHECK(has(error_of(make_node("Pad", {"x", "p"}, {"y"}, {{"mode", Attribute::of_string("mirror")}}), {{"x", x}},
                     {{"p", ints({1, 1, 1, 1})}}),
            "'Pad_test' (Pad): attribute 'mode' = 'mirror' is not a Pad mode"));
  Node n = make_node("Pad", {"x", "p"}, {"y"});
  CHECK(has(error_of(n, {{"x", x}}, {{"p", ints({1, 1})}}),
            "'Pad_test' (Pad): input 1 'p' (pads) [1,1] must have 4 values"));
  CHECK(has(error_of(n, {{"x", x}}, {{"p", ints({-2, 0, -1, 0})}}),
            "'Pad_test' (Pad): pads [-2,0,-1,0] crop dimension 0 of [2,3] below zero"));
  // pads fed at run time: the plan is specialised on their value, checked when they arrive
  CHECK(run_node(n, {{"x", x}, {"p", ints({1, 1, 1, 1})}}, "cpu").at("y").dims() == std::vector<int64_t>{4, 5});
  CHECK(has(error_of(n, {{"x", x}, {"p", ints({-2, 0, -1, 0})}}),
            "'Pad_test' (Pad): pads [-2,0,-1,0] crop dimension 0 of [2,3] below zero"));
  CHECK(has(error_of(make_node("Pad", {"x", "p", "v"}, {"y"}), {{"x", x}, {"v", Tensor(DataType::Float64, {})}},
                     {{"p", ints({1, 1, 1, 1})}}),
            "'Pad_test' (Pad): inputs 0 and 2 must share a dtype"));
  CHECK(has(error_of(make_node("Pad", {"x", "p", "v"}, {"y"}), {{"x", x}, {"v", Tensor(DataType::Float32, {2})}},
                     {{"p", ints({1, 1, 1, 1})}}),
            "'Pad_test' (Pad): input 2 'v' (constant_value) must be a scalar"));
}

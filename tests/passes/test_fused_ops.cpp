// The fused ops (ops/fused.cpp, ops/fused_cpu.cpp) against the unfused graph they
// replace, run on the reference backend (FusedConv in every precision: fp32, bf16, fp16);
// the cpu kernels must take the oneDNN path.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/core/common.h"
#include "ops/core/dropout_mask.h"
#include "ops/norm_cpu.h"
#include "ops/onednn/dnnl_util.h"
#include "passes/fuse_util.h"
#include "wrn_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

Graph graph_of(std::vector<Node> nodes, const TensorMap& feeds, const TensorMap& inits, std::vector<std::string> outs) {
  Graph g;
  g.name = "fused";
  g.opsets[""] = 17;
  g.opsets[kTrainrtDomain] = 1;
  for (const auto& [name, t] : feeds) {
    g.inputs.push_back(name);
    g.values[name] = ValueInfo{t.dtype(), shape_of(t.dims())};
  }
  for (const auto& [name, t] : inits) {
    g.initializers[name] = t;
    g.values[name] = ValueInfo{t.dtype(), shape_of(t.dims())};
  }
  for (size_t i = 0; i < nodes.size(); ++i) nodes[i].name = "n" + std::to_string(i);
  g.nodes = std::move(nodes);
  g.outputs = std::move(outs);
  validate_graph(g, registry().schemas, "fused");
  infer_shapes(g, registry().schemas, "fused");
  return g;
}

std::map<std::string, Attribute> conv_attrs(int64_t stride, int64_t group) {
  return {{"kernel_shape", Attribute::of_ints({3, 3})},
          {"pads", Attribute::of_ints({1, 1, 1, 1})},
          {"strides", Attribute::of_ints({stride, stride})},
          {"group", Attribute::of_int(group)}};
}

// g run once on `backend` with the convolutions in `math` (ops/core/kernel.h).
TensorMap run_in(const Graph& g, const TensorMap& feeds, const std::string& backend, MathPrecision math) {
  const std::unique_ptr<Backend> b = make_backend(backend);  // the executor keeps a reference
  ExecutorOptions o;
  o.plan.kept_outside = true;
  o.math = math;
  return Executor(g, *b, o).run(feeds);
}

}  // namespace

TEST_CASE("FusedConv = act(Conv + B) + Z on reference and cpu, for every combination of bias, Relu and Z") {
  for (int64_t stride : {1, 2})
    for (int64_t group : {1, 2})
      for (int mask = 0; mask < 8; ++mask) {
        const bool bias = mask & 1, relu = mask & 2, residual = mask & 4;
        CAPTURE(stride);
        CAPTURE(group);
        CAPTURE(mask);
        const int64_t ho = stride == 1 ? 9 : 5;
        TensorMap feeds{{"x", random_tensor(DataType::Float32, {2, 4, 9, 9}, 1)},
                        {"z", random_tensor(DataType::Float32, {2, 6, ho, ho}, 2)}};
        TensorMap inits{{"w", random_tensor(DataType::Float32, {6, 4 / group, 3, 3}, 3)},
                        {"b", random_tensor(DataType::Float32, {6}, 4)}};
        if (!residual) feeds.erase("z");
        if (!bias) inits.erase("b");
        // Unfused: Conv -> [Relu] -> [Add z]
        std::vector<Node> plain{make_node("Conv", {"x", "w", bias ? "b" : ""}, {"c"}, conv_attrs(stride, group))};
        std::string last = "c";
        if (relu) {
          plain.push_back(make_node("Relu", {last}, {"r"}));
          last = "r";
        }
        if (residual) {
          plain.push_back(make_node("Add", {last, "z"}, {"s"}));
          last = "s";
        }
        plain.push_back(make_node("Identity", {last}, {"y"}));
        auto attrs = conv_attrs(stride, group);
        if (relu) attrs["activation"] = Attribute::of_string("Relu");
        Node f = make_node("FusedConv", {"x", "w", bias ? "b" : "", residual ? "z" : ""}, {"y"}, attrs, kTrainrtDomain);
        while (!f.inputs.empty() && f.inputs.back().empty()) f.inputs.pop_back();
        const Graph unfused = graph_of(plain, feeds, inits, {"y"});
        const Graph fused = graph_of({f}, feeds, inits, {"y"});
        // In every precision: bf16/fp16 round the convolution's inputs alike in both graphs,
        // and its output (conv + B, math_rounded_outputs) before the Relu and the residual
        // Add, which stay fp32 (the fused node's bias and residual are not rounded, as the
        // unfused Add's are not). The fused node equals the unfused graph bit for bit on
        // each backend: a FusedConv that rounded once at the end, or not at all, fails.
        const Tensor fp32 = run_in(unfused, feeds, "reference", MathPrecision::fp32).at("y");
        for (MathPrecision math : {MathPrecision::fp32, MathPrecision::bf16, MathPrecision::fp16}) {
          CAPTURE(math_precision_name(math));
          const Tensor want = run_in(unfused, feeds, "reference", math).at("y");
          if (math != MathPrecision::fp32) CHECK(max_abs_diff(want, fp32) > 1e-5);  // it did round
          CHECK(max_abs_diff(run_in(fused, feeds, "reference", math).at("y"), want) == 0.0);
          if (math == MathPrecision::bf16 && !dnnl_util::cpu_has_bf16()) continue;  // cpu refuses bf16 there
          const uint64_t fallbacks = dnnl_util::reference_fallbacks();
          const Tensor cpu_fused = run_in(fused, feeds, "cpu", math).at("y");
          CHECK(dnnl_util::reference_fallbacks() == fallbacks);
          // The cpu's fp32 sums may differ from the reference's in their last places, and
          // round to neighbouring 16-bit numbers: under bf16/fp16 the cpu's unfused graph
          // is its oracle (in fp32 oneDNN's sum post-op adds Z in another order).
          if (math != MathPrecision::fp32)
            CHECK(max_abs_diff(cpu_fused, run_in(unfused, feeds, "cpu", math).at("y")) == 0.0);
          const double step = math == MathPrecision::bf16   ? 0.05
                              : math == MathPrecision::fp16 ? 5e-3
                                                            : 0;  // |conv| < 8
          CHECK(max_abs_diff(cpu_fused, want) < 1e-4 + step);
        }
      }
}

TEST_CASE("FusedGemm = Relu(Gemm) on reference and cpu: transposes, alpha/beta, C broadcast or none, fp32 and fp64") {
  const std::vector<std::vector<int64_t>> cs{{}, {5}, {1, 5}, {3, 1}, {3, 5}, {1}};  // {} first: no C
  for (DataType t : {DataType::Float32, DataType::Float64})
    for (int trans = 0; trans < 4; ++trans)
      for (size_t ci = 0; ci < cs.size(); ++ci) {
        const bool ta = trans & 1, tb = trans & 2, has_c = ci > 0;
        const float alpha = ci == 3 ? 0.5f : 1.f, beta = ci == 4 ? -2.f : 1.f;
        CAPTURE(dtype_name(t));
        CAPTURE(trans);
        CAPTURE(ci);
        const TensorMap feeds{{"a", random_tensor(t, ta ? std::vector<int64_t>{7, 3} : std::vector<int64_t>{3, 7}, 1)}};
        TensorMap inits{{"b", random_tensor(t, tb ? std::vector<int64_t>{5, 7} : std::vector<int64_t>{7, 5}, 2)}};
        if (has_c) inits["c"] = random_tensor(t, cs[ci], 3);
        const std::map<std::string, Attribute> attrs{{"transA", Attribute::of_int(ta)},
                                                     {"transB", Attribute::of_int(tb)},
                                                     {"alpha", Attribute::of_float(alpha)},
                                                     {"beta", Attribute::of_float(beta)}};
        std::vector<std::string> ins{"a", "b"};
        if (has_c) ins.push_back("c");
        const Graph unfused =
            graph_of({make_node("Gemm", ins, {"g"}, attrs), make_node("Relu", {"g"}, {"y"})}, feeds, inits, {"y"});
        auto fattrs = attrs;
        fattrs["activation"] = Attribute::of_string("Relu");
        const Graph fused = graph_of({make_node("FusedGemm", ins, {"y"}, fattrs, kTrainrtDomain)}, feeds, inits, {"y"});
        const Tensor want = run_in(unfused, feeds, "reference", MathPrecision::fp32).at("y");
        size_t zeros = 0, positive = 0;
        for (int64_t i = 0; i < want.numel(); ++i) (want.get_as_double(i) == 0 ? zeros : positive) += 1;
        CHECK(zeros > 0);  // the ReLU cut something, and left something
        CHECK(positive > 0);
        CHECK(max_abs_diff(run_in(fused, feeds, "reference", MathPrecision::fp32).at("y"), want) == 0.0);
        const uint64_t fallbacks = dnnl_util::reference_fallbacks();
        CHECK(max_abs_diff(run_in(fused, feeds, "cpu", MathPrecision::fp32).at("y"), want) < 1e-5);
        if (t == DataType::Float32) CHECK(dnnl_util::reference_fallbacks() == fallbacks);  // oneDNN's matmul ran
        // Without the activation it is Gemm.
        fattrs.erase("activation");
        const Graph plain = graph_of({make_node("FusedGemm", ins, {"y"}, fattrs, kTrainrtDomain)}, feeds, inits, {"y"});
        const Graph gemm = graph_of({make_node("Gemm", ins, {"y"}, attrs)}, feeds, inits, {"y"});
        CHECK(max_abs_diff(run_in(plain, feeds, "cpu", MathPrecision::fp32).at("y"),
                           run_in(gemm, feeds, "reference", MathPrecision::fp32).at("y")) < 1e-5);
      }
}

TEST_CASE("FusedGemm's sums (sum_of A / B): op(A)'s rows or op(B)'s columns summed over K, with the product") {
  for (const char* of : {"A", "B"})
    for (int trans = 0; trans < 4; ++trans) {
      const bool ta = trans & 1, tb = trans & 2;
      CAPTURE(of);
      CAPTURE(trans);
      const int64_t m = 3, k = 7, n = 5;
      const Tensor a =
          random_tensor(DataType::Float32, ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k}, 1);
      const Tensor b =
          random_tensor(DataType::Float32, tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n}, 2);
      const std::map<std::string, Attribute> attrs{
          {"transA", Attribute::of_int(ta)}, {"transB", Attribute::of_int(tb)}, {"sum_of", Attribute::of_string(of)}};
      const Graph fused = graph_of({make_node("FusedGemm", {"a", "b"}, {"y", "s"}, attrs, kTrainrtDomain)}, {{"a", a}},
                                   {{"b", b}}, {"y", "s"});
      const bool of_a = std::string(of) == "A";
      REQUIRE(fused.find_info("s")->shape == Shape{Dim::of(of_a ? m : n)});
      // By hand: op(A)[i][j] = A[i][j] or A[j][i]; op(B)[j][c] = B[j][c] or B[c][j].
      auto op_a = [&](int64_t i, int64_t j) { return a.get_as_double(ta ? j * m + i : i * k + j); };
      auto op_b = [&](int64_t j, int64_t c) { return b.get_as_double(tb ? c * k + j : j * n + c); };
      const TensorMap ref = run_in(fused, {{"a", a}}, "reference", MathPrecision::fp32);
      const Tensor& sums = ref.at("s");
      for (int64_t r = 0; r < (of_a ? m : n); ++r) {
        double want = 0;
        for (int64_t j = 0; j < k; ++j) want += of_a ? op_a(r, j) : op_b(j, r);
        CHECK(std::fabs(sums.get_as_double(r) - want) < 1e-5);
      }
      const Graph gemm = graph_of({make_node("Gemm", {"a", "b"}, {"y"},
                                             {{"transA", Attribute::of_int(ta)}, {"transB", Attribute::of_int(tb)}})},
                                  {{"a", a}}, {{"b", b}}, {"y"});
      CHECK(max_abs_diff(ref.at("y"), run_in(gemm, {{"a", a}}, "reference", MathPrecision::fp32).at("y")) == 0.0);
      // The cpu kernel: oneDNN's product, the reference's own sums.
      const TensorMap cpu = run_in(fused, {{"a", a}}, "cpu", MathPrecision::fp32);
      CHECK(max_abs_diff(cpu.at("s"), sums) == 0.0);
      CHECK(max_abs_diff(cpu.at("y"), ref.at("y")) < 1e-5);
    }
  // One-line errors: sums without sum_of, sum_of without the output, with an activation.
  const TensorMap feeds{{"a", Tensor(DataType::Float32, {2, 3})}};
  const TensorMap inits{{"b", Tensor(DataType::Float32, {3, 4})}};
  auto error = [&](std::vector<std::string> outs, std::map<std::string, Attribute> attrs) {
    ErrorKind kind{};
    const std::string e = error_of(
        [&] {
          graph_of({make_node("FusedGemm", {"a", "b"}, outs, attrs, kTrainrtDomain)}, feeds, inits, outs);
        },
        &kind);
    CHECK(e.find("'n0' (FusedGemm)") != std::string::npos);
    return e;
  };
  CHECK(error({"y", "s"}, {}).find("needs attribute 'sum_of'") != std::string::npos);
  CHECK(error({"y"}, {{"sum_of", Attribute::of_string("A")}}).find("needs output 1") != std::string::npos);
  CHECK(error({"y", "s"}, {{"sum_of", Attribute::of_string("A")}, {"activation", Attribute::of_string("Relu")}})
            .find("cannot be combined") != std::string::npos);
  CHECK(error({"y", "s"}, {{"sum_of", Attribute::of_string("C")}}).find("'sum_of' must be") != std::string::npos);
}

TEST_CASE("ConvGrad(dx_relu) = ReluGrad(ConvGrad's dX, X) in every precision, X read unrounded") {
  // X as a Relu's output: zeros, ordinary positives and positives too small for IEEE half
  // (they round to 0 under fp16, so a mask on the rounded X would differ).
  Tensor x = random_tensor(DataType::Float32, {2, 16, 6, 6}, 1, -1.0, 1.0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    float& v = x.data<float>()[i];
    if (v < 0) v = 0;
    if (i % 7 == 0) v = 1e-9f;
  }
  const TensorMap feeds{{"dy", random_tensor(DataType::Float32, {2, 8, 6, 6}, 2)}, {"x", x}};
  const TensorMap inits{{"w", random_tensor(DataType::Float32, {8, 16, 3, 3}, 3)}};
  const auto attrs = conv_attrs(1, 1);
  for (bool dw : {false, true}) {
    CAPTURE(dw);
    const std::vector<std::string> outs = dw ? std::vector<std::string>{"dx", "dw"} : std::vector<std::string>{"dx"};
    std::vector<std::string> plain_outs = outs;
    plain_outs[0] = "g";
    const Graph unfused = graph_of({make_node("ConvGrad", {"dy", "x", "w"}, plain_outs, attrs, kTrainrtDomain),
                                    make_node("ReluGrad", {"g", "x"}, {"dx"}, {}, kTrainrtDomain)},
                                   feeds, inits, outs);
    auto fattrs = attrs;
    fattrs["dx_relu"] = Attribute::of_int(1);
    const Graph fused =
        graph_of({make_node("ConvGrad", {"dy", "x", "w"}, outs, fattrs, kTrainrtDomain)}, feeds, inits, outs);
    for (MathPrecision math : {MathPrecision::fp32, MathPrecision::bf16, MathPrecision::fp16}) {
      CAPTURE(math_precision_name(math));
      const TensorMap want = run_in(unfused, feeds, "reference", math);
      const TensorMap got = run_in(fused, feeds, "reference", math);
      size_t cut = 0, tiny_kept = 0;
      for (int64_t i = 0; i < x.numel(); ++i) {
        cut += x.data<float>()[i] == 0 && want.at("dx").data<float>()[i] == 0;
        tiny_kept += x.data<float>()[i] == 1e-9f && want.at("dx").data<float>()[i] != 0;
      }
      CHECK(cut > 0);
      CHECK(tiny_kept > 0);
      for (const std::string& o : outs) CHECK(max_abs_diff(got.at(o), want.at(o)) == 0.0);
      if (math == MathPrecision::bf16 && !dnnl_util::cpu_has_bf16()) continue;  // cpu refuses bf16 there
      const TensorMap cpu = run_in(fused, feeds, "cpu", math);
      // Under bf16/fp16 dX is rounded (math_rounded_outputs), and the cpu's fp32 sums may
      // round to the reference's neighbouring 16-bit number: the cpu's unfused graph is
      // the bit-for-bit oracle, the reference within a 16-bit step.
      for (const std::string& o : outs)
        CHECK(rel_diff(cpu.at(o), want.at(o)) < (o == "dx" && math != MathPrecision::fp32 ? 1e-3 : 1e-4));
      if (math != MathPrecision::fp32)
        CHECK(max_abs_diff(cpu.at("dx"), run_in(unfused, feeds, "cpu", math).at("dx")) == 0.0);
      for (int64_t i = 0; i < x.numel(); ++i)  // the mask itself is exact
        if (x.data<float>()[i] == 0) CHECK(cpu.at("dx").data<float>()[i] == 0);
    }
  }
}

TEST_CASE("BatchNormalizationGrad(relu_y) = BatchNormalizationGrad(ReluGrad(dY, Y)), with and without saved stats") {
  // Y as a Relu's output: zeros, positives, and a NaN dY where Y cuts it (the select drops it).
  Tensor y = random_tensor(DataType::Float32, {3, 16, 5, 5}, 7, -1.0, 1.0);
  for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] = std::max(y.data<float>()[i], 0.f);
  Tensor dy = random_tensor(DataType::Float32, {3, 16, 5, 5}, 8);
  for (int64_t i = 0; i < dy.numel(); i += 11)
    if (y.data<float>()[i] == 0) dy.data<float>()[i] = std::nanf("");
  const TensorMap feeds{{"dy", dy}, {"x", random_tensor(DataType::Float32, {3, 16, 5, 5}, 9)}, {"y", y}};
  const TensorMap inits{{"scale", random_tensor(DataType::Float32, {16}, 10, 0.5, 1.5)},
                        {"mean", random_tensor(DataType::Float32, {16}, 11, -0.2, 0.2)},
                        {"var", random_tensor(DataType::Float32, {16}, 12, 0.5, 1.5)}};
  const std::vector<std::string> outs{"dx", "dscale", "dbias"};
  for (bool saved : {false, true}) {
    CAPTURE(saved);
    std::vector<std::string> stats = saved ? std::vector<std::string>{"mean", "var"} : std::vector<std::string>{"", ""};
    std::vector<std::string> plain_in{"g", "x", "scale"}, fused_in{"dy", "x", "scale"};
    plain_in.insert(plain_in.end(), stats.begin(), stats.end());
    fused_in.insert(fused_in.end(), stats.begin(), stats.end());
    fused_in.push_back("y");
    if (!saved) plain_in.resize(3);
    const Graph unfused = graph_of({make_node("ReluGrad", {"dy", "y"}, {"g"}, {}, kTrainrtDomain),
                                    make_node("BatchNormalizationGrad", plain_in, outs, {}, kTrainrtDomain)},
                                   feeds, inits, outs);
    const Graph fused =
        graph_of({make_node("BatchNormalizationGrad", fused_in, outs, {}, kTrainrtDomain)}, feeds, inits, outs);
    const TensorMap want = run_in(unfused, feeds, "reference", MathPrecision::fp32);
    for (const std::string& o : outs) {
      CAPTURE(o);
      CHECK(std::isfinite(max_abs_diff(want.at(o), want.at(o))));  // the NaNs were masked away
      CHECK(max_abs_diff(run_in(fused, feeds, "reference", MathPrecision::fp32).at(o), want.at(o)) == 0.0);
    }
    // cpu: its own ReluGrad kernel masks, then oneDNN's backward: the unfused nodes' bits.
    // (oneDNN's ReluGrad multiplies, so a NaN dY where Y is 0 stays NaN: dY without NaNs.)
    TensorMap clean = feeds;
    clean["dy"] = random_tensor(DataType::Float32, {3, 16, 5, 5}, 13);
    const TensorMap cpu_fused = run_in(fused, clean, "cpu", MathPrecision::fp32);
    const TensorMap cpu_plain = run_in(unfused, clean, "cpu", MathPrecision::fp32);
    const TensorMap ref_clean = run_in(unfused, clean, "reference", MathPrecision::fp32);
    for (const std::string& o : outs) {
      CAPTURE(o);
      CHECK(max_abs_diff(cpu_fused.at(o), cpu_plain.at(o)) == 0.0);
      CHECK(rel_diff(cpu_fused.at(o), ref_clean.at(o)) < 1e-4);
    }
  }
  // The shape rule: relu_y must have X's shape.
  const TensorMap bad{{"dy", dy}, {"x", feeds.at("x")}, {"y", random_tensor(DataType::Float32, {3, 16, 5, 4}, 1)}};
  ErrorKind kind{};
  const std::string e = error_of(
      [&] {
        graph_of({make_node("BatchNormalizationGrad", {"dy", "x", "scale", "", "", "y"}, outs, {}, kTrainrtDomain)},
                 bad, inits, outs);
      },
      &kind);
  CHECK(kind == ErrorKind::BadInput);
  CHECK(e.find("(relu_y) has shape [3,16,5,4] but X 'x' is [3,16,5,5]") != std::string::npos);
}

TEST_CASE("BatchNormalizationRelu = Relu(BatchNormalization) in training and inference, running stats included") {
  TensorMap inits{{"scale", random_tensor(DataType::Float32, {6}, 2, 0.5, 1.5)},
                  {"bias", random_tensor(DataType::Float32, {6}, 3)},
                  {"mean", random_tensor(DataType::Float32, {6}, 4)},
                  {"var", random_tensor(DataType::Float32, {6}, 5, 0.5, 2)}};
  // N,C,H,W, then the 1-D and 3-D forms (N,C,L and N,C,D,H,W) that Conv1d/Conv3d nets fuse.
  for (std::vector<int64_t> dims : {std::vector<int64_t>{4, 6, 5, 5}, {4, 6, 7}, {2, 6, 3, 4, 5}})
    for (bool training : {false, true}) {
      const TensorMap feeds{{"x", random_tensor(DataType::Float32, dims, 1, -2, 2)}};
      CAPTURE(dims_to_string(dims));
      CAPTURE(training);
      std::map<std::string, Attribute> attrs{{"epsilon", Attribute::of_float(1e-3f)},
                                             {"momentum", Attribute::of_float(0.8f)}};
      std::vector<std::string> outs{"bn"}, fouts{"y"};
      if (training) {
        attrs["training_mode"] = Attribute::of_int(1);
        outs = {"bn", "rm", "rv"};
        fouts = {"y", "rm", "rv"};
      }
      const std::vector<std::string> ins{"x", "scale", "bias", "mean", "var"};
      const Graph unfused = graph_of(
          {make_node("BatchNormalization", ins, outs, attrs), make_node("Relu", {"bn"}, {"y"})}, feeds, inits, fouts);
      const Graph fused =
          graph_of({make_node("BatchNormalizationRelu", ins, fouts, attrs, kTrainrtDomain)}, feeds, inits, fouts);
      const TensorMap want = run_graph(unfused, feeds, *make_backend("reference"));
      const TensorMap ref = run_graph(fused, feeds, *make_backend("reference"));
      const uint64_t fallbacks = dnnl_util::reference_fallbacks();
      const TensorMap cpu = run_graph(fused, feeds, *make_backend("cpu"));
      CHECK(dnnl_util::reference_fallbacks() == fallbacks);
      for (const std::string& o : fouts) {
        CAPTURE(o);
        CHECK(max_abs_diff(ref.at(o), want.at(o)) == 0.0);
        CHECK(max_abs_diff(cpu.at(o), want.at(o)) < 1e-5);
      }
      double zeros = 0;
      for (int64_t i = 0; i < want.at("y").numel(); ++i) zeros += want.at("y").get_as_double(i) == 0.0 ? 1 : 0;
      CHECK(zeros > 0);  // the Relu did clip something
    }
}

TEST_CASE("BatchNormalizationReluDropout = Dropout(BatchNormalizationRelu) with the Dropout's mask (dropout_node)") {
  // [BatchNormalizationRelu (node 0), Dropout (node 1)] and the one fused node carrying
  // dropout_node = 1: the same Z and running statistics bit for bit on both backends, in
  // a training run with a seed. Carrying 0 (the fused node's own index) draws another mask.
  const TensorMap feeds{{"x", random_tensor(DataType::Float32, {4, 8, 5, 5}, 1, -2, 2)}};
  Tensor ratio(DataType::Float32, {});
  ratio.data<float>()[0] = 0.3f;
  TensorMap inits{{"scale", random_tensor(DataType::Float32, {8}, 2, 0.5, 1.5)},
                  {"bias", random_tensor(DataType::Float32, {8}, 3)},
                  {"mean", random_tensor(DataType::Float32, {8}, 4)},
                  {"var", random_tensor(DataType::Float32, {8}, 5, 0.5, 2)},
                  {"ratio", ratio}};
  std::map<std::string, Attribute> attrs{{"epsilon", Attribute::of_float(1e-3f)},
                                         {"momentum", Attribute::of_float(0.8f)},
                                         {"training_mode", Attribute::of_int(1)}};
  const std::vector<std::string> ins{"x", "scale", "bias", "mean", "var"}, outs{"z", "rm", "rv"};
  const Graph unfused = graph_of({make_node("BatchNormalizationRelu", ins, {"y", "rm", "rv"}, attrs, kTrainrtDomain),
                                  make_node("Dropout", {"y", "ratio"}, {"z"})},
                                 feeds, inits, outs);
  auto fused_with = [&](int64_t dropout_node) {
    std::map<std::string, Attribute> a = attrs;
    a["dropout_node"] = Attribute::of_int(dropout_node);
    std::vector<std::string> fins = ins;
    fins.push_back("ratio");
    return graph_of({make_node("BatchNormalizationReluDropout", fins, outs, a, kTrainrtDomain)}, feeds, inits, outs);
  };
  RunOptions ro;
  ro.training = true;
  ro.seed = 12345;
  const TensorMap want = run_graph(unfused, feeds, *make_backend("reference"), ro);
  for (const char* backend : {"reference", "cpu"}) {
    CAPTURE(backend);
    const TensorMap got = run_graph(fused_with(1), feeds, *make_backend(backend), ro);
    const TensorMap cpu_pair = run_graph(unfused, feeds, *make_backend(backend), ro);
    for (const std::string& o : outs) {
      CAPTURE(o);
      CHECK(max_abs_diff(got.at(o), cpu_pair.at(o)) == 0.0);  // the backend's own pair, bit for bit
      if (std::string(backend) == "reference") CHECK(max_abs_diff(got.at(o), want.at(o)) == 0.0);
    }
    // Another carried index: another mask, so another Z.
    CHECK(max_abs_diff(run_graph(fused_with(0), feeds, *make_backend(backend), ro).at("z"), want.at("z")) > 0.0);
  }
  // Without training the node is BatchNormalizationRelu (training_mode on BN only).
  double dropped = 0, positive = 0;
  const TensorMap y =
      run_graph(graph_of({make_node("BatchNormalizationRelu", ins, {"y", "rm", "rv"}, attrs, kTrainrtDomain)}, feeds,
                         inits, {"y"}),
                feeds, *make_backend("reference"), ro);
  for (int64_t i = 0; i < want.at("z").numel(); ++i) {
    positive += y.at("y").get_as_double(i) > 0;
    dropped += y.at("y").get_as_double(i) > 0 && want.at("z").get_as_double(i) == 0.0;
  }
  CHECK(dropped > 0);  // the mask did drop some of Y's positive values
  CHECK(dropped < positive);
}

TEST_CASE(
    "BatchNormalizationReluDropout's cpu kernel: one pass on row-major fp32, the pair's loops on Blocked16c and under "
    "bf16/fp16, the unfused pair's bits") {
  // The unfused pair by hand from the backend's own kernels on the same layout:
  // BatchNormalizationRelu, its Y rounded as the executor rounds it (bf16/fp16), and
  // Dropout with the seed the executor gives node 7 (dropout_node) in a run seeded 99;
  // the fused node sits at index 3.
  const uint64_t run_seed = 99, fused_index = 3, dropout_index = 7;
  const Tensor scale = random_tensor(DataType::Float32, {16}, 2, 0.5, 1.5);
  const Tensor bias = random_tensor(DataType::Float32, {16}, 3), mean = random_tensor(DataType::Float32, {16}, 4);
  const Tensor var = random_tensor(DataType::Float32, {16}, 5, 0.5, 2);
  Tensor ratio(DataType::Float32, {});
  ratio.data<float>()[0] = 0.3f;
  std::map<std::string, Attribute> attrs{{"epsilon", Attribute::of_float(1e-3f)},
                                         {"momentum", Attribute::of_float(0.8f)},
                                         {"dropout_node", Attribute::of_int(static_cast<int64_t>(dropout_index))}};
  const Node fused = make_node("BatchNormalizationReluDropout", {"x", "s", "b", "m", "v", "r"}, {"z", "rm", "rv"},
                               attrs, kTrainrtDomain);
  attrs.erase("dropout_node");
  const Node bn =
      make_node("BatchNormalizationRelu", {"x", "s", "b", "m", "v"}, {"y", "rm", "rv"}, attrs, kTrainrtDomain);
  const Node dropout = make_node("Dropout", {"y", "r"}, {"z"});
  auto same_bits = [](const Tensor& a, const Tensor& b) {
    const Tensor pa = to_plain(a), pb = to_plain(b);
    return pa.nbytes() == pb.nbytes() && std::memcmp(pa.raw(), pb.raw(), pa.nbytes()) == 0;
  };
  auto laid_out = [](const Tensor& plain, Layout layout) {
    Tensor t(plain.dtype(), plain.dims());
    t.set_layout(layout);
    copy_from_plain(plain, t);
    return t;
  };
  for (const char* name : {"reference", "cpu"}) {
    const std::unique_ptr<Backend> backend = make_backend(name);
    for (const std::vector<int64_t>& dims : {std::vector<int64_t>{4, 16, 5, 5}, std::vector<int64_t>{2, 16, 4, 4}})
      for (MathPrecision math : {MathPrecision::fp32, MathPrecision::bf16, MathPrecision::fp16})
        for (Layout layout : {Layout::Plain, Layout::Blocked16c}) {
          if (std::string(name) == "reference" && layout != Layout::Plain) continue;  // it reads row-major only
          const std::string where = std::string(name) + " " + math_precision_name(math) +
                                    (layout == Layout::Plain ? " row-major " : " Blocked16c ") + dims_to_string(dims);
          CAPTURE(where);
          const Tensor x = laid_out(random_tensor(DataType::Float32, dims, 1, -2, 2), layout);
          Tensor y = laid_out(Tensor(DataType::Float32, dims), layout), want = y.clone(), z = y.clone();
          Tensor want_rm(DataType::Float32, {16}), want_rv(DataType::Float32, {16}), rm(DataType::Float32, {16}),
              rv(DataType::Float32, {16});
          KernelContext b{bn, {&x, &scale, &bias, &mean, &var}, {&y, &want_rm, &want_rv}, true};
          b.math = math;
          backend->kernel(bn)(b);
          if (math != MathPrecision::fp32)  // Backend::round_outputs
            round_floats(y.data<float>(), y.data<float>(), static_cast<int64_t>(y.nbytes() / 4), math, false);
          KernelContext d{dropout, {&y, &ratio}, {&want}, true, node_seed(run_seed, dropout_index)};
          d.node_index = dropout_index;
          backend->kernel(dropout)(d);
          const Tensor yp = to_plain(y), wp = to_plain(want);
          int64_t dropped = 0;
          for (int64_t i = 0; i < yp.numel(); ++i) dropped += yp.data<float>()[i] > 0 && wp.data<float>()[i] == 0;
          CHECK(dropped > 0);

          KernelContext f{
              fused, {&x, &scale, &bias, &mean, &var, &ratio}, {&z, &rm, &rv}, true, node_seed(run_seed, fused_index)};
          f.node_index = fused_index;
          f.math = math;
          backend->kernel(fused)(f);
          CHECK(same_bits(z, want));
          CHECK(same_bits(rm, want_rm));
          CHECK(same_bits(rv, want_rv));
          if (std::string(name) != "cpu") continue;
          // The one pass runs where the own apply loop does: fp32 X and Y, row-major or
          // Blocked16c.
          Tensor one = laid_out(Tensor(DataType::Float32, dims), layout);
          KernelContext c{bn, {&x, &scale, &bias, &mean, &var}, {&one}, true};
          FusedDropout rd{dropout_mask::key_of(node_seed(run_seed, dropout_index), 0),
                          dropout_mask::threshold(static_cast<double>(0.3f)),
                          static_cast<float>(1.0 / (1.0 - static_cast<double>(0.3f)))};
          batchnorm_forward_dnnl(c, /*fuse_relu=*/true, &rd);
          CHECK(rd.applied);
          if (math == MathPrecision::fp32 && rd.applied) CHECK(same_bits(one, want));
        }
  }
}

TEST_CASE("DropoutReluGrad(dZ, Z) = ReluGrad(DropoutGrad(dZ, mask), Y) bit for bit, on both backends") {
  // Y = Relu(X); (Z, mask) = Dropout(Y); dX = ReluGrad(DropoutGrad(dZ, mask), Y), then
  // the same graph after fuse_dropout_relu_grad. X has exact zeros and negatives, dZ
  // has signs of its own; ratios 0, 0.3 and 0.9; training_mode given or not.
  for (const float ratio : {0.f, 0.3f, 0.9f}) {
    for (const bool explicit_mode : {false, true}) {
      CAPTURE(ratio);
      CAPTURE(explicit_mode);
      Tensor x = random_tensor(DataType::Float32, {2, 5, 6, 7}, 11);
      for (int64_t i = 0; i < x.numel(); i += 9) x.data<float>()[i] = 0.f;
      const TensorMap feeds{{"x", x}, {"dz", random_tensor(DataType::Float32, {2, 5, 6, 7}, 12)}};
      Tensor r(DataType::Float32, {});
      r.data<float>()[0] = ratio;
      Tensor mode(DataType::Bool, {});
      mode.data<uint8_t>()[0] = 1;
      TensorMap inits{{"ratio", r}};
      std::vector<std::string> options{"ratio"};
      if (explicit_mode) inits["mode"] = mode, options.push_back("mode");
      std::vector<std::string> drop_in{"y"}, grad_in{"dz", "mask"};
      drop_in.insert(drop_in.end(), options.begin(), options.end());
      grad_in.insert(grad_in.end(), options.begin(), options.end());
      const Graph plain = graph_of({make_node("Relu", {"x"}, {"y"}), make_node("Dropout", drop_in, {"z", "mask"}),
                                    make_node("DropoutGrad", grad_in, {"dy"}, {}, kTrainrtDomain),
                                    make_node("ReluGrad", {"dy", "y"}, {"dx"}, {}, kTrainrtDomain)},
                                   feeds, inits, {"z", "dx"});
      Graph fused = plain;
      REQUIRE(passes::fuse_dropout_relu_grad(fused) == 1);
      REQUIRE(fused.nodes.size() == 3);
      CHECK(fused.nodes[2].op_type == "DropoutReluGrad");
      CHECK(fused.nodes[2].name == "n2+n3");
      CHECK(fused.nodes[2].inputs[1] == "z");
      CHECK(fused.nodes[1].outputs == std::vector<std::string>{"z"});  // the mask is no longer written
      infer_shapes(fused, registry().schemas, "fused");
      for (const char* backend : {"reference", "cpu"}) {
        CAPTURE(backend);
        RunOptions ro;
        ro.training = true;
        ro.seed = 5;
        const TensorMap a = run_graph(plain, feeds, *make_backend(backend), ro);
        const TensorMap b = run_graph(fused, feeds, *make_backend(backend), ro);
        CHECK(max_abs_diff(b.at("z"), a.at("z")) == 0.0);  // the same mask: no forward node moved
        CHECK(max_abs_diff(b.at("dx"), a.at("dx")) == 0.0);
        // Not vacuous: some gradients pass, some are dropped or cut by the Relu.
        int64_t passed = 0;
        for (int64_t i = 0; i < a.at("dx").numel(); ++i) passed += a.at("dx").data<float>()[i] != 0.f;
        CHECK(passed > 0);
        CHECK(passed < a.at("dx").numel());
      }
    }
  }
  // A mask read elsewhere (here a graph output) stays written; a DropoutGrad whose
  // output has another reader is not fused.
  const TensorMap feeds{{"x", random_tensor(DataType::Float32, {3, 4}, 13)},
                        {"dz", random_tensor(DataType::Float32, {3, 4}, 14)}};
  const Graph shared = graph_of({make_node("Relu", {"x"}, {"y"}), make_node("Dropout", {"y"}, {"z", "mask"}),
                                 make_node("DropoutGrad", {"dz", "mask"}, {"dy"}, {}, kTrainrtDomain),
                                 make_node("ReluGrad", {"dy", "y"}, {"dx"}, {}, kTrainrtDomain)},
                                feeds, {}, {"dx", "mask"});
  Graph g = shared;
  CHECK(passes::fuse_dropout_relu_grad(g) == 1);
  CHECK(g.nodes[1].outputs.size() == 2);
  Graph read_twice = graph_of({make_node("Relu", {"x"}, {"y"}), make_node("Dropout", {"y"}, {"z", "mask"}),
                               make_node("DropoutGrad", {"dz", "mask"}, {"dy"}, {}, kTrainrtDomain),
                               make_node("ReluGrad", {"dy", "y"}, {"dx"}, {}, kTrainrtDomain)},
                              feeds, {}, {"dx", "dy"});
  CHECK(passes::fuse_dropout_relu_grad(read_twice) == 0);
  // The op's shape rule: Z must match dZ.
  const TensorMap bad{{"dz", Tensor(DataType::Float32, {3, 4})}, {"z", Tensor(DataType::Float32, {4, 3})}};
  ErrorKind kind{};
  const std::string e = error_of(
      [&] {
        graph_of({make_node("DropoutReluGrad", {"dz", "z"}, {"dx"}, {}, kTrainrtDomain)}, bad, {}, {"dx"});
      },
      &kind);
  CHECK(kind == ErrorKind::BadInput);
  CHECK(e.find("(DropoutReluGrad)") != std::string::npos);
  CHECK(e.find("must have the shape of dZ") != std::string::npos);
}

TEST_CASE("fused ops' shape rules: Z of the wrong shape and an unknown activation are one-line errors") {
  const TensorMap feeds{{"x", Tensor(DataType::Float32, {1, 2, 5, 5})}, {"z", Tensor(DataType::Float32, {1, 3, 4, 5})}};
  const TensorMap inits{{"w", Tensor(DataType::Float32, {3, 2, 3, 3})}};
  ErrorKind kind{};
  std::string e = error_of(
      [&] {
        graph_of({make_node("FusedConv", {"x", "w", "", "z"}, {"y"}, conv_attrs(1, 1), kTrainrtDomain)}, feeds, inits,
                 {"y"});
      },
      &kind);
  CHECK(kind == ErrorKind::BadInput);
  CHECK(e.find("'n0' (FusedConv)") != std::string::npos);
  CHECK(e.find("(Z) has shape [1,3,4,5]") != std::string::npos);
  auto attrs = conv_attrs(1, 1);
  attrs["activation"] = Attribute::of_string("Tanh");
  e = error_of(
      [&] {
        graph_of({make_node("FusedConv", {"x", "w"}, {"y"}, attrs, kTrainrtDomain)}, feeds, inits, {"y"});
      },
      &kind);
  CHECK(kind == ErrorKind::Unsupported);
  CHECK(e.find("activation") != std::string::npos);
  e = error_of(
      [&] {
        graph_of({make_node("FusedGemm", {"a", "b"}, {"y"}, {{"activation", Attribute::of_string("Sigmoid")}},
                            kTrainrtDomain)},
                 {{"a", Tensor(DataType::Float32, {2, 3})}}, {{"b", Tensor(DataType::Float32, {3, 4})}}, {"y"});
      },
      &kind);
  CHECK(kind == ErrorKind::Unsupported);
  CHECK(e.find("'n0' (FusedGemm)") != std::string::npos);
  CHECK(e.find("activation") != std::string::npos);
  // Gemm's own rules hold: K of A and B differ.
  e = error_of(
      [&] {
        graph_of({make_node("FusedGemm", {"a", "b"}, {"y"}, {}, kTrainrtDomain)},
                 {{"a", Tensor(DataType::Float32, {2, 3})}}, {{"b", Tensor(DataType::Float32, {4, 4})}}, {"y"});
      },
      &kind);
  CHECK(kind == ErrorKind::BadInput);
  CHECK(e.find("'n0' (FusedGemm)") != std::string::npos);
}

// selftest_replay (launch/selftest_compare.h), the comparison `trainrt selftest` makes,
// fed made-up device values: the reference's own pass; a value 1e-3 off fails naming
// its node; a sum whose terms cancel passes when it is off by its terms' rounding and
// fails when off by more; under fp16 a MatMul whose inputs were not rounded fails, since
// the inputs a node rounds are never moved to estimate its sensitivity.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "launch/selftest_compare.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

// Every output of `g` (one node) as the reference computes it in `math`.
TensorMap reference_run(const Graph& g, const TensorMap& feeds, MathPrecision math) {
  const std::unique_ptr<Backend> ref = make_backend("reference");
  ExecutorOptions eo;
  eo.plan.kept_outside = true;
  eo.math = math;
  return Executor(g, *ref, eo).run(feeds, RunOptions{});
}

// y = MatMul(a[m,k], b[k,n]) in a node named 'mm', and random a and b (seeds s, s + 1).
struct MatMulCase {
  TensorMap feeds;
  Graph g;
};
MatMulCase matmul_case(int64_t m, int64_t k, int64_t n, uint64_t s) {
  Node mm = make_node("MatMul", {"a", "b"}, {"y"});
  mm.name = "mm";
  TensorMap feeds{{"a", random_tensor(DataType::Float32, {m, k}, s)},
                  {"b", random_tensor(DataType::Float32, {k, n}, s + 1)}};
  Graph g = single_node_graph(mm, feeds);
  return {std::move(feeds), std::move(g)};
}

}  // namespace

TEST_CASE("selftest_replay: a MatMul agrees with itself and fails 1e-3 off, naming the node") {
  const auto [feeds, g] = matmul_case(4, 6, 5, 1);
  TensorMap got = reference_run(g, feeds, MathPrecision::fp32);
  SelftestWorst w;
  CHECK(selftest_replay(g, feeds, got, MathPrecision::fp32, false, 1e-4, w).empty());
  CHECK(w.values == 1);
  CHECK(w.sensitive == 0);

  got.at("y") = got.at("y").clone();
  got.at("y").set_from_double(7, got.at("y").get_as_double(7) + 1e-3 * 2.0);  // |y| <= 6: over 1e-4 of the scale
  SelftestWorst w2;
  const std::string failure = selftest_replay(g, feeds, got, MathPrecision::fp32, false, 1e-4, w2);
  CHECK(failure.find("node 'mm' (MatMul) output 'y': relative error") != std::string::npos);
}

TEST_CASE("selftest_replay: a sum whose terms cancel is compared at its terms' rounding, not its own size") {
  Node sum = make_node("ReduceSum", {"x"}, {"s"}, {{"keepdims", Attribute::of_int(0)}});
  sum.name = "sum";
  // Terms of 1000 that cancel to 0.5: one fp32 last place of a term is 6.1e-5, which is
  // 1.2e-4 of the result, over the tolerance.
  Tensor x(DataType::Float32, {8});
  const float terms[8] = {1000.f, -1000.f, 999.5f, -999.f, 250.f, -250.f, 1000.f, -1000.f};
  for (int i = 0; i < 8; ++i) x.data<float>()[i] = terms[i];
  const TensorMap feeds{{"x", x}};
  const Graph g = single_node_graph(sum, feeds);
  TensorMap got = reference_run(g, feeds, MathPrecision::fp32);
  REQUIRE(got.at("s").get_as_double(0) == doctest::Approx(0.5));

  auto with_s = [&](double s) {
    TensorMap m = got;
    m.at("s") = Tensor(DataType::Float32, {});
    m.at("s").set_from_double(0, s);
    return m;
  };
  SelftestWorst w;
  CHECK(selftest_replay(g, feeds, with_s(0.5 + 6.103515625e-5), MathPrecision::fp32, false, 1e-4, w) == "");
  CHECK(w.sensitive == 1);
  // Off by 1: no rounding of the terms explains it.
  SelftestWorst w2;
  const std::string failure = selftest_replay(g, feeds, with_s(1.5), MathPrecision::fp32, false, 1e-4, w2);
  CHECK(failure.find("node 'sum' (ReduceSum) output 's'") != std::string::npos);
  CHECK(failure.find("when its inputs move by 64 last places") != std::string::npos);
}

TEST_CASE("selftest_replay: under fp16 a MatMul that did not round its inputs fails") {
  const auto [feeds, g] = matmul_case(8, 32, 8, 3);
  SelftestWorst w;
  CHECK(selftest_replay(g, feeds, reference_run(g, feeds, MathPrecision::fp16), MathPrecision::fp16, false, 1e-4, w)
            .empty());
  CHECK(w.sensitive == 0);
  SelftestWorst w2;
  const std::string failure =
      selftest_replay(g, feeds, reference_run(g, feeds, MathPrecision::fp32), MathPrecision::fp16, false, 1e-4, w2);
  CHECK(failure.find("node 'mm' (MatMul) output 'y'") != std::string::npos);
  CHECK(failure.find("moved by 0 ") != std::string::npos);
}

TEST_CASE("selftest_difference: equal non-finite values agree, one-sided ones do not") {
  Tensor a(DataType::Float32, {3}), b(DataType::Float32, {3});
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (int i = 0; i < 3; ++i) a.data<float>()[i] = b.data<float>()[i] = 1.f;
  a.data<float>()[0] = b.data<float>()[0] = inf;
  a.data<float>()[1] = b.data<float>()[1] = nan;
  CHECK(selftest_difference(a, b).diff == 0);
  CHECK(selftest_difference(a, b).scale == 1);
  b.data<float>()[0] = -inf;
  CHECK(std::isinf(selftest_difference(a, b).diff));
  b.data<float>()[0] = inf;
  b.data<float>()[1] = 2.f;
  CHECK(std::isinf(selftest_difference(a, b).diff));
}

TEST_CASE("selftest_replay: a value the device stored in 16 bits is compared rounded, and read widened") {
  // Device values as a GPU with 16-bit storage gives them (runtime/narrow.h): MatMul's y
  // stored rounded to bfloat16, and a as a recorded 16-bit input.
  const auto [feeds, g] = matmul_case(4, 6, 5, 3);
  const TensorMap want = reference_run(g, feeds, MathPrecision::bf16);
  auto stored = [](const Tensor& t) {
    Tensor s = t.cast(DataType::BFloat16);
    s.set_narrowed(true);
    return s;
  };
  TensorMap got{{"y", stored(want.at("y"))}};
  SelftestWorst w;
  CHECK(selftest_replay(g, feeds, got, MathPrecision::bf16, false, 1e-4, w).empty());
  CHECK(w.values == 1);
  // The same bits read as a plain bfloat16 value are 4e-3 off the fp32 reference: the
  // rounding to storage is what the comparison forgives, and nothing more.
  Tensor unmarked = got.at("y");
  unmarked.set_narrowed(false);
  SelftestWorst w2;
  CHECK(!selftest_replay(g, feeds, {{"y", unmarked}}, MathPrecision::bf16, false, 1e-4, w2).empty());
  // One bfloat16 last place off, at the largest |y|, fails.
  int64_t top = 0;
  for (int64_t i = 0; i < want.at("y").numel(); ++i)
    if (std::fabs(want.at("y").get_as_double(i)) > std::fabs(want.at("y").get_as_double(top))) top = i;
  Tensor off = got.at("y").clone();
  off.data<uint16_t>()[top] = static_cast<uint16_t>(off.data<uint16_t>()[top] + 1);
  SelftestWorst w3;
  CHECK(selftest_replay(g, feeds, {{"y", off}}, MathPrecision::bf16, false, 1e-4, w3).find("node 'mm'") !=
        std::string::npos);
  // A 16-bit input is fed widened: a recorded from the device's storage gives the same y.
  TensorMap from_storage{{"a", stored(feeds.at("a"))}, {"y", got.at("y")}};
  SelftestWorst w4;
  CHECK(selftest_replay(g, feeds, from_storage, MathPrecision::bf16, false, 1e-4, w4).empty());
}

TEST_CASE("selftest_default_tolerance: derived from the unit roundoff of the run's arithmetic") {
  const double u_tf32 = std::ldexp(1.0, -11), u_bf16 = std::ldexp(1.0, -8), u_fp16 = std::ldexp(1.0, -11);
  CHECK(u_fp16 / 8 < 1e-4);
  CHECK(selftest_default_tolerance(MathPrecision::fp32, false) == 1e-4);
  CHECK(selftest_default_tolerance(MathPrecision::fp32, true) == 10 * u_tf32);
  CHECK(selftest_default_tolerance(MathPrecision::bf16, false) == u_bf16 / 8);
  CHECK(selftest_default_tolerance(MathPrecision::bf16, true) == u_bf16 / 8);  // TF32 holds bf16 inputs exactly
  CHECK(selftest_default_tolerance(MathPrecision::fp16, false) == 1e-4);       // u/8 below fp32's floor
  // A skipped 16-bit rounding still fails at the default: the fp16 MatMul above is off
  // by more than the fp16 default, and bf16's rounding is 8 times coarser than fp16's
  // while its default is under 5 times fp16's.
  const auto [feeds, g] = matmul_case(8, 32, 8, 3);
  SelftestWorst w;
  CHECK(!selftest_replay(g, feeds, reference_run(g, feeds, MathPrecision::fp32), MathPrecision::fp16, false,
                         selftest_default_tolerance(MathPrecision::fp16, false), w)
             .empty());
  CHECK(selftest_default_tolerance(MathPrecision::bf16, false) <
        5 * selftest_default_tolerance(MathPrecision::fp16, false));
  CHECK(!selftest_replay(g, feeds, reference_run(g, feeds, MathPrecision::fp32), MathPrecision::bf16, false,
                         selftest_default_tolerance(MathPrecision::bf16, false), w)
             .empty());
}

// An output every backend rounds under bf16 (math_rounded_outputs: a Conv's Y) may land
// one 16-bit step from the reference's; a device value that is not a bf16 number at all
// (a kernel or backend that skipped the rounding) fails, naming the output.
TEST_CASE("selftest_replay: a rounded output may be one 16-bit step off, and must be rounded") {
  Node conv = make_node("Conv", {"x", "w"}, {"y"}, {{"kernel_shape", Attribute::of_ints({1, 1})}});
  conv.name = "conv";
  const TensorMap feeds{{"x", random_tensor(DataType::Float32, {1, 3, 4, 4}, 5)},
                        {"w", random_tensor(DataType::Float32, {2, 3, 1, 1}, 6)}};
  const Graph g = single_node_graph(conv, feeds);
  const TensorMap ref = reference_run(g, feeds, MathPrecision::bf16);
  SelftestWorst w;
  CHECK(selftest_replay(g, feeds, ref, MathPrecision::bf16, false, 1e-4, w).empty());
  // One element on the neighbouring bf16 number: agreement.
  TensorMap step{{"y", ref.at("y").clone()}};
  const float v = step.at("y").data<float>()[3];
  const float next = bfloat16_to_float(static_cast<uint16_t>(float_to_bfloat16(v) + 1));
  step.at("y").data<float>()[3] = next;
  SelftestWorst w2;
  CHECK(selftest_replay(g, feeds, step, MathPrecision::bf16, false, 1e-4, w2).empty());
  // Halfway to it: not a bf16 number.
  TensorMap unrounded{{"y", ref.at("y").clone()}};
  unrounded.at("y").data<float>()[3] = v + (next - v) / 4;
  SelftestWorst w3;
  CHECK(selftest_replay(g, feeds, unrounded, MathPrecision::bf16, false, 1e-4, w3)
            .find("node 'conv' (Conv) output 'y' is not rounded to bf16") != std::string::npos);
}

// seed_placing gives node 0 the seed of node k (any k, any run seed: the inverse of the odd
// multiplier modulo 2^64).
static_assert(node_seed(seed_placing(777, 1), 0) == node_seed(777, 1));
static_assert(node_seed(seed_placing(~uint64_t{0}, 123456789), 0) == node_seed(~uint64_t{0}, 123456789));

TEST_CASE("selftest_replay: with the device's run seed, Dropout and BatchNormalizationReluDropout redraw its masks") {
  // relu -> Dropout (node 1) -> BatchNormalizationReluDropout drawing as node 5
  // (dropout_node, as the fusion pass leaves it), run on the reference in training with
  // run seed 777: the "device" values.
  Tensor ratio(DataType::Float32, {});
  ratio.data<float>()[0] = 0.3f;
  const TensorMap feeds{{"x", random_tensor(DataType::Float32, {4, 8, 5, 5}, 1, -2, 2)}};
  const TensorMap inits{{"s", random_tensor(DataType::Float32, {8}, 2, 0.5, 1.5)},
                        {"b", random_tensor(DataType::Float32, {8}, 3)},
                        {"m", random_tensor(DataType::Float32, {8}, 4)},
                        {"v", random_tensor(DataType::Float32, {8}, 5, 0.5, 2)},
                        {"r", ratio}};
  Graph g;
  g.name = "dropouts";
  g.opsets[""] = 17;
  g.opsets[kTrainrtDomain] = 1;
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{DataType::Float32, shape_of(feeds.at("x").dims())};
  for (const auto& [name, t] : inits) {
    g.initializers[name] = t;
    g.values[name] = ValueInfo{t.dtype(), shape_of(t.dims())};
  }
  g.nodes = {make_node("Relu", {"x"}, {"a"}), make_node("Dropout", {"a", "r"}, {"d"}),
             make_node("BatchNormalizationReluDropout", {"d", "s", "b", "m", "v", "r"}, {"z", "rm", "rv"},
                       {{"epsilon", Attribute::of_float(1e-3f)},
                        {"momentum", Attribute::of_float(0.8f)},
                        {"training_mode", Attribute::of_int(1)},
                        {"dropout_node", Attribute::of_int(5)}},
                       kTrainrtDomain)};
  g.nodes[1].name = "drop";
  g.nodes[2].name = "bn_drop";
  g.outputs = {"z", "rm", "rv"};
  infer_shapes(g, registry().schemas, "test");
  const std::unique_ptr<Backend> ref = make_backend("reference");
  ExecutorOptions eo;
  eo.plan.kept_outside = true;
  RunOptions ro;
  ro.training = true;
  ro.seed = 777;
  ro.extra_outputs = {"a", "d"};
  const TensorMap got = Executor(g, *ref, eo).run(feeds, ro);
  TensorMap given = feeds;
  for (const auto& [name, t] : inits) given[name] = t;

  SelftestWorst w;
  CHECK(selftest_replay(g, given, got, MathPrecision::fp32, true, 1e-4, w, uint64_t{777}) == "");
  CHECK(w.values == 5);   // a, d, z, rm, rv
  SelftestWorst without;  // no run seed: d and z pass on unchecked (bn_drop's statistics are)
  CHECK(selftest_replay(g, given, got, MathPrecision::fp32, true, 1e-4, without) == "");
  CHECK(without.values == 3);
  SelftestWorst other;  // another run's masks
  CHECK(selftest_replay(g, given, got, MathPrecision::fp32, true, 1e-4, other, uint64_t{778})
            .find("node 'drop' (Dropout) output 'd'") != std::string::npos);

  // A kept value of Z off by a factor (say, a wrong 1/(1 - ratio)) fails, naming the node.
  TensorMap wrong = got;
  Tensor& z = wrong.at("z") = got.at("z").clone();
  int64_t kept = 0;
  while (z.get_as_double(kept) == 0.0) ++kept;
  z.set_from_double(kept, z.get_as_double(kept) * 0.7);
  SelftestWorst w2;
  CHECK(selftest_replay(g, given, wrong, MathPrecision::fp32, true, 1e-4, w2, uint64_t{777})
            .find("node 'bn_drop' (BatchNormalizationReluDropout) output 'z'") != std::string::npos);
}

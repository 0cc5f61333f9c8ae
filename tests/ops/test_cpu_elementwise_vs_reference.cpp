// The cpu kernels of Clip, HardSigmoid, HardSwish, Sqrt, Erf, Gelu, Pow, Where, Equal
// and their backward ops (ops/elementwise_cpu.cpp) against the reference backend:
// seeded random shapes (rank 0-4, broadcasting for Pow/Where/Equal), fp32, then a
// Blocked16c case for every kernel that declares Shared layouts.
//
// Tolerances (|cpu - ref| <= atol + rtol*|ref|):
// - the oneTBB loops (HardSigmoid, Erf, Pow, Where, Equal, every backward op) are the
//   reference's own loop over chunks: bit for bit (0, 0);
// - Clip (oneDNN clip_v2) and Sqrt (a correctly rounded sqrt): bit for bit as well;
// - HardSwish: rtol 1e-6 (oneDNN multiplies by 1/6 where the reference divides by 6);
// - Gelu: rtol 1e-5, atol 1e-6 (oneDNN's vectorised erf/tanh approximations).
#include <doctest/doctest.h>

#include <cstring>
#include <random>

#include "ops/onednn/dnnl_util.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

struct Tol {
  double rtol, atol;
};
constexpr Tol kBitwise{0, 0};
constexpr Tol kRounding{1e-6, 1e-7};
constexpr Tol kTransc{1e-5, 1e-6};

// Runs `n` on both backends (only the feeds it reads); every output must agree within
// `tol`. Returns how many calls the cpu kernels sent to the reference kernel.
uint64_t check_same(const Node& n, const TensorMap& feeds, Tol tol) {
  Graph g = single_node_graph(n, feeds);
  TensorMap ref = run_graph(g, feeds, *make_backend("reference"), {});
  const uint64_t before = dnnl_util::reference_fallbacks();
  TensorMap cpu = run_graph(g, feeds, *make_backend("cpu"), {});
  for (const auto& [name, r] : ref) {
    INFO(n.op_type, " output '", name, "' ", dims_to_string(r.dims()),
         ": max |cpu-ref| = ", max_abs_diff(cpu.at(name), r));
    CHECK(all_close(cpu.at(name), r, tol.rtol, tol.atol));
  }
  return dnnl_util::reference_fallbacks() - before;
}

std::vector<int64_t> random_dims(std::mt19937_64& rng, int max_rank) {
  std::vector<int64_t> d;
  for (int r = std::uniform_int_distribution<int>(0, max_rank)(rng); r > 0; --r)
    d.push_back(std::uniform_int_distribution<int64_t>(1, 7)(rng));
  return d;
}

// `out` with some dims set to 1 and some leading dims dropped: an operand that broadcasts to it.
std::vector<int64_t> operand_of(std::mt19937_64& rng, std::vector<int64_t> d) {
  for (int64_t& x : d)
    if (rng() % 3 == 0) x = 1;
  d.erase(d.begin(), d.begin() + static_cast<int64_t>(rng() % (d.size() + 1)) / 2);
  return d;
}

Tensor bool_tensor(std::vector<int64_t> dims, uint64_t seed) {
  Tensor c(DataType::Bool, std::move(dims));
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < c.numel(); ++i) c.data<uint8_t>()[i] = rng() % 2;
  return c;
}

}  // namespace

TEST_CASE("cpu vs reference: Clip, HardSigmoid, HardSwish, Sqrt, Erf, Gelu and their backward ops") {
  struct Case {
    std::string op;
    std::map<std::string, Attribute> attrs;
    Tol tol;
  };
  const std::vector<Case> forward = {{"Clip", {}, kBitwise},
                                     {"HardSigmoid", {}, kBitwise},
                                     {"HardSigmoid", {{"alpha", Attribute::of_float(1.f / 6)}}, kBitwise},
                                     {"HardSwish", {}, kRounding},
                                     {"Sqrt", {}, kBitwise},
                                     {"Erf", {}, kBitwise},
                                     {"Gelu", {}, kTransc},
                                     {"Gelu", {{"approximate", Attribute::of_string("tanh")}}, kTransc}};
  std::mt19937_64 rng(81);
  for (int i = 0; i < 12; ++i) {
    std::vector<int64_t> dims = random_dims(rng, 4);
    if (i == 0) dims = {2, 32, 14, 14};
    CAPTURE(dims_to_string(dims));
    TensorMap feeds{{"x", random_tensor(DataType::Float32, dims, 1500 + i, -6, 6)},
                    {"pos", random_tensor(DataType::Float32, dims, 1600 + i, 0.01, 6)},
                    {"dy", random_tensor(DataType::Float32, dims, 1700 + i)},
                    {"lo", make(DataType::Float32, {}, {0})},
                    {"hi", make(DataType::Float32, {}, {i % 2 ? 6.0 : 2.5})}};
    for (const Case& c : forward) {
      CAPTURE(c.op);
      REQUIRE(registry().kernels.find("cpu", "", c.op) != nullptr);
      const std::string in = c.op == "Sqrt" ? "pos" : "x";
      std::vector<std::string> ins{in};
      if (c.op == "Clip")
        ins = i % 3 == 0 ? std::vector<std::string>{in, "", "hi"} : std::vector<std::string>{in, "lo", "hi"};
      TensorMap used;
      for (const std::string& s : ins)
        if (!s.empty()) used[s] = feeds.at(s);
      CHECK(check_same(make_node(c.op, ins, {"y"}, c.attrs), used, c.tol) == 0);
      // The backward op: dY and X (Sqrt's takes Y, here any positive tensor).
      const std::string grad = c.op + "Grad";
      ins[0] = in;
      ins.insert(ins.begin(), "dy");
      used["dy"] = feeds.at("dy");
      CHECK(check_same(make_node(grad, ins, {"dx"}, c.attrs, kTrainrtDomain), used, kBitwise) == 0);
    }
  }
}

TEST_CASE("cpu vs reference: Pow, Where, comparisons, Exp, Log, Reciprocal and PowGrad with broadcasting") {
  std::mt19937_64 rng(82);
  for (int i = 0; i < 16; ++i) {
    const std::vector<int64_t> out = i == 0 ? std::vector<int64_t>{2, 32, 14, 14} : random_dims(rng, 4);
    const std::vector<int64_t> ad = i % 3 == 0 ? out : operand_of(rng, out), bd = operand_of(rng, out);
    CAPTURE(dims_to_string(ad));
    CAPTURE(dims_to_string(bd));
    const TensorMap pow{{"a", random_tensor(DataType::Float32, ad, 1800 + i, 0.1, 3)},
                        {"b", random_tensor(DataType::Float32, bd, 1900 + i, -3, 3)}};
    CHECK(check_same(make_node("Pow", {"a", "b"}, {"y"}), pow, kBitwise) == 0);
    Graph g = single_node_graph(make_node("Pow", {"a", "b"}, {"y"}), pow);
    TensorMap grad = pow;
    grad["dy"] = random_tensor(DataType::Float32, shape_dims(*g.info("y").shape), 2000 + i);
    CHECK(check_same(make_node("PowGrad", {"dy", "a", "b"}, {"da", "db"}, {}, kTrainrtDomain), grad, kBitwise) == 0);
    CHECK(check_same(make_node("PowGrad", {"dy", "a", "b"}, {"", "db"}, {}, kTrainrtDomain), grad, kBitwise) == 0);

    const TensorMap where{{"c", bool_tensor(operand_of(rng, out), 2100 + i)},
                          {"x", random_tensor(DataType::Float32, ad, 2200 + i)},
                          {"y", random_tensor(DataType::Float32, bd, 2300 + i)}};
    CHECK(check_same(make_node("Where", {"c", "x", "y"}, {"out"}), where, kBitwise) == 0);
    const TensorMap unary{{"a", random_tensor(DataType::Float32, ad, 2400 + i, 0.05, 8)}};
    for (const char* op : {"Exp", "Log", "Reciprocal"}) {
      CAPTURE(op);
      CHECK(check_same(make_node(op, {"a"}, {"out"}), unary, kBitwise) == 0);
    }
    // Equal on small integers so that some elements are equal.
    Tensor ea(DataType::Int64, ad), eb(DataType::Int64, bd);
    for (int64_t k = 0; k < ea.numel(); ++k) ea.data<int64_t>()[k] = static_cast<int64_t>(rng() % 3);
    for (int64_t k = 0; k < eb.numel(); ++k) eb.data<int64_t>()[k] = static_cast<int64_t>(rng() % 3);
    for (const char* op : {"Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual"}) {
      CAPTURE(op);
      CHECK(check_same(make_node(op, {"a", "b"}, {"out"}), {{"a", ea}, {"b", eb}}, kBitwise) == 0);
    }
    CHECK(check_same(make_node("Greater", {"a", "b"}, {"out"}), {{"a", where.at("x")}, {"b", where.at("y")}},
                     kBitwise) == 0);  // floats too
  }
}

TEST_CASE("cpu: the new elementwise kernels give the same bits on Blocked16c tensors as on row-major ones") {
  const std::vector<int64_t> dims{2, 32, 3, 5};  // channels a multiple of 16
  const Tensor x = random_tensor(DataType::Float32, dims, 31, -6, 6);
  const Tensor pos = random_tensor(DataType::Float32, dims, 32, 0.1, 3);
  const Tensor dy = random_tensor(DataType::Float32, dims, 33);
  const Tensor cond = bool_tensor(dims, 34);
  const Tensor lo = make(DataType::Float32, {}, {-1}), hi = make(DataType::Float32, {}, {4});
  auto blocked = [](const Tensor& t) {
    Tensor b(t.dtype(), t.dims());
    b.set_layout(Layout::Blocked16c);
    copy_from_plain(t, b);
    return b;
  };
  struct Case {
    std::string op, domain;
    std::vector<const Tensor*> ins;  // the data arguments (blocked) then scalars (plain)
    size_t data_args;
    DataType out;
  };
  const std::vector<Case> cases = {
      {"Clip", "", {&x, &lo, &hi}, 1, DataType::Float32},
      {"HardSigmoid", "", {&x}, 1, DataType::Float32},
      {"HardSwish", "", {&x}, 1, DataType::Float32},
      {"Sqrt", "", {&pos}, 1, DataType::Float32},
      {"Erf", "", {&x}, 1, DataType::Float32},
      {"Gelu", "", {&x}, 1, DataType::Float32},
      {"Pow", "", {&pos, &x}, 2, DataType::Float32},
      {"Where", "", {&cond, &x, &pos}, 3, DataType::Float32},
      {"Equal", "", {&x, &x}, 2, DataType::Bool},
      {"Less", "", {&x, &pos}, 2, DataType::Bool},
      {"Exp", "", {&x}, 1, DataType::Float32},
      {"Log", "", {&pos}, 1, DataType::Float32},
      {"Reciprocal", "", {&pos}, 1, DataType::Float32},
      {"ClipGrad", kTrainrtDomain, {&dy, &x, &lo, &hi}, 2, DataType::Float32},
      {"HardSigmoidGrad", kTrainrtDomain, {&dy, &x}, 2, DataType::Float32},
      {"HardSwishGrad", kTrainrtDomain, {&dy, &x}, 2, DataType::Float32},
      {"SqrtGrad", kTrainrtDomain, {&dy, &pos}, 2, DataType::Float32},
      {"ErfGrad", kTrainrtDomain, {&dy, &x}, 2, DataType::Float32},
      {"GeluGrad", kTrainrtDomain, {&dy, &x}, 2, DataType::Float32},
  };
  for (const Case& c : cases) {
    CAPTURE(c.op);
    std::vector<std::string> names;
    for (size_t i = 0; i < c.ins.size(); ++i) names.push_back("in" + std::to_string(i));
    const Node n = make_node(c.op, names, {"y"}, {}, c.domain);
    const Kernel& k = make_backend("cpu")->kernel(n);
    std::vector<Tensor> bl;
    bl.reserve(c.ins.size());
    for (size_t i = 0; i < c.ins.size(); ++i) bl.push_back(i < c.data_args ? blocked(*c.ins[i]) : *c.ins[i]);
    std::vector<const Tensor*> bl_ptrs;
    for (const Tensor& t : bl) bl_ptrs.push_back(&t);
    Tensor y(c.out, dims), yb(c.out, dims);
    yb.set_layout(Layout::Blocked16c);
    KernelContext plain{n, c.ins, {&y}};
    k(plain);
    KernelContext on_blocked{n, bl_ptrs, {&yb}};
    k(on_blocked);
    const Tensor back = to_plain(yb);
    CHECK(std::memcmp(back.raw(), y.raw(), y.nbytes()) == 0);
  }
}

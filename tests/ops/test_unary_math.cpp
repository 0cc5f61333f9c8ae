// The shared functors of the unary table (ops/core/unary_math.h, ops/unary_ops.h), which
// the reference, cpu and cuda kernels all call: every gradient functor against a central
// difference of its forward in fp64 (for each op of the table, with its attributes as a
// node gives them), the conventions at the kinks (PyTorch's), and the forms that must not
// overflow. A functor that is wrong here is wrong on every backend, the GPU included.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ops/unary_ops.h"

using namespace trainrt;
namespace um = trainrt::unary_math;

namespace {

// The points where each gradient is checked: away from every kink of the table (Relu's
// 0, HardSigmoid's -2.5 and 2.5 at alpha 0.2, beta 0.5, and -4/3, 2 at alpha 0.3, beta 0.4,
// HardSwish's -3 and 3).
const std::vector<double> kPoints = {-4.1, -3.3, -2.2, -1.3, -0.45, 0.31, 0.87, 1.7, 2.6, 3.4, 4.2};

// dX = G(dY, t) against dY * (F(x+h) - F(x-h)) / 2h, t = x or F(x) as the table says.
// The central difference's error is h^2 |F'''| / 6 plus rounding 1e-16 / h: with h = 1e-5
// both are below 1e-9 for these smooth pieces; the bound 1e-7 leaves room.
template <typename F, typename G>
void check_against_difference(const std::string& op, F f, G g, UnaryGradReads reads) {
  for (double x : kPoints) {
    const double h = 1e-5, dy = 0.7;
    const double lo = f(x - h), mid = f(x), hi = f(x + h);
    if (!std::isfinite(lo) || !std::isfinite(mid) || !std::isfinite(hi)) continue;  // Sqrt's x < 0
    const double fd = dy * (hi - lo) / (2 * h);
    const double got = g(dy, reads == UnaryGradReads::input ? x : mid);
    CAPTURE(op);
    CAPTURE(x);
    CHECK(std::abs(got - fd) <= 1e-7 * std::max(1.0, std::abs(fd)));
  }
}

Node node_with(const std::string& op, std::map<std::string, Attribute> attrs) {
  Node n;
  n.op_type = op;
  n.attrs = std::move(attrs);
  return n;
}

}  // namespace

TEST_CASE("unary table: every gradient functor is its forward's derivative (fp64, central differences)") {
  // Each op of the table with its default attributes and with the attributes set.
  const std::vector<std::map<std::string, Attribute>> variants = {
      {},
      {{"alpha", Attribute::of_float(0.3f)}, {"beta", Attribute::of_float(0.4f)}},
      {{"approximate", Attribute::of_string("tanh")}},
  };
  int checked = 0;
  for (const auto& attrs : variants) {
#define TRAINRT_CHECK_OP(Op, since, flops, Grad, reads, ...)                                                      \
  {                                                                                                               \
    const Node n = node_with(#Op, attrs);                                                                         \
    check_against_difference(#Op, UnaryAttrs<um::Op>::of(n), UnaryAttrs<um::Grad>::of(n), UnaryGradReads::reads); \
    ++checked;                                                                                                    \
  }
    TRAINRT_UNARY_OPS(TRAINRT_CHECK_OP)
#undef TRAINRT_CHECK_OP
  }
  CHECK(checked == 3 * 12);
}

TEST_CASE("unary table: attributes reach the functors as the node gives them") {
  const Node leaky = node_with("LeakyRelu", {{"alpha", Attribute::of_float(0.25f)}});
  CHECK(UnaryAttrs<um::LeakyRelu>::of(leaky)(-2.0) == -0.5);
  CHECK(UnaryAttrs<um::LeakyReluGrad>::of(leaky)(1.0, -2.0) == 0.25);
  CHECK(UnaryAttrs<um::LeakyRelu>::of(node_with("LeakyRelu", {}))(-1.0) == doctest::Approx(-0.01));
  const Node hs =
      node_with("HardSigmoid", {{"alpha", Attribute::of_float(0.5f)}, {"beta", Attribute::of_float(0.25f)}});
  CHECK(UnaryAttrs<um::HardSigmoid>::of(hs)(1.0) == 0.75);
  CHECK(UnaryAttrs<um::HardSigmoidGrad>::of(hs)(2.0, 1.0) == 1.0);
  CHECK(UnaryAttrs<um::Gelu>::of(node_with("Gelu", {{"approximate", Attribute::of_string("tanh")}})).tanh_form);
  CHECK(!UnaryAttrs<um::Gelu>::of(node_with("Gelu", {})).tanh_form);
  // The gradient rule copies exactly these names from the forward to the backward node.
  CHECK(UnaryAttrs<um::HardSigmoidGrad>::names() == std::vector<std::string>{"alpha", "beta"});
  CHECK(UnaryAttrs<um::GeluGrad>::names() == std::vector<std::string>{"approximate"});
  CHECK(UnaryAttrs<um::SigmoidGrad>::names().empty());
}

TEST_CASE("unary functors: PyTorch's conventions at the kinks, NaN, and no overflow") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(std::isnan(um::Relu{}(nan)));  // NaN stays NaN (torch.relu)
  CHECK(um::Relu{}(-0.0) == 0.0);
  CHECK(um::ReluGrad{}(5.0, 0.0) == 0.0);  // y == 0: no gradient
  CHECK(um::ReluGrad{}(nan, 0.0) == 0.0);  // a select, not a product
  CHECK(um::LeakyReluGrad{0.1}(1.0, 0.0) == 1.0);
  CHECK(um::HardSwishGrad{}(1.0, -3.0) == doctest::Approx(-0.5));  // x/3 + 1/2 on [-3, 3]
  CHECK(um::HardSwishGrad{}(1.0, 3.0) == doctest::Approx(1.5));
  CHECK(um::HardSwishGrad{}(1.0, -3.5) == 0.0);
  CHECK(um::HardSigmoidGrad{}(1.0, 2.5) == 0.0);  // alpha x + beta == 1: outside (0, 1)
  CHECK(um::HardSigmoidGrad{}(1.0, -2.5) == 0.0);
  // Sigmoid's two branches never overflow, in float either.
  CHECK(um::Sigmoid{}(-1000.0f) == 0.0f);
  CHECK(um::Sigmoid{}(1000.0f) == 1.0f);
  CHECK(um::Sigmoid{}(-80.0f) > 0.0f);
  CHECK(um::Sigmoid{}(0.0) == 0.5);
  CHECK(um::Softplus{}(1000.0f) == 1000.0f);  // no overflow on either side
  CHECK(um::Softplus{}(-1000.0f) == 0.0f);
  CHECK(um::Softplus{}(0.0) == doctest::Approx(std::log(2.0)).epsilon(1e-15));
  CHECK(um::Elu{}(-1e-10) == doctest::Approx(-1e-10).epsilon(1e-9));  // expm1 keeps the digits near 0
  CHECK(um::EluGrad{0.5}(1.0, 0.0) == 0.5);                           // x = 0: the negative side's alpha
  CHECK(um::Softsign{}(-3.0) == -0.75);
  // The constants are T's: float math stays in float and agrees with double to float's rounding.
  for (double x : kPoints) {
    const float xf = static_cast<float>(x);
    CHECK(um::Gelu{false}(xf) == doctest::Approx(um::Gelu{false}(static_cast<double>(xf))).epsilon(1e-6));
    CHECK(um::GeluGrad{true}(1.0f, xf) ==
          doctest::Approx(um::GeluGrad{true}(1.0, static_cast<double>(xf))).epsilon(1e-5));
    CHECK(um::ErfGrad{}(1.0f, xf) == doctest::Approx(um::ErfGrad{}(1.0, static_cast<double>(xf))).epsilon(1e-5));
  }
  CHECK(um::pi<float>() == static_cast<float>(3.14159265358979323846));
  CHECK(um::sqrt2<double>() * um::sqrt2<double>() == doctest::Approx(2.0).epsilon(1e-15));
}

TEST_CASE("unary table: names every op once, with a backward op or a composite rule") {
  std::set<std::string> seen;
  for (const UnaryOpInfo& u : unary_op_table()) {
    CAPTURE(u.op);
    CHECK(seen.insert(u.op).second);
    if (u.grad) CHECK(std::string(u.grad) == std::string(u.op) + "Grad");
  }
  CHECK(seen.count("Relu"));
  CHECK(seen.count("Reciprocal"));
}

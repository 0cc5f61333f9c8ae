// one_d_as_two_d (ops/core/window.h): the cuda backend runs a 1-D convolution (N,C,L) as
// the 2-D one over N,C,1,L, on rank-4 views of its tensors and the node with widened
// window attributes. Checked here on the reference backend, which takes both ranks:
// Conv and ConvGrad on the widened node and reshaped tensors equal the 1-D op, over
// random strides, dilations, pads, auto_pad modes, groups and requested outputs.
#include <doctest/doctest.h>

#include <random>

#include "ops/core/window.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

int64_t pick(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

Tensor as_4d(const Tensor& t) { return t.reshaped({t.dims()[0], t.dims()[1], 1, t.dims()[2]}); }

}  // namespace

TEST_CASE("one_d_as_two_d: a 1-D Conv and ConvGrad equal the 2-D ones over a unit height") {
  std::mt19937_64 rng(31);
  for (int i = 0; i < 24; ++i) {
    CAPTURE(i);
    const int64_t group = pick(rng, 0, 2) == 0 ? 2 : 1;
    const int64_t cg = pick(rng, 1, 3), mg = pick(rng, 1, 3), c = group * cg, m = group * mg, n = pick(rng, 1, 3);
    const int64_t k = pick(rng, 1, 4), s = pick(rng, 1, 3), d = pick(rng, 1, 2);
    const int64_t len = pick(rng, (k - 1) * d + 1, 17);
    std::map<std::string, Attribute> attrs{{"strides", Attribute::of_ints({s})},
                                           {"dilations", Attribute::of_ints({d})}};
    if (group > 1) attrs["group"] = Attribute::of_int(group);
    if (pick(rng, 0, 1)) attrs["kernel_shape"] = Attribute::of_ints({k});
    const int64_t mode = pick(rng, 0, 3);
    if (mode == 0)
      attrs["auto_pad"] = Attribute::of_string(pick(rng, 0, 1) ? "SAME_UPPER" : "SAME_LOWER");
    else if (mode == 1)
      attrs["auto_pad"] = Attribute::of_string("VALID");
    else
      attrs["pads"] = Attribute::of_ints({pick(rng, 0, k - 1), pick(rng, 0, k - 1)});
    const Tensor x = random_tensor(DataType::Float64, {n, c, len}, 10 + i);
    const Tensor w = random_tensor(DataType::Float64, {m, cg, k}, 50 + i);
    const Tensor b = random_tensor(DataType::Float64, {m}, 90 + i);

    const Node conv = make_node("Conv", {"x", "w", "b"}, {"y"}, attrs);
    const Tensor y1 = run_node(conv, {{"x", x}, {"w", w}, {"b", b}}, "reference").at("y");
    const Tensor y2 = run_node(one_d_as_two_d(conv), {{"x", as_4d(x)}, {"w", as_4d(w)}, {"b", b}}, "reference").at("y");
    REQUIRE(y1.rank() == 3);
    CHECK(max_abs_diff(y2, as_4d(y1)) <= 1e-12);

    // ConvGrad with a random subset of its outputs.
    const Tensor dy = random_tensor(DataType::Float64, y1.dims(), 130 + i);
    const bool want_dx = pick(rng, 0, 1), want_db = pick(rng, 0, 1);
    const Node grad = make_node("ConvGrad", {"dy", "x", "w"}, {want_dx ? "dx" : "", "dw", want_db ? "db" : ""}, attrs,
                                kTrainrtDomain);
    const TensorMap g1 = run_node(grad, {{"dy", dy}, {"x", x}, {"w", w}}, "reference");
    const TensorMap g2 =
        run_node(one_d_as_two_d(grad), {{"dy", as_4d(dy)}, {"x", as_4d(x)}, {"w", as_4d(w)}}, "reference");
    CHECK(max_abs_diff(g2.at("dw"), as_4d(g1.at("dw"))) <= 1e-12);
    if (want_dx) CHECK(max_abs_diff(g2.at("dx"), as_4d(g1.at("dx"))) <= 1e-12);
    if (want_db) CHECK(max_abs_diff(g2.at("db"), g1.at("db")) <= 1e-12);
  }
}

TEST_CASE("one_d_as_two_d: widens the window attributes and leaves a 2-D node's pads alone") {
  const Node n = make_node("Conv", {"x", "w"}, {"y"},
                           {{"kernel_shape", Attribute::of_ints({3})},
                            {"strides", Attribute::of_ints({2})},
                            {"dilations", Attribute::of_ints({4})},
                            {"pads", Attribute::of_ints({1, 2})},
                            {"group", Attribute::of_int(3)}});
  const Node m = one_d_as_two_d(n);
  CHECK(m.attr_ints("kernel_shape") == std::vector<int64_t>{1, 3});
  CHECK(m.attr_ints("strides") == std::vector<int64_t>{1, 2});
  CHECK(m.attr_ints("dilations") == std::vector<int64_t>{1, 4});
  CHECK(m.attr_ints("pads") == std::vector<int64_t>{0, 1, 0, 2});
  CHECK(m.attr_int("group", 1) == 3);
  const Node bare = one_d_as_two_d(make_node("Conv", {"x", "w"}, {"y"}));
  CHECK(!bare.has_attr("strides"));
  CHECK(!bare.has_attr("pads"));
}

// MultiSGD and MultiAdam (ops/optimizer.cpp) against the per-parameter SGD and Adam
// nodes, bit for bit, on the reference and cpu backends, in fp32 and fp64, with
// parameters of odd sizes (one longer than a cpu chunk, ops/core/parallel.h kGrain);
// their shape rules' errors; and their in-place pairs (every output over its state).
#include <doctest/doctest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "ops/core/parallel.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.dims() == b.dims() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Runs n on `backend` with the feeds it reads.
TensorMap run_with(const Node& n, const TensorMap& all, const std::string& backend) {
  TensorMap feeds;
  for (const std::string& in : n.inputs) feeds.insert_or_assign(in, all.at(in));
  return run_node(n, feeds, backend);
}

const std::vector<std::vector<int64_t>> kShapes = {{7}, {3, 5, 11}, {}, {kGrain + 3}, {2, 1, 3}};

// p<i>, g<i>, m<i>, v<i> for every shape (v >= 0), lr and step.
TensorMap optimizer_feeds(DataType t, int64_t step, uint64_t seed) {
  TensorMap f{{"lr", make(DataType::Float32, {}, {0.05})}, {"step", make(DataType::Int64, {}, {double(step)})}};
  for (size_t i = 0; i < kShapes.size(); ++i) {
    const std::string s = std::to_string(i);
    const uint64_t k = seed + 10 * i;
    f["p" + s] = random_tensor(t, kShapes[i], k);
    f["g" + s] = random_tensor(t, kShapes[i], k + 1);
    f["m" + s] = random_tensor(t, kShapes[i], k + 2);
    f["v" + s] = random_tensor(t, kShapes[i], k + 3, 0, 1);
  }
  return f;
}

// The multi node's outputs on each backend equal the single nodes' (on the reference
// backend) bit for bit; `single` makes the node of parameter i, whose inputs from 2 on
// are the multi node's inputs of that parameter.
void check_multi(const std::string& multi_op, const std::function<Node(size_t)>& single, const TensorMap& feeds) {
  TensorMap expected;
  Node multi;
  for (size_t i = 0; i < kShapes.size(); ++i) {
    const Node n = single(i);
    if (i == 0) {
      multi = make_node(multi_op, {n.inputs[2], n.inputs[3]}, {}, n.attrs, kTrainrtDomain);
    }
    for (size_t j = 0; j < n.inputs.size(); ++j)
      if (j != 2 && j != 3) multi.inputs.push_back(n.inputs[j]);
    multi.outputs.insert(multi.outputs.end(), n.outputs.begin(), n.outputs.end());
    for (auto& [name, value] : run_with(n, feeds, "reference")) expected[name] = value;
  }
  for (const char* backend : {"reference", "cpu"}) {
    CAPTURE(backend);
    const TensorMap got = run_with(multi, feeds, backend);
    REQUIRE(got.size() == expected.size());
    for (const auto& [name, value] : expected) {
      CAPTURE(name);
      CHECK(same_bits(got.at(name), value));
    }
  }
}

}  // namespace

TEST_CASE("MultiSGD equals one SGD node per parameter, bit for bit (reference and cpu, fp32 and fp64)") {
  struct Setting {
    float momentum, dampening, weight_decay;
    int nesterov;
  };
  for (const DataType t : {DataType::Float32, DataType::Float64})
    for (const int64_t step : {0, 2})
      for (const Setting s : {Setting{0, 0, 0, 0}, Setting{0, 0, 5e-4f, 0}, Setting{0.9f, 0, 0, 0},
                              Setting{0.9f, 0.1f, 5e-4f, 0}, Setting{0.9f, 0, 1e-3f, 1}}) {
        CAPTURE(dtype_name(t));
        CAPTURE(step);
        CAPTURE(s.momentum);
        CAPTURE(s.nesterov);
        const TensorMap feeds = optimizer_feeds(t, step, 100);
        const std::map<std::string, Attribute> attrs{{"momentum", Attribute::of_float(s.momentum)},
                                                     {"dampening", Attribute::of_float(s.dampening)},
                                                     {"weight_decay", Attribute::of_float(s.weight_decay)},
                                                     {"nesterov", Attribute::of_int(s.nesterov)}};
        check_multi(
            "MultiSGD",
            [&](size_t i) {
              const std::string k = std::to_string(i);
              if (s.momentum == 0)
                return make_node("SGD", {"p" + k, "g" + k, "lr", "step"}, {"p" + k + "'"}, attrs, kTrainrtDomain);
              return make_node("SGD", {"p" + k, "g" + k, "lr", "step", "m" + k}, {"p" + k + "'", "m" + k + "'"}, attrs,
                               kTrainrtDomain);
            },
            feeds);
      }
}

TEST_CASE("MultiAdam equals one Adam node per parameter, bit for bit (Adam and AdamW, fp32 and fp64)") {
  for (const DataType t : {DataType::Float32, DataType::Float64})
    for (const int64_t step : {0, 5})
      for (const int decoupled : {0, 1}) {
        CAPTURE(dtype_name(t));
        CAPTURE(step);
        CAPTURE(decoupled);
        const TensorMap feeds = optimizer_feeds(t, step, 200);
        const std::map<std::string, Attribute> attrs{{"beta1", Attribute::of_float(0.8f)},
                                                     {"beta2", Attribute::of_float(0.99f)},
                                                     {"epsilon", Attribute::of_float(1e-6f)},
                                                     {"weight_decay", Attribute::of_float(0.01f)},
                                                     {"decoupled_weight_decay", Attribute::of_int(decoupled)}};
        check_multi(
            "MultiAdam",
            [&](size_t i) {
              const std::string k = std::to_string(i);
              return make_node("Adam", {"p" + k, "g" + k, "lr", "step", "m" + k, "v" + k},
                               {"p" + k + "'", "m" + k + "'", "v" + k + "'"}, attrs, kTrainrtDomain);
            },
            feeds);
      }
}

TEST_CASE("MultiSGD and MultiAdam refuse mixed dtypes, miscounted arguments and shapes that differ") {
  TensorMap f = optimizer_feeds(DataType::Float32, 0, 300);
  f["p64"] = random_tensor(DataType::Float64, {7}, 1);
  f["g64"] = random_tensor(DataType::Float64, {7}, 2);
  auto error = [&](std::vector<std::string> ins, std::vector<std::string> outs, const char* op = "MultiSGD") {
    TensorMap feeds;
    for (const std::string& in : ins) feeds[in] = f.at(in);
    return error_of([&] { single_node_graph(make_node(op, ins, outs, {}, kTrainrtDomain), feeds); });
  };
  CHECK(error({"lr", "step", "p0", "g0", "p64", "g64"}, {"a", "b"}).find("one dtype") != std::string::npos);
  CHECK(error({"lr", "step", "p0", "g1"}, {"a"}).find("must match input 2") != std::string::npos);
  CHECK(error({"lr", "step", "p0", "g0", "m0", "p1"}, {"a", "b", "c"}).find("got 6 inputs, 3 outputs") !=
        std::string::npos);
  CHECK(error({"step", "lr", "p0", "g0"}, {"a"}).find("must be a float32 scalar") != std::string::npos);
  CHECK(error({"lr", "step", "p0", "g0", "m0", "v0", "p1"}, {"a", "b", "c"}, "MultiAdam").find("got 7 inputs") !=
        std::string::npos);
  CHECK(error({"lr", "step", "p0", "g0", "m0", "v0"}, {"a", "b", "c"}, "MultiAdam").empty());
  CHECK(error({"lr", "step", "p0", "g0", "m0", "p1", "g1", "m1"}, {"a", "b", "c", "d"}).empty());
}

TEST_CASE("MultiSGD and MultiAdam update every parameter and state in place") {
  auto pairs = [](const Node& n) {
    std::vector<std::pair<size_t, size_t>> out;
    const auto none = [](size_t) -> const std::vector<int64_t>* { return nullptr; };
    for (InPlacePair c : registry().kernels.in_place(n, none, nullptr)) out.emplace_back(c.out, c.in);
    return out;
  };
  using P = std::vector<std::pair<size_t, size_t>>;
  CHECK(pairs(make_node("MultiSGD", {"lr", "s", "p", "g", "q", "h"}, {"p'", "q'"}, {}, kTrainrtDomain)) ==
        P{{0, 2}, {1, 4}});
  CHECK(pairs(make_node("MultiSGD", {"lr", "s", "p", "g", "m", "q", "h", "n"}, {"p'", "m'", "q'", "n'"}, {},
                        kTrainrtDomain)) == P{{0, 2}, {1, 4}, {2, 5}, {3, 7}});
  CHECK(pairs(make_node("MultiAdam", {"lr", "s", "p", "g", "m", "v", "q", "h", "n", "w"},
                        {"p'", "m'", "v'", "q'", "n'", "w'"}, {}, kTrainrtDomain)) ==
        P{{0, 2}, {1, 4}, {2, 5}, {3, 6}, {4, 8}, {5, 9}});
}

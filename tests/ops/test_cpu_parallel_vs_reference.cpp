// The cpu backend's oneTBB kernels for the per-element and summing ops of a training
// step (Sum, SumToShape, Dropout, DropoutGrad, SGD, Adam) against the reference
// backend: seeded random shapes, broadcasting, odd sizes above and below the
// parallel grain (ops/core/parallel.h: 16384 elements), fp32 and fp64.
//
// Tolerance: none. Each kernel computes every output element with the reference's
// operations in the reference's order (Dropout's mask from the element's index,
// SumToShape's sums in increasing dY index), so the outputs must be equal bit for
// bit; a chunk boundary handled wrongly (an index relative to the chunk, a missed
// tail) shows as a difference.
#include <doctest/doctest.h>

#include <cstring>
#include <random>

#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

void require_cpu_kernel(const std::string& domain, const char* op) {
  REQUIRE_MESSAGE(registry().schemas.find(domain, op) != nullptr, "no schema for ", op);
  REQUIRE_MESSAGE(registry().kernels.find("cpu", domain, op) != nullptr, "no cpu kernel for ", op);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.dims() == b.dims() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Runs n on both backends (training mode, one seed) with the feeds it reads; every
// output must be identical.
void check_identical(const Node& n, const TensorMap& all_feeds, bool training = false) {
  TensorMap feeds;
  for (const std::string& in : n.inputs)
    if (!in.empty()) feeds.insert_or_assign(in, all_feeds.at(in));
  Graph g = single_node_graph(n, feeds);
  RunOptions opts;
  opts.training = training;
  opts.seed = 1234;
  TensorMap ref = run_graph(g, feeds, *make_backend("reference"), opts);
  TensorMap cpu = run_graph(g, feeds, *make_backend("cpu"), opts);
  for (const auto& [name, r] : ref) {
    INFO(n.op_type, " output '", name, "' ", dims_to_string(r.dims()),
         ": max |cpu-ref| = ", max_abs_diff(cpu.at(name), r));
    CHECK(same_bits(cpu.at(name), r));
  }
}

int64_t pick(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// Rank 0..max_rank, dims 1..max_dim.
std::vector<int64_t> random_dims(std::mt19937_64& rng, int64_t max_rank, int64_t max_dim) {
  std::vector<int64_t> d;
  for (int64_t r = pick(rng, 0, max_rank); r > 0; --r) d.push_back(pick(rng, 1, max_dim));
  return d;
}

// `full` with some dims set to 1 and some leading dims dropped: broadcasts to full.
std::vector<int64_t> broadcast_operand(std::mt19937_64& rng, std::vector<int64_t> d) {
  for (int64_t& x : d)
    if (pick(rng, 0, 2) == 0) x = 1;
  d.erase(d.begin(), d.begin() + pick(rng, 0, static_cast<int64_t>(d.size())));
  return d;
}

Tensor scalar_f32(double v) { return make(DataType::Float32, {}, {v}); }
Tensor scalar_i64(int64_t v) { return make(DataType::Int64, {}, {static_cast<double>(v)}); }

}  // namespace

TEST_CASE("cpu vs reference: Sum, fan-out and broadcasting inputs, bit for bit") {
  require_cpu_kernel("", "Sum");
  std::mt19937_64 rng(81);
  for (int i = 0; i < 24; ++i) {
    std::vector<int64_t> out = random_dims(rng, 4, 40);
    if (i == 0) out = {4, 160, 9, 9};
    if (i == 1) out = {3, 7, 37, 41};  // odd, several grains
    const int inputs = static_cast<int>(pick(rng, 1, 4));
    const DataType t = i % 5 == 4 ? DataType::Float64 : DataType::Float32;
    std::vector<std::string> names;
    TensorMap feeds;
    for (int k = 0; k < inputs; ++k) {
      std::vector<int64_t> d = k == 0 || i % 2 == 0 ? out : broadcast_operand(rng, out);
      names.push_back("x" + std::to_string(k));
      feeds[names.back()] = random_tensor(t, d, 2000 + static_cast<uint64_t>(10 * i + k));
    }
    CAPTURE(dims_to_string(out));
    CAPTURE(inputs);
    check_identical(make_node("Sum", names, {"y"}), feeds);
  }
}

TEST_CASE("cpu vs reference: SumToShape, identity and every broadcast pattern, bit for bit") {
  require_cpu_kernel(kTrainrtDomain, "SumToShape");
  auto run = [](const std::vector<int64_t>& dy, const std::vector<int64_t>& x, DataType t, uint64_t seed) {
    CAPTURE(dims_to_string(dy));
    CAPTURE(dims_to_string(x));
    TensorMap feeds{{"dy", random_tensor(t, dy, seed)}, {"x", random_tensor(t, x, seed + 1)}};
    check_identical(make_node("SumToShape", {"dy", "x"}, {"dx"}, {}, kTrainrtDomain), feeds);
  };
  // The Wide ResNet's cases and the kernel's paths one by one.
  run({4, 160, 32, 32}, {4, 160, 32, 32}, DataType::Float32, 1);  // same-shape Add: a copy
  run({64, 100}, {100}, DataType::Float32, 3);                    // classifier bias: inner axis kept
  run({4, 160, 9, 9}, {1, 160, 1, 1}, DataType::Float32, 5);      // per channel: inner axis reduced
  run({3, 37, 41, 5}, {37, 1, 5}, DataType::Float32, 7);          // kept, reduced, kept
  run({5, 3, 200}, {3, 1}, DataType::Float32, 9);                 // inner run of 200
  run({7, 130}, {1, 130}, DataType::Float32, 11);                 // kept run > one block of 64
  run({2, 3, 5}, {}, DataType::Float32, 13);                      // to a scalar
  run({6, 1, 4}, {1, 4}, DataType::Float32, 15);                  // a size-1 axis in dY
  run({33, 1000}, {1}, DataType::Float64, 17);
  run({0, 3}, {3}, DataType::Float32, 19);  // empty dY: zeros
  std::mt19937_64 rng(91);
  for (int i = 0; i < 40; ++i) {
    std::vector<int64_t> dy = random_dims(rng, 5, i % 4 == 0 ? 40 : 9);
    run(dy, broadcast_operand(rng, dy), i % 7 == 6 ? DataType::Float64 : DataType::Float32, 100 + 2 * i);
  }
}

TEST_CASE("cpu vs reference: Dropout mask and output, bit for bit") {
  require_cpu_kernel("", "Dropout");
  std::mt19937_64 rng(101);
  for (int i = 0; i < 12; ++i) {
    std::vector<int64_t> dims = random_dims(rng, 4, 40);
    if (i == 0) dims = {4, 160, 32, 32};
    if (i == 1) dims = {3, 7, 37, 41};
    const DataType t = i % 4 == 3 ? DataType::Float64 : DataType::Float32;
    std::map<std::string, Attribute> attrs;
    if (i % 2) attrs["seed"] = Attribute::of_int(7 + i);
    const double ratio = i % 3 == 0 ? 0.3 : 0.5;
    CAPTURE(dims_to_string(dims));
    TensorMap feeds{{"x", random_tensor(t, dims, 3000 + i)}, {"r", make(t, {}, {ratio})}};
    check_identical(make_node("Dropout", {"x", "r"}, {"y", "mask"}, attrs), feeds, /*training=*/true);
    check_identical(make_node("Dropout", {"x", "r"}, {"y", "mask"}, attrs), feeds, /*training=*/false);
  }
}

TEST_CASE("cpu vs reference: DropoutGrad, training and inference, bit for bit") {
  require_cpu_kernel(kTrainrtDomain, "DropoutGrad");
  std::mt19937_64 rng(111);
  for (int i = 0; i < 10; ++i) {
    std::vector<int64_t> dims = random_dims(rng, 4, 40);
    if (i == 0) dims = {3, 7, 37, 41};
    Tensor mask(DataType::Bool, dims);
    for (int64_t e = 0; e < mask.numel(); ++e) mask.data<uint8_t>()[e] = static_cast<uint8_t>(pick(rng, 0, 1));
    const DataType t = i % 4 == 3 ? DataType::Float64 : DataType::Float32;
    CAPTURE(dims_to_string(dims));
    TensorMap feeds{{"dy", random_tensor(t, dims, 4000 + i)}, {"mask", mask}, {"r", make(t, {}, {0.3})}};
    Node n = make_node("DropoutGrad", {"dy", "mask", "r"}, {"dx"}, {}, kTrainrtDomain);
    check_identical(n, feeds, /*training=*/true);
    check_identical(n, feeds, /*training=*/false);
  }
}

TEST_CASE("cpu vs reference: SGD and Adam updates, bit for bit") {
  require_cpu_kernel(kTrainrtDomain, "SGD");
  require_cpu_kernel(kTrainrtDomain, "Adam");
  std::mt19937_64 rng(121);
  for (int i = 0; i < 16; ++i) {
    std::vector<int64_t> dims = random_dims(rng, 4, 40);
    if (i == 0) dims = {640, 640, 3, 3};
    if (i == 1) dims = {3, 7, 37, 41};
    const DataType t = i % 4 == 3 ? DataType::Float64 : DataType::Float32;
    CAPTURE(dims_to_string(dims));
    const uint64_t s = 5000 + 10 * static_cast<uint64_t>(i);
    TensorMap feeds{{"p", random_tensor(t, dims, s)},
                    {"g", random_tensor(t, dims, s + 1)},
                    {"m", random_tensor(t, dims, s + 2)},
                    {"v", random_tensor(t, dims, s + 3, 0, 1)},
                    {"lr", scalar_f32(0.05)},
                    {"step", scalar_i64(i % 3)}};
    std::map<std::string, Attribute> sgd{{"weight_decay", Attribute::of_float(i % 2 ? 5e-4f : 0.f)}};
    check_identical(make_node("SGD", {"p", "g", "lr", "step"}, {"p2"}, sgd, kTrainrtDomain), feeds);
    sgd["momentum"] = Attribute::of_float(0.9f);
    sgd["dampening"] = Attribute::of_float(i % 3 == 1 ? 0.1f : 0.f);
    sgd["nesterov"] = Attribute::of_int(i % 2);
    check_identical(make_node("SGD", {"p", "g", "lr", "step", "m"}, {"p2", "m2"}, sgd, kTrainrtDomain), feeds);
    std::map<std::string, Attribute> adam{{"weight_decay", Attribute::of_float(0.01f)},
                                          {"decoupled_weight_decay", Attribute::of_int(i % 2)}};
    check_identical(make_node("Adam", {"p", "g", "lr", "step", "m", "v"}, {"p2", "m2", "v2"}, adam, kTrainrtDomain),
                    feeds);
  }
}

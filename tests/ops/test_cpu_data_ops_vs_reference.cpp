// The cpu backend's kernels for the data-movement and loss ops against the reference
// backend: Transpose, Concat, Pad, Flatten, Reshape, ReshapeLike, Identity, Constant,
// Cast (ops/shape_ops_cpu.cpp, ops/misc_cpu.cpp), ReduceMean, ReduceSum, ReduceMax (ops/softmax_loss_cpu.cpp),
// SoftmaxCrossEntropyLoss and SoftmaxCrossEntropyLossGrad (ops/softmax_loss.cpp).
// Seeded random shapes, attributes and dtypes, sizes above and below the parallel
// grain (ops/core/parallel.h).
//
// Tolerance: none, except ReduceMean. The shape ops move bytes; Cast uses oneDNN only
// for conversions that round exactly like the reference and otherwise runs the
// reference's own conversion; the loss kernels run the reference's code over oneTBB
// chunks. So outputs must be equal bit for bit (two NaNs count as equal: a NaN's
// payload is not part of Cast's result). ReduceMean: oneDNN sums in fp32, the
// reference in double. For n values in [-1, 1] the fp32 sum's rounding error is a
// random walk of ~sqrt(n) * 2^-24 * |partial sum| with |partial sum| ~ sqrt(n), i.e.
// ~n * 6e-8 in the sum and ~6e-8 in the mean, whatever n; atol 1e-6 leaves a margin
// of more than 10 (a relative bound means nothing for means near 0). ReduceSum: the
// same error, not divided by n: atol 1e-6 * n for sums of n values. ReduceMax: exact.
//
// Every case the cpu kernel claims must also not reach the reference kernel
// (dnnl_util::reference_fallbacks() unchanged); the documented fallbacks (fp64
// ReduceMean, a Transpose of more than 12 axes of 8-byte elements) must reach it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <random>

#include "ops/onednn/dnnl_util.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

void require_cpu_kernel(const std::string& domain, const char* op) {
  REQUIRE_MESSAGE(registry().schemas.find(domain, op) != nullptr, "no schema for ", op);
  REQUIRE_MESSAGE(registry().kernels.find("cpu", domain, op) != nullptr, "no cpu kernel for ", op);
}

int64_t pick(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// Equal bytes, except that two NaNs of a float dtype are equal whatever their bits.
bool same_values(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.dims() != b.dims()) return false;
  if (std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0) return true;
  if (!dtype_is_float(a.dtype())) return false;
  const size_t es = dtype_size(a.dtype());
  for (int64_t i = 0; i < a.numel(); ++i) {
    const size_t at = static_cast<size_t>(i) * es;
    if (std::memcmp(a.raw() + at, b.raw() + at, es) == 0) continue;
    if (!(std::isnan(a.get_as_double(i)) && std::isnan(b.get_as_double(i)))) return false;
  }
  return true;
}

// Runs n on both backends; `initializers` are constant inputs (shapes, pads). Returns
// how many calls the cpu kernel sent to the reference kernel. rtol/atol < 0: bit equal.
uint64_t check(const Node& n, const TensorMap& feeds, const TensorMap& initializers = {}, int64_t opset = 17,
               double atol = -1) {
  Graph g = single_node_graph(n, feeds, initializers, opset);
  TensorMap ref = run_graph(g, feeds, *make_backend("reference"));
  const uint64_t before = dnnl_util::reference_fallbacks();
  TensorMap cpu = run_graph(g, feeds, *make_backend("cpu"));
  const uint64_t fallbacks = dnnl_util::reference_fallbacks() - before;
  for (const auto& [name, r] : ref) {
    const Tensor& c = cpu.at(name);
    INFO(n.op_type, " output '", name, "' ", dtype_name(r.dtype()), dims_to_string(r.dims()),
         ": max |cpu-ref| = ", max_abs_diff(c, r));
    if (atol < 0)
      CHECK(same_values(c, r));
    else
      CHECK(all_close(c, r, 0, atol));
  }
  return fallbacks;
}

// A tensor of random bytes (bool: 0 or 1): every bit pattern of the dtype, NaNs,
// infinities, subnormals and out-of-range values included.
Tensor random_bits(DataType t, std::vector<int64_t> dims, uint64_t seed) {
  Tensor x(t, std::move(dims));
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < x.nbytes(); ++i) x.raw()[i] = std::byte(rng() & (t == DataType::Bool ? 1 : 0xff));
  return x;
}

const DataType kAllTypes[] = {DataType::Float32, DataType::Float64, DataType::Float16, DataType::BFloat16,
                              DataType::Int8,    DataType::UInt8,   DataType::Int16,   DataType::UInt16,
                              DataType::Int32,   DataType::UInt32,  DataType::Int64,   DataType::UInt64,
                              DataType::Bool};

DataType random_type(std::mt19937_64& rng) {
  return kAllTypes[pick(rng, 0, static_cast<int64_t>(std::size(kAllTypes)) - 1)];
}

std::vector<int64_t> random_dims(std::mt19937_64& rng, int64_t min_rank, int64_t max_rank, int64_t max_dim) {
  std::vector<int64_t> d;
  for (int64_t r = pick(rng, min_rank, max_rank); r > 0; --r) d.push_back(pick(rng, 1, max_dim));
  return d;
}

Tensor ints(std::vector<int64_t> v) {
  Tensor t(DataType::Int64, {static_cast<int64_t>(v.size())});
  for (size_t k = 0; k < v.size(); ++k) t.data<int64_t>()[k] = v[k];
  return t;
}

}  // namespace

TEST_CASE("cpu vs reference: Transpose, every dtype, bit for bit") {
  require_cpu_kernel("", "Transpose");
  std::mt19937_64 rng(201);
  for (int i = 0; i < 40; ++i) {
    std::vector<int64_t> dims = random_dims(rng, 0, 6, 7);
    if (i == 0) dims = {4, 160, 9, 9};  // NCHW -> NHWC, above the grain
    if (i == 1) dims = {3, 37, 41, 5};
    std::vector<int64_t> perm(dims.size());
    for (size_t k = 0; k < perm.size(); ++k) perm[k] = static_cast<int64_t>(k);
    std::shuffle(perm.begin(), perm.end(), rng);
    if (i == 0) perm = {0, 2, 3, 1};
    std::map<std::string, Attribute> attrs;
    if (i % 5 != 4) attrs["perm"] = Attribute::of_ints(perm);  // else the default: reversed
    const DataType t = i < 2 ? DataType::Float32 : random_type(rng);
    CAPTURE(std::string(dtype_name(t)));
    CAPTURE(dims_to_string(dims));
    CAPTURE(dims_to_string(perm));
    CHECK(check(make_node("Transpose", {"x"}, {"y"}, attrs), {{"x", random_bits(t, dims, 300 + i)}}) == 0);
  }
}

TEST_CASE("cpu vs reference: Transpose of 12 axes; 8-byte elements need a 13th and use the reference") {
  const std::vector<int64_t> dims(12, 2);
  const std::vector<int64_t> perm{1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10};  // no two axes stay neighbours
  const Node n = make_node("Transpose", {"x"}, {"y"}, {{"perm", Attribute::of_ints(perm)}});
  CHECK(check(n, {{"x", random_bits(DataType::Float32, dims, 1)}}) == 0);
  CHECK(check(n, {{"x", random_bits(DataType::Int8, dims, 2)}}) == 0);
  CHECK(check(n, {{"x", random_bits(DataType::Int64, dims, 3)}}) == 1);
}

TEST_CASE("cpu vs reference: Concat, any axis, empty inputs, every dtype, bit for bit") {
  require_cpu_kernel("", "Concat");
  std::mt19937_64 rng(211);
  for (int i = 0; i < 40; ++i) {
    std::vector<int64_t> dims = random_dims(rng, 1, 5, 6);
    if (i == 0) dims = {8, 160, 16, 16};
    const int64_t rank = static_cast<int64_t>(dims.size());
    const int64_t axis = pick(rng, -rank, rank - 1);
    const size_t a = static_cast<size_t>(axis < 0 ? axis + rank : axis);
    const DataType t = i == 0 ? DataType::Float32 : random_type(rng);
    const int inputs = static_cast<int>(pick(rng, 1, 5));
    TensorMap feeds;
    std::vector<std::string> names;
    for (int k = 0; k < inputs; ++k) {
      std::vector<int64_t> d = dims;
      d[a] = pick(rng, i % 3 == 2 ? 0 : 1, 6);  // some inputs empty along the axis
      if (i == 0) d[a] = 160;
      names.push_back("x" + std::to_string(k));
      feeds[names.back()] = random_bits(t, d, 400 + 10 * static_cast<uint64_t>(i) + static_cast<uint64_t>(k));
    }
    CAPTURE(std::string(dtype_name(t)));
    CAPTURE(dims_to_string(dims));
    CAPTURE(axis);
    CAPTURE(inputs);
    CHECK(check(make_node("Concat", names, {"y"}, {{"axis", Attribute::of_int(axis)}}), feeds) == 0);
  }
}

TEST_CASE("cpu vs reference: Pad (constant), growing and cropping, with and without a value, bit for bit") {
  require_cpu_kernel("", "Pad");
  std::mt19937_64 rng(221);
  for (int i = 0; i < 40; ++i) {
    std::vector<int64_t> dims = random_dims(rng, 1, 5, 7);
    if (i == 0) dims = {8, 160, 14, 14};
    const size_t r = dims.size();
    std::vector<int64_t> pads(2 * r);
    for (size_t d = 0; d < r; ++d) {
      pads[d] = pick(rng, -dims[d] / 2, 3);
      pads[d + r] = pick(rng, -(dims[d] + pads[d]), 3);  // the output extent stays >= 0
    }
    if (i == 0) pads = {0, 0, 1, 1, 0, 0, 1, 1};
    const DataType t = i == 0 ? DataType::Float32 : random_type(rng);
    TensorMap feeds{{"x", random_bits(t, dims, 500 + i)}};
    std::vector<std::string> in{"x", "pads"};
    if (i % 3 != 0) {
      feeds["v"] = random_bits(t, {}, 600 + i);
      in.push_back("v");
    }
    TensorMap init{{"pads", ints(pads)}};
    int64_t opset = 17;
    if (i % 4 == 3) {  // opset 18: pads for the axes listed only
      std::vector<int64_t> axes(r), some;
      for (size_t d = 0; d < r; ++d) axes[d] = static_cast<int64_t>(d);
      std::vector<int64_t> sub;
      for (size_t d = 0; d < r; ++d)
        if (pick(rng, 0, 1)) some.push_back(axes[d] - (pick(rng, 0, 1) ? static_cast<int64_t>(r) : 0));
      for (int64_t ax : some) sub.push_back(pads[static_cast<size_t>(ax < 0 ? ax + static_cast<int64_t>(r) : ax)]);
      for (int64_t ax : some) sub.push_back(pads[static_cast<size_t>(ax < 0 ? ax + static_cast<int64_t>(r) : ax) + r]);
      if (in.size() == 2) in.push_back("");
      in.push_back("axes");
      init["pads"] = ints(sub);
      init["axes"] = ints(some);
      opset = 18;
    }
    CAPTURE(std::string(dtype_name(t)));
    CAPTURE(dims_to_string(dims));
    CAPTURE(dims_to_string(init.at("pads").dims()));
    CHECK(check(make_node("Pad", in, {"y"}), feeds, init, opset) == 0);
  }
}

TEST_CASE("cpu vs reference: Cast between every pair of dtypes, every bit pattern") {
  require_cpu_kernel("", "Cast");
  uint64_t seed = 700;
  for (DataType from : kAllTypes)
    for (DataType to : kAllTypes) {
      CAPTURE(std::string(dtype_name(from)));
      CAPTURE(std::string(dtype_name(to)));
      const Node n = make_node("Cast", {"x"}, {"y"}, {{"to", Attribute::of_int(static_cast<int64_t>(to))}});
      CHECK(check(n, {{"x", random_bits(from, {3, 7, 5}, ++seed)}}) == 0);
      CHECK(check(n, {{"x", random_bits(from, {41, 1009}, ++seed)}}) == 0);  // several parallel chunks
    }
}

TEST_CASE("cpu vs reference: Flatten, Reshape, ReshapeLike, Identity, Constant copy every byte") {
  for (const char* op : {"Flatten", "Reshape", "Identity", "Constant"}) require_cpu_kernel("", op);
  require_cpu_kernel(kTrainrtDomain, "ReshapeLike");
  std::mt19937_64 rng(231);
  for (int i = 0; i < 12; ++i) {
    std::vector<int64_t> dims = random_dims(rng, 1, 4, 12);
    if (i == 0) dims = {64, 640, 7, 7};  // the Wide ResNet's last map: several chunks
    const DataType t = i == 0 ? DataType::Float32 : random_type(rng);
    CAPTURE(std::string(dtype_name(t)));
    CAPTURE(dims_to_string(dims));
    Tensor x = random_bits(t, dims, 800 + i);
    const TensorMap feeds{{"x", x}};
    const int64_t axis = pick(rng, 0, static_cast<int64_t>(dims.size()));
    CHECK(check(make_node("Flatten", {"x"}, {"y"}, {{"axis", Attribute::of_int(axis)}}), feeds) == 0);
    CHECK(check(make_node("Reshape", {"x", "s"}, {"y"}), feeds, {{"s", ints({-1})}}) == 0);
    CHECK(check(make_node("Identity", {"x"}, {"y"}), feeds) == 0);
    CHECK(check(make_node("Constant", {}, {"y"}, {{"value", Attribute::of_tensor(x)}}), {}) == 0);
    const TensorMap grad_feeds{{"dy", random_bits(t, {x.numel()}, 900 + i)}, {"x", x}};
    CHECK(check(make_node("ReshapeLike", {"dy", "x"}, {"dx"}, {}, kTrainrtDomain), grad_feeds) == 0);
  }
}

TEST_CASE("cpu vs reference: ReduceMean, random axes, keepdims, opset 13 and 18 forms") {
  require_cpu_kernel("", "ReduceMean");
  std::mt19937_64 rng(241);
  for (int i = 0; i < 40; ++i) {
    std::vector<int64_t> dims = random_dims(rng, 1, 5, 9);
    if (i == 0) dims = {64, 640, 7, 7};  // global average over 49
    if (i == 1) dims = {16, 3, 32, 32};  // per-channel statistics
    const int64_t rank = static_cast<int64_t>(dims.size());
    std::vector<int64_t> axes;
    for (int64_t d = 0; d < rank; ++d)
      if (pick(rng, 0, 2) == 0) axes.push_back(pick(rng, 0, 1) ? d : d - rank);
    if (i == 0) axes = {2, 3};
    if (i == 1) axes = {0, 2, 3};
    std::map<std::string, Attribute> attrs{{"keepdims", Attribute::of_int(i % 2)}};
    const bool opset18 = i % 3 == 2;
    const bool noop = opset18 && axes.empty() && pick(rng, 0, 1);
    if (noop) attrs["noop_with_empty_axes"] = Attribute::of_int(1);
    if (!opset18 && !axes.empty()) attrs["axes"] = Attribute::of_ints(axes);
    std::vector<std::string> in{"x"};
    TensorMap init;
    if (opset18 && !axes.empty()) {
      in.push_back("axes");
      init["axes"] = ints(axes);
    }
    CAPTURE(dims_to_string(dims));
    CAPTURE(dims_to_string(axes));
    CAPTURE(opset18);
    TensorMap feeds{{"x", random_tensor(DataType::Float32, dims, 1000 + i)}};
    const Node n = make_node("ReduceMean", in, {"y"}, attrs);
    CHECK(check(n, feeds, init, opset18 ? 18 : 13, 1e-6) == 0);
    // fp64: oneDNN has no f64 reduction, so the reference kernel runs (bit equal).
    TensorMap feeds64{{"x", random_tensor(DataType::Float64, dims, 1000 + i)}};
    CHECK(check(n, feeds64, init, opset18 ? 18 : 13) == 1);
  }
}

TEST_CASE("cpu vs reference: ReduceSum (axes input) and ReduceMax (axes attribute, opset 18 input), keepdims") {
  require_cpu_kernel("", "ReduceSum");
  require_cpu_kernel("", "ReduceMax");
  std::mt19937_64 rng(243);
  for (int i = 0; i < 30; ++i) {
    std::vector<int64_t> dims = random_dims(rng, 1, 5, 9);
    if (i == 0) dims = {16, 197, 64};  // a ViT's token sums
    const int64_t rank = static_cast<int64_t>(dims.size());
    std::vector<int64_t> axes;
    for (int64_t d = 0; d < rank; ++d)
      if (pick(rng, 0, 2) == 0) axes.push_back(pick(rng, 0, 1) ? d : d - rank);
    if (i == 0) axes = {-1};
    const bool noop = axes.empty() && pick(rng, 0, 1);
    int64_t count = 1;  // elements summed into one output
    for (int64_t d = 0; d < rank; ++d)
      if (!noop &&
          (axes.empty() || std::count(axes.begin(), axes.end(), d) || std::count(axes.begin(), axes.end(), d - rank)))
        count *= dims[static_cast<size_t>(d)];
    std::map<std::string, Attribute> attrs{{"keepdims", Attribute::of_int(i % 2)}};
    if (noop) attrs["noop_with_empty_axes"] = Attribute::of_int(1);
    std::vector<std::string> in{"x"};
    TensorMap init;
    if (!axes.empty()) {
      in.push_back("axes");
      init["axes"] = ints(axes);
    }
    CAPTURE(dims_to_string(dims));
    CAPTURE(dims_to_string(axes));
    CAPTURE(noop);
    TensorMap feeds{{"x", random_tensor(DataType::Float32, dims, 1100 + i)}};
    CHECK(check(make_node("ReduceSum", in, {"y"}, attrs), feeds, init, 13, 1e-6 * static_cast<double>(count)) == 0);
    TensorMap feeds64{{"x", random_tensor(DataType::Float64, dims, 1100 + i)}};
    CHECK(check(make_node("ReduceSum", in, {"y"}, attrs), feeds64, init, 13) == 1);
    // ReduceMax: opset 13 attribute or opset 18 input; a max is exact.
    const bool opset18 = i % 3 == 2;
    std::map<std::string, Attribute> max_attrs{{"keepdims", Attribute::of_int(i % 2)}};
    if (opset18 && noop) max_attrs["noop_with_empty_axes"] = Attribute::of_int(1);
    if (!opset18 && !axes.empty()) max_attrs["axes"] = Attribute::of_ints(axes);
    const std::vector<std::string> max_in = opset18 ? in : std::vector<std::string>{"x"};
    if (!opset18 && noop) continue;  // noop_with_empty_axes needs opset 18 for ReduceMax
    CHECK(check(make_node("ReduceMax", max_in, {"y"}, max_attrs), feeds, opset18 ? init : TensorMap{},
                opset18 ? 18 : 13) == 0);
  }
}

TEST_CASE("cpu vs reference: SoftmaxCrossEntropyLoss and its gradient, every reduction, bit for bit") {
  require_cpu_kernel("", "SoftmaxCrossEntropyLoss");
  require_cpu_kernel(kTrainrtDomain, "SoftmaxCrossEntropyLossGrad");
  std::mt19937_64 rng(251);
  const char* reductions[] = {"none", "mean", "sum"};
  for (int i = 0; i < 36; ++i) {
    const int64_t n = pick(rng, 1, 70), c = pick(rng, 1, 120);
    std::vector<int64_t> scores{n, c}, labels{n};
    for (int64_t k = pick(rng, 0, 2); k > 0; --k) {
      const int64_t d = pick(rng, 1, 9);
      scores.push_back(d);
      labels.push_back(d);
    }
    if (i == 0) scores = {64, 100}, labels = {64};               // the CIFAR-100 classifier
    if (i == 1) scores = {8, 21, 16, 16}, labels = {8, 16, 16};  // per-pixel, several chunks
    const int64_t classes = scores[1];
    const std::string reduction = reductions[i % 3];
    const bool weighted = i % 2 == 1, ignore = i % 4 >= 2;
    const int64_t ii = i % 8 >= 6 ? -100 : pick(rng, 0, classes - 1);
    const DataType t = i % 6 == 5 ? DataType::Float64 : DataType::Float32;
    const DataType lt = i % 5 == 4 ? DataType::Int32 : DataType::Int64;
    Tensor lab(lt, labels);
    for (int64_t k = 0; k < lab.numel(); ++k) {
      int64_t l = pick(rng, 0, classes - 1);
      if (ignore && pick(rng, 0, 3) == 0) l = ii;
      lab.set_from_double(k, static_cast<double>(l));
    }
    TensorMap feeds{{"x", random_tensor(t, scores, 1100 + i, -6, 6)}, {"l", lab}};
    std::vector<std::string> in{"x", "l"};
    if (weighted) {
      feeds["w"] = random_tensor(t, {classes}, 1200 + i, 0.1, 2);
      in.push_back("w");
    }
    std::map<std::string, Attribute> attrs{{"reduction", Attribute::of_string(reduction)}};
    if (ignore) attrs["ignore_index"] = Attribute::of_int(ii);
    CAPTURE(dims_to_string(scores));
    CAPTURE(reduction);
    CAPTURE(weighted);
    CAPTURE(ignore);
    std::vector<std::string> out{"loss"};
    if (i % 2 == 0) out.push_back("log_prob");
    CHECK(check(make_node("SoftmaxCrossEntropyLoss", in, out, attrs), feeds) == 0);

    TensorMap grad_feeds{{"lp", random_tensor(t, scores, 1300 + i, -6, 0)}, {"l", lab}};
    grad_feeds["dl"] = random_tensor(t, reduction == "none" ? labels : std::vector<int64_t>{}, 1400 + i);
    std::vector<std::string> grad_in{"dl", "lp", "l"};
    if (weighted) {
      grad_feeds["w"] = feeds.at("w");
      grad_in.push_back("w");
    }
    CHECK(check(make_node("SoftmaxCrossEntropyLossGrad", grad_in, {"dx"}, attrs, kTrainrtDomain), grad_feeds) == 0);
  }
}

TEST_CASE("cpu Gather, Slice, Split, Expand and their gradients equal the reference above the parallel grain") {
  for (const char* op : {"Gather", "Slice", "Split", "Expand", "Range", "ConstantOfShape"}) require_cpu_kernel("", op);
  for (const char* op : {"GatherGrad", "SliceGrad"}) require_cpu_kernel(kTrainrtDomain, op);
  std::mt19937_64 rng(41);
  for (int trial = 0; trial < 6; ++trial) {
    CAPTURE(trial);
    const DataType t = random_type(rng);
    const std::vector<int64_t> big{pick(rng, 3, 40), 64, pick(rng, 5, 70)};  // 1e4..2e5 elements
    const Tensor x = random_bits(t, big, static_cast<uint64_t>(trial));
    const int64_t axis = pick(rng, -3, 2);
    const int64_t dim = big[static_cast<size_t>(axis < 0 ? axis + 3 : axis)];
    const int64_t other = ((axis < 0 ? axis + 3 : axis) + 1) % 3;  // a second sliced axis
    Tensor idx(DataType::Int64, {2, 3});
    for (int64_t k = 0; k < idx.numel(); ++k) idx.data<int64_t>()[k] = pick(rng, -dim, dim - 1);
    check(make_node("Gather", {"x", "idx"}, {"y"}, {{"axis", Attribute::of_int(axis)}}), {{"x", x}}, {{"idx", idx}});
    check(make_node("Slice", {"x", "s", "e", "a", "st"}, {"y"}), {{"x", x}},
          {{"s", ints({-1, 2})}, {"e", ints({-1000, 1000})}, {"a", ints({axis, other})}, {"st", ints({-2, 3})}});
    check(make_node("Split", {"x", "sp"}, {"y0", "y1"}, {{"axis", Attribute::of_int(1)}}), {{"x", x}},
          {{"sp", ints({24, 40})}});
    check(make_node("Expand", {"x", "shape"}, {"y"}), {{"x", random_bits(t, {big[0], 1, big[2]}, 9)}},
          {{"shape", ints({2, big[0], 64, big[2]})}});
    // The gradients: dY of the forward op's output shape, float32 or float64.
    const DataType f = trial % 2 ? DataType::Float32 : DataType::Float64;
    const Tensor xf = random_tensor(f, big, static_cast<uint64_t>(trial));
    const TensorMap consts{{"idx", idx},
                           {"s", ints({-1, 2})},
                           {"e", ints({-1000, 1000})},
                           {"a", ints({axis, other})},
                           {"st", ints({-2, 3})}};
    const Node gather = make_node("Gather", {"x", "idx"}, {"y"}, {{"axis", Attribute::of_int(axis)}});
    const Node slice = make_node("Slice", {"x", "s", "e", "a", "st"}, {"y"});
    const std::vector<int64_t> gathered = run_node(gather, {{"x", xf}}, "reference", consts).at("y").dims();
    const std::vector<int64_t> sliced = run_node(slice, {{"x", xf}}, "reference", consts).at("y").dims();
    check(make_node("GatherGrad", {"dy", "idx", "x"}, {"dx"}, {{"axis", Attribute::of_int(axis)}}, kTrainrtDomain),
          {{"x", xf}, {"dy", random_tensor(f, gathered, 3)}}, consts);
    check(make_node("SliceGrad", {"dy", "x", "s", "e", "a", "st"}, {"dx"}, {}, kTrainrtDomain),
          {{"x", xf}, {"dy", random_tensor(f, sliced, 4)}}, consts);
  }
  Tensor start(DataType::Int64, {}), limit(DataType::Int64, {}), delta(DataType::Int64, {});
  start.data<int64_t>()[0] = -7;
  limit.data<int64_t>()[0] = 100000;
  delta.data<int64_t>()[0] = 3;
  check(make_node("Range", {"a", "b", "c"}, {"y"}), {{"a", start}, {"b", limit}, {"c", delta}});
  check(make_node("ConstantOfShape", {"shape"}, {"y"},
                  {{"value", Attribute::of_tensor(make(DataType::Float64, {1}, {2.5}))}}),
        {}, {{"shape", ints({300, 70})}});
}

// The cpu backend's backward kernels (ops/*_cpu.cpp) against the reference
// backend, op by op: seeded random shapes and attributes plus the Wide ResNet's real
// layer shapes at batch 2-4. The WRN cases print an ad-hoc timing of both backends
// (one reference run, best of three cpu runs after a warm-up; shown, not asserted).
//
// Tolerances. The reference accumulates in double, so a difference is the fp32
// kernel's own rounding, and that grows with the length L of the reduction behind an
// output: dX of ConvGrad sums L = M/G*kH*kW products, dW and dB sum L = N*Ho*Wo, the
// BatchNormalizationGrad sums (dScale, dBias and, through them, dX) run over
// L = N*spatial, and the LayerNormalizationGrad sums: dScale and dBias over the rows,
// dX over a row's D values. With random signs the partial sums of L terms of size t grow like
// sqrt(L)*t and each of the L additions rounds by 2^-24 of that, so the error is
// about sqrt(L)*2^-24 times the output's typical (RMS) size, in any summation order
// (oneDNN's blocked order, its per-thread partial sums). The check for these outputs:
//   max |cpu - ref| <= 32 * sqrt(L) * 2^-24 * rms(ref)
// (32 covers the constant of the random walk and the unlucky element; L = 3136 gives
// 1.1e-4 of the RMS). It is an absolute bound scaled by the output, so outputs near 0
// (where a relative bound means nothing) are judged against their neighbours' size.
// - MaxPoolGrad: rtol 1e-6, atol 1e-6: the same element of each window is chosen
//   (tie rule included); overlapping windows add a few dY in fp32.
// - AveragePoolGrad: rtol 1e-5, atol 1e-6 (dY/divisor added over <= k^d windows).
// - GlobalAveragePoolGrad, ReluGrad: exact up to one rounding (rtol 1e-6, atol 0).
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include "ops/onednn/dnnl_util.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

// How one output is judged: elementwise (rtol, atol), or by the reduction rule above
// when `reduction` > 0.
struct OutTol {
  double rtol = 0, atol = 0;
  int64_t reduction = 0;
};

double rms(const Tensor& t) {
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += t.get_as_double(i) * t.get_as_double(i);
  return t.numel() ? std::sqrt(s / static_cast<double>(t.numel())) : 0;
}

void check_output(const std::string& what, const Tensor& c, const Tensor& r, OutTol tol) {
  const double diff = max_abs_diff(c, r);
  if (tol.reduction > 0) {
    const double bound = 32 * std::sqrt(static_cast<double>(tol.reduction)) * std::ldexp(1.0, -24) * rms(r);
    INFO(what, " ", dims_to_string(r.dims()), ": max |cpu-ref| = ", diff, ", bound ", bound, " (L = ", tol.reduction,
         ", rms ", rms(r), ")");
    CHECK(diff <= bound);
  } else {
    INFO(what, " ", dims_to_string(r.dims()), ": max |cpu-ref| = ", diff);
    CHECK(all_close(c, r, tol.rtol, tol.atol));
  }
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

struct Compared {
  uint64_t fallbacks = 0;  // calls the cpu kernel handed to the reference kernel
  double ref_ms = 0, cpu_ms = 0;
};

// Runs `n` on both backends and judges every output with tol(output name).
Compared check_same(const Node& n, const TensorMap& feeds, const std::function<OutTol(const std::string&)>& tol,
                    bool timed = false) {
  Graph g = single_node_graph(n, feeds);
  Compared res;
  auto t0 = std::chrono::steady_clock::now();
  TensorMap ref = run_graph(g, feeds, *make_backend("reference"));
  res.ref_ms = ms_since(t0);
  const uint64_t before = dnnl_util::reference_fallbacks();
  TensorMap cpu = run_graph(g, feeds, *make_backend("cpu"));
  res.fallbacks = dnnl_util::reference_fallbacks() - before;
  if (timed) {
    res.cpu_ms = INFINITY;
    for (int i = 0; i < 3; ++i) {
      t0 = std::chrono::steady_clock::now();
      (void)run_graph(g, feeds, *make_backend("cpu"));
      res.cpu_ms = std::min(res.cpu_ms, ms_since(t0));
    }
  }
  for (const auto& [name, r] : ref) check_output(n.op_type + " output '" + name + "'", cpu.at(name), r, tol(name));
  return res;
}

void report(const std::string& what, const Compared& c) {
  MESSAGE(what, ": reference ", c.ref_ms, " ms, cpu ", c.cpu_ms, " ms (", c.ref_ms / c.cpu_ms, "x)");
}

void require_cpu_kernel(const char* op) {
  REQUIRE_MESSAGE(registry().schemas.find(kTrainrtDomain, op) != nullptr, "no schema for ", op);
  REQUIRE_MESSAGE(registry().kernels.find("cpu", kTrainrtDomain, op) != nullptr, "no cpu kernel for ", op);
}

int64_t pick(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

Tensor rand_f32(std::vector<int64_t> dims, uint64_t seed, double lo = -1, double hi = 1) {
  return random_tensor(DataType::Float32, std::move(dims), seed, lo, hi);
}

// ---- ConvGrad ---------------------------------------------------------------
// Outputs requested by bit mask: 1 dX, 2 dW, 4 dB.
Node conv_grad_node(int mask, std::map<std::string, Attribute> attrs) {
  return make_node("ConvGrad", {"dy", "x", "w"}, {mask & 1 ? "dx" : "", mask & 2 ? "dw" : "", mask & 4 ? "db" : ""},
                   std::move(attrs), kTrainrtDomain);
}

// dY's shape: the forward Conv's output, inferred by the Conv schema itself.
std::vector<int64_t> conv_output_dims(const Tensor& x, const Tensor& w, const std::map<std::string, Attribute>& attrs) {
  Node fwd = make_node("Conv", {"x", "w"}, {"y"}, attrs);
  Graph g = single_node_graph(fwd, {{"x", x}, {"w", w}});
  return shape_dims(*g.info("y").shape);
}

// Product of dims [from, end).
int64_t dims_product(const std::vector<int64_t>& d, size_t from) {
  int64_t p = 1;
  for (size_t i = from; i < d.size(); ++i) p *= d[i];
  return p;
}

// Feeds for a ConvGrad of X: n,c,spatial... and W: m,c/group,k...; weights scaled 1/sqrt(fan_in).
TensorMap conv_grad_feeds(std::vector<int64_t> xd, std::vector<int64_t> wd,
                          const std::map<std::string, Attribute>& attrs, uint64_t seed) {
  const double a = 1.0 / std::sqrt(static_cast<double>(dims_product(wd, 1)));
  Tensor x = rand_f32(std::move(xd), seed), w = rand_f32(std::move(wd), seed + 1, -a, a);
  Tensor dy = rand_f32(conv_output_dims(x, w, attrs), seed + 2);
  return {{"dy", dy}, {"x", x}, {"w", w}};
}

std::function<OutTol(const std::string&)> conv_grad_tol(const TensorMap& f) {
  const auto& dy = f.at("dy").dims();
  const auto& w = f.at("w").dims();
  const int64_t spatial_out = dy[0] * dims_product(dy, 2);
  const int64_t group = f.at("x").dims()[1] / w[1];
  return [=](const std::string& out) {
    if (out == "dx") return OutTol{0, 0, w[0] / group * dims_product(w, 2)};
    return OutTol{0, 0, spatial_out};  // dw, db
  };
}

// ---- BatchNormalizationGrad --------------------------------------------------
Node bn_grad_node(int mask, float eps) {
  return make_node("BatchNormalizationGrad", {"dy", "x", "scale"},
                   {mask & 1 ? "dx" : "", mask & 2 ? "dscale" : "", mask & 4 ? "dbias" : ""},
                   {{"epsilon", Attribute::of_float(eps)}}, kTrainrtDomain);
}

// saved: the node reads saved_mean/saved_var, the cpu training forward's outputs 5/6.
Compared check_bn_grad(std::vector<int64_t> dims, int mask, float eps, uint64_t seed, bool timed = false,
                       bool saved = false) {
  // X with a per-tensor offset and spread (statistics far from 0/1), scale around 1.
  Tensor x = rand_f32(dims, seed, -1.5, 2.5);
  TensorMap feeds{{"dy", rand_f32(dims, seed + 1)}, {"x", x}, {"scale", rand_f32({dims[1]}, seed + 2, 0.5, 1.5)}};
  const int64_t reduction = x.numel() / dims[1];
  Node n = bn_grad_node(mask, eps);
  if (saved) {
    const int64_t C = dims[1];
    TensorMap in{{"x", x},
                 {"s", feeds.at("scale")},
                 {"b", rand_f32({C}, seed + 3)},
                 {"m", rand_f32({C}, seed + 4)},
                 {"v", rand_f32({C}, seed + 5, 0.5, 1.5)}};
    const TensorMap fwd = run_node(
        make_node("BatchNormalization", {"x", "s", "b", "m", "v"}, {"y", "", "", "", "", "saved_mean", "saved_var"},
                  {{"training_mode", Attribute::of_int(1)}, {"epsilon", Attribute::of_float(eps)}}),
        in, "cpu");
    feeds["saved_mean"] = fwd.at("saved_mean");
    feeds["saved_var"] = fwd.at("saved_var");
    n.inputs = {"dy", "x", "scale", "saved_mean", "saved_var"};
  }
  return check_same(
      n, feeds,
      [=](const std::string&) {
        return OutTol{0, 0, reduction};
      },
      timed);
}

// ---- LayerNormalizationGrad --------------------------------------------------
Compared check_ln_grad(std::vector<int64_t> dims, int64_t axis, int mask, uint64_t seed) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  const std::vector<int64_t> norm(dims.begin() + (axis < 0 ? axis + rank : axis), dims.end());
  const int64_t D = element_count(norm), rows = element_count(dims) / D;
  TensorMap feeds{{"dy", rand_f32(dims, seed)},
                  {"x", rand_f32(dims, seed + 1, -1.5, 2.5)},
                  {"scale", rand_f32(norm, seed + 2, 0.5, 1.5)}};
  Node n = make_node("LayerNormalizationGrad", {"dy", "x", "scale"},
                     {mask & 1 ? "dx" : "", mask & 2 ? "dscale" : "", mask & 4 ? "dbias" : ""},
                     {{"axis", Attribute::of_int(axis)}, {"epsilon", Attribute::of_float(1e-5f)}}, kTrainrtDomain);
  return check_same(n, feeds, [=](const std::string& out) { return OutTol{0, 0, out == "dx" ? D : rows}; });
}

// ---- pools -------------------------------------------------------------------
std::vector<int64_t> pool_output_dims(const char* op, const Tensor& x, const std::map<std::string, Attribute>& attrs) {
  Graph g = single_node_graph(make_node(op, {"x"}, {"y"}, attrs), {{"x", x}});
  return shape_dims(*g.info("y").shape);
}

// Runs <op>Grad for x and the forward attributes; `ties` rounds X to a few values.
Compared check_pool_grad(const char* op, Tensor x, const std::map<std::string, Attribute>& attrs, uint64_t seed,
                         bool timed = false) {
  TensorMap feeds{{"x", x}, {"dy", rand_f32(pool_output_dims(op, x, attrs), seed)}};
  const bool max = std::string(op) == "MaxPool";
  Node n = make_node(std::string(op) + "Grad", {"dy", "x"}, {"dx"}, attrs, kTrainrtDomain);
  const OutTol tol = max ? OutTol{1e-6, 1e-6} : OutTol{1e-5, 1e-6};
  return check_same(
      n, feeds, [=](const std::string&) { return tol; }, timed);
}

void random_pool_grads(const char* op, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const bool max = std::string(op) == "MaxPool";
  int used_cpu = 0;
  for (int i = 0; i < 24; ++i) {
    const int64_t sp = pick(rng, 1, 3);
    std::vector<int64_t> dims{pick(rng, 1, 3), pick(rng, 1, 5)};
    std::vector<int64_t> k, s, d, pads(2 * static_cast<size_t>(sp));
    for (int64_t j = 0; j < sp; ++j) {
      k.push_back(pick(rng, 1, sp == 3 ? 2 : 3));
      s.push_back(pick(rng, 1, 3));
      d.push_back(pick(rng, 1, 2));  // AveragePool's dilations: opset 19
    }
    for (int64_t j = 0; j < sp; ++j) {
      dims.push_back(pick(rng, d[static_cast<size_t>(j)] * (k[static_cast<size_t>(j)] - 1) + 1, sp == 3 ? 6 : 11));
      pads[static_cast<size_t>(j)] = pick(rng, 0, k[static_cast<size_t>(j)] - 1);
      pads[static_cast<size_t>(j + sp)] = pick(rng, 0, k[static_cast<size_t>(j)] - 1);
    }
    std::map<std::string, Attribute> attrs{{"kernel_shape", Attribute::of_ints(k)}, {"strides", Attribute::of_ints(s)}};
    attrs["dilations"] = Attribute::of_ints(d);
    const int64_t mode = pick(rng, 0, 4);
    if (mode == 0)
      attrs["auto_pad"] = Attribute::of_string("SAME_UPPER");
    else if (mode == 1)
      attrs["auto_pad"] = Attribute::of_string("VALID");
    else
      attrs["pads"] = Attribute::of_ints(pads);
    if (mode >= 2 && pick(rng, 0, 1)) attrs["ceil_mode"] = Attribute::of_int(1);
    if (!max && pick(rng, 0, 1)) attrs["count_include_pad"] = Attribute::of_int(1);
    Tensor x = rand_f32(dims, seed * 100 + static_cast<uint64_t>(i));
    if (max && i % 2 == 0)  // many ties: X takes 3 values, so the tie rule decides
      for (int64_t e = 0; e < x.numel(); ++e) x.data<float>()[e] = std::round(x.data<float>()[e]);
    CAPTURE(i);
    CAPTURE(dims_to_string(dims));
    CAPTURE(dims_to_string(k));
    CAPTURE(dims_to_string(s));
    used_cpu += check_pool_grad(op, x, attrs, seed * 1000 + static_cast<uint64_t>(i)).fallbacks == 0;
  }
  MESSAGE(std::string(op), "Grad: ", used_cpu, " of 24 random cases ran the cpu kernel");
  CHECK(used_cpu >= 16);
}

}  // namespace

TEST_CASE("cpu grad vs reference: ConvGrad, random shapes, attributes and requested outputs") {
  require_cpu_kernel("ConvGrad");
  std::mt19937_64 rng(4321);
  for (int i = 0; i < 24; ++i) {
    int64_t group = pick(rng, 0, 3) == 0 ? pick(rng, 2, 3) : 1;
    int64_t cg = pick(rng, 1, 4), mg = pick(rng, 1, 4);
    if (pick(rng, 0, 5) == 0) cg = 1, group = pick(rng, 2, 6);  // depthwise
    const int64_t c = group * cg, m = group * mg, n = pick(rng, 1, 3);
    const int64_t kh = pick(rng, 1, 3), kw = pick(rng, 1, 3);
    const int64_t sh = pick(rng, 1, 2), sw = pick(rng, 1, 2), dh = pick(rng, 1, 2), dw = pick(rng, 1, 2);
    const int64_t h = pick(rng, (kh - 1) * dh + 1, 12), w = pick(rng, (kw - 1) * dw + 1, 12);
    std::map<std::string, Attribute> attrs{{"strides", Attribute::of_ints({sh, sw})},
                                           {"dilations", Attribute::of_ints({dh, dw})}};
    if (group > 1) attrs["group"] = Attribute::of_int(group);
    const int64_t mode = pick(rng, 0, 5);
    if (mode == 0)
      attrs["auto_pad"] = Attribute::of_string("SAME_UPPER");
    else if (mode == 1)
      attrs["auto_pad"] = Attribute::of_string("SAME_LOWER");
    else if (mode == 2)
      attrs["auto_pad"] = Attribute::of_string("VALID");
    else
      attrs["pads"] =
          Attribute::of_ints({pick(rng, 0, kh - 1), pick(rng, 0, kw - 1), pick(rng, 0, kh - 1), pick(rng, 0, kw - 1)});
    if (pick(rng, 0, 1)) attrs["kernel_shape"] = Attribute::of_ints({kh, kw});
    const int mask = static_cast<int>(pick(rng, 1, 7));
    CAPTURE(i);
    CAPTURE(mask);
    TensorMap feeds = conv_grad_feeds({n, c, h, w}, {m, cg, kh, kw}, attrs, 500 + static_cast<uint64_t>(i) * 3);
    Compared r = check_same(conv_grad_node(mask, attrs), feeds, conv_grad_tol(feeds));
    CHECK(r.fallbacks == 0);
  }
}

TEST_CASE("cpu grad vs reference: ConvGrad 1-D and 3-D, random shapes, attributes and requested outputs") {
  require_cpu_kernel("ConvGrad");
  std::mt19937_64 rng(8765);
  for (int i = 0; i < 16; ++i) {
    const size_t sp = i % 2 ? 3 : 1;
    int64_t group = pick(rng, 0, 2) == 0 ? 2 : 1;
    const int64_t cg = pick(rng, 1, 3), mg = pick(rng, 1, 3), c = group * cg, m = group * mg, n = pick(rng, 1, 2);
    std::vector<int64_t> xd{n, c}, wd{m, cg}, k, s, d, pads(2 * sp);
    for (size_t j = 0; j < sp; ++j) {
      k.push_back(pick(rng, 1, 3));
      s.push_back(pick(rng, 1, 2));
      d.push_back(pick(rng, 1, 2));
      pads[j] = pick(rng, 0, k[j] - 1);
      pads[j + sp] = pick(rng, 0, k[j] - 1);
      xd.push_back(pick(rng, (k[j] - 1) * d[j] + 1, sp == 1 ? 16 : 6));
      wd.push_back(k[j]);
    }
    std::map<std::string, Attribute> attrs{{"strides", Attribute::of_ints(s)}, {"dilations", Attribute::of_ints(d)}};
    if (group > 1) attrs["group"] = Attribute::of_int(group);
    const int64_t mode = pick(rng, 0, 4);
    if (mode == 0)
      attrs["auto_pad"] = Attribute::of_string(pick(rng, 0, 1) ? "SAME_UPPER" : "SAME_LOWER");
    else if (mode == 1)
      attrs["auto_pad"] = Attribute::of_string("VALID");
    else
      attrs["pads"] = Attribute::of_ints(pads);
    const int mask = static_cast<int>(pick(rng, 1, 7));
    CAPTURE(i);
    CAPTURE(mask);
    CAPTURE(dims_to_string(xd));
    TensorMap feeds = conv_grad_feeds(xd, wd, attrs, 900 + static_cast<uint64_t>(i) * 3);
    Compared r = check_same(conv_grad_node(mask, attrs), feeds, conv_grad_tol(feeds));
    CHECK(r.fallbacks == 0);
  }
}

TEST_CASE("cpu grad vs reference: ConvGrad at the Wide ResNet's layer shapes") {
  require_cpu_kernel("ConvGrad");
  struct Layer {
    int64_t n, c, m, hw, k;
    bool bias;
    int mask;
  };
  const Layer layers[] = {
      {4, 3, 16, 28, 3, false, 2},     // input conv: X is data, so dW only
      {4, 16, 160, 28, 3, false, 3},   // block 1
      {2, 160, 160, 28, 3, false, 3},  // blocks 1-2
      {4, 16, 160, 28, 1, true, 7},    // block 1 skip: 1x1 with bias
      {2, 160, 320, 14, 3, false, 3},  // block 3 (after MaxPool 2)
      {4, 160, 320, 14, 1, true, 7},   // block 3 skip
      {2, 320, 640, 7, 3, false, 3},   // block 5 (after MaxPool 2)
      {4, 320, 640, 7, 1, true, 7},    // block 5 skip
  };
  for (Layer l : layers) {
    l.n = test::sanitized(l.n, 1), l.hw = test::sanitized(l.hw, 8);  // the same channels, smaller images
    const int64_t p = l.k / 2;
    std::map<std::string, Attribute> attrs{{"pads", Attribute::of_ints({p, p, p, p})}};
    TensorMap feeds =
        conv_grad_feeds({l.n, l.c, l.hw, l.hw}, {l.m, l.c, l.k, l.k}, attrs, 900 + static_cast<uint64_t>(l.c));
    const std::string what = "ConvGrad " + std::to_string(l.c) + "->" + std::to_string(l.m) + " " +
                             std::to_string(l.k) + "x" + std::to_string(l.k) + " at " + std::to_string(l.hw) + "x" +
                             std::to_string(l.hw) + " batch " + std::to_string(l.n);
    CAPTURE(what);
    Compared r = check_same(conv_grad_node(l.mask, attrs), feeds, conv_grad_tol(feeds), /*timed=*/true);
    CHECK(r.fallbacks == 0);
    report(what, r);
  }
}

TEST_CASE("cpu grad vs reference: fp64 ConvGrad and BatchNormalizationGrad run the reference kernel") {
  require_cpu_kernel("ConvGrad");
  require_cpu_kernel("BatchNormalizationGrad");
  std::map<std::string, Attribute> attrs{{"pads", Attribute::of_ints({1, 1, 1, 1})}};
  TensorMap f{{"dy", random_tensor(DataType::Float64, {1, 3, 5, 5}, 1)},
              {"x", random_tensor(DataType::Float64, {1, 2, 5, 5}, 2)},
              {"w", random_tensor(DataType::Float64, {3, 2, 3, 3}, 3)}};
  Compared r = check_same(conv_grad_node(7, attrs), f, [](const std::string&) { return OutTol{0, 0}; });
  CHECK(r.fallbacks == 1);
  TensorMap b{{"dy", random_tensor(DataType::Float64, {2, 3, 4}, 4)},
              {"x", random_tensor(DataType::Float64, {2, 3, 4}, 5)},
              {"scale", random_tensor(DataType::Float64, {3}, 6)}};
  r = check_same(bn_grad_node(7, 1e-5f), b, [](const std::string&) { return OutTol{0, 0}; });
  CHECK(r.fallbacks == 1);
}

TEST_CASE("cpu grad vs reference: BatchNormalizationGrad, random shapes and requested outputs") {
  require_cpu_kernel("BatchNormalizationGrad");
  std::mt19937_64 rng(99);
  for (int i = 0; i < 20; ++i) {
    const int64_t rank = pick(rng, 2, 6);
    std::vector<int64_t> dims{pick(rng, 1, 4), pick(rng, 1, 9)};
    while (static_cast<int64_t>(dims.size()) < rank) dims.push_back(pick(rng, 1, rank > 4 ? 3 : 7));
    if (element_count(dims) / dims[1] == 1) dims[0] = 2;  // a batch statistic needs > 1 value
    const int mask = static_cast<int>(pick(rng, 1, 7));
    const float eps = i % 3 == 0 ? 1e-3f : 1e-5f;
    CAPTURE(i);
    CAPTURE(dims_to_string(dims));
    CAPTURE(mask);
    CHECK(check_bn_grad(dims, mask, eps, 700 + static_cast<uint64_t>(i) * 3).fallbacks == 0);
  }
}

TEST_CASE("cpu grad vs reference: BatchNormalizationGrad with the forward's saved statistics") {
  // The cpu forward (ops/norm_cpu.cpp, oneDNN with batch_stats) writes saved_mean/saved_var;
  // the cpu backward given them must equal its recompute form bit for bit (both hand the
  // primitive batch_stats' values) and the reference within the reduction bound. Single
  // node graphs: every tensor is row-major at the graph's edges, so this is the Plain
  // layout; on AVX-512 the Wide ResNet's training steps run the Blocked16c one.
  require_cpu_kernel("BatchNormalizationGrad");
  std::mt19937_64 rng(131);
  for (int i = 0; i < 12; ++i) {
    const int64_t rank = pick(rng, 2, 5);
    std::vector<int64_t> dims{pick(rng, 1, 4), i == 0 ? 32 : pick(rng, 1, 9)};
    while (static_cast<int64_t>(dims.size()) < rank) dims.push_back(pick(rng, 1, 7));
    // At least 16 values a channel: with 2 or 3, dX is almost all cancellation (exactly 0
    // for M = 2 and eps = 0), and there the saved statistics' float rounding, which the
    // reference carries through its double arithmetic, is larger than the bound.
    while (element_count(dims) / dims[1] < 16) dims[0] *= 2;
    const int mask = static_cast<int>(pick(rng, 1, 7));
    CAPTURE(i);
    CAPTURE(dims_to_string(dims));
    CAPTURE(mask);
    const uint64_t seed = 900 + static_cast<uint64_t>(i) * 7;
    const int64_t C = dims[1];
    // The forward's feeds, then the backward's (a graph takes no unused feeds).
    TensorMap feeds{{"x", rand_f32(dims, seed, -1.5, 2.5)},
                    {"scale", rand_f32({C}, seed + 1, 0.5, 1.5)},
                    {"b", rand_f32({C}, seed + 2)},
                    {"rm", rand_f32({C}, seed + 3)},
                    {"rv", rand_f32({C}, seed + 4, 0.5, 1.5)}};
    const TensorMap fwd =
        run_node(make_node("BatchNormalization", {"x", "scale", "b", "rm", "rv"},
                           {"y", "", "", "", "", "saved_mean", "saved_var"}, {{"training_mode", Attribute::of_int(1)}}),
                 feeds, "cpu");
    for (const char* unused : {"b", "rm", "rv"}) feeds.erase(unused);
    feeds["dy"] = rand_f32(dims, seed + 5);
    const TensorMap plain = feeds;
    feeds["saved_mean"] = fwd.at("saved_mean");
    feeds["saved_var"] = fwd.at("saved_var");
    Node saved = bn_grad_node(mask, 1e-5f);
    saved.inputs = {"dy", "x", "scale", "saved_mean", "saved_var"};
    const TensorMap with = run_node(saved, feeds, "cpu");
    const TensorMap without = run_node(bn_grad_node(mask, 1e-5f), plain, "cpu");
    for (const auto& [name, t] : with) {
      CAPTURE(name);
      CHECK(max_abs_diff(t, without.at(name)) == 0);
    }
    const int64_t reduction = feeds.at("x").numel() / C;
    CHECK(check_same(saved, feeds, [=](const std::string&) { return OutTol{0, 0, reduction}; }).fallbacks == 0);
  }
}

TEST_CASE("cpu grad vs reference: LayerNormalizationGrad, any axis and requested outputs") {
  require_cpu_kernel("LayerNormalizationGrad");
  std::mt19937_64 rng(107);
  for (int i = 0; i < 20; ++i) {
    std::vector<int64_t> dims;
    for (int64_t r = pick(rng, 1, 4); r > 0; --r) dims.push_back(pick(rng, 1, 9));
    if (i == 0) dims = {2, 197, 768};  // ViT-B/16's encoder at batch 2
    const int64_t rank = static_cast<int64_t>(dims.size());
    const int64_t axis = i == 0 ? -1 : pick(rng, -rank, rank - 1);
    const int mask = i == 0 ? 7 : static_cast<int>(pick(rng, 1, 7));
    CAPTURE(i);
    CAPTURE(dims_to_string(dims));
    CAPTURE(axis);
    CAPTURE(mask);
    CHECK(check_ln_grad(dims, axis, mask, 800 + static_cast<uint64_t>(i) * 3).fallbacks == 0);
  }
}

TEST_CASE("cpu grad vs reference: BatchNormalizationGrad at the Wide ResNet's shapes") {
  require_cpu_kernel("BatchNormalizationGrad");
  struct Bn {
    int64_t c, hw;
  };
  for (Bn b : {Bn{16, 28}, Bn{160, 28}, Bn{320, 14}, Bn{640, 7}}) {
    const std::string what = "BatchNormalizationGrad " + std::to_string(b.c) + " channels at " + std::to_string(b.hw) +
                             "x" + std::to_string(b.hw) + " batch 4";
    CAPTURE(what);
    Compared r = check_bn_grad({4, b.c, b.hw, b.hw}, 7, 1e-5f, 800 + static_cast<uint64_t>(b.c), /*timed=*/true);
    CHECK(r.fallbacks == 0);
    report(what + ", statistics recomputed", r);
    r = check_bn_grad({4, b.c, b.hw, b.hw}, 7, 1e-5f, 800 + static_cast<uint64_t>(b.c), /*timed=*/true,
                      /*saved=*/true);
    CHECK(r.fallbacks == 0);
    report(what + ", saved statistics", r);
  }
}

TEST_CASE("cpu grad vs reference: MaxPoolGrad, random windows and ties") {
  require_cpu_kernel("MaxPoolGrad");
  random_pool_grads("MaxPool", 11);
}

TEST_CASE("cpu grad vs reference: AveragePoolGrad, random windows") {
  require_cpu_kernel("AveragePoolGrad");
  random_pool_grads("AveragePool", 12);
}

TEST_CASE("cpu grad vs reference: pooling grads at the Wide ResNet's shapes") {
  require_cpu_kernel("MaxPoolGrad");
  require_cpu_kernel("AveragePoolGrad");
  const Attribute two = Attribute::of_ints({2, 2}), seven = Attribute::of_ints({7, 7});
  struct Case {
    const char* op;
    int64_t c, hw;
    Attribute k;
  };
  for (const Case& c : {Case{"MaxPool", 160, 28, two}, Case{"MaxPool", 320, 14, two},
                        Case{"AveragePool", 640, 8, seven}, Case{"AveragePool", 640, 7, seven}}) {
    const std::string what = std::string(c.op) + "Grad " + std::to_string(c.c) + " channels at " +
                             std::to_string(c.hw) + "x" + std::to_string(c.hw) + " batch 4";
    CAPTURE(what);
    Tensor x = rand_f32({4, c.c, c.hw, c.hw}, 60 + static_cast<uint64_t>(c.hw));
    // A quarter of X clamped to -0.5 (like a ReLU's zeros): MaxPool windows with ties.
    for (int64_t e = 0; e < x.numel(); ++e) x.data<float>()[e] = std::max(x.data<float>()[e], -0.5f);
    Compared r = check_pool_grad(c.op, x, {{"kernel_shape", c.k}, {"strides", c.k}}, 61, /*timed=*/true);
    CHECK(r.fallbacks == 0);
    report(what, r);
  }
}

// The Wide ResNet's CIFAR-100 head, AvgPool2d(7) on 8x8 (windows read the top-left 7x7),
// on the Blocked16c layout the cpu backend keeps on AVX-512: the forward copies the used
// sub-block dense and the backward writes it through one, both on oneDNN (the reference
// kernel ran both until then, about 9 % of the CIFAR-100 step at batch 64 on an AVX-512
// Xeon). Kernels called directly on blocked tensors, against the reference on row-major
// ones: Y within the sum's rounding, dX equal.
TEST_CASE("cpu vs reference: AveragePool and its gradient, 7 stride 7 on 8x8, Blocked16c") {
  require_cpu_kernel("AveragePoolGrad");
  const std::vector<int64_t> xd{3, 32, 8, 8}, yd{3, 32, 1, 1};
  const Attribute seven = Attribute::of_ints({7, 7});
  const Node fwd = make_node("AveragePool", {"x"}, {"y"}, {{"kernel_shape", seven}, {"strides", seven}});
  const Node bwd =
      make_node("AveragePoolGrad", {"dy", "x"}, {"dx"}, {{"kernel_shape", seven}, {"strides", seven}}, kTrainrtDomain);
  const Tensor x = rand_f32(xd, 71), dy = rand_f32(yd, 72);
  auto blocked = [](const Tensor& t) {
    Tensor b(t.dtype(), t.dims());
    b.set_layout(Layout::Blocked16c);
    copy_from_plain(t, b);
    return b;
  };
  const TensorMap ref_y = run_node(fwd, {{"x", x}}, "reference");
  const TensorMap ref_dx = run_node(bwd, {{"dy", dy}, {"x", x}}, "reference");
  const Tensor xb = blocked(x), dyb = blocked(dy);
  Tensor yb(DataType::Float32, yd), dxb(DataType::Float32, xd);
  yb.set_layout(Layout::Blocked16c);
  dxb.set_layout(Layout::Blocked16c);
  // dX's last row and column hold values before the call: the kernel must zero them.
  for (int64_t e = 0; e < dxb.numel(); ++e) dxb.data<float>()[e] = 7.f;
  const uint64_t before = dnnl_util::reference_fallbacks();
  {
    KernelContext c{fwd, {&xb}, {&yb}};
    make_backend("cpu")->kernel(fwd)(c);
  }
  {
    KernelContext c{bwd, {&dyb, &xb}, {&dxb}};
    make_backend("cpu")->kernel(bwd)(c);
  }
  CHECK(dnnl_util::reference_fallbacks() == before);  // both on oneDNN
  const Tensor y = to_plain(yb), dx = to_plain(dxb);
  CHECK(all_close(y, ref_y.at("y"), 1e-6, 1e-7));
  CHECK(max_abs_diff(dx, ref_dx.at("dx")) == 0);
}

// MaxPoolGrad's 2x2 stride-2 window on Blocked16c (the Wide ResNet's pools on AVX-512),
// the kernel called on blocked tensors: bit for bit the reference's on row-major ones,
// with ties (a quarter of X clamped, as after a ReLU), NaN in X, -0 in dY, and odd H and
// W (a last row and column no window reads), over two channel blocks.
TEST_CASE("cpu vs reference: MaxPoolGrad 2x2 stride 2 on Blocked16c, ties, NaN, -0 and odd sizes") {
  require_cpu_kernel("MaxPoolGrad");
  const Attribute two = Attribute::of_ints({2, 2});
  const Node bwd =
      make_node("MaxPoolGrad", {"dy", "x"}, {"dx"}, {{"kernel_shape", two}, {"strides", two}}, kTrainrtDomain);
  for (const std::vector<int64_t>& xd : {std::vector<int64_t>{2, 32, 8, 6}, std::vector<int64_t>{1, 16, 7, 5}}) {
    CAPTURE(dims_to_string(xd));
    const std::vector<int64_t> yd{xd[0], xd[1], xd[2] / 2, xd[3] / 2};
    Tensor x = rand_f32(xd, 81), dy = rand_f32(yd, 82);
    for (int64_t e = 0; e < x.numel(); ++e) x.data<float>()[e] = std::max(x.data<float>()[e], -0.5f);
    x.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();          // a NaN as a window's first tap
    x.data<float>()[xd[3] + 1] = std::numeric_limits<float>::quiet_NaN();  // and as its last
    for (int64_t e = 0; e < dy.numel(); e += 5) dy.data<float>()[e] = -0.f;
    auto blocked = [](const Tensor& t) {
      Tensor b(t.dtype(), t.dims());
      b.set_layout(Layout::Blocked16c);
      copy_from_plain(t, b);
      return b;
    };
    const TensorMap ref = run_node(bwd, {{"dy", dy}, {"x", x}}, "reference");
    const Tensor xb = blocked(x), dyb = blocked(dy);
    Tensor dxb(DataType::Float32, xd);
    dxb.set_layout(Layout::Blocked16c);
    for (int64_t e = 0; e < dxb.numel(); ++e) dxb.data<float>()[e] = 7.f;  // the kernel writes every element
    KernelContext c{bwd, {&dyb, &xb}, {&dxb}};
    make_backend("cpu")->kernel(bwd)(c);
    const Tensor dx = to_plain(dxb);
    CHECK(std::memcmp(dx.raw(), ref.at("dx").raw(), dx.nbytes()) == 0);
  }
}

TEST_CASE("cpu grad vs reference: GlobalAveragePoolGrad") {
  require_cpu_kernel("GlobalAveragePoolGrad");
  for (std::vector<int64_t> dims : {std::vector<int64_t>{2, 3, 5}, {4, 640, 7, 7}, {1, 2, 3, 4, 5}}) {
    CAPTURE(dims_to_string(dims));
    std::vector<int64_t> yd = dims;
    for (size_t i = 2; i < yd.size(); ++i) yd[i] = 1;
    TensorMap feeds{{"x", rand_f32(dims, 31)}, {"dy", rand_f32(yd, 32)}};
    Node n = make_node("GlobalAveragePoolGrad", {"dy", "x"}, {"dx"}, {}, kTrainrtDomain);
    CHECK(check_same(n, feeds, [](const std::string&) { return OutTol{1e-6, 0}; }).fallbacks == 0);
  }
}

TEST_CASE("cpu grad vs reference: GlobalMaxPoolGrad over 1, 2 and 3 spatial dims") {
  require_cpu_kernel("GlobalMaxPoolGrad");
  for (std::vector<int64_t> dims : {std::vector<int64_t>{2, 3, 5}, {2, 16, 7, 7}, {1, 2, 3, 4, 5}}) {
    CAPTURE(dims_to_string(dims));
    std::vector<int64_t> yd = dims;
    for (size_t i = 2; i < yd.size(); ++i) yd[i] = 1;
    TensorMap feeds{{"x", rand_f32(dims, 33)}, {"dy", rand_f32(yd, 34)}};
    Node n = make_node("GlobalMaxPoolGrad", {"dy", "x"}, {"dx"}, {}, kTrainrtDomain);
    CHECK(check_same(n, feeds, [](const std::string&) { return OutTol{0, 0, 0}; }).fallbacks == 0);
  }
}

// ReluGrad selects, it does not multiply: where Y is 0 the gradient is 0 whatever dY holds
// (NaN, Inf), and where Y > 0 it is dY itself, NaN included, on both backends.
TEST_CASE("cpu grad vs reference: ReluGrad selects dY (NaN and Inf where Y is 0 give 0)") {
  require_cpu_kernel("ReluGrad");
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // 64 values (a full vector and a tail on every ISA): dY cycles NaN, Inf, -Inf, 1.5;
  // Y cycles 0, 2 every four values.
  Tensor dy(DataType::Float32, {67}), y(DataType::Float32, {67});
  const float dys[4] = {nan, inf, -inf, 1.5f};
  for (int64_t e = 0; e < 67; ++e) {
    dy.data<float>()[e] = dys[e % 4];
    y.data<float>()[e] = (e / 4) % 2 == 0 ? 0.f : 2.f;
  }
  const Node n = make_node("ReluGrad", {"dy", "y"}, {"dx"}, {}, kTrainrtDomain);
  for (const std::string backend : {"reference", "cpu"}) {
    CAPTURE(backend);
    const Tensor dx = run_node(n, {{"dy", dy}, {"y", y}}, backend).at("dx");
    for (int64_t e = 0; e < 67; ++e) {
      CAPTURE(e);
      const float got = dx.data<float>()[e];
      if (y.data<float>()[e] == 0.f)
        CHECK(got == 0.f);
      else if (std::isnan(dys[e % 4]))
        CHECK(std::isnan(got));
      else
        CHECK(got == dys[e % 4]);
    }
  }
}

TEST_CASE("cpu grad vs reference: ReluGrad") {
  require_cpu_kernel("ReluGrad");
  std::mt19937_64 rng(5);
  for (int i = 0; i < 8; ++i) {
    std::vector<int64_t> dims;
    for (int64_t r = pick(rng, 0, 4); r > 0; --r) dims.push_back(pick(rng, 1, 9));
    Tensor y = rand_f32(dims, 40 + static_cast<uint64_t>(i));
    for (int64_t e = 0; e < y.numel(); ++e) y.data<float>()[e] = std::max(y.data<float>()[e], 0.f);  // Relu output
    TensorMap feeds{{"dy", rand_f32(dims, 50 + static_cast<uint64_t>(i))}, {"y", y}};
    Node n = make_node("ReluGrad", {"dy", "y"}, {"dx"}, {}, kTrainrtDomain);
    CAPTURE(dims_to_string(dims));
    CHECK(check_same(n, feeds, [](const std::string&) { return OutTol{1e-6, 0}; }).fallbacks == 0);
  }
  for (std::vector<int64_t> dims : {std::vector<int64_t>{4, 160, 28, 28}, {4, 640, 7, 7}}) {
    Tensor y = rand_f32(dims, 41);
    for (int64_t e = 0; e < y.numel(); ++e) y.data<float>()[e] = std::max(y.data<float>()[e], 0.f);
    TensorMap feeds{{"dy", rand_f32(dims, 51)}, {"y", y}};
    Node n = make_node("ReluGrad", {"dy", "y"}, {"dx"}, {}, kTrainrtDomain);
    Compared r = check_same(
        n, feeds,
        [](const std::string&) {
          return OutTol{1e-6, 0};
        },
        /*timed=*/true);
    CHECK(r.fallbacks == 0);
    report("ReluGrad " + dims_to_string(dims), r);
  }
}

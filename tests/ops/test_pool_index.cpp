// The cuda pooling kernels' per-element functions (ops/core/pool_index.h), run on the
// host for every element of several shapes, NCHW and NHWC, in int32_t and int64_t index
// math, general and tiled (kernel == stride) windows, against the reference backend's
// MaxPool, AveragePool (dilated too) and their gradients, and GlobalMaxPool's merged plane
// maxima against its reference: what the GPU computes, element by element.
//
// The values are small integers (many tied maxima) and dY multiples of 1/4, so every sum
// is exact whatever its order and the comparisons are bit for bit, except
// AveragePoolGrad's sums of dY / divisor over overlapping windows (1e-12).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "ops/core/channels_last.h"
#include "ops/core/pool_index.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;
using namespace trainrt::pool_index;

namespace {

struct Case {
  const char* what;
  std::vector<int64_t> dims;  // N,C,spatial...
  std::vector<int64_t> k = {}, s = {}, pads = {}, dil = {};
  bool ceil = false, include_pad = false;
};

// Integers in [-2, 2] (x: ties in most windows) or quarters in [-2, 2] (dy).
Tensor small_values(std::vector<int64_t> dims, uint64_t seed, double unit) {
  Tensor t(DataType::Float64, std::move(dims));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> d(-8, 8);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = unit * (unit == 1 ? d(rng) / 4 : d(rng));
  return t;
}

Node pool_node(const Case& c, const char* op, const char* domain, std::vector<std::string> in,
               std::vector<std::string> out) {
  std::map<std::string, Attribute> a{{"kernel_shape", Attribute::of_ints(c.k)}};
  if (!c.s.empty()) a["strides"] = Attribute::of_ints(c.s);
  if (!c.pads.empty()) a["pads"] = Attribute::of_ints(c.pads);
  if (!c.dil.empty()) a["dilations"] = Attribute::of_ints(c.dil);
  if (c.ceil) a["ceil_mode"] = Attribute::of_int(1);
  if (c.include_pad && std::string(op).rfind("Average", 0) == 0) a["count_include_pad"] = Attribute::of_int(1);
  return make_node(op, std::move(in), std::move(out), a, domain);
}

// A row-major N,C,H,W tensor's values in storage order: Plain, or NHWC.
std::vector<double> stored(const Tensor& t, bool nhwc) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  const int64_t N = t.dims()[0], C = t.dims()[1], HW = t.numel() / (N * C);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t s = 0; s < HW; ++s) {
        const int64_t plain = (n * C + c) * HW + s, to = nhwc ? (n * HW + s) * C + c : plain;
        v[static_cast<size_t>(to)] = t.data<double>()[plain];
      }
  return v;
}
// Storage offset `o` of a tensor shaped like t, stored NHWC or Plain, as its row-major index.
int64_t plain_of(const Tensor& t, int64_t o, bool nhwc) {
  const int64_t C = t.dims()[1], HW = t.numel() / (t.dims()[0] * C);
  return nhwc ? channels_last::plain_index(o, C, HW) : o;
}

template <typename I>
Lay<I> lay(const Tensor& t, bool nhwc) {
  return nhwc ? Lay<I>{static_cast<I>(t.dims()[1]), true} : Lay<I>{};
}

// Differences of every element of one layout/index-type combination from the reference.
struct Diffs {
  int64_t y = 0, idx = 0, avg = 0, max_grad = 0, avg_grad = 0, tiled = 0;
  double avg_grad_err = 0;
};

template <typename I, typename A>
Diffs compare(const Case& c, const Pool3& g64, const TensorMap& ref, bool x_nhwc, bool y_nhwc) {
  const PoolDims<I> g = index_dims<I>(g64);
  const Tensor &x = ref.at("x"), &y = ref.at("y"), &dy = ref.at("dy");
  const std::vector<double> xs = stored(x, x_nhwc), dys = stored(dy, y_nhwc);
  const Lay<I> lx = lay<I>(x, x_nhwc), ly = lay<I>(y, y_nhwc);
  const bool tiled = is_tiled(g64);
  Diffs d;
  std::vector<double> ys(static_cast<size_t>(y.numel()));
  std::vector<int64_t> idx(static_cast<size_t>(y.numel()), -7);
  std::vector<A> arg(static_cast<size_t>(y.numel()));
  for (I o = 0; o < static_cast<I>(y.numel()); ++o) {
    maxpool_at(g, lx, ly, xs.data(), o, -1e300, false, ys.data(), idx.data());
    arg[static_cast<size_t>(o)] = argmax_tap_at<A>(g, lx, ly, xs.data(), o);
  }
  for (int64_t o = 0; o < y.numel(); ++o) {
    const int64_t p = plain_of(y, o, y_nhwc);
    d.y += ys[static_cast<size_t>(o)] != ref.at("y").data<double>()[p];
    d.idx += idx[static_cast<size_t>(p)] != ref.at("i").data<int64_t>()[p];  // Indices stay Plain
  }
  const auto dxs = [&](auto&& at) {
    int64_t wrong = 0;
    for (I i = 0; i < static_cast<I>(x.numel()); ++i) wrong += at(i, plain_of(x, i, x_nhwc));
    return wrong;
  };
  d.max_grad = dxs([&](I i, int64_t p) {
    const double v = tiled ? maxpool_grad_at<true>(g, ly, lx, dys.data(), arg.data(), i)
                           : maxpool_grad_at<false>(g, ly, lx, dys.data(), arg.data(), i);
    return std::signbit(v) != std::signbit(ref.at("dx_max").data<double>()[p]) ||
           v != ref.at("dx_max").data<double>()[p];
  });
  if (tiled)  // the fast path equals the general one, element for element
    d.tiled = dxs([&](I i, int64_t) {
      const double a = maxpool_grad_at<true>(g, ly, lx, dys.data(), arg.data(), i);
      const double b = maxpool_grad_at<false>(g, ly, lx, dys.data(), arg.data(), i);
      const double e = averagepool_grad_at<true>(g, ly, lx, dys.data(), i, c.include_pad);
      const double f = averagepool_grad_at<false>(g, ly, lx, dys.data(), i, c.include_pad);
      return a != b || std::signbit(a) != std::signbit(b) || e != f;
    });
  for (I o = 0; o < static_cast<I>(y.numel()); ++o)
    d.avg += averagepool_at(g, lx, ly, xs.data(), o, c.include_pad) !=
             ref.at("y_avg").data<double>()[plain_of(y, o, y_nhwc)];
  d.avg_grad = dxs([&](I i, int64_t p) {
    const double v = tiled ? averagepool_grad_at<true>(g, ly, lx, dys.data(), i, c.include_pad)
                           : averagepool_grad_at<false>(g, ly, lx, dys.data(), i, c.include_pad);
    const double r = ref.at("dx_avg").data<double>()[p], e = std::fabs(v - r);
    d.avg_grad_err = std::max(d.avg_grad_err, e);
    return tiled ? v != r : e > 1e-12;
  });
  return d;
}

const std::vector<Case> kCases = {
    {"Wide ResNet MaxPool 2 (32x32)", {2, 3, 32, 32}, {2, 2}, {2, 2}},
    {"Wide ResNet AveragePool 7 on 8x8 (top-left window)", {2, 5, 8, 8}, {7, 7}, {7, 7}},
    {"AveragePool 7 on 7x7 (global)", {2, 3, 7, 7}, {7, 7}, {7, 7}},
    {"k2 s2 ceil_mode on 7x7 (tiled, partial last window)", {2, 3, 7, 7}, {2, 2}, {2, 2}, {}, {}, true},
    {"k2 s2 pads 1 (kernel == stride, padded: not tiled)", {2, 3, 7, 8}, {2, 2}, {2, 2}, {1, 1, 1, 1}},
    {"k3 s2 pads 1 (overlapping)", {2, 3, 7, 9}, {3, 3}, {2, 2}, {1, 1, 1, 1}},
    {"k3 s2 pads 1 count_include_pad", {1, 4, 9, 7}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {}, false, true},
    {"k3 s2 ceil_mode (overlap, ceil)", {2, 3, 8, 8}, {3, 3}, {2, 2}, {}, {}, true},
    {"k2x3 s1x2 pads 1,0,0,1 include_pad ceil", {2, 2, 6, 7}, {2, 3}, {1, 2}, {1, 0, 0, 1}, {}, true, true},
    {"k3 s1 dilation 2 pads 2", {1, 3, 6, 6}, {3, 3}, {1, 1}, {2, 2, 2, 2}, {2, 2}},
    {"k3 s1 dilation 2 pads 2 count_include_pad", {1, 3, 6, 6}, {3, 3}, {1, 1}, {2, 2, 2, 2}, {2, 2}, false, true},
    {"k2 s2 dilation 2 (not tiled)", {1, 2, 9, 9}, {2, 2}, {2, 2}, {}, {2, 2}},
    {"k3 s2 dilation 2 pads 1 ceil include_pad (taps past the end pad)",
     {2, 3, 9, 8},
     {3, 3},
     {2, 2},
     {1, 1, 1, 1},
     {2, 2},
     true,
     true},
    {"k3 s2 dilation 2 pads 1 ceil", {2, 3, 9, 8}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {2, 2}, true},
    {"3-D dilations 1,2,3 pads", {1, 2, 5, 6, 8}, {2, 2, 2}, {1, 2, 2}, {1, 0, 1, 0, 1, 1}, {1, 2, 3}, false, true},
    {"1-D k2 dilation 3 pad 1 ceil include_pad", {2, 3, 11}, {2}, {2}, {1, 1}, {3}, true, true},
    {"17x17 window (int32 argmax)", {1, 2, 20, 20}, {17, 17}, {3, 3}, {1, 1, 1, 1}},
    {"3-D k2 s2", {1, 2, 4, 6, 4}, {2, 2, 2}, {2, 2, 2}},
    {"1-D k3 s2 pad 1 ceil", {2, 3, 10}, {3}, {2}, {1, 1}, {}, true},
};

}  // namespace

TEST_CASE("pool index: the cuda kernels' per-element functions equal the reference pooling") {
  int64_t checked = 0;
  for (const Case& c : kCases) {
    const std::string what = c.what;
    CAPTURE(what);
    const Tensor x = small_values(c.dims, 7, 1.0);
    TensorMap ref = run_node(pool_node(c, "MaxPool", "", {"x"}, {"y", "i"}), {{"x", x}}, "reference");
    ref["x"] = x;
    ref["dy"] = small_values(ref.at("y").dims(), 8, 0.25);
    ref["dx_max"] = run_node(pool_node(c, "MaxPoolGrad", kTrainrtDomain, {"dy", "x"}, {"dx"}),
                             {{"dy", ref.at("dy")}, {"x", x}}, "reference")
                        .at("dx");
    ref["y_avg"] = run_node(pool_node(c, "AveragePool", "", {"x"}, {"y"}), {{"x", x}}, "reference").at("y");
    ref["dx_avg"] = run_node(pool_node(c, "AveragePoolGrad", kTrainrtDomain, {"dy", "x"}, {"dx"}),
                             {{"dy", ref.at("dy")}, {"x", x}}, "reference")
                        .at("dx");
    const Pool3 g = pool_geometry(pool_node(c, "MaxPool", "", {"x"}, {"y"}), x, ref.at("y"));
    CHECK(fits_int32(g));
    CHECK(argmax_bytes(g) == (c.k.size() == 2 && c.k[0] == 17 ? 4u : 1u));
    CHECK(argmax_scratch_bytes(g) == static_cast<size_t>(ref.at("y").numel()) * argmax_bytes(g));
    const bool rank4 = c.dims.size() == 4;
    for (const bool x_nhwc : {false, true})
      for (const bool y_nhwc : {false, true}) {
        if (!rank4 && (x_nhwc || y_nhwc)) continue;
        CAPTURE(x_nhwc);
        CAPTURE(y_nhwc);
        const auto all = [&](const Diffs& d) {
          CHECK(d.y == 0);
          CHECK(d.idx == 0);
          CHECK(d.max_grad == 0);
          CHECK(d.tiled == 0);
          CHECK(d.avg == 0);
          CHECK(d.avg_grad == 0);
          ++checked;
        };
        if (argmax_bytes(g) == 1) {
          all(compare<int32_t, uint8_t>(c, g, ref, x_nhwc, y_nhwc));
          all(compare<int64_t, uint8_t>(c, g, ref, x_nhwc, y_nhwc));
        }
        all(compare<int32_t, int32_t>(c, g, ref, x_nhwc, y_nhwc));
        all(compare<int64_t, int32_t>(c, g, ref, x_nhwc, y_nhwc));
      }
  }
  CHECK(checked > 100);
}

TEST_CASE("pool index: tiled windows are exactly the kernel == stride, unpadded, undilated ones") {
  Pool3 g;
  g.planes = 4;
  g.in[1] = g.in[2] = 32;
  g.out[1] = g.out[2] = 16;
  g.k[1] = g.k[2] = g.s[1] = g.s[2] = 2;
  CHECK(is_tiled(g));
  Pool3 p = g;
  p.pe[2] = 1;
  CHECK(!is_tiled(p));
  p = g;
  p.d[1] = 2;
  CHECK(!is_tiled(p));
  p = g;
  p.s[2] = 1;
  CHECK(!is_tiled(p));
  // Every element's windows, tiled and general, in int32: the same (od, oh, ow, tap).
  const PoolDims<int32_t> gi = index_dims<int32_t>(g);
  int64_t wrong = 0;
  for (int32_t h = 0; h < 32; ++h)
    for (int32_t w = 0; w < 32; ++w) {
      std::vector<int32_t> a, b;
      for_windows_of<true>(gi, int32_t{0}, h, w, [&](int32_t od, int32_t oh, int32_t ow, int32_t tap) {
        a.insert(a.end(), {od, oh, ow, tap});
      });
      for_windows_of<false>(gi, int32_t{0}, h, w, [&](int32_t od, int32_t oh, int32_t ow, int32_t tap) {
        b.insert(b.end(), {od, oh, ow, tap});
      });
      wrong += a != b || a.size() != 4;
    }
  CHECK(wrong == 0);
}

TEST_CASE("pool index: int32 index math only where every index fits") {
  Pool3 g;
  g.in[1] = g.in[2] = 32;
  g.out[1] = g.out[2] = 16;
  g.planes = 1024 * 16;  // the Wide ResNet's first MaxPool at batch 1024 (16.8M elements)
  CHECK(fits_int32(g));
  g.planes = 1024 * 640;  // 671M elements: still fits
  CHECK(fits_int32(g));
  g.planes = 4LL * 1024 * 640;  // 2.7G elements: int64_t
  CHECK(!fits_int32(g));
  g.planes = (std::numeric_limits<int32_t>::max() - 65535LL * 1024) / 1024;
  CHECK(fits_int32(g));
  g.planes += 1;
  CHECK(!fits_int32(g));
  // MaxPoolGrad's scratch: one byte a window up to 256 taps, four beyond.
  g.planes = 10;
  g.k[1] = g.k[2] = 16;
  CHECK(argmax_bytes(g) == 1);
  CHECK(argmax_scratch_bytes(g) == 10u * 256u);
  g.k[2] = 17;
  CHECK(argmax_bytes(g) == 4);
  CHECK(argmax_scratch_bytes(g) == 10u * 256u * 4u);
}

TEST_CASE("pool index: split is channels_last::plane_of's inverse of offset_of, in int32") {
  const int32_t dims[3] = {1, 5, 3};
  const int64_t size = 15, C = 6, planes = 2 * C;
  int64_t wrong = 0;
  for (const bool last : {false, true}) {
    const channels_last::Planes l64{C, last};
    const Lay<int32_t> l32{static_cast<int32_t>(C), last};
    for (int64_t o = 0; o < planes * size; ++o) {
      int64_t p = 0, pos = 0;
      channels_last::plane_of(l64, o, size, &p, &pos);
      const At<int32_t> t = split(static_cast<int32_t>(o), dims, l32);
      wrong += t.p != p || t.pos != pos || (t.a * 5 + t.b) * 3 + t.c != pos ||
               offset_of(l32, t.p, t.pos, static_cast<int32_t>(size)) != o;
    }
  }
  CHECK(wrong == 0);
}

namespace {

// GlobalMaxPool's plane maximum as the cuda kernels find it: `threads` partial scans
// (thread t: positions t, t + threads, ...), merged pairwise in halves as a block does
// (threads a power of 2) or one after another from the last (otherwise), in a plane whose
// positions are `step` apart.
int64_t merged_plane_max(const double* plane, int64_t size, int64_t threads, int64_t step) {
  std::vector<PlaneMax<double, int64_t>> part;
  for (int64_t t = 0; t < threads; ++t) part.push_back(plane_max_scan(plane, size, t, threads, step));
  if ((threads & (threads - 1)) == 0) {
    for (int64_t half = threads / 2; half > 0; half /= 2)
      for (int64_t t = 0; t < half; ++t) plane_max_merge(part[t], part[t + half]);
  } else {
    for (int64_t t = threads - 2; t >= 0; --t) plane_max_merge(part[t], part[t + 1]);
  }
  return plane_max_pos(plane, part[0]);
}

}  // namespace

TEST_CASE("pool index: GlobalMaxPool's merged partial maxima are the reference's first maximum") {
  // NaN-free planes of small integers (ties in every plane), NCHW and NHWC, against the
  // reference backend's GlobalMaxPool and the position its gradient writes dY to.
  const Tensor x = small_values({2, 5, 7, 9}, 11, 1.0);
  const TensorMap ref = run_node(make_node("GlobalMaxPool", {"x"}, {"y"}), {{"x", x}}, "reference");
  Tensor dy(DataType::Float64, {2, 5, 1, 1});
  for (int64_t i = 0; i < dy.numel(); ++i) dy.data<double>()[i] = 1.0;
  const Tensor dx = run_node(make_node("GlobalMaxPoolGrad", {"dy", "x"}, {"dx"}, {}, kTrainrtDomain),
                             {{"dy", dy}, {"x", x}}, "reference")
                        .at("dx");
  const int64_t planes = 10, size = 63;
  int64_t wrong = 0, checked = 0;
  for (const bool nhwc : {false, true}) {
    const std::vector<double> xs = stored(x, nhwc);
    const Lay<int64_t> l = lay<int64_t>(x, nhwc);
    for (int64_t p = 0; p < planes; ++p) {
      int64_t expect = -1;
      for (int64_t i = 0; i < size; ++i)
        if (dx.data<double>()[p * size + i] != 0) expect = i;
      REQUIRE(expect >= 0);
      const double* plane = xs.data() + offset_of(l, p, int64_t{0}, size);
      for (const int64_t threads : {1, 2, 3, 7, 32, 64, 256}) {
        const int64_t at = merged_plane_max(plane, size, threads, plane_step(l));
        wrong += at != expect || plane[at * plane_step(l)] != ref.at("y").data<double>()[p];
        ++checked;
      }
    }
  }
  CHECK(wrong == 0);
  CHECK(checked == 140);

  // NaNs, by the reference's rule (a NaN never compares greater): a leading NaN keeps
  // position 0, later ones are passed over; -0 and 0 tie (the first wins).
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Plane {
    std::vector<double> v;
    int64_t at;
  };
  const std::vector<Plane> hand = {
      {{nan, 5, 7, 7}, 0},  {{1, nan, 3, nan, 3}, 2},        {{nan, nan, nan}, 0},
      {{-0.0, 0.0, -1}, 0}, {{-3, nan, -3, -2, nan, -2}, 3}, {{4}, 0},
  };
  for (const Plane& h : hand)
    for (const int64_t threads : {1, 2, 3, 4, 256}) {
      CAPTURE(threads);
      CHECK(merged_plane_max(h.v.data(), static_cast<int64_t>(h.v.size()), threads, 1) == h.at);
    }
}

// The ChannelsLast index arithmetic the cuda kernels run per element
// (ops/core/channels_last.h, compiled for host and device), checked on the host against
// the layout's definition (graph/tensor.h storage_to_plain_index, to_plain) and against
// plain loops: Dropout's row-major mask index (and its walk), the channel walk of the per-channel
// kernels, the pools' plane/position split, the convolution's zero padding and cropping.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "graph/tensor.h"
#include "ops/core/channels_last.h"

using namespace trainrt;
namespace cl = trainrt::channels_last;

TEST_CASE("channels_last::plain_index is storage_to_plain_index, and a permutation") {
  for (const std::vector<int64_t>& d : {std::vector<int64_t>{2, 3, 4, 5}, {1, 16, 7, 7}, {3, 5, 1, 2}}) {
    CAPTURE(dims_to_string(d));
    const int64_t n = element_count(d), hw = d[2] * d[3];
    std::vector<char> hit(static_cast<size_t>(n), 0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t at = cl::plain_index(i, d[1], hw);
      REQUIRE(at == storage_to_plain_index(Layout::ChannelsLast, d, i));
      REQUIRE(at >= 0);
      REQUIRE(at < n);
      hit[static_cast<size_t>(at)] = 1;
    }
    for (char h : hit) CHECK(h == 1);
  }
}

TEST_CASE("ChannelWalk carries i % C without a division, for any start, stride and channel count") {
  for (int64_t C : {1, 3, 4, 16, 640})
    for (int64_t start : {0, 1, 5, 255})
      for (int64_t stride : {1, 7, 256, 256 * 1024, 65535 * 256}) {
        CAPTURE(C);
        CAPTURE(start);
        CAPTURE(stride);
        int64_t steps = 0;
        for (cl::ChannelWalk w(start, stride, C); steps < 1000; w.next(), ++steps) REQUIRE(w.channel == w.index % C);
      }
}

TEST_CASE("PlainWalk carries plain_index without a division, for any start, stride, channels and positions") {
  for (int64_t C : {1, 3, 16, 160})
    for (int64_t hw : {1, 5, 64, 1024})
      for (int64_t start : {0, 1, 7, 255})
        for (int64_t stride : {1, 3, 256, 256 * 1024, 65535 * 256}) {
          CAPTURE(C);
          CAPTURE(hw);
          CAPTURE(start);
          CAPTURE(stride);
          cl::PlainWalk w(start, stride, C, hw);
          for (int steps = 0; steps < 500; w.next(stride), ++steps) {
            REQUIRE(w.index == start + steps * stride);
            REQUIRE(w.plain() == cl::plain_index(w.index, C, hw));
          }
        }
}

TEST_CASE("Planes: plane_of inverts offset_of in both layouts; ChannelsLast offsets are the NHWC ones") {
  const int64_t N = 2, C = 3, size = 12;  // 3x4 planes
  const std::vector<int64_t> dims{N, C, 3, 4};
  for (bool last : {false, true}) {
    CAPTURE(last);
    const cl::Planes l{C, last};
    CHECK(cl::plane_step(l) == (last ? C : 1));
    for (int64_t p = 0; p < N * C; ++p)
      for (int64_t pos = 0; pos < size; ++pos) {
        const int64_t o = cl::offset_of(l, p, pos, size);
        // The element (n, c, pos) is stored at o in this layout.
        REQUIRE(storage_to_plain_index(last ? Layout::ChannelsLast : Layout::Plain, dims, o) == p * size + pos);
        int64_t p2 = -1, pos2 = -1;
        cl::plane_of(l, o, size, &p2, &pos2);
        REQUIRE(p2 == p);
        REQUIRE(pos2 == pos);
        if (pos > 0) REQUIRE(o - cl::offset_of(l, p, pos - 1, size) == cl::plane_step(l));
      }
  }
}

TEST_CASE("padding and cropping planes, in both layouts and across a change of layout") {
  // Every pair of layouts: the copy, read back as Plain, is the row-major padding of x;
  // cropping it into x's layout gives x back; with equal layouts relaid_padded_source and
  // relaid_cropped_source give padded_source's and cropped_source's offsets.
  struct Geometry {
    int64_t h, w, top, left, bottom, right;
  };
  for (const Geometry& g : {Geometry{2, 3, 1, 2, 1, 0}, Geometry{3, 2, 2, 1, 0, 2}}) {
    const int64_t N = 2, C = 3, h = g.h, w = g.w, top = g.top, left = g.left;
    const int64_t hp = h + top + g.bottom, wp = w + left + g.right;
    const std::vector<int64_t> xd{N, C, h, w}, pd{N, C, hp, wp};
    for (bool x_last : {false, true})
      for (bool p_last : {false, true}) {
        CAPTURE(x_last);
        CAPTURE(p_last);
        const Layout xl = x_last ? Layout::ChannelsLast : Layout::Plain,
                     pl = p_last ? Layout::ChannelsLast : Layout::Plain;
        const cl::Planes xs{C, x_last}, ps{C, p_last};
        Tensor x(DataType::Float32, xd);
        x.set_layout(xl);
        for (int64_t i = 0; i < x.numel(); ++i)
          x.data<float>()[i] = static_cast<float>(storage_to_plain_index(xl, xd, i) + 1);
        Tensor xp(DataType::Float32, pd);
        xp.set_layout(pl);
        for (int64_t i = 0; i < xp.numel(); ++i) {
          const int64_t from = cl::relaid_padded_source(i, h, w, hp, wp, top, left, xs, ps);
          if (x_last == p_last) REQUIRE(from == cl::padded_source(i, h, w, hp, wp, top, left, x_last ? C : 1));
          xp.data<float>()[i] = from >= 0 ? x.data<float>()[from] : 0.f;
        }
        const Tensor padded = to_plain(xp);
        for (int64_t n = 0; n < N; ++n)
          for (int64_t c = 0; c < C; ++c)
            for (int64_t r = 0; r < hp; ++r)
              for (int64_t q = 0; q < wp; ++q) {
                const bool inside = r >= top && r < top + h && q >= left && q < left + w;
                const float want = inside ? static_cast<float>(((n * C + c) * h + r - top) * w + q - left + 1) : 0.f;
                REQUIRE(padded.data<float>()[((n * C + c) * hp + r) * wp + q] == want);
              }
        Tensor back(DataType::Float32, xd);
        back.set_layout(xl);
        for (int64_t i = 0; i < back.numel(); ++i) {
          const int64_t from = cl::relaid_cropped_source(i, h, w, hp, wp, top, left, xs, ps);
          if (x_last == p_last) REQUIRE(from == cl::cropped_source(i, h, w, hp, wp, top, left, x_last ? C : 1));
          back.data<float>()[i] = xp.data<float>()[from];
        }
        CHECK(std::memcmp(back.raw(), x.raw(), x.nbytes()) == 0);
      }
  }
}

TEST_CASE("KCRS <-> KRSC: relayout_source transposes filters as a naive loop does, both ways") {
  // Filters K, C/G, R, S: odd sizes, 1x1, a grouped convolution's (C/G = 2) and a
  // depthwise one's (C/G = 1), and an activation-like shape.
  for (const std::vector<int64_t>& d :
       {std::vector<int64_t>{3, 5, 3, 3}, {16, 8, 1, 1}, {8, 2, 3, 3}, {16, 1, 3, 3}, {7, 3, 5, 2}, {2, 3, 4, 5}}) {
    CAPTURE(dims_to_string(d));
    const int64_t K = d[0], C = d[1], R = d[2], S = d[3], hw = R * S, n = element_count(d);
    std::vector<float> kcrs(static_cast<size_t>(n)), krsc(static_cast<size_t>(n)), via(static_cast<size_t>(n)),
        back(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) kcrs[static_cast<size_t>(i)] = static_cast<float>(i) * 0.5f - 3.f;
    for (int64_t k = 0; k < K; ++k)  // the definition: w[k][c][r][s] at ((k*R + r)*S + s)*C + c
      for (int64_t c = 0; c < C; ++c)
        for (int64_t r = 0; r < R; ++r)
          for (int64_t s = 0; s < S; ++s)
            krsc[static_cast<size_t>(((k * R + r) * S + s) * C + c)] =
                kcrs[static_cast<size_t>(((k * C + c) * R + r) * S + s)];
    for (int64_t i = 0; i < n; ++i) {  // what the cuda Identity kernel runs per element
      via[static_cast<size_t>(i)] = kcrs[static_cast<size_t>(cl::relayout_source(i, C, hw, false, true))];
      REQUIRE(cl::last_index(cl::plain_index(i, C, hw), C, hw) == i);
    }
    CHECK(via == krsc);
    for (int64_t i = 0; i < n; ++i)
      back[static_cast<size_t>(i)] = via[static_cast<size_t>(cl::relayout_source(i, C, hw, true, false))];
    CHECK(back == kcrs);
    for (bool last : {false, true})  // the same layout: a copy
      for (int64_t i = 0; i < n; ++i) REQUIRE(cl::relayout_source(i, C, hw, last, last) == i);
    // The layout's definition (what the stand-in's conversions use) stores it so too.
    Tensor plain(DataType::Float32, d);
    std::memcpy(plain.raw(), kcrs.data(), kcrs.size() * sizeof(float));
    Tensor stored(DataType::Float32, d);
    stored.set_layout(Layout::ChannelsLast);
    copy_from_plain(plain, stored);
    CHECK(std::memcmp(stored.raw(), krsc.data(), krsc.size() * sizeof(float)) == 0);
    // 1x1 and depthwise filters are the same bytes in both orders: no copy needed.
    CHECK(layout_fits(Layout::ChannelsLast, d) == (krsc != kcrs));
  }
}

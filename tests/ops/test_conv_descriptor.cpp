// ops/core/conv_descriptor.h: the dims and strides the cuda convolutions give cuDNN's
// N-d descriptors for a 3-D convolution, and the zero-padded copy of its input. Checked
// against the reference kernel's indexing (ops/conv.cpp: row-major N,C,D,H,W tensors and
// M,Cg,kT,kR,kS filters), against channels_last::last_index for the channels-last strides,
// against the 4-d values the 2-D path passes cuDNN today, and the padded copy against a
// direct loop and against the reference Conv (an explicitly padded copy convolved with
// zero pads equals the convolution with the pads).
#include <doctest/doctest.h>

#include "ops/core/channels_last.h"
#include "ops/core/conv_descriptor.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;
namespace cd = trainrt::conv_descriptor;

namespace {

// The offset a descriptor's strides give the element at index idx.
int64_t offset(const cd::NdDims& t, const std::vector<int64_t>& idx) {
  int64_t o = 0;
  for (size_t i = 0; i < idx.size(); ++i) o += idx[i] * t.strides[i];
  return o;
}

// Every index of dims d, row-major order.
template <typename F>
void for_each_index(const std::vector<int64_t>& d, F&& f) {
  std::vector<int64_t> idx(d.size(), 0);
  const int64_t count = element_count(d);
  for (int64_t q = 0; q < count; ++q) {
    f(q, idx);
    for (size_t k = d.size(); k-- > 0;) {
      if (++idx[k] < d[k]) break;
      idx[k] = 0;
    }
  }
}

}  // namespace

TEST_CASE("conv_descriptor: NCDHW and NDHWC strides index a 5-D tensor as the reference and last_index do") {
  const std::vector<int64_t> x{2, 3, 4, 5, 6};
  const cd::NdDims plain = cd::tensor_nd(x, false), last = cd::tensor_nd(x, true);
  REQUIRE(plain.ok);
  REQUIRE(last.ok);
  CHECK(plain.rank == 5);
  for (int i = 0; i < 5; ++i) CHECK(plain.dims[i] == x[static_cast<size_t>(i)]);
  for (int i = 0; i < 5; ++i) CHECK(last.dims[i] == x[static_cast<size_t>(i)]);
  const int64_t C = x[1], dhw = x[2] * x[3] * x[4];
  for_each_index(x, [&](int64_t q, const std::vector<int64_t>& idx) {
    // The reference reads x[((n*C + c)*D + d)*H*W + h*W + w]: the row-major index q.
    CHECK(offset(plain, idx) == q);
    CHECK(offset(last, idx) == channels_last::last_index(q, C, dhw));
  });
}

TEST_CASE("conv_descriptor: the filter's dims are KCTRS as the reference reads them, the bias 1,M,1,1,1") {
  const std::vector<int64_t> w{8, 2, 3, 1, 5};
  const cd::NdDims f = cd::filter_nd(w);
  REQUIRE(f.ok);
  CHECK(f.rank == 5);
  for (int i = 0; i < 5; ++i) CHECK(f.dims[i] == w[static_cast<size_t>(i)]);
  // The reference reads w[(m*Cg + cg)*K + (a*kR + b)*kS + c]: row-major KCTRS.
  for_each_index(w, [&](int64_t q, const std::vector<int64_t>& idx) { CHECK(offset(f, idx) == q); });
  const cd::NdDims b = cd::bias_nd({2, 8, 4, 4, 4});
  REQUIRE(b.ok);
  CHECK(b.rank == 5);
  const int expected[] = {1, 8, 1, 1, 1}, strides[] = {8, 1, 1, 1, 1};
  for (int i = 0; i < 5; ++i) CHECK(b.dims[i] == expected[i]);
  for (int i = 0; i < 5; ++i) CHECK(b.strides[i] == strides[i]);
}

TEST_CASE("conv_descriptor: at rank 4 the strides are cudnnSetTensor4dDescriptor's NCHW and NHWC ones") {
  const int64_t N = 3, C = 5, H = 7, W = 2;
  const cd::NdDims nchw = cd::tensor_nd({N, C, H, W}, false), nhwc = cd::tensor_nd({N, C, H, W}, true);
  const int64_t want_nchw[] = {C * H * W, H * W, W, 1}, want_nhwc[] = {H * W * C, 1, W * C, C};
  for (int i = 0; i < 4; ++i) {
    CHECK(nchw.strides[i] == want_nchw[i]);
    CHECK(nhwc.strides[i] == want_nhwc[i]);
  }
  // The bias of the 2-D path: 1,M,1,1 (cudnnSetTensor4dDescriptor NCHW).
  const cd::NdDims b = cd::bias_nd({N, C, H, W});
  const int dims[] = {1, static_cast<int>(C), 1, 1};
  for (int i = 0; i < 4; ++i) CHECK(b.dims[i] == dims[i]);
}

TEST_CASE("conv_descriptor: conv_nd takes the begin pads (zero for the padded copy) and dims past int fail") {
  Node n;
  n.attrs["strides"] = Attribute::of_ints({1, 2, 3});
  n.attrs["dilations"] = Attribute::of_ints({2, 1, 1});
  n.attrs["pads"] = Attribute::of_ints({1, 0, 2, 3, 1, 0});
  const Window win = read_window(n, 3, {3, 3, 3}, "test", {});
  const cd::ConvNd c = cd::conv_nd(win, false), z = cd::conv_nd(win, true);
  REQUIRE(c.ok);
  CHECK(c.spatial == 3);
  const int pads[] = {1, 0, 2}, strides[] = {1, 2, 3}, dilations[] = {2, 1, 1};
  for (int i = 0; i < 3; ++i) {
    CHECK(c.pads[i] == pads[i]);
    CHECK(z.pads[i] == 0);
    CHECK(c.strides[i] == strides[i]);
    CHECK(c.dilations[i] == dilations[i]);
  }
  CHECK_FALSE(cd::tensor_nd({1, 1, int64_t{1} << 31, 1, 1}, false).ok);
  CHECK_FALSE(cd::tensor_nd({1, 2, 1024, 1024, 1024}, false).ok);  // N's stride 2^31
  CHECK_FALSE(cd::tensor_nd({2, 3}, false).ok);
}

TEST_CASE("conv_descriptor: the padded volume copy and its crop against a direct loop") {
  const std::vector<int64_t> x{2, 3, 2, 4, 3}, begin{1, 0, 2}, end{0, 2, 1};
  std::vector<int64_t> out(3);
  for (size_t k = 0; k < 3; ++k) out[k] = x[k + 2] + begin[k] + end[k];
  const cd::VolumeCopy v = cd::volume_copy(x, out, begin);
  const std::vector<int64_t> padded{x[0], x[1], out[0], out[1], out[2]};
  int64_t inside = 0;
  for_each_index(padded, [&](int64_t i, const std::vector<int64_t>& idx) {
    bool in = true;
    std::vector<int64_t> src{idx[0], idx[1], 0, 0, 0};
    for (size_t k = 0; k < 3; ++k) {
      src[k + 2] = idx[k + 2] - begin[k];
      in = in && src[k + 2] >= 0 && src[k + 2] < x[k + 2];
    }
    const int64_t want = in ? (((src[0] * x[1] + src[1]) * x[2] + src[2]) * x[3] + src[3]) * x[4] + src[4] : -1;
    CHECK(cd::padded_volume_source(i, v) == want);
    if (in) {
      ++inside;
      CHECK(cd::cropped_volume_source(want, v) == i);  // the crop reads back what the pad wrote
    }
  });
  CHECK(inside == element_count(x));
}

TEST_CASE("conv_descriptor: a 3-D Conv and ConvGrad's dX through the padded copy equal the padded ones") {
  const std::vector<int64_t> xd{2, 2, 3, 5, 4}, wd{3, 2, 2, 3, 2}, begin{1, 2, 0}, end{0, 1, 1};
  const Tensor x = random_tensor(DataType::Float64, xd, 7), w = random_tensor(DataType::Float64, wd, 8);
  std::vector<int64_t> out(3);
  for (size_t k = 0; k < 3; ++k) out[k] = xd[k + 2] + begin[k] + end[k];
  const cd::VolumeCopy v = cd::volume_copy(xd, out, begin);
  Tensor xp(DataType::Float64, {xd[0], xd[1], out[0], out[1], out[2]});
  for (int64_t i = 0; i < xp.numel(); ++i) {
    const int64_t from = cd::padded_volume_source(i, v);
    xp.data<double>()[i] = from >= 0 ? x.data<double>()[from] : 0.0;
  }
  std::map<std::string, Attribute> pads{{"strides", Attribute::of_ints({1, 2, 1})},
                                        {"pads", Attribute::of_ints({1, 2, 0, 0, 1, 1})}};
  std::map<std::string, Attribute> none{{"strides", Attribute::of_ints({1, 2, 1})}};
  const Tensor y1 = run_node(make_node("Conv", {"x", "w"}, {"y"}, pads), {{"x", x}, {"w", w}}, "reference").at("y");
  const Tensor y2 = run_node(make_node("Conv", {"x", "w"}, {"y"}, none), {{"x", xp}, {"w", w}}, "reference").at("y");
  REQUIRE(y1.dims() == y2.dims());
  CHECK(max_abs_diff(y1, y2) <= 1e-12);
  // dX: the padded problem's data gradient cropped (crop_volumes) is the padded Conv's.
  const Tensor dy = random_tensor(DataType::Float64, y1.dims(), 9);
  const Tensor dx1 = run_node(make_node("ConvGrad", {"dy", "x", "w"}, {"dx"}, pads, kTrainrtDomain),
                              {{"dy", dy}, {"x", x}, {"w", w}}, "reference")
                         .at("dx");
  const Tensor dxp = run_node(make_node("ConvGrad", {"dy", "x", "w"}, {"dx"}, none, kTrainrtDomain),
                              {{"dy", dy}, {"x", xp}, {"w", w}}, "reference")
                         .at("dx");
  Tensor dx2(DataType::Float64, xd);
  for (int64_t i = 0; i < dx2.numel(); ++i) dx2.data<double>()[i] = dxp.data<double>()[cd::cropped_volume_source(i, v)];
  CHECK(max_abs_diff(dx1, dx2) <= 1e-12);
}

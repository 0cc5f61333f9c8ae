// What the cuda convolutions (ops/conv_cuda.cu) hand cuDNN's legacy N-d descriptors,
// and the index math of a 3-D convolution's zero-padded input copy, in plain C++ so
// that tests/ops/test_conv_descriptor.cpp checks on the host what the GPU path uses.
//
//   NdDims x = tensor_nd(x.dims(), /*channels_last=*/false);  // N,C,D,H,W and its strides
//   NdDims w = filter_nd(w.dims());                           // K,C/G,T,R,S
//   NdDims b = bias_nd(y.dims());                             // 1,M,1,1,1 (cudnnConvolutionBackwardBias)
//   ConvNd c = conv_nd(win);                                  // per spatial dim: begin pad, stride, dilation
//   VolumeCopy v = volume_copy(x.dims(), padded_spatial, begin);
//   int64_t from = padded_volume_source(i, v);                // -1: a zero
//   int64_t back = cropped_volume_source(i, v);               // dx[i] = dxp[back]
//
// Strides: Plain is row-major (N,C,D,H,W: C*D*H*W, D*H*W, H*W, W, 1); channels_last puts
// the channels innermost (NDHWC: D*H*W*C, 1, H*W*C, W*C, C). At rank 4 these are exactly
// the strides cudnnSetTensor4dDescriptor derives from CUDNN_TENSOR_NCHW / NHWC, which the
// 2-D path keeps calling. The cuda backend keeps rank-5 activations Plain (NCDHW:
// ChannelsLast is a rank-4 layout, graph/tensor.h layout_fits) and filters KCTRS, so a 3-D
// convolution describes NCDHW tensors and a CUDNN_TENSOR_NCHW filter; the NDHWC strides
// are here for the test's cross-check against channels_last::last_index.
//
// cuDNN takes int dims: a value of 2^31 or more leaves `ok` false (the caller then runs
// the host reference kernel). TRAINRT_HOST_DEVICE: the copy's index functions run in a
// cuda kernel too.
#pragma once

#include <climits>
#include <cstdint>
#include <vector>

#include "graph/tensor.h"  // TRAINRT_HOST_DEVICE (graph/float16.h)
#include "ops/core/window.h"

namespace trainrt::conv_descriptor {

constexpr int kMaxRank = 5;  // N,C and up to three spatial dims

struct NdDims {
  int rank = 0;
  int dims[kMaxRank] = {};
  int strides[kMaxRank] = {};
  bool ok = true;  // every dim and stride fits an int
};

inline bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

// Dims of an N,C,spatial... tensor and its strides, Plain or channels_last.
inline NdDims tensor_nd(const std::vector<int64_t>& d, bool channels_last) {
  NdDims r;
  r.rank = static_cast<int>(d.size());
  if (r.rank < 3 || r.rank > kMaxRank) return r.ok = false, r;
  int64_t s[kMaxRank] = {};
  if (!channels_last) {
    int64_t m = 1;
    for (int i = r.rank - 1; i >= 0; --i) s[i] = m, m *= d[static_cast<size_t>(i)];
  } else {
    int64_t m = d[1];
    s[1] = 1;
    for (int i = r.rank - 1; i >= 2; --i) s[i] = m, m *= d[static_cast<size_t>(i)];
    s[0] = m;
  }
  for (int i = 0; i < r.rank; ++i) {
    r.ok = r.ok && fits_int(d[static_cast<size_t>(i)]) && fits_int(s[i]);
    r.dims[i] = static_cast<int>(d[static_cast<size_t>(i)]);
    r.strides[i] = static_cast<int>(s[i]);
  }
  return r;
}

// A filter's dims K,C/G,kernel... (cudnnSetFilterNdDescriptor takes dims and a format,
// no strides): the weights' dims as they are.
inline NdDims filter_nd(const std::vector<int64_t>& w) { return tensor_nd(w, false); }

// The bias gradient's descriptor for output dims y: 1,M,1,... of y's rank.
inline NdDims bias_nd(const std::vector<int64_t>& y) {
  std::vector<int64_t> d(y.size(), 1);
  if (y.size() > 1) d[1] = y[1];
  return tensor_nd(d, false);
}

// cudnnSetConvolutionNdDescriptor's arrays: cuDNN pads both sides of a dim alike, so the
// begin pads (an output element depends only on those; where the end pads change the
// output size the caller convolves a padded copy with `padded` zero pads instead).
struct ConvNd {
  int spatial = 0;
  int pads[kMaxRank - 2] = {}, strides[kMaxRank - 2] = {}, dilations[kMaxRank - 2] = {};
  bool ok = true;
};
inline ConvNd conv_nd(const Window& win, bool padded) {
  ConvNd c;
  c.spatial = static_cast<int>(win.rank());
  if (c.spatial < 1 || c.spatial > kMaxRank - 2) return c.ok = false, c;
  for (size_t i = 0; i < win.rank(); ++i) {
    const int64_t p = padded ? 0 : win.pads[i];
    c.ok = c.ok && fits_int(p) && fits_int(win.strides[i]) && fits_int(win.dilations[i]);
    c.pads[i] = static_cast<int>(p);
    c.strides[i] = static_cast<int>(win.strides[i]);
    c.dilations[i] = static_cast<int>(win.dilations[i]);
  }
  return c;
}

// A Plain tensor's N*C volumes of `in` spatial dims placed at `begin` in volumes of `out`
// dims, zeros around (a 3-D convolution's padded input copy; the crop undoes it).
struct VolumeCopy {
  int spatial = 0;
  int64_t in[kMaxRank - 2] = {}, out[kMaxRank - 2] = {}, begin[kMaxRank - 2] = {};
};
inline VolumeCopy volume_copy(const std::vector<int64_t>& x, const std::vector<int64_t>& out,
                              const std::vector<int64_t>& begin) {
  VolumeCopy v;
  v.spatial = static_cast<int>(x.size()) - 2;
  for (int i = 0; i < v.spatial; ++i) {
    const auto k = static_cast<size_t>(i);
    v.in[i] = x[k + 2], v.out[i] = out[k], v.begin[i] = begin[k];
  }
  return v;
}

// The offset in x of element i of the padded copy, or -1 where the copy holds a zero.
TRAINRT_HOST_DEVICE inline int64_t padded_volume_source(int64_t i, const VolumeCopy& v) {
  int64_t rest = i, from = 0, scale = 1;
  bool inside = true;
  for (int k = v.spatial - 1; k >= 0; --k) {
    const int64_t s = rest % v.out[k] - v.begin[k];
    rest /= v.out[k];
    inside = inside && s >= 0 && s < v.in[k];
    from += s * scale;
    scale *= v.in[k];
  }
  return inside ? from + rest * scale : -1;
}

// The offset in the padded copy of element i of x (padded_volume_source's inverse).
TRAINRT_HOST_DEVICE inline int64_t cropped_volume_source(int64_t i, const VolumeCopy& v) {
  int64_t rest = i, from = 0, scale = 1;
  for (int k = v.spatial - 1; k >= 0; --k) {
    from += (rest % v.in[k] + v.begin[k]) * scale;
    rest /= v.in[k];
    scale *= v.out[k];
  }
  return from + rest * scale;
}

}  // namespace trainrt::conv_descriptor

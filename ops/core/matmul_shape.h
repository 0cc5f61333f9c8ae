// numpy.matmul's shapes for MatMul's kernels (the reference in ops/gemm.cpp, the cuda
// one in ops/gemm_cuda.cu): A[...,M,K] @ B[...,K,N] -> Y[...,M,N], a 1-D A seen as
// [1,K] and a 1-D B as [K,1], batch dims broadcast both ways.
//
//   MatmulShape s = matmul_shape(a.dims(), b.dims());
//   for (int64_t p = 0; p < s.batches; ++p) {
//     auto [oa, ob] = s.operands_of(p);   // A's and B's matrix (index, not elements) for Y's p-th
//     ...
//   }
//   if (s.strided) ...   // A's matrix p is p * s.a_step (0: one for all), B's p * s.b_step
//
// Why in one place: the cuda kernel runs a broadcast batch as one strided-batched
// cuBLASLt call where it can and must pick the same matrices the reference does;
// tests/ops/test_matmul_shape.cpp checks the strided form against the walk.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace trainrt {

struct MatmulShape {
  int64_t m = 0, k = 0, n = 0;
  int64_t batches = 1;             // matrices of Y
  std::vector<int64_t> yb;         // Y's batch dims
  std::vector<int64_t> sa, sb;     // per batch dim, A's and B's matrix stride (0: broadcast)
  bool strided = true;             // each operand's batch is Y's whole batch or one matrix
  int64_t a_step = 0, b_step = 0;  // with `strided`: matrices between A's (B's) batches, 0 or 1

  // The matrices of A and B that Y's p-th matrix multiplies.
  std::pair<int64_t, int64_t> operands_of(int64_t p) const {
    int64_t oa = 0, ob = 0;
    for (int64_t i = static_cast<int64_t>(yb.size()) - 1, rest = p; i >= 0; --i) {
      const int64_t idx = rest % yb[static_cast<size_t>(i)];
      rest /= yb[static_cast<size_t>(i)];
      oa += idx * sa[static_cast<size_t>(i)];
      ob += idx * sb[static_cast<size_t>(i)];
    }
    return {oa, ob};
  }
};

inline MatmulShape matmul_shape(std::vector<int64_t> ad, std::vector<int64_t> bd) {
  if (ad.size() == 1) ad.insert(ad.begin(), 1);
  if (bd.size() == 1) bd.push_back(1);
  const size_t rank = std::max(ad.size(), bd.size());
  ad.insert(ad.begin(), rank - ad.size(), 1);
  bd.insert(bd.begin(), rank - bd.size(), 1);
  MatmulShape s;
  s.m = ad[rank - 2], s.k = ad[rank - 1], s.n = bd[rank - 1];
  const size_t nb = rank - 2;
  s.yb.resize(nb), s.sa.resize(nb), s.sb.resize(nb);
  int64_t a_count = 1, b_count = 1;
  for (size_t i = 0; i < nb; ++i) {
    s.yb[i] = ad[i] == 1 ? bd[i] : ad[i];  // 1 takes the other; a 0 stays 0
    s.batches *= s.yb[i];
    a_count *= ad[i];
    b_count *= bd[i];
  }
  for (int64_t i = static_cast<int64_t>(nb) - 1, ma = 1, mb = 1; i >= 0; --i) {
    const size_t d = static_cast<size_t>(i);
    s.sa[d] = ad[d] == 1 ? 0 : ma;
    s.sb[d] = bd[d] == 1 ? 0 : mb;
    ma *= ad[d];
    mb *= bd[d];
  }
  s.strided = (a_count == s.batches || a_count == 1) && (b_count == s.batches || b_count == 1);
  s.a_step = a_count == 1 ? 0 : 1;
  s.b_step = b_count == 1 ? 0 : 1;
  return s;
}

}  // namespace trainrt

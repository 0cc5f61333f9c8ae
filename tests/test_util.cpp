// The element loops of tests/test_util.h, in a library of their own (trainrt_test_util,
// tests/CMakeLists.txt) compiled at the build's optimisation, whatever the test sources'.
#include "test_util.h"

namespace trainrt::test {

Tensor random_tensor(DataType t, std::vector<int64_t> dims, uint64_t seed, double lo, double hi) {
  Tensor x(t, std::move(dims));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) x.set_from_double(i, u(rng));
  return x;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  if (a.dims() != b.dims()) return INFINITY;
  double m = 0;
  const int64_t n = a.numel();
  for (int64_t i = 0; i < n; ++i) {
    const double d = std::fabs(a.get_as_double(i) - b.get_as_double(i));
    if (std::isnan(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

bool all_close(const Tensor& a, const Tensor& b, double rtol, double atol) {
  if (a.dims() != b.dims()) return false;
  const int64_t n = a.numel();
  for (int64_t i = 0; i < n; ++i) {
    const double x = a.get_as_double(i), y = b.get_as_double(i);
    if (std::isnan(x) && std::isnan(y)) continue;
    if (std::isinf(x) && x == y) continue;
    if (!(std::fabs(x - y) <= atol + rtol * std::fabs(y))) return false;
  }
  return true;
}

}  // namespace trainrt::test

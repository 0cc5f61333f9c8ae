// The optimizer updates the cuda kernels run (ops/core/optimizer_math.h with the
// arithmetic in the parameter's type, float) against the reference's (the same code in
// double) and against torch.optim's formulas written out here in double: SGD with
// momentum, dampening, Nesterov and weight decay, Adam and AdamW over several steps, and
// AdamW's decay when lr*wd is below float's 2^-24 (where p*(1 - lr*wd) in float would
// not decay at all). The float form may differ from the double one by float rounding
// only: the bounds are a few units of float's roundoff per step.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "ops/core/optimizer_math.h"

using namespace trainrt;
namespace om = trainrt::optimizer_math;

namespace {

std::vector<double> random_values(size_t n, uint32_t seed, double scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(0.0, scale);
  std::vector<double> v(n);
  for (double& x : v) x = d(rng);
  return v;
}

std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

// max |a - b| / max(|b|, floor) over the elements.
double max_rel(const std::vector<float>& a, const std::vector<double>& b, double floor) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) / std::max(std::abs(b[i]), floor));
  return worst;
}

}  // namespace

TEST_CASE("optimizer math: SGD's float form (the device's) follows torch.optim.SGD in double") {
  const size_t n = 257;
  for (const bool nesterov : {false, true}) {
    CAPTURE(nesterov);
    const double lr = 0.05, momentum = 0.9, dampening = nesterov ? 0.0 : 0.1, wd = 5e-4;
    std::vector<double> p = random_values(n, 1, 1.0), buf(n, 0.0);
    std::vector<float> pf = to_float(p), buff(n, 0.f), pf_out(n), buff_out(n);
    for (int64_t step = 0; step < 5; ++step) {
      const std::vector<double> g = random_values(n, 10 + static_cast<uint32_t>(step), 0.1);
      const std::vector<float> gf = to_float(g);
      // torch.optim.SGD, written out.
      for (size_t i = 0; i < n; ++i) {
        double d = static_cast<double>(gf[i]) + wd * p[i];
        buf[i] = step == 0 ? d : momentum * buf[i] + (1 - dampening) * d;
        d = nesterov ? d + momentum * buf[i] : buf[i];
        p[i] -= lr * d;
      }
      const auto s = om::sgd_of<float>(lr, momentum, dampening, wd, nesterov, step == 0);
      const SgdTensors<float> t{pf.data(),     gf.data(),       buff.data(),
                                pf_out.data(), buff_out.data(), static_cast<int64_t>(n)};
      for (int64_t i = 0; i < t.n; ++i) om::sgd_element(s, t, i);
      pf = pf_out;
      buff = buff_out;
    }
    // Five steps of a handful of float operations each: well under 1e-5 relative.
    CHECK(max_rel(pf, p, 1e-2) < 1e-5);
    CHECK(max_rel(buff, buf, 1e-2) < 1e-5);
  }
}

TEST_CASE("optimizer math: Adam and AdamW in float (the device's) against double (the reference's)") {
  const size_t n = 300;
  for (const bool decoupled : {false, true}) {
    CAPTURE(decoupled);
    const double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = decoupled ? 1e-2 : 1e-4;
    const std::vector<double> p0 = random_values(n, 2, 1.0);
    std::vector<double> pd = p0, md(n, 0.0), vd(n, 0.0), pd_out(n), md_out(n), vd_out(n);
    std::vector<float> pf = to_float(p0), mf(n, 0.f), vf(n, 0.f), pf_out(n), mf_out(n), vf_out(n);
    for (int64_t step = 0; step < 6; ++step) {
      const std::vector<double> g = random_values(n, 20 + static_cast<uint32_t>(step), 0.1);
      const std::vector<float> gf = to_float(g);
      const std::vector<double> gd(gf.begin(), gf.end());
      const auto cd = om::adam_of<double>(lr, step, b1, b2, eps, wd, decoupled);
      const auto cf = om::adam_of<float>(lr, step, b1, b2, eps, wd, decoupled);
      const AdamTensors<double> td{pd.data(),     gd.data(),     md.data(),     vd.data(),
                                   pd_out.data(), md_out.data(), vd_out.data(), static_cast<int64_t>(n)};
      const AdamTensors<float> tf{pf.data(),     gf.data(),     mf.data(),     vf.data(),
                                  pf_out.data(), mf_out.data(), vf_out.data(), static_cast<int64_t>(n)};
      for (int64_t i = 0; i < td.n; ++i) om::adam_element(cd, td, i);
      for (int64_t i = 0; i < tf.n; ++i) om::adam_element(cf, tf, i);
      pd = pd_out, md = md_out, vd = vd_out;
      pf = pf_out, mf = mf_out, vf = vf_out;
    }
    // The parameters moved by about lr per step: their difference to double is float's
    // rounding of p (6e-8 relative) plus that of the small steps.
    CHECK(max_rel(pf, pd, 1e-2) < 1e-6);
    CHECK(max_rel(mf, md, 1e-2) < 1e-5);  // m cancels: measured against the scale of 0.1*g
    CHECK(max_rel(vf, vd, 1e-6) < 1e-5);
  }
}

TEST_CASE("optimizer math: the first Adam and AdamW steps are torch.optim's closed forms") {
  // Step 1: m_hat = g, v_hat = g^2, so p' = p - lr * g / (|g| + eps) (Adam, wd = 0) and
  // p' = p - lr*wd*p - lr * g / (|g| + eps) (AdamW).
  const double g = 0.25, p = 0.5, m = 0, v = 0, lr = 0.01, wd = 0.1;
  for (const bool decoupled : {false, true}) {
    CAPTURE(decoupled);
    double o = 0, mo = 0, vo = 0;
    const AdamTensors<double> t{&p, &g, &m, &v, &o, &mo, &vo, 1};
    om::adam_element(om::adam_of<double>(lr, 0, 0.9, 0.999, 1e-8, decoupled ? wd : 0.0, decoupled), t, 0);
    const double expected = p - (decoupled ? lr * wd * p : 0.0) - lr * g / (g + 1e-8);
    CHECK(o == doctest::Approx(expected).epsilon(1e-14));
    CHECK(mo == doctest::Approx(0.1 * g).epsilon(1e-15));
    CHECK(vo == doctest::Approx(0.001 * g * g).epsilon(1e-15));
  }
}

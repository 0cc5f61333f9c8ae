// LrSchedule (training/lr_schedule.h) against values worked out by hand from the
// formulas of PyTorch's schedulers, stepped once per batch (t = epoch*S + step,
// S steps per epoch, T = epochs*S):
//   step:    StepLR          lr = base * 0.1^floor(epoch / step_epochs)
//   cosine:  CosineAnnealingLR (eta_min 0, T_max = T)  lr = base/2 * (1 + cos(pi t / T))
//   warmup:  a linear ramp multiplying either: lr *= (t + 1) / (warmup_epochs * S)
//            while t < warmup_epochs * S (the first batch already trains at base/(warmup*S)).
#include <doctest/doctest.h>

#include <cmath>

#include "training/lr_schedule.h"

using namespace trainrt;

namespace {

LrSchedule schedule(const std::string& kind, double base, int64_t epochs = 1, double warmup = 0) {
  LrSchedule s;
  s.kind = kind;
  s.base_lr = base;
  s.epochs = epochs;
  s.warmup_epochs = warmup;
  return s;
}

}  // namespace

TEST_CASE("lr schedule: constant is base_lr at every step") {
  const LrSchedule s = schedule("constant", 0.1, 5);
  for (int64_t epoch : {0, 1, 4, 9})
    for (int64_t step : {0, 3, 99}) CHECK(s.at(epoch, step, 100) == 0.1);
}

TEST_CASE("lr schedule: step multiplies by 0.1 every step_epochs epochs, never mid-epoch") {
  LrSchedule s = schedule("step", 0.1, 90);
  s.step_epochs = 30;
  CHECK(s.at(0, 0, 100) == doctest::Approx(0.1).epsilon(1e-12));
  CHECK(s.at(29, 99, 100) == doctest::Approx(0.1).epsilon(1e-12));  // last step before the drop
  CHECK(s.at(30, 0, 100) == doctest::Approx(0.01).epsilon(1e-12));
  CHECK(s.at(59, 50, 100) == doctest::Approx(0.01).epsilon(1e-12));
  CHECK(s.at(60, 0, 100) == doctest::Approx(0.001).epsilon(1e-12));
  s.step_epochs = 1;
  CHECK(s.at(3, 7, 10) == doctest::Approx(1e-4).epsilon(1e-12));  // 0.1 * 0.1^3
}

TEST_CASE("lr schedule: cosine is CosineAnnealingLR over all the steps of the run") {
  const LrSchedule s = schedule("cosine", 0.1, 4);  // T = 4 epochs x 10 steps = 40
  const double eps = 1e-12;
  CHECK(s.at(0, 0, 10) == doctest::Approx(0.1).epsilon(eps));                    // t=0: cos 0 = 1
  CHECK(s.at(1, 0, 10) == doctest::Approx(0.0853553390593274).epsilon(eps));     // t=10: 0.05 (1 + sqrt(2)/2)
  CHECK(s.at(1, 5, 10) == doctest::Approx(0.0691341716182545).epsilon(eps));     // t=15: 0.05 (1 + cos 67.5deg)
  CHECK(s.at(2, 0, 10) == doctest::Approx(0.05).epsilon(eps));                   // t=20: cos 90deg = 0
  CHECK(s.at(3, 9, 10) == doctest::Approx(0.000154133313343602).epsilon(1e-9));  // t=39: 0.05 (1 - cos 4.5deg)
  CHECK(std::abs(s.at(4, 0, 10)) < 1e-15);                                       // t=T: 0
  // Decreasing step by step within and across epochs.
  double before = s.at(0, 0, 10);
  for (int64_t t = 1; t < 40; ++t) {
    const double lr = s.at(t / 10, t % 10, 10);
    CHECK(lr < before);
    before = lr;
  }
}

TEST_CASE("lr schedule: warmup ramps linearly per step to base_lr, then the schedule's own value") {
  const LrSchedule s = schedule("constant", 0.1, 5, 2);  // 2 epochs x 4 steps: +0.0125 per step
  const double eps = 1e-12;
  CHECK(s.at(0, 0, 4) == doctest::Approx(0.0125).epsilon(eps));  // 0.1 * 1/8
  CHECK(s.at(0, 1, 4) == doctest::Approx(0.025).epsilon(eps));
  CHECK(s.at(0, 3, 4) == doctest::Approx(0.05).epsilon(eps));
  CHECK(s.at(1, 0, 4) == doctest::Approx(0.0625).epsilon(eps));
  CHECK(s.at(1, 3, 4) == doctest::Approx(0.1).epsilon(eps));  // the 8th step: the ramp's end
  CHECK(s.at(2, 0, 4) == doctest::Approx(0.1).epsilon(eps));
  CHECK(s.at(4, 3, 4) == doctest::Approx(0.1).epsilon(eps));

  // A fractional warmup: half an epoch of 4 steps is 2 steps.
  const LrSchedule half = schedule("constant", 0.1, 5, 0.5);
  CHECK(half.at(0, 0, 4) == doctest::Approx(0.05).epsilon(eps));
  CHECK(half.at(0, 1, 4) == doctest::Approx(0.1).epsilon(eps));
  CHECK(half.at(0, 2, 4) == doctest::Approx(0.1).epsilon(eps));

  // Warmup multiplies the cosine value: t=1 of T=16, ramp 2/4.
  const LrSchedule cos_warm = schedule("cosine", 0.1, 4, 1);
  CHECK(cos_warm.at(0, 1, 4) == doctest::Approx(0.05 * (1 + 0.98078528040323) * 0.5).epsilon(1e-10));  // cos 11.25deg
  CHECK(cos_warm.at(1, 0, 4) == doctest::Approx(0.05 * (1 + 0.707106781186548)).epsilon(1e-10));       // t=4: ramp over

  // Step with warmup: the first epoch ramps, the drop comes at step_epochs as without it.
  LrSchedule step_warm = schedule("step", 0.1, 4, 1);
  step_warm.step_epochs = 2;
  CHECK(step_warm.at(0, 1, 2) == doctest::Approx(0.1).epsilon(eps));  // ramp (1 + 1) / 2
  CHECK(step_warm.at(0, 0, 2) == doctest::Approx(0.05).epsilon(eps));
  CHECK(step_warm.at(2, 0, 2) == doctest::Approx(0.01).epsilon(eps));
}

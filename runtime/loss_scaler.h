// Dynamic loss scaling for fp16 training: the loss (and so every gradient) is
// multiplied by a scale so that small gradients survive fp16 rounding; a step whose
// gradients overflowed is skipped and the scale shrinks, and after a run of good steps
// it grows again.
//
//   LossScaler s;                      // 65536, x2 every 2000 good steps, x0.5 on overflow
//   feed loss_scale = s.scale(); run the step;
//   finite gradients ? s.good_step() : s.overflow();   // overflow: the step is skipped
//
// Why: fp16's largest value is 65504 and its smallest subnormal 6e-8; gradients of a
// deep network span a wider range. The policy (and its defaults) are those of
// PyTorch's GradScaler, which users of mixed precision know. It is backend-independent:
// the session (runtime/training_session.h) drives it for any backend.
#pragma once

#include <cstdint>

namespace trainrt {

struct LossScalerOptions {
  float init_scale = 65536.f;
  float growth_factor = 2.f;
  float backoff_factor = 0.5f;
  int64_t growth_interval = 2000;  // good steps in a row before the scale grows
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions o = {}) : o_(o), scale_(o.init_scale) {}
  float scale() const { return scale_; }
  int64_t good_steps() const { return good_; }
  // A step with finite gradients was applied.
  void good_step() {
    if (++good_ >= o_.growth_interval) {
      scale_ *= o_.growth_factor;
      good_ = 0;
    }
  }
  // A step's gradients were not finite: it was skipped.
  void overflow() {
    scale_ *= o_.backoff_factor;
    good_ = 0;
  }
  // Restores the state a checkpoint saved.
  void restore(float scale, int64_t good_steps) {
    scale_ = scale;
    good_ = good_steps;
  }

 private:
  LossScalerOptions o_;
  float scale_;
  int64_t good_ = 0;
};

}  // namespace trainrt

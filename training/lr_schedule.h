// The learning rate of each step: constant, step (x0.1 every step_epochs) or cosine,
// with an optional linear warm-up, stepped once per batch like PyTorch's schedulers.
//
//   LrSchedule s{.kind = "cosine", .base_lr = 0.1, .warmup_epochs = 1, .epochs = 30};
//   double lr = s.at(epoch, step_in_epoch, steps_per_epoch);
//
// Why the step in the epoch is an argument: a resumed run continues mid-epoch with the
// same rates, since the rate depends on (epoch, step) only.
#pragma once

#include <cstdint>
#include <string>

namespace trainrt {

struct LrSchedule {
  std::string kind = "constant";  // constant | step | cosine
  double base_lr = 0.01;
  int64_t step_epochs = 30;  // step: x0.1 every step_epochs
  double warmup_epochs = 0;  // linear ramp from 0 over the first warmup epochs
  int64_t epochs = 1;        // cosine: period
  double at(int64_t epoch, int64_t step, int64_t steps_per_epoch) const;
};

}  // namespace trainrt

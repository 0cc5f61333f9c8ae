#include "training/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace trainrt {

double LrSchedule::at(int64_t epoch, int64_t step, int64_t steps_per_epoch) const {
  const double progress =
      static_cast<double>(epoch) + static_cast<double>(step) / std::max<int64_t>(1, steps_per_epoch);
  double lr = base_lr;
  if (kind == "step") lr = base_lr * std::pow(0.1, static_cast<double>(epoch / std::max<int64_t>(1, step_epochs)));
  if (kind == "cosine")
    lr = 0.5 * base_lr * (1.0 + std::cos(std::numbers::pi * progress / static_cast<double>(epochs)));
  if (warmup_epochs > 0 && progress < warmup_epochs)
    lr *= (progress + 1.0 / std::max<int64_t>(1, steps_per_epoch)) / warmup_epochs;
  return lr;
}

}  // namespace trainrt

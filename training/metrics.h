// The --metrics file of a training run: one JSON object per line, a "step" line per
// metrics interval and an "epoch" line per epoch (what `trainrt plot` reads).
//
//   MetricsWriter m("metrics.jsonl");
//   m.step(/*step=*/50, /*epoch=*/1, loss, lr);
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace trainrt {

// One JSON object per line; "" disables it. Lines are flushed as written so a
// plot can follow a running job. A resumed run continues the file: lines written
// after the checkpoint it resumes from (step > resume_step, epoch > resume_epochs)
// are dropped first (rewritten atomically), so no step or epoch appears twice.
class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path);
  MetricsWriter(const std::string& path, int64_t resume_step, int64_t resume_epochs);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void step(int64_t step, int64_t epoch, double loss, double lr);
  void epoch(int64_t epoch, double epoch_time, double train_loss, double val_loss, double val_accuracy,
             double images_per_sec, double cumulative_time, double lr);

 private:
  FILE* f_ = nullptr;
};

}  // namespace trainrt

// What a training run does, as one plain value: model and data, ranks and batches,
// optimizer and schedule, how the step runs, output, checkpoints. `trainrt train` fills
// it from its flags (launch/train_config.h, every flag checked there before any work
// starts); a C++ program fills it itself and passes it to training/trainer.h.
//
//   TrainConfig c;                      // the defaults are `trainrt train`'s
//   c.model_path = "wrn.onnx";
//   c.data.dataset = "fashion-mnist";
//   c.batch_size = 128;                 // per_rank_batch and global_batch follow (Trainer)
//   c.epochs = 10;
//
// Errors about a value name the `trainrt train` flag that sets it (e.g. "--batch-size").
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "autodiff/training_graph.h"
#include "ops/core/kernel.h"
#include "runtime/rank_environment.h"
#include "training/lr_schedule.h"
#include "training/run_setup.h"

namespace trainrt {

struct TrainConfig {
  // Model and data.
  std::string model_path, augment = "auto";  // augment: auto | on | none
  DataSource data;
  int64_t limit_train = 0, limit_test = 0;
  int64_t max_steps = 0;  // stop after this many steps (0 = no limit)
  std::string iteration_times_path;
  bool shuffle = true;
  uint64_t seed = 0;
  // Ranks and batches: batch_size is --batch-size, global_batch that rounded down to a
  // multiple of the ranks, per_rank_batch what each rank takes per step (0: the
  // Trainer derives both from batch_size and env.world).
  RankEnvironment env;
  int64_t batch_size = 32, global_batch = 0, per_rank_batch = 0;
  double bucket_mb = 25, first_bucket_mb = 1, comm_timeout = 300;
  // Optimisation.
  TrainingOptions optimizer;
  LrSchedule schedule;
  int64_t epochs = 100, patience = 2;
  double target_accuracy = 0.95;
  // How the step runs.
  std::string precision = "fp32", backend = "cpu", device = "cpu";
  std::string timing_cache;  // --device cuda: the timing cache file (runtime/timing_cache.h)
  MathPrecision math = MathPrecision::fp32;
  ConvAlgorithm conv = ConvAlgorithm::winograd;
  Fp32Math fp32_math = Fp32Math::strict;  // --fp32-math (cuda: tf32 unless strict)
  size_t autotune = 4;                    // --autotune: engine candidates timed per problem (cuda)
  bool deterministic = false;             // --deterministic (KernelContext::deterministic)
  int64_t threads = 0;                    // 0: default_rank_threads()
  bool fuse = true, concurrent = false, detect_anomaly = false;
  bool channels_last = true;  // --layout (cuda: NHWC activations; the cpu backend's layouts follow its CPU)
  // Output ("" paths: not written; log_every 0: no progress lines).
  int64_t log_every = 50, metrics_every = 50;
  std::string metrics_path, trace_path, export_path, export_inference_path;
  int64_t trace_steps = 10;
  // Checkpoints: resume is the checkpoint's path ("" for a fresh run).
  std::string checkpoint_dir, resume;
  int64_t checkpoint_every = 1, checkpoint_every_steps = 0, keep_checkpoints = 3;
  // The settings that must be the same on resume for the run to continue exactly (saved
  // in each checkpoint, compared by read_resume_checkpoint).
  std::map<std::string, std::string> resume_key;
};

}  // namespace trainrt

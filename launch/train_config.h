// `trainrt train`'s flags as one validated value, built before any work starts.
//
//   Args a = parse_args(train_spec(), argv);
//   TrainConfig c = train_config(a, rank_environment());   // BadInput naming the flag
//   c.resume_key;   // what a checkpoint must agree with to be resumed
//
// Why: every mistake in the flags is reported before the data, the model or the other
// ranks are waited for; the training run (launch/cmd_train.cpp) reads only this.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "autodiff/training_graph.h"
#include "launch/cli.h"
#include "launch/train_util.h"
#include "ops/core/kernel.h"
#include "runtime/rank_environment.h"

namespace trainrt {

struct TrainConfig {
  // Model and data.
  std::string model_path, augment;  // augment: auto | on | none
  DataFlags data;
  int64_t limit_train = 0, limit_test = 0;
  int64_t max_steps = 0;  // --max-steps: stop after this many steps (0 = no limit)
  std::string iteration_times_path;
  bool shuffle = true;
  uint64_t seed = 0;
  // Ranks and batches: batch_size is --batch-size, global_batch that rounded down to a
  // multiple of the ranks, per_rank_batch what each rank takes per step.
  RankEnvironment env;
  int64_t batch_size = 0, global_batch = 0, per_rank_batch = 0;
  double bucket_mb = 25, first_bucket_mb = 1, comm_timeout = 300;
  // Optimisation.
  TrainingOptions optimizer;
  LrSchedule schedule;
  int64_t epochs = 0, patience = 0;
  double target_accuracy = 0;
  // How the step runs.
  std::string precision, backend, device;
  std::string timing_cache;  // --device cuda: the timing cache file (runtime/timing_cache.h)
  MathPrecision math = MathPrecision::fp32;
  ConvAlgorithm conv = ConvAlgorithm::winograd;
  Fp32Math fp32_math = Fp32Math::strict;  // --fp32-math (cuda: tf32 unless strict)
  size_t autotune = 4;                    // --autotune: engine candidates timed per problem (cuda)
  bool deterministic = false;             // --deterministic (KernelContext::deterministic)
  int64_t threads = 0;
  bool fuse = true, concurrent = false, detect_anomaly = false;
  bool channels_last = true;  // --layout (cuda: NHWC activations; the cpu backend's layouts follow its CPU)
  // Output.
  int64_t log_every = 0, metrics_every = 0;
  std::string metrics_path, trace_path, export_path, export_inference_path;
  int64_t trace_steps = 0;
  // Checkpoints: resume is the checkpoint's path ("auto" resolved), "" for a fresh run.
  std::string checkpoint_dir, resume;
  int64_t checkpoint_every = 0, checkpoint_every_steps = 0, keep_checkpoints = 0;
  // The flags that must be the same on resume for the run to continue exactly.
  std::map<std::string, std::string> resume_key;
};

const CommandSpec& train_spec();
TrainConfig train_config(const Args& a, const RankEnvironment& env);

}  // namespace trainrt

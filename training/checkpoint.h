// Checkpoints of a training run: every state tensor plus the trainer's position.
//
//   Checkpoint c;
//   for (auto& n : session.state_names()) c.state[n] = session.state(n);
//   c.trainer.epoch = 1; c.trainer.global_step = 312; c.trainer.config["batch-size"] = "64";
//   write_checkpoint(c, checkpoint_path("ckpt", 312));      // temp file, fsync, rename, dir fsync
//   Checkpoint r = read_checkpoint(latest_checkpoint("ckpt"));   // BadInput if corrupt or truncated
//   prune_checkpoints("ckpt", 3);                             // keep the newest 3
//
// File layout (little-endian):
//   "trainrt-checkpoint\n" (19 bytes) | u32 version (1) | u64 payload size | u32 CRC-32 of payload | payload
// The payload is a serialized onnx.ModelProto (producer "trainrt-checkpoint"): its
// graph's initializers are the state tensors (raw_data, bit-exact) and its
// metadata_props hold the trainer state (below) and the flags that must match on
// resume ("config.<flag>"). A file whose size is not header + payload size, whose
// CRC differs, or whose payload does not parse is refused as a whole with one line
// naming the file; nothing is applied before the whole file checked out.
//
// Why this is enough to continue exactly: the data order and augmentation of an
// epoch derive from (seed, epoch) and (seed, epoch, sample), Dropout masks from
// (seed, global step) (runtime/training_session.h), and the learning rate from
// (epoch, step in epoch); so seed + epoch + step + the state tensors are the whole
// RNG and data-order state. Floating-point values are stored as C99 hex floats.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "graph/tensor.h"

namespace trainrt {

struct TrainerState {
  int64_t epoch = 0;          // 0-based epoch the run is in (or about to start)
  int64_t step_in_epoch = 0;  // steps of `epoch` already done
  int64_t global_step = 0;    // steps done in total (seeds Dropout)
  uint64_t seed = 0;
  double lr = 0;                              // learning rate of the last step (log only)
  double epoch_loss_sum = 0;                  // sum of the step losses of `epoch` so far
  double epoch_seconds = 0;                   // training time spent in `epoch` so far
  double total_seconds = 0;                   // training time of the completed epochs
  int64_t total_images = 0;                   // images trained on in the completed epochs
  std::vector<double> val_accuracy;           // per completed epoch (early stopping)
  std::map<std::string, std::string> config;  // flags that must match on resume
};

struct Checkpoint {
  TrainerState trainer;
  std::map<std::string, Tensor> state;  // parameters, optimizer state, BN running statistics
};

std::string checkpoint_bytes(const Checkpoint& c);
Checkpoint parse_checkpoint(const std::string& bytes, const std::string& where);
void write_checkpoint(const Checkpoint& c, const std::string& path);  // atomic
Checkpoint read_checkpoint(const std::string& path);

// "<dir>/checkpoint-<global step, 10 digits>.ckpt": names sort by step.
std::string checkpoint_path(const std::string& dir, int64_t global_step);
// Checkpoints in dir (names as above; temporary files are skipped), oldest first.
std::vector<std::string> list_checkpoints(const std::string& dir);
std::string latest_checkpoint(const std::string& dir);  // "" when there is none
// Deletes all but the newest `keep` checkpoints of dir.
void prune_checkpoints(const std::string& dir, int64_t keep);

// The first flag whose value differs between a checkpoint and this run, as
// "--flag: checkpoint has X, this run has Y"; "" when all match.
std::string config_mismatch(const std::map<std::string, std::string>& saved,
                            const std::map<std::string, std::string>& now);

}  // namespace trainrt

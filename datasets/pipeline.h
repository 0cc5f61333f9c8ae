// Batches of normalised float32 images for one epoch, prepared ahead in parallel.
//
//   PipelineOptions p;
//   p.batch_size = 128; p.seed = 42; p.epoch = e; p.rank = r; p.world = w;
//   p.augment = augment_by_default(ds);      // crop+flip for CIFAR, none for (Fashion-)MNIST
//   BatchStream s(ds, p);                    // starts preparing batches 0..prefetch-1
//   while (auto b = s.next()) step(b->images /* f32 [B,C,H,W] */, b->labels /* i64 [B] */);
//
// Order of an epoch (torch DistributedSampler semantics):
//   order = shuffle ? permutation(n, seed, epoch) : 0..n-1
//   pad order to a multiple of `world` by repeating it from the start,
//   rank r takes order[r], order[r+world], ...  (every rank the same count)
//   batches are consecutive runs of batch_size; drop_last drops a short tail.
// The permutation is Fisher-Yates driven by std::mt19937_64 seeded with
// mix(seed, epoch) (splitmix64) and an unbiased bounded draw written here, so it is
// the same on every platform and standard library.
//
// Image folders (datasets/dataset.h) are decoded here, each sample by a task of its own
// within its batch's task: see prepare_file_sample.
//
// Augmentation (the seed's RandomHorizontalFlip then RandomCrop(32, padding=4)):
//   flip with p=0.5, then an H,W window at offset (dy,dx) in [0, 2*pad]^2 of the
//   image zero-padded by `pad`; padding pixels are 0 and normalise to (0-mean)/std.
// Each sample's draw comes from mix(seed, epoch, sample index), so a batch does not
// depend on which thread prepared it. Normalisation: (x/255 - mean[c]) / std[c].
//
// Training vs evaluation: the seed trains with drop_last=True; its test loader also
// has drop_last=True and applies the same random transform. Our evaluation default
// keeps the last partial batch and does not augment (every test image counted
// once, deterministic); set drop_last/augment to true to match the seed exactly.
//
// Threads: batches are tasks of a tbb::task_group, at most `prefetch` ahead of the
// consumer. No task ever blocks; next() prepares a batch itself when no worker has
// started it yet, so the stream makes progress even with no free TBB worker.
// An exception thrown while preparing batch k is rethrown by the next() that
// would return batch k. Destroying the stream early cancels queued batches and
// waits only for the ones being prepared.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "datasets/dataset.h"
#include "graph/tensor.h"

namespace trainrt {

struct PipelineOptions {
  int64_t batch_size = 32;
  uint64_t seed = 0;
  int64_t epoch = 0;
  bool shuffle = true;
  bool drop_last = true;  // training: like the seed's DataLoader(drop_last=True)
  bool augment = false;   // random flip + crop; see augment_by_default()
  int64_t pad = 4;        // crop padding in pixels
  int64_t rank = 0, world = 1;
  int64_t prefetch = 4;     // batches prepared ahead of the consumer
  int64_t first_batch = 0;  // start the epoch here (resume mid-epoch); earlier batches are never built
  uint64_t max_file_bytes = uint64_t{1} << 30;  // image folders: larger files are an error
  // Where a batch's images and labels are written (null: the heap): a training session's
  // pinned batch memory (TrainingSession::batch_pool, runtime/host_pool.h), so that the
  // step copies them to the device from where they lie. Called on the pipeline's threads.
  std::function<std::shared_ptr<std::byte[]>(size_t bytes)> allocate;
};

// Options for evaluation: fixed order, last partial batch kept, no augmentation.
PipelineOptions eval_options(int64_t batch_size);
// CIFAR and image folders are augmented by default (the seed's transform, torchvision's
// ImageNet training transform); MNIST-like sets and npz arrays are not.
bool augment_by_default(const Dataset& d);

struct Batch {
  Tensor images;                                     // float32 [B,C,H,W], normalised (npz: [B, sample]; ids: int64)
  Tensor labels;                                     // int64 [B]
  std::vector<int64_t> samples;                      // dataset index of each row
  int64_t index = 0;                                 // batch number in this epoch
  double prepare_seconds = 0;                        // wall time spent building it (one thread)
  double wait_seconds = 0;                           // time next() waited for it (consumer stall)
  int64_t prepare_start_ns = 0, prepare_end_ns = 0;  // steady_clock, for traces (runtime/trace.h)
};

// Sample order of one epoch for one rank (see the header comment).
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle);
std::vector<int64_t> shard(const std::vector<int64_t>& order, int64_t rank, int64_t world);
std::vector<int64_t> epoch_samples(int64_t n, const PipelineOptions& o);  // epoch_order + shard
int64_t batch_count(int64_t samples, int64_t batch_size, bool drop_last);

struct Augment {
  bool flip = false;
  int64_t dy = 0, dx = 0;  // window offset in the padded image, in [0, 2*pad]
};
Augment draw_augment(uint64_t seed, int64_t epoch, int64_t sample, int64_t pad);

// Writes sample i of d as float32 C,H,W to out, augmented when aug is given.
void prepare_sample(const Dataset& d, int64_t i, const Augment* aug, int64_t pad, float* out);
// Image folders: decodes d.files[i] and writes it as float32 3 x S x S (S = d.image_size):
// augment: RandomResizedCrop(S) + RandomHorizontalFlip drawn from (seed, epoch, i);
// else Resize(round(S/0.875)) + CenterCrop(S) (datasets/image.h). Then (x/255-mean)/std.
void prepare_file_sample(const Dataset& d, int64_t i, bool augment, uint64_t seed, int64_t epoch, float* out,
                         uint64_t max_file_bytes = uint64_t{1} << 30);

class BatchStream {
 public:
  BatchStream(const Dataset& d, const PipelineOptions& o);  // d must outlive the stream
  ~BatchStream();
  BatchStream(const BatchStream&) = delete;
  BatchStream& operator=(const BatchStream&) = delete;

  std::optional<Batch> next();  // nullopt after the last batch of the epoch
  int64_t size() const { return batches_; }
  int64_t samples() const { return static_cast<int64_t>(samples_.size()); }

 private:
  struct State;
  void schedule(int64_t k);
  void run(int64_t k);
  Batch build(int64_t k) const;

  const Dataset& data_;
  PipelineOptions opts_;
  std::vector<int64_t> samples_;
  std::vector<float> lut_;  // [C][256]: normalised value of each byte
  int64_t batches_ = 0;
  int64_t next_ = 0;
  std::unique_ptr<State> state_;
};

}  // namespace trainrt

#include "datasets/pipeline.h"

#include <oneapi/tbb/task_group.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <random>

#include "datasets/image.h"
#include "graph/error.h"
#include "graph/onnx_io.h"
#include "graph/tsan.h"
#include "ops/core/parallel.h"

namespace trainrt {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t mix(uint64_t seed, int64_t epoch) { return splitmix64(seed ^ splitmix64(static_cast<uint64_t>(epoch))); }

// Uniform in [0, range), unbiased (Lemire's multiply-shift with rejection).
template <typename Next>
uint64_t bounded(Next&& next, uint64_t range) {
  unsigned __int128 m = static_cast<unsigned __int128>(next()) * range;
  if (static_cast<uint64_t>(m) < range) {
    uint64_t threshold = (0 - range) % range;
    while (static_cast<uint64_t>(m) < threshold) m = static_cast<unsigned __int128>(next()) * range;
  }
  return static_cast<uint64_t>(m >> 64);
}

// mean/std of one value apply to every channel.
float channel_value(const std::vector<float>& v, int64_t c) { return v.size() == 1 ? v[0] : v[c]; }

std::vector<float> normalise_table(const Dataset& d) {
  if (d.images.dtype() != DataType::UInt8) return {};
  std::vector<float> lut(static_cast<size_t>(d.channels()) * 256);
  for (int64_t c = 0; c < d.channels(); ++c)
    for (int v = 0; v < 256; ++v)
      lut[c * 256 + v] = (static_cast<float>(v) / 255.f - channel_value(d.mean, c)) / channel_value(d.std, c);
  return lut;
}

// out[c][y][x] = lut[c][in[c][sy][sx']] with sy = y+dy-pad, sx = x+dx-pad, sx' = flip ? W-1-sx : sx;
// positions outside the image read the padding value 0.
// Without augmentation any sample shape C x ... (the first sample dimension is the channel).
void fill_sample(const Dataset& d, int64_t i, const Augment* aug, int64_t pad, const float* lut, float* out) {
  const int64_t C = d.channels(), inner = d.sample_numel() / std::max<int64_t>(C, 1);
  if (d.images.dtype() == DataType::Float32) {
    const float* in = d.images.data<float>() + i * d.sample_numel();
    for (int64_t c = 0; c < C; ++c) {
      const float m = channel_value(d.mean, c), s = channel_value(d.std, c);
      for (int64_t k = 0; k < inner; ++k) out[c * inner + k] = (in[c * inner + k] - m) / s;
    }
    return;
  }
  const uint8_t* in = d.image(i);
  if (!aug) {
    for (int64_t c = 0; c < C; ++c)
      for (int64_t k = 0; k < inner; ++k) out[c * inner + k] = lut[c * 256 + in[c * inner + k]];
    return;
  }
  const int64_t H = d.height(), W = d.width();
  for (int64_t c = 0; c < C; ++c) {
    const float* t = lut + c * 256;
    const uint8_t* plane = in + c * H * W;
    float* o = out + c * H * W;
    for (int64_t y = 0; y < H; ++y, o += W) {
      int64_t sy = y + aug->dy - pad;
      if (sy < 0 || sy >= H) {
        std::fill(o, o + W, t[0]);
        continue;
      }
      // Columns x in [x0, x1) read the image (sx = x + shift in [0, W)); the rest is padding.
      const uint8_t* row = plane + sy * W;
      const int64_t shift = aug->dx - pad;
      const int64_t x0 = std::clamp<int64_t>(-shift, 0, W), x1 = std::clamp<int64_t>(W - shift, x0, W);
      std::fill(o, o + x0, t[0]);
      if (aug->flip)
        for (int64_t x = x0; x < x1; ++x) o[x] = t[row[W - 1 - x - shift]];
      else
        for (int64_t x = x0; x < x1; ++x) o[x] = t[row[x + shift]];
      std::fill(o + x1, o + W, t[0]);
    }
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

PipelineOptions eval_options(int64_t batch_size) {
  PipelineOptions o;
  o.batch_size = batch_size;
  o.shuffle = false;
  o.drop_last = false;
  o.augment = false;
  return o;
}

bool augment_by_default(const Dataset& d) {
  return d.name == "cifar10" || d.name == "cifar100" || d.name == "imagefolder";
}

std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  if (!shuffle) return p;
  std::mt19937_64 g(mix(seed, epoch));
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[bounded(g, static_cast<uint64_t>(i) + 1)]);
  return p;
}

std::vector<int64_t> shard(const std::vector<int64_t>& order, int64_t rank, int64_t world) {
  if (world < 1 || rank < 0 || rank >= world)
    throw_bad_input("data sampler",
                    "rank " + std::to_string(rank) + " is not in [0, world size " + std::to_string(world) + ")");
  const int64_t n = static_cast<int64_t>(order.size());
  if (n == 0) return {};
  const int64_t per_rank = (n + world - 1) / world;  // padded total = per_rank * world
  std::vector<int64_t> mine(static_cast<size_t>(per_rank));
  for (int64_t j = 0; j < per_rank; ++j) mine[j] = order[(rank + j * world) % n];  // padding repeats from the start
  return mine;
}

std::vector<int64_t> epoch_samples(int64_t n, const PipelineOptions& o) {
  return shard(epoch_order(n, o.seed, o.epoch, o.shuffle), o.rank, o.world);
}

int64_t batch_count(int64_t samples, int64_t batch_size, bool drop_last) {
  return drop_last ? samples / batch_size : (samples + batch_size - 1) / batch_size;
}

Augment draw_augment(uint64_t seed, int64_t epoch, int64_t sample, int64_t pad) {
  uint64_t state = mix(seed, epoch) ^ splitmix64(~static_cast<uint64_t>(sample));
  auto next = [&] { return splitmix64(state++); };
  Augment a;
  a.flip = (next() >> 63) != 0;  // p = 0.5, drawn first as in RandomHorizontalFlip -> RandomCrop
  a.dy = static_cast<int64_t>(bounded(next, static_cast<uint64_t>(2 * pad + 1)));
  a.dx = static_cast<int64_t>(bounded(next, static_cast<uint64_t>(2 * pad + 1)));
  return a;
}

void prepare_sample(const Dataset& d, int64_t i, const Augment* aug, int64_t pad, float* out) {
  std::vector<float> lut = normalise_table(d);
  fill_sample(d, i, aug, pad, lut.data(), out);
}

void prepare_file_sample(const Dataset& d, int64_t i, bool augment, uint64_t seed, int64_t epoch, float* out,
                         uint64_t max_file_bytes) {
  const std::string& path = d.files[static_cast<size_t>(i)];
  const Image im = decode_image(read_file_bytes(path, max_file_bytes), path);
  const float mean[3] = {channel_value(d.mean, 0), channel_value(d.mean, 1), channel_value(d.mean, 2)};
  const float std[3] = {channel_value(d.std, 0), channel_value(d.std, 1), channel_value(d.std, 2)};
  if (!augment) return image_to_chw(eval_transform(im, d.image_size), false, mean, std, out);
  // RandomResizedCrop's draws, then RandomHorizontalFlip's, from the sample's own stream.
  uint64_t state = mix(seed, epoch) ^ splitmix64(~static_cast<uint64_t>(i));
  auto uniform01 = [&] { return static_cast<double>(splitmix64(state++) >> 11) * 0x1.0p-53; };
  const Image crop = train_transform(im, d.image_size, uniform01);
  image_to_chw(crop, uniform01() < 0.5, mean, std, out);
}

// One slot per batch in flight; batch k lives in slot k % prefetch.
struct BatchStream::State {
  enum Phase { Empty, Queued, Running, Done };
  struct Slot {
    Phase phase = Empty;
    int64_t k = -1;
    Batch batch;
    std::exception_ptr error;
  };
  std::mutex m;
  std::condition_variable done;
  std::vector<Slot> slots;
  std::atomic<bool> cancelled{false};
  tbb::task_group tasks;
};

BatchStream::BatchStream(const Dataset& d, const PipelineOptions& o) : data_(d), opts_(o) {
  const std::string where = d.source.empty() ? d.name : d.source;
  if (o.batch_size < 1) throw_bad_input("--batch-size", "must be >= 1, got " + std::to_string(o.batch_size));
  if (o.prefetch < 1 || o.pad < 0) throw_bad_input("data pipeline", "prefetch must be >= 1 and pad >= 0");
  const bool in_memory = (d.images.dtype() == DataType::UInt8 || d.images.dtype() == DataType::Float32 ||
                          d.images.dtype() == DataType::Int64) &&
                         d.images.rank() >= 2 && d.images.dims()[0] == d.size();
  if ((!d.from_files() && !in_memory) || (d.from_files() && d.files.size() != static_cast<size_t>(d.size())) ||
      d.labels.dtype() != DataType::Int64 || d.labels.dims() != std::vector<int64_t>{d.size()})
    throw_bad_input(where,
                    "dataset must be uint8/float32/int64 samples [N,...] (or N image files) with int64 labels [N], "
                    "got " +
                        dims_to_string(d.images.dims()) + " and labels " + dims_to_string(d.labels.dims()));
  for (const auto* v : {&d.mean, &d.std})
    if (v->size() != 1 && static_cast<int64_t>(v->size()) != d.channels())
      throw_bad_input(where, "mean/std need one value, or one per channel (" + std::to_string(d.channels()) +
                                 "), got " + std::to_string(v->size()));
  if (d.images.dtype() == DataType::Int64 && (d.mean != std::vector<float>{0.f} || d.std != std::vector<float>{1.f}))
    throw_bad_input(where, "token ids (int64 samples) are not normalised: --mean/--std do not apply");
  if (o.augment && !d.from_files() && (d.images.dtype() != DataType::UInt8 || d.images.rank() != 4))
    throw_bad_input(where, "augmentation (flip + crop) needs uint8 images [N,C,H,W], got " +
                               std::string(dtype_name(d.images.dtype())) + dims_to_string(d.images.dims()));
  for (float s : d.std)
    if (!(s > 0)) throw_bad_input(where, "std must be > 0");
  samples_ = epoch_samples(d.size(), o);
  lut_ = normalise_table(d);
  batches_ = batch_count(static_cast<int64_t>(samples_.size()), o.batch_size, o.drop_last);
  state_ = std::make_unique<State>();
  if (o.first_batch < 0) throw_bad_input("data pipeline", "first_batch must be >= 0");
  next_ = std::min(o.first_batch, batches_);
  state_->slots.resize(static_cast<size_t>(o.prefetch));
  for (int64_t k = next_; k < std::min(next_ + o.prefetch, batches_); ++k) schedule(k);
}

BatchStream::~BatchStream() {
  state_->cancelled = true;  // queued tasks return at once; running ones finish their batch
  state_->tasks.wait();
  tsan_acquire(&state_->tasks);  // wait() orders every task before State's destruction
}

// The task reads the stream's members set by the constructor (state_, slots, opts_,
// samples_, lut_) without the mutex: task_group::run orders them before the task.
// TSan cannot see that inside the uninstrumented libtbb, hence the two edges
// (graph/tsan.h): schedule -> task start (keyed by the slot), task end -> wait()
// in the destructor. A slot's phase, k, batch and error stay under the mutex.
void BatchStream::schedule(int64_t k) {
  State::Slot* slot = nullptr;
  {
    std::lock_guard<std::mutex> lock(state_->m);
    slot = &state_->slots[k % opts_.prefetch];
    *slot = State::Slot{};
    slot->phase = State::Queued;
    slot->k = k;
  }
  tsan_release(slot);
  state_->tasks.run([this, k, slot] {
    tsan_acquire(slot);
    run(k);
    tsan_release(&state_->tasks);
  });
}

// Builds batch k unless the consumer (or cancellation) got there first.
void BatchStream::run(int64_t k) {
  State::Slot& s = state_->slots[k % opts_.prefetch];
  {
    std::lock_guard<std::mutex> lock(state_->m);
    if (state_->cancelled || s.k != k || s.phase != State::Queued) return;
    s.phase = State::Running;
  }
  Batch b;
  std::exception_ptr error;
  try {
    b = build(k);
  } catch (...) {
    error = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lock(state_->m);
    s.batch = std::move(b);
    s.error = error;
    s.phase = State::Done;
  }
  state_->done.notify_all();
}

Batch BatchStream::build(int64_t k) const {
  auto t0 = std::chrono::steady_clock::now();
  const int64_t first = k * opts_.batch_size;
  const int64_t B = std::min(opts_.batch_size, static_cast<int64_t>(samples_.size()) - first);
  const int64_t per_sample = data_.sample_numel();
  std::vector<int64_t> dims{B};
  for (int64_t v : data_.sample_dims()) dims.push_back(v);
  // Token ids (int64 samples) are batched as they are; everything else as normalised float32.
  const bool tokens = !data_.from_files() && data_.images.dtype() == DataType::Int64;
  const DataType type = tokens ? DataType::Int64 : DataType::Float32;
  Batch b;
  b.index = k;
  if (opts_.allocate) {  // every element is written below
    b.images = Tensor(type, dims, opts_.allocate(static_cast<size_t>(B * per_sample) * dtype_size(type)));
    b.labels = Tensor(DataType::Int64, {B}, opts_.allocate(static_cast<size_t>(B) * sizeof(int64_t)));
  } else {
    b.images = Tensor(type, dims);
    b.labels = Tensor(DataType::Int64, {B});
  }
  b.samples.assign(samples_.begin() + first, samples_.begin() + first + B);
  float* img = tokens ? nullptr : b.images.data<float>();
  int64_t* lab = b.labels.data<int64_t>();
  for (int64_t j = 0; j < B; ++j) {
    const int64_t i = b.samples[j];
    const int64_t label = data_.label(i);
    if (label < 0 || label >= data_.classes)
      throw_bad_input(data_.source.empty() ? data_.name : data_.source,
                      "sample " + std::to_string(i) + ": label " + std::to_string(label) + " is out of range [0, " +
                          std::to_string(data_.classes) + ")");
    lab[j] = label;
    if (data_.from_files()) continue;  // decoded below, in parallel
    if (tokens) {
      std::memcpy(b.images.data<int64_t>() + j * per_sample, data_.images.data<int64_t>() + i * per_sample,
                  static_cast<size_t>(per_sample) * sizeof(int64_t));
      continue;
    }
    Augment a;
    if (opts_.augment) a = draw_augment(opts_.seed, opts_.epoch, i, opts_.pad);
    fill_sample(data_, i, opts_.augment ? &a : nullptr, opts_.pad, lut_.data(), img + j * per_sample);
  }
  // Image files: each decoded and transformed by a task of its own (the batch's task
  // waits for them, stealing work; results do not depend on which thread ran which).
  // The loop is parallel_ranges (ops/core/parallel.h): oneTBB's parallel_for, plain
  // std::threads under TSan, which cannot see the ordering inside the uninstrumented libtbb.
  // A bad file's error is caught in its task; the batch reports its first bad sample's
  // (the same one whichever thread got there first).
  if (data_.from_files()) {
    std::mutex m;
    int64_t bad = B;
    std::exception_ptr error;
    parallel_ranges(B, 1, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) {
        try {
          prepare_file_sample(data_, b.samples[j], opts_.augment, opts_.seed, opts_.epoch, img + j * per_sample,
                              opts_.max_file_bytes);
        } catch (...) {
          std::lock_guard<std::mutex> lock(m);
          if (j < bad) bad = j, error = std::current_exception();
        }
      }
    });
    if (error) std::rethrow_exception(error);
  }
  b.prepare_seconds = seconds_since(t0);
  b.prepare_start_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count();
  b.prepare_end_ns = b.prepare_start_ns + static_cast<int64_t>(b.prepare_seconds * 1e9);
  return b;
}

std::optional<Batch> BatchStream::next() {
  if (next_ >= batches_) return std::nullopt;
  const int64_t k = next_++;
  auto t0 = std::chrono::steady_clock::now();
  State::Slot& s = state_->slots[k % opts_.prefetch];
  std::unique_lock<std::mutex> lock(state_->m);
  TRAINRT_ASSERT(s.k == k);
  if (s.phase == State::Queued) {
    // No worker has started it: build it here rather than wait for one.
    s.phase = State::Running;
    lock.unlock();
    try {
      s.batch = build(k);
    } catch (...) {
      s.error = std::current_exception();
    }
    lock.lock();
    s.phase = State::Done;
  }
  state_->done.wait(lock, [&] { return s.phase == State::Done; });
  Batch b = std::move(s.batch);
  std::exception_ptr error = s.error;
  s = State::Slot{};
  lock.unlock();
  if (error) {
    next_ = batches_;  // the stream ends with its first error
    std::rethrow_exception(error);
  }
  b.wait_seconds = seconds_since(t0);
  if (k + opts_.prefetch < batches_) schedule(k + opts_.prefetch);
  return b;
}

}  // namespace trainrt

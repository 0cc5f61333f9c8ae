// The timing cache: which engine (cuDNN graph engine config, or legacy algorithm) a
// fused pattern or op ran fastest with, for one problem on one GPU and cuDNN version,
// measured once and kept in a JSON file next to the model, as TensorRT keeps its
// timing cache.
//
//   TimingCache cache = TimingCache::load("wrn.timing-cache.json", "NVIDIA H100 80GB HBM3", "9.1.0");
//   TimingKey k{"conv_bias_relu", "x=8x16x28x28 w=32x16x3x3 pads=1,1,1,1 strides=1,1", "fp32"};
//   if (const TimingEntry* e = cache.find(k)) use(e->engine);
//   else cache.record(k, {"eng12_k3=1", 0.041}), cache.save();
//
// The file ({"format": "trainrt-timing-cache", "version": 1, "entries": [...]}) holds
// entries of every GPU and cuDNN version it has seen; `find` uses only those of the
// cache's own GPU and cuDNN version, `save` writes the others back unchanged. A missing
// file is an empty cache; a file that is not such a cache (bad JSON, another format or
// version, a field missing or of the wrong type, a repeated key) is refused with one
// BadInput line naming the file and the fault. `save` merges with what the file holds
// by then (this cache's entries win) and replaces it atomically (graph/onnx_io.h
// write_file_atomic): a failed save leaves the old file and no temporary behind.
//
// Backend-independent: nothing here needs CUDA; the cuda backend fills in the GPU name
// and cuDNN version and the kernels their keys.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "ops/core/engine_choice.h"

namespace trainrt {

// What a measurement depends on, besides the GPU and cuDNN version of the cache.
struct TimingKey {
  std::string pattern;    // fused pattern or op: "conv_bias_relu", "Conv", "ConvGrad.data", ...
  std::string problem;    // input shapes and the attributes that matter, as the kernel writes them
  std::string precision;  // "fp32", "bf16", "fp16", "tf32"
};

struct TimingEntry {
  std::string engine;  // the chosen engine or algorithm, as the kernel names it
  double time_ms = 0;  // its measured time per call
};

// One entry of the file: the key, the device it was measured on, the choice.
struct TimingRecord {
  TimingKey key;
  std::string gpu, cudnn;
  TimingEntry entry;
};

inline constexpr const char* kTimingCacheFormat = "trainrt-timing-cache";
inline constexpr int kTimingCacheVersion = 1;

// Where the cache of a model lives by default: "dir/wrn.onnx" -> "dir/wrn.timing-cache.json".
std::string default_timing_cache_path(const std::string& model_path);

// "8x16x28x28" for the problem strings of TimingKey.
std::string problem_dims(const std::vector<int64_t>& dims);

class TimingCache {
 public:
  TimingCache(std::string path, std::string gpu, std::string cudnn);

  // Reads `path` (a missing file: empty); throws BadInput on a corrupt one.
  static TimingCache load(const std::string& path, const std::string& gpu, const std::string& cudnn);

  // The entry for `k` on this cache's GPU and cuDNN version, or null.
  const TimingEntry* find(const TimingKey& k) const;
  void record(const TimingKey& k, const TimingEntry& e);
  // The same for the given GPU and cuDNN version (what a kernel reports for its device).
  const TimingEntry* find(const TimingKey& k, const std::string& gpu, const std::string& cudnn) const;
  void record(const TimingKey& k, const std::string& gpu, const std::string& cudnn, const TimingEntry& e);

  // Merges with the file as it is now and replaces it atomically; throws BadInput when
  // the file has become corrupt (it is left as it is) or cannot be written.
  void save() const;

  const std::string& path() const { return path_; }
  const std::string& gpu() const { return gpu_; }
  const std::string& cudnn() const { return cudnn_; }
  std::vector<TimingRecord> records() const;  // every entry, of every device, in key order
  size_t usable() const;                      // entries of this cache's GPU and cuDNN version

 private:
  using Id = std::tuple<std::string, std::string, std::string, std::string, std::string>;
  std::string path_, gpu_, cudnn_;
  std::map<Id, TimingEntry> entries_;
};

// The engine chooser of a run (ops/core/engine_choice.h, KernelContext::chooser) over a
// timing cache: the kernels' choices are looked up in and recorded into it, each under
// the GPU and cuDNN version its kernel reports (EngineKey::gpu, EngineKey::library), so
// one file serves every device it has met. The CLI (launch/) makes one per --device
// cuda run from the loaded file and saves it when choices were added.
//
//   TimingCacheChooser chooser(TimingCache::load(path, "", ""));
//   ExecutorOptions eo; eo.chooser = &chooser;  ... run ...
//   if (size_t n = chooser.save_if_new()) std::cerr << timing_cache_saved_line(n, path) << '\n';
class TimingCacheChooser : public EngineChooser {
 public:
  explicit TimingCacheChooser(TimingCache cache, TimingPolicy p = {});
  // Saves the cache (TimingCache::save: merged, atomic) when choices were recorded since
  // the last save; returns how many were (0: nothing written). Safe beside running kernels.
  size_t save_if_new();
  TimingCache cache() const;  // a copy, as it is now

 protected:
  std::optional<std::string> find(const EngineKey& k) const override;
  void record(const EngineKey& k, const std::string& engine, double time_ms) override;

 private:
  mutable std::mutex mu_;  // against save_if_new() and cache() beside choose()
  TimingCache cache_;
  size_t unsaved_ = 0;
};

// "trainrt: timing cache: 3 problems timed, saved to X" (one problem: "1 problem").
std::string timing_cache_saved_line(size_t timed, const std::string& path);

// The file's text for `records` (what save writes) and its parse (what load reads;
// `path` names the file in errors).
std::string timing_cache_json(const std::vector<TimingRecord>& records);
std::vector<TimingRecord> parse_timing_cache(const std::string& text, const std::string& path);

}  // namespace trainrt

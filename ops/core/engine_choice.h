// Which of a library's engines a kernel runs a problem with: timed once per problem and
// device, remembered (runtime/timing_cache.h keeps the choices in a file), reused.
//
//   EngineKey k{"conv_bias_relu", "x=8x16x28x28 w=...", "fp32", gpu_name, "cuDNN 90100"};
//   EngineChoice c = ctx.chooser->choose(k, {"eng0_k3=1", "eng12"}, [&](size_t i) -> std::optional<double> {
//     return time_candidate(i);  // ms per call, or nullopt: this candidate failed
//   });
//   if (c.index) build(candidates[*c.index]); else use_first_or_fallback(c.why);
//
// Why here, in ops/core: the cuda kernels (ops/*_cuda.cu) must not depend on runtime/,
// yet they are the ones that know the candidates and how to time one. They see only this
// interface through KernelContext::chooser (null: no timing, each kernel keeps its
// first-acceptable engine); the runtime implements the storage (find/record) over its
// TimingCache. The decision itself is plain host code, so tests/ops/test_engine_choice.cpp
// drives it with fake timers.
//
// The decision for one call of choose(key, candidates, time):
//   - the store holds an engine for `key` (its GPU and library version are part of the
//     key, so another device's entries never match) that is still among `candidates`:
//     that one, nothing timed;
//   - else, when `time` is given: the policy's first max_candidates candidates (the
//     heuristics' order: the caller lists them best first) are timed once each (the
//     callback runs the policy's warm-up and timed repetitions and returns the mean ms
//     per call, or nullopt when the candidate failed or is unsupported: it is skipped),
//     the fastest (first on ties) is recorded in the store and returned; the others are
//     never run. max_candidates 0: nothing timed, the first candidate, nothing recorded;
//   - every candidate failed: no index, `why` says so; the key is remembered, so later
//     calls neither time again nor repeat the failure's cost;
//   - `time` null (the caller cannot time now, e.g. its stream is being captured into a
//     CUDA graph): the stored engine when valid, else the first candidate; nothing recorded.
// Thread-safe: one lock is held from the lookup through the timing to the record, so
// concurrent calls for one key time it once (the others then find the stored choice).
// Calls for other keys wait meanwhile; timing happens once per problem, then every call
// is a lookup.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace trainrt {

struct EngineKey {
  std::string pattern;    // fused pattern or op: "conv_bias_relu", "Conv", ...
  std::string problem;    // shapes and the attributes that matter, as the kernel writes them
  std::string precision;  // "fp32", "tf32", "bf16", "fp16"
  std::string gpu;        // the device's name, as the backend reports it
  std::string library;    // the library and its version, e.g. "9.1.0" for cuDNN 9.1.0
};

// Warm-up calls and timed calls per candidate; the callback follows it.
// max_candidates bounds the autotuning: only the heuristics' first few are timed (the
// CLI's --autotune N), as a short GPU allocation cannot time every engine config cuDNN
// lists; the cuDNN graphs do not even finalize the others (ops/cuda/cudnn_graph.h).
struct TimingPolicy {
  int warmup = 2;
  int repeats = 5;
  size_t max_candidates = 4;
};

// What a library says about an engine's arithmetic (cuDNN's numerical notes), and the
// engine filter every cuda kernel shares: "" when an engine with `notes` is kept, else
// why not. Never an engine that down-converts its inputs or reduces in reduced
// precision; TENSOR_CORE engines only where `tf32` (TF32 math allowed, or 16-bit
// inputs); non-deterministic ones only where `deterministic` is off.
struct EngineNotes {
  bool down_converts = false;
  bool reduced_precision_reduction = false;
  bool tensor_core = false;
  bool nondeterministic = false;
};
std::string keep_engine(const EngineNotes& notes, bool tf32, bool deterministic);
// The passes of an engine filter over the heuristics' list: with `deterministic`, first
// deterministic engines only, then (when none is kept) any; without, one pass taking
// non-deterministic engines in the heuristics' order too.
std::vector<bool> determinism_passes(bool deterministic);

struct EngineChoice {
  std::optional<size_t> index;  // into the candidates; none when every one failed
  bool timed = false;           // this call timed the candidates
  bool cached = false;          // the store's engine
  double time_ms = 0;           // the chosen one's measured time, where known
  std::string why;              // when there is no index
};

class EngineChooser {
 public:
  // Mean ms per call of candidate `i` under the policy; nullopt: it failed.
  using Time = std::function<std::optional<double>(size_t i, const TimingPolicy& p)>;

  explicit EngineChooser(TimingPolicy policy = {}) : policy_(policy) {}
  virtual ~EngineChooser() = default;
  EngineChooser(const EngineChooser&) = delete;
  EngineChooser& operator=(const EngineChooser&) = delete;

  EngineChoice choose(const EngineKey& k, const std::vector<std::string>& candidates, const Time& time);

  const TimingPolicy& policy() const { return policy_; }
  // Problems timed by this chooser (with a recorded choice) and problems all of whose
  // candidates failed, since it was made.
  size_t timed() const;
  size_t failed() const;

 protected:
  // The storage, called with the chooser's lock held (implementations need no lock of
  // their own against choose(), only against their other users).
  virtual std::optional<std::string> find(const EngineKey& k) const = 0;
  virtual void record(const EngineKey& k, const std::string& engine, double time_ms) = 0;

 private:
  using Id = std::tuple<std::string, std::string, std::string, std::string, std::string>;
  TimingPolicy policy_;
  mutable std::mutex mu_;
  std::map<Id, std::string> failed_;  // keys whose candidates all failed, and why
  size_t timed_ = 0;
};

// A chooser that keeps its choices in memory only (tests; a library user without a file).
class MemoryEngineChooser : public EngineChooser {
 public:
  using EngineChooser::EngineChooser;
  std::map<std::tuple<std::string, std::string, std::string, std::string, std::string>, std::string> entries;

 protected:
  std::optional<std::string> find(const EngineKey& k) const override;
  void record(const EngineKey& k, const std::string& engine, double time_ms) override;
};

}  // namespace trainrt

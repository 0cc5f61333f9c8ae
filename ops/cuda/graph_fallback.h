// Try a fused library graph, remember per problem when the library does not support
// it, fall back, and say so once: the host-side decision of the cuda kernels that run
// a cuDNN graph (ops/conv_graph_cuda.cu) with a legacy path beside it.
//
//   static GraphFallback<ExecPlan> graphs;
//   bool ran = graphs.try_run(key,
//       [&](std::string* why) { return build(why); },           // plan, or null and why not
//       [&](const ExecPlan& p) { return execute(p); },         // "" ran, else why not (nothing written)
//       [&](const std::string& why) { std::cerr << "...: " << why << '\n'; });
//   if (!ran) legacy();
//
// Why a separate piece: the library answers "unsupported" at three points (no engine
// from the heuristics, a plan that does not finalize, NOT_SUPPORTED when it executes),
// and every one of them must lead to the same thing: this problem (its key: dtype,
// shapes, window, which epilogue) runs the legacy path from then on, without asking
// the library again, and the user reads one line about it, not one per step. Nothing
// here needs a GPU, so tests/ops/test_graph_fallback.cpp drives it with fake builders.
//
// The build runs under a lock, once per key (as cuda::cached); execute runs outside it.
// A build or execute that throws (a real error, not "unsupported") propagates and
// records nothing: the next call tries again.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace trainrt {

template <typename Plan>
class GraphFallback {
 public:
  using Build = std::function<std::shared_ptr<const Plan>(std::string* why)>;
  using Execute = std::function<std::string(const Plan&)>;
  using Notice = std::function<void(const std::string& why)>;

  // True when the graph ran for `key`; false when the caller must run its legacy path
  // (`notice` was called with the reason if this is the first time for `key`).
  bool try_run(const std::string& key, const Build& build, const Execute& execute, const Notice& notice) {
    std::shared_ptr<const Plan> plan;
    {
      std::lock_guard<std::mutex> lock(mu_);
      State& s = state_for(key, build);
      if (!s.plan) {
        if (!s.told) s.told = true, notice(s.unsupported);
        return false;
      }
      plan = s.plan;
    }
    const std::string why = execute(*plan);
    if (why.empty()) return true;
    std::lock_guard<std::mutex> lock(mu_);
    State& s = state_[key];
    if (s.plan) {  // the first execute to fail for this key says so; others just fall back
      s.plan = nullptr;
      s.unsupported = why;
      s.told = true;
      notice(why);
    }
    return false;
  }

  // The plan of `key` without running it (built once, as try_run builds it): what the
  // planner asks for the workspace it will need. Null when the library does not support
  // the problem; the notice is given by the first try_run of `key`, as if it had built it.
  std::shared_ptr<const Plan> plan(const std::string& key, const Build& build) {
    std::lock_guard<std::mutex> lock(mu_);
    return state_for(key, build).plan;
  }

  // The reason `key` runs the legacy path; "" when it runs the graph or was never tried.
  std::string unsupported(const std::string& key) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = state_.find(key);
    return it == state_.end() ? "" : it->second.unsupported;
  }

 private:
  struct State {
    std::shared_ptr<const Plan> plan;  // null: unsupported, the legacy path runs
    std::string unsupported;
    bool told = false;  // the notice was given
  };
  // The state of `key`, built on first use; mu_ held.
  State& state_for(const std::string& key, const Build& build) {
    auto it = state_.find(key);
    if (it != state_.end()) return it->second;
    State s;
    std::string why;
    s.plan = build(&why);
    if (!s.plan) s.unsupported = why.empty() ? "unsupported" : why;
    return state_.emplace(key, std::move(s)).first->second;
  }
  mutable std::mutex mu_;
  std::map<std::string, State> state_;
};

// How the nodes of each fused op ran: per node, whether its last call ran the library
// graph or the legacy path (a problem the library turned down, or one outside the
// graph's scope). `trainrt bench` prints it after its timed steps, e.g. "FusedConv: 16 of
// 19 nodes ran as one cuDNN graph". Thread-safe; the kernels record into fusion_tally().
class FusionTally {
 public:
  void record(const std::string& op, const std::string& node, bool fused) {
    std::lock_guard<std::mutex> lock(mu_);
    last_[{op, node}] = fused;
  }
  struct Count {
    size_t fused = 0, unfused = 0;
  };
  std::map<std::string, Count> counts() const {  // per op
    std::lock_guard<std::mutex> lock(mu_);
    std::map<std::string, Count> out;
    for (const auto& [key, fused] : last_) ++(fused ? out[key.first].fused : out[key.first].unfused);
    return out;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    last_.clear();
  }

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, bool> last_;  // (op, node) -> ran fused
};

// The process's tally (the cuda kernels record into it).
inline FusionTally& fusion_tally() {
  static FusionTally t;
  return t;
}

// The one line said when a problem falls back, e.g. "trainrt: cuda: FusedConv 'conv3'
// (x 8,16,28,28 w 32,16,3,3): cuDNN graph unsupported (no engine), running the unfused
// convolution + epilogue".
inline std::string graph_fallback_notice(const std::string& op, const std::string& node, const std::string& problem,
                                         const std::string& why, const std::string& instead) {
  return "trainrt: cuda: " + op + " '" + node + "' (" + problem + "): cuDNN graph unsupported (" + why + "), running " +
         instead;
}

// The line said when a cuda kernel hands a call to the host reference kernel
// (cuda::run_reference: device-to-host copies and a stream synchronisation per call), once
// per (op, node): "trainrt: cuda: Gemm 'fc' runs on the host (reference kernel): cuBLASLt
// has no algorithm for it". first() returns it the first time, "" after. Thread-safe.
class HostFallbackNotices {
 public:
  std::string first(const std::string& op, const std::string& node, const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!told_.insert({op, node}).second) return "";
    return "trainrt: cuda: " + op + " '" + node + "' runs on the host (reference kernel): " + why;
  }

 private:
  std::mutex mu_;
  std::set<std::pair<std::string, std::string>> told_;
};

// The process's notices (cuda::run_reference says them).
inline HostFallbackNotices& host_fallback_notices() {
  static HostFallbackNotices n;
  return n;
}

// Every fallback of the process, for the summary of `trainrt bench`: fed where the
// notices above are said (a cuDNN graph turned down, a call handed to the host), one
// entry per (op, node, problem), the first reason kept. Thread-safe.
//
//   fallback_log().record({"FusedConv", "conv3", "x 8,16,28,28 w 32,16,3,3 forward, fp32",
//                          "cuDNN graph unsupported (no engine)", "the unfused convolution + epilogue"});
//   fallback_line(r)  // "fallback: FusedConv 'conv3' (x 8,...): cuDNN graph unsupported (no engine); ran the ..."
struct FallbackRecord {
  std::string op, node, problem;
  std::string reason;   // why the preferred path did not run
  std::string instead;  // what ran in its place
};

class FallbackLog {
 public:
  void record(FallbackRecord r) {
    std::lock_guard<std::mutex> lock(mu_);
    auto key = std::make_tuple(r.op, r.node, r.problem);
    if (seen_.insert(std::move(key)).second) records_.push_back(std::move(r));
  }
  std::vector<FallbackRecord> records() const {  // in the order they happened
    std::lock_guard<std::mutex> lock(mu_);
    return records_;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    records_.clear();
    seen_.clear();
  }

 private:
  mutable std::mutex mu_;
  std::vector<FallbackRecord> records_;
  std::set<std::tuple<std::string, std::string, std::string>> seen_;
};

// The process's log (the cuda kernels record into it).
inline FallbackLog& fallback_log() {
  static auto* log = new FallbackLog();  // kernels may record while static destructors run
  return *log;
}

// "fallback: OP 'NODE' (PROBLEM): REASON; ran INSTEAD" (no parentheses without a problem).
inline std::string fallback_line(const FallbackRecord& r) {
  return "fallback: " + r.op + " '" + r.node + "'" + (r.problem.empty() ? "" : " (" + r.problem + ")") + ": " +
         r.reason + "; ran " + r.instead;
}

}  // namespace trainrt

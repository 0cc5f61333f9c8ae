// The engine choice's decision: ops/core/engine_choice.h says what and why.
#include "ops/core/engine_choice.h"

#include <algorithm>

namespace trainrt {

namespace {

auto id_of(const EngineKey& k) { return std::make_tuple(k.pattern, k.problem, k.precision, k.gpu, k.library); }

std::optional<size_t> index_of(const std::vector<std::string>& candidates, const std::string& engine) {
  const auto it = std::find(candidates.begin(), candidates.end(), engine);
  if (it == candidates.end()) return std::nullopt;
  return static_cast<size_t>(it - candidates.begin());
}

}  // namespace

EngineChoice EngineChooser::choose(const EngineKey& k, const std::vector<std::string>& candidates, const Time& time) {
  EngineChoice c;
  if (candidates.empty()) {
    c.why = "no candidate engine";
    return c;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (const std::optional<std::string> stored = find(k))
    if (const std::optional<size_t> i = index_of(candidates, *stored)) {
      c.index = i;
      c.cached = true;
      return c;
    }
  if (const auto f = failed_.find(id_of(k)); f != failed_.end()) {
    c.why = f->second;
    return c;
  }
  if (!time) {  // cannot time now: the first candidate, nothing recorded
    c.index = 0;
    return c;
  }
  const size_t bound = std::min(candidates.size(), policy_.max_candidates);
  if (bound == 0) {  // autotuning off: the heuristics' first, nothing recorded
    c.index = 0;
    return c;
  }
  c.timed = true;
  std::optional<double> best;
  for (size_t i = 0; i < bound; ++i) {
    const std::optional<double> ms = time(i, policy_);
    if (!ms) continue;
    if (!best || *ms < *best) best = ms, c.index = i;
  }
  if (!c.index) {
    c.why = "every one of " + std::to_string(bound) + " candidate engines failed when timed";
    failed_.emplace(id_of(k), c.why);
    return c;
  }
  c.time_ms = *best;
  record(k, candidates[*c.index], *best);
  ++timed_;
  return c;
}

std::string keep_engine(const EngineNotes& n, bool tf32, bool deterministic) {
  if (n.down_converts) return "engines left out: down-converting";
  if (n.reduced_precision_reduction) return "engines left out: reduced-precision reduction";
  if (n.tensor_core && !tf32) return "engines left out: TF32 tensor cores under strict fp32 math";
  if (n.nondeterministic && deterministic) return "engines left out: non-deterministic (--deterministic on)";
  return "";
}

std::vector<bool> determinism_passes(bool deterministic) {
  return deterministic ? std::vector<bool>{true, false} : std::vector<bool>{false};
}

size_t EngineChooser::timed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return timed_;
}

size_t EngineChooser::failed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_.size();
}

std::optional<std::string> MemoryEngineChooser::find(const EngineKey& k) const {
  const auto it = entries.find(id_of(k));
  if (it == entries.end()) return std::nullopt;
  return it->second;
}

void MemoryEngineChooser::record(const EngineKey& k, const std::string& engine, double) { entries[id_of(k)] = engine; }

}  // namespace trainrt

// The engines each problem ran: ops/core/engine_record.h says what and why.
#include "ops/core/engine_record.h"

#include <cstdio>

namespace trainrt {

void EngineLog::record(EngineRecord r) {
  std::lock_guard<std::mutex> lock(mu_);
  auto key = std::make_tuple(r.op, r.pass, r.problem);
  by_problem_[std::move(key)] = std::move(r);
}

std::vector<EngineRecord> EngineLog::records() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<EngineRecord> out;
  for (const auto& [key, r] : by_problem_) out.push_back(r);
  return out;
}

void EngineLog::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  by_problem_.clear();
}

EngineLog& engine_log() {
  static auto* log = new EngineLog();  // kernels may record while static destructors run
  return *log;
}

std::string engine_line(const EngineRecord& r) {
  std::string line = "engine: " + r.op + " " + r.pass + " " + r.problem + ": " + r.library + " " + r.engine + ", ";
  if (!r.timed || r.time_ms <= 0) return line + "not timed";
  char b[96];
  std::snprintf(b, sizeof b, "%.3f ms, %.2f TFLOP/s", r.time_ms, r.flops / (r.time_ms * 1e-3) * 1e-12);
  return line + b;
}

std::string conv_tflops_line(const std::vector<EngineRecord>& records) {
  size_t passes = 0, timed = 0;
  double flops = 0, ms = 0;
  for (const EngineRecord& r : records) {
    if (!r.convolution()) continue;
    ++passes;
    if (!r.timed || r.time_ms <= 0) continue;
    ++timed, flops += r.flops, ms += r.time_ms;
  }
  if (passes == 0) return "conv TFLOP/s: not timed (no convolution ran on a library engine)";
  if (timed == 0) return "conv TFLOP/s: not timed (" + std::to_string(passes) + " convolution passes, none timed)";
  char b[160];
  std::snprintf(b, sizeof b, "conv TFLOP/s: %.2f (%zu of %zu convolution passes timed, %.2f GFLOP in %.3f ms)",
                flops / (ms * 1e-3) * 1e-12, timed, passes, flops * 1e-9, ms);
  return b;
}

}  // namespace trainrt

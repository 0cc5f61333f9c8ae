// What each convolution pass and matrix product ran, per problem: the library, its engine
// or algorithm, the measured time when the choice was timed, and the problem's FLOPs.
// `trainrt bench` prints them after its timed steps, with the convolutions' TFLOP/s.
//
//   engine_log().record({"Conv", "forward", "x 32,16,32,32 w 160,16,3,3, tf32", "cuDNN 9.1.0",
//                        "CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM", 0.21, 1.5e9, true});
//   for (const EngineRecord& r : engine_log().records()) puts(engine_line(r).c_str());
//   // engine: Conv forward x 32,16,32,32 w 160,16,3,3, tf32: cuDNN 9.1.0 ..._PRECOMP_GEMM, 0.210 ms, 7.1 TFLOP/s
//   puts(conv_tflops_line(engine_log().records()).c_str());
//   // conv TFLOP/s: 7.1 (1 of 1 convolution passes timed, 1.50 GFLOP in 0.210 ms)
//
// Why a process-wide log in ops/core: the kernels that choose (ops/conv_cuda.cu,
// ops/conv_graph_cuda.cu through ops/cuda/cudnn_graph.cu, ops/gemm_cuda.cu) must not
// depend on runtime/ or launch/, and the choice is made once per problem deep inside
// them; the command reads the log once at its end. One record per (op, pass, problem):
// a later record of the same problem replaces the earlier one (the last choice is what
// runs). Host code, no CUDA: tests/ops/test_engine_record.cpp checks the lines and the sums.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace trainrt {

struct EngineRecord {
  std::string op{};       // "Conv", "FusedConv", "ConvGrad", "Gemm", "FusedGemm", "MatMul"
  std::string pass{};     // "forward", "data", "filter" (convolutions); "forward" otherwise
  std::string problem{};  // shapes and math, as the kernel describes them
  std::string library{};  // "cuDNN 9.1.0", "cuDNN graph 9.1.0", "cuBLASLt 13.0.0"
  std::string engine{};   // the algorithm's name, or the graph engine's "eng<id>_k<knob>=<value>..."
  double time_ms = 0;     // per call, measured when the choice was timed; 0: not timed
  double flops = 0;       // of one call (multiply-add = 2)
  bool timed = false;     // time_ms was measured
  bool convolution() const { return op.find("Conv") != std::string::npos; }
};

// A record of what a kernel knows before its choice is made (engine and time come later).
inline EngineRecord engine_record(std::string op, std::string pass, std::string problem, std::string library,
                                  double flops) {
  EngineRecord r;
  r.op = std::move(op), r.pass = std::move(pass), r.problem = std::move(problem), r.library = std::move(library);
  r.flops = flops;
  return r;
}

class EngineLog {
 public:
  void record(EngineRecord r);
  std::vector<EngineRecord> records() const;  // in (op, pass, problem) order
  void clear();

 private:
  mutable std::mutex mu_;
  std::map<std::tuple<std::string, std::string, std::string>, EngineRecord> by_problem_;
};

// The process's log (the cuda kernels record into it).
EngineLog& engine_log();

// "engine: OP PASS PROBLEM: LIBRARY ENGINE, X ms, Y TFLOP/s" ("not timed" in place of the
// two figures when the choice was not timed: the heuristics' first, or the timing cache's).
std::string engine_line(const EngineRecord& r);
// "conv TFLOP/s: Y (K of N convolution passes timed, G GFLOP in T ms)": the timed
// convolution passes' FLOPs over their measured ms; "conv TFLOP/s: not timed (N convolution
// passes, none timed)" or "conv TFLOP/s: not timed (no convolution ran on a library engine)".
std::string conv_tflops_line(const std::vector<EngineRecord>& records);

}  // namespace trainrt

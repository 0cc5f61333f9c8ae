// The engine log (ops/core/engine_record.h): one record per problem, the bench's lines
// and the convolutions' TFLOP/s over the timed passes.
#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include "ops/core/engine_record.h"

using namespace trainrt;

namespace {

EngineRecord conv(const std::string& pass, double ms, double flops, bool timed = true) {
  return EngineRecord{.op = "Conv",
                      .pass = pass,
                      .problem = "x 32,16,32,32 w 160,16,3,3, tf32",
                      .library = "cuDNN 9.1.0",
                      .engine = "CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM",
                      .time_ms = ms,
                      .flops = flops,
                      .timed = timed};
}

}  // namespace

TEST_CASE("engine log: one record per op, pass and problem, the last one kept") {
  EngineLog log;
  log.record(conv("forward", 0.5, 1e9));
  log.record(conv("forward", 0.25, 1e9));  // the same problem chosen again: replaces
  log.record(conv("data", 0.5, 1e9));
  EngineRecord gemm{.op = "Gemm", .pass = "forward", .problem = "m,n,k 32,100,640 NT, tf32", .library = "cuBLASLt"};
  log.record(gemm);
  const std::vector<EngineRecord> r = log.records();
  REQUIRE(r.size() == 3);
  CHECK(r[0].pass == "data");  // (op, pass, problem) order
  CHECK(r[1].pass == "forward");
  CHECK(r[1].time_ms == 0.25);
  CHECK(r[2].op == "Gemm");
  log.clear();
  CHECK(log.records().empty());
}

TEST_CASE("engine log: the bench's line per problem, timed and not") {
  CHECK(engine_line(conv("forward", 0.5, 2e9)) ==
        "engine: Conv forward x 32,16,32,32 w 160,16,3,3, tf32: cuDNN 9.1.0 "
        "CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, 0.500 ms, 4.00 TFLOP/s");
  CHECK(engine_line(conv("forward", 0, 2e9, false)) ==
        "engine: Conv forward x 32,16,32,32 w 160,16,3,3, tf32: cuDNN 9.1.0 "
        "CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, not timed");
}

TEST_CASE("engine log: conv TFLOP/s sums the timed convolution passes only") {
  std::vector<EngineRecord> r{conv("forward", 1.0, 3e9), conv("data", 0.5, 3e9), conv("filter", 0, 3e9, false)};
  r.push_back(EngineRecord{.op = "Gemm", .pass = "forward", .time_ms = 1.0, .flops = 1e12, .timed = true});
  // 6 GFLOP in 1.5 ms = 4 TFLOP/s; the Gemm and the untimed filter pass are left out.
  CHECK(conv_tflops_line(r) == "conv TFLOP/s: 4.00 (2 of 3 convolution passes timed, 6.00 GFLOP in 1.500 ms)");
  CHECK(conv_tflops_line({conv("forward", 0, 1e9, false)}) ==
        "conv TFLOP/s: not timed (1 convolution passes, none timed)");
  CHECK(conv_tflops_line({}) == "conv TFLOP/s: not timed (no convolution ran on a library engine)");
  // FusedConv and ConvGrad count as convolutions; BatchNormalization graphs do not.
  CHECK(EngineRecord{.op = "FusedConv"}.convolution());
  CHECK(EngineRecord{.op = "ConvGrad"}.convolution());
  CHECK_FALSE(EngineRecord{.op = "BatchNormalization"}.convolution());
}

TEST_CASE("engine log: threads recording at once lose nothing") {
  EngineLog log;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&log, t] {
      for (int i = 0; i < 100; ++i)
        log.record(
            EngineRecord{.op = "Conv", .pass = "forward", .problem = std::to_string(t) + "/" + std::to_string(i)});
    });
  for (std::thread& th : threads) th.join();
  CHECK(log.records().size() == 400);
}

// GraphFallback (ops/cuda/graph_fallback.h): the cuda FusedConv's "try the cuDNN graph,
// remember an unsupported problem, run the legacy path, say so once" logic, driven by
// fake builders and executors on the CPU.
#include <doctest/doctest.h>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ops/cuda/graph_fallback.h"

using namespace trainrt;

namespace {

// A fake library: counts builds and executes, fails where told.
struct FakeLibrary {
  std::string build_fails;    // non-empty: build returns null with this reason
  std::string execute_fails;  // non-empty: execute returns this reason
  int builds = 0, executes = 0, legacy = 0;
  std::vector<std::string> notices;
  GraphFallback<int> graphs;

  GraphFallback<int>::Build build() {
    return [this](std::string* why) -> std::shared_ptr<const int> {
      ++builds;
      if (!build_fails.empty()) return *why = build_fails, nullptr;
      return std::make_shared<const int>(42);
    };
  }
  // One kernel call: the graph, or the legacy path when it does not run.
  void call(const std::string& key) {
    const bool ran = graphs.try_run(
        key, build(),
        [&](const int& plan) {
          CHECK(plan == 42);
          ++executes;
          return execute_fails;
        },
        [&](const std::string& why) { notices.push_back(key + ": " + why); });
    if (!ran) ++legacy;
  }
};

}  // namespace

TEST_CASE("graph fallback: a supported problem builds once and runs the graph every call") {
  FakeLibrary lib;
  for (int i = 0; i < 3; ++i) lib.call("a");
  CHECK(lib.builds == 1);
  CHECK(lib.executes == 3);
  CHECK(lib.legacy == 0);
  CHECK(lib.notices.empty());
  CHECK(lib.graphs.unsupported("a").empty());
}

TEST_CASE("graph fallback: no plan -> legacy from the first call, one notice, never built again") {
  FakeLibrary lib;
  lib.build_fails = "no engine from the heuristics";
  for (int i = 0; i < 4; ++i) lib.call("a");
  CHECK(lib.builds == 1);
  CHECK(lib.executes == 0);
  CHECK(lib.legacy == 4);
  REQUIRE(lib.notices.size() == 1);
  CHECK(lib.notices[0] == "a: no engine from the heuristics");
  CHECK(lib.graphs.unsupported("a") == "no engine from the heuristics");
}

TEST_CASE("graph fallback: a build failing without a reason still names one") {
  GraphFallback<int> g;
  std::string said;
  CHECK_FALSE(g.try_run(
      "k", [](std::string*) { return std::shared_ptr<const int>(); }, [](const int&) { return std::string(); },
      [&](const std::string& why) { said = why; }));
  CHECK(said == "unsupported");
}

TEST_CASE("graph fallback: NOT_SUPPORTED at execute -> that call and all later ones run the legacy path") {
  FakeLibrary lib;
  lib.execute_fails = "CUDNN_STATUS_NOT_SUPPORTED at execute";
  lib.call("a");
  CHECK(lib.executes == 1);
  CHECK(lib.legacy == 1);     // the failed call itself still produces its output
  lib.execute_fails.clear();  // even if it would now succeed: the decision is kept
  lib.call("a");
  lib.call("a");
  CHECK(lib.builds == 1);
  CHECK(lib.executes == 1);
  CHECK(lib.legacy == 3);
  REQUIRE(lib.notices.size() == 1);
  CHECK(lib.notices[0] == "a: CUDNN_STATUS_NOT_SUPPORTED at execute");
}

TEST_CASE("graph fallback: problems are decided each on its own key") {
  FakeLibrary lib;
  lib.call("ok");
  lib.build_fails = "finalize: CUDNN_STATUS_NOT_SUPPORTED";
  lib.call("bad");
  lib.call("bad");
  lib.call("ok");  // already built: unaffected by the other key's failure
  lib.call("bad2");
  CHECK(lib.builds == 3);
  CHECK(lib.executes == 2);
  CHECK(lib.legacy == 3);
  CHECK(lib.notices.size() == 2);
  CHECK(lib.graphs.unsupported("ok").empty());
  CHECK_FALSE(lib.graphs.unsupported("bad2").empty());
}

TEST_CASE("graph fallback: an error that is not 'unsupported' propagates and records nothing") {
  GraphFallback<int> g;
  int builds = 0;
  auto build = [&](std::string*) -> std::shared_ptr<const int> {
    if (++builds == 1) throw std::runtime_error("out of memory");
    return std::make_shared<const int>(1);
  };
  auto execute = [](const int&) { return std::string(); };
  auto notice = [](const std::string&) { FAIL("no notice for an error"); };
  CHECK_THROWS_AS(g.try_run("k", build, execute, notice), std::runtime_error);
  CHECK(g.try_run("k", build, execute, notice));
  CHECK(builds == 2);
}

TEST_CASE("graph fallback: threads calling with one failing key get one notice") {
  std::mutex mu;
  GraphFallback<int> g;
  int notices = 0, legacy = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        const bool ran = g.try_run(
            "k", [](std::string*) { return std::make_shared<const int>(1); },
            [](const int&) { return std::string("CUDNN_STATUS_NOT_SUPPORTED"); },
            [&](const std::string&) {
              std::lock_guard<std::mutex> lock(mu);
              ++notices;
            });
        std::lock_guard<std::mutex> lock(mu);
        if (!ran) ++legacy;
      }
    });
  for (std::thread& t : threads) t.join();
  CHECK(notices == 1);
  CHECK(legacy == 200);
}

TEST_CASE("graph fallback: the notice line names op, node, problem, reason and the path taken") {
  CHECK(graph_fallback_notice("FusedConv", "conv3", "x 8,16,28,28 w 32,16,3,3", "no engine",
                              "the unfused convolution + epilogue") ==
        "trainrt: cuda: FusedConv 'conv3' (x 8,16,28,28 w 32,16,3,3): cuDNN graph unsupported (no engine), running "
        "the unfused convolution + epilogue");
}

TEST_CASE("graph fallback: plan() at plan time builds once; the first call then runs or says it falls back") {
  FakeLibrary lib;
  REQUIRE(lib.graphs.plan("a", lib.build()) != nullptr);
  CHECK(*lib.graphs.plan("a", lib.build()) == 42);
  CHECK(lib.builds == 1);
  lib.call("a");
  CHECK(lib.builds == 1);
  CHECK(lib.executes == 1);
  // Unsupported when asked at plan time: silent then, one notice at the first call.
  lib.build_fails = "no engine from the heuristics";
  CHECK(lib.graphs.plan("b", lib.build()) == nullptr);
  CHECK(lib.notices.empty());
  lib.call("b");
  lib.call("b");
  CHECK(lib.builds == 2);
  CHECK(lib.legacy == 2);
  CHECK(lib.notices == std::vector<std::string>{"b: no engine from the heuristics"});
}

TEST_CASE("fusion tally: per op, how many nodes last ran the graph and how many the legacy path") {
  FusionTally t;
  CHECK(t.counts().empty());
  t.record("FusedConv", "a", true);
  t.record("FusedConv", "b", true);
  t.record("FusedConv", "c", false);
  t.record("FusedConv", "a", true);  // a node counts once, however often it ran
  t.record("BatchNormalizationRelu", "bn", false);
  auto n = t.counts();
  REQUIRE(n.size() == 2);
  CHECK(n["FusedConv"].fused == 2);
  CHECK(n["FusedConv"].unfused == 1);
  CHECK(n["BatchNormalizationRelu"].fused == 0);
  CHECK(n["BatchNormalizationRelu"].unfused == 1);
  t.record("FusedConv", "b", false);  // a problem that fell back after running: its last call counts
  n = t.counts();
  CHECK(n["FusedConv"].fused == 1);
  CHECK(n["FusedConv"].unfused == 2);
  t.clear();
  CHECK(t.counts().empty());
}

TEST_CASE("host fallback notices: one line per op and node, naming both and the reason") {
  HostFallbackNotices n;
  CHECK(n.first("Gemm", "fc", "cuBLASLt's heuristic has no algorithm for this problem") ==
        "trainrt: cuda: Gemm 'fc' runs on the host (reference kernel): cuBLASLt's heuristic has no algorithm for "
        "this problem");
  CHECK(n.first("Gemm", "fc", "another reason").empty());  // said once, whatever the reason
  CHECK_FALSE(n.first("Gemm", "fc2", "x").empty());        // another node
  CHECK_FALSE(n.first("MatMul", "fc", "x").empty());       // another op of the same name
  std::vector<std::thread> threads;
  std::atomic<int> said{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i)
        if (!n.first("Conv", "c1", "r").empty()) ++said;
    });
  for (std::thread& t : threads) t.join();
  CHECK(said == 1);
}

TEST_CASE("fallback log: fed where the notice is said, one entry per op, node and problem, in order") {
  FallbackLog log;
  GraphFallback<int> graphs;
  // The kernel's call as cudnn_graph::run makes it: the notice also records into the log.
  auto call = [&](const std::string& node, const std::string& problem, const std::string& fails) {
    return graphs.try_run(
        problem,
        [&](std::string* why) -> std::shared_ptr<const int> {
          if (!fails.empty()) return *why = fails, nullptr;
          return std::make_shared<const int>(1);
        },
        [](const int&) { return std::string(); },
        [&](const std::string& why) {
          log.record({"FusedConv", node, problem, "cuDNN graph unsupported (" + why + ")",
                      "the unfused convolution + epilogue"});
        });
  };
  CHECK(call("conv1", "x 8,16,28,28 w 32,16,3,3", ""));
  CHECK(log.records().empty());  // the graph ran: nothing to report
  for (int i = 0; i < 3; ++i) CHECK_FALSE(call("conv3", "x 8,12,28,28 w 12,12,3,3", "no engine"));
  const std::vector<FallbackRecord> r = log.records();
  REQUIRE(r.size() == 1);  // every step falls back, the log says it once
  CHECK(fallback_line(r[0]) ==
        "fallback: FusedConv 'conv3' (x 8,12,28,28 w 12,12,3,3): cuDNN graph unsupported (no engine); ran the unfused "
        "convolution + epilogue");
  // The host fallback's entry (cuda::run_reference): no problem words.
  log.record({"Gemm", "fc", "", "cuBLASLt's heuristic has no algorithm for this problem", "the host reference kernel"});
  log.record({"Gemm", "fc", "", "another reason", "the host reference kernel"});  // the first reason stays
  REQUIRE(log.records().size() == 2);
  CHECK(fallback_line(log.records()[1]) ==
        "fallback: Gemm 'fc': cuBLASLt's heuristic has no algorithm for this problem; ran the host reference kernel");
  log.clear();
  CHECK(log.records().empty());
}

TEST_CASE("fallback log: threads recording at once keep one entry per key") {
  FallbackLog log;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&log, t] {
      for (int i = 0; i < 50; ++i) log.record({"Conv", "c" + std::to_string(i), "", "r" + std::to_string(t), "x"});
    });
  for (std::thread& th : threads) th.join();
  CHECK(log.records().size() == 50);
}

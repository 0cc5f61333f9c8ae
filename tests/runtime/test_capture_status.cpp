// What CUDA-graph capture did for a plan (Executor::capture_status, capture_line): how
// many runs were captured and replayed, and why not where they were not, proved on the
// stand-in device (tests/runtime/standin_device.h), whose capture refuses a
// synchronisation as a CUDA graph capture does.
#include <doctest/doctest.h>

#include "runtime/executor.h"
#include "runtime_util.h"
#include "standin_device.h"

using namespace trainrt;
using namespace trainrt::test;

TEST_CASE("capture status: a captured step counts its replays; bench's line says so") {
  Graph g = small_wrn();
  auto owned = std::make_unique<StandinDevice>(std::set<std::string>{});
  StandinDevice& dev = *owned;
  TrainingSession device(wrn_training(g), std::move(owned), {.seed = 3});
  CHECK(capture_line(device.capture_status()) == "capture: not captured (no run)");
  device.step(wrn_batch(4, 1), 0.05f);
  Executor::CaptureStatus s = device.capture_status();
  CHECK(s.runs == 1);
  CHECK(s.captures == 0);
  CHECK(s.reason.find("first run") != std::string::npos);  // captured from the second run on
  for (int step = 1; step < 6; ++step) device.step(wrn_batch(4, static_cast<uint64_t>(step + 1)), 0.05f);
  s = device.capture_status();
  CHECK(s.runs == 6);
  CHECK(s.captures == 1);
  CHECK(s.replays == 4);  // runs 3..6; run 2 was captured (and ran as its replay)
  CHECK(s.uncaptured == 0);
  CHECK(s.reason.empty());
  CHECK(dev.counts().captures == 1);
  CHECK(dev.counts().replays == 5);
  CHECK(capture_line(s) == "capture: step captured once, replayed 4 times");
}

TEST_CASE("capture status: a refused capture keeps the backend's message, and the plan still runs right") {
  // A step hook that says it only queues work but synchronises: the stand-in refuses the
  // synchronisation while capturing (as cudaStreamSynchronize fails in a capture), the
  // executor aborts the capture and runs the steps as issued, then and every run after.
  Graph g = small_wrn();
  const TensorMap feeds{{"input", random_tensor(DataType::Float32, {3, 1, 28, 28}, 9)}};
  const TensorMap want = run_graph(g, feeds, *make_backend("reference"));
  StandinDevice dev(std::set<std::string>{});
  Executor ex(g, dev);
  struct Hooks : StepHooks {
    StandinDevice& dev;
    explicit Hooks(StandinDevice& d) : dev(d) {}
    bool queue_only() const override { return true; }
    void before_step(int step) override {
      if (step == 0 && dev.capturing()) dev.synchronize();
    }
  } hooks(dev);
  RunOptions ro;
  ro.hooks = &hooks;
  for (int run = 0; run < 4; ++run) {
    CAPTURE(run);
    const TensorMap& got = ex.run(feeds, ro);
    for (const auto& [name, t] : want) {
      CAPTURE(name);
      CHECK(bitwise_equal(got.at(name), t));
    }
  }
  const Executor::CaptureStatus s = ex.capture_status();
  CHECK(s.runs == 4);
  CHECK(s.captures == 0);
  CHECK(s.replays == 0);
  CHECK(s.uncaptured == 3);  // tried once (run 2), never again
  CHECK(dev.counts().captures == 0);
  CHECK(s.refused.find("the backend refused the capture") != std::string::npos);
  CHECK(s.refused.find("while capturing") != std::string::npos);  // the stand-in's own message
  CHECK(s.reason == s.refused);
  CHECK(capture_line(s) == "capture: not captured (" + s.refused + ")");
}

TEST_CASE("capture status: each reason a run is not captured is named") {
  Graph g = small_wrn();
  const TensorMap feeds{{"input", random_tensor(DataType::Float32, {2, 1, 28, 28}, 4)}};
  auto reason_of = [&](const Backend& b, ExecutorOptions eo, RunOptions ro) {
    Executor ex(g, b, std::move(eo));
    for (int run = 0; run < 3; ++run) ex.run(feeds, ro);
    const Executor::CaptureStatus s = ex.capture_status();
    CHECK(s.captures == 0);
    CHECK(s.uncaptured == 2);
    return capture_line(s);
  };
  SUBCASE("a host backend") {
    CHECK(reason_of(*make_backend("cpu"), {}, {}) == "capture: not captured (the cpu backend cannot capture)");
    CHECK(reason_of(*make_backend("reference"), {}, {}) ==
          "capture: not captured (the reference backend cannot capture)");
  }
  SUBCASE("capture turned off") {
    StandinDevice dev(std::set<std::string>{});
    ExecutorOptions eo;
    eo.capture = false;
    CHECK(reason_of(dev, eo, {}) == "capture: not captured (capture turned off)");
  }
  SUBCASE("memory the host sees") {
    StandinDevice dev(std::set<std::string>{});
    dev.device_memory = false;
    CHECK(reason_of(dev, {}, {}) == "capture: not captured (the backend's memory is host-visible)");
  }
  SUBCASE("profiling") {
    StandinDevice dev(std::set<std::string>{});
    ProfileCollector prof;
    RunOptions ro;
    ro.profile = &prof;
    CHECK(reason_of(dev, {}, ro) == "capture: not captured (profiling (a synchronisation after each kernel))");
  }
  SUBCASE("an op on the host, named") {
    StandinDevice dev({"Flatten"});
    dev.also_on_host = {"Flatten"};  // a CUDA build too
    const std::string line = reason_of(dev, {}, {});
    CHECK(line.find("capture: not captured (an op runs on the host: '") == 0);
    CHECK(line.find("(Flatten))") != std::string::npos);
  }
}

TEST_CASE("capture status: later runs that are not captured are said after the capture") {
  Executor::CaptureStatus s;
  s.runs = 12, s.captures = 1, s.replays = 1, s.uncaptured = 9, s.reason = "profiling";
  CHECK(capture_line(s) == "capture: step captured once, replayed 1 time; the last run not captured (profiling)");
}

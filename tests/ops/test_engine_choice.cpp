// The engine choice's decision (ops/core/engine_choice.h) with fake timers: what is
// timed when, what is recorded, what a cached choice saves.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "ops/core/engine_choice.h"

using namespace trainrt;

namespace {

EngineKey key(const std::string& problem = "x 8,16,28,28", const std::string& gpu = "Test GPU") {
  return EngineKey{"conv_bias_relu", problem, "fp32", gpu, "9.1.0"};
}

// Times candidate i as ms[i] (negative: fails) and counts its calls.
struct FakeTimer {
  explicit FakeTimer(std::vector<double> times) : ms(std::move(times)) {}
  std::vector<double> ms;
  std::vector<int> calls = std::vector<int>(8, 0);
  TimingPolicy seen;
  EngineChooser::Time fn() {
    return [this](size_t i, const TimingPolicy& p) -> std::optional<double> {
      ++calls.at(i);
      seen = p;
      if (ms.at(i) < 0) return std::nullopt;
      return ms[i];
    };
  }
  int total() const {
    int t = 0;
    for (int c : calls) t += c;
    return t;
  }
};

}  // namespace

TEST_CASE("engine choice: a miss times every candidate once and records the fastest; the next call is a hit") {
  MemoryEngineChooser chooser(TimingPolicy{3, 7});
  FakeTimer t{{0.5, 0.2, 0.9}};
  const std::vector<std::string> cands{"eng0", "eng1_k3=2", "eng7"};
  EngineChoice c = chooser.choose(key(), cands, t.fn());
  REQUIRE(c.index);
  CHECK(*c.index == 1);
  CHECK(c.timed);
  CHECK_FALSE(c.cached);
  CHECK(c.time_ms == 0.2);
  CHECK(t.calls[0] == 1);
  CHECK(t.calls[1] == 1);
  CHECK(t.calls[2] == 1);
  CHECK(t.seen.warmup == 3);  // the policy reaches the timer
  CHECK(t.seen.repeats == 7);
  CHECK(chooser.timed() == 1);
  CHECK(chooser.entries.size() == 1);
  CHECK(chooser.entries.begin()->second == "eng1_k3=2");

  c = chooser.choose(key(), cands, t.fn());
  REQUIRE(c.index);
  CHECK(*c.index == 1);
  CHECK(c.cached);
  CHECK_FALSE(c.timed);
  CHECK(t.total() == 3);  // nothing timed again
  CHECK(chooser.timed() == 1);

  // The same engine at another position of a new list is still found by name.
  c = chooser.choose(key(), {"eng7", "eng1_k3=2"}, t.fn());
  REQUIRE(c.index);
  CHECK(*c.index == 1);
  CHECK(t.total() == 3);

  // Another problem is timed on its own.
  c = chooser.choose(key("x 1,3,4,4"), cands, t.fn());
  CHECK(c.timed);
  CHECK(t.total() == 6);
}

TEST_CASE("engine choice: a stored engine that is no longer a candidate is timed again") {
  MemoryEngineChooser chooser;
  FakeTimer t{{0.4, 0.3}};
  chooser.entries[{"conv_bias_relu", "x 8,16,28,28", "fp32", "Test GPU", "9.1.0"}] = "eng_gone";
  const EngineChoice c = chooser.choose(key(), {"eng0", "eng1"}, t.fn());
  REQUIRE(c.index);
  CHECK(*c.index == 1);
  CHECK(c.timed);
  CHECK(t.total() == 2);
  CHECK(chooser.entries.begin()->second == "eng1");  // replaced
}

TEST_CASE("engine choice: failing candidates are skipped; all failing is reported once and not timed again") {
  MemoryEngineChooser chooser;
  FakeTimer t{{-1, 0.7, -1}};
  EngineChoice c = chooser.choose(key(), {"a", "b", "c"}, t.fn());
  REQUIRE(c.index);
  CHECK(*c.index == 1);

  FakeTimer bad{{-1, -1}};
  c = chooser.choose(key("other"), {"a", "b"}, bad.fn());
  CHECK_FALSE(c.index);
  CHECK(c.why.find("every one of 2 candidate engines failed") != std::string::npos);
  CHECK(chooser.failed() == 1);
  CHECK(chooser.timed() == 1);
  c = chooser.choose(key("other"), {"a", "b"}, bad.fn());
  CHECK_FALSE(c.index);
  CHECK_FALSE(c.timed);
  CHECK(bad.total() == 2);  // not timed again

  c = chooser.choose(key("none"), {}, bad.fn());
  CHECK_FALSE(c.index);
  CHECK(c.why == "no candidate engine");
}

TEST_CASE("engine choice: entries of another GPU or library version are not used") {
  MemoryEngineChooser chooser;
  FakeTimer t{{0.4, 0.3}};
  chooser.choose(key("p", "GPU A"), {"e0", "e1"}, t.fn());
  CHECK(t.total() == 2);
  EngineChoice c = chooser.choose(key("p", "GPU B"), {"e0", "e1"}, t.fn());
  CHECK(c.timed);
  CHECK(t.total() == 4);
  EngineKey newer = key("p", "GPU A");
  newer.library = "9.2.0";
  c = chooser.choose(newer, {"e0", "e1"}, t.fn());
  CHECK(c.timed);
  CHECK(t.total() == 6);
}

TEST_CASE("engine choice: without a timer the stored engine, else the first, and nothing recorded") {
  MemoryEngineChooser chooser;
  EngineChoice c = chooser.choose(key(), {"e0", "e1"}, nullptr);
  REQUIRE(c.index);
  CHECK(*c.index == 0);
  CHECK_FALSE(c.timed);
  CHECK(chooser.entries.empty());
  chooser.entries[{"conv_bias_relu", "x 8,16,28,28", "fp32", "Test GPU", "9.1.0"}] = "e1";
  c = chooser.choose(key(), {"e0", "e1"}, nullptr);
  REQUIRE(c.index);
  CHECK(*c.index == 1);
  CHECK(c.cached);
}

TEST_CASE("engine choice: concurrent calls for one problem time it once") {
  MemoryEngineChooser chooser;
  std::atomic<int> calls{0};
  const EngineChooser::Time slow = [&](size_t i, const TimingPolicy&) -> std::optional<double> {
    ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return 1.0 + static_cast<double>(i);
  };
  std::vector<std::thread> threads;
  std::atomic<int> chose_first{0};
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&] {
      const EngineChoice c = chooser.choose(key(), {"e0", "e1", "e2"}, slow);
      if (c.index && *c.index == 0) ++chose_first;
    });
  for (std::thread& th : threads) th.join();
  CHECK(calls == 3);
  CHECK(chose_first == 4);
  CHECK(chooser.timed() == 1);
}

TEST_CASE("engine choice: bounded autotuning times only the heuristics' first max_candidates") {
  TimingPolicy policy;
  CHECK(policy.max_candidates == 4);  // the default (the CLI's --autotune 4)
  policy.max_candidates = 2;
  MemoryEngineChooser chooser(policy);
  FakeTimer t{{0.5, 0.4, 0.1, 0.05, 0.01}};  // the fastest ones lie beyond the bound
  const std::vector<std::string> cands{"eng0", "eng1", "eng2", "eng3", "eng4"};
  EngineChoice c = chooser.choose(key(), cands, t.fn());
  REQUIRE(c.index);
  CHECK(*c.index == 1);  // the faster of [0, 2)
  CHECK(c.timed);
  CHECK(c.time_ms == 0.4);
  CHECK(t.calls[0] == 1);
  CHECK(t.calls[1] == 1);
  CHECK(t.calls[2] == 0);  // never run
  CHECK(t.calls[3] == 0);
  CHECK(t.calls[4] == 0);
  CHECK(chooser.entries.begin()->second == "eng1");
  // The stored choice is reused: nothing timed again.
  EngineChoice again = chooser.choose(key(), cands, t.fn());
  REQUIRE(again.index);
  CHECK(*again.index == 1);
  CHECK(again.cached);
  CHECK(t.total() == 2);
}

TEST_CASE("engine choice: max_candidates 0 times nothing and takes the heuristics' first") {
  MemoryEngineChooser chooser(TimingPolicy{.max_candidates = 0});
  FakeTimer t{{0.5, 0.1}};
  EngineChoice c = chooser.choose(key(), {"eng0", "eng1"}, t.fn());
  REQUIRE(c.index);
  CHECK(*c.index == 0);
  CHECK_FALSE(c.timed);
  CHECK(t.total() == 0);
  CHECK(chooser.entries.empty());
}

TEST_CASE("engine choice: failures within the bound are all that is tried") {
  MemoryEngineChooser chooser(TimingPolicy{.max_candidates = 2});
  FakeTimer t{{-1, -1, 0.1}};
  EngineChoice c = chooser.choose(key(), {"eng0", "eng1", "eng2"}, t.fn());
  CHECK_FALSE(c.index);
  CHECK(c.why.find("every one of 2 candidate engines failed") != std::string::npos);
  CHECK(t.calls[2] == 0);
}

TEST_CASE("engine filter: numerical notes and the determinism flag decide which engines are kept") {
  const EngineNotes plain{};
  CHECK(keep_engine(plain, false, true).empty());
  CHECK(keep_engine(EngineNotes{.down_converts = true}, true, false).find("down-converting") != std::string::npos);
  CHECK(keep_engine(EngineNotes{.reduced_precision_reduction = true}, true, false).find("reduced-precision") !=
        std::string::npos);
  const EngineNotes tc{.tensor_core = true};
  CHECK(keep_engine(tc, false, false).find("TF32") != std::string::npos);  // strict fp32: no tensor cores
  CHECK(keep_engine(tc, true, false).empty());
  // A split-K weight-gradient engine (NONDETERMINISTIC note): out with --deterministic on only.
  const EngineNotes split_k{.tensor_core = true, .nondeterministic = true};
  CHECK(keep_engine(split_k, true, true).find("non-deterministic") != std::string::npos);
  CHECK(keep_engine(split_k, true, false).empty());
  // The passes over the heuristics' list: deterministic first (then any) when on; one pass when off.
  CHECK(determinism_passes(true) == std::vector<bool>{true, false});
  CHECK(determinism_passes(false) == std::vector<bool>{false});
}

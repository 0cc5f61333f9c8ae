// The timing cache during a run, without a GPU: a stand-in kernel consults
// KernelContext::chooser (ops/core/engine_choice.h) with fake candidates and a fake
// timer, run by the executor with a TimingCacheChooser (runtime/timing_cache.h). The
// first session times each problem once (not once per call) and saves the file with the
// device's GPU name and library version; a second session with that file times nothing.
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "graph/onnx_io.h"
#include "runtime/backend.h"
#include "runtime/executor.h"
#include "runtime/timing_cache.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

// The reference backend, with Relu's kernel wrapped: before it runs, it picks one of three
// fake engines through the context's chooser ("slow" 2 ms, "fast" 1 ms, "broken" fails),
// as a cuDNN kernel does with its engine configs, reporting a fixed GPU and library version.
class ChoosingBackend : public Backend {
 public:
  ChoosingBackend() : Backend("reference", {}) {}
  std::string name() const override { return "choosing"; }
  const Kernel& kernel(const Node& n) const override {
    const Kernel& k = Backend::kernel(n);
    if (n.op_type != "Relu") return k;
    std::lock_guard<std::mutex> lock(mu_);
    if (!relu_)
      relu_ = std::make_unique<Kernel>([this, &k](KernelContext& ctx) {
        const std::vector<std::string> candidates{"slow", "fast", "broken"};
        std::string engine = candidates.front();  // no chooser: the first acceptable
        if (ctx.chooser) {
          const EngineKey key{"Relu.standin", problem_dims(ctx.in(0).dims()), "fp32", "Standin GPU", "1.2.3"};
          const EngineChoice c =
              ctx.chooser->choose(key, candidates, [&](size_t i, const TimingPolicy&) -> std::optional<double> {
                std::lock_guard<std::mutex> l(mu_);
                ++timed[candidates[i]];
                if (candidates[i] == "broken") return std::nullopt;
                return candidates[i] == "slow" ? 2.0 : 1.0;
              });
          REQUIRE(c.index);
          engine = candidates[*c.index];
        }
        {
          std::lock_guard<std::mutex> l(mu_);
          ran.push_back(engine);
        }
        k(ctx);
      });
    return *relu_;
  }
  mutable std::map<std::string, int> timed;  // timing calls per candidate
  mutable std::vector<std::string> ran;      // the engine of each call

 private:
  mutable std::mutex mu_;
  mutable std::unique_ptr<Kernel> relu_;
};

int total(const std::map<std::string, int>& m) {
  int t = 0;
  for (const auto& [name, n] : m) t += n;
  return t;
}

}  // namespace

TEST_CASE("timing cache run: the first session times each problem once and saves; the next one reuses it") {
  TempDir dir;
  const std::string path = dir.file("model.timing-cache.json");
  const Node n = make_node("Relu", {"x"}, {"y"});
  const TensorMap small{{"x", random_tensor(DataType::Float32, {2, 3}, 1)}};
  const TensorMap large{{"x", random_tensor(DataType::Float32, {4, 3}, 2)}};
  const Graph g = single_node_graph(n, small), g_large = single_node_graph(n, large);
  const TensorMap expect = run_graph(g, small, *make_backend("reference"));

  {
    ChoosingBackend backend;
    TimingCacheChooser chooser(TimingCache::load(path, "", ""));
    ExecutorOptions eo;
    eo.chooser = &chooser;
    Executor ex(g, backend, eo);
    CHECK(max_abs_diff(ex.run(small).at("y"), expect.at("y")) == 0);
    ex.run(small);
    ex.run(small);
    CHECK(backend.timed == std::map<std::string, int>{{"broken", 1}, {"fast", 1}, {"slow", 1}});  // once per problem
    CHECK(backend.ran == std::vector<std::string>{"fast", "fast", "fast"});
    Executor ex_large(g_large, backend, eo);  // another problem: timed on its own
    ex_large.run(large);
    CHECK(total(backend.timed) == 6);
    CHECK(chooser.timed() == 2);

    CHECK_FALSE(std::filesystem::exists(path));  // nothing written before the save
    CHECK(chooser.save_if_new() == 2);
    CHECK(dir.count() == 1);            // the file, no temporary
    CHECK(chooser.save_if_new() == 0);  // nothing new: not written again
    CHECK(timing_cache_saved_line(2, path) == "trainrt: timing cache: 2 problems timed, saved to " + path);
  }

  const std::vector<TimingRecord> recs = parse_timing_cache(read_file_bytes(path, 1 << 20), path);
  REQUIRE(recs.size() == 2);
  for (const TimingRecord& r : recs) {
    CHECK(r.key.pattern == "Relu.standin");
    CHECK(r.key.precision == "fp32");
    CHECK(r.gpu == "Standin GPU");
    CHECK(r.cudnn == "1.2.3");
    CHECK(r.entry.engine == "fast");
    CHECK(r.entry.time_ms == 1.0);
  }
  CHECK(recs[0].key.problem == "2x3");
  CHECK(recs[1].key.problem == "4x3");

  {
    ChoosingBackend backend;
    TimingCacheChooser chooser(TimingCache::load(path, "", ""));
    ExecutorOptions eo;
    eo.chooser = &chooser;
    Executor ex(g, backend, eo);
    CHECK(max_abs_diff(ex.run(small).at("y"), expect.at("y")) == 0);
    Executor ex_large(g_large, backend, eo);
    ex_large.run(large);
    CHECK(backend.timed.empty());  // both problems came from the file
    CHECK(backend.ran == std::vector<std::string>{"fast", "fast"});
    CHECK(chooser.timed() == 0);
    CHECK(chooser.save_if_new() == 0);
  }

  {  // Without a chooser nothing is timed: the first acceptable engine, as before.
    ChoosingBackend backend;
    Executor ex(g, backend);
    ex.run(small);
    CHECK(backend.timed.empty());
    CHECK(backend.ran == std::vector<std::string>{"slow"});
  }
}

TEST_CASE("timing cache run: entries of another GPU in the file are kept but not used") {
  TempDir dir;
  const std::string path = dir.file("t.json");
  TimingCache other(path, "Other GPU", "1.2.3");
  other.record({"Relu.standin", "2x3", "fp32"}, {"slow", 0.5});
  other.save();

  const Node n = make_node("Relu", {"x"}, {"y"});
  const TensorMap small{{"x", random_tensor(DataType::Float32, {2, 3}, 1)}};
  ChoosingBackend backend;
  TimingCacheChooser chooser(TimingCache::load(path, "", ""));
  ExecutorOptions eo;
  eo.chooser = &chooser;
  Executor ex(single_node_graph(n, small), backend, eo);
  ex.run(small);
  CHECK(total(backend.timed) == 3);
  CHECK(backend.ran == std::vector<std::string>{"fast"});
  CHECK(chooser.save_if_new() == 1);
  const std::vector<TimingRecord> recs = parse_timing_cache(read_file_bytes(path, 1 << 20), path);
  REQUIRE(recs.size() == 2);  // the other GPU's entry stays
  CHECK(recs[0].gpu == "Other GPU");
  CHECK(recs[0].entry.engine == "slow");
  CHECK(recs[1].gpu == "Standin GPU");
  CHECK(recs[1].entry.engine == "fast");
}

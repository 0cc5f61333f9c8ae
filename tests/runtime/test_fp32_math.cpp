// --fp32-math's and --deterministic's way to the kernels: the process defaults
// (ops/core/kernel.h set_default_fp32_math, set_default_deterministic) reach every
// KernelContext the executor builds, seen by a backend that records what its (reference)
// kernels receive.
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/backend.h"
#include "runtime/executor.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

// The reference kernels, each wrapped to record KernelContext::fp32 before it runs.
class RecordingBackend : public Backend {
 public:
  RecordingBackend() : Backend("reference", {}) {}
  std::string name() const override { return "recording"; }
  const Kernel& kernel(const Node& n) const override {
    const Kernel& k = Backend::kernel(n);
    std::lock_guard<std::mutex> lock(mu_);
    std::unique_ptr<Kernel>& w = wrapped_[&k];
    if (!w)
      w = std::make_unique<Kernel>([this, &k](KernelContext& ctx) {
        {
          std::lock_guard<std::mutex> l(mu_);
          seen.push_back(ctx.fp32);
          seen_deterministic.push_back(ctx.deterministic);
        }
        k(ctx);
      });
    return *w;
  }
  mutable std::vector<Fp32Math> seen;
  mutable std::vector<bool> seen_deterministic;

 private:
  mutable std::mutex mu_;
  mutable std::map<const Kernel*, std::unique_ptr<Kernel>> wrapped_;
};

// Restores the process default when a test ends, whatever it set.
struct DefaultGuard {
  Fp32Math saved = default_fp32_math();
  bool saved_deterministic = default_deterministic();
  ~DefaultGuard() {
    set_default_fp32_math(saved);
    set_default_deterministic(saved_deterministic);
  }
};

}  // namespace

TEST_CASE("fp32 math: the process default reaches every kernel context the executor builds") {
  DefaultGuard guard;
  const Node n = make_node("Gemm", {"a", "b"}, {"y"});
  const TensorMap feeds{{"a", random_tensor(DataType::Float32, {3, 4}, 1)},
                        {"b", random_tensor(DataType::Float32, {4, 2}, 2)}};
  const Graph g = single_node_graph(n, feeds);
  RecordingBackend backend;

  CHECK(default_fp32_math() == Fp32Math::strict);  // a library user gets the reference's arithmetic
  const TensorMap strict = run_graph(g, feeds, backend);
  REQUIRE(backend.seen.size() == 1);
  CHECK(backend.seen[0] == Fp32Math::strict);

  set_default_fp32_math(Fp32Math::tf32);
  const TensorMap tf32 = run_graph(g, feeds, backend);
  REQUIRE(backend.seen.size() == 2);
  CHECK(backend.seen[1] == Fp32Math::tf32);
  // Host kernels ignore it: the reference's result is the same bit for bit.
  CHECK(max_abs_diff(strict.at("y"), tf32.at("y")) == 0);

  set_default_fp32_math(Fp32Math::strict);
  run_graph(g, feeds, backend);
  CHECK(backend.seen.back() == Fp32Math::strict);
}

TEST_CASE("fp32 math: names") {
  CHECK(std::string(fp32_math_name(Fp32Math::tf32)) == "tf32");
  CHECK(std::string(fp32_math_name(Fp32Math::strict)) == "strict");
}

TEST_CASE("determinism: the process default reaches every kernel context the executor builds") {
  DefaultGuard guard;
  const Node n = make_node("Gemm", {"a", "b"}, {"y"});
  const TensorMap feeds{{"a", random_tensor(DataType::Float32, {3, 4}, 1)},
                        {"b", random_tensor(DataType::Float32, {4, 2}, 2)}};
  const Graph g = single_node_graph(n, feeds);
  RecordingBackend backend;

  CHECK(default_deterministic());  // a library user gets deterministic engines unless it asks
  const TensorMap on = run_graph(g, feeds, backend);
  REQUIRE(backend.seen_deterministic.size() == 1);
  CHECK(backend.seen_deterministic[0]);

  set_default_deterministic(false);  // the CLI's train, bench and evaluate default
  const TensorMap off = run_graph(g, feeds, backend);
  REQUIRE(backend.seen_deterministic.size() == 2);
  CHECK_FALSE(backend.seen_deterministic[1]);
  // Host kernels ignore it: the reference's result is the same bit for bit.
  CHECK(max_abs_diff(on.at("y"), off.at("y")) == 0);
}

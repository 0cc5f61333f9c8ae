// The executor's contract with an asynchronous device backend (the cuda backend's
// shape), checked on the CPU with a stand-in: DeviceDouble queues every kernel call and
// copy and runs them only at synchronize(), as a CUDA stream would, and its kernels
// refuse memory that allocate() did not hand out, as a device kernel would fault on it.
// Ops named as host ops run through Backend::on_host, the way the cuda backend runs ops
// that have no CUDA kernel. Everything the executor, the training session and the
// data-parallel code do around a GPU (stage host batches and constants into backend
// memory, synchronise before NaN checks, step hooks, host kernels and results, keep state
// in backend memory) is exercised here; only the CUDA calls themselves are not.
//
// The double's kernels are the reference kernels, so every result must equal the
// reference backend's bit for bit: a read the executor did not synchronise first sees a
// value whose kernel has not run yet, and the comparison fails.
#include <algorithm>
#include <cstring>
#include <set>

#include "runtime/data_parallel.h"
#include "runtime_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

class DeviceDouble : public Backend {
 public:
  explicit DeviceDouble(std::set<std::string> host_ops = {})
      : Backend("reference", {}), host_ops_(std::move(host_ops)) {
    blocked_layouts = false;
  }
  std::string name() const override { return "device-double"; }
  bool asynchronous() const override { return true; }

  const Kernel& kernel(const Node& n) const override {
    const Kernel* ref = registry().kernels.find("reference", n.domain, n.op_type);
    if (!ref) throw_unsupported("device-double", "no kernel for " + n.op_type);
    if (host_ops_.count(n.op_type)) return on_host(*ref);
    std::lock_guard<std::mutex> lock(mu_);
    std::unique_ptr<Kernel>& k = queued_kernels_[ref];
    if (!k)
      k = std::make_unique<Kernel>([this, ref](KernelContext& ctx) {
        for (const Tensor* t : ctx.inputs)
          if (t && t->nbytes() && !owns(t->raw()))
            throw_internal("device-double", "node '" + ctx.node.name + "' was given an input in host memory");
        for (const Tensor* t : ctx.outputs)
          if (t && t->nbytes() && !owns(t->raw()))
            throw_internal("device-double", "node '" + ctx.node.name + "' was given an output in host memory");
        if (ctx.node.op_type == fail_op) throw_internal("device-double", "launch of " + fail_op + " failed");
        {
          std::lock_guard<std::mutex> lock(mu_);
          ++launched_;
        }
        KernelContext launched = ctx;  // the arguments as they were at the launch
        enqueue([ref, launched]() mutable { (*ref)(launched); });
      });
    return *k;
  }

  std::shared_ptr<std::byte[]> allocate(size_t bytes) const override {
    std::shared_ptr<std::byte[]> p = Backend::allocate(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    regions_.push_back({p.get(), p.get() + std::max<size_t>(bytes, 1)});
    return p;
  }
  bool reaches(const void* p) const override { return owns(p); }
  void copy(void* to, const void* from, size_t bytes) const override {
    // Staged at the call (cudaMemcpyAsync from pageable memory), landed in stream order.
    std::vector<std::byte> staged(static_cast<const std::byte*>(from), static_cast<const std::byte*>(from) + bytes);
    enqueue([to, staged] {
      if (!staged.empty()) std::memcpy(to, staged.data(), staged.size());
    });
  }
  void synchronize() const override {
    std::vector<std::function<void()>> work;
    {
      std::lock_guard<std::mutex> lock(mu_);
      work.swap(pending_);
      ++syncs_;
    }
    for (auto& f : work) f();
  }

  size_t available_bytes() const override { return budget; }
  std::string available_source() const override { return "the double's budget"; }
  size_t budget = size_t{1} << 40;
  std::string fail_op;  // kernels of this op type fail at launch

  size_t launched() const {
    std::lock_guard<std::mutex> lock(mu_);
    return launched_;
  }

  size_t pending() const {
    std::lock_guard<std::mutex> lock(mu_);
    return pending_.size();
  }
  size_t syncs() const {
    std::lock_guard<std::mutex> lock(mu_);
    return syncs_;
  }
  bool owns(const void* p) const {
    std::lock_guard<std::mutex> lock(mu_);
    const auto* b = static_cast<const std::byte*>(p);
    return std::any_of(regions_.begin(), regions_.end(), [&](const auto& r) { return b >= r.first && b < r.second; });
  }

 private:
  void enqueue(std::function<void()> f) const {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(std::move(f));
  }
  std::set<std::string> host_ops_;
  mutable std::mutex mu_;
  mutable std::map<const Kernel*, std::unique_ptr<Kernel>> queued_kernels_;
  mutable std::vector<std::pair<const std::byte*, const std::byte*>> regions_;
  mutable std::vector<std::function<void()>> pending_;
  mutable size_t syncs_ = 0;
  mutable size_t launched_ = 0;
};

// Ops of the fused Wide ResNet training graph that the double runs on the host.
const std::set<std::string> kHostOps{"MaxPool", "Sum", "SumToShape", "Flatten"};

}  // namespace

TEST_CASE("device double: kernels really wait for synchronize(), and refuse host memory") {
  // The control for every test below: without a synchronize() nothing has happened yet.
  DeviceDouble d;
  Node relu = make_node("Relu", {"x"}, {"y"});
  relu.name = "relu";
  Tensor x(DataType::Float32, {4}, d.allocate(16)), y(DataType::Float32, {4}, d.allocate(16));
  for (int i = 0; i < 4; ++i) x.data<float>()[i] = static_cast<float>(i) - 1.5f, y.data<float>()[i] = 7.f;
  KernelContext ctx{relu, {&x}, {&y}};
  d.kernel(relu)(ctx);
  CHECK(y.data<float>()[3] == 7.f);
  CHECK(d.pending() == 1);
  d.synchronize();
  CHECK(y.data<float>()[0] == 0.f);
  CHECK(y.data<float>()[3] == 1.5f);
  Tensor host(DataType::Float32, {4});
  KernelContext bad{relu, {&host}, {&y}};
  CHECK(error_of([&] { d.kernel(relu)(bad); }).find("input in host memory") != std::string::npos);
}

TEST_CASE("device backend: training steps equal the reference backend's bit for bit (staging, syncs, host ops)") {
  Graph g = small_wrn();
  auto owned = std::make_unique<DeviceDouble>(kHostOps);
  DeviceDouble& dev = *owned;
  TrainingSession device(wrn_training(g), std::move(owned), {.seed = 3});
  TrainingSession ref(wrn_training(g), make_backend("reference"), {.seed = 3});
  // The state lives in the backend's memory from the start.
  for (const std::string& name : device.state_names()) CHECK(dev.owns(device.state(name).raw()));
  // A gradient read by a step hook (as the data-parallel code packs buckets) must be its
  // value of this step, so the executor has to synchronise before the hook.
  const std::string grad = device.training().gradients.at(device.training().params[0]);
  Tensor seen_device, seen_ref;
  auto hook = [grad](TrainingSession& s, Tensor& seen) {
    return [&s, &seen, grad](int step) {
      const Plan& p = s.plan();
      const int v = p.index.at(grad);
      if (p.values[static_cast<size_t>(v)].def == step) seen = s.value(grad).clone();
    };
  };
  device.set_after_step(hook(device, seen_device));
  ref.set_after_step(hook(ref, seen_ref));
  for (int step = 0; step < 3; ++step) {
    const TensorMap b = wrn_batch(4, static_cast<uint64_t>(step + 1));  // host memory: staged
    const double a = device.step(b, 0.05f), c = ref.step(b, 0.05f);
    CHECK(a == c);
    CHECK(dev.pending() == 0);  // the run ended synchronised: state is the host's to read
    REQUIRE(!seen_device.empty());
    CHECK(bitwise_equal(seen_device, seen_ref));
  }
  CHECK(dev.syncs() > 3);
  for (const std::string& name : ref.state_names()) {
    CAPTURE(name);
    CHECK(bitwise_equal(device.state(name), ref.state(name)));
  }
}

TEST_CASE("device backend: a NaN is found after its kernel ran, and stops the step with state unchanged") {
  Graph g = small_wrn();
  TrainingSession device(wrn_training(g), std::make_unique<DeviceDouble>(kHostOps), {.seed = 1});
  TensorMap b = wrn_batch(4, 5);
  device.step(b, 0.05f);
  std::map<std::string, Tensor> before;
  for (const std::string& name : device.state_names()) before[name] = device.state(name).clone();
  b.at("input").data<float>()[17] = std::nanf("");
  const std::string e = error_of([&] { device.step(b, 0.05f); });
  CHECK(e.find("NaN") != std::string::npos);
  for (const std::string& name : device.state_names()) {
    CAPTURE(name);
    CHECK(bitwise_equal(device.state(name), before.at(name)));
  }
}

TEST_CASE("device backend: inference results and constants come back right, results in backend memory") {
  Graph g = small_wrn();
  DeviceDouble dev({"Flatten"});
  const TensorMap feeds{{"input", random_tensor(DataType::Float32, {3, 1, 28, 28}, 9)}};
  const TensorMap want = run_graph(g, feeds, *make_backend("reference"));
  Executor ex(g, dev);
  for (int run = 0; run < 2; ++run) {  // the second run reuses the staged buffers
    const TensorMap& got = ex.run(feeds);
    for (const auto& [name, t] : want) {
      CAPTURE(name);
      CHECK(bitwise_equal(got.at(name), t));
      CHECK(dev.owns(got.at(name).raw()));
    }
  }
  CHECK(dev.pending() == 0);
}

TEST_CASE("device backend: data-parallel ranks equal reference ranks bit for bit (buckets in backend memory)") {
  Graph g = small_wrn();
  std::map<std::string, Tensor> results[2];
  for (int variant = 0; variant < 2; ++variant) {
    LocalGroup group(2);
    std::mutex mu;
    std::vector<std::thread> threads;
    std::vector<std::exception_ptr> errors(2);
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        try {
          auto c = group.communicator(r);
          std::unique_ptr<Backend> b = variant == 0 ? std::unique_ptr<Backend>(std::make_unique<DeviceDouble>(kHostOps))
                                                    : make_backend("reference");
          TrainingSession s(wrn_training(g), std::move(b), {.seed = static_cast<uint64_t>(5 + r)});
          DataParallel dp(s, *c, {.bucket_cap_bytes = 8 << 10, .first_bucket_cap_bytes = 1 << 10});
          dp.broadcast_state();
          for (int step = 0; step < 3; ++step) dp.step(wrn_batch(4, static_cast<uint64_t>(10 * step + r)), 0.05f);
          CHECK(dp.state_identical());
          if (r == 0) {
            std::lock_guard<std::mutex> lock(mu);
            for (const std::string& name : s.state_names()) results[variant][name] = s.state(name).clone();
          }
        } catch (...) {
          errors[static_cast<size_t>(r)] = std::current_exception();
        }
      });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  }
  REQUIRE(!results[1].empty());
  for (const auto& [name, t] : results[1]) {
    CAPTURE(name);
    CHECK(bitwise_equal(results[0].at(name), t));
  }
}

TEST_CASE("an asynchronous backend runs the kernels it lacks on the host, after synchronize()") {
  // The cuda backend's fallback path: a kernel set without Relu, falling back to the
  // reference set, must hand out a wrapper that waits for the queued work first.
  struct Async : Backend {
    Async() : Backend("no-such-kernel-set", {"reference"}) {}
    std::string name() const override { return "async"; }
    bool asynchronous() const override { return true; }
    void synchronize() const override { ++syncs; }
    mutable int syncs = 0;
  } b;
  Node relu = make_node("Relu", {"x"}, {"y"});
  Tensor x = make(DataType::Float32, {2}, {-1, 2}), y(DataType::Float32, {2});
  KernelContext ctx{relu, {&x}, {&y}};
  const Kernel& k = b.kernel(relu);
  CHECK(&k == &b.kernel(relu));  // one wrapper per kernel, kept
  k(ctx);
  CHECK(b.syncs == 1);
  CHECK(y.data<float>()[1] == 2.f);
  const std::vector<std::string> host = b.fallback_ops();
  CHECK(std::find(host.begin(), host.end(), "Relu") != host.end());
}

TEST_CASE("device backend: a plan larger than the backend's free memory is refused before allocating") {
  Graph g = small_wrn();
  DeviceDouble dev;
  dev.budget = 1 << 16;  // 64 KiB: far below the arena of a batch of 4
  Executor ex(g, dev);
  const std::string e = error_of([&] { ex.run({{"input", random_tensor(DataType::Float32, {4, 1, 28, 28}, 1)}}); });
  CHECK(e.find("memory plan: needs") != std::string::npos);
  CHECK(e.find("(the double's budget): use a smaller batch") != std::string::npos);
  CHECK(dev.pending() == 0);
}

TEST_CASE("device backend: a run stopped by an exception leaves no kernel queued") {
  // The trainer reads state or writes a checkpoint after a failed step: nothing queued
  // may still be writing then. A launch failure of the first MaxPool stops the run while
  // the convolutions before it are still queued.
  Graph g = small_wrn();
  DeviceDouble dev;
  dev.fail_op = "MaxPool";
  Executor ex(g, dev);
  const TensorMap feeds{{"input", random_tensor(DataType::Float32, {2, 1, 28, 28}, 3)}};
  CHECK(error_of([&] { ex.run(feeds); }).find("launch of MaxPool failed") != std::string::npos);
  CHECK(dev.launched() > 3);  // kernels were queued when the failure came
  CHECK(dev.pending() == 0);
}

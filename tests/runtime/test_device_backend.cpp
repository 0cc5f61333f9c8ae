// The executor's contract with an asynchronous device backend (the cuda backend's
// shape), checked on the CPU with a strict stand-in (standin_device.h): it queues every
// kernel, copy and NaN/Inf check and runs them only at synchronize(), as a CUDA stream
// would; its kernels refuse memory that allocate() did not hand out; memory that queued
// work touches is PROT_NONE until synchronize(), so a host access the executor did not
// synchronise first faults; ops without a "cuda" kernel in the registry run through
// Backend::on_host, the way the cuda backend runs its fallbacks. Everything the
// executor and the training session do around a GPU (stage host batches and constants
// into backend memory, check NaN/Inf on the device, synchronise only before state
// writes, for step hooks that read, host kernels and results, keep state in backend
// memory) is exercised here; only the CUDA calls themselves are not. The data-parallel
// code on the stand-in: tests/distribution/test_device_data_parallel.cpp.
//
// The stand-in's kernels are the reference kernels, so every result must equal the
// reference backend's bit for bit.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "graph/tsan.h"
#include "passes/fuse_util.h"
#include "passes/passes.h"
#include "runtime_util.h"
#include "standin_device.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

// Whether `f`, run in a child process, dies of a memory fault (or any other failure):
// false when it returns normally.
bool faults_in_child(const std::function<void()>& f) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    struct sigaction sa {};
    sa.sa_handler = [](int) { _exit(42); };
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
    f();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// The permissions /proc/self/maps gives the mapping holding `p` ("rw-p", "---p"), or "".
std::string mapping_permissions(const void* p) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const auto at = reinterpret_cast<uintptr_t>(p);
  while (std::getline(maps, line)) {
    uintptr_t lo = 0, hi = 0;
    char perms[8] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %7s", &lo, &hi, perms) == 3 && at >= lo && at < hi) return perms;
  }
  return "";
}

}  // namespace

namespace {
// `t` fused as a TrainingSession on an asynchronous backend fuses it.
TrainingGraph device_fused(TrainingGraph t) {
  fuse_training_graph(t.graph);
  passes::fuse_relu_grad_into_bn_grad(t.graph);
  return t;
}
}  // namespace

TEST_CASE("stand-in device: kernels really wait for synchronize(), and refuse host memory") {
  // The control for every test below: without a synchronize() nothing has happened yet
  // (read here with the protection off, which otherwise forbids the read).
  StandinDevice d;
  d.protect_memory = false;
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

TEST_CASE("stand-in device: device memory faults on any host access; copies and host kernels reach it") {
  // As cudaMalloc memory: the host never reads or writes what allocate() hands out, before
  // or after synchronize(); copy() into host memory is the way to see it.
  StandinDevice d;
  REQUIRE(!d.host_visible());
  Tensor x(DataType::Float32, {4}, d.allocate(16)), y(DataType::Float32, {4}, d.allocate(16));
  CHECK(mapping_permissions(x.raw()).substr(0, 3) == "---");
  volatile float* px = x.data<float>();
  CHECK(faults_in_child([px] { (void)px[0]; }));
  CHECK(faults_in_child([px] { px[0] = 1.f; }));
  const Tensor in = make(DataType::Float32, {4}, {-1.5f, -0.5f, 0.5f, 1.5f});
  d.copy(x.raw(), in.raw(), 16);
  Node relu = make_node("Relu", {"x"}, {"y"});
  relu.name = "relu";
  KernelContext ctx{relu, {&x}, {&y}};
  d.kernel(relu)(ctx);
  d.synchronize();
  CHECK(mapping_permissions(y.raw()).substr(0, 3) == "---");  // closed again after the queue ran
  volatile float* py = y.data<float>();
  CHECK(faults_in_child([py] { (void)py[3]; }));
  const Tensor h = d.to_host(y);
  CHECK(!d.owns(h.raw()));
  CHECK(h.data<float>()[0] == 0.f);
  CHECK(h.data<float>()[3] == 1.5f);
  // A host kernel (an op without a cuda kernel) runs on staged copies: in place too.
  Node neg = make_node("Neg", {"y"}, {"y"});
  neg.name = "neg";
  StandinDevice host_neg({"Neg"});
  if (!StandinDevice::have_cuda_kernels() || host_neg.runs_on_host("", "Neg")) {
    Tensor z(DataType::Float32, {4}, host_neg.allocate(16));
    host_neg.copy(z.raw(), in.raw(), 16);
    KernelContext nctx{neg, {&z}, {&z}};
    host_neg.kernel(neg)(nctx);
    CHECK(host_neg.counts().host_calls.at("Neg") == 1);
    const Tensor hz = host_neg.to_host(z);
    CHECK(hz.data<float>()[0] == 1.5f);
    CHECK(hz.data<float>()[3] == -1.5f);
  }
  // Pinned host memory (allocate_host) is read when the copy runs, pageable memory at the call.
  std::shared_ptr<std::byte[]> pinned = d.allocate_host(16);
  Tensor pageable = in.clone();
  std::memcpy(pinned.get(), in.raw(), 16);
  d.copy(x.raw(), pinned.get(), 16);
  d.copy(y.raw(), pageable.raw(), 16);
  reinterpret_cast<float*>(pinned.get())[0] = 42.f;
  pageable.data<float>()[0] = 42.f;
  d.synchronize();
  CHECK(d.to_host(x).data<float>()[0] == 42.f);
  CHECK(d.to_host(y).data<float>()[0] == -1.5f);
}

TEST_CASE("stand-in device: streams run on threads of their own, ordered only by events") {
  // A copy on the copy stream, then a kernel on the compute stream that reads what it
  // wrote. The copy stream is made to run as late as its events allow: with the event
  // the kernel sees the copy; without it (ignore_waits, the control) the old bytes.
  using S = Backend::Stream;
  const Tensor in = make(DataType::Float32, {4}, {-1.5f, -0.5f, 0.5f, 1.5f});
  const Tensor old = make(DataType::Float32, {4}, {3.f, 3.f, 3.f, 3.f});
  Node relu = make_node("Relu", {"x"}, {"y"});
  relu.name = "relu";
  for (bool ordered : {true, false}) {
    CAPTURE(ordered);
    StandinDevice d;
    d.late_stream = S::copy;
    d.ignore_waits = !ordered;
    Tensor x(DataType::Float32, {4}, d.allocate(16)), y(DataType::Float32, {4}, d.allocate(16));
    d.copy(x.raw(), old.raw(), 16);
    d.synchronize();
    std::shared_ptr<std::byte[]> pinned = d.allocate_host(16);
    std::memcpy(pinned.get(), in.raw(), 16);
    d.copy_on(S::copy, x.raw(), pinned.get(), 16);
    d.wait(S::compute, d.record(S::copy));
    KernelContext ctx{relu, {&x}, {&y}};
    d.kernel(relu)(ctx);
    CHECK(d.pending() == (ordered ? 4u : 3u));  // copy, record, (wait,) kernel
    d.synchronize();
    const Tensor h = d.to_host(y);
    CHECK(h.data<float>()[3] == (ordered ? 1.5f : 3.f));
    CHECK(h.data<float>()[0] == (ordered ? 0.f : 3.f));
    CHECK(d.counts().records == 1);
    CHECK(d.counts().waits == 1);
  }
  // A stream whose work fails still reaches its events, so a stream waiting on it does not
  // hang; synchronize() reports the failure.
  StandinDevice d;
  d.fail_when_run = "Relu";
  Tensor x(DataType::Float32, {4}, d.allocate(16)), y(DataType::Float32, {4}, d.allocate(16));
  d.copy(x.raw(), in.raw(), 16);
  KernelContext ctx{relu, {&x}, {&y}};
  d.kernel(relu)(ctx);
  d.wait(S::copy, d.record(S::compute));
  std::shared_ptr<std::byte[]> out = d.allocate_host(16);
  d.copy_on(S::copy, out.get(), y.raw(), 16);
  CHECK(error_of([&] { d.synchronize(); }).find("kernel of Relu failed") != std::string::npos);
  CHECK(d.pending() == 0);
}

TEST_CASE("stand-in device: capture records work instead of running it; replay runs it with memory as it is then") {
  using S = Backend::Stream;
  StandinDevice d;
  Node relu = make_node("Relu", {"x"}, {"y"});
  relu.name = "relu";
  Tensor x(DataType::Float32, {4}, d.allocate(16)), y(DataType::Float32, {4}, d.allocate(16));
  std::shared_ptr<std::byte[]> in = d.allocate_host(16), out = d.allocate_host(16);
  const Tensor pageable = make(DataType::Float32, {4}, {1.f, 2.f, 3.f, 4.f});
  d.begin_capture();
  d.copy_on(S::copy, x.raw(), in.get(), 16);  // pinned: allowed, read when it runs
  d.wait(S::compute, d.record(S::copy));
  KernelContext ctx{relu, {&x}, {&y}};
  d.kernel(relu)(ctx);
  d.copy(out.get(), y.raw(), 16);
  // What CUDA refuses while capturing.
  CHECK(error_of([&] { d.synchronize(); }).find("synchronize() while capturing") != std::string::npos);
  CHECK(error_of([&] { (void)d.allocate(16); }).find("allocate() while capturing") != std::string::npos);
  CHECK(error_of([&] { (void)d.allocate_host(16); }).find("while capturing") != std::string::npos);
  CHECK(error_of([&] { d.copy(x.raw(), pageable.raw(), 16); }).find("pageable") != std::string::npos);
  const Backend::Captured g = d.end_capture();
  CHECK(d.pending() == 0);  // recorded, not queued
  for (float base : {-2.f, 5.f}) {
    for (int i = 0; i < 4; ++i) reinterpret_cast<float*>(in.get())[i] = base + static_cast<float>(i);
    d.replay(g);
    d.synchronize();
    for (int i = 0; i < 4; ++i)
      CHECK(reinterpret_cast<float*>(out.get())[i] == std::max(0.f, base + static_cast<float>(i)));
  }
  CHECK(d.counts().captures == 1);
  CHECK(d.counts().replays == 2);
  // An aborted capture leaves nothing behind.
  d.begin_capture();
  d.kernel(relu)(ctx);
  d.abort_capture();
  CHECK(!d.capturing());
  CHECK(d.pending() == 0);
}

TEST_CASE("stand-in device: managed memory faults on a host access while queued work touches it") {
  StandinDevice d;
  d.device_memory = false;
  Node relu = make_node("Relu", {"x"}, {"y"});
  relu.name = "relu";
  Tensor x(DataType::Float32, {4}, d.allocate(16)), y(DataType::Float32, {4}, d.allocate(16)),
      other(DataType::Float32, {4}, d.allocate(16));
  for (int i = 0; i < 4; ++i) x.data<float>()[i] = static_cast<float>(i) - 1.5f;
  CHECK(mapping_permissions(y.raw()).substr(0, 2) == "rw");
  KernelContext ctx{relu, {&x}, {&y}};
  d.kernel(relu)(ctx);
  REQUIRE(d.is_protected(y.raw()));
  CHECK(d.is_protected(x.raw()));
  CHECK(!d.is_protected(other.raw()));  // untouched memory stays the host's
  CHECK(mapping_permissions(y.raw()).substr(0, 3) == "---");
  CHECK(mapping_permissions(x.raw()).substr(0, 3) == "---");
  volatile float* py = y.data<float>();
  CHECK(faults_in_child([py] { (void)py[1]; }));               // a read of a queued kernel's output
  CHECK(faults_in_child([&x] { x.data<float>()[0] = 1.f; }));  // a write of its input
  CHECK(!faults_in_child([&other] { other.data<float>()[0] = 1.f; }));
  d.synchronize();
  CHECK(!d.is_protected(y.raw()));
  CHECK(mapping_permissions(y.raw()).substr(0, 2) == "rw");
  CHECK(!faults_in_child([py] { (void)py[1]; }));
  CHECK(y.data<float>()[3] == 1.5f);
}

TEST_CASE("device backend: training steps equal the reference backend's bit for bit (staging, syncs, host ops)") {
  Graph g = small_wrn();
  auto owned = std::make_unique<StandinDevice>(kWrnHostOps);
  StandinDevice& dev = *owned;
  dev.late_stream = Backend::Stream::copy;  // the batch copies land as late as their event allows
  TrainingSession device(wrn_training(g), std::move(owned), {.seed = 3});
  TrainingSession ref(wrn_training(g), make_backend("reference"), {.seed = 3});
  // The state lives in the backend's memory from the start; state() hands out host copies.
  for (const std::string& name : device.state_names()) {
    CHECK(dev.owns(device.training().graph.initializers.at(name).raw()));
    CHECK(!dev.owns(device.state(name).raw()));
  }
  // A gradient read by a step hook (as the data-parallel code packs buckets) must be its
  // value of this step, so the executor has to synchronise before the hook.
  const std::string grad = device.training().gradients.at(device.training().params[0]);
  Tensor seen_device, seen_ref;
  auto hook = [grad](TrainingSession& s, Tensor& seen) {
    return [&s, &seen, grad](int step) {
      const Plan& p = s.plan();
      const int v = p.index.at(grad);
      if (p.values[static_cast<size_t>(v)].def == step) seen = s.backend().to_host(s.value(grad)).clone();
    };
  };
  AfterEachStep device_hooks(hook(device, seen_device)), ref_hooks(hook(ref, seen_ref));
  device.set_step_hooks(&device_hooks);
  ref.set_step_hooks(&ref_hooks);
  for (int step = 0; step < 3; ++step) {
    const TensorMap b = wrn_batch(4, static_cast<uint64_t>(step + 1));  // host memory: staged
    const double a = device.step(b, 0.05f), c = ref.step(b, 0.05f);
    CHECK(a == c);
    // Kernels all ran; what may still be queued are copies into the state (the running
    // statistics' updates), which state() reads after in stream order.
    CHECK(dev.counts().launched > 0);
    // With the cuda kernels' declared layouts the activations between them are NHWC.
    CHECK((dev.counts().laid_out > 0) == StandinDevice::have_cuda_kernels());
    REQUIRE(!seen_device.empty());
    CHECK(bitwise_equal(seen_device, seen_ref));
  }
  for (const std::string& name : ref.state_names()) {
    CAPTURE(name);
    CHECK(bitwise_equal(device.state(name), ref.state(name)));
  }
}

TEST_CASE("device backend: convolutions launched with KRSC weight copies made once per step; dW comes back KCRS") {
  // The cuda convolutions declare their filters Converted: the plan copies each 3x3
  // weight into a KRSC (ChannelsLast) value once per step, 16-bit under bf16, and turns
  // the KRSC weight gradients back into the parameters' row-major gradients, both by
  // Identity nodes. Under bf16 the filters whose layout needs no copy (the first
  // convolution's, one input channel; the 1x1 skips') get a Plain 16-bit copy too
  // ("W/narrow"), so every convolution reads a weight rounded once per step. On the
  // stand-in the Identity is the reference's copy between layouts, so the steps equal the
  // reference backend's bit for bit, in fp32 and bf16.
  const Graph g = small_wrn();
  for (MathPrecision m : {MathPrecision::fp32, MathPrecision::bf16}) {
    const std::string precision = math_precision_name(m);
    CAPTURE(precision);
    auto owned = std::make_unique<StandinDevice>();
    StandinDevice& dev = *owned;
    TrainingSession device(wrn_training(g), std::move(owned), {.seed = 3, .math = m});
    TrainingSession ref(wrn_training(g), make_backend("reference"), {.seed = 3, .math = m});
    const std::set<std::string> params(device.training().params.begin(), device.training().params.end());
    for (int step = 0; step < 3; ++step) {
      dev.reset_counts();
      const TensorMap b = wrn_batch(4, static_cast<uint64_t>(step + 1));
      CHECK(device.step(b, 0.05f) == ref.step(b, 0.05f));
      if (!StandinDevice::have_cuda_kernels()) continue;
      const Plan& p = device.plan();
      const bool narrow = m != MathPrecision::fp32;
      size_t copies = 0, narrow_copies = 0, w_reads = 0, narrow_reads = 0, param_reads = 0, dw_writes = 0;
      auto ends = [](const std::string& v, const std::string& tail) {
        return v.size() > tail.size() && v.compare(v.size() - tail.size(), tail.size(), tail) == 0;
      };
      auto count_read = [&](const std::string& w) {
        w_reads += ends(w, "/blocked");
        narrow_reads += ends(w, "/narrow");
        param_reads += params.count(w);
      };
      for (const PlanStep& st : p.steps) {
        const Node& n = p.graph.nodes[st.node];
        if (n.op_type == "Identity" && params.count(n.inputs[0])) {
          const bool plain = ends(n.outputs[0], "/narrow");
          ++copies;
          narrow_copies += plain;
          CHECK(device.value(n.outputs[0]).layout() == (plain ? Layout::Plain : Layout::ChannelsLast));
          CHECK(device.value(n.outputs[0]).narrowed() == narrow);
        }
        if (n.op_type == "Conv" || n.op_type == "FusedConv") count_read(n.inputs[1]);
        if (n.op_type == "ConvGrad") {
          if (n.has_output(0)) count_read(n.inputs[2]);
          dw_writes += n.has_output(1) && ends(n.outputs[1], "/blocked");
        }
      }
      // One per 3x3 weight over C > 1, not one per reader; under bf16 also one per filter
      // whose layout needs no copy (the first convolution's and the three 1x1 skips').
      CHECK(copies == (narrow ? 16u : 12u));
      CHECK(narrow_copies == (narrow ? 4u : 0u));
      CHECK(w_reads == 24);  // their 12 forward convolutions and 12 data gradients read them
      // The first convolution (no data gradient) and the skips' forwards and data
      // gradients: under bf16 from the 16-bit copy, in fp32 from the parameter.
      CHECK(narrow_reads == (narrow ? 7u : 0u));
      CHECK(param_reads == (narrow ? 0u : 7u));
      CHECK(dw_writes == 12);  // and as many filter gradients are written KRSC
      const StandinDevice::Counts c = dev.counts();
      if (step == 0) {  // issued kernel by kernel (the second run is captured, later ones replayed)
        CHECK(c.krsc_filters == w_reads + dw_writes);                      // launched so
        CHECK(c.narrow_filters == (narrow ? w_reads + narrow_reads : 0));  // every filter read, 16-bit
        CHECK(c.launched + c.host_total() == p.steps.size());              // each copy ran once this step
      }
      // What the optimizer, the buckets and checkpoints read: row-major gradients.
      for (const std::string& param : device.training().params) {
        CAPTURE(param);
        CHECK(device.value(device.training().gradients.at(param)).layout() == Layout::Plain);
        CHECK(!device.value(device.training().gradients.at(param)).narrowed());
      }
    }
    for (const std::string& name : ref.state_names()) {
      CAPTURE(name);
      CHECK(bitwise_equal(device.state(name), ref.state(name)));
    }
  }
}

TEST_CASE(
    "device backend: a training step with NaN/Inf checks synchronises once; host kernels are the cuda fallbacks") {
  // Checks on (the default): the flags are set on the device and read where the step
  // ends. The state writers (the optimizer updates) read the "any check failed" flag on
  // the device and skip, so nothing waits before them. No synchronisation per node; the
  // host kernels wait for the queue themselves (counted apart), once per call.
  for (const std::vector<int64_t>& widths : {std::vector<int64_t>{4, 8, 12, 16}, std::vector<int64_t>{8, 16, 32, 48}}) {
    CAPTURE(widths.size());
    Graph g = small_wrn(widths);
    auto owned = std::make_unique<StandinDevice>();
    StandinDevice& dev = *owned;
    TrainingSession device(wrn_training(g), std::move(owned), {.seed = 3});
    TrainingSession ref(wrn_training(g), make_backend("reference"), {.seed = 3});
    for (int step = 0; step < 2; ++step) {
      dev.reset_counts();
      const TensorMap b = wrn_batch(2, static_cast<uint64_t>(step + 7));
      CHECK(device.step(b, 0.05f) == ref.step(b, 0.05f));
      const StandinDevice::Counts c = dev.counts();
      const std::map<std::string, size_t> want = host_steps(device.plan(), dev);
      CHECK(c.syncs == 1);
      CHECK(c.skipped == 0);
      CHECK(c.host_calls == want);
      CHECK(c.host_syncs == c.host_total());
      CHECK(c.launched + c.host_total() == device.plan().steps.size());
      // Without host kernels (whose arguments go through the host) the host reads the
      // loss, the logits and the check flags only; never the state (the running
      // statistics are written on the device too: Assign).
      if (c.host_total() == 0) {
        const auto& out = device.last_outputs();
        const size_t results = out.at(device.training().loss).nbytes() + out.at(g.outputs[0]).nbytes();
        const size_t flags = 8 * (device.training().params.size() + 2);  // gradients, loss, "any"
        CHECK(c.to_host_bytes >= results);
        CHECK(c.to_host_bytes <= results + flags);
      }
      std::string host_ops;
      for (const auto& [op, calls] : c.host_calls) host_ops += " " + op + " x" + std::to_string(calls);
      MESSAGE("stand-in WRN step (" << device.plan().steps.size() << " plan steps, " << c.launched << " queued, "
                                    << c.host_total() << " on the host:" << host_ops << "): " << c.syncs
                                    << " synchronisations outside host kernels, " << c.host_syncs << " in them");
    }
    for (const std::string& name : ref.state_names()) {
      CAPTURE(name);
      CHECK(bitwise_equal(device.state(name), ref.state(name)));
    }
    // The host ops are those the cuda backend itself falls back for: its kernel set is
    // "cuda", then "cpu" and "reference" (runtime/cuda/cuda_backend.cpp).
    if (StandinDevice::have_cuda_kernels()) {
      struct CudaKernelSet : Backend {
        CudaKernelSet() : Backend("cuda", {"cpu", "reference"}) {}
        std::string name() const override { return "cuda kernel set"; }
        bool asynchronous() const override { return true; }
      } cuda;
      const std::vector<std::string> fb = cuda.fallback_ops();
      const std::set<std::string> fallbacks(fb.begin(), fb.end());
      for (const PlanStep& st : device.plan().steps) {
        const Node& n = device.plan().graph.nodes[st.node];
        CAPTURE(n.op_type);
        CHECK(dev.runs_on_host(n.domain, n.op_type) ==
              (fallbacks.count(n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type) != 0));
      }
    }
  }
}

TEST_CASE("device backend: a non-finite value is reported as on the reference backend (first node, element, kind)") {
  // Training: a NaN in the batch; the first bad gradient in plan order is named, the same
  // message as the host backend's immediate check gives.
  Graph g = small_wrn();
  TrainingSession device(wrn_training(g), std::make_unique<StandinDevice>(), {.seed = 4});
  // The node list the device session runs (asynchronous backends also fold the ReLU's
  // gradient into the batch-norm gradient), so that the messages can name the same node.
  TrainingSession ref(device_fused(wrn_training(g)), make_backend("reference"), {.seed = 4, .fuse = false});
  TensorMap b = wrn_batch(2, 3);
  b.at("input").data<float>()[40] = std::nanf("");
  const std::string want = error_of([&] { ref.step(b, 0.05f); });
  CHECK(want.find("has NaN at element") != std::string::npos);
  CHECK(error_of([&] { device.step(b, 0.05f); }) == want);
  // The diagnostic rerun (every float output, stopping before state writes) names the same first node.
  std::optional<NumericalError> d = device.find_anomaly(b, 0.05f), r = ref.find_anomaly(b, 0.05f);
  REQUIRE(d);
  REQUIRE(r);
  CHECK(std::string(d->what()) == r->what());
  CHECK(d->node == r->node);

  // Inference with a named check: an Inf before a NaN in the same output, then a later node's NaN.
  Graph h;
  h.inputs = {"x"};
  h.values["x"] = ValueInfo{DataType::Float32, shape_of({2, 4})};
  Node relu = make_node("Relu", {"x"}, {"y"});
  relu.name = "relu";
  Node neg = make_node("Neg", {"y"}, {"z"});
  neg.name = "neg";
  h.nodes = {relu, neg};
  h.outputs = {"z"};
  infer_shapes(h, registry().schemas, "t");
  Tensor x = make(DataType::Float32, {2, 4}, {1, 2, 3, 4, 5, INFINITY, 7, NAN});
  StandinDevice dev;
  const std::unique_ptr<Backend> reference = make_backend("reference");
  Executor ex(h, dev), rx(h, *reference);
  RunOptions ro;
  ro.check_finite = {"z", "y"};
  const std::string got = error_of([&] { ex.run({{"x", x}}, ro); }), exp = error_of([&] { rx.run({{"x", x}}, ro); });
  CHECK(got == exp);
  CHECK(got.find("output 'y' has Inf at element 5") != std::string::npos);
  CHECK(dev.pending() == 0);
  dev.reset_counts();
  x.data<float>()[5] = 6;
  x.data<float>()[7] = 8;
  CHECK(ex.run({{"x", x}}, ro).at("z").data<float>()[7] == -8.f);
  CHECK(dev.counts().syncs == 1);  // no state writes: only the end of the run
}

TEST_CASE("device backend: profiling synchronises after each kernel, and only when on") {
  Graph g = small_wrn();
  StandinDevice dev;
  Executor ex(g, dev);
  const TensorMap feeds{{"input", random_tensor(DataType::Float32, {2, 1, 28, 28}, 2)}};
  ex.run(feeds);
  dev.reset_counts();
  ex.run(feeds);
  CHECK(dev.counts().syncs == 1);
  ProfileCollector prof;
  RunOptions ro;
  ro.profile = &prof;
  dev.reset_counts();
  ex.run(feeds, ro);
  const StandinDevice::Counts c = dev.counts();
  CHECK(prof.events.size() == ex.plan().steps.size());
  CHECK(c.syncs == c.launched + c.host_total() + 1);  // one per kernel, one at the end
}

TEST_CASE("device backend: a NaN is found after its kernel ran, and stops the step with state unchanged") {
  // The optimizer updates are queued before the flags are read: they skip on the device.
  Graph g = small_wrn();
  auto owned = std::make_unique<StandinDevice>(kWrnHostOps);
  StandinDevice& dev = *owned;
  TrainingSession device(wrn_training(g), std::move(owned), {.seed = 1});
  TensorMap b = wrn_batch(4, 5);
  device.step(b, 0.05f);
  CHECK(dev.counts().skipped == 0);
  std::map<std::string, Tensor> before;
  for (const std::string& name : device.state_names()) before[name] = device.state(name).clone();
  b.at("input").data<float>()[17] = std::nanf("");
  dev.reset_counts();
  const std::string e = error_of([&] { device.step(b, 0.05f); });
  CHECK(e.find("NaN") != std::string::npos);
  size_t writers = 0;
  for (const PlanStep& st : device.plan().steps) writers += st.writes_state ? 1 : 0;
  CHECK(writers > 0);
  CHECK(dev.counts().skipped == writers);
  CHECK(dev.counts().syncs == 1);
  for (const std::string& name : device.state_names()) {
    CAPTURE(name);
    CHECK(bitwise_equal(device.state(name), before.at(name)));
  }
}

TEST_CASE("device backend: inference results and constants come back right, as host copies") {
  Graph g = small_wrn();
  StandinDevice dev({"Flatten"});
  const TensorMap feeds{{"input", random_tensor(DataType::Float32, {3, 1, 28, 28}, 9)}};
  const TensorMap want = run_graph(g, feeds, *make_backend("reference"));
  Executor ex(g, dev);
  for (int run = 0; run < 2; ++run) {  // the second run reuses the staged buffers
    const TensorMap& got = ex.run(feeds);
    for (const auto& [name, t] : want) {
      CAPTURE(name);
      CHECK(bitwise_equal(got.at(name), t));
      CHECK(!dev.owns(got.at(name).raw()));  // copied out at the end of the run
    }
  }
  CHECK(dev.pending() == 0);
}

TEST_CASE(
    "device backend: a training step is captured once and replayed; dropout masks (fused into the batch norm) "
    "follow each step's seed") {
  // No op on the host (a build without CUDA kernels: none listed), so the step can be
  // captured: run 0 is issued (the kernels' one-time set-up), run 1 captured and
  // replayed, later runs replayed. The Wide ResNet has Dropout: a replay must draw the
  // masks of its own step (the seed is read on the device), or the steps would differ
  // from the reference from run 2 on.
  Graph g = small_wrn();
  auto owned = std::make_unique<StandinDevice>(std::set<std::string>{});
  StandinDevice& dev = *owned;
  TrainingSession device(wrn_training(g), std::move(owned), {.seed = 3});
  TrainingSession ref(wrn_training(g), make_backend("reference"), {.seed = 3});
  for (int step = 0; step < 4; ++step) {
    CAPTURE(step);
    dev.reset_counts();
    const TensorMap b = wrn_batch(4, static_cast<uint64_t>(step + 20));
    CHECK(device.step(b, 0.05f) == ref.step(b, 0.05f));
    REQUIRE(host_steps(device.plan(), dev).empty());
    const StandinDevice::Counts c = dev.counts();
    CHECK(c.syncs == 1);
    CHECK(c.captures == (step == 1 ? 1u : 0u));
    CHECK(c.replays == (step >= 1 ? 1u : 0u));
    CHECK(c.launched == (step <= 1 ? device.plan().steps.size() : 0u));  // a replay launches nothing
  }
  // Both run the fused graph: each block's BatchNormalizationRelu + Dropout is one
  // BatchNormalizationReluDropout (passes/fuse_dropout.cpp), queued as a device kernel that
  // draws its Dropout's mask from the seed read when it runs (dropout_node, not its index).
  size_t fused = 0;
  for (const PlanStep& st : device.plan().steps)
    fused += device.plan().graph.nodes[st.node].op_type == "BatchNormalizationReluDropout";
  CHECK(fused == 6);
  for (const std::string& name : ref.state_names()) {
    CAPTURE(name);
    CHECK(bitwise_equal(device.state(name), ref.state(name)));
  }
  // A new batch shape is a new plan: issued once, then captured and replayed.
  dev.reset_counts();
  for (int i = 0; i < 3; ++i) {
    const TensorMap b = wrn_batch(2, static_cast<uint64_t>(40 + i));
    CHECK(device.step(b, 0.05f) == ref.step(b, 0.05f));
  }
  CHECK(dev.counts().captures == 1);
  CHECK(dev.counts().replays == 2);
}

TEST_CASE("device backend: queued steps run ahead of the host; one synchronisation per window, bit for bit") {
  // TrainingSession::queue_step launches a step without waiting (Executor::launch); the
  // host waits for the oldest step's end event only when max_in_flight (4) are ahead, and
  // once for all at finish_steps(). The batches land in two device buffers taking turns
  // and are copied from there into the one staged buffer the step reads, so a batch's
  // copy must wait for the step two before it to have copied its own batch out: the
  // compute stream runs as late as its events allow, which without that wait would let a
  // later batch overwrite this step's. The control ignores every event wait, and the
  // steps must then differ.
  Graph g = small_wrn();
  TrainingSession ref(wrn_training(g), make_backend("reference"), {.seed = 3});
  std::vector<double> want;
  for (int step = 0; step < 10; ++step) want.push_back(ref.step(wrn_batch(4, static_cast<uint64_t>(step + 60)), 0.05f));
  for (const bool ordered : {true, false}) {
    CAPTURE(ordered);
    auto owned = std::make_unique<StandinDevice>(std::set<std::string>{});
    StandinDevice& dev = *owned;
    dev.late_stream = Backend::Stream::compute;
    dev.ignore_waits = !ordered;
    TrainingSession device(wrn_training(g), std::move(owned), {.seed = 3});
    const int steps = ordered ? 10 : 6;  // the control: a third batch already lands on the first's buffer
    for (int step = 0; step < steps; ++step) {
      device.queue_step(wrn_batch(4, static_cast<uint64_t>(step + 60)), 0.05f);
      if (step == 0) dev.reset_counts();  // the session's first step runs at once (it builds the plan)
    }
    CHECK(device.queued_steps() == steps);
    const StandinDevice::Counts queued = dev.counts();
    const TrainingSession::Finished f = device.finish_steps();
    CHECK(!f.error);
    if (!ordered) {
      CHECK(f.losses != std::vector<double>(want.begin(), want.begin() + steps));
      continue;
    }
    CHECK(f.losses == want);
    CHECK(device.steps_done() == 10);
    CHECK(device.queued_steps() == 0);
    // Steps 2..10 launched: no synchronisation while queueing, the host waiting for an
    // event once per launch beyond the 4 in flight, and one synchronisation at the end.
    CHECK(queued.syncs == 0);
    CHECK(queued.host_waits == 9 - 4);
    CHECK(dev.counts().allocations == 0);  // device or pinned: everything came with the plan
    // Per step the host reads the loss, the logits and the check flags, never the state.
    const auto& out = device.last_outputs();
    const size_t results = out.at(device.training().loss).nbytes() + out.at(g.outputs[0]).nbytes();
    const size_t flags = 8 * (device.training().params.size() + 2);  // gradients, loss, "any"
    CHECK(dev.counts().to_host_bytes >= 9 * results);
    CHECK(dev.counts().to_host_bytes <= 9 * (results + flags));
    CHECK(dev.counts().syncs == 1);
    CHECK(dev.counts().captures == 1);  // run 2 of the plan is captured, then it and every later run replayed
    CHECK(dev.counts().replays == 9);
    // The next batch's copy overlaps the step before it: with the compute stream as late
    // as possible, the copy stream landed the first two queued batches (3 feeds each: x,
    // y and the learning rate) before any compute work ran; the next two waited for the
    // copy out of their landing buffer, two steps back. One landing buffer would make the
    // second batch wait for the whole first step.
    const std::vector<size_t> log = dev.copy_log();
    REQUIRE(log.size() == 9 * 3);
    for (size_t k = 0; k < 6; ++k) CHECK(log[k] == 0);
    // (The fifth launch waited on the host for the first, which ran everything queued; the
    // log counts compute items per synchronisation, so only the first four batches tell.)
    for (size_t k = 6; k < 12; ++k) CHECK(log[k] > 0);
    for (const std::string& name : ref.state_names()) {
      CAPTURE(name);
      CHECK(bitwise_equal(device.state(name), ref.state(name)));
    }
    CHECK(bitwise_equal(device.last_outputs().at(device.training().loss), ref.last_outputs().at(ref.training().loss)));
  }
}

TEST_CASE("device backend: batches in the session's pinned pool are copied from where they lie, held until copied") {
  // The data pipeline writes each batch into TrainingSession::batch_pool() memory
  // (PipelineOptions::allocate): the executor issues the device copy from that buffer,
  // with no host copy into its own pinned buffer, and holds it until the run that copies
  // it has ended. Here the compute stream (and so the copies it waits for) runs as late
  // as its events allow, and after each queue_step the caller drops its batch and takes
  // pool memory of the same sizes at once, filling it with NaN (as the pipeline writes
  // the next batches): a batch given back before its copy ran would be overwritten, and
  // the steps would differ from the reference's.
  Graph g = small_wrn();
  auto owned = std::make_unique<StandinDevice>(std::set<std::string>{});
  StandinDevice& dev = *owned;
  dev.late_stream = Backend::Stream::compute;
  TrainingSession device(wrn_training(g), std::move(owned), {.seed = 3});
  TrainingSession ref(wrn_training(g), make_backend("reference"), {.seed = 3});
  CHECK(!ref.batch_pool());  // a synchronous backend reads host memory at the call
  HostPool* pool = device.batch_pool();
  REQUIRE(pool);
  std::vector<double> want;
  size_t batch_bytes = 0;
  for (int step = 0; step < 10; ++step) {
    const TensorMap b = wrn_batch(4, static_cast<uint64_t>(step + 60));
    want.push_back(ref.step(b, 0.05f));
    TensorMap pinned;
    batch_bytes = 0;
    for (const auto& [name, t] : b) {
      Tensor p(t.dtype(), t.dims(), pool->take(t.nbytes()));
      std::memcpy(p.raw(), t.raw(), t.nbytes());
      pinned[name] = p;
      batch_bytes += t.nbytes();
    }
    device.queue_step(pinned, 0.05f);
    std::vector<size_t> sizes;
    for (const auto& [name, t] : pinned) sizes.push_back(t.nbytes());
    pinned.clear();
    for (size_t bytes : sizes) {
      std::shared_ptr<std::byte[]> next = pool->take(bytes);
      std::fill_n(reinterpret_cast<float*>(next.get()), bytes / sizeof(float), std::nanf(""));
    }
  }
  const TrainingSession::Finished f = device.finish_steps();
  CHECK(!f.error);
  CHECK(f.losses == want);
  for (const std::string& name : ref.state_names()) {
    CAPTURE(name);
    CHECK(bitwise_equal(device.state(name), ref.state(name)));
  }
  // The host copied only the learning rate (a scalar the session makes) of each step.
  CHECK(batch_bytes > 1000);
  CHECK(device.host_staged_bytes() == 10 * sizeof(float));
  // Buffers come back: each size settles on the runs the executor holds plus the caller's.
  CHECK(pool->allocated() <= 2 * 7);
}

TEST_CASE("device backend: a NaN in a queued step ends the list there; no later queued step writes state") {
  Graph g = small_wrn();
  auto owned = std::make_unique<StandinDevice>(std::set<std::string>{});
  StandinDevice& dev = *owned;
  TrainingSession device(wrn_training(g), std::move(owned), {.seed = 5});
  TrainingSession ref(device_fused(wrn_training(g)), make_backend("reference"), {.seed = 5, .fuse = false});
  std::vector<double> want;
  std::string ref_error;
  for (int step = 0; step < 7; ++step) {
    TensorMap b = wrn_batch(4, static_cast<uint64_t>(step + 80));
    if (step == 4) b.at("input").data<float>()[17] = std::nanf("");
    if (step < 4) want.push_back(ref.step(b, 0.05f));
    if (step == 4) ref_error = error_of([&] { ref.step(b, 0.05f); });
    device.queue_step(b, 0.05f);
  }
  const TrainingSession::Finished f = device.finish_steps();
  CHECK(f.losses == want);
  REQUIRE(f.error);
  CHECK(std::string(f.error->what()) == ref_error);  // the same node, value and element
  CHECK(device.steps_done() == 4);
  CHECK(dev.counts().skipped > 0);  // steps 5 to 7 skipped their state writes on the device
  for (const std::string& name : ref.state_names()) {
    CAPTURE(name);
    CHECK(bitwise_equal(device.state(name), ref.state(name)));
  }
  // The next window starts clean: its steps update the state again, as the reference's.
  for (int step = 0; step < 3; ++step) {
    const TensorMap b = wrn_batch(4, static_cast<uint64_t>(step + 90));
    want.push_back(ref.step(b, 0.05f));
    device.queue_step(b, 0.05f);
  }
  const TrainingSession::Finished again = device.finish_steps();
  CHECK(!again.error);
  CHECK(again.losses == std::vector<double>(want.end() - 3, want.end()));
  for (const std::string& name : ref.state_names()) {
    CAPTURE(name);
    CHECK(bitwise_equal(device.state(name), ref.state(name)));
  }
}

TEST_CASE("device backend: the kernels' workspace is reserved with the plan and counted in its memory check") {
  // The stand-in's convolutions declare scratch memory as cuDNN's would (here: their
  // output's bytes, the gradients' twice), and a kernel launched with less reserved fails.
  // The executor asks every step at plan time, reserves the most one call needs before
  // the first run, and counts it in the refusal: no step grows it.
  const auto rule = [](const KernelContext& c) -> size_t {
    if (c.node.op_type == "Conv" || c.node.op_type == "FusedConv") return c.out(0).nbytes();
    if (c.node.op_type == "ConvGrad") return 2 * c.in(1).nbytes();
    return 0;
  };
  Graph g = small_wrn();
  auto owned = std::make_unique<StandinDevice>(std::set<std::string>{});
  StandinDevice& dev = *owned;
  dev.workspace_of = rule;
  TrainingSession device(wrn_training(g), std::move(owned), {.seed = 3});
  TrainingSession ref(wrn_training(g), make_backend("reference"), {.seed = 3});
  for (int step = 0; step < 3; ++step) {
    const TensorMap b = wrn_batch(4, static_cast<uint64_t>(step + 30));
    CHECK(device.step(b, 0.05f) == ref.step(b, 0.05f));
  }
  // The most one call of the plan needs, worked out here from the plan itself.
  size_t most = 0;
  const Plan& plan = device.plan();
  for (const PlanStep& st : plan.steps) {
    const Node& n = plan.graph.nodes[st.node];
    const auto bytes_of = [&](int v) { return plan.values[static_cast<size_t>(v)].bytes; };
    if (n.op_type == "Conv" || n.op_type == "FusedConv") most = std::max(most, bytes_of(st.outputs[0]));
    if (n.op_type == "ConvGrad") most = std::max(most, 2 * bytes_of(st.inputs[1]));
  }
  REQUIRE(most > 0);
  CHECK(dev.counts().workspace == most);
  CHECK(dev.counts().workspace_grown == 1);  // once, with the plan
  // A batch of another size is another plan: reserved again before its first run.
  dev.reset_counts();
  const TensorMap big = wrn_batch(8, 99);
  CHECK(device.step(big, 0.05f) == ref.step(big, 0.05f));
  CHECK(dev.counts().workspace_grown == 1);
  CHECK(dev.counts().workspace > most);
  // The memory check counts it: a limit between the plan without and with its workspace refuses.
  auto owned2 = std::make_unique<StandinDevice>(std::set<std::string>{});
  owned2->workspace_of = rule;
  TrainingSession tight(wrn_training(g), std::move(owned2), {.seed = 3});
  const TensorMap b = wrn_batch(4, 30);
  size_t need = 0;
  {
    auto probe = std::make_unique<StandinDevice>(std::set<std::string>{});
    TrainingSession no_ws(wrn_training(g), std::move(probe), {.seed = 3});
    no_ws.step(b, 0.05f);
    need = no_ws.plan().arena_bytes + no_ws.plan().output_bytes;
  }
  tight.set_memory_limit(need + 2 * b.at("input").nbytes() + most / 2);
  const std::string e = error_of([&] { tight.step(b, 0.05f); });
  CHECK(e.find("memory plan") != std::string::npos);
  CHECK(e.find("workspace") != std::string::npos);
}

TEST_CASE("device backend: paired branches run on the side stream, ordered by events, bit for bit") {
  // With concurrent branches the plan pairs independent neighbouring steps (a residual
  // block's 1x1 skip convolution beside its main branch); run_pair() issues the second
  // on the side stream after an event of the compute stream, and the compute stream
  // waits for the side stream before the step after the pair, as the cuda backend does
  // with its second compute stream. Either stream as late as its events allow must give
  // the reference's steps bit for bit, also once the step is captured and replayed; the
  // control ignores every wait, with the side stream late, and must not.
  Graph g = small_wrn();
  for (const Backend::Stream late : {Backend::Stream::side, Backend::Stream::compute}) {
    for (const bool ordered : {true, false}) {
      if (!ordered && late != Backend::Stream::side) continue;
#ifdef TRAINRT_TSAN
      // The control drops every wait, so its two compute streams do race; depending on the
      // schedule ThreadSanitizer sees that race and ends the run. The ordered variants are
      // the ones TSan checks; the control runs in the other builds.
      if (!ordered) continue;
#endif
      CAPTURE(static_cast<int>(late));
      CAPTURE(ordered);
      auto owned = std::make_unique<StandinDevice>(std::set<std::string>{});  // every op a device kernel
      StandinDevice& dev = *owned;
      dev.late_stream = late;
      dev.ignore_waits = !ordered;
      // Convolutions and batch-norm gradients declare scratch memory (a convolution's
      // output bytes, its gradients' twice, a batch-norm gradient's X bytes), and a
      // kernel launched with less reserved on its stream fails: the second steps of pairs
      // take the side stream's workspace, reserved apart with the plan.
      dev.workspace_of = [](const KernelContext& c) -> size_t {
        if (c.node.op_type == "Conv" || c.node.op_type == "FusedConv") return c.out(0).nbytes();
        if (c.node.op_type == "ConvGrad") return 2 * c.in(1).nbytes();
        if (c.node.op_type == "BatchNormalizationGrad") return c.in(1).nbytes();
        return 0;
      };
      TrainingSession device(wrn_training(g), std::move(owned), {.seed = 3, .concurrent_branches = true});
      TrainingSession ref(wrn_training(g), make_backend("reference"), {.seed = 3});
      bool same = true;
      for (int step = 0; step < 4; ++step) {
        const TensorMap b = wrn_batch(4, static_cast<uint64_t>(step + 21));
        const double want = ref.step(b, 0.05f);
        double got = 0;
        try {
          got = device.step(b, 0.05f);
        } catch (const NumericalError&) {  // the control may read garbage
          same = false;
          break;
        }
        same = same && got == want;
        if (step == 0) {
          CHECK(device.plan().pairs > 0);
          CHECK(dev.counts().pairs == device.plan().pairs);  // every pair forked to the side stream
          dev.reset_counts();
        }
      }
      for (const std::string& name : ref.state_names())
        if (same) same = bitwise_equal(device.state(name), ref.state(name));
      if (!ordered) {
        CHECK(!same);
        continue;
      }
      CHECK(same);
      CHECK(dev.counts().captures == 1);  // the pairs' events are captured with the step
      CHECK(dev.counts().replays == 3);
      // The side workspace is the most a pair's second step needs, worked out from the plan.
      const Plan& plan = device.plan();
      size_t side = 0;
      for (size_t s = 0; s + 1 < plan.steps.size(); ++s) {
        if (s >= plan.runs_with_next.size() || !plan.runs_with_next[s]) continue;
        const PlanStep& st = plan.steps[s + 1];
        const std::string& op = plan.graph.nodes[st.node].op_type;
        const auto bytes_of = [&](int v) { return plan.values[static_cast<size_t>(v)].bytes; };
        if (op == "Conv" || op == "FusedConv") side = std::max(side, bytes_of(st.outputs[0]));
        if (op == "ConvGrad") side = std::max(side, 2 * bytes_of(st.inputs[1]));
        if (op == "BatchNormalizationGrad") side = std::max(side, bytes_of(st.inputs[1]));
        ++s;
      }
      CHECK(side > 0);
      CHECK(dev.counts().side_workspace == side);
    }
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
  StandinDevice dev;
  dev.budget = 1 << 16;  // 64 KiB: far below the arena of a batch of 4
  Executor ex(g, dev);
  const std::string e = error_of([&] { ex.run({{"input", random_tensor(DataType::Float32, {4, 1, 28, 28}, 1)}}); });
  CHECK(e.find("memory plan: needs") != std::string::npos);
  CHECK(e.find("(the stand-in's budget) (arena ") != std::string::npos);
  CHECK(e.find(" GiB): use a smaller batch") != std::string::npos);
  CHECK(dev.pending() == 0);
}

TEST_CASE("device backend: a run stopped by an exception leaves no kernel queued") {
  // The trainer reads state or writes a checkpoint after a failed step: nothing queued
  // may still be writing then. A launch failure of the first MaxPool stops the run while
  // the convolutions before it are still queued.
  Graph g = small_wrn();
  StandinDevice dev;
  dev.fail_op = "MaxPool";
  Executor ex(g, dev);
  const TensorMap feeds{{"input", random_tensor(DataType::Float32, {2, 1, 28, 28}, 3)}};
  CHECK(error_of([&] { ex.run(feeds); }).find("launch of MaxPool failed") != std::string::npos);
  CHECK(dev.counts().launched > 3);  // kernels were queued when the failure came
  CHECK(dev.pending() == 0);
}

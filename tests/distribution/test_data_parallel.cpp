// Data-parallel training over in-process ranks (LocalGroup): the bucketed all-reduce
// against a single process on the whole batch, rank agreement, faults and timeouts.
// The same code runs over MPI under srun in tests/cli/train_srun.sh.
#include <atomic>
#include <chrono>
#include <thread>

#include "../runtime/runtime_util.h"
#include "distribution/data_parallel.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

// input [N,1,6,6] -> Conv 3x3 (3 channels, pads 1) -> Relu -> Flatten -> Gemm -> logits [N,10].
// No BatchNormalization: the mean loss over 2B samples then has exactly the average of the
// gradients of two B-sample halves, so 2 ranks on B each must equal 1 process on 2B.
Graph small_mlp(DataType t) {
  Graph g;
  g.name = "dp";
  g.opsets[""] = 17;
  g.inputs = {"input"};
  g.values["input"] = ValueInfo{t, Shape{Dim::sym("N"), Dim::of(1), Dim::of(6), Dim::of(6)}};
  auto init = [&](const std::string& name, std::vector<int64_t> dims, uint64_t seed) {
    g.initializers[name] = random_tensor(t, dims, seed, -0.5, 0.5);
    g.values[name] = ValueInfo{t, shape_of(dims)};
  };
  init("conv.weight", {3, 1, 3, 3}, 1);
  init("conv.bias", {3}, 2);
  init("fc.weight", {10, 108}, 3);
  init("fc.bias", {10}, 4);
  g.nodes.push_back(
      make_node("Conv", {"input", "conv.weight", "conv.bias"}, {"c"}, {{"pads", Attribute::of_ints({1, 1, 1, 1})}}));
  g.nodes.back().name = "conv";
  g.nodes.push_back(make_node("Relu", {"c"}, {"r"}));
  g.nodes.back().name = "relu";
  g.nodes.push_back(make_node("Flatten", {"r"}, {"f"}, {{"axis", Attribute::of_int(1)}}));
  g.nodes.back().name = "flat";
  g.nodes.push_back(make_node("Gemm", {"f", "fc.weight", "fc.bias"}, {"logits"}, {{"transB", Attribute::of_int(1)}}));
  g.nodes.back().name = "fc";
  g.outputs = {"logits"};
  validate_graph(g, registry().schemas, "dp");
  infer_shapes(g, registry().schemas, "dp");
  return g;
}

TrainingGraph mlp_training(DataType t) {
  TrainingOptions o;
  o.momentum = 0.9f;
  o.weight_decay = 1e-3f;
  return build_training_graph(small_mlp(t), o);
}

TensorMap batch_of(DataType t, int64_t n, uint64_t seed, int64_t first = 0) {
  Tensor x = random_tensor(t, {n, 1, 6, 6}, seed);
  Tensor labels(DataType::Int64, {n});
  for (int64_t i = 0; i < n; ++i) labels.data<int64_t>()[i] = (first + i) * 7 % 10;
  return {{"input", x}, {"labels", labels}};
}

// Rows [begin, begin+n) of a batch.
TensorMap rows(const TensorMap& b, int64_t begin, int64_t n) {
  TensorMap out;
  for (const auto& [name, t] : b) {
    std::vector<int64_t> dims = t.dims();
    const size_t row = t.nbytes() / static_cast<size_t>(dims[0]);
    dims[0] = n;
    Tensor part(t.dtype(), dims);
    std::memcpy(part.raw(), t.raw() + static_cast<size_t>(begin) * row, static_cast<size_t>(n) * row);
    out[name] = part;
  }
  return out;
}

// Runs f(rank) on `world` threads and rethrows the first exception.
}  // namespace

TEST_CASE("LocalGroup: sums in rank order, broadcasts, and a missing peer times out naming the operation") {
  LocalGroup g(3);
  on_ranks(3, [&](int r) {
    auto c = g.communicator(r);
    std::vector<float> x{1.f + r, 10.f * r, -1.f};
    c->all_reduce_sum(x.data(), x.size(), DataType::Float32, "test sum");
    CHECK(x == std::vector<float>{6.f, 30.f, -3.f});
    std::vector<double> y{r == 1 ? 42.0 : 0.0, static_cast<double>(r)};
    c->broadcast(y.data(), y.size() * sizeof(double), 1, "test broadcast");
    CHECK(y == std::vector<double>{42.0, 1.0});
  });
  // Rank 1 never calls: rank 0 gives up after its timeout with a Peer error, and so does
  // every later call on that communicator.
  LocalGroup lonely(2);
  auto c = lonely.communicator(0, {.timeout_seconds = 0.2});
  double v = 1;
  const auto t0 = std::chrono::steady_clock::now();
  ErrorKind kind{};
  const std::string msg = error_of([&] { c->all_reduce_sum(&v, 1, DataType::Float64, "bucket 7"); }, &kind);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(kind == ErrorKind::Peer);
  CHECK(msg.find("bucket 7") != std::string::npos);
  CHECK(msg.find("rank 0 of 2") != std::string::npos);
  CHECK(msg.find("0.2 s") != std::string::npos);
  CHECK(took < 5.0);
  CHECK(error_of([&] { c->all_reduce_sum(&v, 1, DataType::Float64, "next"); }) == msg);
  CHECK(Error(ErrorKind::Peer, "x").exit_code() == 3);
}

TEST_CASE("data parallel, fp64: 2 ranks on half batches each equal one process on the whole batch") {
  // 3 SGD steps with momentum and weight decay on the reference backend, in float64, so
  // the only differences are summation orders (~1e-16 of the values).
  const DataType t = DataType::Float64;
  Graph fwd = small_mlp(t);
  TrainingSession whole(mlp_training(t), make_backend("reference"));
  std::vector<TensorMap> batches;
  for (int s = 0; s < 3; ++s) batches.push_back(batch_of(t, 8, 100 + static_cast<uint64_t>(s)));
  std::vector<double> whole_loss;
  for (const TensorMap& b : batches) whole_loss.push_back(whole.step(b, 0.1f));

  // Many buckets, then one; and many again packed into buffers of their own (the path of
  // a plan that does not lay the buckets out in the arena) instead of reduced in place.
  for (const auto& [cap, packed] :
       {std::pair{size_t{64}, false}, std::pair{size_t{25} << 20, false}, std::pair{size_t{64}, true}}) {
    CAPTURE(cap);
    CAPTURE(packed);
    LocalGroup g(2);
    std::vector<std::unique_ptr<TrainingSession>> sessions(2);
    std::vector<std::vector<double>> losses(2);
    std::vector<size_t> bucket_count(2);
    on_ranks(2, [&](int r) {
      auto c = g.communicator(r);
      auto s = std::make_unique<TrainingSession>(mlp_training(t), make_backend("reference"));
      DataParallel dp(*s, *c, {.bucket_cap_bytes = cap, .first_bucket_cap_bytes = cap});
      if (packed) s->set_contiguous(nullptr);
      dp.broadcast_state();
      for (const TensorMap& b : batches) losses[static_cast<size_t>(r)].push_back(dp.step(rows(b, 4 * r, 4), 0.1f));
      CHECK(dp.state_identical());
      CHECK(dp.packed_buckets() == (packed ? dp.buckets().size() : 0));
      bucket_count[static_cast<size_t>(r)] = dp.buckets().size();
      sessions[static_cast<size_t>(r)] = std::move(s);
    });
    CHECK(bucket_count[0] == (cap == 64 ? 4u : 1u));
    for (int s = 0; s < 3; ++s) {
      CHECK(losses[0][static_cast<size_t>(s)] == losses[1][static_cast<size_t>(s)]);
      CHECK(std::fabs(losses[0][static_cast<size_t>(s)] - whole_loss[static_cast<size_t>(s)]) < 1e-13);
    }
    for (const std::string& name : whole.state_names()) {
      CAPTURE(name);
      CHECK(bitwise_equal(sessions[0]->state(name), sessions[1]->state(name)));
      CHECK(all_close(sessions[0]->state(name), whole.state(name), 1e-12, 1e-14));
    }
  }
}

TEST_CASE("data parallel: a wrong reduction would show (the single-process check can fail)") {
  // Each rank trains alone on its half (no communicator): the parameters then differ from
  // the whole-batch run by far more than the tolerance the test above uses.
  const DataType t = DataType::Float64;
  TrainingSession whole(mlp_training(t), make_backend("reference"));
  TrainingSession half(mlp_training(t), make_backend("reference"));
  for (int s = 0; s < 3; ++s) {
    TensorMap b = batch_of(t, 8, 100 + static_cast<uint64_t>(s));
    whole.step(b, 0.1f);
    half.step(rows(b, 0, 4), 0.1f);
  }
  CHECK_FALSE(all_close(half.state("fc.weight"), whole.state("fc.weight"), 1e-6, 1e-8));
}

TEST_CASE("data parallel, Wide ResNet on the cpu backend: ranks stay bit-identical; state_identical sees a change") {
  Graph g = small_wrn();
  LocalGroup group(2);
  on_ranks(2, [&](int r) {
    auto c = group.communicator(r);
    TrainingSession s(wrn_training(g), make_backend("cpu"), {.seed = static_cast<uint64_t>(7 + r)});
    DataParallel dp(s, *c, {.bucket_cap_bytes = 8 << 10, .first_bucket_cap_bytes = 1 << 10});
    dp.broadcast_state();
    CHECK(dp.state_identical());
    double first = 0, last = 0;
    for (int step = 0; step < 4; ++step) {
      const double loss = dp.step(wrn_batch(4, static_cast<uint64_t>(10 * step + r)), 0.05f);
      if (step == 0) first = loss;
      last = loss;
    }
    CHECK(std::isfinite(first));
    CHECK(std::isfinite(last));
    CHECK(dp.buckets().size() > 3);
    CHECK(dp.packed_buckets() == 0);  // every bucket reduced in place in the arena
    CHECK(dp.state_identical());
    // Timings of the last step: every bucket was started after its gradients and finished.
    for (const BucketTiming& bt : dp.last_timings()) {
      CHECK(bt.ready_ns > 0);
      CHECK(bt.end_ns >= bt.start_ns);
      CHECK(bt.start_ns >= bt.ready_ns);
    }
    // One rank's parameter changes: the comparison must notice (on both ranks).
    if (r == 1) {
      Tensor w = s.state(s.training().params[0]).clone();
      w.set_from_double(0, w.get_as_double(0) + 1e-3);
      s.set_state(s.training().params[0], w);
    }
    CHECK_FALSE(dp.state_identical());
    // Running statistics differ per rank until rank 0's are broadcast.
    dp.broadcast_buffers();
  });
}

TEST_CASE("data parallel: a NaN on one rank stops every rank before any state is written") {
  // The NaN input is zeroed by the Relu on the way forward (the loss stays finite) but
  // reaches the conv weight's gradient: rank 1's gradient is NaN, so is the average.
  const DataType t = DataType::Float32;
  LocalGroup g(2);
  std::vector<std::string> values(2);
  on_ranks(2, [&](int r) {
    auto c = g.communicator(r);
    TrainingSession s(mlp_training(t), make_backend("cpu"));
    DataParallel dp(s, *c);
    dp.broadcast_state();
    dp.step(batch_of(t, 4, 1), 0.1f);
    std::map<std::string, Tensor> before;
    for (const std::string& n : s.state_names()) before[n] = s.state(n).clone();
    TensorMap b = batch_of(t, 4, 2);
    if (r == 1) b["input"].data<float>()[5] = NAN;  // only rank 1's data is bad
    std::string value;
    try {
      dp.step(b, 0.1f);
    } catch (const NumericalError& e) {
      value = e.value;
      CHECK(std::string(e.what()).find("averaged over the ranks") != std::string::npos);
    }
    values[static_cast<size_t>(r)] = value;
    for (const std::string& n : s.state_names()) CHECK(bitwise_equal(s.state(n), before[n]));
    // The ranks are still in step: the next good batch trains on both.
    dp.step(batch_of(t, 4, 3), 0.1f);
    CHECK(dp.state_identical());
  });
  CHECK(values[0].find("conv/grad") == 0);
  CHECK(values[0] == values[1]);  // both ranks stop at the same value
}

TEST_CASE("data parallel: a stop request on one rank stops every rank after the same step") {
  const DataType t = DataType::Float32;
  LocalGroup g(2);
  on_ranks(2, [&](int r) {
    auto c = g.communicator(r);
    TrainingSession s(mlp_training(t), make_backend("cpu"));
    DataParallel dp(s, *c);
    int stopped_after = -1;
    for (int step = 0; step < 5 && stopped_after < 0; ++step) {
      dp.step(batch_of(t, 4, static_cast<uint64_t>(step)), 0.1f, /*stop=*/r == 1 && step == 2);
      if (dp.stop_agreed()) stopped_after = step;
    }
    CHECK(stopped_after == 2);
  });
}

TEST_CASE("data parallel: a dead peer ends the step with a Peer error within the timeout; models must agree") {
  const DataType t = DataType::Float32;
  {
    LocalGroup g(2);
    on_ranks(2, [&](int r) {
      auto c = g.communicator(r, {.timeout_seconds = 0.3});
      TrainingSession s(mlp_training(t), make_backend("cpu"));
      DataParallel dp(s, *c);
      dp.step(batch_of(t, 4, 1), 0.1f);
      if (r == 1) return;  // rank 1 dies after one step
      ErrorKind kind{};
      const std::string msg = error_of([&] { dp.step(batch_of(t, 4, 2), 0.1f); }, &kind);
      CHECK(kind == ErrorKind::Peer);
      CHECK(msg.find("gradient bucket 0") != std::string::npos);
      CHECK(msg.find("a peer rank died or hangs") != std::string::npos);
    });
  }
  {
    LocalGroup g(2);
    on_ranks(2, [&](int r) {
      auto c = g.communicator(r);
      TrainingOptions o;
      o.freeze = r == 1 ? std::vector<std::string>{"fc.bias"} : std::vector<std::string>{};
      TrainingSession s(build_training_graph(small_mlp(t), o), make_backend("cpu"));
      DataParallel dp(s, *c);
      ErrorKind kind{};
      const std::string msg = error_of([&] { dp.broadcast_state(); }, &kind);
      CHECK(kind == ErrorKind::Peer);
      CHECK(msg.find("models differ") != std::string::npos);
    });
  }
}

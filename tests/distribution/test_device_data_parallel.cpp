// The data-parallel code on an asynchronous device backend, checked on the CPU with the
// strict stand-in (tests/runtime/standin_device.h) and its collectives
// (standin_collectives.h): buckets in backend memory on a host communicator (the MPI
// path: a synchronisation per bucket) and ordered by events (the NCCL path: averaged on
// the comm stream, checked on the device, captured, queued ahead of the host), against
// reference ranks bit for bit; faults, stop requests, dead peers, the memory refusal.
#include <cmath>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "../runtime/runtime_util.h"
#include "distribution/data_parallel.h"
#include "standin_collectives.h"

using namespace trainrt;
using namespace trainrt::test;

TEST_CASE("device backend: data-parallel ranks equal reference ranks bit for bit (buckets in backend memory)") {
  // Variants: 0 the stand-in with a host communicator (the MPI path: a synchronisation per
  // bucket), 1 the reference backend, 2 the stand-in with stand-in collectives ordered by
  // events (the NCCL path: averaged on the comm stream, no synchronisation but the step's end).
  Graph g = small_wrn();
  std::map<std::string, Tensor> results[3];
  std::vector<double> losses[3];
  for (int variant = 0; variant < 3; ++variant) {
    CAPTURE(variant);
    LocalGroup group(2);
    StandinCollectives collectives(2);
    std::mutex mu;
    on_ranks(2, [&](int r) {
      auto standin = std::make_unique<StandinDevice>();
      StandinDevice* dev = variant != 1 ? standin.get() : nullptr;
      if (variant == 2) dev->late_stream = Backend::Stream::comm;  // the averages land as late as events allow
      auto c = variant == 2 ? collectives.communicator(r, *standin) : group.communicator(r);
      std::unique_ptr<Backend> b =
          variant != 1 ? std::unique_ptr<Backend>(std::move(standin)) : make_backend("reference");
      TrainingSession s(wrn_training(g), std::move(b), {.seed = static_cast<uint64_t>(5 + r)});
      DataParallel dp(s, *c, {.bucket_cap_bytes = 8 << 10, .first_bucket_cap_bytes = 1 << 10});
      dp.broadcast_state();
      for (int step = 0; step < 3; ++step) {
        if (dev) dev->reset_counts();
        const TensorMap batch = wrn_batch(4, static_cast<uint64_t>(10 * step + r));
        size_t batch_bytes = sizeof(float);  // the learning rate
        for (const auto& [name, t] : batch) batch_bytes += t.nbytes();
        const double loss = dp.step(batch, 0.05f);
        if (r == 0) losses[variant].push_back(loss);
        if (!dev) continue;
        // Host communicator: a bucket is packed by device copies and copied to its host
        // mirror, one synchronisation before its all-reduce; it is unpacked by copies
        // in stream order (none); the end of the step once more. Not once per node.
        // Ordered by events: the step's end only.
        const StandinDevice::Counts n = dev->counts();
        CHECK(n.syncs == (variant == 2 ? 1 : dp.buckets().size() + 1));
        CHECK(n.host_calls == host_steps(s.plan(), *dev));
        // Ordered by events, the step is captured at its second run with its collectives
        // and replayed from then on (a replay issues no wait of its own).
        if (variant == 2 && step < 2) CHECK(n.waits >= 2 * dp.buckets().size());  // comm after compute, and back
        if (variant == 2 && host_steps(s.plan(), *dev).empty()) {  // a build with CUDA kernels: nothing on the host
          CHECK(n.captures == (step == 1 ? 1 : 0));
          CHECK(n.replays == (step >= 1 ? 1 : 0));
        }
        // Every bucket is a range of the arena (the plan laid its gradients out back to
        // back): no packing copy, no copy back. The device-to-device copies are the
        // batch's, from its landing buffer, and on the event path the loss into bucket 0's
        // tail, the rank's stop flag from device memory (written before the run) into it
        // too, and the averaged loss and stop flag beside the check flags.
        CHECK(dp.packed_buckets() == 0);
        CHECK(s.plan().groups.size() == dp.buckets().size());
        CHECK(n.device_copy_bytes == batch_bytes + (variant == 2 ? 4 * sizeof(float) : 0));
        if (r == 0 && step == 2) {
          std::lock_guard<std::mutex> lock(mu);
          MESSAGE("stand-in data-parallel step ("
                  << s.plan().steps.size() << " plan steps, " << dp.buckets().size() << " buckets, "
                  << std::string(variant == 2 ? "events" : "host mirror") << "): " << n.syncs
                  << " synchronisations outside host kernels");
        }
      }
      CHECK(dp.state_identical());
      if (r == 0) {
        std::lock_guard<std::mutex> lock(mu);
        for (const std::string& name : s.state_names()) results[variant][name] = s.state(name).clone();
      }
    });
  }
  CHECK(losses[0] == losses[1]);
  CHECK(losses[2] == losses[1]);
  REQUIRE(!results[2].empty());
  for (const auto& [name, t] : results[2]) {
    CAPTURE(name);
    CHECK(bitwise_equal(t, results[1].at(name)));
  }
  REQUIRE(!results[1].empty());
  for (const auto& [name, t] : results[1]) {
    CAPTURE(name);
    CHECK(bitwise_equal(results[0].at(name), t));
  }
}

TEST_CASE("device backend: data-parallel steps ordered by events: a NaN on one rank, a stop request, a dead peer") {
  // The NCCL path on the stand-in: the checks of the averaged loss and gradients run on
  // the device and the optimizer kernels skip on them, so every rank reports the same
  // value and keeps its state, with no synchronisation before the step's end.
  Graph g = small_wrn();
  auto ranks = [&](double timeout, const std::function<void(int, TrainingSession&, DataParallel&, StandinDevice&)>& f) {
    StandinCollectives collectives(2);
    on_ranks(2, [&](int r) {
      auto standin = std::make_unique<StandinDevice>();
      StandinDevice& dev = *standin;
      auto c = collectives.communicator(r, dev, {.timeout_seconds = timeout});
      TrainingSession s(wrn_training(g), std::move(standin), {.seed = 5});
      DataParallel dp(s, *c, {.bucket_cap_bytes = 8 << 10, .first_bucket_cap_bytes = 1 << 10});
      dp.broadcast_state();
      f(r, s, dp, dev);
    });
  };
  // A NaN in the very first step (the one that makes the buckets): its optimizer kernels
  // skip too, and the state is the broadcast one.
  ranks(60, [&](int r, TrainingSession& s, DataParallel& dp, StandinDevice& dev) {
    std::map<std::string, Tensor> before;
    for (const std::string& n : s.state_names()) before[n] = s.state(n).clone();
    TensorMap b = wrn_batch(4, static_cast<uint64_t>(2 + r));
    if (r == 1) b.begin()->second.data<float>()[5] = NAN;
    const std::string e = error_of([&] { dp.step(b, 0.05f); });
    CHECK(e.find("averaged over the ranks") != std::string::npos);
    CHECK(dev.counts().skipped > 0);
    for (const std::string& n : s.state_names()) {
      CAPTURE(n);
      CHECK(bitwise_equal(s.state(n), before[n]));
    }
  });
  std::vector<std::string> values(2);
  ranks(60, [&](int r, TrainingSession& s, DataParallel& dp, StandinDevice& dev) {
    dp.step(wrn_batch(4, 1), 0.05f);
    std::map<std::string, Tensor> before;
    for (const std::string& n : s.state_names()) before[n] = s.state(n).clone();
    TensorMap b = wrn_batch(4, static_cast<uint64_t>(2 + r));
    if (r == 1) b.begin()->second.data<float>()[5] = NAN;  // only rank 1's batch is bad
    dev.reset_counts();
    try {
      dp.step(b, 0.05f);
    } catch (const NumericalError& e) {
      values[static_cast<size_t>(r)] = e.value;
      CHECK(std::string(e.what()).find("averaged over the ranks") != std::string::npos);
    }
    CHECK(dev.counts().syncs == 1);
    CHECK(dev.counts().skipped > 0);  // the optimizer kernels wrote nothing
    for (const std::string& n : s.state_names()) {
      CAPTURE(n);
      CHECK(bitwise_equal(s.state(n), before[n]));
    }
    // Still in step: a stop asked for by rank 1 stops both after the same step.
    dp.step(wrn_batch(4, 9), 0.05f, /*stop=*/r == 1);
    CHECK(dp.stop_agreed());
    CHECK(dp.state_identical());
  });
  CHECK(!values[0].empty());
  CHECK(values[0] == values[1]);
  // A rank that dies: the other's collective ends after the timeout with a Peer error.
  ranks(0.3, [&](int r, TrainingSession&, DataParallel& dp, StandinDevice&) {
    dp.step(wrn_batch(4, 1), 0.05f);
    if (r == 1) return;
    ErrorKind kind{};
    const std::string msg = error_of([&] { dp.step(wrn_batch(4, 2), 0.05f); }, &kind);
    CHECK(kind == ErrorKind::Peer);
    CHECK(msg.find("no answer from the other ranks") != std::string::npos);
  });
}

TEST_CASE("device backend: data-parallel steps queued ahead of the host: one synchronisation per window") {
  // DataParallel::queue_step on the path ordered by events (the NCCL path): the step
  // hooks only issue work in stream order, each run copies its check flags, mean loss
  // and stop flag out at its end, and finish_steps() reads them after one
  // synchronisation. The communication stream runs as late as its events allow. Two
  // ranks on the stand-in must equal two reference ranks stepping one at a time, bit for
  // bit; a NaN on one rank ends both ranks' lists at the same step with the state of the
  // step before it (the later steps of the window skip their state writes on the
  // device), and the next window trains on as the reference does.
  Graph g = small_wrn();
  constexpr int kSteps = 8, kBad = 5;
  auto batch = [](int step, int r, bool poisoned) {
    TensorMap b = wrn_batch(4, static_cast<uint64_t>(10 * step + r + 3));
    if (poisoned && step == kBad && r == 1) b.at("input").data<float>()[9] = std::nanf("");
    return b;
  };
  const DataParallelOptions buckets{.bucket_cap_bytes = 8 << 10, .first_bucket_cap_bytes = 1 << 10};
  // The reference ranks: kSteps clean steps (variant 0), or kBad steps, the failing one, and two more (1).
  std::vector<double> want[2];
  std::map<std::string, Tensor> want_state[2];
  std::string want_error[2];  // per rank
  for (int variant = 0; variant < 2; ++variant) {
    LocalGroup group(2);
    std::mutex mu;
    on_ranks(2, [&](int r) {
      auto c = group.communicator(r);
      TrainingSession s(wrn_training(g), make_backend("reference"), {.seed = static_cast<uint64_t>(7 + r)});
      DataParallel dp(s, *c, buckets);
      dp.broadcast_state();
      std::vector<double> losses;
      std::string err;
      for (int step = 0; step < kSteps; ++step) {
        if (variant == 1 && step == kBad) {
          err = error_of([&] { dp.step(batch(step, r, true), 0.05f); });
          continue;
        }
        if (variant == 1 && step > kBad + 2) break;
        losses.push_back(dp.step(batch(step, r, false), 0.05f));
      }
      std::lock_guard<std::mutex> lock(mu);
      if (variant == 1) want_error[r] = err;
      if (r != 0) return;
      want[variant] = losses;
      for (const std::string& n : s.state_names()) want_state[variant][n] = s.state(n).clone();
    });
  }
  REQUIRE(!want_error[0].empty());
  // Variant 2: variant 0's steps with an op on the host (Flatten): each step then runs at
  // queue_step() with its synchronisation, and the window still reads the same results.
  for (int variant = 0; variant < 3; ++variant) {
    CAPTURE(variant);
    StandinCollectives collectives(2);
    std::mutex mu;
    on_ranks(2, [&](int r) {
      auto standin = std::make_unique<StandinDevice>(std::set<std::string>{});  // every op a device kernel
      StandinDevice& dev = *standin;
      dev.late_stream = Backend::Stream::comm;
      if (variant == 2) dev.also_on_host = {"Flatten"};
      auto c = collectives.communicator(r, dev, {.timeout_seconds = 60});
      TrainingSession s(wrn_training(g), std::move(standin), {.seed = static_cast<uint64_t>(7 + r)});
      DataParallel dp(s, *c, buckets);
      dp.broadcast_state();
      std::vector<double> losses;
      if (variant != 1) {
        for (int step = 0; step < kSteps; ++step) {
          // Rank 1 asks to stop with step 3: every rank learns it when the window is read.
          dp.queue_step(batch(step, r, false), 0.05f, /*stop=*/r == 1 && step == 3);
          CHECK(!dp.stop_agreed());           // nothing is read while the window is open
          if (step == 0) dev.reset_counts();  // the first step runs at once (it builds the plan)
        }
        const StandinDevice::Counts queued = dev.counts();
        if (variant == 0) {
          CHECK(queued.syncs == 0);
          CHECK(queued.host_waits == kSteps - 1 - 4);  // launches beyond 4 in flight wait for the oldest's end event
        } else {
          CHECK(queued.syncs >= kSteps - 1);  // each ran at once, its host op synchronising too
        }
        const TrainingSession::Finished f = dp.finish_steps();
        CHECK(!f.error);
        losses = f.losses;
        CHECK(f.losses.size() == static_cast<size_t>(kSteps));
        if (variant == 0) {
          CHECK(dev.counts().syncs == 1);
          CHECK(dev.counts().allocations == 0);  // the copy-out buffers came with the first run
          // The second run was captured with its hooks' collectives; every later one replayed.
          CHECK(dev.counts().captures == 1);
          CHECK(dev.counts().replays == kSteps - 1);
        } else {
          CHECK(dev.counts().captures == 0);
        }
        CHECK(dp.stop_agreed());
        CHECK(s.steps_done() == kSteps);
      } else {
        // The failure is found when the window is read: every step was issued.
        for (int step = 0; step < kSteps; ++step) dp.queue_step(batch(step, r, true), 0.05f);
        const TrainingSession::Finished f = dp.finish_steps();
        REQUIRE(f.error);
        CHECK(std::string(f.error->what()) == want_error[r]);  // on both ranks: the averaged gradient's fault
        CHECK(f.losses.size() == static_cast<size_t>(kBad));
        CHECK(s.steps_done() == kBad);
        CHECK(dev.counts().skipped > 0);
        losses = f.losses;
        // The next window starts clean.
        for (int step = kBad + 1; step < kBad + 3; ++step) dp.queue_step(batch(step, r, false), 0.05f);
        const TrainingSession::Finished again = dp.finish_steps();
        CHECK(!again.error);
        losses.insert(losses.end(), again.losses.begin(), again.losses.end());
        CHECK(!dp.stop_agreed());
      }
      CHECK(dp.state_identical());
      if (r != 0) return;
      std::lock_guard<std::mutex> lock(mu);
      CHECK(losses == want[variant % 2]);
      for (const std::string& n : s.state_names()) {
        CAPTURE(n);
        CHECK(bitwise_equal(s.state(n), want_state[variant % 2].at(n)));
      }
    });
  }
}

TEST_CASE("device backend: the memory refusal counts the arena (data-parallel buckets in it), outputs, staged inputs") {
  // Before the first step, nothing allocated yet: a limit one byte short of everything the
  // run will hold beside its state is refused; exactly enough runs. The buckets are
  // ranges of the arena: nothing is reserved beside it for them.
  Graph g = small_wrn();
  const TensorMap batch = wrn_batch(4, 2);
  size_t staged = sizeof(float);  // the learning rate, a float32 scalar feed
  for (const auto& [name, t] : batch) staged += t.nbytes();
  staged *= 3;  // the staged buffer and two landing buffers per feed (asynchronous backend)
  size_t plan_bytes = 0, reserve = 0;
  {
    LocalGroup group(1);
    auto c = group.communicator(0);
    TrainingSession s(wrn_training(g), std::make_unique<StandinDevice>(), {.seed = 1});
    DataParallel dp(s, *c);
    dp.step(batch, 0.05f);
    plan_bytes = s.plan().arena_bytes + s.plan().output_bytes;
    REQUIRE(s.plan().groups.size() == dp.buckets().size());
    size_t grads = 0, grouped = 0;
    for (const std::string& p : s.training().params) grads += s.training().graph.initializers.at(p).nbytes();
    for (const PlannedGroup& pg : s.plan().groups) grouped += pg.bytes;
    CHECK(grouped >= grads + 2 * sizeof(float));
    CHECK(plan_bytes >= grouped);
  }
  for (const size_t limit : {plan_bytes + staged + reserve - 1, plan_bytes + staged + reserve}) {
    CAPTURE(limit);
    LocalGroup group(1);
    auto c = group.communicator(0);
    auto owned = std::make_unique<StandinDevice>();
    StandinDevice& dev = *owned;
    TrainingSession s(wrn_training(g), std::move(owned), {.seed = 1});
    s.set_memory_limit(limit);
    DataParallel dp(s, *c);
    const std::string e = error_of([&] { dp.step(batch, 0.05f); });
    if (limit < plan_bytes + staged + reserve) {
      CHECK(e.find("memory plan: needs") != std::string::npos);
      CHECK(e.find(", reserved ") != std::string::npos);
      CHECK(dev.counts().launched == 0);  // refused before any kernel
    } else {
      CHECK(e.empty());
    }
  }
}

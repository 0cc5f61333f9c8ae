// Data-parallel training: every rank runs the same TrainingSession on its own shard of
// the batch, and the gradients are averaged over the ranks in buckets while the backward
// pass goes on.
//
//   TrainingSession s(build_training_graph(model, opts), make_backend("cpu"));
//   std::unique_ptr<Communicator> c = make_communicator(rank_environment());
//   DataParallel dp(s, *c);              // bucket caps: DataParallelOptions
//   dp.broadcast_state();                // rank 0's parameters and state everywhere
//   double loss = dp.step(my_shard, lr); // mean loss over the ranks
//
// How a step runs (PyTorch DDP's scheme, on the plan instead of autograd hooks):
//   - the buckets (distribution/buckets.h) group the gradients in the order the plan writes
//     them, about 25 MB each, the first one small so communication starts early;
//   - the planner lays each bucket's gradients out back to back in the arena
//     (PlanOptions::contiguous; bucket 0 with room for the loss and stop flag after
//     them), so a bucket is one flat range of memory with no packing copy;
//   - after the plan step that writes a bucket's last gradient, its sum all-reduce starts
//     on the communicator's thread, in place on that range, while the executor goes on
//     with the backward pass;
//   - before an optimizer node runs, it waits for the buckets holding the gradients it
//     reads (only those) and divides by the rank count: every rank then applies the same
//     update to the same parameters, so parameters stay bit-identical;
//   - the first bucket also carries the loss (the step's mean loss over the ranks) and a
//     stop flag (a rank that got SIGTERM/SIGUSR1: every rank stops after the same step).
// Ordered by events instead (a communicator that orders_by_events, NCCL, on a backend
// whose memory the host cannot see, cuda): an event of the compute stream starts a
// bucket's ncclAvg all-reduce on the communication stream, in place in the arena, and
// before the first state write the compute stream waits for every bucket's event and
// checks the averages on the device into flags; the optimizer kernels skip
// on a lowered flag (StepHooks::skip_flag). The run copies the flags, the mean loss and
// the stop flag out at its end (RunOptions::copy_out); the host reads them once the run
// has ended (TrainingSession's after-run hook), and reports the same NumericalError as
// below. The averages are waited for all at
// once before the optimizer, not per bucket: the optimizer of an early bucket does not
// overlap a late bucket's all-reduce (one bad average anywhere must stop every update,
// as DDP's optimizer step waits for every bucket).
// The hooks issue the same stream work every step, so the executor captures the step with
// its collectives as a CUDA graph and replays it; what a replay cannot do runs around
// it (before_steps: the flags' reset and this rank's stop flag into device memory;
// after_steps: one watch of the step's collectives, Communicator::watch_device).
// On that path steps can also be queued ahead of the host (queue_step, finish_steps), as
// TrainingSession::queue_step queues them on one rank: the hooks only issue work in
// stream order, each run copies its flags, mean loss and stop flag out at its end
// (RunOptions::copy_out), and they are read when the window of queued steps is
// collected. The "any check failed" flag is reset where a window starts, so after a
// failed step the later steps of the window write no state, on every rank alike. Every
// rank must queue and collect the same steps (the trainer ends its windows at step
// numbers all ranks share): a collective issued by one rank only would wait for its
// peers until --comm-timeout.
// NaN/Inf checks run on the averaged gradients and loss, which every rank holds alike, so
// every rank stops (or, with fp16 loss scaling, skips the step) together; a check of a
// rank's own gradients would stop that rank alone and leave the others waiting.
//
// BatchNormalization running statistics stay per rank, as in DDP; broadcast_buffers()
// gives every rank rank 0's before validation and export (DDP broadcasts them with every
// forward pass, which leaves the same values).
//
// A bucket the plan could not lay out in place (a gradient that is not an arena value of
// its own, e.g. one kept as a separate output) gets a flat buffer of its own, allocated
// when the plan first runs and not counted in the memory refusal, and its gradients are
// packed into it and copied back (packed_buckets() counts them; none in a training graph).
//
// Backend-independent: it only moves tensors between the plan's gradient values and the
// communicator, so the CPU tests (LocalGroup) exercise the logic a GPU run uses.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "distribution/buckets.h"
#include "distribution/communicator.h"
#include "runtime/step_hooks.h"
#include "runtime/trace.h"
#include "runtime/training_session.h"

namespace trainrt {

struct DataParallelOptions {
  size_t bucket_cap_bytes = kDefaultBucketCap;
  size_t first_bucket_cap_bytes = kDefaultFirstBucketCap;
};

// When a bucket's all-reduce ran in the last step (steady_clock ns, runtime/trace.h clock).
struct BucketTiming {
  int bucket = 0;
  size_t bytes = 0;
  int64_t ready_ns = 0;              // its last gradient written, all-reduce asked for
  int64_t start_ns = 0, end_ns = 0;  // on the communicator's thread
  int64_t wait_ns = 0;               // how long the optimizer waited for it (not hidden by backward work)
};

// The step hooks it installs on the session (StepHooks, private: only the session calls
// them) start and finish the buckets' all-reduces.
class DataParallel : private StepHooks {
 public:
  // Installs the session's step hooks (removed again by the destructor) and turns off its
  // per-rank NaN checks: they run on the averaged values here instead.
  DataParallel(TrainingSession& s, Communicator& c, DataParallelOptions o = {});
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int rank() const { return comm_.rank(); }
  int world() const { return comm_.world(); }
  Communicator& communicator() { return comm_; }

  // Checks that every rank holds the same model (state names, types and shapes; Peer
  // error naming the first difference otherwise), then copies `root`'s state (parameters,
  // optimizer state, running statistics, loss scaler) to every rank.
  void broadcast_state(int root = 0);
  // Only the state no optimizer writes (BatchNormalization running statistics).
  void broadcast_buffers(int root = 0);

  // One step on this rank's batch; returns the step's loss averaged over the ranks.
  // `stop`: this rank wants to stop after this step (stop_agreed() tells whether any did).
  // Throws NumericalError like TrainingSession::step, on every rank alike.
  double step(const TensorMap& batch, float lr, bool stop = false);
  // stop_agreed(): after step() (and a queued step that ran at once), whether a rank asked
  // to stop with it; after finish_steps(), with any step of the window; false while
  // queued steps are unread.
  bool stop_agreed() const { return stop_agreed_; }
  // Steps queued ahead of the host, as TrainingSession::queue_step and finish_steps (the
  // losses are the means over the ranks). Off the device path (a host communicator, a
  // host backend, the first step) a queued step runs at once, its loss kept in the list.
  void queue_step(const TensorMap& batch, float lr, bool stop = false);
  TrainingSession::Finished finish_steps();
  bool queue_failed() const { return finished_.error.has_value() || s_.queue_failed(); }
  // A diagnostic rerun on this rank alone (no communication): TrainingSession::find_anomaly.
  std::optional<NumericalError> find_anomaly(const TensorMap& batch, float lr);

  // True when every rank's parameters and optimizer state are bit-identical (a checksum
  // compared over the ranks): what the averaged updates guarantee.
  bool state_identical();

  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  // Buckets of the current plan that are not a range of the arena (see above).
  size_t packed_buckets() const;
  // The host path's bucket timings of the last step (none on the device path, where the
  // all-reduces run on the communication stream, captured with the step).
  const std::vector<BucketTiming>& last_timings() const {
    static const std::vector<BucketTiming> none;
    return events_ ? none : timings_;
  }
  // All-reduce time summed over the steps since the last call (the host path's: on the
  // communicator's thread, and how long the optimizer waited), the steps timed so and
  // all steps.
  struct ReduceTotals {
    double reduce_ms = 0, exposed_ms = 0;
    int64_t timed = 0, steps = 0;
  };
  ReduceTotals take_reduce_totals() { return std::exchange(totals_, {}); }

 private:
  struct Bucket;
  void prepare();  // buckets and buffers for the session's current plan
  std::vector<ContiguousGroup> bucket_groups(const Plan& p) const;  // PlanOptions::contiguous
  void bind_in_place();                                             // the in-place buckets' views on the current arena
  void start(size_t b);                                             // pack and all-reduce
  void finish(size_t b, bool check);                                // wait, average, unpack, check
  void drain();                                                     // wait for every started bucket, no checks
  // The device path, ordered by events (Communicator::orders_by_events: NCCL on the cuda
  // backend): no synchronisation per bucket; checks on the device lower a flag the
  // session's state writers skip on, read once the step has ended.
  void choose_events(const Plan& plan);
  void start_on_device(size_t b);
  void finish_on_device(size_t b, bool check);
  double conclude_on_device(const TensorMap& results);
  void absorb();  // the session's queued steps into finished_
  Tensor bucket_view(const Tensor& buffer, size_t at, const std::vector<int64_t>& dims) const;
  void pack(Bucket& st);
  NumericalError numerical_fault(const Plan& plan, const std::string& value, const std::string& what) const;
  bool staged() const;  // the backend's memory is not the host's (Bucket)
  // StepHooks: the buckets of a new plan, the starts and finishes of the all-reduces.
  void before_steps() override;
  void after_steps() override;
  void before_step(int step) override;
  void after_step(int step) override;
  bool queue_only() const override { return queue_only_; }
  const uint64_t* skip_flag() const override { return reinterpret_cast<const uint64_t*>(any_.get()); }
  double after_run(const TensorMap& results);
  void set_hooks(bool on);  // install (or remove) the session's step hooks and after-run hook
  std::vector<std::string> buffer_names() const;
  void broadcast_names(const std::vector<std::string>& names, int root, const std::string& what);

  TrainingSession& s_;
  Communicator& comm_;
  DataParallelOptions opts_;
  const Plan* plan_ = nullptr;  // the plan the buckets were made for
  std::vector<GradientBucket> buckets_;
  std::vector<std::unique_ptr<Bucket>> state_;
  std::vector<std::vector<size_t>> ready_at_, need_at_;  // per plan step: buckets to start / to finish
  std::vector<BucketTiming> timings_;
  DataType dtype_ = DataType::Float32;
  bool stop_ = false, stop_agreed_ = false;
  double mean_loss_ = 0;
  bool have_mean_loss_ = false;
  Tensor loss_host_;  // staged: the loss, copied out with bucket 0
  // The device path (choose_events): check flags per bucket value, then the mean loss and
  // stop flag (8 bytes each), in the backend's memory, copied out at each run's end as
  // `checks_` (RunOptions::copy_out); "any" apart, allocated with this object.
  bool events_ = false;
  bool queue_only_ = false;  // StepHooks::queue_only: the device path's hooks only queue stream work
  std::vector<uint64_t> flags_init_;
  std::shared_ptr<std::byte[]> flags_;
  std::shared_ptr<std::byte[]> any_;  // "some check failed": the state writers' skip flag
  std::vector<std::pair<std::string, Tensor>> checks_;
  // The watch of each run issued and not yet concluded (oldest first; null: none needed).
  std::deque<std::shared_ptr<CommRequest>> watches_;
  // Queued steps (queue_step): a window is open from the first queued step to
  // finish_steps(); `finished_` holds the steps that ran at once, and the window's stop.
  bool window_open_ = false, window_stop_ = false;
  ReduceTotals totals_;
  void add_totals();                                             // the last step's timings_ into totals_
  double run_step(const TensorMap& batch, float lr, bool stop);  // step() without its window guard
  TrainingSession::Finished finished_;
};

}  // namespace trainrt

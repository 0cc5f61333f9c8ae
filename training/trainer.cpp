// The training run behind training/trainer.h (and `trainrt train`).
//
// A Stepper is the one step interface for one rank and many: with several ranks the
// step goes through DataParallel (gradients averaged, stop flags agreed). A Tracer
// records --trace. Trainer::Run is the loop: epochs of steps (queued ahead of the host
// where nothing needs their losses at once), validation, checkpoints, the summary.
//
// Where the pieces live: checkpoints training/checkpoint.h; the fused training step
// runtime/training_session.h; the precision ops/core/kernel.h (MathPrecision) and
// runtime/loss_scaler.h; ranks distribution/communicator.h and distribution/data_parallel.h.
#include "training/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <set>

#include "datasets/pipeline.h"
#include "distribution/data_parallel.h"
#include "graph/error.h"
#include "graph/onnx_io.h"
#include "ops/core/register_all.h"
#include "passes/passes.h"
#ifdef TRAINRT_HAVE_CUDA
#include "distribution/cuda/nccl_communicator.h"
#endif
#include "runtime/timing_cache.h"
#include "runtime/trace.h"
#include "runtime/training_session.h"
#include "training/metrics.h"
#include "training/run_setup.h"
#include "training/stop_signals.h"

namespace trainrt {

namespace {

// With ranks, queued steps are collected at least every this many steps (global step
// numbers, the same on every rank): a stop signal on one rank takes effect within it.
constexpr int64_t kRankWindow = 16;

bool early_stop(const std::vector<double>& acc, int64_t patience, double target) {
  return static_cast<int64_t>(acc.size()) >= patience &&
         std::all_of(acc.end() - patience, acc.end(), [&](double a) { return a >= target; });
}

// per_rank_batch and global_batch from batch_size and the ranks where the caller left
// them 0 (`trainrt train` sets them from its flags, with the same rule).
TrainConfig with_batches(TrainConfig c) {
  if (c.per_rank_batch > 0) return c;
  c.per_rank_batch = c.batch_size / c.env.world;
  c.global_batch = c.per_rank_batch * c.env.world;
  if (c.per_rank_batch == 0)
    throw_bad_input("--batch-size", std::to_string(c.batch_size) + " is smaller than the " +
                                        std::to_string(c.env.world) +
                                        " ranks (each rank needs at least one image per step)");
  return c;
}

// One training step, the same calls with one rank and with many. With several ranks
// the step goes through DataParallel: gradients averaged in buckets, and every rank's
// stop flag travels with them so that all ranks stop after the same step.
class Stepper {
 public:
  Stepper(TrainingSession& s, Communicator* comm, std::unique_ptr<DataParallel> dp)
      : session_(s), comm_(comm), dp_(std::move(dp)) {}

  bool data_parallel() const { return dp_ != nullptr; }
  double step(const TensorMap& feeds, float lr) {
    return dp_ ? dp_->step(feeds, lr, stop_signal() != 0) : session_.step(feeds, lr);
  }
  // Steps queued ahead of the host (TrainingSession::queue_step; with ranks
  // DataParallel::queue_step, this rank's stop flag travelling with the step).
  void queue(const TensorMap& feeds, float lr) {
    if (dp_)
      dp_->queue_step(feeds, lr, stop_signal() != 0);
    else
      session_.queue_step(feeds, lr);
  }
  TrainingSession::Finished finish() { return dp_ ? dp_->finish_steps() : session_.finish_steps(); }
  bool queue_failed() const { return dp_ ? dp_->queue_failed() : session_.queue_failed(); }
  DataParallel::ReduceTotals take_reduce_totals() {
    return dp_ ? dp_->take_reduce_totals() : DataParallel::ReduceTotals{};
  }
  std::optional<NumericalError> find_anomaly(const TensorMap& feeds, float lr) {
    return dp_ ? dp_->find_anomaly(feeds, lr) : session_.find_anomaly(feeds, lr);
  }
  // Whether any rank has a stop signal: after a step, what travelled with the gradients;
  // elsewhere (`after_step` false) the ranks' flags are summed now.
  bool stop_anywhere(bool after_step) {
    if (!dp_) return stop_signal() != 0;
    if (after_step) return dp_->stop_agreed();
    std::vector<double> flag{stop_signal() != 0 ? 1.0 : 0.0};
    comm_->sum(flag, "stop-signal agreement");
    return flag[0] > 0;
  }
  const std::vector<BucketTiming>& timings() const {
    static const std::vector<BucketTiming> none;
    return dp_ ? dp_->last_timings() : none;
  }
  // Rank 0's state everywhere (also catches ranks that loaded different models).
  void broadcast_state() {
    if (dp_) dp_->broadcast_state();
  }
  // Rank 0's BatchNormalization statistics everywhere, before validation.
  void broadcast_buffers() {
    if (dp_) dp_->broadcast_buffers();
  }
  // The averaged updates keep the ranks' parameters bit-identical; InternalError if not.
  void check_identical() {
    if (dp_ && !dp_->state_identical())
      throw_internal("data-parallel training", "the ranks' parameters differ at the end of training");
  }

 private:
  TrainingSession& session_;
  Communicator* comm_;
  std::unique_ptr<DataParallel> dp_;
};

// --trace: the session's per-node events plus data-loading (and all-reduce) lanes on
// the same clock, for --trace-steps steps from the run's 2nd (the 1st builds the plan).
class Tracer {
 public:
  Tracer(const TrainConfig& c, bool data_parallel) : path_(c.trace_path), steps_(c.trace_steps) {
    lanes_ = {{"data: prepare batch", {}}, {"data: consumer wait", {}}, {"train step", {}}};
    if (data_parallel) lanes_.push_back({"all-reduce (gradient buckets)", {}});
  }
  // Where the session records this step's node events; null when it is not traced.
  ProfileCollector* profile_for(int64_t steps_this_run) {
    return !path_.empty() && steps_this_run >= 1 && traced_ < steps_ ? &profile_ : nullptr;
  }
  // Adds a traced step's slices; true when it was the last step to trace.
  bool record(const Batch& b, int64_t start_ns, int64_t end_ns, int64_t global_step,
              const std::vector<BucketTiming>& buckets) {
    const std::string k = "batch " + std::to_string(b.index);
    lanes_[0].slices.push_back({k, b.prepare_start_ns, b.prepare_end_ns});
    lanes_[1].slices.push_back({k, start_ns - static_cast<int64_t>(b.wait_seconds * 1e9), start_ns});
    lanes_[2].slices.push_back({"step " + std::to_string(global_step), start_ns, end_ns});
    for (const BucketTiming& t : buckets)
      lanes_[3].slices.push_back({"bucket " + std::to_string(t.bucket) + " (" + std::to_string(t.bytes >> 10) +
                                      " KiB, optimizer waited " + std::to_string(t.wait_ns / 1000) + " us)",
                                  t.start_ns, t.end_ns});
    return ++traced_ == steps_;
  }
  // Writes the trace once, when a step was traced, and prints the per-op table.
  void write(TrainingSession& session) {
    if (path_.empty() || written_ || traced_ == 0) return;
    session.set_profile(nullptr);
    write_chrome_trace(path_, profile_.events, lanes_);
    written_ = true;
    std::printf("Trace of %lld steps written to %s\n%s", static_cast<long long>(traced_), path_.c_str(),
                profile_table(profile_.events).c_str());
    std::fflush(stdout);
  }

 private:
  std::string path_;
  int64_t steps_ = 0, traced_ = 0;
  bool written_ = false;
  ProfileCollector profile_;
  std::vector<TraceLane> lanes_;
};

}  // namespace

// A model and data given in memory (Trainer's second constructor).
struct GivenInputs {
  Graph model;
  Dataset train, test;
};

class Trainer::Run {
 public:
  Run(const TrainConfig& c, std::optional<GivenInputs> given);
  ~Run() {
    if (iteration_times_) std::fclose(iteration_times_);
  }
  void restore(const Checkpoint& ck);
  int run();
  Evaluation evaluate();
  std::string save(const std::string& dir);
  const TrainerState& state() const { return st_; }
  TrainingSession& session() { return *session_; }
  const Graph& model() const { return forward_; }

 private:
  void start_ranks();
  void load_model_and_data(std::optional<GivenInputs> given);
  void print_start() const;
  bool train_epoch();
  // A step queued on the session and not yet accounted for (1-based numbers, as printed).
  struct Pending {
    int64_t epoch, step, global_step;
    double lr;
  };
  bool queue_step(const Batch& b, double lr);
  double train_step(const Batch& b, double lr);
  void finish_queued();
  void account(double loss, const Pending& at);
  [[noreturn]] void step_failed(const std::string& what, ErrorKind kind) const;
  [[noreturn]] void step_failed(const Pending& at, const std::string& what, ErrorKind kind) const;
  void log_progress(double loss, int64_t steps, int64_t first_step, std::chrono::steady_clock::time_point t0) const;
  Evaluation validate(const std::function<bool()>& stop);
  bool end_epoch(double epoch_time);
  bool stop_requested(bool after_step);
  void print_summary();
  void export_models() const;
  void save_timing_cache();

  const TrainConfig c_;
  std::unique_ptr<Communicator> comm_, gpu_comm_;
  bool lead_ = true;
  int rank_threads_ = 0;
  std::unique_ptr<Backend> backend_, eval_backend_;
  Dataset train_, test_;
  Graph forward_;
  ModelIo io_;
  std::unique_ptr<EngineChooser> chooser_;  // --device cuda: the timing cache (before the session: outlives it)
  std::unique_ptr<TrainingSession> session_;
  std::unique_ptr<Stepper> stepper_;
  std::unique_ptr<Tracer> tracer_;
  std::unique_ptr<MetricsWriter> metrics_;
  TrainerState st_;
  std::string last_checkpoint_;
  bool resumed_ = false;  // restore() was called: --metrics continues its file
  int64_t steps_this_run_ = 0;
  std::vector<Pending> queued_;           // steps queued on the session (TrainingSession::queue_step)
  double last_loss_ = 0;                  // the loss of the last step accounted for
  std::FILE* iteration_times_ = nullptr;  // --iteration-times, rank 0
  bool max_steps_reached() const { return c_.max_steps > 0 && st_.global_step >= c_.max_steps; }
  const bool tty_ = ::isatty(STDOUT_FILENO);
};

Trainer::Run::Run(const TrainConfig& c, std::optional<GivenInputs> given) : c_(with_batches(c)) {
  start_ranks();
  load_model_and_data(std::move(given));
  chooser_ = make_engine_chooser(c.backend, c.timing_cache, c.autotune);
  session_ = std::make_unique<TrainingSession>(build_training_graph(forward_, c.optimizer), std::move(backend_),
                                               SessionOptions{.seed = c.seed,
                                                              .fuse = c.fuse,
                                                              .blocked_layouts = c.channels_last,
                                                              .math = c.math,
                                                              .conv = c.conv,
                                                              .concurrent_branches = c.concurrent,
                                                              .chooser = chooser_.get()});
  eval_backend_ = make_backend(c.backend, rank_threads_);
  if (c.device == "cuda") eval_backend_->blocked_layouts = c.channels_last;  // --layout for validation too
    // GPU ranks sum their buckets with NCCL; MPI stays for NCCL's id and the host-side sums.
#ifdef TRAINRT_HAVE_CUDA
  if (comm_ && c.device == "cuda") gpu_comm_ = make_nccl_communicator(*comm_, {.timeout_seconds = c.comm_timeout});
#endif
  std::unique_ptr<DataParallel> dp;
  if (comm_)
    dp = std::make_unique<DataParallel>(
        *session_, gpu_comm_ ? *gpu_comm_ : *comm_,
        DataParallelOptions{.bucket_cap_bytes = static_cast<size_t>(c.bucket_mb * (1 << 20)),
                            .first_bucket_cap_bytes = static_cast<size_t>(c.first_bucket_mb * (1 << 20))});
  stepper_ = std::make_unique<Stepper>(*session_, comm_.get(), std::move(dp));
  // Validation's plan and weights live beside the training step's: counted before it.
  session_->set_memory_reserve(session_->memory_reserve() + evaluation_bytes(forward_, io_, test_, c.batch_size,
                                                                             staged_copies(session_->backend())));
  tracer_ = std::make_unique<Tracer>(c, stepper_->data_parallel());
  st_.seed = c.seed;
  if (lead_ && !c.iteration_times_path.empty() && !(iteration_times_ = std::fopen(c.iteration_times_path.c_str(), "w")))
    throw_bad_input("--iteration-times " + c.iteration_times_path, "cannot open for writing");
}

// Ranks first: MPI_Init waits for every rank (under a watchdog), before any long work.
void Trainer::Run::start_ranks() {
  comm_ = make_communicator(c_.env, {.timeout_seconds = c_.comm_timeout});
  lead_ = c_.env.rank == 0;
  // Only rank 0 talks (the seed's `if global_rank == 0: print`); errors still reach stderr.
  if (!lead_ && !std::freopen("/dev/null", "w", stdout))
    throw_internal("stdout", "cannot silence rank " + std::to_string(c_.env.rank));
  rank_threads_ = c_.threads > 0 ? static_cast<int>(c_.threads) : default_rank_threads(c_.env.local_world);
  configure_threads(rank_threads_);
  set_default_fp32_math(c_.fp32_math);
  set_default_deterministic(c_.deterministic);
  backend_ = make_backend(c_.backend, rank_threads_);
  backend_->check_math(c_.math);
}

// The model first: an image folder's crops default to the model's input H/W.
void Trainer::Run::load_model_and_data(std::optional<GivenInputs> given) {
  if (given) {
    forward_ = std::move(given->model);
    train_ = std::move(given->train);
    test_ = std::move(given->test);
  } else {
    forward_ = import_onnx_file(c_.model_path, registry().schemas);
    train_ = load_split(c_.data, forward_, /*train=*/true, c_.limit_train);
    test_ = load_split(c_.data, forward_, /*train=*/false, c_.limit_test);
  }
  io_ = model_io(forward_, train_, c_.model_path);
  for (const std::string& f : c_.optimizer.freeze)
    if (!forward_.is_initializer(f) || !dtype_is_float(forward_.initializers.at(f).dtype()))
      throw_bad_input("--freeze " + f, "is not a float initializer of " + c_.model_path);
}

// The checkpoint must hold exactly the session's states (its names are checked here,
// with a hint when it is of an fp16 run or this one is); the session checks each
// tensor's type and shape; every tensor is checked before the first one is applied.
void Trainer::Run::restore(const Checkpoint& ck) {
  const std::string where = c_.resume.empty() ? std::string("checkpoint to restore") : c_.resume;
  const std::vector<std::string> names = session_->state_names();
  const std::set<std::string> want(names.begin(), names.end());
  for (const auto& [name, t] : ck.state)
    if (!want.count(name))
      throw_bad_input(where, "checkpoint tensor '" + name + "' is not a state of this model" +
                                 (name.rfind("loss_scaler.", 0) == 0 ? " (the checkpoint is of an fp16 run)" : ""));
  for (const std::string& n : names)
    if (!ck.state.count(n))
      throw_bad_input(where, "checkpoint has no tensor '" + n + "'" +
                                 (n.rfind("loss_scaler.", 0) == 0 ? " (it is not of an fp16 run)" : ""));
  try {
    for (const std::string& n : names) session_->check_state(n, ck.state.at(n));
    for (const std::string& n : names) session_->set_state(n, ck.state.at(n));
  } catch (const Error& e) {
    throw_bad_input(where, std::string("checkpoint ") + e.what());
  }
  st_ = ck.trainer;
  st_.config.clear();
  resumed_ = true;
  session_->set_steps_done(st_.global_step);
  last_checkpoint_ = c_.resume;
}

void Trainer::Run::print_start() const {
  const int64_t world = c_.env.world;
  if (stepper_->data_parallel())
    std::printf(
        "Training started with %lld processes across %lld nodes (%s, MPI); %d threads per rank, global batch %lld = "
        "%lld ranks x %lld, gradient buckets of %g MB (first %g MB)\n",
        static_cast<long long>(world), static_cast<long long>(std::max<int64_t>(1, world / c_.env.local_world)),
        c_.env.launcher.c_str(), rank_threads_, static_cast<long long>(c_.global_batch), static_cast<long long>(world),
        static_cast<long long>(c_.per_rank_batch), c_.bucket_mb, c_.first_bucket_mb);
  std::printf(
      "Training %s on %s with Batch Size: %lld (%lld training images, %lld test images, %zu parameter tensors, %s)\n",
      c_.model_path.c_str(), c_.data.dataset.c_str(), static_cast<long long>(c_.global_batch),
      static_cast<long long>(train_.size()), static_cast<long long>(test_.size()), session_->training().params.size(),
      c_.precision.c_str());
  if (c_.math == MathPrecision::fp16)
    std::printf(
        "fp16: convolution and matrix-product inputs rounded to half precision (%s), dynamic loss scaling from %g\n",
        c_.backend == "cuda" ? "16-bit copies on the tensor cores" : "emulated on the cpu backend, no speed-up",
        static_cast<double>(session_->loss_scale()));
  if (!c_.resume.empty())
    std::printf("Resumed from %s at epoch %lld, step %lld (global step %lld)\n", c_.resume.c_str(),
                static_cast<long long>(st_.epoch + 1), static_cast<long long>(st_.step_in_epoch),
                static_cast<long long>(st_.global_step));
  std::fflush(stdout);
}

int Trainer::Run::run() {
  stepper_->broadcast_state();
  metrics_ = !resumed_ ? std::make_unique<MetricsWriter>(c_.metrics_path)
                       : std::make_unique<MetricsWriter>(c_.metrics_path, st_.global_step, st_.epoch);
  print_start();
  install_stop_signals();
  while (st_.epoch < c_.epochs && !max_steps_reached()) {
    if (st_.step_in_epoch == 0 && early_stop(st_.val_accuracy, c_.patience, c_.target_accuracy)) {
      std::printf("Early stopping after epoch %lld\n", static_cast<long long>(st_.epoch));
      break;
    }
    if (!train_epoch()) return tracer_->write(*session_), save_timing_cache(), 0;  // a stop signal: checkpoint written
  }
  save_timing_cache();
  print_summary();
  tracer_->write(*session_);
  export_models();
  return 0;
}

// One epoch (or its rest after a resume): its steps, then its validation. False when
// a stop signal ended the run.
bool Trainer::Run::train_epoch() {
  PipelineOptions po;
  po.batch_size = c_.per_rank_batch;
  po.rank = c_.env.rank;
  po.world = c_.env.world;
  po.seed = c_.seed;
  po.epoch = st_.epoch;
  po.shuffle = c_.shuffle;
  po.augment = c_.augment == "auto" ? augment_by_default(train_) : c_.augment == "on";
  po.first_batch = st_.step_in_epoch;
  // cuda: batches written straight into pinned memory, copied to the device from there.
  if (HostPool* pool = session_->batch_pool()) po.allocate = [pool](size_t bytes) { return pool->take(bytes); };
  BatchStream stream(train_, po);
  if (stream.size() == 0)
    throw_bad_input("--batch-size", "is larger than the training set (" + std::to_string(train_.size()) + " images)");
  if (st_.step_in_epoch > stream.size())
    throw_bad_input(c_.resume, "checkpoint is at step " + std::to_string(st_.step_in_epoch) + " of an epoch of " +
                                   std::to_string(stream.size()) + " steps");
  const auto t0 = std::chrono::steady_clock::now();
  const double seconds_before = st_.epoch_seconds;  // of this epoch, before a resume
  const int64_t first_step = st_.step_in_epoch;
  auto step_start = t0;
  while (auto batch = stream.next()) {
    const double lr = c_.schedule.at(st_.epoch, st_.step_in_epoch, stream.size());
    // A queued step runs ahead of the host; its loss is read when one is needed below.
    if (!queue_step(*batch, lr))
      account(train_step(*batch, lr), {st_.epoch + 1, st_.step_in_epoch + 1, st_.global_step + 1, lr});
    if (iteration_times_) {
      const auto now = std::chrono::steady_clock::now();
      std::fprintf(iteration_times_, "%.6f\n", std::chrono::duration<double>(now - step_start).count());
      std::fflush(iteration_times_);
      step_start = now;
    }
    st_.lr = lr;
    ++st_.step_in_epoch;
    ++st_.global_step;
    const bool log_now =
        c_.log_every > 0 && (st_.step_in_epoch % c_.log_every == 0 || st_.step_in_epoch == stream.size());
    const bool checkpoint_now =
        !c_.checkpoint_dir.empty() && c_.checkpoint_every_steps > 0 && st_.global_step % c_.checkpoint_every_steps == 0;
    // With ranks a window of queued steps ends at step numbers every rank shares: a rank
    // that collected early on its own signal and stopped would leave its peers' queued
    // collectives waiting. Its stop flag travels with its next step instead.
    const bool own_stop = stop_signal() != 0 && !stepper_->data_parallel();
    const bool window_full = stepper_->data_parallel() && st_.global_step % kRankWindow == 0;
    if (log_now || checkpoint_now || own_stop || window_full || max_steps_reached() || stepper_->queue_failed() ||
        (c_.metrics_every > 0 && st_.global_step % c_.metrics_every == 0))
      finish_queued();
    st_.epoch_seconds = seconds_before + seconds_since(t0);
    if (log_now) log_progress(last_loss_, stream.size(), first_step, t0);
    if (checkpoint_now) save(c_.checkpoint_dir);
    if (stop_requested(/*after_step=*/true)) return false;
    if (max_steps_reached() && st_.step_in_epoch < stream.size()) {
      // --max-steps mid-epoch: the partial epoch counts in the totals, without validation.
      if (tty_ && c_.log_every > 0) std::printf("\n");
      st_.total_seconds += seconds_since(t0);
      st_.total_images += (st_.step_in_epoch - first_step) * c_.global_batch;
      std::printf("Stopped after --max-steps %lld steps (epoch %lld, step %lld of %lld)\n",
                  static_cast<long long>(c_.max_steps), static_cast<long long>(st_.epoch + 1),
                  static_cast<long long>(st_.step_in_epoch), static_cast<long long>(stream.size()));
      return true;
    }
  }
  finish_queued();
  if (tty_ && c_.log_every > 0) std::printf("\n");
  return end_epoch(seconds_before + seconds_since(t0));
}

// Queues a step where it may run ahead of the host (the session's queue, or with ranks
// DataParallel's, where a step runs at once unless its all-reduces are ordered by events
// on the device): no --detect-anomaly (it reruns the failed step's batch), no trace of
// this step. False: the caller runs it with train_step().
bool Trainer::Run::queue_step(const Batch& b, double lr) {
  if (c_.detect_anomaly || tracer_->profile_for(steps_this_run_)) {
    finish_queued();
    return false;
  }
  queued_.push_back({st_.epoch + 1, st_.step_in_epoch + 1, st_.global_step + 1, lr});
  try {
    stepper_->queue({{io_.input, b.images}, {session_->training().labels, b.labels}}, static_cast<float>(lr));
  } catch (const Error& e) {
    step_failed(queued_.back(), e.what(), e.kind());
  }
  ++steps_this_run_;
  return true;
}

// Waits for the queued steps and accounts for their losses in order; a failed one ends
// the run naming its step.
void Trainer::Run::finish_queued() {
  if (queued_.empty()) return;
  TrainingSession::Finished f;
  try {
    f = stepper_->finish();
  } catch (const Error& e) {
    step_failed(queued_.front(), e.what(), e.kind());
  }
  for (size_t i = 0; i < f.losses.size(); ++i) account(f.losses[i], queued_[i]);
  if (f.error) step_failed(queued_[f.losses.size()], f.error->what(), f.error->kind());
  queued_.clear();
}

// A step's loss: checked, summed into the epoch's, written to --metrics at its interval.
void Trainer::Run::account(double loss, const Pending& at) {
  if (!std::isfinite(loss))
    step_failed(at,
                std::string("loss is ") + (std::isnan(loss) ? "NaN"
                                           : loss > 0       ? "Inf"
                                                            : "-Inf"),
                ErrorKind::BadInput);
  st_.epoch_loss_sum += loss;
  last_loss_ = loss;
  if (c_.metrics_every > 0 && at.global_step % c_.metrics_every == 0)
    metrics_->step(at.global_step, at.epoch, loss, at.lr);
}

// One step on this rank's batch; returns the loss the session computed.
double Trainer::Run::train_step(const Batch& b, double lr) {
  const TensorMap feeds{{io_.input, b.images}, {session_->training().labels, b.labels}};
  ProfileCollector* profile = tracer_->profile_for(steps_this_run_);
  session_->set_profile(profile);
  const int64_t start = now_ns();
  double loss = 0;
  try {
    loss = stepper_->step(feeds, static_cast<float>(lr));
  } catch (const NumericalError& e) {
    std::string what = e.what();
    if (c_.detect_anomaly)
      if (std::optional<NumericalError> first = stepper_->find_anomaly(feeds, static_cast<float>(lr)))
        what = std::string("first non-finite value: ") + first->what();
    step_failed(what, e.kind());
  } catch (const Error& e) {
    step_failed(e.what(), e.kind());
  }
  if (profile && tracer_->record(b, start, now_ns(), st_.global_step + 1, stepper_->timings()))
    tracer_->write(*session_);
  ++steps_this_run_;
  return loss;
}

// A failed step (the runtime's NaN/Inf checks, or a non-finite loss) ends the run
// naming the step and the newest checkpoint, which holds the state before it.
void Trainer::Run::step_failed(const std::string& what, ErrorKind kind) const {
  step_failed({st_.epoch + 1, st_.step_in_epoch + 1, st_.global_step + 1, st_.lr}, what, kind);
}

void Trainer::Run::step_failed(const Pending& at, const std::string& what, ErrorKind kind) const {
  const bool numeric = what.find("NaN") != std::string::npos || what.find("Inf") != std::string::npos;
  throw Error(kind, "training: at epoch " + std::to_string(at.epoch) + " step " + std::to_string(at.step) +
                        " (global step " + std::to_string(at.global_step) + "): " + what +
                        "; last good checkpoint: " + (last_checkpoint_.empty() ? "none written" : last_checkpoint_) +
                        (numeric ? "; lower --base-lr" : ""));
}

void Trainer::Run::log_progress(double loss, int64_t steps, int64_t first_step,
                                std::chrono::steady_clock::time_point t0) const {
  if (c_.log_every == 0 || (st_.step_in_epoch % c_.log_every != 0 && st_.step_in_epoch != steps)) return;
  const double rate = static_cast<double>((st_.step_in_epoch - first_step) * c_.global_batch) / seconds_since(t0);
  std::printf(tty_ ? "\rEpoch %lld: step %lld/%lld, loss %.4f, %.1f images/sec   "
                   : "Epoch %lld: step %lld/%lld, loss %.4f, %.1f images/sec\n",
              static_cast<long long>(st_.epoch + 1), static_cast<long long>(st_.step_in_epoch),
              static_cast<long long>(steps), loss, rate);
  std::fflush(stdout);
}

// The test set on the current weights: rank 0's BatchNormalization statistics on every
// rank first.
Evaluation Trainer::Run::validate(const std::function<bool()>& stop) {
  stepper_->broadcast_buffers();
  const Graph trained = session_->trained_forward(forward_);
  return evaluate_share(c_.fuse ? optimize_for_inference(trained) : trained, io_, test_, c_.batch_size, *eval_backend_,
                        c_.env.rank, c_.env.world, comm_.get(), stop, chooser_.get());
}

Evaluation Trainer::Run::evaluate() {
  finish_queued();
  return validate({});
}

// Validation, the epoch's line and metrics, and its checkpoint. False when a stop
// signal ended the run: during validation, the checkpoint is this epoch's end before
// its validation, which the resumed run does first.
// Validation runs the forward graph in inference mode: with --fuse on, its inference
// form (BN folded into the Conv, Conv+Relu and Conv+residual Add fused). With several
// ranks each validates its share of the test batches with rank 0's running
// statistics, and the sums make the whole test set's figures.
bool Trainer::Run::end_epoch(double epoch_time) {
  const int64_t steps = st_.step_in_epoch;
  const int64_t epoch_images = steps * c_.global_batch;
  const double images_per_sec = static_cast<double>(epoch_images) / epoch_time;
  const Evaluation ev = validate([] { return stop_signal() != 0; });
  if (ev.interrupted && stop_requested(/*after_step=*/false)) return false;
  st_.total_seconds += epoch_time;
  st_.total_images += epoch_images;
  st_.val_accuracy.push_back(ev.accuracy);
  std::printf(
      "Epoch = %2lld: Epoch Time = %5.3f, Validation Loss = %5.3f, Validation Accuracy = %5.3f, Images/sec = %5.3f, "
      "Cumulative Time = %5.3f\n",
      static_cast<long long>(st_.epoch + 1), epoch_time, ev.loss, ev.accuracy, images_per_sec, st_.total_seconds);
  if (stepper_->data_parallel()) {
    const DataParallel::ReduceTotals t = stepper_->take_reduce_totals();
    const double timed = static_cast<double>(std::max<int64_t>(1, t.timed));
    if (t.timed > 0)
      std::printf("All-reduce: %.1f ms per step, %.1f ms of it not hidden by the backward pass\n", t.reduce_ms / timed,
                  t.exposed_ms / timed);
    else if (t.steps > 0)
      std::printf("All-reduce: on the communication stream, ordered by events (not timed per bucket)\n");
  }
  if (session_->loss_scaling())
    std::printf("Loss scale = %g (%lld steps skipped for non-finite gradients in this process)\n",
                static_cast<double>(session_->loss_scale()), static_cast<long long>(session_->skipped_steps()));
  std::fflush(stdout);
  metrics_->epoch(st_.epoch + 1, epoch_time, st_.epoch_loss_sum / static_cast<double>(steps), ev.loss, ev.accuracy,
                  images_per_sec, st_.total_seconds, st_.lr);
  ++st_.epoch;
  st_.step_in_epoch = 0;
  st_.epoch_loss_sum = 0;
  st_.epoch_seconds = 0;
  if (!c_.checkpoint_dir.empty() && c_.checkpoint_every > 0 && st_.epoch % c_.checkpoint_every == 0) {
    const auto c0 = std::chrono::steady_clock::now();
    const std::string path = save(c_.checkpoint_dir);
    std::error_code ec;
    std::printf("Checkpoint written to %s (%.1f MB, %.2f s)\n", path.c_str(),
                static_cast<double>(std::filesystem::file_size(path, ec)) / 1e6, seconds_since(c0));
    std::fflush(stdout);
  }
  return !stop_requested(/*after_step=*/false);
}

// Every rank holds the same state; rank 0 writes it. Returns the checkpoint's path.
std::string Trainer::Run::save(const std::string& dir) {
  finish_queued();  // the checkpoint holds the queued steps' state and losses
  const std::string path = checkpoint_path(dir, st_.global_step);
  last_checkpoint_ = path;
  if (!lead_) return path;
  std::filesystem::create_directories(dir);
  Checkpoint ck;
  ck.trainer = st_;
  ck.trainer.config = c_.resume_key;
  for (const std::string& n : session_->state_names()) ck.state[n] = session_->state(n);
  write_checkpoint(ck, path);
  prune_checkpoints(dir, c_.keep_checkpoints);
  save_timing_cache();
  return path;
}

// The engine choices timed since the last save, kept for the next run (rank 0 writes them;
// the other ranks timed the same problems).
void Trainer::Run::save_timing_cache() {
  if (lead_) save_engine_choices(chooser_.get(), c_.timing_cache);
}

// At a step boundary: a pending SIGTERM/SIGUSR1 on any rank ends the run with a checkpoint.
bool Trainer::Run::stop_requested(bool after_step) {
  const int sig = stop_signal();
  if (!stepper_->stop_anywhere(after_step)) return false;
  const std::string path = save(c_.checkpoint_dir.empty() ? "checkpoints" : c_.checkpoint_dir);
  std::printf("\nReceived %s: checkpoint written to %s (epoch %lld, step %lld); continue with --resume %s\n",
              sig ? signal_name(sig) : "a stop signal on another rank", path.c_str(),
              static_cast<long long>(st_.epoch + 1), static_cast<long long>(st_.step_in_epoch), path.c_str());
  std::fflush(stdout);
  return true;
}

void Trainer::Run::print_summary() {
  if (!st_.val_accuracy.empty())
    std::printf("\nTraining complete. Final Validation Accuracy = %5.3f\n", st_.val_accuracy.back());
  std::printf("Total Training Time: %5.3f seconds\n", st_.total_seconds);
  std::printf("Throughput: %5.3f images/second\n",
              st_.total_seconds > 0 ? static_cast<double>(st_.total_images) / st_.total_seconds : 0.0);
  if (!stepper_->data_parallel()) return;
  stepper_->check_identical();
  const long long world = c_.env.world;
  std::printf("Number of nodes: %lld\nRanks per node: %d\nTotal ranks used: %lld\n",
              static_cast<long long>(std::max<int64_t>(1, world / c_.env.local_world)), c_.env.local_world, world);
  std::printf("Parameters and optimizer state identical on all %lld ranks\n", world);
}

void Trainer::Run::export_models() const {
  if (!lead_ || (c_.export_path.empty() && c_.export_inference_path.empty())) return;
  const Graph trained = session_->trained_forward(forward_);
  if (!c_.export_path.empty()) {
    export_onnx_file(trained, c_.export_path);
    std::printf("Trained model written to %s\n", c_.export_path.c_str());
  }
  if (!c_.export_inference_path.empty()) {
    InferenceOptions io_opts;
    io_opts.standard_onnx_only = true;  // any ONNX runtime can load it
    export_onnx_file(optimize_for_inference(trained, io_opts), c_.export_inference_path);
    std::printf("Inference model (BatchNormalization folded, Dropout removed) written to %s\n",
                c_.export_inference_path.c_str());
  }
}

Trainer::Trainer(const TrainConfig& c) : run_(std::make_unique<Run>(c, std::nullopt)) {}
Trainer::Trainer(const TrainConfig& c, Graph model, Dataset train_set, Dataset test_set)
    : run_(std::make_unique<Run>(c, GivenInputs{std::move(model), std::move(train_set), std::move(test_set)})) {}
Trainer::~Trainer() = default;
void Trainer::restore(const Checkpoint& ck) { run_->restore(ck); }
int Trainer::run() { return run_->run(); }
Evaluation Trainer::evaluate() { return run_->evaluate(); }
std::string Trainer::save_checkpoint(const std::string& dir) { return run_->save(dir); }
const TrainerState& Trainer::state() const { return run_->state(); }
TrainingSession& Trainer::session() { return run_->session(); }
const Graph& Trainer::model() const { return run_->model(); }

// A resume checkpoint, refused before the data and model are loaded when its flags differ.
Checkpoint read_resume_checkpoint(const TrainConfig& c) {
  Checkpoint ck = read_checkpoint(c.resume);
  const std::string diff = config_mismatch(ck.trainer.config, c.resume_key);
  if (!diff.empty()) throw_bad_input("--resume " + c.resume, diff);
  if (ck.trainer.seed != c.seed) throw_bad_input("--resume " + c.resume, "the checkpoint's seed differs");
  return ck;
}

int train(const TrainConfig& c) {
  // A bad checkpoint is refused before the data and model are loaded.
  std::optional<Checkpoint> resumed;
  if (!c.resume.empty()) resumed = read_resume_checkpoint(c);
  Trainer t(c);
  if (resumed) t.restore(*resumed);
  return t.run();
}

}  // namespace trainrt

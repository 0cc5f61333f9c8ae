// `trainrt train MODEL.onnx --dataset fashion-mnist ...`: the seed's training job.
//
// Per epoch it prints the seed's line (epoch, epoch time, validation loss and
// accuracy, images/sec, cumulative time), stops early like the seed (the last
// --patience validation accuracies all >= --target-accuracy), and at the end the
// seed's summary. --export writes the trained model with the input model's
// interface; --metrics writes one JSON object per epoch (and per --metrics-every
// steps).
//
// Checkpoints (launch/checkpoint.h) hold the state tensors and the trainer's
// position; --resume continues bit-exactly, also mid-epoch: the epoch's batches
// before the saved step are skipped, not replayed. SIGTERM/SIGUSR1 write a
// checkpoint at the next step boundary and exit 0. A non-finite loss stops the
// run at that step, naming the last good checkpoint.
//
// The training graph runs with its fusions (TrainingSession), validation with the
// inference passes (optimize_for_inference); --fuse off runs both as given, for
// debugging. They keep every state name, so a checkpoint resumes with either
// setting; like --backend and --threads, --fuse is not part of the resume check
// (it changes float rounding and, through node indices, the Dropout masks).
// --precision bf16 is mixed precision (ops/kernel.h MathPrecision): the training
// step's convolutions read bf16 copies and accumulate in fp32, every stored value
// (parameters, optimizer state, checkpoints, exports) stays fp32, and validation runs
// fp32; it is not part of the resume check either. --precision fp16 rounds the
// convolutions' inputs to IEEE half instead, with dynamic loss scaling (runtime/
// loss_scaler.h: steps whose gradients overflow are skipped); the cpu backend emulates
// it (no speed-up), to check a GPU run's numerics on a CPU. The loss scaler's state is
// in the checkpoint, so an fp16 run resumes only as fp16.
//
// Several ranks (srun, mpirun, or RANK/WORLD_SIZE; runtime/communicator.h) train data-
// parallel (runtime/data_parallel.h): --batch-size is the global batch, each rank takes
// batch-size/ranks images of its own shard of every epoch (DistributedSampler), the
// gradients are averaged in buckets while the backward pass runs, validation is split
// over the ranks and summed. Rank 0 prints, writes metrics, traces, checkpoints and
// exports; every rank reads a checkpoint to resume. A stop signal on any rank stops all
// of them after the same step. A rank that dies or hangs ends the others after
// --comm-timeout with one line naming it (exit 3).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>

#include "autodiff/training_graph.h"
#include "graph/error.h"
#include "graph/onnx_io.h"
#include "graph/passes.h"
#include "launch/checkpoint.h"
#include "launch/cli.h"
#include "launch/commands.h"
#include "launch/pipeline.h"
#include "launch/train_util.h"
#include "ops/core/register_all.h"
#include "runtime/data_parallel.h"
#ifdef TRAINRT_HAVE_CUDA
#include "runtime/cuda/nccl_communicator.h"
#endif
#include "runtime/trace.h"
#include "runtime/training_session.h"

namespace trainrt {

namespace {

const CommandSpec kSpec{
    "train",
    "trainrt train MODEL.onnx --dataset fashion-mnist|cifar10|cifar100 [options]",
    "Train an ONNX model (its float initializers are the parameters) on an image dataset,\n"
    "printing the seed's per-epoch line, and export the trained model.",
    {{"dataset", "fashion-mnist", "fashion-mnist, mnist, cifar10 or cifar100"},
     {"data-dir", "", "dataset folder (default: Debian's /usr/share/datasets/fashion-mnist)"},
     {"batch-size", "32", "images per step (with several ranks: over all ranks, split evenly)"},
     {"epochs", "100", "maximum number of epochs"},
     {"base-lr", "0.01", "learning rate"},
     {"optimizer", "sgd", "sgd, adam or adamw"},
     {"momentum", "0", "SGD momentum"},
     {"weight-decay", "0", "weight decay (L2 for sgd/adam, decoupled for adamw)"},
     {"nesterov", "off", "Nesterov momentum (sgd, needs --momentum > 0)", Flag::Switch},
     {"lr-schedule", "constant", "constant, step (x0.1 every --lr-step-epochs) or cosine"},
     {"lr-step-epochs", "30", "epochs between x0.1 steps of the step schedule"},
     {"warmup-epochs", "0", "linear warm-up of the learning rate over this many epochs (<= --epochs)"},
     {"target-accuracy", "0.95", "early stopping: accuracy the last --patience epochs must reach"},
     {"patience", "2", "early stopping: number of epochs at or above the target"},
     {"freeze", "", "comma-separated initializers that stay fixed (not trained)"},
     {"precision", "fp32",
      "fp32; bf16: mixed precision, convolutions in bf16 (AVX-512 BF16); fp16: with loss scaling (emulated on cpu)"},
     {"conv-algorithm", "winograd",
      "fp32 3x3 stride-1 convolutions: winograd (oneDNN F(4x4,3x3), where it applies) or direct"},
     {"device", "cpu", "cpu or cuda (a CUDA build and a GPU: the local rank's GPU, NCCL between ranks)"},
     {"backend", "cpu", "with --device cpu: cpu or reference"},
     {"threads", "0", "CPU threads (0 = all cores, shared out among the ranks of a node)"},
     {"seed", "0", "seed of shuffling, augmentation and dropout"},
     {"shuffle", "on", "on or off (off: the file's order every epoch)"},
     {"augment", "auto", "auto (CIFAR: crop+flip; MNIST-like: none), on or none"},
     {"limit-train", "0", "use only the first N training images (0 = all)"},
     {"limit-test", "0", "use only the first N test images (0 = all)"},
     {"log-every", "50", "progress line every N steps (redrawn in place on a terminal; 0 = never)"},
     {"metrics", "", "write one JSON object per epoch (and per --metrics-every steps) to this file"},
     {"metrics-every", "50", "a JSON 'step' line every N steps in --metrics (0 = epoch lines only)"},
     {"checkpoint-dir", "", "folder for checkpoints (a stop signal without it writes to ./checkpoints)"},
     {"checkpoint-every", "1", "with --checkpoint-dir: a checkpoint every N epochs (0 = none)"},
     {"checkpoint-every-steps", "0", "with --checkpoint-dir: also a checkpoint every N steps (0 = none)"},
     {"keep-checkpoints", "3", "keep the newest K checkpoints in --checkpoint-dir"},
     {"resume", "", "continue from checkpoint PATH, or 'auto' = the newest in --checkpoint-dir"},
     {"export", "", "write the trained model (same inputs/outputs, trained initializers) here"},
     {"export-inference", "", "write the inference-optimised model (BN folded, Dropout removed, standard ONNX) here"},
     {"trace", "", "write a Chrome/Perfetto trace (nodes, data loading) of --trace-steps steps here"},
     {"trace-steps", "10", "steps recorded by --trace, from this run's 2nd step (the 1st builds the plan)"},
     {"detect-anomaly", "off", "on a NaN/Inf, rerun the step checking every node and name the first bad one",
      Flag::Switch},
     {"fuse", "on", "fused training graph (BN+Relu, Conv+residual Add) and optimised validation graph; off to debug"},
     {"branches", "serial",
      "serial, or concurrent: independent neighbouring nodes two at a time, each with half the threads"},
     {"bucket-cap-mb", "25", "several ranks: gradients are averaged in buckets of about this many MB"},
     {"first-bucket-cap-mb", "1", "several ranks: cap of the first bucket (small, so averaging starts early)"},
     {"comm-timeout", "300", "several ranks: seconds to wait for the other ranks before declaring one dead"}},
    1,
    1};

std::string choice(const Args& a, const std::string& flag, std::initializer_list<const char*> allowed) {
  std::string v = a.str(flag);
  std::string list;
  for (const char* c : allowed) {
    if (v == c) return v;
    list += (list.empty() ? "" : ", ") + std::string(c);
  }
  throw_bad_input("--" + flag, "expected one of " + list + ", got '" + v + "'");
}

int64_t positive(const Args& a, const std::string& flag, bool allow_zero = false) {
  int64_t v = a.integer(flag);
  if (v < 0 || (!allow_zero && v == 0))
    throw_bad_input("--" + flag,
                    std::string("must be ") + (allow_zero ? ">= 0" : "> 0") + ", got " + std::to_string(v));
  return v;
}

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

bool early_stop(const std::vector<double>& acc, int64_t patience, double target) {
  return static_cast<int64_t>(acc.size()) >= patience &&
         std::all_of(acc.end() - patience, acc.end(), [&](double a) { return a >= target; });
}

}  // namespace

int cmd_train(const Argv& argv) {
  Args a = parse_args(kSpec, argv);
  if (a.help) return print_help(kSpec), 0;

  // Flags first: every mistake is reported before any work starts.
  const std::string dataset = choice(a, "dataset", {"fashion-mnist", "mnist", "cifar10", "cifar100"});
  const int64_t batch_size = positive(a, "batch-size"), epochs = positive(a, "epochs");
  const int64_t patience = positive(a, "patience"), log_every = positive(a, "log-every", true);
  const int64_t metrics_every = positive(a, "metrics-every", true);
  const int64_t threads = positive(a, "threads", true);
  LrSchedule schedule;
  schedule.base_lr = a.number("base-lr");
  schedule.kind = choice(a, "lr-schedule", {"constant", "step", "cosine"});
  schedule.step_epochs = positive(a, "lr-step-epochs");
  schedule.warmup_epochs = a.number("warmup-epochs");
  schedule.epochs = epochs;
  if (!(schedule.base_lr > 0) || !std::isfinite(schedule.base_lr))
    throw_bad_input("--base-lr", "must be a finite number > 0");
  if (!(schedule.warmup_epochs >= 0)) throw_bad_input("--warmup-epochs", "must be >= 0");
  if (schedule.warmup_epochs > static_cast<double>(epochs))
    throw_bad_input("--warmup-epochs",
                    num(schedule.warmup_epochs) + " is more than --epochs " + std::to_string(epochs));
  if (a.on("lr-step-epochs") && schedule.kind != "step")
    throw_bad_input("--lr-step-epochs", "applies to --lr-schedule step only");
  const double target = a.number("target-accuracy");
  TrainingOptions topts;
  topts.optimizer = choice(a, "optimizer", {"sgd", "adam", "adamw"});
  topts.momentum = static_cast<float>(a.number("momentum"));
  topts.weight_decay = static_cast<float>(a.number("weight-decay"));
  topts.nesterov = a.on("nesterov");
  topts.freeze = split_commas(a.str("freeze"));
  if (a.on("freeze") && topts.freeze.empty()) throw_bad_input("--freeze", "expected NAME[,NAME...]");
  if (topts.nesterov && (topts.optimizer != "sgd" || topts.momentum <= 0))
    throw_bad_input("--nesterov", "needs --optimizer sgd and --momentum > 0");
  if (topts.optimizer != "sgd" && topts.momentum != 0) throw_bad_input("--momentum", "applies to --optimizer sgd only");
  if (topts.momentum < 0 || topts.weight_decay < 0) throw_bad_input("--momentum/--weight-decay", "must be >= 0");
  const std::string precision = choice(a, "precision", {"fp32", "bf16", "fp16"});
  const std::string backend_name = backend_for_device(a);
  const std::string device = a.str("device");
  const MathPrecision math = precision == "bf16"   ? MathPrecision::bf16
                             : precision == "fp16" ? MathPrecision::fp16
                                                   : MathPrecision::fp32;
  if (math == MathPrecision::fp16) topts.loss_scale_name = "loss_scale";
  const ConvAlgorithm conv = choice(a, "conv-algorithm", {"direct", "winograd"}) == "winograd" ? ConvAlgorithm::winograd
                                                                                               : ConvAlgorithm::direct;
  const std::string augment = choice(a, "augment", {"auto", "on", "none"});
  const bool shuffle = choice(a, "shuffle", {"on", "off"}) == "on";
  const uint64_t seed = static_cast<uint64_t>(a.integer("seed"));
  const bool fuse = choice(a, "fuse", {"on", "off"}) == "on";
  const bool concurrent = choice(a, "branches", {"serial", "concurrent"}) == "concurrent";
  const std::string model_path = a.positional[0];
  const double bucket_mb = a.number("bucket-cap-mb"), first_bucket_mb = a.number("first-bucket-cap-mb");
  const double comm_timeout = a.number("comm-timeout");
  if (!(bucket_mb > 0) || !(first_bucket_mb > 0) || !std::isfinite(bucket_mb) || !std::isfinite(first_bucket_mb))
    throw_bad_input("--bucket-cap-mb/--first-bucket-cap-mb", "must be finite numbers > 0");
  if (!(comm_timeout > 0) || !std::isfinite(comm_timeout)) throw_bad_input("--comm-timeout", "must be a number > 0");
  const RankEnvironment env = rank_environment();
  const int64_t world = env.world, per_rank_batch = batch_size / world;
  const int64_t global_batch = per_rank_batch * world;  // --batch-size rounded down to a multiple of the ranks
  if (per_rank_batch == 0)
    throw_bad_input("--batch-size", std::to_string(batch_size) + " is smaller than the " + std::to_string(world) +
                                        " ranks (each rank needs at least one image per step)");

  const std::string ckpt_dir = a.str("checkpoint-dir");
  const int64_t ckpt_every = positive(a, "checkpoint-every", true);
  const int64_t ckpt_every_steps = positive(a, "checkpoint-every-steps", true);
  const int64_t keep = positive(a, "keep-checkpoints");
  for (const char* f : {"checkpoint-every", "checkpoint-every-steps", "keep-checkpoints"})
    if (a.on(f) && ckpt_dir.empty()) throw_bad_input(std::string("--") + f, "needs --checkpoint-dir");
  std::string resume = a.str("resume");
  if (a.on("resume")) {
    if (resume == "auto") {
      if (ckpt_dir.empty()) throw_bad_input("--resume auto", "needs --checkpoint-dir (where to look)");
      resume = latest_checkpoint(ckpt_dir);
      if (resume.empty()) throw_bad_input("--resume auto", "no checkpoint in " + ckpt_dir);
    } else if (resume.empty()) {
      throw_bad_input("--resume", "expected a checkpoint path or 'auto'");
    }
  }

  // What must be the same on resume for the run to continue exactly.
  std::map<std::string, std::string> config{{"model", std::filesystem::path(model_path).filename().string()},
                                            {"dataset", dataset},
                                            {"batch-size", std::to_string(batch_size)},
                                            {"optimizer", topts.optimizer},
                                            {"momentum", num(topts.momentum)},
                                            {"weight-decay", num(topts.weight_decay)},
                                            {"nesterov", topts.nesterov ? "on" : "off"},
                                            {"base-lr", num(schedule.base_lr)},
                                            {"lr-schedule", schedule.kind},
                                            {"warmup-epochs", num(schedule.warmup_epochs)},
                                            {"seed", std::to_string(seed)},
                                            {"shuffle", shuffle ? "on" : "off"},
                                            {"augment", augment},
                                            {"limit-train", a.str("limit-train")},
                                            {"freeze", a.str("freeze")},
                                            {"ranks", std::to_string(world)}};
  if (schedule.kind == "step") config["lr-step-epochs"] = std::to_string(schedule.step_epochs);
  if (schedule.kind == "cosine") config["epochs"] = std::to_string(epochs);  // the cosine period

  // A bad checkpoint is refused before the data and model are loaded.
  Checkpoint resumed;
  if (!resume.empty()) {
    resumed = read_checkpoint(resume);
    std::string diff = config_mismatch(resumed.trainer.config, config);
    if (!diff.empty()) throw_bad_input("--resume " + resume, diff);
    if (resumed.trainer.seed != seed) throw_bad_input("--resume " + resume, "the checkpoint's seed differs");
  }

  // Ranks first: MPI_Init waits for every rank (under a watchdog), before any long work.
  std::unique_ptr<Communicator> comm = make_communicator(env, {.timeout_seconds = comm_timeout});
  const bool lead = env.rank == 0;
  // Only rank 0 talks (the seed's `if global_rank == 0: print`); errors still reach stderr.
  if (!lead && !std::freopen("/dev/null", "w", stdout))
    throw_internal("stdout", "cannot silence rank " + std::to_string(env.rank));
  const int rank_threads = threads > 0 ? static_cast<int>(threads) : default_rank_threads(env.local_world);
  configure_threads(rank_threads);
  auto backend = make_backend(backend_name, rank_threads);
  backend->check_math(math);

  // Data and model.
  DatasetOptions dopt;
  dopt.name = dataset;
  dopt.data_dir = a.str("data-dir");
  dopt.limit = positive(a, "limit-train", true);
  Dataset train = load_dataset(dopt);
  dopt.train = false;
  dopt.limit = positive(a, "limit-test", true);
  Dataset test = load_dataset(dopt);
  Graph forward = import_onnx_file(model_path, registry().schemas);
  const ModelIo io = model_io(forward, train, model_path);
  for (const std::string& f : topts.freeze)
    if (!forward.is_initializer(f) || !dtype_is_float(forward.initializers.at(f).dtype()))
      throw_bad_input("--freeze " + f, "is not a float initializer of " + model_path);

  TrainingSession session(build_training_graph(forward, topts), std::move(backend),
                          {.seed = seed, .fuse = fuse, .math = math, .conv = conv, .concurrent_branches = concurrent});
  std::unique_ptr<Backend> eval_backend = make_backend(backend_name, rank_threads);
  // GPU ranks sum their buckets with NCCL; MPI stays for NCCL's id and the host-side sums.
  std::unique_ptr<Communicator> gpu_comm;
#ifdef TRAINRT_HAVE_CUDA
  if (comm && device == "cuda") gpu_comm = make_nccl_communicator(*comm, {.timeout_seconds = comm_timeout});
#endif
  std::unique_ptr<DataParallel> dp;
  if (comm)
    dp = std::make_unique<DataParallel>(
        session, gpu_comm ? *gpu_comm : *comm,
        DataParallelOptions{.bucket_cap_bytes = static_cast<size_t>(bucket_mb * (1 << 20)),
                            .first_bucket_cap_bytes = static_cast<size_t>(first_bucket_mb * (1 << 20))});

  TrainerState st;
  st.seed = seed;
  std::string last_checkpoint;
  if (!resume.empty()) {
    // Every name and shape is checked before anything is applied.
    std::vector<std::string> names = session.state_names();
    std::set<std::string> want(names.begin(), names.end());
    for (const auto& [name, t] : resumed.state)
      if (!want.count(name))
        throw_bad_input(resume, "checkpoint tensor '" + name + "' is not a state of this model" +
                                    (name.rfind("loss_scaler.", 0) == 0 ? " (the checkpoint is of an fp16 run)" : ""));
    for (const std::string& n : names) {
      auto it = resumed.state.find(n);
      if (it == resumed.state.end())
        throw_bad_input(resume, "checkpoint has no tensor '" + n + "'" +
                                    (n.rfind("loss_scaler.", 0) == 0 ? " (it is not of an fp16 run)" : ""));
      const Tensor& cur = session.state(n);
      if (it->second.dtype() != cur.dtype() || it->second.dims() != cur.dims())
        throw_bad_input(resume, "checkpoint tensor '" + n + "' is " + dtype_name(it->second.dtype()) +
                                    dims_to_string(it->second.dims()) + ", the model has " + dtype_name(cur.dtype()) +
                                    dims_to_string(cur.dims()));
    }
    for (const std::string& n : names) session.set_state(n, resumed.state.at(n));
    st = resumed.trainer;
    st.config.clear();
    session.set_steps_done(st.global_step);
    last_checkpoint = resume;
  }
  // Every rank starts from rank 0's state (the same file, but this also catches ranks
  // that loaded different models).
  if (dp) dp->broadcast_state();

  MetricsWriter metrics =
      resume.empty() ? MetricsWriter(a.str("metrics")) : MetricsWriter(a.str("metrics"), st.global_step, st.epoch);
  if (dp)
    std::printf(
        "Training started with %lld processes across %lld nodes (%s, MPI); %d threads per rank, global batch %lld = "
        "%lld ranks x %lld, gradient buckets of %g MB (first %g MB)\n",
        static_cast<long long>(world), static_cast<long long>(std::max<int64_t>(1, world / env.local_world)),
        env.launcher.c_str(), rank_threads, static_cast<long long>(global_batch), static_cast<long long>(world),
        static_cast<long long>(per_rank_batch), bucket_mb, first_bucket_mb);
  std::printf(
      "Training %s on %s with Batch Size: %lld (%lld training images, %lld test images, %zu parameter tensors, %s)\n",
      model_path.c_str(), dataset.c_str(), static_cast<long long>(global_batch), static_cast<long long>(train.size()),
      static_cast<long long>(test.size()), session.training().params.size(), precision.c_str());
  if (math == MathPrecision::fp16)
    std::printf(
        "fp16: convolution inputs rounded to half precision (emulated on the %s backend, no speed-up), "
        "dynamic loss scaling from %g\n",
        backend_name.c_str(), static_cast<double>(session.loss_scale()));
  if (!resume.empty())
    std::printf("Resumed from %s at epoch %lld, step %lld (global step %lld)\n", resume.c_str(),
                static_cast<long long>(st.epoch + 1), static_cast<long long>(st.step_in_epoch),
                static_cast<long long>(st.global_step));
  std::fflush(stdout);

  auto save = [&](const std::string& dir) {
    const std::string path = checkpoint_path(dir, st.global_step);
    last_checkpoint = path;
    if (!lead) return path;  // every rank holds the same state; rank 0 writes it
    std::filesystem::create_directories(dir);
    Checkpoint c;
    c.trainer = st;
    c.trainer.config = config;
    for (const std::string& n : session.state_names()) c.state[n] = session.state(n);
    write_checkpoint(c, path);
    prune_checkpoints(dir, keep);
    return path;
  };
  // At a step boundary: a pending SIGTERM/SIGUSR1 ends the run with a checkpoint. With
  // several ranks every rank must stop after the same step: after a training step the
  // ranks' flags travelled with the gradients (`agreed`); elsewhere they are summed here.
  auto stop_requested = [&](std::optional<bool> agreed = std::nullopt) {
    const int sig = stop_signal();
    bool stop = sig != 0;
    if (dp) {
      if (agreed) {
        stop = *agreed;
      } else {
        std::vector<double> flag{stop ? 1.0 : 0.0};
        comm->sum(flag, "stop-signal agreement");
        stop = flag[0] > 0;
      }
    }
    if (!stop) return false;
    const std::string path = save(ckpt_dir.empty() ? "checkpoints" : ckpt_dir);
    std::printf("\nReceived %s: checkpoint written to %s (epoch %lld, step %lld); continue with --resume %s\n",
                sig ? signal_name(sig) : "a stop signal on another rank", path.c_str(),
                static_cast<long long>(st.epoch + 1), static_cast<long long>(st.step_in_epoch), path.c_str());
    std::fflush(stdout);
    return true;
  };
  install_stop_signals();

  // --trace: per-node events from the session plus data-loading lanes on the same clock.
  const std::string trace_path = a.str("trace");
  const int64_t trace_steps = positive(a, "trace-steps");
  if (a.on("trace-steps") && trace_path.empty()) throw_bad_input("--trace-steps", "needs --trace");
  ProfileCollector profile;
  std::vector<TraceLane> lanes{{"data: prepare batch", {}}, {"data: consumer wait", {}}, {"train step", {}}};
  if (dp) lanes.push_back({"all-reduce (gradient buckets)", {}});
  double reduce_ms = 0, exposed_ms = 0;  // this epoch's all-reduce time, and the part the optimizer waited for
  int64_t traced = 0, steps_this_run = 0;
  bool trace_written = false;
  auto write_trace = [&]() {
    if (trace_path.empty() || trace_written || traced == 0) return;
    session.set_profile(nullptr);
    write_chrome_trace(trace_path, profile.events, lanes);
    trace_written = true;
    std::printf("Trace of %lld steps written to %s\n%s", static_cast<long long>(traced), trace_path.c_str(),
                profile_table(profile.events).c_str());
    std::fflush(stdout);
  };
  auto now_ns = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  const bool detect_anomaly = a.on("detect-anomaly");

  const bool tty = ::isatty(STDOUT_FILENO);
  while (st.epoch < epochs) {
    if (st.step_in_epoch == 0 && early_stop(st.val_accuracy, patience, target)) {
      std::printf("Early stopping after epoch %lld\n", static_cast<long long>(st.epoch));
      break;
    }
    PipelineOptions po;
    po.batch_size = per_rank_batch;
    po.rank = env.rank;
    po.world = world;
    po.seed = seed;
    po.epoch = st.epoch;
    po.shuffle = shuffle;
    po.augment = augment == "auto" ? augment_by_default(train) : augment == "on";
    po.first_batch = st.step_in_epoch;
    BatchStream stream(train, po);
    if (stream.size() == 0)
      throw_bad_input("--batch-size", "is larger than the training set (" + std::to_string(train.size()) + " images)");
    if (st.step_in_epoch > stream.size())
      throw_bad_input(resume, "checkpoint is at step " + std::to_string(st.step_in_epoch) + " of an epoch of " +
                                  std::to_string(stream.size()) + " steps");
    const auto t0 = std::chrono::steady_clock::now();
    const double seconds_before = st.epoch_seconds;  // of this epoch, before a resume
    const int64_t first_step = st.step_in_epoch;
    while (auto batch = stream.next()) {
      const double lr = schedule.at(st.epoch, st.step_in_epoch, stream.size());
      // A failed step (the runtime's NaN/Inf checks, or a non-finite loss) ends the run
      // naming the step and the newest checkpoint, which holds the state before it.
      auto step_failed = [&](const std::string& what, ErrorKind kind) {
        const bool numeric = what.find("NaN") != std::string::npos || what.find("Inf") != std::string::npos;
        throw Error(kind, "training: at epoch " + std::to_string(st.epoch + 1) + " step " +
                              std::to_string(st.step_in_epoch + 1) + " (global step " +
                              std::to_string(st.global_step + 1) + "): " + what + "; last good checkpoint: " +
                              (last_checkpoint.empty() ? "none written" : last_checkpoint) +
                              (numeric ? "; lower --base-lr" : ""));
      };
      const TensorMap feeds{{io.input, batch->images}, {session.training().labels, batch->labels}};
      const bool tracing = !trace_path.empty() && steps_this_run >= 1 && traced < trace_steps;
      session.set_profile(tracing ? &profile : nullptr);
      const int64_t step_start = now_ns();
      double loss = 0;
      try {
        loss = dp ? dp->step(feeds, static_cast<float>(lr), stop_signal() != 0)
                  : session.step(feeds, static_cast<float>(lr));
      } catch (const NumericalError& e) {
        std::string what = e.what();
        if (detect_anomaly) {
          std::optional<NumericalError> first = dp ? dp->find_anomaly(feeds, static_cast<float>(lr))
                                                   : session.find_anomaly(feeds, static_cast<float>(lr));
          if (first) what = std::string("first non-finite value: ") + first->what();
        }
        step_failed(what, e.kind());
      } catch (const Error& e) {
        step_failed(e.what(), e.kind());
      }
      if (tracing) {
        const std::string k = "batch " + std::to_string(batch->index);
        lanes[0].slices.push_back({k, batch->prepare_start_ns, batch->prepare_end_ns});
        lanes[1].slices.push_back({k, step_start - static_cast<int64_t>(batch->wait_seconds * 1e9), step_start});
        lanes[2].slices.push_back({"step " + std::to_string(st.global_step + 1), step_start, now_ns()});
        if (dp)
          for (const BucketTiming& b : dp->last_timings())
            lanes[3].slices.push_back({"bucket " + std::to_string(b.bucket) + " (" + std::to_string(b.bytes >> 10) +
                                           " KiB, optimizer waited " + std::to_string(b.wait_ns / 1000) + " us)",
                                       b.start_ns, b.end_ns});
        if (++traced == trace_steps) write_trace();
      }
      ++steps_this_run;
      if (dp)
        for (const BucketTiming& b : dp->last_timings()) {
          reduce_ms += static_cast<double>(b.end_ns - b.start_ns) / 1e6;
          exposed_ms += static_cast<double>(b.wait_ns) / 1e6;
        }
      if (!std::isfinite(loss))
        step_failed(std::string("loss is ") + (std::isnan(loss) ? "NaN"
                                               : loss > 0       ? "Inf"
                                                                : "-Inf"),
                    ErrorKind::BadInput);
      st.epoch_loss_sum += loss;
      st.lr = lr;
      ++st.step_in_epoch;
      ++st.global_step;
      st.epoch_seconds = seconds_before + seconds_since(t0);
      if (log_every > 0 && (st.step_in_epoch % log_every == 0 || st.step_in_epoch == stream.size())) {
        const double rate = static_cast<double>((st.step_in_epoch - first_step) * global_batch) / seconds_since(t0);
        std::printf(tty ? "\rEpoch %lld: step %lld/%lld, loss %.4f, %.1f images/sec   "
                        : "Epoch %lld: step %lld/%lld, loss %.4f, %.1f images/sec\n",
                    static_cast<long long>(st.epoch + 1), static_cast<long long>(st.step_in_epoch),
                    static_cast<long long>(stream.size()), loss, rate);
        std::fflush(stdout);
      }
      if (metrics_every > 0 && st.global_step % metrics_every == 0)
        metrics.step(st.global_step, st.epoch + 1, loss, lr);
      if (!ckpt_dir.empty() && ckpt_every_steps > 0 && st.global_step % ckpt_every_steps == 0) save(ckpt_dir);
      if (stop_requested(dp ? std::optional<bool>(dp->stop_agreed()) : std::nullopt)) return write_trace(), 0;
    }
    if (tty && log_every > 0) std::printf("\n");
    const double epoch_time = seconds_before + seconds_since(t0);
    const int64_t steps = st.step_in_epoch;
    const int64_t epoch_images = steps * global_batch;
    const double images_per_sec = static_cast<double>(epoch_images) / epoch_time;

    // A stop signal during validation: the checkpoint is this epoch's end before its
    // validation, which the resumed run does first.
    // Validation runs the forward graph in inference mode: with --fuse on, its inference
    // form (BN folded into the Conv, Conv+Relu and Conv+residual Add fused).
    // With several ranks each validates its share of the test batches with rank 0's
    // running statistics, and the sums make the whole test set's figures.
    if (dp) dp->broadcast_buffers();
    const Graph trained = session.trained_forward(forward);
    Evaluation ev = evaluate_share(fuse ? optimize_for_inference(trained) : trained, io, test, batch_size,
                                   *eval_backend, env.rank, world, comm.get(), [] { return stop_signal() != 0; });
    if (ev.interrupted && stop_requested()) return write_trace(), 0;
    st.total_seconds += epoch_time;
    st.total_images += epoch_images;
    st.val_accuracy.push_back(ev.accuracy);
    std::printf(
        "Epoch = %2lld: Epoch Time = %5.3f, Validation Loss = %5.3f, Validation Accuracy = %5.3f, Images/sec = %5.3f, "
        "Cumulative Time = %5.3f\n",
        static_cast<long long>(st.epoch + 1), epoch_time, ev.loss, ev.accuracy, images_per_sec, st.total_seconds);
    if (dp) {
      std::printf("All-reduce: %.1f ms per step, %.1f ms of it not hidden by the backward pass\n",
                  reduce_ms / static_cast<double>(std::max<int64_t>(1, steps - first_step)),
                  exposed_ms / static_cast<double>(std::max<int64_t>(1, steps - first_step)));
      reduce_ms = exposed_ms = 0;
    }
    if (session.loss_scaling())
      std::printf("Loss scale = %g (%lld steps skipped for non-finite gradients in this process)\n",
                  static_cast<double>(session.loss_scale()), static_cast<long long>(session.skipped_steps()));
    std::fflush(stdout);
    metrics.epoch(st.epoch + 1, epoch_time, st.epoch_loss_sum / static_cast<double>(steps), ev.loss, ev.accuracy,
                  images_per_sec, st.total_seconds, st.lr);
    ++st.epoch;
    st.step_in_epoch = 0;
    st.epoch_loss_sum = 0;
    st.epoch_seconds = 0;
    if (!ckpt_dir.empty() && ckpt_every > 0 && st.epoch % ckpt_every == 0) {
      const auto c0 = std::chrono::steady_clock::now();
      const std::string path = save(ckpt_dir);
      std::error_code ec;
      std::printf("Checkpoint written to %s (%.1f MB, %.2f s)\n", path.c_str(),
                  static_cast<double>(std::filesystem::file_size(path, ec)) / 1e6, seconds_since(c0));
      std::fflush(stdout);
    }
    if (stop_requested()) return write_trace(), 0;
  }
  if (!st.val_accuracy.empty())
    std::printf("\nTraining complete. Final Validation Accuracy = %5.3f\n", st.val_accuracy.back());
  std::printf("Total Training Time: %5.3f seconds\n", st.total_seconds);
  std::printf("Throughput: %5.3f images/second\n",
              st.total_seconds > 0 ? static_cast<double>(st.total_images) / st.total_seconds : 0.0);
  if (dp) {
    // The averaged updates keep the ranks' parameters bit-identical; say so, or fail.
    if (!dp->state_identical())
      throw_internal("data-parallel training", "the ranks' parameters differ at the end of training");
    std::printf("Number of nodes: %lld\nRanks per node: %d\nTotal ranks used: %lld\n",
                static_cast<long long>(std::max<int64_t>(1, world / env.local_world)), env.local_world,
                static_cast<long long>(world));
    std::printf("Parameters and optimizer state identical on all %lld ranks\n", static_cast<long long>(world));
  }
  write_trace();
  if (lead && (a.on("export") || a.on("export-inference"))) {
    const Graph trained = session.trained_forward(forward);
    if (a.on("export")) {
      export_onnx_file(trained, a.str("export"));
      std::printf("Trained model written to %s\n", a.str("export").c_str());
    }
    if (a.on("export-inference")) {
      InferenceOptions io_opts;
      io_opts.standard_onnx_only = true;  // any ONNX runtime can load it
      export_onnx_file(optimize_for_inference(trained, io_opts), a.str("export-inference"));
      std::printf("Inference model (BatchNormalization folded, Dropout removed) written to %s\n",
                  a.str("export-inference").c_str());
    }
  }
  return 0;
}

}  // namespace trainrt

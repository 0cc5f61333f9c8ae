#include "launch/train_config.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "graph/error.h"
#include "training/checkpoint.h"

namespace trainrt {

namespace {

// The manual `trainrt train --help` prints after the summary.
constexpr const char* kManual =
    "\n\n"
    "Per epoch it prints the seed's line (epoch, epoch time, validation loss and accuracy,\n"
    "images/sec, cumulative time), stops early like the seed (the last --patience validation\n"
    "accuracies all >= --target-accuracy), and at the end the seed's summary. --export writes\n"
    "the trained model with the input model's interface; --metrics writes one JSON object per\n"
    "epoch (and per --metrics-every steps).\n\n"
    "Checkpoints hold the state tensors and the trainer's position; --resume continues\n"
    "bit-exactly, also mid-epoch: the epoch's batches before the saved step are skipped, not\n"
    "replayed. SIGTERM/SIGUSR1 write a checkpoint at the next step boundary and exit 0. A\n"
    "non-finite loss stops the run at that step, naming the last good checkpoint.\n\n"
    "The training graph runs with its fusions, validation with the inference passes; --fuse\n"
    "off runs both as given, for debugging. They keep every state name, so a checkpoint\n"
    "resumes with either setting; like --backend and --threads, --fuse is not part of the\n"
    "resume check (it changes float rounding and, through node indices, the Dropout masks).\n"
    "--precision bf16 is mixed precision: the training step's convolutions read bf16 copies\n"
    "and accumulate in fp32, every stored value (parameters, optimizer state, checkpoints,\n"
    "exports) stays fp32, and validation runs fp32; it is not part of the resume check either.\n"
    "--precision fp16 rounds the convolutions' inputs to IEEE half instead, with dynamic loss\n"
    "scaling (steps whose gradients overflow are skipped); the cpu backend emulates it (no\n"
    "speed-up), to check a GPU run's numerics on a CPU. The loss scaler's state is in the\n"
    "checkpoint, so an fp16 run resumes only as fp16. With --device cuda both round the\n"
    "convolutions' inputs into fp32 copies (the same rounding) and run them on TF32 tensor\n"
    "cores, which hold those values exactly: the cpu's numerics, at TF32 speed.\n\n"
    "Several ranks (srun, mpirun, or RANK/WORLD_SIZE) train data-parallel: --batch-size is the\n"
    "global batch, each rank takes batch-size/ranks images of its own shard of every epoch\n"
    "(DistributedSampler), the gradients are averaged in buckets while the backward pass runs,\n"
    "validation is split over the ranks and summed. Rank 0 prints, writes metrics, traces,\n"
    "checkpoints and exports; every rank reads a checkpoint to resume. A stop signal on any\n"
    "rank stops all of them after the same step. A rank that dies or hangs ends the others\n"
    "after --comm-timeout with one line naming it (exit 3).\n\n"
    "Your own images: --dataset imagefolder --data-dir D reads torchvision's ImageFolder layout,\n"
    "D/train/<class>/*.jpg|jpeg|png and D/val/<class>/... (classes sorted by name, class index =\n"
    "position; without val/ the training images are validated on). Images are decoded (JPEG, PNG:\n"
    "gray, palette, 16-bit and alpha become RGB) while earlier batches train. Training applies\n"
    "RandomResizedCrop(--image-size, scale 0.08-1, ratio 3/4-4/3) + RandomHorizontalFlip, validation\n"
    "Resize(round(--image-size/0.875)) + CenterCrop(--image-size), both bilinear like PIL, then\n"
    "(x/255 - mean)/std with ImageNet's mean and std unless --mean/--std are given. A corrupt,\n"
    "truncated or non-image file, an empty class folder, or a val/ class that train/ lacks stops\n"
    "the run with one line naming it (exit 2).\n"
    "--dataset npz --data-dir F.npz reads numpy's savez/savez_compressed arrays x (float32, float64\n"
    "or uint8, N x ...) and y (integer labels, N); x_val/y_val are the validation split when present,\n"
    "else x/y. uint8 is scaled by 1/255; --mean/--std (default 0 and 1) then normalise.\n"
    "The model's input must take the dataset's sample shape; if not, one line says how they differ.\n\n"
    "The ResNet-50 benchmark (batch 64, 500 iterations, their durations in a file):\n"
    "  trainrt train resnet50.onnx --dataset imagefolder --data-dir D --batch-size 64 --max-steps 500 \\\n"
    "      --iteration-times iterdur.txt\n"
    "--iteration-times writes one line per step: its wall time in seconds, from the end of the\n"
    "previous step (or the epoch's start) to the end of this one, data waiting included; the first\n"
    "step of a run also builds the execution plan. --max-steps ends the run after that many steps\n"
    "(counted over the whole run, resumed steps included), without validating a partial epoch.";

const CommandSpec kSpec{
    "train",
    "trainrt train MODEL.onnx --dataset fashion-mnist|mnist|cifar10|cifar100|imagefolder|npz [options]",
    std::string("Train an ONNX model (its float initializers are the parameters) on an image dataset,\n"
                "printing the seed's per-epoch line, and export the trained model.") +
        kManual,
    with_data_flags(
        "train",
        with_engine_choice_flags(
            {
                {"max-steps", "0", "stop after this many training steps (0 = run the --epochs)"},
                {"iteration-times", "", "write each step's duration in seconds, one line per step, to this file"},
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
                 "fp32; bf16: mixed precision, convolutions in bf16 (cpu: AVX-512 BF16); fp16: with loss scaling "
                 "(emulated on cpu)"},
                {"conv-algorithm", "winograd",
                 "fp32 3x3 stride-1 convolutions: winograd (F(4x4,3x3): oneDNN's on AVX-512, the cpu backend's own on "
                 "AVX2 for >= 64 channels) or direct"},
                {"device", "cpu", "cpu or cuda (a CUDA build and a GPU: the local rank's GPU, NCCL between ranks)"},
                {"backend", "cpu", "with --device cpu: cpu or reference"},
            },
            {{"fp32-math", "tf32",
              "with --device cuda: tf32 (convolutions and Gemm on TF32 tensor cores, as PyTorch) or strict (full "
              "fp32)"},
             {"layout", "nhwc",
              "with --device cuda: nhwc (activations NHWC between the kernels that take it, as cuDNN's tensor cores "
              "read them) or nchw"},
             {"threads", "0", "CPU threads (0 = all cores, shared out among the ranks of a node)"},
             {"seed", "0", "seed of shuffling, augmentation and dropout"},
             {"shuffle", "on", "on or off (off: the file's order every epoch)"},
             {"augment", "auto",
              "auto (CIFAR: crop+flip; imagefolder: resized crop+flip; MNIST-like, npz: none), on or none"},
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
             {"export-inference", "",
              "write the inference-optimised model (BN folded, Dropout removed, standard ONNX) here"},
             {"trace", "", "write a Chrome/Perfetto trace (nodes, data loading) of --trace-steps steps here"},
             {"trace-steps", "10", "steps recorded by --trace, from this run's 2nd step (the 1st builds the plan)"},
             {"detect-anomaly", "off", "on a NaN/Inf, rerun the step checking every node and name the first bad one",
              Flag::Switch},
             {"fuse", "on",
              "fused training graph (BN+Relu, Conv+residual Add) and optimised validation graph; off to debug"},
             {"branches", "serial",
              "serial, or concurrent: independent neighbouring nodes two at a time (cpu: each with half the threads; "
              "cuda: "
              "the second on a second compute stream)"},
             {"bucket-cap-mb", "25", "several ranks: gradients are averaged in buckets of about this many MB"},
             {"first-bucket-cap-mb", "1", "several ranks: cap of the first bucket (small, so averaging starts early)"},
             {"comm-timeout", "300", "several ranks: seconds to wait for the other ranks before declaring one dead"}})),
    1,
    1};

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

TrainingOptions optimizer_flags(const Args& a) {
  TrainingOptions o;
  o.optimizer = a.one_of("optimizer", {"sgd", "adam", "adamw"});
  o.momentum = static_cast<float>(a.number("momentum"));
  o.weight_decay = static_cast<float>(a.number("weight-decay"));
  o.nesterov = a.on("nesterov");
  o.freeze = split_commas(a.str("freeze"));
  if (a.on("freeze") && o.freeze.empty()) throw_bad_input("--freeze", "expected NAME[,NAME...]");
  if (o.nesterov && (o.optimizer != "sgd" || o.momentum <= 0))
    throw_bad_input("--nesterov", "needs --optimizer sgd and --momentum > 0");
  if (o.optimizer != "sgd" && o.momentum != 0) throw_bad_input("--momentum", "applies to --optimizer sgd only");
  if (o.momentum < 0 || o.weight_decay < 0) throw_bad_input("--momentum/--weight-decay", "must be >= 0");
  return o;
}

LrSchedule schedule_flags(const Args& a, int64_t epochs) {
  LrSchedule s;
  s.base_lr = a.positive_number("base-lr");
  s.kind = a.one_of("lr-schedule", {"constant", "step", "cosine"});
  s.step_epochs = a.positive("lr-step-epochs");
  s.warmup_epochs = a.number("warmup-epochs");
  s.epochs = epochs;
  if (!(s.warmup_epochs >= 0)) throw_bad_input("--warmup-epochs", "must be >= 0");
  if (s.warmup_epochs > static_cast<double>(epochs))
    throw_bad_input("--warmup-epochs", num(s.warmup_epochs) + " is more than --epochs " + std::to_string(epochs));
  if (a.on("lr-step-epochs") && s.kind != "step")
    throw_bad_input("--lr-step-epochs", "applies to --lr-schedule step only");
  return s;
}

void step_flags(const Args& a, TrainConfig& c) {
  c.max_steps = a.at_least("max-steps", 0);
  c.iteration_times_path = a.str("iteration-times");
  if (a.on("iteration-times") && c.iteration_times_path.empty())
    throw_bad_input("--iteration-times", "expected a file name");
}

void rank_flags(const Args& a, TrainConfig& c) {
  c.bucket_mb = a.positive_number("bucket-cap-mb");
  c.first_bucket_mb = a.positive_number("first-bucket-cap-mb");
  c.comm_timeout = a.positive_number("comm-timeout");
  const int64_t world = c.env.world;
  c.per_rank_batch = c.batch_size / world;
  c.global_batch = c.per_rank_batch * world;  // --batch-size rounded down to a multiple of the ranks
  if (c.per_rank_batch == 0)
    throw_bad_input("--batch-size", std::to_string(c.batch_size) + " is smaller than the " + std::to_string(world) +
                                        " ranks (each rank needs at least one image per step)");
}

void output_flags(const Args& a, TrainConfig& c) {
  c.log_every = a.at_least("log-every", 0);
  c.metrics_every = a.at_least("metrics-every", 0);
  c.metrics_path = a.str("metrics");
  c.trace_path = a.str("trace");
  c.trace_steps = a.positive("trace-steps");
  if (a.on("trace-steps") && c.trace_path.empty()) throw_bad_input("--trace-steps", "needs --trace");
  c.export_path = a.str("export");
  c.export_inference_path = a.str("export-inference");
}

void checkpoint_flags(const Args& a, TrainConfig& c) {
  c.checkpoint_dir = a.str("checkpoint-dir");
  c.checkpoint_every = a.at_least("checkpoint-every", 0);
  c.checkpoint_every_steps = a.at_least("checkpoint-every-steps", 0);
  c.keep_checkpoints = a.positive("keep-checkpoints");
  for (const char* f : {"checkpoint-every", "checkpoint-every-steps", "keep-checkpoints"})
    if (a.on(f) && c.checkpoint_dir.empty()) throw_bad_input(std::string("--") + f, "needs --checkpoint-dir");
  if (!a.on("resume")) return;
  c.resume = a.str("resume");
  if (c.resume == "auto") {
    if (c.checkpoint_dir.empty()) throw_bad_input("--resume auto", "needs --checkpoint-dir (where to look)");
    c.resume = latest_checkpoint(c.checkpoint_dir);
    if (c.resume.empty()) throw_bad_input("--resume auto", "no checkpoint in " + c.checkpoint_dir);
  } else if (c.resume.empty()) {
    throw_bad_input("--resume", "expected a checkpoint path or 'auto'");
  }
}

std::map<std::string, std::string> resume_key(const Args& a, const TrainConfig& c) {
  std::map<std::string, std::string> k{{"model", std::filesystem::path(c.model_path).filename().string()},
                                       {"dataset", c.data.dataset},
                                       {"batch-size", std::to_string(c.batch_size)},
                                       {"optimizer", c.optimizer.optimizer},
                                       {"momentum", num(c.optimizer.momentum)},
                                       {"weight-decay", num(c.optimizer.weight_decay)},
                                       {"nesterov", c.optimizer.nesterov ? "on" : "off"},
                                       {"base-lr", num(c.schedule.base_lr)},
                                       {"lr-schedule", c.schedule.kind},
                                       {"warmup-epochs", num(c.schedule.warmup_epochs)},
                                       {"seed", std::to_string(c.seed)},
                                       {"shuffle", c.shuffle ? "on" : "off"},
                                       {"augment", c.augment},
                                       {"limit-train", a.str("limit-train")},
                                       {"freeze", a.str("freeze")},
                                       {"ranks", std::to_string(c.env.world)}};
  if (c.data.dataset == "imagefolder") k["image-size"] = std::to_string(c.data.image_size);
  if (a.on("mean")) k["mean"] = a.str("mean");
  if (a.on("std")) k["std"] = a.str("std");
  if (c.schedule.kind == "step") k["lr-step-epochs"] = std::to_string(c.schedule.step_epochs);
  if (c.schedule.kind == "cosine") k["epochs"] = std::to_string(c.epochs);  // the cosine period
  return k;
}

}  // namespace

const CommandSpec& train_spec() { return kSpec; }

TrainConfig train_config(const Args& a, const RankEnvironment& env) {
  TrainConfig c;
  c.env = env;
  c.model_path = a.positional[0];
  c.data = data_flags(a);
  step_flags(a, c);
  c.batch_size = a.positive("batch-size");
  c.epochs = a.positive("epochs");
  c.patience = a.positive("patience");
  c.threads = a.at_least("threads", 0);
  c.schedule = schedule_flags(a, c.epochs);
  c.target_accuracy = a.number("target-accuracy");
  c.optimizer = optimizer_flags(a);
  c.precision = a.one_of("precision", {"fp32", "bf16", "fp16"});
  c.backend = backend_for_device(a);
  c.device = a.str("device");
  c.timing_cache = timing_cache_for_device(a, c.model_path);
  c.fp32_math = fp32_math_for_device(a, Fp32Math::tf32);
  c.autotune = autotune_for_device(a);
  c.deterministic = deterministic_for_device(a, false);
  c.channels_last = channels_last_for_device(a);
  c.math = c.precision == "bf16"   ? MathPrecision::bf16
           : c.precision == "fp16" ? MathPrecision::fp16
                                   : MathPrecision::fp32;
  if (c.math == MathPrecision::fp16) c.optimizer.loss_scale_name = "loss_scale";
  c.conv = a.one_of("conv-algorithm", {"direct", "winograd"}) == "winograd" ? ConvAlgorithm::winograd
                                                                            : ConvAlgorithm::direct;
  c.augment = a.one_of("augment", {"auto", "on", "none"});
  c.shuffle = a.on_off("shuffle");
  c.seed = static_cast<uint64_t>(a.integer("seed"));
  c.fuse = a.on_off("fuse");
  c.concurrent = a.one_of("branches", {"serial", "concurrent"}) == "concurrent";
  c.detect_anomaly = a.on("detect-anomaly");
  c.limit_train = a.at_least("limit-train", 0);
  c.limit_test = a.at_least("limit-test", 0);
  rank_flags(a, c);
  output_flags(a, c);
  checkpoint_flags(a, c);
  c.resume_key = resume_key(a, c);
  return c;
}

}  // namespace trainrt

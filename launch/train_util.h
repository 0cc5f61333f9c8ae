// The flags and helpers that `train`, `evaluate`, `bench`, `selftest` and the other
// commands share: the data, device and engine-choice flags, synthetic batches. What a
// training run itself needs (evaluation, schedules, threads, the engine chooser, stop
// signals, metrics) is the training library's (training/), included here for the commands.
//
//   DataSource d = data_flags(a);                 // --dataset, --data-dir, ... checked
//   std::string backend = backend_for_device(a);  // --device, --backend
#pragma once

#include <string>
#include <vector>

#include "launch/cli.h"
#include "ops/core/kernel.h"
#include "runtime/executor.h"
#include "training/evaluation.h"
#include "training/lr_schedule.h"
#include "training/metrics.h"
#include "training/run_setup.h"
#include "training/stop_signals.h"

namespace trainrt {

// A model's one float input [N, C, ...] (only N symbolic) and its logits [N, classes],
// for runs on synthetic batches (bench, selftest MODEL). BadInput naming `path` and what
// `command` needs otherwise; a fixed N must equal `batch`.
struct BatchIo {
  std::string input, logits;
  std::vector<int64_t> dims;  // of one batch
  int64_t classes = 0;
};
BatchIo batch_io(const Graph& forward, int64_t batch, const std::string& path, const std::string& command);
// One random batch: images normal, labels uniform over the classes (int64, `labels_name`).
TensorMap random_batch(const BatchIo& io, const std::string& labels_name, uint64_t seed);

// The data flags of `train` and `evaluate` (--dataset, --data-dir, --image-size, --mean,
// --std) followed by `rest`; `split` is the image folder's subfolder the command reads
// ("train" or "val"), for --dataset's help.
std::vector<Flag> with_data_flags(const std::string& split, std::vector<Flag> rest);

// What the data flags say, checked (BadInput naming the flag).
DataSource data_flags(const Args& a);

// The non-empty items of a comma list.
std::vector<std::string> split_commas(const std::string& s);
// --FLAG's comma list of numbers (--mean, --std), each finite and, if `positive`, > 0;
// empty when the flag is not given.
std::vector<float> number_list(const Args& a, const std::string& flag, bool positive);

// The backend a command runs on, from its --device (cpu or cuda) and --backend (a host
// backend for --device cpu: cpu or reference) flags; "cuda" for --device cuda, whose
// combination with --backend is a contradiction (BadInput).
std::string backend_for_device(const Args& a);

// The timing cache file of a --device cuda run (runtime/timing_cache.h): --timing-cache,
// else next to the model; "" for --timing-cache off (any device: choices kept in memory
// only) and for --device cpu, where any other --timing-cache is refused. A file
// that exists is read now, so a corrupt one is refused before the model is (BadInput).
std::string timing_cache_for_device(const Args& a, const std::string& model_path);

// Whether the cuda kernels keep to deterministic engines (ops/core/kernel.h
// set_default_deterministic) from --deterministic on|off, `fallback` when the flag is not
// given (off for train, bench and evaluate, as PyTorch with cudnn.benchmark; on for
// selftest). Every device takes it: the host kernels are deterministic for a given thread
// count either way, so on --device cpu it changes nothing.
bool deterministic_for_device(const Args& a, bool fallback);
// --autotune N (>= 0, BadInput otherwise): the engine candidates timed per problem on
// --device cuda (TimingPolicy::max_candidates, the heuristics' first N); 0: none timed,
// the heuristics' first engine, no timing cache read or written. Taken on every device
// (nothing is timed on the host backends).
size_t autotune_for_device(const Args& a);
// `before`, then the three flags above as train, bench and evaluate declare them (one
// text for all), then `after`.
std::vector<Flag> with_engine_choice_flags(std::vector<Flag> before, const std::vector<Flag>& after);
// The fp32 math of the cuda kernels (ops/core/kernel.h Fp32Math) from --fp32-math tf32|strict,
// `cuda_default` when the flag is not given; with --device cpu the flag is refused
// (BadInput: the host kernels have one fp32 arithmetic) and the result is strict. The
// command passes it to set_default_fp32_math before it builds executors.
Fp32Math fp32_math_for_device(const Args& a, Fp32Math cuda_default);

// Whether the cuda backend keeps activations NHWC between its kernels (runtime/layout.h)
// from --layout nhwc|nchw: nhwc unless the flag says nchw; with --device cpu the flag
// is refused (BadInput: the cpu backend's layout follows the CPU) and the result is true.
bool channels_last_for_device(const Args& a);

// "16,160,320,640" -> the Wide ResNet's 4 widths; BadInput naming --widths otherwise.
std::vector<int64_t> parse_widths(const std::string& text);

// How the library kernels ran, one line each, from the process-wide logs the cuda kernels
// record into (nothing elsewhere): per fused op, how many nodes ran as one cuDNN graph or
// in cuBLASLt's epilogue ("fused nodes: ..."; ops/cuda/graph_fallback.h FusionTally);
// each fallback ("fallback: ...", or "fallbacks: none"); each convolution pass's and
// matrix product's engine ("engine: ...") and the convolutions' TFLOP/s
// (ops/core/engine_record.h). `trainrt bench` prints them after its steps, `trainrt
// selftest` after a failure, so that the kernel path a wrong node took is on record.
void print_fusion_tally();
void print_fallbacks();
void print_engines();

}  // namespace trainrt

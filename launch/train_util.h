// Pieces of the training job shared by `train` and `evaluate`.
//
//   ModelIo io = model_io(graph, dataset, "m.onnx");   // input/output names, checked against the data
//   Evaluation e = evaluate(graph, io, test, 128, *backend);   // mean loss per batch, accuracy
//   LrSchedule s{...};  double lr = s.at(epoch, step, steps_per_epoch);
#pragma once

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "datasets/dataset.h"
#include "distribution/communicator.h"
#include "launch/cli.h"
#include "ops/core/engine_choice.h"
#include "runtime/backend.h"
#include "runtime/executor.h"

namespace trainrt {

struct ModelIo {
  std::string input;   // the image input [N,C,H,W]
  std::string logits;  // [N,classes]
};
// The model must take one float input shaped like the dataset's images and give
// [N,classes] logits with the dataset's class count; BadInput naming both otherwise.
ModelIo model_io(const Graph& g, const Dataset& d, const std::string& where);

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

// The side of an image folder's crops when --image-size is not given: the model's
// input H (= W) when both are fixed, else torchvision's 224.
int64_t model_image_size(const Graph& g);

// The data flags of `train` and `evaluate` (--dataset, --data-dir, --image-size, --mean,
// --std) followed by `rest`; `split` is the image folder's subfolder the command reads
// ("train" or "val"), for --dataset's help.
std::vector<Flag> with_data_flags(const std::string& split, std::vector<Flag> rest);

// What the data flags say, checked (BadInput naming the flag).
struct DataFlags {
  std::string dataset, data_dir;  // data_dir "" = the dataset's default folder
  int64_t image_size = 0;         // imagefolder: --image-size, 0 = the model's input H/W, else 224
  std::vector<float> mean, std;   // --mean/--std; empty = the dataset's own
};
DataFlags data_flags(const Args& a);

// The training or test split for model `g`, its first `limit` samples (0 = all): an
// image folder's crops are the model's input size unless --image-size is given, and
// --mean/--std replace the dataset's normalisation.
Dataset load_split(const DataFlags& f, const Graph& g, bool train, int64_t limit);
// The non-empty items of a comma list.
std::vector<std::string> split_commas(const std::string& s);
// --FLAG's comma list of numbers (--mean, --std), each finite and, if `positive`, > 0;
// empty when the flag is not given.
std::vector<float> number_list(const Args& a, const std::string& flag, bool positive);

struct Evaluation {
  double loss = 0;      // mean over batches of the batch-mean cross-entropy (the seed's v_loss)
  double accuracy = 0;  // correct / total
  int64_t images = 0;
  int64_t batches = 0, correct = 0;  // for sums over the ranks of a data-parallel run
  bool interrupted = false;          // `stop` returned true before the last batch
};
// `stop` (optional) is asked before each batch; when it returns true the evaluation
// ends early with interrupted set (a stop signal during a long validation). `chooser`
// (optional, ExecutorOptions::chooser): the kernels' engine timings, e.g. the training
// run's timing cache, so validation's convolutions run the engines timed for them.
Evaluation evaluate(const Graph& g, const ModelIo& io, const Dataset& d, int64_t batch_size, const Backend& b,
                    const std::function<bool()>& stop = {}, EngineChooser* chooser = nullptr);

// Data-parallel validation: rank `rank` of `world` evaluates its contiguous share of the
// test batches (the batches one process would make, split into `world` runs), and the
// sums over the ranks (through `comm`) give every rank the whole test set's figures.
// Without a communicator it is evaluate(). `stop` is asked only with one rank: ranks
// must not leave a validation at different batches.
// Bytes of the backend's memory that evaluate() of `g` (the unfused forward graph: an
// upper bound for its fused inference form) takes beside training: its plan's arena and
// outputs at `batch_size` images of `d`, the staged batch (`staged_copies` of it: the
// backend's, runtime/executor.h), and the
// model's initializers (validation runs on a copy of the trained weights). Counted in the
// memory check before the first training step (TrainingSession::set_memory_reserve).
size_t evaluation_bytes(const Graph& g, const ModelIo& io, const Dataset& d, int64_t batch_size,
                        size_t staged_copies = 1);

Evaluation evaluate_share(const Graph& g, const ModelIo& io, const Dataset& d, int64_t batch_size, const Backend& b,
                          int rank, int world, Communicator* comm, const std::function<bool()>& stop = {},
                          EngineChooser* chooser = nullptr);

// Threads for one rank when --threads is 0: Slurm's --cpus-per-task when set, else the
// CPUs this process may run on, shared out among the `local_ranks` ranks of the node
// when they all share one CPU set; 0 (the libraries' default: all cores) for one rank
// that Slurm did not restrict.
int default_rank_threads(int local_ranks);

struct LrSchedule {
  std::string kind = "constant";  // constant | step | cosine
  double base_lr = 0.01;
  int64_t step_epochs = 30;  // step: x0.1 every step_epochs
  double warmup_epochs = 0;  // linear ramp from 0 over the first warmup epochs
  int64_t epochs = 1;        // cosine: period
  double at(int64_t epoch, int64_t step, int64_t steps_per_epoch) const;
};

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
// The engine chooser of a run (KernelContext::chooser): null for a host backend and with
// autotune 0; over the timing cache file `cache_path` (timing_cache_for_device), or in
// memory only where it is "" (--timing-cache off), timing the first `autotune` candidates.
std::unique_ptr<EngineChooser> make_engine_chooser(const std::string& backend, const std::string& cache_path,
                                                   size_t autotune);
// Saves the choices `chooser` timed since its last save to its file, if it has one
// (TimingCacheChooser::save_if_new), and says so on stderr.
void save_engine_choices(EngineChooser* chooser, const std::string& cache_path);

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

// Sets the thread count of oneDNN (OpenMP) and oneTBB; 0 keeps all cores.
void configure_threads(int threads);

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// SIGTERM and SIGUSR1 (what Slurm sends before a time limit or preemption) set a
// flag instead of ending the process; the trainer polls stop_signal() at each step
// boundary, writes a checkpoint and exits 0. 0 = no signal yet, else its number.
void install_stop_signals();
int stop_signal();
const char* signal_name(int sig);  // "SIGTERM", "SIGUSR1"

// One JSON object per line; "" disables it. Lines are flushed as written so a
// plot can follow a running job. A resumed run continues the file: lines written
// after the checkpoint it resumes from (step > resume_step, epoch > resume_epochs)
// are dropped first (rewritten atomically), so no step or epoch appears twice.
class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path);
  MetricsWriter(const std::string& path, int64_t resume_step, int64_t resume_epochs);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void step(int64_t step, int64_t epoch, double loss, double lr);
  void epoch(int64_t epoch, double epoch_time, double train_loss, double val_loss, double val_accuracy,
             double images_per_sec, double cumulative_time, double lr);

 private:
  FILE* f_ = nullptr;
};

}  // namespace trainrt

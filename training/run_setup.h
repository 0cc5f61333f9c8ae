// What a training run sets up before its first step, apart from the model and the
// session: the data splits, the threads of a rank, the engine chooser of a cuda run
// and its timing cache, and a clock.
//
//   DataSource data{.dataset = "fashion-mnist"};
//   Dataset train = load_split(data, model, /*train=*/true, /*limit=*/0);
//   configure_threads(default_rank_threads(1));
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "datasets/dataset.h"
#include "graph/ir.h"
#include "ops/core/engine_choice.h"

namespace trainrt {

// Where a run's data comes from (`trainrt train` and `evaluate` fill it from --dataset,
// --data-dir, --image-size, --mean and --std).
struct DataSource {
  std::string dataset = "fashion-mnist", data_dir;  // data_dir "" = the dataset's default folder
  int64_t image_size = 0;                           // imagefolder: 0 = the model's input H/W, else 224
  std::vector<float> mean, std;                     // empty = the dataset's own
};

// The side of an image folder's crops when image_size is not given: the model's
// input H (= W) when both are fixed, else torchvision's 224.
int64_t model_image_size(const Graph& g);

// The training or test split for model `g`, its first `limit` samples (0 = all): an
// image folder's crops are the model's input size unless image_size is given, and
// mean/std replace the dataset's normalisation.
Dataset load_split(const DataSource& f, const Graph& g, bool train, int64_t limit);

// Threads for one rank when none are asked for: Slurm's --cpus-per-task when set, else the
// CPUs this process may run on, shared out among the `local_ranks` ranks of the node
// when they all share one CPU set; 0 (the libraries' default: all cores) for one rank
// that Slurm did not restrict.
int default_rank_threads(int local_ranks);

// Sets the thread count of oneDNN (OpenMP) and oneTBB; 0 keeps all cores.
void configure_threads(int threads);

// The engine chooser of a run (KernelContext::chooser): null for a host backend and with
// autotune 0; over the timing cache file `cache_path` (runtime/timing_cache.h), or in
// memory only where it is "", timing the first `autotune` candidates.
std::unique_ptr<EngineChooser> make_engine_chooser(const std::string& backend, const std::string& cache_path,
                                                   size_t autotune);
// Saves the choices `chooser` timed since its last save to its file, if it has one
// (TimingCacheChooser::save_if_new), and says so on stderr.
void save_engine_choices(EngineChooser* chooser, const std::string& cache_path);

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace trainrt

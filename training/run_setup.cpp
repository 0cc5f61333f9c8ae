#include "training/run_setup.h"

#include <omp.h>
#include <oneapi/tbb/global_control.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "runtime/timing_cache.h"

namespace trainrt {

// The side of an image folder's crops when image_size is not given: the model's
// input H (= W) when both are fixed, else torchvision's 224.
int64_t model_image_size(const Graph& g) {
  if (g.inputs.size() != 1) return 224;
  const ValueInfo& in = g.info(g.inputs[0]);
  if (in.shape && in.shape->size() == 4 && (*in.shape)[2].known() && (*in.shape)[2].value == (*in.shape)[3].value)
    return (*in.shape)[2].value;
  return 224;
}

Dataset load_split(const DataSource& f, const Graph& g, bool train, int64_t limit) {
  DatasetOptions o;
  o.name = f.dataset;
  o.data_dir = f.data_dir;
  o.train = train;
  o.limit = limit;
  o.image_size = f.image_size > 0 ? f.image_size : model_image_size(g);
  Dataset d = load_dataset(o);
  if (!f.mean.empty()) d.mean = f.mean;
  if (!f.std.empty()) d.std = f.std;
  return d;
}

int default_rank_threads(int local_ranks) {
  if (const char* c = std::getenv("SLURM_CPUS_PER_TASK")) {
    const long n = std::strtol(c, nullptr, 10);
    if (n > 0) return static_cast<int>(n);
  }
  const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cpu_set_t set;
  CPU_ZERO(&set);
  const int mine = ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : all;
  if (mine < all) return mine;  // the launcher bound this rank to its own CPUs
  if (local_ranks <= 1) return 0;
  return std::max(1, all / local_ranks);
}

void configure_threads(int threads) {
  if (threads <= 0) return;
  // oneDNN here is built on OpenMP; kernels run on this (the main) thread, whose
  // parallel regions take their size from this setting.
  omp_set_num_threads(threads);
  static std::unique_ptr<tbb::global_control> tbb_limit;
  tbb_limit =
      std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads));
}

std::unique_ptr<EngineChooser> make_engine_chooser(const std::string& backend, const std::string& cache_path,
                                                   size_t autotune) {
  if (backend != "cuda" || autotune == 0) return nullptr;
  TimingPolicy policy;
  policy.max_candidates = autotune;
  if (cache_path.empty()) return std::make_unique<MemoryEngineChooser>(policy);
  return std::make_unique<TimingCacheChooser>(TimingCache::load(cache_path, "", ""), policy);
}

void save_engine_choices(EngineChooser* chooser, const std::string& cache_path) {
  auto* file = dynamic_cast<TimingCacheChooser*>(chooser);
  if (!file) return;
  if (const size_t n = file->save_if_new())
    std::fprintf(stderr, "%s\n", timing_cache_saved_line(n, cache_path).c_str());
}

}  // namespace trainrt

#include "runtime/rank_environment.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "graph/error.h"

namespace trainrt {

RankEnvironment rank_environment(const std::function<std::string(const char*)>& get_env) {
  auto get = [&](const char* name) -> std::string {
    if (get_env) return get_env(name);
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  // A whole decimal number in [lo, hi]; `what` names the variable in errors.
  auto number = [&](const char* name, int lo, int hi) {
    const std::string v = get(name);
    char* end = nullptr;
    errno = 0;
    const long x = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || errno || x < lo || x > hi)
      throw_bad_input(
          "environment variable " + std::string(name),
          "expected a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + v + "'");
    return static_cast<int>(x);
  };
  // The first count of a Slurm task list such as "2(x3),1": tasks on this node when uniform.
  auto first_count = [&](const char* name, int fallback) {
    const std::string v = get(name);
    const long x = std::strtol(v.c_str(), nullptr, 10);
    return x > 0 ? static_cast<int>(x) : fallback;
  };
  constexpr int kMaxRanks = 1 << 20;
  RankEnvironment e;
  // Open MPI's variables first: under mpirun inside a Slurm allocation the processes also
  // inherit the SLURM_* variables of mpirun's own step.
  if (!get("OMPI_COMM_WORLD_SIZE").empty()) {
    e.launcher = "mpirun";
    e.world = number("OMPI_COMM_WORLD_SIZE", 1, kMaxRanks);
    e.rank = number("OMPI_COMM_WORLD_RANK", 0, e.world - 1);
    e.local_world = get("OMPI_COMM_WORLD_LOCAL_SIZE").empty() ? 1 : number("OMPI_COMM_WORLD_LOCAL_SIZE", 1, e.world);
    e.local_rank =
        get("OMPI_COMM_WORLD_LOCAL_RANK").empty() ? 0 : number("OMPI_COMM_WORLD_LOCAL_RANK", 0, e.local_world - 1);
  } else if (!get("SLURM_STEP_NUM_TASKS").empty() && !get("SLURM_PROCID").empty()) {
    // A task of an srun step (a batch script itself has SLURM_PROCID but is no step task).
    e.launcher = "srun";
    e.world = number("SLURM_STEP_NUM_TASKS", 1, kMaxRanks);
    e.rank = number("SLURM_PROCID", 0, e.world - 1);
    e.local_world = std::min(e.world, first_count("SLURM_STEP_TASKS_PER_NODE", 1));
    e.local_rank = get("SLURM_LOCALID").empty() ? 0 : number("SLURM_LOCALID", 0, kMaxRanks);
  } else if (!get("WORLD_SIZE").empty()) {
    e.launcher = "env";
    e.world = number("WORLD_SIZE", 1, kMaxRanks);
    e.rank = number("RANK", 0, e.world - 1);
    e.local_rank = get("LOCAL_RANK").empty() ? 0 : number("LOCAL_RANK", 0, kMaxRanks);
    e.local_world = get("LOCAL_WORLD_SIZE").empty() ? 1 : number("LOCAL_WORLD_SIZE", 1, e.world);
  }
  if (e.local_rank >= e.local_world) e.local_world = e.local_rank + 1;
  return e;
}

}  // namespace trainrt

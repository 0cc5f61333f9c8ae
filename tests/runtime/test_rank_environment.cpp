// Rank detection from the launcher's environment (runtime/rank_environment.h): srun,
// mpirun and RANK/WORLD_SIZE, and the errors that name a bad variable.
#include <map>
#include <string>

#include "runtime/rank_environment.h"
#include "runtime_util.h"

using namespace trainrt;
using namespace trainrt::test;

TEST_CASE("rank_environment: srun, mpirun and RANK/WORLD_SIZE, bad values named") {
  auto env = [](std::map<std::string, std::string> vars) {
    return [vars](const char* name) {
      auto it = vars.find(name);
      return it == vars.end() ? std::string() : it->second;
    };
  };
  RankEnvironment e = rank_environment(env({}));
  CHECK(e.world == 1);
  CHECK(e.launcher == "none");
  e = rank_environment(env({{"SLURM_PROCID", "3"},
                            {"SLURM_STEP_NUM_TASKS", "4"},
                            {"SLURM_LOCALID", "1"},
                            {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
                            {"SLURM_NTASKS", "4"}}));
  CHECK(e.launcher == "srun");
  CHECK(e.rank == 3);
  CHECK(e.world == 4);
  CHECK(e.local_rank == 1);
  CHECK(e.local_world == 2);
  // A batch script has SLURM_PROCID and SLURM_NTASKS but is one process, not a step task.
  CHECK(rank_environment(env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}})).world == 1);
  // mpirun inside an allocation: Open MPI's variables win over the inherited SLURM_* ones.
  e = rank_environment(env({{"OMPI_COMM_WORLD_RANK", "1"},
                            {"OMPI_COMM_WORLD_SIZE", "2"},
                            {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                            {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                            {"SLURM_PROCID", "0"},
                            {"SLURM_STEP_NUM_TASKS", "1"}}));
  CHECK(e.launcher == "mpirun");
  CHECK(e.rank == 1);
  CHECK(e.world == 2);
  e = rank_environment(env({{"RANK", "2"}, {"WORLD_SIZE", "3"}, {"LOCAL_RANK", "0"}}));
  CHECK(e.launcher == "env");
  CHECK(e.rank == 2);
  CHECK(e.world == 3);
  CHECK(error_of([&] {
          rank_environment(env({{"RANK", "3"}, {"WORLD_SIZE", "3"}}));
        }).find("RANK") != std::string::npos);
  CHECK(error_of([&] {
          rank_environment(env({{"SLURM_PROCID", "x"}, {"SLURM_STEP_NUM_TASKS", "2"}}));
        }).find("SLURM_PROCID") != std::string::npos);
}

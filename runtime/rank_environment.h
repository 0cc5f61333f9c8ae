// Which rank of a job this process is, from its launcher's environment.
//
//   RankEnvironment env = rank_environment();   // SLURM_*, OMPI_COMM_WORLD_*, RANK/WORLD_SIZE
//   cuda::set_device(env.local_rank % devices);  // one GPU per rank of a node
//
// Why here, below the communicators (distribution/communicator.h): a backend picks its
// device by the local rank before any communicator exists, and the trainer reads the
// rank and world size to shard its data.
#pragma once

#include <functional>
#include <string>

namespace trainrt {

// Which rank this process is, from the launcher's environment.
struct RankEnvironment {
  int rank = 0, world = 1, local_rank = 0, local_world = 1;
  std::string launcher = "none";  // "srun", "mpirun", "env" (RANK/WORLD_SIZE) or "none"
};
// Reads SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID (srun; not the batch script itself, which
// has no SLURM_STEP_ID), OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE (mpirun) or
// RANK/WORLD_SIZE/LOCAL_RANK (in that order). `get` reads a variable ("" when unset); the
// default reads the process environment. BadInput naming the variable when a value is not
// a number or out of range.
RankEnvironment rank_environment(const std::function<std::string(const char*)>& get = {});

}  // namespace trainrt

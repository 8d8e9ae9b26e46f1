// World discovery: this process's rank, the world size and its rank on the node.
//
// The launcher (srun, mpirun, a PMIx launcher) says what it started through environment
// variables; MPI says what it connected. The two are checked against each other so that a wrong
// launch stops at once with a message saying how to launch instead of training N independent
// copies (the classic case: srun without PMIx starts N single-rank MPI jobs). The local rank comes
// from MPI's shared-memory split, never from rank arithmetic (ranks per node may differ).
//
// parse_launcher_env() and reconcile_world() are pure (an env map in, no MPI) so they are tested
// without launching anything; discover_world() joins them with a live MpiEnvironment.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace dp {

class MpiEnvironment;

using EnvMap = std::map<std::string, std::string>;

// A snapshot of this process's environment variables.
EnvMap process_environment();

// What the launcher's variables say. Precedence when several are set: Open MPI's mpirun
// (OMPI_COMM_WORLD_*, set per process, so right even when mpirun runs inside a Slurm job whose
// batch shell exported SLURM_PROCID=0), then Slurm's srun (SLURM_PROCID, SLURM_STEP_NUM_TASKS or
// SLURM_NTASKS, SLURM_LOCALID), then PMIx (PMIX_RANK; PMIx gives no size in the environment).
struct LauncherEnv {
  std::string launcher = "none";  // "openmpi", "slurm", "pmix" or "none"
  std::optional<int> rank, size, local_rank;
  // The variable each value came from, for error messages ("SLURM_NTASKS").
  std::string rank_var, size_var, local_rank_var;
};

// Throws dp::Error naming the variable when a value is not a non-negative integer, a size is 0,
// or rank >= size.
LauncherEnv parse_launcher_env(const EnvMap& env);

// What MPI's communicator says (MPI_COMM_WORLD and its MPI_COMM_TYPE_SHARED split).
struct MpiLayout {
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  int nodes = 1;  // shared-memory domains (nodes) the world spans
};

struct World {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;  // on this node, from MPI's shared-memory split
  std::string launcher = "none";       // whose variables were checked
  int nodes = 1;                       // nodes the world spans (MpiLayout::nodes)
};

// Checks the launcher's view against MPI's and returns the world; throws dp::Error saying how to
// launch correctly when they disagree on the size, the rank or the local rank.
World reconcile_world(const LauncherEnv& launcher, const MpiLayout& mpi);

// reconcile_world(parse_launcher_env(env), mpi.layout()).
World discover_world(const MpiEnvironment& mpi, const EnvMap& env);

// The device this rank trains on, from run.device: "cpu" stays; "cuda" on a world of more than one
// rank becomes "cuda:<local rank>" (one GPU per rank, numbered by MPI's shared-memory split, so it
// is right however many ranks each node has); a fixed "cuda:N" is kept for a single rank and
// refused when several ranks share a node (they would all use GPU N). Pure: no CUDA call.
std::string device_for_rank(const std::string& configured, const World& world);

}  // namespace dp

#include "comm/world.h"

#include <charconv>
#include <climits>

#include "comm/mpi/mpi_environment.h"
#include "runtime/core/error.h"

extern char** environ;

namespace dp {
namespace {

const std::string* find_var(const EnvMap& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

int parse_non_negative(const std::string& name, const std::string& value) {
  int parsed = -1;
  const char* end = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), end, parsed);
  DP_CHECK(ec == std::errc() && ptr == end && parsed >= 0, "world discovery: environment variable ",
           name, "='", value, "' is not a non-negative integer");
  return parsed;
}

// Sets `out` (and records the variable) from the first of `names` that is set.
void read_var(const EnvMap& env, std::initializer_list<const char*> names, std::optional<int>& out,
              std::string& var) {
  for (const char* name : names) {
    if (const std::string* value = find_var(env, name)) {
      out = parse_non_negative(name, *value);
      var = name;
      return;
    }
  }
}

std::string launcher_command(const std::string& launcher) {
  if (launcher == "slurm") return "srun";
  if (launcher == "openmpi") return "mpirun";
  return "the launcher";
}

}  // namespace

EnvMap process_environment() {
  EnvMap env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string kv(*entry);
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

LauncherEnv parse_launcher_env(const EnvMap& env) {
  LauncherEnv out;
  if (find_var(env, "OMPI_COMM_WORLD_RANK") || find_var(env, "OMPI_COMM_WORLD_SIZE")) {
    out.launcher = "openmpi";
    read_var(env, {"OMPI_COMM_WORLD_RANK"}, out.rank, out.rank_var);
    read_var(env, {"OMPI_COMM_WORLD_SIZE"}, out.size, out.size_var);
    read_var(env, {"OMPI_COMM_WORLD_LOCAL_RANK"}, out.local_rank, out.local_rank_var);
  } else if (find_var(env, "SLURM_PROCID")) {
    out.launcher = "slurm";
    read_var(env, {"SLURM_PROCID"}, out.rank, out.rank_var);
    // The step's task count; SLURM_NTASKS is the job's when a step uses part of the allocation.
    read_var(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}, out.size, out.size_var);
    read_var(env, {"SLURM_LOCALID"}, out.local_rank, out.local_rank_var);
  } else if (find_var(env, "PMIX_RANK")) {
    out.launcher = "pmix";
    read_var(env, {"PMIX_RANK"}, out.rank, out.rank_var);
  }
  DP_CHECK(!out.size || *out.size > 0, "world discovery: ", out.size_var, "=0: a world needs at least one rank");
  DP_CHECK(!out.rank || !out.size || *out.rank < *out.size, "world discovery: ", out.rank_var, "=",
           *out.rank, " is not below ", out.size_var, "=", *out.size);
  return out;
}

World reconcile_world(const LauncherEnv& launcher, const MpiLayout& mpi) {
  DP_ASSERT(mpi.size > 0 && mpi.rank >= 0 && mpi.rank < mpi.size);
  DP_ASSERT(mpi.local_size > 0 && mpi.local_rank >= 0 && mpi.local_rank < mpi.local_size);
  if (launcher.size && *launcher.size != mpi.size) {
    if (launcher.launcher == "slurm" && mpi.size == 1) {
      throw Error(detail::concat(
          "world discovery: Slurm started ", *launcher.size, " tasks (", launcher.size_var, "=",
          *launcher.size, ", this is ", launcher.rank_var, "=", launcher.rank.value_or(0),
          ") but MPI_COMM_WORLD has 1 rank: each task initialised MPI on its own, so they run as ",
          *launcher.size, " separate single-rank jobs, not one job of ", *launcher.size,
          " ranks. Launch through PMIx: `srun --mpi=pmix ...` (`srun --mpi=list` shows what this Slurm "
          "supports), or start the job with mpirun"));
    }
    throw Error(detail::concat(
        "world discovery: ", launcher_command(launcher.launcher), " started ", *launcher.size,
        " ranks (", launcher.size_var, "=", *launcher.size, ") but MPI_COMM_WORLD has ", mpi.size,
        " (this is MPI rank ", mpi.rank, "): the launcher and the MPI library dptrain is linked "
        "against do not belong together; launch with the mpirun of the Open MPI dptrain was built "
        "with, or `srun --mpi=pmix`"));
  }
  DP_CHECK(!launcher.rank || *launcher.rank == mpi.rank, "world discovery: ", launcher.rank_var, "=",
           *launcher.rank, " but MPI_COMM_WORLD says this is rank ", mpi.rank, " of ", mpi.size,
           ": the launcher and MPI number the ranks differently; launch with `mpirun` or "
           "`srun --mpi=pmix` so both come from one launcher");
  DP_CHECK(!launcher.local_rank || *launcher.local_rank == mpi.local_rank, "world discovery: ",
           launcher.local_rank_var, "=", *launcher.local_rank, " but MPI's shared-memory split says "
           "this is local rank ", mpi.local_rank, " of ", mpi.local_size, " on this node (rank ",
           mpi.rank, "): ranks that share a node disagree on who is who, so they would bind the "
           "wrong devices; check that every node has a distinct hostname and that no launcher "
           "variables leaked in from an outer job");
  return World{mpi.rank, mpi.size, mpi.local_rank, mpi.local_size, launcher.launcher, mpi.nodes};
}

std::string device_for_rank(const std::string& configured, const World& world) {
  if (world.size == 1 || configured == "cpu") return configured;
  if (configured == "cuda") return "cuda:" + std::to_string(world.local_rank);
  DP_CHECK(world.local_size == 1, "run.device: ", configured, " would put all ", world.local_size,
           " ranks of this node (rank ", world.rank, " is local rank ", world.local_rank,
           ") on one GPU; use `cuda` to give each rank the GPU of its local rank");
  return configured;
}

World discover_world(const MpiEnvironment& mpi, const EnvMap& env) {
  return reconcile_world(parse_launcher_env(env), mpi.layout());
}

}  // namespace dp

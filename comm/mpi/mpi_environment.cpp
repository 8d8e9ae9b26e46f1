#include "comm/mpi/mpi_environment.h"

#include <cstdio>
#include <cstdlib>

#include "comm/mpi/mpi_check.h"

namespace dp {
namespace {

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown MPI thread level";
}

}  // namespace

MpiEnvironment::MpiEnvironment(int* argc, char*** argv) {
  int initialized = 0, finalized = 0;
  check_mpi(MPI_Initialized(&initialized), "MPI_Initialized", "MpiEnvironment");
  check_mpi(MPI_Finalized(&finalized), "MPI_Finalized", "MpiEnvironment");
  DP_CHECK(!finalized, "MpiEnvironment: MPI was already finalised in this process and cannot be "
           "initialised again; create one MpiEnvironment for the whole program");
  DP_CHECK(!initialized, "MpiEnvironment: MPI is already initialised in this process; create "
           "one MpiEnvironment for the whole program and pass it where it is needed");
  // MPI_Init_thread's errors are fatal (no communicator exists yet to carry MPI_ERRORS_RETURN);
  // the code is still checked for MPIs that return.
  check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &thread_level_), "MPI_Init_thread",
            "MpiEnvironment");
  if (thread_level_ < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();  // best effort: the error below is the one to report
    throw Error(detail::concat("MpiEnvironment: this MPI library provides only ",
                               thread_level_name(thread_level_), "; dptrain's communication "
                               "thread needs MPI_THREAD_SERIALIZED or better (use an Open MPI "
                               "built with thread support, such as Debian's libopenmpi-dev)"));
  }
  try {
    check_mpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler",
              "MpiEnvironment");
    check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &layout_.rank), "MPI_Comm_rank", "MpiEnvironment");
    check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &layout_.size), "MPI_Comm_size", "MpiEnvironment");
    // The ranks that share this node's memory, numbered in world-rank order: the local rank.
    MPI_Comm node_comm = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, layout_.rank, MPI_INFO_NULL,
                                  &node_comm),
              "MPI_Comm_split_type", "MpiEnvironment: finding the ranks on this node");
    int rank_rc = MPI_Comm_rank(node_comm, &layout_.local_rank);
    int size_rc = MPI_Comm_size(node_comm, &layout_.local_size);
    int free_rc = MPI_Comm_free(&node_comm);
    check_mpi(rank_rc, "MPI_Comm_rank", "MpiEnvironment: local rank");
    check_mpi(size_rc, "MPI_Comm_size", "MpiEnvironment: ranks on this node");
    check_mpi(free_rc, "MPI_Comm_free", "MpiEnvironment: node communicator");
    // Nodes: one local rank 0 each (a scaling study's records say how many the run spanned).
    int node_leader = layout_.local_rank == 0 ? 1 : 0;
    check_mpi(MPI_Allreduce(&node_leader, &layout_.nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce",
              "MpiEnvironment: counting the nodes");
  } catch (...) {
    MPI_Finalize();  // best effort: already failing
    throw;
  }
}

MpiEnvironment::~MpiEnvironment() {
  if (int live = live_process_groups_.load(); live != 0) {
    // Finalising under a running communication thread is undefined; this is a bug in the caller.
    std::fprintf(stderr, "dptrain: MpiEnvironment destroyed while %d process group(s) still exist; "
                         "destroy the process groups first\n", live);
    std::abort();
  }
  if (int rc = MPI_Finalize(); rc != MPI_SUCCESS) {
    std::fprintf(stderr, "dptrain: MPI_Finalize failed: %s\n", mpi_error_text(rc).c_str());
  }
}

void MpiEnvironment::add_process_group() {
  int before = live_process_groups_.fetch_add(1);
  if (thread_level_ < MPI_THREAD_MULTIPLE && before > 0) {
    live_process_groups_.fetch_sub(1);
    throw Error(detail::concat("MpiProcessGroup: this MPI provides only ",
                               thread_level_name(thread_level_), ", so only one process group "
                               "(one communication thread) may exist at a time; destroy the other "
                               "first or use an MPI with MPI_THREAD_MULTIPLE"));
  }
}

void MpiEnvironment::remove_process_group() { live_process_groups_.fetch_sub(1); }

}  // namespace dp

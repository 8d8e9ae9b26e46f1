// MpiEnvironment owns MPI's lifetime in this process: MPI_Init_thread in the constructor,
// MPI_Finalize in the destructor. main() creates one, before any process group, and passes it
// to what needs it; MPI cannot be initialised twice nor restarted after finalising, so a second
// one is an error. Destroy every MpiProcessGroup before it.
#pragma once

#include <mpi.h>

#include <atomic>

#include "comm/world.h"

namespace dp {

class MpiEnvironment {
 public:
  // Initialises MPI asking for MPI_THREAD_MULTIPLE (each process group has its own communication
  // thread). MPI_THREAD_SERIALIZED is accepted, with one process group at a time; less is an error.
  MpiEnvironment(int* argc, char*** argv);
  MpiEnvironment() : MpiEnvironment(nullptr, nullptr) {}
  ~MpiEnvironment();
  MpiEnvironment(const MpiEnvironment&) = delete;
  MpiEnvironment& operator=(const MpiEnvironment&) = delete;

  // MPI_COMM_WORLD (with MPI_ERRORS_RETURN set), to be duplicated by process groups.
  MPI_Comm world_comm() const { return MPI_COMM_WORLD; }
  // Rank and size in MPI_COMM_WORLD, and on this node from MPI_Comm_split_type(SHARED).
  const MpiLayout& layout() const { return layout_; }
  int thread_level() const { return thread_level_; }  // MPI_THREAD_SERIALIZED or MULTIPLE

  // Process groups register while they exist; this enforces one at a time under
  // MPI_THREAD_SERIALIZED and catches groups that outlive MPI.
  void add_process_group();
  void remove_process_group();

 private:
  MpiLayout layout_;
  int thread_level_ = MPI_THREAD_SINGLE;
  std::atomic<int> live_process_groups_{0};
};

}  // namespace dp

// Sets the calling thread's OpenMP team size for the parallel regions a library (oneDNN) opens
// on it, and restores the previous size when the scope ends.
#pragma once

#include <omp.h>

namespace dp::cpu {

class OmpThreadsScope {
 public:
  explicit OmpThreadsScope(int threads) : saved_(omp_get_max_threads()) { omp_set_num_threads(threads); }
  ~OmpThreadsScope() { omp_set_num_threads(saved_); }
  OmpThreadsScope(const OmpThreadsScope&) = delete;
  OmpThreadsScope& operator=(const OmpThreadsScope&) = delete;

 private:
  int saved_;
};

}  // namespace dp::cpu

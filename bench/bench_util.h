// Timing helpers shared by the benchmarks: warm up, then the median of repeated runs.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace dp::bench {

struct Timing {
  double median_ms = 0, min_ms = 0;
  int iters = 0;
};

inline Timing time_it(const std::function<void()>& fn, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> ms;
  ms.reserve(iters);
  for (int i = 0; i < iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front(), iters};
}

}  // namespace dp::bench

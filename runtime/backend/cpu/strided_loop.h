// Loops over N same-shaped strided operands (element strides, possibly 0 for broadcast).
//
// Dims are coalesced first (adjacent dims that are contiguous for every operand merge, size-1
// dims drop), so contiguous and simply-broadcast cases reduce to one or two flat loops. The
// body gets the base pointers' element offsets for a run of `count` elements along the last
// coalesced dim and that dim's stride per operand.
#pragma once

#include <omp.h>

#include <array>
#include <cstdint>
#include <vector>

#include "runtime/core/shape.h"

namespace dp::cpu {

template <int N>
struct CoalescedLayout {
  Shape sizes;                        // coalesced sizes, outermost first
  std::array<Shape, N> strides;       // per operand
};

template <int N>
CoalescedLayout<N> coalesce(const Shape& shape, const std::array<const Shape*, N>& strides) {
  CoalescedLayout<N> out;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !out.sizes.empty();
    for (int k = 0; k < N && merge; ++k)
      merge = out.strides[k].back() == (*strides[k])[d] * shape[d];
    if (merge) {
      out.sizes.back() *= shape[d];
      for (int k = 0; k < N; ++k) out.strides[k].back() = (*strides[k])[d];
    } else {
      out.sizes.push_back(shape[d]);
      for (int k = 0; k < N; ++k) out.strides[k].push_back((*strides[k])[d]);
    }
  }
  if (out.sizes.empty()) {  // scalar or all-ones shape: one element
    out.sizes.push_back(1);
    for (int k = 0; k < N; ++k) out.strides[k].push_back(0);
  }
  return out;
}

// body(std::array<int64_t, N> offsets, int64_t count, std::array<int64_t, N> inner_strides)
template <int N, typename Body>
void strided_loop(const Shape& shape, const std::array<const Shape*, N>& strides, int num_threads,
                  Body&& body) {
  if (numel_of(shape) == 0) return;  // nothing to visit (and a size-0 outer dim would divide by 0)
  CoalescedLayout<N> L = coalesce<N>(shape, strides);
  const int nd = static_cast<int>(L.sizes.size());
  const int64_t inner = L.sizes[nd - 1];
  int64_t outer = 1;
  for (int d = 0; d < nd - 1; ++d) outer *= L.sizes[d];
  std::array<int64_t, N> inner_strides;
  for (int k = 0; k < N; ++k) inner_strides[k] = L.strides[k][nd - 1];

  auto run_rows = [&](int64_t row_begin, int64_t row_end) {
    // Multi-index of row_begin over the outer dims.
    std::vector<int64_t> idx(nd > 1 ? nd - 1 : 0);
    std::array<int64_t, N> off{};
    int64_t r = row_begin;
    for (int d = nd - 2; d >= 0; --d) {
      idx[d] = r % L.sizes[d];
      r /= L.sizes[d];
      for (int k = 0; k < N; ++k) off[k] += idx[d] * L.strides[k][d];
    }
    for (int64_t row = row_begin; row < row_end; ++row) {
      body(off, inner, inner_strides);
      for (int d = nd - 2; d >= 0; --d) {  // odometer increment
        for (int k = 0; k < N; ++k) off[k] += L.strides[k][d];
        if (++idx[d] < L.sizes[d]) break;
        for (int k = 0; k < N; ++k) off[k] -= L.strides[k][d] * L.sizes[d];
        idx[d] = 0;
      }
    }
  };

  const int64_t total = outer * inner;
  if (num_threads <= 1 || total < 32768 || outer == 1) {
    if (outer == 1 && num_threads > 1 && inner >= 65536) {
      // One long run: split it between threads.
#pragma omp parallel num_threads(num_threads)
      {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        int64_t b = inner * t / nt, e = inner * (t + 1) / nt;
        std::array<int64_t, N> off;
        for (int k = 0; k < N; ++k) off[k] = b * inner_strides[k];
        if (e > b) body(off, e - b, inner_strides);
      }
      return;
    }
    run_rows(0, outer);
    return;
  }
#pragma omp parallel num_threads(num_threads)
  {
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    int64_t b = outer * t / nt, e = outer * (t + 1) / nt;
    if (e > b) run_rows(b, e);
  }
}

}  // namespace dp::cpu

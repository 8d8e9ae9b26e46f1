// Embedding gather (forward) and deterministic scatter-add (backward) on CUDA (the CPU's
// cpu/embedding.cpp); kernels first, launchers after.
//
// Forward: one warp per output row copies the weight row in the widest unit (16, 8, 4, 2 or 1
// bytes) that divides the row's bytes and both base pointers.
//
// Backward, without floating atomics so that runs repeat bit for bit:
//  1. sort keys: key[k] = indices[k], or V ("skip") for padding_idx and out-of-range indices
//     (recorded as device errors); position[k] = k.
//  2. cub::DeviceRadixSort::SortPairs over the key bits needed for [0, V]: a stable sort, so
//     equal keys (a "run") keep their positions in increasing order; skips sort last.
//  3. The sorted rows are cut into tiles of kTile. Phase A, one warp per tile: each piece of a
//     run inside the tile is summed in order; a run wholly inside the tile is added to dweight
//     at once; the first piece of a tile that continues a run from the previous tile is stored
//     as the tile's partial sum. Phase B, one warp per tile: a run that starts in the tile and
//     continues past it (its "owner" tile) sums its own piece, then the partial sums of the
//     following tiles in order, and adds the total to dweight once.
// Every dweight row is written by exactly one warp (per column chunk), in a fixed order.
// Accumulation is in acc_t<T> (float; double for float64).
#include <cub/cub.cuh>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "runtime/backend/cuda/device_utils.cuh"
#include "runtime/backend/cuda/embedding_kernels.h"

namespace dp::cuda {
namespace {

using namespace device;

constexpr int kWarpsPerBlock = 8;
constexpr int kBlockThreads = 32 * kWarpsPerBlock;  // 256
constexpr int64_t kMaxBlocksX = int64_t(1) << 20;  // grid-stride past this
constexpr int64_t kMaxBlocksY = 65535;
constexpr int64_t kTile = 64;  // sorted rows per backward tile
// Warps the backward grid aims for before it splits a row's columns between warps (grid.y).
constexpr int64_t kTargetWarps = 16384;

// ---- Forward ----------------------------------------------------------------------------------

// weight [V, D], out [K, D], both seen as rows of `row_units` units U; indices int64 [K].
// out[k] = weight[indices[k]], or zeros (and a recorded error) when indices[k] is not in [0, V).
template <typename U>
__global__ void __launch_bounds__(kBlockThreads)
    embedding_forward_kernel(const U* __restrict__ weight, const int64_t* __restrict__ indices, U* __restrict__ out,
                             int64_t K, int64_t V, int64_t row_units, DeviceErrors* errors) {
  const int lane = threadIdx.x & 31;
  const int64_t warp_stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); k < K; k += warp_stride) {
    const int64_t v = indices[k];
    U* dst = out + k * row_units;
    if (v < 0 || v >= V) {
      if (lane == 0) record_device_error(errors, DeviceErrorCode::EmbeddingIndexOutOfRange, v, V, k);
      for (int64_t u = lane; u < row_units; u += 32) dst[u] = U{};
      continue;
    }
    const U* src = weight + v * row_units;
    for (int64_t u = lane; u < row_units; u += 32) dst[u] = src[u];
  }
}

// indices int64 [K]: records the first index outside [0, V) (for calls with nothing to copy).
__global__ void embedding_check_indices_kernel(const int64_t* __restrict__ indices, int64_t K, int64_t V,
                                               DeviceErrors* errors) {
  for (int64_t k = first_index(); k < K; k += grid_stride()) {
    const int64_t v = indices[k];
    if (v < 0 || v >= V) record_device_error(errors, DeviceErrorCode::EmbeddingIndexOutOfRange, v, V, k);
  }
}

// ---- Backward ---------------------------------------------------------------------------------

// indices int64 [K] → keys [K] (the index, or V for padding_idx and out-of-range indices, which
// are recorded) and positions [K] (k).
template <typename Key, typename Pos>
__global__ void embedding_sort_keys_kernel(const int64_t* __restrict__ indices, Key* __restrict__ keys,
                                           Pos* __restrict__ positions, int64_t K, int64_t V, int64_t padding_idx,
                                           DeviceErrors* errors) {
  for (int64_t k = first_index(); k < K; k += grid_stride()) {
    const int64_t v = indices[k];
    const bool valid = v >= 0 && v < V;
    if (!valid) record_device_error(errors, DeviceErrorCode::EmbeddingIndexOutOfRange, v, V, k);
    keys[k] = static_cast<Key>(valid && v != padding_idx ? v : V);
    positions[k] = static_cast<Pos>(k);
  }
}

// acc[e] += dout[positions[r], c + e] for r in [r0, r1), in order of r. VEC > 1: 16-byte loads
// (dout 16-byte aligned, D and c multiples of VEC).
template <typename T, int VEC, typename Pos>
__device__ __forceinline__ void accumulate_rows(const T* __restrict__ dout, const Pos* __restrict__ positions,
                                                int64_t r0, int64_t r1, int64_t D, int64_t c, acc_t<T> (&acc)[VEC]) {
  using A = acc_t<T>;
#pragma unroll 4
  for (int64_t r = r0; r < r1; ++r) {
    const T* src = dout + static_cast<int64_t>(positions[r]) * D + c;
    if constexpr (VEC == 1) {
      acc[0] += convert<A>(*src);
    } else {
      const Vec<T, VEC> v = *reinterpret_cast<const Vec<T, VEC>*>(src);
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[e] += convert<A>(v.v[e]);
    }
  }
}

// dst[e] += acc[e] (dst 16-byte aligned when VEC > 1).
template <typename T, int VEC>
__device__ __forceinline__ void add_to_row(T* dst, const acc_t<T> (&acc)[VEC]) {
  using A = acc_t<T>;
  if constexpr (VEC == 1) {
    *dst = convert<T>(convert<A>(*dst) + acc[0]);
  } else {
    Vec<T, VEC> v = *reinterpret_cast<const Vec<T, VEC>*>(dst);
#pragma unroll
    for (int e = 0; e < VEC; ++e) v.v[e] = convert<T>(convert<A>(v.v[e]) + acc[e]);
    *reinterpret_cast<Vec<T, VEC>*>(dst) = v;
  }
}

// The column chunks of one row: each warp pass covers 32 * VEC columns, lane l the VEC columns
// from chunk * 32 * VEC + l * VEC. Chunks are split between grid.y (and looped past it).
template <int VEC>
__device__ __forceinline__ int64_t chunk_count(int64_t D) {
  return (D + 32 * VEC - 1) / (32 * VEC);
}

// Phase A. dout [K, D]; keys, positions [K] sorted by key (keys in [0, V], V = skip);
// dweight [V, D]; partials [ceil(K / kTile), D] of acc_t<T>. One warp per tile of kTile sorted
// rows: runs wholly inside the tile go to dweight; a first piece continuing the previous tile's
// run goes to partials[tile]; a run starting here and continuing is left to phase B.
template <typename T, int VEC, typename Key, typename Pos>
__global__ void __launch_bounds__(kBlockThreads)
    embedding_backward_tiles_kernel(const T* __restrict__ dout, const Key* __restrict__ keys,
                                    const Pos* __restrict__ positions, T* __restrict__ dweight,
                                    acc_t<T>* __restrict__ partials, int64_t K, int64_t V, int64_t D) {
  using A = acc_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t tiles = (K + kTile - 1) / kTile;
  const int64_t chunks = chunk_count<VEC>(D);
  const int64_t warp_stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t tile = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); tile < tiles;
       tile += warp_stride) {
    const int64_t begin = tile * kTile, end = begin + kTile < K ? begin + kTile : K;
    for (int64_t chunk = blockIdx.y; chunk < chunks; chunk += gridDim.y) {
      const int64_t c = chunk * 32 * VEC + static_cast<int64_t>(lane) * VEC;
      const bool has_columns = c < D;  // lanes past D follow the loop but touch no data
      int64_t r = begin;
      while (r < end) {  // one piece (equal keys) per iteration; warp-uniform
        const Key key = keys[r];
        int64_t piece_end = r + 1;
        while (piece_end < end && keys[piece_end] == key) ++piece_end;
        if (static_cast<int64_t>(key) < V) {
          const bool continues_previous = r == begin && begin > 0 && keys[begin - 1] == key;
          const bool continues_next = piece_end == end && end < K && keys[end] == key;
          if ((continues_previous || !continues_next) && has_columns) {
            A acc[VEC];
#pragma unroll
            for (int e = 0; e < VEC; ++e) acc[e] = A(0);
            accumulate_rows<T, VEC>(dout, positions, r, piece_end, D, c, acc);
            if (continues_previous) {
              A* p = partials + tile * D + c;
#pragma unroll
              for (int e = 0; e < VEC; ++e) p[e] = acc[e];
            } else {
              add_to_row<T, VEC>(dweight + static_cast<int64_t>(key) * D + c, acc);
            }
          }
        }
        r = piece_end;
      }
    }
  }
}

// Phase B (after phase A; same operands). One warp per tile: when the tile's last piece starts a
// run (it does not continue the previous tile's) and the run continues into the next tile, sums
// the piece, then partials[t] for the following tiles t the run covers, in order, and adds the
// total to dweight. A frequent index (a long run) costs its owner warp one partial row per
// kTile sorted rows.
template <typename T, int VEC, typename Key, typename Pos>
__global__ void __launch_bounds__(kBlockThreads)
    embedding_backward_runs_kernel(const T* __restrict__ dout, const Key* __restrict__ keys,
                                   const Pos* __restrict__ positions, T* __restrict__ dweight,
                                   const acc_t<T>* __restrict__ partials, int64_t K, int64_t V, int64_t D) {
  using A = acc_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t tiles = (K + kTile - 1) / kTile;
  const int64_t chunks = chunk_count<VEC>(D);
  const int64_t warp_stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t tile = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); tile < tiles;
       tile += warp_stride) {
    const int64_t begin = tile * kTile, end = begin + kTile < K ? begin + kTile : K;
    const Key key = keys[end - 1];
    if (static_cast<int64_t>(key) >= V) continue;      // skipped rows
    if (end >= K || keys[end] != key) continue;        // the run ends in this tile (phase A did it)
    int64_t piece_begin = end - 1;
    while (piece_begin > begin && keys[piece_begin - 1] == key) --piece_begin;
    if (piece_begin == begin && begin > 0 && keys[begin - 1] == key) continue;  // not the run's first tile
    // The run's end: the first sorted row past it (binary search; keys are sorted). Tiles
    // tile + 1 .. last_tile all begin inside the run, so phase A stored their partial sums.
    int64_t lo = end, hi = K;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (keys[mid] <= key) lo = mid + 1;
      else hi = mid;
    }
    const int64_t last_tile = (lo - 1) / kTile;
    for (int64_t chunk = blockIdx.y; chunk < chunks; chunk += gridDim.y) {
      const int64_t c = chunk * 32 * VEC + static_cast<int64_t>(lane) * VEC;
      if (c >= D) continue;
      A acc[VEC];
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[e] = A(0);
      accumulate_rows<T, VEC>(dout, positions, piece_begin, end, D, c, acc);
#pragma unroll 4
      for (int64_t next = tile + 1; next <= last_tile; ++next) {
        const A* p = partials + next * D + c;
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[e] += p[e];
      }
      add_to_row<T, VEC>(dweight + static_cast<int64_t>(key) * D + c, acc);
    }
  }
}

// ---- Launch helpers ---------------------------------------------------------------------------

constexpr size_t kScratchAlign = 256;

size_t align_up(size_t n) { return (n + kScratchAlign - 1) / kScratchAlign * kScratchAlign; }

// The 32-bit sort (keys and positions) when every key in [0, V] and position fits.
bool use_32bit_sort(int64_t K, int64_t V) { return V < INT32_MAX && K <= INT32_MAX; }

// Key bits needed for values in [0, V] (V >= 1).
int key_bits(int64_t V) { return 64 - __builtin_clzll(static_cast<unsigned long long>(V)); }

// Layout of the backward scratch: [keys_in | keys_out | positions_in | positions_out |
// partials | CUB storage], each part 256-byte aligned from the base.
struct ScratchLayout {
  size_t keys_in = 0, keys_out = 0, pos_in = 0, pos_out = 0, partials = 0, cub = 0;
  size_t cub_bytes = 0, total = 0;
};

template <typename Key, typename Pos>
cudaError_t sort_pairs(void* temp, size_t& temp_bytes, const Key* keys_in, Key* keys_out, const Pos* pos_in,
                       Pos* pos_out, int64_t K, int end_bit, cudaStream_t stream) {
  if constexpr (sizeof(Pos) == 4) {
    return cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, pos_in, pos_out,
                                           static_cast<int>(K), 0, end_bit, stream);
  } else {
    return cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, pos_in, pos_out, K, 0, end_bit,
                                           stream);
  }
}

template <typename Key, typename Pos>
cudaError_t scratch_layout(int64_t K, int64_t V, int64_t D, size_t acc_size, ScratchLayout* layout) {
  ScratchLayout l;
  const size_t k = static_cast<size_t>(K);
  size_t offset = 0;
  l.keys_in = offset;
  offset += align_up(k * sizeof(Key));
  l.keys_out = offset;
  offset += align_up(k * sizeof(Key));
  l.pos_in = offset;
  offset += align_up(k * sizeof(Pos));
  l.pos_out = offset;
  offset += align_up(k * sizeof(Pos));
  l.partials = offset;
  const size_t tiles = static_cast<size_t>((K + kTile - 1) / kTile);
  offset += align_up(tiles * static_cast<size_t>(D) * acc_size);
  l.cub = offset;
  const cudaError_t status = sort_pairs<Key, Pos>(nullptr, l.cub_bytes, nullptr, nullptr, nullptr, nullptr, K,
                                                  key_bits(V), nullptr);
  if (status != cudaSuccess) return status;
  l.total = offset + align_up(l.cub_bytes);
  *layout = l;
  return cudaSuccess;
}

size_t acc_size_of(DType dtype) { return dtype == DType::Float64 ? sizeof(double) : sizeof(float); }

template <typename T, typename Key, typename Pos>
cudaError_t embedding_backward_typed(const T* dout, const int64_t* indices, T* dweight, int64_t K, int64_t V,
                                     int64_t D, int64_t padding_idx, void* scratch, size_t scratch_bytes,
                                     DeviceErrors* errors, cudaStream_t stream) {
  using A = acc_t<T>;
  ScratchLayout l;
  cudaError_t status = scratch_layout<Key, Pos>(K, V, D, sizeof(A), &l);
  if (status != cudaSuccess) return status;
  if (scratch == nullptr || scratch_bytes < l.total) return cudaErrorInvalidValue;
  auto* base = static_cast<unsigned char*>(scratch);
  Key* keys_in = reinterpret_cast<Key*>(base + l.keys_in);
  Key* keys_out = reinterpret_cast<Key*>(base + l.keys_out);
  Pos* pos_in = reinterpret_cast<Pos*>(base + l.pos_in);
  Pos* pos_out = reinterpret_cast<Pos*>(base + l.pos_out);
  A* partials = reinterpret_cast<A*>(base + l.partials);

  embedding_sort_keys_kernel<Key, Pos>
      <<<blocks_for(K), kThreads, 0, stream>>>(indices, keys_in, pos_in, K, V, padding_idx, errors);
  status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  size_t cub_bytes = l.cub_bytes;
  status = sort_pairs<Key, Pos>(base + l.cub, cub_bytes, keys_in, keys_out, pos_in, pos_out, K, key_bits(V), stream);
  if (status != cudaSuccess) return status;

  const int64_t tiles = (K + kTile - 1) / kTile;
  const unsigned blocks_x =
      static_cast<unsigned>(std::min<int64_t>((tiles + kWarpsPerBlock - 1) / kWarpsPerBlock, kMaxBlocksX));
  auto launch = [&](auto vec_tag) {
    constexpr int kV = decltype(vec_tag)::value;
    const int64_t chunks = (D + 32 * kV - 1) / (32 * kV);
    const int64_t want_y = (kTargetWarps + tiles - 1) / tiles;  // few tiles: split the columns
    const dim3 grid(blocks_x, static_cast<unsigned>(std::max<int64_t>(1, std::min({want_y, chunks, kMaxBlocksY}))));
    embedding_backward_tiles_kernel<T, kV, Key, Pos>
        <<<grid, kBlockThreads, 0, stream>>>(dout, keys_out, pos_out, dweight, partials, K, V, D);
    embedding_backward_runs_kernel<T, kV, Key, Pos>
        <<<grid, kBlockThreads, 0, stream>>>(dout, keys_out, pos_out, dweight, partials, K, V, D);
  };
  constexpr int kVecT = kVec<T>;
  if (D % kVecT == 0 && aligned16(dout) && aligned16(dweight)) launch(std::integral_constant<int, kVecT>{});
  else launch(std::integral_constant<int, 1>{});
  return cudaGetLastError();
}

template <typename U>
void launch_gather(const void* weight, const int64_t* indices, void* out, int64_t K, int64_t V, int64_t row_bytes,
                   DeviceErrors* errors, cudaStream_t stream) {
  const unsigned blocks =
      static_cast<unsigned>(std::min<int64_t>((K + kWarpsPerBlock - 1) / kWarpsPerBlock, kMaxBlocksX));
  embedding_forward_kernel<U><<<blocks, kBlockThreads, 0, stream>>>(
      static_cast<const U*>(weight), indices, static_cast<U*>(out), K, V,
      row_bytes / static_cast<int64_t>(sizeof(U)), errors);
}

}  // namespace

// ---- Launchers --------------------------------------------------------------------------------

cudaError_t launch_embedding_forward(const void* weight, const int64_t* indices, void* out, int64_t K, int64_t V,
                                     int64_t D, size_t element_size, DeviceErrors* errors, cudaStream_t stream) {
  if (K < 0 || V < 0 || D < 0 || element_size == 0) return cudaErrorInvalidValue;
  if (K == 0) return cudaSuccess;
  if (indices == nullptr || errors == nullptr) return cudaErrorInvalidValue;
  if (D == 0) {  // nothing to copy; the indices are still checked, as on the CPU
    embedding_check_indices_kernel<<<blocks_for(K), kThreads, 0, stream>>>(indices, K, V, errors);
    return cudaGetLastError();
  }
  if (out == nullptr || (V > 0 && weight == nullptr)) return cudaErrorInvalidValue;
  const int64_t row_bytes = D * static_cast<int64_t>(element_size);
  auto fits = [&](int64_t unit) {
    return row_bytes % unit == 0 && reinterpret_cast<uintptr_t>(weight) % unit == 0 &&
           reinterpret_cast<uintptr_t>(out) % unit == 0;
  };
  if (fits(16)) launch_gather<uint4>(weight, indices, out, K, V, row_bytes, errors, stream);
  else if (fits(8)) launch_gather<uint2>(weight, indices, out, K, V, row_bytes, errors, stream);
  else if (fits(4)) launch_gather<uint32_t>(weight, indices, out, K, V, row_bytes, errors, stream);
  else if (fits(2)) launch_gather<uint16_t>(weight, indices, out, K, V, row_bytes, errors, stream);
  else launch_gather<uint8_t>(weight, indices, out, K, V, row_bytes, errors, stream);
  return cudaGetLastError();
}

cudaError_t embedding_backward_scratch_bytes(int64_t K, int64_t V, int64_t D, DType dtype, size_t* bytes) {
  if (bytes == nullptr || K < 0 || V < 0 || D < 0) return cudaErrorInvalidValue;
  *bytes = 0;
  if (K == 0 || V == 0 || D == 0) return cudaSuccess;
  ScratchLayout l;
  const cudaError_t status = use_32bit_sort(K, V)
                                 ? scratch_layout<uint32_t, int32_t>(K, V, D, acc_size_of(dtype), &l)
                                 : scratch_layout<uint64_t, int64_t>(K, V, D, acc_size_of(dtype), &l);
  if (status != cudaSuccess) return status;
  *bytes = l.total;
  return cudaSuccess;
}

cudaError_t launch_embedding_backward(const void* dout, const int64_t* indices, void* dweight, DType dtype,
                                      int64_t K, int64_t V, int64_t D, int64_t padding_idx, void* scratch,
                                      size_t scratch_bytes, DeviceErrors* errors, cudaStream_t stream) {
  if (K < 0 || V < 0 || D < 0) return cudaErrorInvalidValue;
  if (K == 0) return cudaSuccess;
  if (indices == nullptr || errors == nullptr) return cudaErrorInvalidValue;
  if (V == 0 || D == 0) {  // nothing to add; the indices are still checked, as on the CPU
    embedding_check_indices_kernel<<<blocks_for(K), kThreads, 0, stream>>>(indices, K, V, errors);
    return cudaGetLastError();
  }
  if (dout == nullptr || dweight == nullptr) return cudaErrorInvalidValue;
  cudaError_t status = cudaErrorInvalidValue;  // stays so for a non-floating dtype
  dispatch_floating_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(dout);
    T* dw = static_cast<T*>(dweight);
    status = use_32bit_sort(K, V)
                 ? embedding_backward_typed<T, uint32_t, int32_t>(g, indices, dw, K, V, D, padding_idx, scratch,
                                                                  scratch_bytes, errors, stream)
                 : embedding_backward_typed<T, uint64_t, int64_t>(g, indices, dw, K, V, D, padding_idx, scratch,
                                                                  scratch_bytes, errors, stream);
  });
  return status;
}

}  // namespace dp::cuda

// Launchers for the CUDA kernels in optim.cu: the fused optimiser updates (SGD, AdamW, LAMB's
// direction, LARS), the multi-tensor squared norms, and two tiny kernels for a device-resident
// optimiser step (LARS trust ratios, the gradient-clipping coefficient) that keep the norms on
// the GPU instead of reading them back on the host (conventions in kernel_types.h).
//
// Every update launcher takes contiguous flat buffers of `numel` elements of one dtype, float32
// or float64 (other dtypes: cudaErrorInvalidValue, nothing queued), and scalars already computed
// on the host exactly as the CPU backend computes them (runtime/backend/cpu/optim.cpp), in double;
// the launcher casts each to the element type once, as the CPU does. The 16-byte vector path is
// taken when every buffer the kernel touches is 16-byte aligned, else a plain element loop (same
// results: both compute each element with the same operations).
//
// Every update is one multi-tensor kernel (PyTorch's foreach/apex's multi_tensor_apply): a table
// of up to kMultiTensorChunk tensors passed as a kernel parameter, one block per tile of a tensor.
// An optimiser step over ResNet-50's 161 parameters is then a handful of launches instead of
// 161 small ones, each leaving most of the GPU idle at its tail. A single-tensor launcher is the
// multi-tensor one with a table of one.
//
// NOTE [ Optimiser rounding ]
// The kernels round exactly as the CPU loops do when GCC compiles them for x86-64-v4 (FMA
// available, -ffp-contract=fast, the default for C++): GCC fuses a product into an FMA when the
// product's only use is an add or subtract, taking the first such product of a sum, e.g.
// b1·m + (1−b1)·g becomes fma(b1, m, (1−b1)·g). optim.cu writes every operation with explicit
// round-to-nearest intrinsics (__fmul_rn, __fadd_rn, __fma_rn, ...) so nvcc cannot contract
// differently; on the reference build the CUDA and CPU updates are then bit-identical (checked
// on the host against the same loops compiled with the project's flags). A CPU compiled without
// contraction differs by an ulp or so per operation.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/backend/cuda/kernel_types.h"
#include "runtime/core/dtype.h"

namespace dp::cuda {

// ---- Fused updates ----------------------------------------------------------------------------

// NOTE [ Device-resident optimiser step ] (backend.h, StepControl): device pointers an update
// reads once per thread instead of host scalars; each may be null (the host value applies).
//   found_inf   float32: nonzero → the kernel writes nothing;
//   lr          float64: the learning rate is *lr · lr_scale (rounded in double, as the host's
//               set_lr) and the scalars derived from it are recomputed on the device;
//   step_count  int64: updates applied before this one (Adam: step = count + 1; SGD: the first
//               step when 0, the momentum buffer then being initialised memory).
struct DeviceControl {
  const float* found_inf = nullptr;
  const double* lr = nullptr;
  double lr_scale = 1;
  const int64_t* step_count = nullptr;
};

// PyTorch SGD (backend.h, sgd_update). `momentum_buf` is unused (may be null) when momentum == 0;
// with first_step it is written but not read (it may hold uninitialised memory).
struct SgdScalars {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false, first_step = false;  // first_step ignored when control.step_count is set
  DeviceControl control;
};
cudaError_t launch_sgd_update(void* param, const void* grad, void* momentum_buf, DType dtype, int64_t numel,
                              const SgdScalars& s, cudaStream_t stream);

// The scalars of an Adam-family update, computed in double on the host as the CPU backend's
// AdamConstants (bc_k = 1 − beta_k^step). The launcher casts each to the element type.
struct AdamScalars {
  double beta1 = 0, one_minus_beta1 = 0, beta2 = 0, one_minus_beta2 = 0, eps = 0;
  double inv_divisor = 1;  // 1 / grad_divisor (adamw)
  double divisor = 1;      // grad_divisor (lamb divides by it)
  bool divide = false;     // adamw: grad_divisor != 1 (else the gradient is used as is)
  double step_size = 0;    // lr / bc1 (adamw)
  double bc1 = 1;          // lamb
  double bc2 = 1;          // lamb
  double bc2_sqrt = 1;     // √bc2 (adamw)
  double weight_decay = 0; // lamb: update += wd·p
  double lr_wd = 0;        // lr·wd (adamw: p − (lr·wd)·p)
  // With control.lr or control.step_count the kernel recomputes step_size, bc1, bc2, bc2_sqrt and
  // lr_wd on the device from these (the host values of lr and step, used for what is not given).
  double lr = 0;
  int64_t step = 1;
  DeviceControl control;
  // LAMB's global clipping decided on the device (backend.h, AdamParams::grad_norm): when not
  // null, the kernel's divisor is *grad_norm / max_grad_norm when that norm exceeds
  // max_grad_norm, else 1, in double, instead of `divisor`.
  const double* grad_norm = nullptr;
  double max_grad_norm = 0;
};

// torch.optim.AdamW: param, exp_avg, exp_avg_sq updated in place; grad read.
cudaError_t launch_adamw_update(void* param, const void* grad, void* exp_avg, void* exp_avg_sq, DType dtype,
                                int64_t numel, const AdamScalars& s, cudaStream_t stream);

// LAMB's first stage: exp_avg, exp_avg_sq updated, update written (not read), param read.
cudaError_t launch_lamb_direction(const void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                                  void* update, DType dtype, int64_t numel, const AdamScalars& s,
                                  cudaStream_t stream);

// LAMB's second stage (backend.h, lamb_update): param −= T(lr·trust)·update as one fused
// multiply-add per element, the trust from `device_trust` when not null (as LarsScalars), lr and
// found_inf from the control.
struct LambUpdateScalars {
  double lr = 0;
  double trust = 1;
  const double* device_trust = nullptr;
  DeviceControl control;  // step_count unused
};
cudaError_t launch_lamb_update(void* param, const void* update, DType dtype, int64_t numel,
                               const LambUpdateScalars& s, cudaStream_t stream);

// LARS with the trust ratio given (backend.h, lars_update). The ratio is `trust` or, when
// `device_trust` is not null, the float64 it points to in device memory (one element, e.g. an
// entry of launch_trust_ratios' output: the update then needs no host round trip). Either way the
// kernel uses T(trust) and T(lr·trust) with lr·trust rounded in double, as the CPU does.
struct LarsScalars {
  double lr = 0, momentum = 0, weight_decay = 0;
  double trust = 1;
  const double* device_trust = nullptr;
  bool lr_outside_momentum = false;
  DeviceControl control;  // step_count unused
};
cudaError_t launch_lars_update(void* param, const void* grad, void* momentum_buf, DType dtype, int64_t numel,
                               const LarsScalars& s, cudaStream_t stream);

// ---- Multi-tensor updates --------------------------------------------------------------------

// One tensor of a multi-tensor update: its flat buffers in the order the single-tensor launcher
// takes them (sgd: param, grad, momentum_buf; adamw: param, grad, exp_avg, exp_avg_sq;
// lamb_direction: param, grad, exp_avg, exp_avg_sq, update; lamb_update: param, update; lars:
// param, grad, momentum_buf; unused slots null), its numel, and what the single launcher reads
// from its scalars but differs per tensor: the step count (replaces control.step_count) and the
// trust ratio (replaces device_trust; lamb_update and lars only).
struct MultiTensor {
  void* buffers[5] = {};
  int64_t numel = 0;
  const int64_t* step_count = nullptr;
  const double* device_trust = nullptr;
};

// Tensors per launch of a multi-tensor update (its table is a kernel parameter, under 4 KB).
inline constexpr int kMultiTensorChunk = 36;

// Each launcher updates tensors[0..count) of `dtype` exactly as count calls of the single-tensor
// launcher with the scalars `s` would, bit for bit (each element goes through the same operation;
// only the thread that computes it differs), with tensors[k].step_count / device_trust in place of
// the scalars' control.step_count / device_trust. Either every tensor has a step count or none
// (the host's step and first_step in `s` then apply to all): a mix is cudaErrorInvalidValue.
// Empty tensors are passed over; ceil(nonempty / kMultiTensorChunk) launches, each block taking
// one tile of one tensor (16-byte vectors where the tensor's buffers are aligned). `tensors` is
// host memory, read before the call returns.
cudaError_t launch_sgd_update_multi(const MultiTensor* tensors, int64_t count, DType dtype, const SgdScalars& s,
                                    cudaStream_t stream);
cudaError_t launch_adamw_update_multi(const MultiTensor* tensors, int64_t count, DType dtype,
                                      const AdamScalars& s, cudaStream_t stream);
cudaError_t launch_lamb_direction_multi(const MultiTensor* tensors, int64_t count, DType dtype,
                                        const AdamScalars& s, cudaStream_t stream);
cudaError_t launch_lamb_update_multi(const MultiTensor* tensors, int64_t count, DType dtype,
                                     const LambUpdateScalars& s, cudaStream_t stream);
cudaError_t launch_lars_update_multi(const MultiTensor* tensors, int64_t count, DType dtype,
                                     const LarsScalars& s, cudaStream_t stream);

// ---- Multi-tensor squared norms ---------------------------------------------------------------

// One tensor of a squared_norms call: contiguous, float32 or float64.
struct NormInput {
  const void* data = nullptr;
  int64_t numel = 0;
  DType dtype = DType::Float32;
};

// Elements one block of the squared-norm kernel sums (a multiple of every vector width).
inline constexpr int64_t kNormSliceElems = 8192;
// Tensors per launch of the squared-norm partials kernel (its table is a kernel parameter).
inline constexpr int kNormChunkTensors = 128;

// Bytes of device scratch launch_squared_norms needs for `inputs` (float64 partials, one per
// slice of kNormSliceElems elements, and two int64 per tensor): allocate this much, 16-byte
// aligned, and pass it in; it may be freed as soon as the launcher returns provided the free is
// ordered on `stream` (cudaFreeAsync on it, as CudaBackend::deallocate does).
size_t squared_norms_scratch_bytes(const NormInput* inputs, int64_t count);

// out[k] = Σ inputs[k]² accumulated in float64 (float64 [count], device memory); empty tensors
// give 0. Deterministic: a fixed thread→element mapping, per-slice partials, then a fixed-order
// sum per tensor (no floating atomics). ceil(count / kNormChunkTensors) launches of the partials
// kernel (its table passed by value as a __grid_constant__ parameter: no host→device copy) and one
// of the finishing kernel. `inputs` is host memory, read before the call returns.
cudaError_t launch_squared_norms(const NormInput* inputs, int64_t count, double* out, void* scratch,
                                 size_t scratch_bytes, cudaStream_t stream);

// ---- Device-resident step helpers (the lead wires these into the optimisers) ------------------

// LARS trust ratios on the device, LARS::trust_ratio (optim/lars.cpp) for each of n parameters:
//   squared_norms: float64 [2·n], pairs (‖w_i‖², ‖g_i‖²) — exactly what launch_squared_norms
//                  writes for the tensor list w_0, g_0, w_1, g_1, ... (LARS::step's to_norm).
//   weight_decay:  float64 [n] in device memory (each parameter's group weight decay), or null to
//                  use `uniform_weight_decay` for every parameter.
//   ratios:        float64 [n] out: 1 when ‖w_i‖ == 0 or ‖g_i‖ == 0, else
//                  eta·‖w‖ / (‖g‖ + wd·‖w‖ + eps) with ‖·‖ = sqrt of the squared norm, rounded
//                  as the CPU rounds it (NOTE [ Optimiser rounding ]: fma(wd, ‖w‖, ‖g‖) + eps).
// Pass ratios + i as LarsScalars::device_trust of parameter i's lars update. One launch; n == 0
// queues nothing.
cudaError_t launch_trust_ratios(const double* squared_norms, const double* weight_decay, double uniform_weight_decay,
                                int64_t n, double eta, double eps, double* ratios, cudaStream_t stream);

// Gradient clipping's coefficient on the device (backend.h, clip_coefficient):
//   squared_norms: float64 [n] (each gradient's squared norm, launch_squared_norms' output);
//   total = Σ squared_norms summed in index order in float64 (as global_norm does), norm = √total;
//   out (float64 [2]) = (norm, clip) with clip = min(1, max_norm / (norm + 1e-6)), or 1 when norm
//   is not finite; found_inf (float32 [1]) is then set to 1 (never cleared: it accumulates with
//   the loss scaler's verdict).
// Multiplying every gradient by clip (launch_scale_by) is then the clipping (a factor of 1 where
// the CPU skips it). max_norm must be > 0 (else cudaErrorInvalidValue). One launch of one thread;
// n == 0 gives norm 0 and clip 1.
cudaError_t launch_clip_coefficient(const double* squared_norms, int64_t n, double max_norm, double* out,
                                    float* found_inf, cudaStream_t stream);

// x[i] *= T(*factor) over the flat buffers xs[k].buffers[0] (xs[k].numel elements each, all of
// `dtype`, float32/float64); factor float64 in device memory (read once per thread). One launch
// per kMultiTensorChunk nonempty buffers.
cudaError_t launch_scale_by(const MultiTensor* xs, int64_t count, DType dtype, const double* factor,
                            cudaStream_t stream);

// Counters per count_steps launch (their table is a kernel parameter).
inline constexpr int kCounterChunk = 128;
// Advances counters[0..count) (int64 [1] each, device memory) by the rule `how` (backend.h,
// StepCounting: 0 IfApplied, 1 IfSkipped, 2 SkipRun, 3 Always) from found_inf (float32 [1], or
// null: read as 0). ceil(count / kCounterChunk) launches.
cudaError_t launch_count_steps(int64_t* const* counters, int64_t count, const float* found_inf, int how,
                               cudaStream_t stream);

// *out = table[min(*clock, n − 1)] (float64 table [n ≥ 1], int64 clock, float64 out; a negative
// clock reads entry 0). One thread.
cudaError_t launch_lr_lookup(const double* table, int64_t n, const int64_t* clock, double* out, cudaStream_t stream);

}  // namespace dp::cuda

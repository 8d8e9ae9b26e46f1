// 2-D convolution on the CPU through oneDNN's convolution primitives (forward_training,
// backward_data, backward_weights), float32 and — where the CPU has native bfloat16 — bfloat16.
//
// NOTE [ CPU convolution on oneDNN ]
// oneDNN (Debian's libdnnl 2.6, the library PyTorch's CPU convolutions run on) has direct
// convolution kernels for AVX-512 that work on blocked layouts (nChw16c activations,
// OIhw16i16o weights): every 16 channels of a pixel sit in one vector register, so the kernel
// needs no im2col matrix and keeps its accumulators in registers over the kernel taps. On plain
// NCHW tensors it has only its own im2col + GEMM ("gemm:jit"), no better than ours. So the
// primitives are created with format_tag::any and oneDNN picks its layouts; our NCHW tensors are
// reordered into them and the results back, per call (PyTorch/ideep does the same for NCHW
// tensors). The reorders read and write each tensor once more, yet at ResNet-18's 32×32 b32
// layer shapes (bench/conv_bench, 2 threads, best of 40 runs) the blocked path summed to 41 ms
// over all passes, plain NCHW primitives to 103 ms, im2col to 54 ms, PyTorch to 45 ms. A few
// small cases keep the im2col path (conv.cpp, NOTE [ Convolution as chunked GEMM ]) under the
// `auto` choice (auto_choice in dnnl_conv.cpp).
// DPTRAIN_DNNL_CONV_LAYOUT=plain makes the primitives use NCHW directly instead (for measuring).
//
// As in NOTE [ CPU bfloat16 GEMM ]: primitives are compiled (JIT) once per calling thread and
// everything that shapes them (geometry, dtype, bias, thread team), and each call only wraps
// pointers; the scratchpad and the buffers for blocked copies are tensors of the CPU device for the
// call's length (its caching allocator hands the blocks out again, and counts them: NOTE [ CPU
// memory limit ] in cpu_backend.h); the primitive runs on `threads` OpenMP threads. bfloat16 keeps float32 accumulation:
// oneDNN sums in float32 and rounds once into the bfloat16 output or gradient.
// float64 (oneDNN has none), other dtypes and what oneDNN refuses stay on the im2col path.
//
// Which path runs is the CpuBackend's (its constructor's `conv` argument; by default
// DPTRAIN_CPU_CONV=auto | im2col | onednn, read when the backend is made, auto when unset: a
// switch for measuring, as tests and benchmarks pass the path explicitly). Under `onednn` a
// geometry oneDNN cannot do throws; under `auto` it falls back to im2col.
#pragma once

#include <cstdint>

#include "runtime/backend/backend.h"

namespace dp::cpu {

enum class ConvPath : uint8_t { Auto, Im2col, Dnnl };

// DPTRAIN_CPU_CONV's path (Auto when unset); a dp::Error for another value.
ConvPath conv_path_from_environment();

// Each returns false when the call is left to the im2col path (dtype, geometry, choice above);
// true when oneDNN has computed the result. Throws dp::Error naming the op and shapes when
// oneDNN fails.
bool dnnl_conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, const Conv2dParams& p,
                         int threads, ConvPath path);
// With accumulate, dx += the gradient (false under `auto` where oneDNN cannot add it).
bool dnnl_conv2d_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx, const Conv2dParams& p,
                                bool accumulate, int threads, ConvPath path);
bool dnnl_conv2d_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& dbias,
                                 const Conv2dParams& p, int threads, ConvPath path);

}  // namespace dp::cpu

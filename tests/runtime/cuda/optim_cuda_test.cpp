// Focused GPU tests of the CUDA optimiser kernels (runtime/backend/cuda/optim.{cpp,cu}): the
// vector path and its scalar tail, misaligned views that force the scalar path, sizes past a block
// and a squared-norm slice, first_step/nesterov, the multi-tensor squared norms across chunks
// (empty tensors, mixed dtypes, determinism), and the device-resident helpers (trust ratios,
// clipping coefficient). Each case runs the same op on the CPU backend and compares. Every test
// skips when no GPU is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "common/gpu_test.h"
#include "runtime/core/runtime.h"
#include "runtime/ops/creation.h"
#ifdef DPTRAIN_HAVE_CUDA
#include "runtime/backend/cuda/cuda_backend.h"
// The launcher tests need the CUDA runtime headers, which the test programs may not have on their
// include path; without them those tests are compiled out (the backend entry points still run).
#if __has_include(<cuda_runtime_api.h>)
#include "runtime/backend/cuda/optim_kernels.h"
#define DP_OPTIM_TEST_LAUNCHERS 1
#endif
#endif

namespace dp {
namespace {

#ifdef DPTRAIN_HAVE_CUDA

constexpr int64_t kSizes[] = {1, 3, 4097, 1000003};
constexpr DType kDtypes[] = {kFloat32, kFloat64};

// Deterministic values in [-1, 1) (or [0, 1) when positive), from a 64-bit LCG.
std::vector<double> values(int64_t n, uint64_t seed, bool positive) {
  std::vector<double> out(static_cast<size_t>(n));
  uint64_t state = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (double& v : out) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(state >> 11) * 0x1.0p-53;  // [0, 1)
    v = positive ? u : 2 * u - 1;
  }
  return out;
}

// One flat operand: the same values on both devices, as the view [offset, offset + n) of a base
// of offset + n elements (offset 1 makes the view miss 16-byte alignment for both dtypes).
struct Buffer {
  Tensor cpu_base, gpu_base, cpu, gpu;
};

class OptimCudaTest : public testing::GpuTest {
 protected:
  cuda::CudaBackend& gpu_backend() { return static_cast<cuda::CudaBackend&>(gpu_.backend()); }
  Backend& cpu_backend() { return cpu_.backend(); }

  Buffer buffer(int64_t n, int64_t offset, DType dtype, uint64_t seed, bool positive = false) {
    Buffer b;
    b.cpu_base = from_vector(values(n + offset, seed, positive), {n + offset}, cpu_).to(dtype);
    b.gpu_base = b.cpu_base.to(gpu_);
    b.cpu = b.cpu_base.narrow(0, offset, n);
    b.gpu = b.gpu_base.narrow(0, offset, n);
    return b;
  }

  // Every element of the GPU base (the view and what lies outside it) within tol·(|cpu| + 1) of
  // the CPU base.
  void expect_close(const std::string& what, const Buffer& b, double tol) {
    const std::vector<double> got = b.gpu_base.to(cpu_).to(kFloat64).to_vector<double>();
    const std::vector<double> want = b.cpu_base.to(kFloat64).to_vector<double>();
    ASSERT_EQ(got.size(), want.size()) << what;
    int64_t bad = 0, first = -1;
    for (size_t i = 0; i < got.size(); ++i) {
      const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
      if (!both_nan && !(std::fabs(got[i] - want[i]) <= tol * (std::fabs(want[i]) + 1))) {
        if (bad++ == 0) first = static_cast<int64_t>(i);
      }
    }
    EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements differ; first at " << first
                      << ": cuda " << (first >= 0 ? got[first] : 0.0) << ", cpu " << (first >= 0 ? want[first] : 0.0);
  }

  // Raw bytes of the GPU and CPU bases are identical.
  void expect_bit_identical(const std::string& what, const Buffer& b) {
    const Tensor got = b.gpu_base.to(cpu_);
    ASSERT_EQ(got.nbytes(), b.cpu_base.nbytes()) << what;
    EXPECT_EQ(std::memcmp(got.raw_data(), b.cpu_base.raw_data(), got.nbytes()), 0)
        << what << ": not bit-identical to the CPU backend (see NOTE [ Optimiser rounding ])";
  }

  static double tol_for(DType dtype) { return dtype == kFloat32 ? 2e-5 : 1e-12; }

  static std::string label(const char* op, DType dtype, int64_t n, int64_t offset) {
    return std::string(op) + " " + dtype_name(dtype) + " n=" + std::to_string(n) + " offset=" + std::to_string(offset);
  }
};

// ---- SGD ----------------------------------------------------------------------------------------

TEST_F(OptimCudaTest, SgdMatchesCpuForEveryVariantSizeAndAlignment) {
  struct Variant {
    double momentum, dampening;
    bool nesterov;
  };
  const Variant variants[] = {{0.0, 0.0, false}, {0.9, 0.1, false}, {0.9, 0.0, true}};
  for (DType dtype : kDtypes) {
    for (int64_t n : kSizes) {
      for (int64_t offset : {0, 1}) {
        for (const Variant& v : variants) {
          const std::string what = label("sgd", dtype, n, offset) + " momentum=" + std::to_string(v.momentum) +
                                   (v.nesterov ? " nesterov" : "");
          Buffer w = buffer(n, offset, dtype, 1), g = buffer(n, offset, dtype, 2), buf = buffer(n, offset, dtype, 3);
          // first_step must not read the buffer: poison it on both devices.
          buf.cpu.fill_(std::numeric_limits<double>::quiet_NaN());
          buf.gpu.fill_(std::numeric_limits<double>::quiet_NaN());
          for (int step = 0; step < 2; ++step) {
            SgdParams p;
            p.lr = 0.05;
            p.momentum = v.momentum;
            p.dampening = v.dampening;
            p.weight_decay = 1e-2;
            p.nesterov = v.nesterov;
            p.first_step = v.momentum != 0 && step == 0;
            const Tensor cpu_buf = v.momentum != 0 ? buf.cpu : Tensor();
            const Tensor gpu_buf = v.momentum != 0 ? buf.gpu : Tensor();
            cpu_backend().sgd_update(w.cpu, g.cpu, cpu_buf, p);
            gpu_backend().sgd_update(w.gpu, g.gpu, gpu_buf, p);
          }
          expect_close(what + " param", w, tol_for(dtype));
          expect_close(what + " grad (read only)", g, 0);
          if (v.momentum != 0) expect_close(what + " momentum_buf", buf, tol_for(dtype));
        }
      }
    }
  }
}

// One operand misaligned, the others aligned: the whole update takes the scalar path.
TEST_F(OptimCudaTest, SgdWithOneMisalignedOperandMatchesCpu) {
  for (DType dtype : kDtypes) {
    const int64_t n = 4097;
    Buffer w = buffer(n, 0, dtype, 11), g = buffer(n, 1, dtype, 12), buf = buffer(n, 0, dtype, 13);
    SgdParams p;
    p.lr = 0.1;
    p.momentum = 0.8;
    p.weight_decay = 5e-4;
    cpu_backend().sgd_update(w.cpu, g.cpu, buf.cpu, p);
    gpu_backend().sgd_update(w.gpu, g.gpu, buf.gpu, p);
    expect_close(label("sgd mixed alignment", dtype, n, 1) + " param", w, tol_for(dtype));
    expect_close(label("sgd mixed alignment", dtype, n, 1) + " buf", buf, tol_for(dtype));
  }
}

// ---- AdamW and LAMB -----------------------------------------------------------------------------

TEST_F(OptimCudaTest, AdamwMatchesCpuForEverySizeAlignmentStepAndDivisor) {
  for (DType dtype : kDtypes) {
    for (int64_t n : kSizes) {
      for (int64_t offset : {0, 1}) {
        for (double divisor : {1.0, 2.5}) {
          const std::string what = label("adamw", dtype, n, offset) + " divisor=" + std::to_string(divisor);
          Buffer w = buffer(n, offset, dtype, 21), g = buffer(n, offset, dtype, 22);
          Buffer m = buffer(n, offset, dtype, 23), v = buffer(n, offset, dtype, 24, /*positive=*/true);
          for (int64_t step : {1, 7}) {
            AdamParams p;
            p.lr = 1e-2;
            p.weight_decay = 0.05;
            p.step = step;
            p.grad_divisor = divisor;
            cpu_backend().adamw_update(w.cpu, g.cpu, m.cpu, v.cpu, p);
            gpu_backend().adamw_update(w.gpu, g.gpu, m.gpu, v.gpu, p);
          }
          expect_close(what + " param", w, tol_for(dtype));
          expect_close(what + " exp_avg", m, tol_for(dtype));
          expect_close(what + " exp_avg_sq", v, tol_for(dtype));
        }
      }
    }
  }
}

TEST_F(OptimCudaTest, LambDirectionMatchesCpuAndLeavesParamUntouched) {
  for (DType dtype : kDtypes) {
    for (int64_t n : kSizes) {
      for (int64_t offset : {0, 1}) {
        const std::string what = label("lamb_direction", dtype, n, offset);
        Buffer w = buffer(n, offset, dtype, 31), g = buffer(n, offset, dtype, 32);
        Buffer m = buffer(n, offset, dtype, 33), v = buffer(n, offset, dtype, 34, /*positive=*/true);
        Buffer u = buffer(n, offset, dtype, 35);
        // update is written, never read: poison it.
        u.cpu.fill_(std::numeric_limits<double>::quiet_NaN());
        u.gpu.fill_(std::numeric_limits<double>::quiet_NaN());
        AdamParams p;
        p.lr = 1e-3;
        p.weight_decay = 0.01;
        p.step = 3;
        p.grad_divisor = 1.75;
        cpu_backend().lamb_direction(w.cpu, g.cpu, m.cpu, v.cpu, u.cpu, p);
        gpu_backend().lamb_direction(w.gpu, g.gpu, m.gpu, v.gpu, u.gpu, p);
        expect_close(what + " param (read only)", w, 0);
        expect_close(what + " exp_avg", m, tol_for(dtype));
        expect_close(what + " exp_avg_sq", v, tol_for(dtype));
        expect_close(what + " update", u, tol_for(dtype));
      }
    }
  }
}

// ---- LARS ---------------------------------------------------------------------------------------

TEST_F(OptimCudaTest, LarsMatchesCpuInBothForms) {
  for (DType dtype : kDtypes) {
    for (int64_t n : kSizes) {
      for (int64_t offset : {0, 1}) {
        for (bool outside : {false, true}) {
          const std::string what = label("lars", dtype, n, offset) + (outside ? " lr outside" : " lr inside");
          Buffer w = buffer(n, offset, dtype, 41), g = buffer(n, offset, dtype, 42), buf = buffer(n, offset, dtype, 43);
          LarsParams p;
          p.lr = 0.3;
          p.momentum = 0.9;
          p.weight_decay = 1e-4;
          p.trust = 0.37;
          p.lr_outside_momentum = outside;
          for (int step = 0; step < 2; ++step) {
            cpu_backend().lars_update(w.cpu, g.cpu, buf.cpu, p);
            gpu_backend().lars_update(w.gpu, g.gpu, buf.gpu, p);
          }
          expect_close(what + " param", w, tol_for(dtype));
          expect_close(what + " momentum_buf", buf, tol_for(dtype));
        }
      }
    }
  }
}

// The kernels mirror the CPU loops' rounding (NOTE [ Optimiser rounding ], optim_kernels.h): on the
// reference build (GCC, x86-64-v4) they are bit-identical. A failure here with every tolerance
// test passing means the CPU build contracts differently (another compiler or flags), not a bug
// in the indexing.
TEST_F(OptimCudaTest, UpdatesAreBitIdenticalToTheReferenceCpuBuild) {
  for (DType dtype : kDtypes) {
    for (int64_t offset : {0, 1}) {
      const int64_t n = 4099;
      const std::string what = label("", dtype, n, offset);
      {
        Buffer w = buffer(n, offset, dtype, 51), g = buffer(n, offset, dtype, 52), buf = buffer(n, offset, dtype, 53);
        SgdParams p;
        p.lr = 0.05, p.momentum = 0.9, p.weight_decay = 1e-2, p.nesterov = true;
        cpu_backend().sgd_update(w.cpu, g.cpu, buf.cpu, p);
        gpu_backend().sgd_update(w.gpu, g.gpu, buf.gpu, p);
        expect_bit_identical("sgd" + what + " param", w);
        expect_bit_identical("sgd" + what + " buf", buf);
      }
      {
        Buffer w = buffer(n, offset, dtype, 54), g = buffer(n, offset, dtype, 55);
        Buffer m = buffer(n, offset, dtype, 56), v = buffer(n, offset, dtype, 57, true);
        AdamParams p;
        p.lr = 1e-2, p.weight_decay = 0.05, p.step = 5, p.grad_divisor = 3.0;
        cpu_backend().adamw_update(w.cpu, g.cpu, m.cpu, v.cpu, p);
        gpu_backend().adamw_update(w.gpu, g.gpu, m.gpu, v.gpu, p);
        expect_bit_identical("adamw" + what + " param", w);
        expect_bit_identical("adamw" + what + " exp_avg_sq", v);
        Buffer u = buffer(n, offset, dtype, 58);
        cpu_backend().lamb_direction(w.cpu, g.cpu, m.cpu, v.cpu, u.cpu, p);
        gpu_backend().lamb_direction(w.gpu, g.gpu, m.gpu, v.gpu, u.gpu, p);
        expect_bit_identical("lamb_direction" + what + " update", u);
      }
      {
        // LAMB's device step: apex's divisor from a norm on each device, then lamb_update with a
        // trust ratio read there.
        Buffer w = buffer(n, offset, dtype, 62), g = buffer(n, offset, dtype, 63);
        Buffer m = buffer(n, offset, dtype, 64), v = buffer(n, offset, dtype, 65, true), u = buffer(n, offset, dtype, 66);
        AdamParams p;
        p.lr = 1e-2, p.weight_decay = 0.01, p.step = 3, p.max_grad_norm = 1.5;
        const Tensor norm_cpu = scalar_tensor(7.25, kFloat64, cpu_), norm_gpu = norm_cpu.to(gpu_);
        p.grad_norm = norm_cpu;
        cpu_backend().lamb_direction(w.cpu, g.cpu, m.cpu, v.cpu, u.cpu, p);
        p.grad_norm = norm_gpu;
        gpu_backend().lamb_direction(w.gpu, g.gpu, m.gpu, v.gpu, u.gpu, p);
        expect_bit_identical("lamb_direction (device divisor)" + what + " update", u);
        LambUpdateParams q;
        q.lr = 0.02;
        const Tensor ratio_cpu = scalar_tensor(1.7, kFloat64, cpu_).reshape({1}), ratio_gpu = ratio_cpu.to(gpu_);
        q.trust_ratios = ratio_cpu;
        cpu_backend().lamb_update(w.cpu, u.cpu, q);
        q.trust_ratios = ratio_gpu;
        gpu_backend().lamb_update(w.gpu, u.gpu, q);
        expect_bit_identical("lamb_update" + what + " param", w);
      }
      {
        Buffer w = buffer(n, offset, dtype, 59), g = buffer(n, offset, dtype, 60), buf = buffer(n, offset, dtype, 61);
        LarsParams p;
        p.lr = 0.3, p.momentum = 0.9, p.weight_decay = 1e-4, p.trust = 0.37;
        cpu_backend().lars_update(w.cpu, g.cpu, buf.cpu, p);
        gpu_backend().lars_update(w.gpu, g.gpu, buf.gpu, p);
        expect_bit_identical("lars" + what + " param", w);
      }
    }
  }
}

TEST_F(OptimCudaTest, EmptyUpdatesQueueNothing) {
  for (DType dtype : kDtypes) {
    Tensor e = Tensor::empty({0}, dtype, gpu_);
    SgdParams sp;
    sp.momentum = 0.9;
    sp.first_step = true;
    gpu_backend().sgd_update(e, e, e, sp);
    AdamParams ap;
    gpu_backend().adamw_update(e, e, e, e, ap);
    gpu_backend().lamb_direction(e, e, e, e, e, ap);
    gpu_backend().lamb_update(e, e, LambUpdateParams{});
    gpu_backend().lars_update(e, e, e, LarsParams{});
  }
  gpu_backend().synchronize();
}

// ---- Multi-tensor updates -----------------------------------------------------------------------
//
// The *_update_multi entry points against (a) the single-tensor calls on the GPU, bit for bit —
// chunking (more than kMultiTensorChunk tensors in a run), tiling, runs split by parameter group,
// per-tensor step counts and trust ratios must not change a single bit — and (b) the CPU backend
// within the tolerance of the single-tensor tests. 90 tensors of one dtype: sizes from empty to
// several tiles, every tenth block misaligned by one element; tensors 40 and 41 form a second
// group (other lr, weight decay and lr_scale), so the runs are 40, 2 and 48 tensors long.

constexpr int kMultiCount = 90;

// One operand of a multi-tensor test: the same values on the CPU, in the GPU copy that the
// multi-tensor call updates and in the GPU copy that the single-tensor calls update.
struct Triple {
  Buffer cpu_and_multi;  // .cpu / .gpu
  Tensor single_base, single;
};

class OptimMultiCudaTest : public OptimCudaTest {
 protected:
  static int64_t size_of(int k) {
    constexpr int64_t kMultiSizes[] = {0, 1, 3, 4, 5, 4095, 4096, 4097, 8193, 20011};
    return kMultiSizes[k % std::size(kMultiSizes)];
  }
  static int64_t offset_of(int k) { return (k / 10) % 2; }
  static int group_of(int k) { return k == 40 || k == 41 ? 1 : 0; }

  // Operand `slot` of every tensor (seeded by slot and k).
  std::vector<Triple> operands(DType dtype, int slot, bool positive = false) {
    std::vector<Triple> out(kMultiCount);
    for (int k = 0; k < kMultiCount; ++k) {
      Triple& t = out[static_cast<size_t>(k)];
      t.cpu_and_multi = buffer(size_of(k), offset_of(k), dtype, 1000 * slot + k, positive);
      t.single_base = t.cpu_and_multi.cpu_base.to(gpu_);
      t.single = t.single_base.narrow(0, offset_of(k), size_of(k));
    }
    return out;
  }

  // Per-device control of a device-controlled step: found_inf, lr and one step counter per
  // tensor (k % 3 steps already taken, so first steps and bias corrections differ within a run).
  struct Control {
    Tensor found_inf, lr;
    std::vector<Tensor> counters;
  };
  Control control(const Device& device) {
    Control c;
    c.found_inf = zeros({}, kFloat32, device);
    c.lr = full({}, 0.02, kFloat64, device);
    for (int k = 0; k < kMultiCount; ++k) c.counters.push_back(full({}, k % 3, kInt64, device));
    return c;
  }
  static StepControl step_control(const Control* c, int k) {
    StepControl s;
    if (c == nullptr) return s;
    s.found_inf = c->found_inf;
    s.lr = c->lr;
    s.lr_scale = group_of(k) == 1 ? 0.5 : 1.0;
    s.step_count = c->counters[static_cast<size_t>(k)];
    return s;
  }
  void count(Backend& backend, Control* c) {
    if (c != nullptr) backend.count_steps(c->counters, c->found_inf, StepCounting::IfApplied);
  }

  // Every operand: the multi copy bit-identical to the single copy (whole bases), and within tol
  // of the CPU.
  void expect_multi_matches(const std::string& what, const std::vector<Triple>& xs, double tol) {
    for (int k = 0; k < kMultiCount; ++k) {
      const Triple& t = xs[static_cast<size_t>(k)];
      const std::string where = what + " tensor " + std::to_string(k) + " (n=" + std::to_string(size_of(k)) +
                                " offset=" + std::to_string(offset_of(k)) + ")";
      const Tensor multi = t.cpu_and_multi.gpu_base.to(cpu_), single = t.single_base.to(cpu_);
      ASSERT_EQ(multi.nbytes(), single.nbytes()) << where;
      EXPECT_EQ(std::memcmp(multi.raw_data(), single.raw_data(), multi.nbytes()), 0)
          << where << ": the multi-tensor update differs from the single-tensor one";
      expect_close(where + " vs cpu", t.cpu_and_multi, tol);
    }
  }
};

TEST_F(OptimMultiCudaTest, SgdMultiMatchesSingleBitForBitAndCpu) {
  for (DType dtype : kDtypes) {
    for (bool on_device : {false, true}) {
      for (bool nesterov : {false, true}) {
        const std::string what = std::string("sgd_update_multi ") + dtype_name(dtype) +
                                 (on_device ? " device control" : " host control") + (nesterov ? " nesterov" : "");
        std::vector<Triple> w = operands(dtype, 1), g = operands(dtype, 2), b = operands(dtype, 3);
        Control cpu_c = control(cpu_), multi_c = control(gpu_), single_c = control(gpu_);
        for (int step = 0; step < 3; ++step) {
          std::vector<SgdUpdateItem> cpu_items, multi_items;
          for (int k = 0; k < kMultiCount; ++k) {
            const size_t i = static_cast<size_t>(k);
            SgdParams p;
            p.lr = group_of(k) == 1 ? 0.01 : 0.05;
            p.weight_decay = group_of(k) == 1 ? 0.0 : 1e-2;
            p.momentum = 0.9;
            p.dampening = nesterov ? 0.0 : 0.1;
            p.nesterov = nesterov;
            p.first_step = step == 0;
            p.control = step_control(on_device ? &cpu_c : nullptr, k);
            cpu_items.push_back({w[i].cpu_and_multi.cpu, g[i].cpu_and_multi.cpu, b[i].cpu_and_multi.cpu, p});
            p.control = step_control(on_device ? &multi_c : nullptr, k);
            multi_items.push_back({w[i].cpu_and_multi.gpu, g[i].cpu_and_multi.gpu, b[i].cpu_and_multi.gpu, p});
            p.control = step_control(on_device ? &single_c : nullptr, k);
            gpu_backend().sgd_update(w[i].single, g[i].single, b[i].single, p);
          }
          cpu_backend().sgd_update_multi(cpu_items);
          gpu_backend().sgd_update_multi(multi_items);
          count(cpu_backend(), on_device ? &cpu_c : nullptr);
          count(gpu_backend(), on_device ? &multi_c : nullptr);
          count(gpu_backend(), on_device ? &single_c : nullptr);
        }
        expect_multi_matches(what + " param", w, tol_for(dtype));
        expect_multi_matches(what + " grad (read only)", g, 0);
        expect_multi_matches(what + " momentum_buf", b, tol_for(dtype));
      }
    }
  }
}

TEST_F(OptimMultiCudaTest, AdamwMultiMatchesSingleBitForBitAndCpu) {
  for (DType dtype : kDtypes) {
    for (bool on_device : {false, true}) {
      const std::string what = std::string("adamw_update_multi ") + dtype_name(dtype) +
                               (on_device ? " device control" : " host control");
      std::vector<Triple> w = operands(dtype, 1), g = operands(dtype, 2), m = operands(dtype, 3),
                          v = operands(dtype, 4, /*positive=*/true);
      Control cpu_c = control(cpu_), multi_c = control(gpu_), single_c = control(gpu_);
      for (int step = 1; step <= 3; ++step) {
        std::vector<AdamwUpdateItem> cpu_items, multi_items;
        for (int k = 0; k < kMultiCount; ++k) {
          const size_t i = static_cast<size_t>(k);
          AdamParams p;
          p.lr = group_of(k) == 1 ? 1e-3 : 1e-2;
          p.weight_decay = group_of(k) == 1 ? 0.0 : 0.05;
          p.step = step;
          p.grad_divisor = step == 2 ? 2.5 : 1.0;
          p.control = step_control(on_device ? &cpu_c : nullptr, k);
          cpu_items.push_back({w[i].cpu_and_multi.cpu, g[i].cpu_and_multi.cpu, m[i].cpu_and_multi.cpu,
                               v[i].cpu_and_multi.cpu, p});
          p.control = step_control(on_device ? &multi_c : nullptr, k);
          multi_items.push_back({w[i].cpu_and_multi.gpu, g[i].cpu_and_multi.gpu, m[i].cpu_and_multi.gpu,
                                 v[i].cpu_and_multi.gpu, p});
          p.control = step_control(on_device ? &single_c : nullptr, k);
          gpu_backend().adamw_update(w[i].single, g[i].single, m[i].single, v[i].single, p);
        }
        cpu_backend().adamw_update_multi(cpu_items);
        gpu_backend().adamw_update_multi(multi_items);
        count(cpu_backend(), on_device ? &cpu_c : nullptr);
        count(gpu_backend(), on_device ? &multi_c : nullptr);
        count(gpu_backend(), on_device ? &single_c : nullptr);
      }
      // The device computes the bias corrections with its own pow (an ulp of difference from the
      // host's at most): the device-controlled CPU comparison gets a looser tolerance.
      const double tol = on_device ? 10 * tol_for(dtype) : tol_for(dtype);
      expect_multi_matches(what + " param", w, tol);
      expect_multi_matches(what + " exp_avg", m, tol);
      expect_multi_matches(what + " exp_avg_sq", v, tol);
    }
  }
}

TEST_F(OptimMultiCudaTest, LambMultiMatchesSingleBitForBitAndCpu) {
  for (DType dtype : kDtypes) {
    for (bool on_device : {false, true}) {
      // Device control: each tensor's bias corrections from its own counter (k % 3 steps taken) and
      // the update's lr from the device (the optimiser's path in a training run); host control:
      // step 4 and the host lr.
      const std::string what =
          std::string("lamb multi ") + dtype_name(dtype) + (on_device ? " device control" : " host control");
      std::vector<Triple> w = operands(dtype, 1), g = operands(dtype, 2), m = operands(dtype, 3),
                          v = operands(dtype, 4, /*positive=*/true), u = operands(dtype, 5);
      Control cpu_c = control(cpu_), multi_c = control(gpu_), single_c = control(gpu_);
      // Global clipping decided on the device (norm 3 > max 1: divisor 3) and per-tensor trust
      // ratios, every third tensor without one (the host trust 1 applies: a mix within a run).
      const Tensor norm_cpu = full({}, 3.0, kFloat64, cpu_), norm_gpu = full({}, 3.0, kFloat64, gpu_);
      std::vector<double> ratios(kMultiCount);
      for (int k = 0; k < kMultiCount; ++k) ratios[static_cast<size_t>(k)] = 0.5 + 0.01 * k;
      const Tensor ratios_cpu = from_vector(ratios, {kMultiCount}, cpu_), ratios_gpu = ratios_cpu.to(gpu_);
      std::vector<LambDirectionItem> cpu_dir, multi_dir;
      std::vector<LambUpdateItem> cpu_upd, multi_upd;
      std::vector<LambUpdateParams> single_upd;
      for (int k = 0; k < kMultiCount; ++k) {
        const size_t i = static_cast<size_t>(k);
        AdamParams p;
        p.lr = group_of(k) == 1 ? 1e-3 : 1e-2;
        p.weight_decay = group_of(k) == 1 ? 0.0 : 0.01;
        p.step = 4;
        p.max_grad_norm = 1.0;
        p.grad_norm = norm_cpu;
        p.control = step_control(on_device ? &cpu_c : nullptr, k);
        cpu_dir.push_back({w[i].cpu_and_multi.cpu, g[i].cpu_and_multi.cpu, m[i].cpu_and_multi.cpu,
                           v[i].cpu_and_multi.cpu, u[i].cpu_and_multi.cpu, p});
        p.grad_norm = norm_gpu;
        p.control = step_control(on_device ? &multi_c : nullptr, k);
        multi_dir.push_back({w[i].cpu_and_multi.gpu, g[i].cpu_and_multi.gpu, m[i].cpu_and_multi.gpu,
                             v[i].cpu_and_multi.gpu, u[i].cpu_and_multi.gpu, p});
        p.control = step_control(on_device ? &single_c : nullptr, k);
        gpu_backend().lamb_direction(w[i].single, g[i].single, m[i].single, v[i].single, u[i].single, p);
        LambUpdateParams q;
        q.lr = p.lr;
        const bool adapted = k % 3 != 0;
        q.trust_index = k;
        q.trust_ratios = adapted ? ratios_cpu : Tensor();
        q.control = step_control(on_device ? &cpu_c : nullptr, k);
        cpu_upd.push_back({w[i].cpu_and_multi.cpu, u[i].cpu_and_multi.cpu, q});
        q.trust_ratios = adapted ? ratios_gpu : Tensor();
        q.control = step_control(on_device ? &multi_c : nullptr, k);
        multi_upd.push_back({w[i].cpu_and_multi.gpu, u[i].cpu_and_multi.gpu, q});
        q.control = step_control(on_device ? &single_c : nullptr, k);
        single_upd.push_back(q);
      }
      cpu_backend().lamb_direction_multi(cpu_dir);
      gpu_backend().lamb_direction_multi(multi_dir);
      // The second stage after every direction (the optimiser's order), on each copy.
      for (int k = 0; k < kMultiCount; ++k) {
        const size_t i = static_cast<size_t>(k);
        gpu_backend().lamb_update(w[i].single, u[i].single, single_upd[i]);
      }
      cpu_backend().lamb_update_multi(cpu_upd);
      gpu_backend().lamb_update_multi(multi_upd);
      // As for AdamW: the device's pow for the bias corrections may differ from the host's by an ulp.
      const double tol = on_device ? 10 * tol_for(dtype) : tol_for(dtype);
      expect_multi_matches(what + " param", w, tol);
      expect_multi_matches(what + " exp_avg", m, tol);
      expect_multi_matches(what + " exp_avg_sq", v, tol);
      expect_multi_matches(what + " update", u, tol);
    }
  }
}

TEST_F(OptimMultiCudaTest, LarsMultiMatchesSingleBitForBitAndCpu) {
  for (DType dtype : kDtypes) {
    for (bool outside : {false, true}) {
      const std::string what =
          std::string("lars_update_multi ") + dtype_name(dtype) + (outside ? " lr outside" : " lr inside");
      std::vector<Triple> w = operands(dtype, 1), g = operands(dtype, 2), b = operands(dtype, 3);
      std::vector<double> ratios(kMultiCount);
      for (int k = 0; k < kMultiCount; ++k) ratios[static_cast<size_t>(k)] = 0.2 + 0.005 * k;
      const Tensor ratios_cpu = from_vector(ratios, {kMultiCount}, cpu_), ratios_gpu = ratios_cpu.to(gpu_);
      Control cpu_c = control(cpu_), multi_c = control(gpu_), single_c = control(gpu_);  // lr and found_inf
      for (int step = 0; step < 2; ++step) {
        std::vector<LarsUpdateItem> cpu_items, multi_items;
        for (int k = 0; k < kMultiCount; ++k) {
          const size_t i = static_cast<size_t>(k);
          LarsParams p;
          p.lr = 0.3;
          p.momentum = 0.9;
          p.weight_decay = group_of(k) == 1 ? 0.0 : 1e-4;
          p.lr_outside_momentum = outside;
          p.trust_index = k;
          const bool adapted = k % 4 != 0;
          p.trust_ratios = adapted ? ratios_cpu : Tensor();
          p.control = step_control(&cpu_c, k);
          cpu_items.push_back({w[i].cpu_and_multi.cpu, g[i].cpu_and_multi.cpu, b[i].cpu_and_multi.cpu, p});
          p.trust_ratios = adapted ? ratios_gpu : Tensor();
          p.control = step_control(&multi_c, k);
          multi_items.push_back({w[i].cpu_and_multi.gpu, g[i].cpu_and_multi.gpu, b[i].cpu_and_multi.gpu, p});
          p.control = step_control(&single_c, k);
          gpu_backend().lars_update(w[i].single, g[i].single, b[i].single, p);
        }
        cpu_backend().lars_update_multi(cpu_items);
        gpu_backend().lars_update_multi(multi_items);
      }
      expect_multi_matches(what + " param", w, tol_for(dtype));
      expect_multi_matches(what + " momentum_buf", b, tol_for(dtype));
    }
  }
}

// found_inf set: every multi-tensor update (SGD, AdamW, LARS, LAMB's two stages) over every run
// writes nothing, and the step counters stay where they were.
TEST_F(OptimMultiCudaTest, SkippedMultiStepWritesNothing) {
  for (DType dtype : kDtypes) {
    std::vector<Triple> w = operands(dtype, 1), g = operands(dtype, 2), m = operands(dtype, 3),
                        v = operands(dtype, 4, /*positive=*/true), u = operands(dtype, 5);
    Control c = control(gpu_);
    c.found_inf.fill_(1.0);
    const Tensor norm = full({}, 3.0, kFloat64, gpu_);
    const Tensor ratios = full({kMultiCount}, 0.5, kFloat64, gpu_);
    std::vector<SgdUpdateItem> sgd;
    std::vector<AdamwUpdateItem> adamw;
    std::vector<LarsUpdateItem> lars;
    std::vector<LambDirectionItem> lamb_dir;
    std::vector<LambUpdateItem> lamb_upd;
    for (int k = 0; k < kMultiCount; ++k) {
      const size_t i = static_cast<size_t>(k);
      const Tensor& wk = w[i].cpu_and_multi.gpu;
      const Tensor& gk = g[i].cpu_and_multi.gpu;
      const Tensor& mk = m[i].cpu_and_multi.gpu;
      const Tensor& vk = v[i].cpu_and_multi.gpu;
      const Tensor& uk = u[i].cpu_and_multi.gpu;
      SgdParams sp;
      sp.lr = 0.05;
      sp.momentum = 0.9;
      sp.weight_decay = 1e-2;
      sp.control = step_control(&c, k);
      sgd.push_back({wk, gk, mk, sp});
      AdamParams ap;
      ap.lr = group_of(k) == 1 ? 1e-3 : 1e-2;
      ap.weight_decay = 0.05;
      ap.control = step_control(&c, k);
      adamw.push_back({wk, gk, mk, vk, ap});
      LarsParams lp;
      lp.lr = 0.3;
      lp.momentum = 0.9;
      lp.weight_decay = 1e-4;
      lp.trust_index = k;
      lp.trust_ratios = ratios;
      lp.control = step_control(&c, k);
      lars.push_back({wk, gk, mk, lp});
      ap.max_grad_norm = 1.0;
      ap.grad_norm = norm;
      lamb_dir.push_back({wk, gk, mk, vk, uk, ap});
      LambUpdateParams lu;
      lu.lr = 1e-2;
      lu.trust_index = k;
      lu.trust_ratios = ratios;
      lu.control = step_control(&c, k);
      lamb_upd.push_back({wk, uk, lu});
    }
    gpu_backend().sgd_update_multi(sgd);
    gpu_backend().adamw_update_multi(adamw);
    gpu_backend().lars_update_multi(lars);
    gpu_backend().lamb_direction_multi(lamb_dir);
    gpu_backend().lamb_update_multi(lamb_upd);
    count(gpu_backend(), &c);
    for (const auto* xs : {&w, &m, &v, &u})
      for (int k = 0; k < kMultiCount; ++k)
        expect_bit_identical(std::string("skipped multi-tensor updates ") + dtype_name(dtype) + " tensor " +
                                 std::to_string(k),
                             (*xs)[static_cast<size_t>(k)].cpu_and_multi);
    for (int k = 0; k < kMultiCount; ++k)
      EXPECT_EQ(c.counters[static_cast<size_t>(k)].to(cpu_).item<int64_t>(), k % 3)
          << "a skipped step advanced tensor " << k << "'s step count";
  }
}

// A bad item anywhere in the list is an error before anything is queued: the good items before it
// stay as they were.
TEST_F(OptimMultiCudaTest, BadItemFailsTheWholeCallBeforeAnyLaunch) {
  std::vector<Triple> w = operands(kFloat32, 1), g = operands(kFloat32, 2), b = operands(kFloat32, 3);
  std::vector<SgdUpdateItem> items;
  for (int k = 0; k < kMultiCount; ++k) {
    const size_t i = static_cast<size_t>(k);
    SgdParams p;
    p.lr = 0.1;
    p.momentum = 0.9;
    items.push_back({w[i].cpu_and_multi.gpu, g[i].cpu_and_multi.gpu, b[i].cpu_and_multi.gpu, p});
  }
  items.back().grad = Tensor::empty({size_of(kMultiCount - 1) + 1}, kFloat32, gpu_);  // wrong numel
  EXPECT_THROW(gpu_backend().sgd_update_multi(items), Error);
  for (int k = 0; k < kMultiCount; ++k)
    expect_bit_identical("untouched tensor " + std::to_string(k), w[static_cast<size_t>(k)].cpu_and_multi);
}

// ---- Squared norms ------------------------------------------------------------------------------

TEST_F(OptimCudaTest, SquaredNormsOf200MixedTensorsMatchCpuAndAreDeterministic) {
  const int64_t sizes[] = {0, 1, 3, 4, 5, 7, 4097, 8191, 8192, 8193, 16387, 100003};
  std::vector<Tensor> xs_cpu, xs_gpu;
  for (int k = 0; k < 200; ++k) {
    const int64_t n = k == 117 ? 1000003 : sizes[k % std::size(sizes)];
    const DType dtype = (k / 3) % 2 == 0 ? kFloat32 : kFloat64;
    const int64_t offset = k % 5 == 0 ? 1 : 0;  // every fifth a misaligned (still contiguous) view
    Buffer b = buffer(n, offset, dtype, 100 + static_cast<uint64_t>(k));
    xs_cpu.push_back(b.cpu);
    xs_gpu.push_back(b.gpu);
  }
  Tensor out_cpu = Tensor::empty({200}, kFloat64, cpu_);
  cpu_backend().squared_norms(xs_cpu, out_cpu);
  std::vector<double> runs[2];
  for (auto& run : runs) {
    Tensor out_gpu = Tensor::empty({200}, kFloat64, gpu_);
    out_gpu.fill_(std::numeric_limits<double>::quiet_NaN());  // every element must be written
    gpu_backend().squared_norms(xs_gpu, out_gpu);
    run = out_gpu.to_vector<double>();
  }
  const std::vector<double> want = out_cpu.to_vector<double>();
  for (int k = 0; k < 200; ++k) {
    EXPECT_NEAR(runs[0][k], want[k], 1e-12 * (std::fabs(want[k]) + 1e-300)) << "tensor " << k << " " << xs_cpu[k].str();
    if (xs_cpu[k].numel() == 0) {
      EXPECT_EQ(runs[0][k], 0.0) << "tensor " << k;
    }
  }
  EXPECT_EQ(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(double)), 0)
      << "two runs of squared_norms differ: the reduction is not deterministic";
}

// A chunk (128 tensors per partials launch) holding only empty tensors still writes its zeros.
TEST_F(OptimCudaTest, SquaredNormsChunkOfOnlyEmptyTensors) {
  std::vector<Tensor> xs_cpu, xs_gpu;
  for (int k = 0; k < 260; ++k) {
    const int64_t n = k < 128 ? 5 + k : 0;
    Buffer b = buffer(n, 0, k % 2 ? kFloat64 : kFloat32, 500 + static_cast<uint64_t>(k));
    xs_cpu.push_back(b.cpu);
    xs_gpu.push_back(b.gpu);
  }
  Tensor out_cpu = Tensor::empty({260}, kFloat64, cpu_);
  cpu_backend().squared_norms(xs_cpu, out_cpu);
  Tensor out_gpu = full({260}, std::numeric_limits<double>::quiet_NaN(), kFloat64, gpu_);
  gpu_backend().squared_norms(xs_gpu, out_gpu);
  const std::vector<double> got = out_gpu.to_vector<double>(), want = out_cpu.to_vector<double>();
  for (int k = 0; k < 260; ++k) EXPECT_NEAR(got[k], want[k], 1e-12 * (std::fabs(want[k]) + 1e-300)) << "tensor " << k;

  // A single empty tensor, and no tensors at all.
  Tensor one = full({1}, 7.0, kFloat64, gpu_);
  gpu_backend().squared_norms({Tensor::empty({0}, kFloat32, gpu_)}, one);
  EXPECT_EQ(one.to_vector<double>()[0], 0.0);
  gpu_backend().squared_norms({}, Tensor::empty({0}, kFloat64, gpu_));
  gpu_backend().synchronize();
}

#ifdef DP_OPTIM_TEST_LAUNCHERS

// ---- Device-resident helpers --------------------------------------------------------------------

TEST_F(OptimCudaTest, TrustRatiosFollowLarsRule) {
  // (‖w‖², ‖g‖²) pairs: both non-zero, zero weight, zero gradient, both zero, large.
  const std::vector<double> sq = {4.0, 0.25, 0.0, 1.0, 9.0, 0.0, 0.0, 0.0, 1e6, 3e-3};
  const std::vector<double> wd = {1e-4, 0.0, 5e-4, 1e-2, 1e-4};
  const int64_t n = 5;
  const double eta = 1e-3, eps = 1e-9;
  Tensor sq_gpu = from_vector(sq, {2 * n}, gpu_), wd_gpu = from_vector(wd, {n}, gpu_);
  for (bool per_parameter : {true, false}) {
    Tensor ratios = full({n}, std::numeric_limits<double>::quiet_NaN(), kFloat64, gpu_);
    ASSERT_EQ(cuda::launch_trust_ratios(sq_gpu.data<double>(), per_parameter ? wd_gpu.data<double>() : nullptr, 0.02,
                                        n, eta, eps, ratios.data<double>(), gpu_backend().stream()),
              cudaSuccess);
    const std::vector<double> got = ratios.to_vector<double>();
    for (int64_t i = 0; i < n; ++i) {
      const double w = std::sqrt(sq[2 * i]), g = std::sqrt(sq[2 * i + 1]);
      const double decay = per_parameter ? wd[i] : 0.02;
      const double want = (w == 0 || g == 0) ? 1.0 : eta * w / (g + decay * w + eps);  // LARS::trust_ratio
      EXPECT_DOUBLE_EQ(got[i], want) << "parameter " << i << (per_parameter ? "" : " (uniform weight decay)");
    }
  }
}

// lars_update reading its trust ratio from device memory matches the host-scalar form.
TEST_F(OptimCudaTest, LarsWithDeviceTrustMatchesHostTrust) {
  for (DType dtype : kDtypes) {
    for (bool outside : {false, true}) {
      const int64_t n = 4097;
      Buffer w = buffer(n, 0, dtype, 71), g = buffer(n, 0, dtype, 72), buf = buffer(n, 0, dtype, 73);
      LarsParams p;
      p.lr = 0.3, p.momentum = 0.9, p.weight_decay = 1e-4, p.trust = 0.4321, p.lr_outside_momentum = outside;
      cpu_backend().lars_update(w.cpu, g.cpu, buf.cpu, p);
      Tensor trust = full({1}, p.trust, kFloat64, gpu_);
      cuda::LarsScalars s;
      s.lr = p.lr, s.momentum = p.momentum, s.weight_decay = p.weight_decay, s.lr_outside_momentum = outside;
      s.trust = 1.0;  // ignored: device_trust wins
      s.device_trust = trust.data<double>();
      ASSERT_EQ(cuda::launch_lars_update(w.gpu.raw_data(), g.gpu.raw_data(), buf.gpu.raw_data(), dtype, n, s,
                                         gpu_backend().stream()),
                cudaSuccess);
      expect_close(label("lars device trust", dtype, n, 0) + " param", w, tol_for(dtype));
      expect_close(label("lars device trust", dtype, n, 0) + " buf", buf, tol_for(dtype));
    }
  }
}

TEST_F(OptimCudaTest, ClipCoefficientMatchesClipGradNorm) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  struct Case {
    std::vector<double> sq;
    double max_norm;
  };
  const Case cases[] = {
      {{0.25, 0.5, 0.25}, 5.0},   // norm 1 < max: clip 1
      {{9.0, 16.0, 0.0}, 1.0},    // norm 5 > max: clip 1 / (5 + 1e-6)
      {{1.0, inf}, 1.0},          // non-finite
      {{nan, 1.0}, 1.0},          // non-finite
      {{}, 1.0},                  // no gradients: norm 0
  };
  for (size_t c = 0; c < std::size(cases); ++c) {
    const Case& cs = cases[c];
    const int64_t n = static_cast<int64_t>(cs.sq.size());
    Tensor sq = n > 0 ? from_vector(cs.sq, {n}, gpu_) : Tensor::empty({0}, kFloat64, gpu_);
    Tensor out = full({2}, nan, kFloat64, gpu_);
    Tensor flag = full({1}, 0, kFloat32, gpu_);
    ASSERT_EQ(cuda::launch_clip_coefficient(n > 0 ? sq.data<double>() : nullptr, n, cs.max_norm, out.data<double>(),
                                            flag.data<float>(), gpu_backend().stream()),
              cudaSuccess);
    double total = 0;
    for (double s : cs.sq) total += s;  // global_norm's order
    const double want_norm = std::sqrt(total);
    const bool finite = std::isfinite(want_norm);
    const double coef = finite ? cs.max_norm / (want_norm + 1e-6) : 1.0;
    const double want_clip = finite && coef < 1.0 ? coef : 1.0;
    const std::vector<double> got = out.to_vector<double>();
    EXPECT_EQ(got[1], want_clip) << "case " << c;
    EXPECT_EQ(flag.to_vector<float>()[0], finite ? 0.0f : 1.0f) << "case " << c;
    if (finite) {
      EXPECT_EQ(got[0], want_norm) << "case " << c;
    } else {
      EXPECT_FALSE(std::isfinite(got[0])) << "case " << c;
    }
  }
  // The flag accumulates: a finite norm never clears a verdict already set.
  Tensor sq = from_vector(std::vector<double>{1.0}, {1}, gpu_);
  Tensor out = Tensor::empty({2}, kFloat64, gpu_);
  Tensor flag = full({1}, 1, kFloat32, gpu_);
  ASSERT_EQ(cuda::launch_clip_coefficient(sq.data<double>(), 1, 1.0, out.data<double>(), flag.data<float>(),
                                          gpu_backend().stream()),
            cudaSuccess);
  EXPECT_EQ(flag.to_vector<float>()[0], 1.0f);
}

#endif  // DP_OPTIM_TEST_LAUNCHERS

#endif  // DPTRAIN_HAVE_CUDA

}  // namespace
}  // namespace dp

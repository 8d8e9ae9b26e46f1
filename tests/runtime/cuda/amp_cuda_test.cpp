// GPU tests of the CUDA loss-scaling kernels (runtime/backend/cuda/amp.{cpp,cu}) against the CPU
// backend: unscaling bit-identical for every dtype across vector paths, misaligned views, slice
// and chunk boundaries (more tensors than one launch takes), the verdict for inf and NaN
// anywhere, and the scale update's sequence; GradScaler on the device. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/gpu_test.h"
#include "optim/grad_scaler.h"
#include "runtime/core/host_sync.h"
#include "optim/sgd.h"
#include "runtime/backend/backend.h"
#include "runtime/ops/creation.h"

namespace dp {
namespace {

class AmpCudaTest : public testing::GpuTest {
 protected:
  // n values in [-4, 4), the same on every call with the same seed.
  Tensor values(int64_t n, uint64_t seed) {
    std::vector<float> v(static_cast<size_t>(n));
    uint64_t state = seed * 6364136223846793005ull + 1442695040888963407ull;
    for (float& x : v) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      x = static_cast<float>(static_cast<double>(state >> 11) * 0x1.0p-53 * 8.0 - 4.0);
    }
    return from_vector(v, {n}, cpu_);
  }
  static bool same_bytes(const Tensor& a, const Tensor& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
  }
};

TEST_F(AmpCudaTest, UnscaleIsBitIdenticalToTheFloat32ProductForEveryDtypeAndLayout) {
  const float scale_value = 3.0f;  // an inexact reciprocal
  // 130 tensors (two launches of up to 96), sizes around vector widths and the 16384-element slice,
  // every other one a view one element in (not 16-byte aligned), empty ones included.
  const int64_t sizes[] = {1, 7, 8, 9, 0, 16383, 16384, 16385, 40000, 3};
  for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    std::vector<Tensor> bases_gpu, views_gpu, expected;
    for (int k = 0; k < 130; ++k) {
      const int64_t n = sizes[k % 10], offset = k % 2;
      const Tensor base = values(n + offset, static_cast<uint64_t>(k)).to(dtype);
      bases_gpu.push_back(base.to(gpu_));
      views_gpu.push_back(bases_gpu.back().narrow(0, offset, n));
      // Expected: the value in float32 (float64 for float64) times float32(1/3), rounded to the dtype;
      // the element before a view is untouched.
      const DType math = dtype == kFloat64 ? kFloat64 : kFloat32;
      Tensor want = base.to(math);
      Tensor view = want.narrow(0, offset, n);
      if (n > 0) {
        Tensor found = scalar_tensor(0, kFloat32, cpu_);
        cpu_.backend().amp_unscale_and_check({view}, found, scalar_tensor(scale_value, kFloat32, cpu_));
      }
      expected.push_back(want.to(dtype));
    }
    Tensor found = scalar_tensor(0, kFloat32, gpu_);
    gpu_.backend().amp_unscale_and_check(views_gpu, found, scalar_tensor(scale_value, kFloat32, gpu_));
    EXPECT_EQ(found.item<float>(), 0.0f) << dtype_name(dtype);
    for (int k = 0; k < 130; ++k)
      EXPECT_TRUE(same_bytes(bases_gpu[k].to(cpu_), expected[k])) << dtype_name(dtype) << " tensor " << k;
  }
}

TEST_F(AmpCudaTest, AnInfOrNanAnywhereSetsTheVerdict) {
  const int64_t n = 40000;
  for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    for (int64_t where : {int64_t{0}, int64_t{16383}, int64_t{16384}, n - 1}) {
      for (double bad : {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                         std::numeric_limits<double>::quiet_NaN()}) {
        std::vector<Tensor> grads;
        for (int k = 0; k < 100; ++k) grads.push_back(values(k == 97 ? n : 5, k).to(dtype).to(gpu_));
        grads[97].narrow(0, where, 1).fill_(bad);
        Tensor found = scalar_tensor(0, kFloat32, gpu_);
        gpu_.backend().amp_unscale_and_check(grads, found, scalar_tensor(65536, kFloat32, gpu_));
        EXPECT_EQ(found.item<float>(), 1.0f) << dtype_name(dtype) << " at " << where << " value " << bad;
        // Never cleared by a later clean call.
        gpu_.backend().amp_unscale_and_check({grads[0]}, found, scalar_tensor(65536, kFloat32, gpu_));
        EXPECT_EQ(found.item<float>(), 1.0f);
      }
    }
  }
}

TEST_F(AmpCudaTest, ScaleUpdateFollowsTheCpuSequence) {
  const bool overflow[] = {false, false, false, true, true, false, false, false, false, true};
  for (double init : {65536.0, std::ldexp(1.0, 127), 1e-38}) {
    Device devices[] = {cpu_, gpu_};
    std::vector<std::pair<float, int32_t>> seen[2];
    for (int d = 0; d < 2; ++d) {
      Tensor scale = scalar_tensor(init, kFloat32, devices[d]);
      Tensor tracker = scalar_tensor(0, kInt32, devices[d]);
      for (bool o : overflow) {
        Tensor found = scalar_tensor(o ? 1 : 0, kFloat32, devices[d]);
        devices[d].backend().amp_update_scale(scale, tracker, found, 2.0, 0.5, 3);
        seen[d].emplace_back(scale.item<float>(), tracker.item<int32_t>());
      }
    }
    EXPECT_EQ(seen[0], seen[1]) << "init " << init;
  }
}

TEST_F(AmpCudaTest, GradScalerOnTheDeviceSkipsAnOverflowingStep) {
  Tensor w = from_vector(std::vector<float>{1.0f, 2.0f}, {2}, gpu_).set_requires_grad(true);
  SGD sgd({w}, SgdOptions{.lr = 0.5});
  GradScalerOptions o;
  o.growth_interval = 1;
  GradScaler scaler(gpu_, o);
  w.set_grad(from_vector(std::vector<float>{65536.0f, std::numeric_limits<float>::infinity()}, {2}, gpu_));
  {
    // The skip is the kernels' decision: nothing is read on the host.
    ForbidHostSyncGuard no_sync("GradScaler::step on the GPU");
    scaler.step(sgd);
  }
  EXPECT_TRUE(scaler.step_skipped());
  scaler.update();
  EXPECT_EQ(w.to(cpu_).to_vector<float>(), (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  w.set_grad(from_vector(std::vector<float>{32768.0f, 65536.0f}, {2}, gpu_));
  scaler.step(sgd);
  EXPECT_FALSE(scaler.step_skipped());
  scaler.update();
  EXPECT_EQ(w.to(cpu_).to_vector<float>(), (std::vector<float>{0.5f, 1.0f}));
  EXPECT_EQ(scaler.get_scale(), 65536.0);
}

}  // namespace
}  // namespace dp

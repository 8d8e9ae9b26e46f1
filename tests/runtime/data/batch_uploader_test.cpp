// Batches from the loader's buffers to the training device (NOTE [ Batch upload ]).
#include <gtest/gtest.h>

#include "runtime/core/runtime.h"
#include "runtime/data/batch_uploader.h"
#include "runtime/ops/creation.h"

namespace dp {
namespace {

Batch host_batch(Device cpu, int64_t n, float first) {
  std::vector<float> pixels(static_cast<size_t>(n * 4));
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = first + static_cast<float>(i);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i) % 3;
  return Batch{{kImages, from_vector<float>(pixels, {n, 1, 2, 2}, cpu)}, {kLabels, from_vector<int64_t>(labels, {n}, cpu)}};
}

TEST(BatchUploader, CpuTrainsOnTheLoadersBuffers) {
  Runtime runtime;
  auto uploader = make_batch_uploader(runtime.cpu(), runtime.cpu());
  EXPECT_FALSE(uploader->host_allocator());
  const Batch host = host_batch(runtime.cpu(), 3, 0.f);
  const Batch out = uploader->upload(host);
  EXPECT_TRUE(out[kImages].same(host[kImages]));
  EXPECT_TRUE(out[kLabels].same(host[kLabels]));
  uploader->release_host_buffers();
}

TEST(BatchUploader, GpuCopiesThroughPinnedSlots) {
  if (Runtime::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU is visible (no driver or no device); this test needs one";
  Runtime runtime;
  Device cpu = runtime.cpu(), gpu = runtime.cuda(0);
  auto uploader = make_batch_uploader(gpu, cpu);
  HostAllocator pinned = uploader->host_allocator();
  ASSERT_TRUE(pinned);
  // Three uploads (the third reuses the first slot), then a smaller last batch (a prefix view).
  std::vector<Batch> on_device;
  for (int i = 0; i < 3; ++i) {
    const Batch src = host_batch(cpu, 4, 100.f * static_cast<float>(i));
    Batch host{{kImages, pinned(src[kImages].shape(), kFloat32)}, {kLabels, pinned(src[kLabels].shape(), kInt64)}};
    host[kImages].copy_(src[kImages]);
    host[kLabels].copy_(src[kLabels]);
    const Batch out = uploader->upload(host);
    uploader->release_host_buffers();
    EXPECT_TRUE(out[kImages].device() == gpu);
    EXPECT_EQ(out[kImages].to(cpu).to_vector<float>(), src[kImages].to_vector<float>()) << "upload " << i;
    EXPECT_EQ(out[kLabels].to(cpu).to_vector<int64_t>(), src[kLabels].to_vector<int64_t>()) << "upload " << i;
  }
  const Batch small = host_batch(cpu, 2, 7.f);
  const Batch out = uploader->upload(small);  // pageable source: still correct, just not asynchronous
  uploader->release_host_buffers();
  EXPECT_EQ(out[kImages].shape(), (Shape{2, 1, 2, 2}));
  EXPECT_EQ(out[kImages].to(cpu).to_vector<float>(), small[kImages].to_vector<float>());
}

}  // namespace
}  // namespace dp

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
  return Batch{from_vector<float>(pixels, {n, 1, 2, 2}, cpu), from_vector<int64_t>(labels, {n}, cpu)};
}

TEST(BatchUploader, CpuTrainsOnTheLoadersBuffers) {
  Runtime runtime;
  auto uploader = make_batch_uploader(runtime.cpu(), runtime.cpu());
  EXPECT_FALSE(uploader->host_allocator());
  const Batch host = host_batch(runtime.cpu(), 3, 0.f);
  const Batch out = uploader->upload(host);
  EXPECT_TRUE(out.images.same(host.images));
  EXPECT_TRUE(out.labels.same(host.labels));
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
    Batch host{pinned(src.images.shape(), kFloat32), pinned(src.labels.shape(), kInt64)};
    host.images.copy_(src.images);
    host.labels.copy_(src.labels);
    const Batch out = uploader->upload(host);
    uploader->release_host_buffers();
    EXPECT_TRUE(out.images.device() == gpu);
    EXPECT_EQ(out.images.to(cpu).to_vector<float>(), src.images.to_vector<float>()) << "upload " << i;
    EXPECT_EQ(out.labels.to(cpu).to_vector<int64_t>(), src.labels.to_vector<int64_t>()) << "upload " << i;
  }
  const Batch small = host_batch(cpu, 2, 7.f);
  const Batch out = uploader->upload(small);  // pageable source: still correct, just not asynchronous
  uploader->release_host_buffers();
  EXPECT_EQ(out.images.shape(), (Shape{2, 1, 2, 2}));
  EXPECT_EQ(out.images.to(cpu).to_vector<float>(), small.images.to_vector<float>());
}

}  // namespace
}  // namespace dp

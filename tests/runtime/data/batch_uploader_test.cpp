// Batches from the loader's buffers to the training device (NOTE [ Batch upload ]).
#include <gtest/gtest.h>

#include <utility>
#include <vector>

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

TEST(BatchUploader, GpuBatchesOfAnotherShapeReuseTheBuffers) {
  if (Runtime::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU is visible (no driver or no device); this test needs one";
  Runtime runtime;
  Device cpu = runtime.cpu(), gpu = runtime.cuda(0);
  auto uploader = make_batch_uploader(gpu, cpu);
  // Token batches: [rows, padded length] changes every step. The largest first (pre-allocation
  // uploads it into both slots), then narrower and wider-but-fewer rows: views of the buffers.
  auto tokens = [&](int64_t rows, int64_t length, int64_t first) {
    std::vector<int64_t> ids(static_cast<size_t>(rows * length));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = first + static_cast<int64_t>(i);
    return Batch{{"input_ids", from_vector<int64_t>(ids, {rows, length}, cpu)}};
  };
  std::vector<const void*> buffers;
  for (const auto& [rows, length] : std::vector<std::pair<int64_t, int64_t>>{{8, 64}, {8, 64}, {16, 24}, {3, 128}, {8, 8}}) {
    const Batch host = tokens(rows, length, rows * 1000 + length);
    const Batch out = uploader->upload(host);
    uploader->release_host_buffers();
    EXPECT_EQ(out["input_ids"].shape(), (Shape{rows, length}));
    EXPECT_TRUE(out["input_ids"].is_contiguous());
    EXPECT_EQ(out["input_ids"].to(cpu).to_vector<int64_t>(), host["input_ids"].to_vector<int64_t>()) << rows << "x" << length;
    buffers.push_back(out["input_ids"].raw_data());
  }
  // Two slots, allocated by the first two uploads and reused after.
  EXPECT_EQ(buffers[2], buffers[0]);
  EXPECT_EQ(buffers[3], buffers[1]);
  EXPECT_EQ(buffers[4], buffers[0]);
}

}  // namespace
}  // namespace dp

// DataLoader: order equals the sampler's with 0, 1 and 2 threads, buffers reused, failures
// surfacing in next(), clean shutdown mid-epoch, and (disabled by default) throughput on the
// real Fashion-MNIST.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <set>
#include <thread>

#include "runtime/autograd/grad_mode.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/data/fashion_mnist.h"
#include "runtime/data/loader.h"

namespace dp {
namespace {

// Sample i: image [1, 1, 2] with pixels (i % 256, i / 256), label i (so a batch names its samples).
ImageClassificationDataset numbered_dataset(int64_t n) {
  std::vector<uint8_t> pixels;
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < n; ++i) {
    pixels.push_back(static_cast<uint8_t>(i % 256));
    pixels.push_back(static_cast<uint8_t>(i / 256));
    labels.push_back(i);
  }
  return ImageClassificationDataset(std::move(pixels), {1, 1, 2}, std::move(labels), n, {}, "numbered");
}

// Wraps a dataset to fail on one sample, to be slow, or to record the grad mode it ran under.
class InstrumentedDataset final : public Dataset {
 public:
  explicit InstrumentedDataset(const Dataset& inner) : inner_(inner) {}
  int64_t size() const override { return inner_.size(); }
  const std::string& description() const override { return inner_.description(); }
  int64_t sample_bytes() const override { return inner_.sample_bytes(); }
  Batch allocate_batch(int64_t capacity, Device device) const override {
    return inner_.allocate_batch(capacity, device);
  }
  void fill_batch(std::span<const int64_t> indices, int64_t epoch, const Batch& out) const override {
    if (GradMode::enabled()) grad_mode_seen.store(true);
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    for (int64_t index : indices) {
      if (index == failing_sample.load()) throw Error("cannot decode sample " + std::to_string(index));
    }
    inner_.fill_batch(indices, epoch, out);
  }

  std::atomic<int64_t> failing_sample{-1};
  std::chrono::microseconds delay{0};
  mutable std::atomic<bool> grad_mode_seen{false};

 private:
  const Dataset& inner_;
};

std::unique_ptr<BatchSampler> shuffled_batches(int64_t n, int64_t batch_size, bool drop_last = false) {
  return std::make_unique<FixedSizeBatchSampler>(std::make_unique<RandomSampler>(n, 11), batch_size, drop_last);
}

std::string error_of_next(DataLoader& loader) {
  try {
    loader.next();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

class LoaderTest : public ::testing::TestWithParam<int> {
 protected:
  DataLoaderOptions options(int prefetch = 3) const { return {.num_threads = GetParam(), .prefetch = prefetch, .host_allocator = {}}; }

  CpuBackend backend{1};
  Device cpu{&backend};
};

TEST_P(LoaderTest, HostAllocatorProvidesEveryBuffer) {
  // The GPU path gives the loader pinned memory this way (runtime/data/batch_uploader.h).
  const ImageClassificationDataset data = numbered_dataset(50);
  std::vector<Tensor> allocated;
  DataLoaderOptions o = options(2);
  o.host_allocator = [&](const Shape& shape, DType dtype) {
    allocated.push_back(Tensor::empty(shape, dtype, cpu));
    return allocated.back();
  };
  DataLoader loader(data, shuffled_batches(50, 16), cpu, o);
  ASSERT_EQ(allocated.size(), 4u);  // images and labels of 2 slots
  loader.begin_epoch(0);
  int64_t seen = 0;
  while (std::optional<LoadedBatch> batch = loader.next()) {
    bool from_allocator = false;
    for (const Tensor& t : allocated) from_allocator = from_allocator || t.storage() == (*batch)[kImages].storage();
    EXPECT_TRUE(from_allocator) << "batch " << batch->index();
    seen += batch->size();
  }
  EXPECT_EQ(seen, 50);
}

TEST_P(LoaderTest, OrderEqualsSamplerOrderOverEpochs) {
  const ImageClassificationDataset data = numbered_dataset(300);
  DataLoader loader(data, shuffled_batches(300, 32), cpu, options());
  EXPECT_EQ(loader.num_batches(), 10);
  for (int64_t epoch : {0, 1, 5}) {
    const EpochPlan plan = loader.batch_sampler().plan(epoch);
    loader.begin_epoch(epoch);
    EXPECT_EQ(loader.epoch(), epoch);
    int64_t b = 0;
    while (auto batch = loader.next()) {
      ASSERT_LT(b, plan.num_batches());
      EXPECT_EQ(batch->index(), b);
      const std::span<const int64_t> expected = plan.batch(b);
      EXPECT_EQ((*batch)[kLabels].to_vector<int64_t>(), std::vector<int64_t>(expected.begin(), expected.end()));
      EXPECT_EQ((*batch)[kImages].shape(), (Shape{static_cast<int64_t>(expected.size()), 1, 1, 2}));
      const std::vector<float> images = (*batch)[kImages].to_vector<float>();
      for (size_t i = 0; i < expected.size(); ++i) {
        EXPECT_EQ(images[2 * i], data.normalized(static_cast<uint8_t>(expected[i] % 256)));
        EXPECT_EQ(images[2 * i + 1], data.normalized(static_cast<uint8_t>(expected[i] / 256)));
      }
      ++b;
    }
    EXPECT_EQ(b, 10);
    EXPECT_FALSE(loader.next().has_value());  // stays at the end
    EXPECT_GE(loader.epoch_wait_seconds(), 0.0);
  }
}

TEST_P(LoaderTest, DropLastAndTailBatch) {
  const ImageClassificationDataset data = numbered_dataset(10);
  DataLoader keep(data, shuffled_batches(10, 4), cpu, options());
  keep.begin_epoch(0);
  std::vector<int64_t> sizes;
  while (auto batch = keep.next()) sizes.push_back(batch->size());
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 2}));

  DataLoader drop(data, shuffled_batches(10, 4, true), cpu, options());
  drop.begin_epoch(0);
  sizes.clear();
  while (auto batch = drop.next()) sizes.push_back(batch->size());
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4}));
}

TEST_P(LoaderTest, ReusesItsBuffers) {
  const ImageClassificationDataset data = numbered_dataset(256);
  DataLoader loader(data, shuffled_batches(256, 8), cpu, options(3));
  std::set<const void*> buffers;
  for (int64_t epoch : {0, 1}) {
    loader.begin_epoch(epoch);
    while (auto batch = loader.next()) buffers.insert((*batch)[kImages].raw_data());
  }
  EXPECT_LE(buffers.size(), 3u);
}

TEST_P(LoaderTest, RewrittenBufferMarksOldTensorStale) {
  const ImageClassificationDataset data = numbered_dataset(64);
  DataLoader loader(data, shuffled_batches(64, 4), cpu, options(2));
  loader.begin_epoch(0);
  Tensor kept;
  uint64_t version = 0;
  {
    auto first = loader.next();
    kept = (*first)[kImages];  // a reference past the batch's lifetime, as a saved tensor would be
    version = kept.version();
  }
  for (int i = 0; i < 3; ++i) loader.next();
  EXPECT_GT(kept.version(), version);
}

TEST_P(LoaderTest, FailureSurfacesInNextWithItsMessage) {
  const ImageClassificationDataset data = numbered_dataset(40);
  InstrumentedDataset failing(data);
  DataLoader loader(failing, std::make_unique<FixedSizeBatchSampler>(std::make_unique<SequentialSampler>(40), 5, false),
                    cpu, options());
  failing.failing_sample = 17;  // in batch 3 (the fourth; the message counts from 1, as the console)
  loader.begin_epoch(2);
  for (int b = 0; b < 3; ++b) ASSERT_TRUE(loader.next().has_value());
  const std::string message = error_of_next(loader);
  EXPECT_NE(message.find("DataLoader: loading batch 4 of epoch 3 failed: cannot decode sample 17"), std::string::npos)
      << message;
  EXPECT_EQ(error_of_next(loader), message);  // the epoch stays failed

  failing.failing_sample = -1;
  loader.begin_epoch(3);  // recovers
  int batches = 0;
  while (auto batch = loader.next()) ++batches;
  EXPECT_EQ(batches, 8);
}

TEST_P(LoaderTest, HoldingEveryBufferIsAnErrorNotAHang) {
  const ImageClassificationDataset data = numbered_dataset(40);
  DataLoader loader(data, shuffled_batches(40, 4), cpu, options(2));
  loader.begin_epoch(0);
  auto first = loader.next();
  auto second = loader.next();
  const std::string message = error_of_next(loader);
  EXPECT_NE(message.find("batch 2 needs the buffer still held by batch 0"), std::string::npos) << message;
  first.reset();
  auto third = loader.next();
  ASSERT_TRUE(third.has_value());
  EXPECT_EQ(third->index(), 2);
}

TEST_P(LoaderTest, EarlyDestructionMidEpoch) {
  const ImageClassificationDataset data = numbered_dataset(512);
  InstrumentedDataset slow(data);
  slow.delay = std::chrono::microseconds(500);
  std::optional<LoadedBatch> survivor;
  {
    DataLoader loader(slow, shuffled_batches(512, 8), cpu, options(4));
    loader.begin_epoch(0);
    survivor = loader.next();
    loader.next();
  }  // threads stop mid-fill and join
  ASSERT_TRUE(survivor.has_value());
  EXPECT_EQ((*survivor)[kLabels].numel(), 8);  // still readable after the loader is gone
  survivor.reset();

  { DataLoader never_started(slow, shuffled_batches(512, 8), cpu, options()); }
  {
    DataLoader just_started(slow, shuffled_batches(512, 8), cpu, options());
    just_started.begin_epoch(0);
  }
}

TEST_P(LoaderTest, BeginEpochMidEpochRestarts) {
  const ImageClassificationDataset data = numbered_dataset(100);
  DataLoader loader(data, shuffled_batches(100, 10), cpu, options());
  loader.begin_epoch(0);
  loader.next();
  loader.next();
  loader.begin_epoch(1);
  const EpochPlan plan = loader.batch_sampler().plan(1);
  auto batch = loader.next();
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->index(), 0);
  EXPECT_EQ((*batch)[kLabels].to_vector<int64_t>(), std::vector<int64_t>(plan.batch(0).begin(), plan.batch(0).end()));
}

// A resumed run starts its epoch at a batch: the same batches from there on, none before.
TEST_P(LoaderTest, BeginEpochAtABatchHandsOutTheRestInOrder) {
  const ImageClassificationDataset data = numbered_dataset(100);
  DataLoader loader(data, shuffled_batches(100, 10), cpu, options());
  const EpochPlan plan = loader.batch_sampler().plan(3);
  loader.begin_epoch(3, 7);
  for (int64_t b = 7; b < 10; ++b) {
    auto batch = loader.next();
    ASSERT_TRUE(batch.has_value());
    EXPECT_EQ(batch->index(), b);
    EXPECT_EQ((*batch)[kLabels].to_vector<int64_t>(), std::vector<int64_t>(plan.batch(b).begin(), plan.batch(b).end()));
  }
  EXPECT_FALSE(loader.next().has_value());
  loader.begin_epoch(3, 10);  // at the end: nothing left (the epoch's evaluation is what remains)
  EXPECT_FALSE(loader.next().has_value());
  EXPECT_THROW(loader.begin_epoch(3, 11), Error);
  EXPECT_THROW(loader.begin_epoch(3, -1), Error);
}

TEST_P(LoaderTest, FillsWithoutRecordingAutograd) {
  const ImageClassificationDataset data = numbered_dataset(40);
  InstrumentedDataset probe(data);
  ASSERT_TRUE(GradMode::enabled());
  DataLoader loader(probe, shuffled_batches(40, 4), cpu, options());
  loader.begin_epoch(0);
  while (auto batch = loader.next()) EXPECT_FALSE((*batch)[kImages].requires_grad());
  EXPECT_FALSE(probe.grad_mode_seen.load());
  EXPECT_TRUE(GradMode::enabled());  // the caller's mode is untouched (num_threads = 0 fills here)
}

TEST_P(LoaderTest, ValidatesArguments) {
  const ImageClassificationDataset data = numbered_dataset(10);
  EXPECT_THROW(DataLoader(data, nullptr, cpu, options()), Error);
  EXPECT_THROW(DataLoader(data, shuffled_batches(10, 2), cpu, {.num_threads = GetParam(), .prefetch = 0, .host_allocator = {}}), Error);
  EXPECT_THROW(DataLoader(data, shuffled_batches(10, 2), Device(), options()), Error);
  DataLoader loader(data, shuffled_batches(10, 2), cpu, options());
  EXPECT_NE(error_of_next(loader).find("call begin_epoch(epoch) before the first next()"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Threads, LoaderTest, ::testing::Values(0, 1, 2),
                         [](const auto& info) { return std::to_string(info.param) + "threads"; });

// Batches per second on the real training set at batch 128, for 0, 1 and 2 threads. Run with
// --gtest_also_run_disabled_tests --gtest_filter='*LoaderThroughput*'.
TEST(LoaderThroughput, DISABLED_FashionMnistBatch128) {
  if (!std::filesystem::exists(FashionMnist::kDefaultRoot)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  CpuBackend backend{1};
  const FashionMnist train(FashionMnist::kDefaultRoot, Split::Train);
  for (int threads : {0, 1, 2}) {
    DataLoader loader(train, shuffled_batches(train.size(), 128), Device(&backend),
                      {.num_threads = threads, .prefetch = 4, .host_allocator = {}});
    const auto start = std::chrono::steady_clock::now();
    int64_t batches = 0;
    const int epochs = 5;
    for (int epoch = 0; epoch < epochs; ++epoch) {
      loader.begin_epoch(epoch);
      while (auto batch = loader.next()) ++batches;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << "[ info     ] " << threads << " loader thread(s): " << batches / seconds << " batches/s ("
              << batches * 128 / seconds / 1e6 << " M images/s) over " << epochs << " epochs\n";
  }
}

}  // namespace
}  // namespace dp

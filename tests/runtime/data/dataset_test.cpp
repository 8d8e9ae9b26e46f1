// In-memory image classification: normalisation table, batch assembly into given buffers, and
// the checks on construction and on the buffers.
#include <gtest/gtest.h>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/data/fashion_mnist.h"
#include "runtime/ops/creation.h"

namespace dp {
namespace {

class ImageDatasetTest : public ::testing::Test {
 protected:
  // n images of shape [1, 2, 3] whose pixels are 40 * image + pixel.
  static ImageClassificationDataset make(int64_t n, Normalization normalization) {
    std::vector<uint8_t> pixels;
    std::vector<int64_t> labels;
    for (int64_t i = 0; i < n; ++i) {
      for (int p = 0; p < 6; ++p) pixels.push_back(static_cast<uint8_t>(40 * i + p));
      labels.push_back(i % 3);
    }
    return ImageClassificationDataset(std::move(pixels), {1, 2, 3}, std::move(labels), 3, normalization, "toy");
  }

  CpuBackend backend{1};
  Device cpu{&backend};
};

// A batch is named tensors: kept in insertion order, replaced in place, looked up by name (an
// unknown name is an error naming what the batch holds), cut to a prefix together.
TEST_F(ImageDatasetTest, BatchHoldsNamedTensorsInOrder) {
  Batch b{{"input_ids", zeros({4, 6}, kInt64, cpu)}, {kLabels, zeros({4}, kInt64, cpu)}};
  b.set("attention_mask", ones({4, 6}, kFloat32, cpu));
  b.set("input_ids", ones({4, 6}, kInt64, cpu));  // replaced where it was
  ASSERT_EQ(b.tensors().size(), 3u);
  EXPECT_EQ(b.tensors()[0].first, "input_ids");
  EXPECT_EQ(b.tensors()[1].first, kLabels);
  EXPECT_EQ(b.tensors()[2].first, "attention_mask");
  EXPECT_EQ(b["input_ids"].to_vector<int64_t>()[0], 1);
  EXPECT_EQ(b.size(), 4);
  EXPECT_TRUE(b.contains(kLabels));
  EXPECT_FALSE(b.contains(kImages));
  try {
    (void)b[kImages];
    ADD_FAILURE() << "a missing tensor was found";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("batch has no tensor 'images' (it holds: input_ids"), std::string::npos)
        << e.what();
  }
  const Batch head = b.prefix(2);
  EXPECT_EQ(head.size(), 2);
  EXPECT_EQ(head["attention_mask"].shape(), (Shape{2, 6}));
  EXPECT_EQ(head["input_ids"].raw_data(), b["input_ids"].raw_data());  // a view, not a copy
  EXPECT_THROW(b.set("scalar", zeros({}, kFloat32, cpu)), Error);  // no batch dimension
  EXPECT_EQ(Batch{}.size(), 0);
}

TEST_F(ImageDatasetTest, NormalisationTableMatchesFormula) {
  const Normalization norm{0.2860, 0.3530};
  const ImageClassificationDataset data = make(1, norm);
  for (int v = 0; v < 256; ++v) {
    EXPECT_EQ(data.normalized(static_cast<uint8_t>(v)), static_cast<float>((v / 255.0 - norm.mean) / norm.std)) << v;
  }
  EXPECT_NEAR(data.normalized(0), -0.810198, 1e-6);
  EXPECT_NEAR(data.normalized(255), 2.022663, 1e-6);
}

TEST_F(ImageDatasetTest, FillsNormalisedBatchInGivenOrder) {
  const Normalization norm{0.5, 0.25};
  const ImageClassificationDataset data = make(6, norm);
  const Batch buffers = data.allocate_batch(4, cpu);
  EXPECT_EQ(buffers[kImages].shape(), (Shape{4, 1, 2, 3}));
  EXPECT_EQ(buffers[kLabels].shape(), (Shape{4}));
  EXPECT_EQ(buffers[kImages].dtype(), kFloat32);
  EXPECT_EQ(buffers[kLabels].dtype(), kInt64);

  const std::vector<int64_t> indices{5, 0, 2};
  const Batch batch = buffers.prefix(3);
  const void* base = buffers[kImages].raw_data();
  data.fill_batch(indices, 0, batch);
  EXPECT_EQ(batch[kImages].raw_data(), base);  // written in place
  const std::vector<float> images = batch[kImages].to_vector<float>();
  for (size_t b = 0; b < indices.size(); ++b) {
    for (int p = 0; p < 6; ++p) {
      const double pixel = 40.0 * indices[b] + p;
      EXPECT_FLOAT_EQ(images[b * 6 + p], static_cast<float>((pixel / 255.0 - 0.5) / 0.25)) << b << "," << p;
    }
  }
  EXPECT_EQ(batch[kLabels].to_vector<int64_t>(), (std::vector<int64_t>{2, 0, 2}));
}

TEST_F(ImageDatasetTest, RejectsBadIndexAndBuffers) {
  const ImageClassificationDataset data = make(4, {});
  const Batch buffers = data.allocate_batch(2, cpu);
  EXPECT_THROW(data.fill_batch(std::vector<int64_t>{0, 4}, 0, buffers), Error);
  EXPECT_THROW(data.fill_batch(std::vector<int64_t>{0}, 0, buffers), Error);  // buffers hold 2, not 1
  const Batch wrong{{kImages, Tensor::empty({2, 6}, kFloat32, cpu)}, {kLabels, buffers[kLabels]}};
  EXPECT_THROW(data.fill_batch(std::vector<int64_t>{0, 1}, 0, wrong), Error);
  try {
    data.fill_batch(std::vector<int64_t>{-1, 0}, 0, buffers);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("toy: sample index -1 is outside [0, 4)"), std::string::npos) << e.what();
  }
}

// What the ranks compare before training (check_same_data_on_every_rank): equal data, equal
// digests; one pixel, one label or one sample more, another digest.
TEST_F(ImageDatasetTest, ContentDigestSeesEveryPixelAndLabel) {
  const uint64_t digest = make(5, {}).content_digest();
  EXPECT_EQ(make(5, {0.5, 2.0}).content_digest(), digest) << "normalisation is the config's, not the data";
  EXPECT_NE(make(6, {}).content_digest(), digest);
  std::vector<uint8_t> pixels;
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < 5; ++i) {
    for (int p = 0; p < 6; ++p) pixels.push_back(static_cast<uint8_t>(40 * i + p));
    labels.push_back(i % 3);
  }
  const auto with = [&](std::vector<uint8_t> px, std::vector<int64_t> lb) {
    return ImageClassificationDataset(std::move(px), {1, 2, 3}, std::move(lb), 3, {}, "toy").content_digest();
  };
  EXPECT_EQ(with(pixels, labels), digest);
  std::vector<uint8_t> last_pixel = pixels;
  last_pixel.back() ^= 1;  // in the byte-by-byte tail of Fnv1a::words (30 bytes: 3 words + 6)
  EXPECT_NE(with(last_pixel, labels), digest);
  std::vector<uint8_t> first_pixel = pixels;
  first_pixel.front() ^= 1;
  EXPECT_NE(with(first_pixel, labels), digest);
  std::vector<int64_t> relabelled = labels;
  relabelled[2] = 0;
  EXPECT_NE(with(pixels, relabelled), digest);
}

TEST_F(ImageDatasetTest, ConstructorValidates) {
  EXPECT_THROW(ImageClassificationDataset({1, 2, 3}, {1, 1, 2}, {0, 1}, 2, {}, "short pixels"), Error);
  EXPECT_THROW(ImageClassificationDataset({1, 2}, {1, 1, 1}, {0, 2}, 2, {}, "label range"), Error);
  EXPECT_THROW(ImageClassificationDataset({1}, {1, 1, 1}, {0}, 2, {0.5, 0.0}, "zero std"), Error);
}

TEST_F(ImageDatasetTest, PrefixAndRewriteShareVersion) {
  const ImageClassificationDataset data = make(2, {});
  const Batch buffers = data.allocate_batch(2, cpu);
  const Batch head = buffers.prefix(1);
  const uint64_t before = buffers[kImages].version();
  head.mark_rewritten();
  EXPECT_GT(buffers[kImages].version(), before);
}

}  // namespace
}  // namespace dp

// ImageFolder: torchvision's class order and sample order, the train and eval transforms on real
// JPEG files (eval equal to torchvision + PIL), augmentation that depends only on (seed, epoch,
// index), the normalisation on the device, every kind of bad input, and SyntheticImages.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "common/reference.h"
#include "common/run_program.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/data/image_folder.h"
#include "runtime/data/jpeg.h"
#include "runtime/data/loader.h"
#include "runtime/data/sampler.h"

namespace dp {
namespace {

namespace fs = std::filesystem;

RgbImage pattern(int width, int height, int seed) {
  RgbImage image{width, height, std::vector<uint8_t>(static_cast<size_t>(width) * height * 3)};
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < 3; ++c)
        image.pixels[(static_cast<size_t>(y) * width + x) * 3 + c] =
            static_cast<uint8_t>((x * (c + 1) * 3 + y * 5 + seed * 40 + ((x / 6 + y / 6) % 2) * 60) % 256);
  return image;
}

void write_bytes(const fs::path& path, const std::vector<uint8_t>& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
}

void write_jpeg(const fs::path& path, int width, int height, int seed) {
  write_bytes(path, encode_jpeg(pattern(width, height, seed), 90));
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

ImageTransformOptions small_transform(bool train) {
  ImageTransformOptions t;
  t.train = train;
  t.crop_size = 24;
  t.eval_resize_size = 40;
  t.eval_crop_size = 32;
  t.seed = 5;
  return t;
}

class ImageFolderTest : public ::testing::Test {
 protected:
  void SetUp() override { root = testing::make_test_dir("image_folder"); }
  void TearDown() override { fs::remove_all(root); }

  std::vector<uint8_t> load(const ImageFolder& data, int64_t index, int64_t epoch) {
    const int s = data.transform().output_size();
    std::vector<uint8_t> out(static_cast<size_t>(s) * s * 3);
    data.load(index, epoch, out.data());
    return out;
  }

  CpuBackend backend{2};
  Device cpu{&backend};
  fs::path root;
};

TEST_F(ImageFolderTest, ClassesAndSamplesInTorchvisionsOrder) {
  // Python's sorted(): bytes, so upper case first and "a10" before "a2".
  for (const char* name : {"b", "a10", "B", "a2", "a"}) write_jpeg(root / "train" / name / "x.JPEG", 40, 30, 1);
  write_jpeg(root / "train" / "a" / "c.jpg", 40, 30, 2);
  write_jpeg(root / "train" / "a" / "sub" / "a.jpeg", 40, 30, 3);  // a subfolder's files come after the folder's
  std::ofstream(root / "train" / "a" / "notes.txt") << "not an image";
  const ImageFolder data((root / "train").string(), small_transform(true));
  EXPECT_EQ(data.classes(), (std::vector<std::string>{"B", "a", "a10", "a2", "b"}));
  ASSERT_EQ(data.size(), 7);
  const std::string a = (root / "train" / "a").string();
  EXPECT_EQ(data.path(1), a + "/c.jpg");
  EXPECT_EQ(data.path(2), a + "/x.JPEG");
  EXPECT_EQ(data.path(3), a + "/sub/a.jpeg");
  const std::vector<int64_t> labels = {0, 1, 1, 1, 2, 3, 4};
  for (int64_t i = 0; i < data.size(); ++i) EXPECT_EQ(data.label(i), labels[i]) << i;
  EXPECT_NE(data.description().find("5 classes, 7 images"), std::string::npos) << data.description();
}

TEST_F(ImageFolderTest, EvalTransformEqualsTorchvisionWithPil) {
  // Resize(40) + CenterCrop(32) of a 64x48 JPEG, as torchvision computes it on PIL's decoding.
  testing::Fixture fixture("image_transforms");
  const Tensor jpeg = fixture.tensor("jpeg_rgb", cpu), expected = fixture.tensor("eval_jpeg_rgb", cpu);
  write_bytes(root / "val" / "only" / "img.JPEG",
              std::vector<uint8_t>(jpeg.data<uint8_t>(), jpeg.data<uint8_t>() + jpeg.numel()));
  ImageTransformOptions t = small_transform(false);
  t.dct_scaling = false;  // decode at full size, as PIL does
  const ImageFolder data((root / "val").string(), t);
  const std::vector<uint8_t> out = load(data, 0, 0);
  ASSERT_EQ(static_cast<int64_t>(out.size()), expected.numel());
  int worst = 0;
  for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::abs(out[i] - expected.data<uint8_t>()[i]));
  EXPECT_EQ(worst, 0);
  // DCT-domain scaling: 64x48 shrunk to 53x40 is still decoded at full size (1/2 would leave
  // 32x24), so the pixels are the same; shrunk to 26x20 (Resize(20) + CenterCrop(16)) it is
  // decoded at 1/2, whose IDCT low-pass replaces part of the bilinear filter's: the pixels move
  // by a few grey levels on this high-contrast pattern, not more.
  t.dct_scaling = true;
  EXPECT_EQ(load(ImageFolder((root / "val").string(), t), 0, 0), out);
  t.eval_resize_size = 20;
  t.eval_crop_size = 16;
  const std::vector<uint8_t> approx = load(ImageFolder((root / "val").string(), t), 0, 0);
  t.dct_scaling = false;
  const std::vector<uint8_t> exact = load(ImageFolder((root / "val").string(), t), 0, 0);
  ASSERT_EQ(approx.size(), exact.size());
  double total = 0;
  for (size_t i = 0; i < exact.size(); ++i) total += std::abs(approx[i] - exact[i]);
  EXPECT_NE(approx, exact);
  EXPECT_LT(total / static_cast<double>(exact.size()), 3.0);
}

TEST_F(ImageFolderTest, TrainAugmentationDependsOnSeedEpochAndIndexOnly) {
  for (int i = 0; i < 4; ++i) write_jpeg(root / "train" / ("c" + std::to_string(i % 2)) / (std::to_string(i) + ".jpg"), 90, 70, i);
  const ImageFolder data((root / "train").string(), small_transform(true));
  EXPECT_EQ(load(data, 2, 0), load(data, 2, 0));
  EXPECT_NE(load(data, 2, 0), load(data, 2, 1));  // another epoch, another crop
  ImageTransformOptions other_seed = small_transform(true);
  other_seed.seed = 6;
  const ImageFolder reseeded((root / "train").string(), other_seed);
  EXPECT_NE(load(data, 2, 0), load(reseeded, 2, 0));
  // Through the loader with 0, 1 and 3 threads: the same bytes in the same order.
  std::vector<std::vector<uint8_t>> seen;
  for (int threads : {0, 1, 3}) {
    DataLoaderOptions o;
    o.num_threads = threads;
    o.prefetch = 2;
    DataLoader loader(data,
                      std::make_unique<FixedSizeBatchSampler>(std::make_unique<SequentialSampler>(data.size()), 3, false),
                      cpu, o);
    loader.begin_epoch(4);
    std::vector<uint8_t> all;
    while (std::optional<LoadedBatch> b = loader.next()) {
      ASSERT_EQ((*b)[kImages].dtype(), kUInt8);
      ASSERT_EQ((*b)[kImages].shape(), (Shape{b->size(), 24, 24, 3}));
      all.insert(all.end(), (*b)[kImages].data<uint8_t>(), (*b)[kImages].data<uint8_t>() + (*b)[kImages].numel());
      const std::vector<int64_t> labels = (*b)[kLabels].to_vector<int64_t>();
      for (int64_t j = 0; j < b->size(); ++j) EXPECT_EQ(labels[j], data.label(b->index() * 3 + j));
    }
    seen.push_back(all);
  }
  EXPECT_EQ(seen[0], seen[1]);
  EXPECT_EQ(seen[0], seen[2]);
  std::vector<uint8_t> direct;
  for (int64_t i = 0; i < data.size(); ++i) {
    const std::vector<uint8_t> one = load(data, i, 4);
    direct.insert(direct.end(), one.begin(), one.end());
  }
  EXPECT_EQ(seen[0], direct);
}

TEST_F(ImageFolderTest, ModelInputIsNormalisedFloatNchw) {
  write_jpeg(root / "train" / "k" / "a.jpg", 30, 30, 0);
  ImageTransformOptions t = small_transform(true);
  t.mean = {0.5, 0.25, 0.125};
  t.std = {0.5, 0.25, 2.0};
  const ImageFolder data((root / "train").string(), t);
  Batch batch = data.allocate_batch(2, cpu);
  uint8_t* p = batch[kImages].data<uint8_t>();
  for (int64_t i = 0; i < batch[kImages].numel(); ++i) p[i] = static_cast<uint8_t>(i * 37 % 256);
  const Tensor x = data.model_input(batch[kImages]);
  ASSERT_EQ(x.dtype(), kFloat32);
  ASSERT_EQ(x.shape(), (Shape{2, 3, 24, 24}));
  const std::vector<float> v = x.contiguous().to_vector<float>();
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t y = 0; y < 24; y += 5)
        for (int64_t xx = 0; xx < 24; xx += 3) {
          const uint8_t byte = p[((n * 24 + y) * 24 + xx) * 3 + c];
          const double expected = (byte / 255.0 - t.mean[c]) / t.std[c];
          ASSERT_NEAR(v[((n * 3 + c) * 24 + y) * 24 + xx], expected, 1e-5) << n << c << y << xx;
        }
  EXPECT_THROW(data.model_input(x), Error);  // float input: not a uint8 batch
  EXPECT_TRUE(x.is_contiguous());
  // Channels-last (run.channels_last): the same values, NHWC in memory.
  const Tensor cl = data.model_input(batch[kImages], MemoryFormat::ChannelsLast);
  EXPECT_EQ(cl.suggest_memory_format(), MemoryFormat::ChannelsLast);
  EXPECT_EQ(cl.to_vector<float>(), x.to_vector<float>());
}

TEST_F(ImageFolderTest, MissingEmptyAndMismatchedFoldersAreClearErrors) {
  EXPECT_NE(error_of([&] { ImageFolder((root / "nope").string(), small_transform(true)); }).find("does not exist"),
            std::string::npos);
  fs::create_directories(root / "empty");
  EXPECT_NE(error_of([&] { ImageFolder((root / "empty").string(), small_transform(true)); }).find("no class folders"),
            std::string::npos);
  write_jpeg(root / "train" / "cat" / "1.jpg", 30, 30, 0);
  fs::create_directories(root / "train" / "dog");
  const std::string no_images = error_of([&] { ImageFolder((root / "train").string(), small_transform(true)); });
  EXPECT_NE(no_images.find("dog has no .jpg/.jpeg files"), std::string::npos) << no_images;
  write_jpeg(root / "train" / "dog" / "1.jpg", 30, 30, 0);
  write_jpeg(root / "val" / "cat" / "1.jpg", 30, 30, 0);
  write_jpeg(root / "val" / "cow" / "1.jpg", 30, 30, 0);
  const ImageFolder train((root / "train").string(), small_transform(true));
  const std::string mismatch =
      error_of([&] { ImageFolder((root / "val").string(), small_transform(false), false, train.classes()); });
  EXPECT_NE(mismatch.find("class 1 is 'cow' here but 'dog' in training"), std::string::npos) << mismatch;
}

TEST_F(ImageFolderTest, FolderLinksAreFollowedButALoopOrALinkIntoAnotherClassIsAnError) {
  write_jpeg(root / "train" / "cat" / "1.jpg", 30, 30, 0);
  write_jpeg(root / "train" / "dog" / "1.jpg", 30, 30, 1);
  write_jpeg(root / "extra" / "2.jpg", 30, 30, 2);
  const fs::path train = root / "train";
  // A link to a folder of more images is followed, as torchvision's walk does.
  fs::create_directory_symlink(root / "extra", train / "cat" / "more");
  {
    const ImageFolder data(train.string(), small_transform(false));
    ASSERT_EQ(data.size(), 3);
    EXPECT_EQ(data.label(1), 0) << data.path(1);
  }
  // A loop would be walked until the kernel's 40-link limit: each class's images many times over,
  // and the other classes' under this one.
  fs::create_directory_symlink("..", train / "cat" / "loop");
  const std::string loop = error_of([&] { ImageFolder(train.string(), small_transform(false)); });
  EXPECT_NE(loop.find("the folder " + train.string() + "/cat/loop/"), std::string::npos) << loop;
  EXPECT_NE(loop.find("symbolic link loop"), std::string::npos) << loop;
  fs::remove(train / "cat" / "loop");
  // A link into another class's folder would label the dogs as cats.
  fs::create_directory_symlink(train / "dog", train / "cat" / "dogs");
  const std::string cross = error_of([&] { ImageFolder(train.string(), small_transform(false)); });
  EXPECT_NE(cross.find("cat/dogs is " + train.string() + "/dog again"), std::string::npos) << cross;
  fs::remove(train / "cat" / "dogs");
  // Two class names for one folder.
  fs::create_directory_symlink(train / "dog", train / "hound");
  const std::string twice = error_of([&] { ImageFolder(train.string(), small_transform(false)); });
  EXPECT_NE(twice.find("hound is " + train.string() + "/dog again"), std::string::npos) << twice;
  fs::remove(train / "hound");
  EXPECT_EQ(ImageFolder(train.string(), small_transform(false)).size(), 3);
}

// The digest the ranks compare: the same layout under another root digests alike (each node has
// its own path to its copy); an image filed under another class does not.
TEST_F(ImageFolderTest, ContentDigestSeesTheLayoutBelowTheSplitFolder) {
  for (const char* node : {"a", "b"}) {
    write_jpeg(root / node / "train" / "cat" / "1.jpg", 30, 30, 0);
    write_jpeg(root / node / "train" / "cat" / "2.jpg", 30, 30, 1);
    write_jpeg(root / node / "train" / "dog" / "3.jpg", 30, 30, 2);
  }
  const auto digest = [&](const char* node) {
    return ImageFolder((root / node / "train").string(), small_transform(false)).content_digest();
  };
  EXPECT_EQ(digest("a"), digest("b"));
  fs::rename(root / "b" / "train" / "cat" / "2.jpg", root / "b" / "train" / "dog" / "2.jpg");
  EXPECT_NE(digest("a"), digest("b"));
}

// A folder the walk cannot enter is an error naming it (it was a filesystem_error from the
// iterator, reported as an unexpected error). Run as an unprivileged user in a child process:
// root reads through permissions.
TEST_F(ImageFolderTest, AnUnreadableFolderInsideAClassIsAnErrorNamingIt) {
  write_jpeg(root / "train" / "cat" / "1.jpg", 30, 30, 0);
  write_jpeg(root / "train" / "dog" / "sub" / "1.jpg", 30, 30, 1);
  write_jpeg(root / "train" / "dog" / "2.jpg", 30, 30, 2);
  fs::permissions(root / "train" / "dog" / "sub", fs::perms::none);
  const std::string train = (root / "train").string();
  EXPECT_EXIT(
      {
        if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) std::_Exit(3);
        std::fprintf(stderr, "%s\n", error_of([&] { ImageFolder(train, small_transform(false)); }).c_str());
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "cannot list .*/train/dog/sub \\(in class folder .*/train/dog\\): Permission denied");
  fs::permissions(root / "train" / "dog" / "sub", fs::perms::owner_all);
}

TEST_F(ImageFolderTest, BadFilesNameTheFileOrAreSkippedAndCounted) {
  write_jpeg(root / "train" / "a" / "0.jpg", 50, 40, 0);
  const std::vector<uint8_t> good = encode_jpeg(pattern(50, 40, 1), 90);
  write_bytes(root / "train" / "a" / "1_truncated.jpg", std::vector<uint8_t>(good.begin(), good.begin() + good.size() / 2));
  write_bytes(root / "train" / "a" / "2_png.JPEG", {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n', 0, 0, 0, 13});
  fs::create_symlink(root / "gone.jpg", root / "train" / "a" / "3_unreadable.jpg");
  write_bytes(root / "train" / "a" / "4_empty.jpg", {});
  write_jpeg(root / "train" / "b" / "5.jpg", 50, 40, 2);
  const ImageFolder strict((root / "train").string(), small_transform(true));
  ASSERT_EQ(strict.size(), 6);
  std::vector<uint8_t> out(24 * 24 * 3);
  const std::vector<std::pair<int64_t, std::string>> cases = {
      {1, "truncated"}, {2, "PNG"}, {3, "cannot open"}, {4, "empty"}};
  for (const auto& [index, reason] : cases) {
    const std::string e = error_of([&] { strict.load(index, 0, out.data()); });
    EXPECT_NE(e.find(strict.path(index)), std::string::npos) << e;
    EXPECT_NE(e.find(reason), std::string::npos) << e;
  }
  // Through a batch: the loader's error names the file too.
  Batch batch = strict.allocate_batch(2, cpu);
  const std::string e = error_of([&] { strict.fill_batch(std::vector<int64_t>{0, 2}, 0, batch); });
  EXPECT_NE(e.find("2_png.JPEG"), std::string::npos) << e;

  // skip_bad_files: each bad sample becomes the next readable one (here all become sample 5),
  // and each bad file is counted once however often it is met.
  const ImageFolder lenient((root / "train").string(), small_transform(true), /*skip_bad_files=*/true);
  Batch four = lenient.allocate_batch(4, cpu);
  lenient.fill_batch(std::vector<int64_t>{1, 2, 3, 4}, 0, four);
  EXPECT_EQ(four[kLabels].to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1, 1}));
  lenient.fill_batch(std::vector<int64_t>{4, 3, 0, 1}, 1, four);
  EXPECT_EQ(four[kLabels].to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 0, 1}));
  EXPECT_EQ(lenient.skipped_files(), 4);
  // Per epoch: each bad file met in an epoch, on the way to a replacement too (epoch 1's sample 1
  // walks past 1, 2, 3 and 4 to 5).
  EXPECT_EQ(lenient.skipped_files(0), 4);
  EXPECT_EQ(lenient.skipped_files(1), 4);
  EXPECT_EQ(lenient.skipped_files(2), 0);
  EXPECT_NE(lenient.first_skipped().find("1_truncated.jpg"), std::string::npos) << lenient.first_skipped();
}

// A JPEG whose data is damaged but decodes (bytes before its end marker) is used as decoded, as
// PIL does, and counted once however often it is loaded, with its path and libjpeg's warning.
TEST_F(ImageFolderTest, DamagedButDecodableFilesAreUsedAndCounted) {
  write_jpeg(root / "train" / "a" / "0.jpg", 50, 40, 0);
  std::vector<uint8_t> damaged = encode_jpeg(pattern(50, 40, 1), 90);
  damaged.insert(damaged.end() - 2, 16, 0x5A);  // 16 bytes before the end marker (jpeg_test.cpp)
  write_bytes(root / "train" / "a" / "1_damaged.jpg", damaged);
  write_jpeg(root / "train" / "b" / "2.jpg", 50, 40, 2);
  for (bool train : {true, false}) {
    const ImageFolder data((root / "train").string(), small_transform(train));
    load(data, 0, 0);
    EXPECT_EQ(data.files_with_decode_warnings(), 0);
    EXPECT_EQ(data.first_decode_warning(), "");
    for (int64_t epoch = 0; epoch < 3; ++epoch)
      for (int64_t i = 0; i < data.size(); ++i) load(data, i, epoch);
    EXPECT_EQ(data.files_with_decode_warnings(), 1);
    for (int64_t epoch = 0; epoch < 3; ++epoch) EXPECT_EQ(data.files_with_decode_warnings(epoch), 1);
    EXPECT_EQ(data.files_with_decode_warnings(3), 0);
    const std::string first = data.first_decode_warning();
    EXPECT_NE(first.find((root / "train" / "a" / "1_damaged.jpg").string() + ": Corrupt JPEG data: "),
              std::string::npos)
        << first;
  }
}

TEST_F(ImageFolderTest, OtherImageFormatsAreRefusedUnlessSkipping) {
  write_jpeg(root / "train" / "a" / "0.jpg", 30, 30, 0);
  write_bytes(root / "train" / "a" / "1.png", {0x89, 'P', 'N', 'G'});
  const std::string e = error_of([&] { ImageFolder((root / "train").string(), small_transform(true)); });
  EXPECT_NE(e.find("1 image file(s) are not JPEG"), std::string::npos) << e;
  EXPECT_NE(e.find("1.png"), std::string::npos) << e;
  const ImageFolder lenient((root / "train").string(), small_transform(true), true);
  EXPECT_EQ(lenient.size(), 1);
  EXPECT_EQ(lenient.ignored_files(), 1);
}

TEST(SyntheticImagesTest, DeterministicImagesAndLabelsInRange) {
  CpuBackend backend(1);
  Device cpu(&backend);
  ImageTransformOptions t;
  t.crop_size = 16;
  const SyntheticImages data(100, 7, t);
  Batch a = data.allocate_batch(5, cpu), b = data.allocate_batch(5, cpu);
  data.fill_batch(std::vector<int64_t>{0, 1, 2, 3, 99}, 0, a);
  data.fill_batch(std::vector<int64_t>{0, 1, 2, 3, 99}, 3, b);
  EXPECT_EQ(a[kImages].to_vector<uint8_t>(), b[kImages].to_vector<uint8_t>());
  EXPECT_EQ(a[kLabels].to_vector<int64_t>(), b[kLabels].to_vector<int64_t>());
  for (int64_t label : a[kLabels].to_vector<int64_t>()) EXPECT_TRUE(label >= 0 && label < 7);
  EXPECT_NE(a[kImages].narrow(0, 0, 1).to_vector<uint8_t>(), a[kImages].narrow(0, 1, 1).to_vector<uint8_t>());
  EXPECT_THROW(data.fill_batch(std::vector<int64_t>{0, 1, 2, 3, 100}, 0, a), Error);
}

}  // namespace
}  // namespace dp

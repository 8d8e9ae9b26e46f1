// IDX files (gzipped and plain) written here into a temp dir, every error the reader reports,
// Fashion-MNIST built from such files, and the real data set when Debian's package is installed.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "common/expect_error.h"
#include "runtime/data/fashion_mnist.h"
#include "runtime/data/idx_reader.h"

namespace dp {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kImagesMagic = 0x00000803;
constexpr uint32_t kLabelsMagic = 0x00000801;

std::vector<uint8_t> idx_bytes(uint32_t magic, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> bytes;
  auto put_be32 = [&](uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<uint8_t>(v >> shift));
  };
  put_be32(magic);
  for (uint32_t d : dims) put_be32(d);
  bytes.insert(bytes.end(), payload.begin(), payload.end());
  return bytes;
}

std::vector<uint8_t> iota_bytes(size_t n) {
  std::vector<uint8_t> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 3);
  return bytes;
}

void write_plain(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

void write_gz(const fs::path& path, const std::vector<uint8_t>& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr) << path;
  ASSERT_EQ(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(file), Z_OK);
}

std::vector<uint8_t> read_plain(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

using testing::error_of;

class IdxFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    dir = fs::temp_directory_path() / ("dptrain-idx-" + std::to_string(getpid()) + "-" + test->name());
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }

  // A Fashion-MNIST-shaped split under `dir`: n images 28x28 and the given labels.
  void write_split(const std::string& prefix, uint32_t num_images, const std::vector<uint8_t>& labels) {
    write_gz(dir / (prefix + "-images-idx3-ubyte.gz"),
             idx_bytes(kImagesMagic, {num_images, 28, 28}, iota_bytes(num_images * 28 * 28)));
    write_gz(dir / (prefix + "-labels-idx1-ubyte.gz"),
             idx_bytes(kLabelsMagic, {static_cast<uint32_t>(labels.size())}, labels));
  }

  fs::path dir;
};

TEST_F(IdxFilesTest, ReadsGzippedImages) {
  const std::vector<uint8_t> pixels = iota_bytes(3 * 2 * 4);
  write_gz(dir / "images.gz", idx_bytes(kImagesMagic, {3, 2, 4}, pixels));
  const IdxArray array = read_idx_ubyte((dir / "images.gz").string(), 3);
  EXPECT_EQ(array.dims, (Shape{3, 2, 4}));
  EXPECT_EQ(array.data, pixels);
}

TEST_F(IdxFilesTest, ReadsUncompressedLabels) {
  write_plain(dir / "labels", idx_bytes(kLabelsMagic, {5}, {4, 0, 9, 1, 1}));
  const IdxArray array = read_idx_ubyte((dir / "labels").string(), 1);
  EXPECT_EQ(array.dims, (Shape{5}));
  EXPECT_EQ(array.data, (std::vector<uint8_t>{4, 0, 9, 1, 1}));
}

TEST_F(IdxFilesTest, EmptyArrayIsValid) {
  write_gz(dir / "labels.gz", idx_bytes(kLabelsMagic, {0}, {}));
  const IdxArray array = read_idx_ubyte((dir / "labels.gz").string(), 1);
  EXPECT_EQ(array.dims, (Shape{0}));
  EXPECT_TRUE(array.data.empty());
}

TEST_F(IdxFilesTest, MissingFileNamesPathReasonAndHint) {
  const std::string path = (dir / "absent.gz").string();
  const std::string message = error_of([&] { read_idx_ubyte(path, 3, "install the package"); });
  EXPECT_NE(message.find("cannot open '" + path + "': No such file or directory — install the package"),
            std::string::npos)
      << message;
}

TEST_F(IdxFilesTest, RejectsFileThatIsNeitherGzipNorIdx) {
  const std::string text = "this is a text file, not a data set\n";
  write_plain(dir / "notes.gz", std::vector<uint8_t>(text.begin(), text.end()));
  const std::string message = error_of([&] { read_idx_ubyte((dir / "notes.gz").string(), 3); });
  EXPECT_NE(message.find("notes.gz': neither a gzip file"), std::string::npos) << message;
  EXPECT_NE(message.find("expected 0x00000803"), std::string::npos) << message;
}

TEST_F(IdxFilesTest, RejectsCorruptGzipStream) {
  write_gz(dir / "images.gz", idx_bytes(kImagesMagic, {64, 16, 16}, iota_bytes(64 * 16 * 16)));
  std::vector<uint8_t> gz = read_plain(dir / "images.gz");
  ASSERT_GT(gz.size(), 40u);
  for (size_t i = 12; i < gz.size() - 12; i += 5) gz[i] ^= 0x5A;  // damage the deflate data
  write_plain(dir / "images.gz", gz);
  const std::string message = error_of([&] { read_idx_ubyte((dir / "images.gz").string(), 3); });
  EXPECT_NE(message.find("images.gz': corrupt gzip stream"), std::string::npos) << message;
}

TEST_F(IdxFilesTest, RejectsTruncatedGzipStream) {
  write_gz(dir / "images.gz", idx_bytes(kImagesMagic, {64, 16, 16}, iota_bytes(64 * 16 * 16)));
  std::vector<uint8_t> gz = read_plain(dir / "images.gz");
  gz.resize(gz.size() / 2);
  write_plain(dir / "images.gz", gz);
  const std::string message = error_of([&] { read_idx_ubyte((dir / "images.gz").string(), 3); });
  EXPECT_NE(message.find("truncated payload: expected 16384 bytes (dimensions [64, 16, 16]), got "),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("gzip stream ends early"), std::string::npos) << message;
}

TEST_F(IdxFilesTest, RejectsTruncatedPayloadInBothForms) {
  const std::vector<uint8_t> short_file = idx_bytes(kImagesMagic, {4, 2, 2}, iota_bytes(10));
  write_gz(dir / "images.gz", short_file);
  write_plain(dir / "images", short_file);
  for (const char* name : {"images.gz", "images"}) {
    const std::string message = error_of([&] { read_idx_ubyte((dir / name).string(), 3); });
    EXPECT_NE(message.find(std::string(name) + "': truncated payload: expected 16 bytes (dimensions [4, 2, 2]), got 10"),
              std::string::npos)
        << message;
  }
}

// Found by tests/fuzz/fuzz_idx: a header claiming 4 GB over a few bytes of data used to be
// allocated (and zero-filled) whole before the read found it truncated.
TEST_F(IdxFilesTest, AHugeClaimOverLittleDataFailsWithoutAllocatingTheClaim) {
  const std::vector<uint8_t> bogus = idx_bytes(kImagesMagic, {100000, 200, 200}, iota_bytes(3));
  write_gz(dir / "images.gz", bogus);
  write_plain(dir / "images", bogus);
  for (const char* name : {"images.gz", "images"}) {
    struct rusage before {}, after {};
    getrusage(RUSAGE_SELF, &before);
    const std::string message = error_of([&] { read_idx_ubyte((dir / name).string(), 3); });
    getrusage(RUSAGE_SELF, &after);
    EXPECT_NE(message.find("truncated payload: expected 4000000000 bytes (dimensions [100000, 200, 200]), got 3"),
              std::string::npos)
        << message;
    EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 256 * 1024) << "peak RSS grew by " << after.ru_maxrss - before.ru_maxrss
                                                               << " KiB";
  }
}

// Found by tests/fuzz/fuzz_idx in CI: the size product was capped only after multiplying, so
// dimensions whose true product is 2^64 wrapped to 0 and a 16-byte header passed as an empty
// array claiming 2^64 images' worth of dimensions. Zero dimensions still mean an empty payload.
TEST_F(IdxFilesTest, DimensionsWhoseProductOverflows64BitsAreRefused) {
  for (const std::vector<uint32_t>& dims : std::vector<std::vector<uint32_t>>{
           {1u << 16, 1u << 17, 1u << 31}, {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, {1u << 31, 1u << 31, 4}}) {
    const std::vector<uint8_t> header = idx_bytes(kImagesMagic, dims, {});
    const std::string message = error_of([&] { parse_idx_ubyte(header, 3, "images"); });
    EXPECT_NE(message.find("more than 17179869184 bytes; the header is corrupt"), std::string::npos) << message;
  }
  const IdxArray empty = parse_idx_ubyte(idx_bytes(kImagesMagic, {0xFFFFFFFFu, 0, 0xFFFFFFFFu}, {}), 3, "images");
  EXPECT_EQ(empty.dims, (Shape{0xFFFFFFFF, 0, 0xFFFFFFFF}));
  EXPECT_TRUE(empty.data.empty());
}

TEST_F(IdxFilesTest, RejectsTruncatedHeader) {
  write_gz(dir / "images.gz", {0x00, 0x00, 0x08, 0x03, 0x00, 0x00, 0x00, 0x02, 0x00});
  const std::string message = error_of([&] { read_idx_ubyte((dir / "images.gz").string(), 3); });
  EXPECT_NE(message.find("truncated IDX header: expected 12 bytes of dimensions, got 5"), std::string::npos) << message;
}

TEST_F(IdxFilesTest, RejectsBadMagic) {
  write_gz(dir / "signed.gz", idx_bytes(0x00000903, {2, 1, 1}, {1, 2}));  // signed bytes
  write_gz(dir / "garbage.gz", idx_bytes(0x12345678, {2, 1, 1}, {1, 2}));
  for (const char* name : {"signed.gz", "garbage.gz"}) {
    const std::string message = error_of([&] { read_idx_ubyte((dir / name).string(), 3); });
    EXPECT_NE(message.find(std::string(name) + "': bad IDX magic 0x"), std::string::npos) << message;
    EXPECT_NE(message.find("(expected 0x00000803: unsigned bytes, rank 3)"), std::string::npos) << message;
  }
}

TEST_F(IdxFilesTest, RejectsWrongRank) {
  write_gz(dir / "labels.gz", idx_bytes(kLabelsMagic, {3}, {1, 2, 3}));
  const std::string message = error_of([&] { read_idx_ubyte((dir / "labels.gz").string(), 3); });
  EXPECT_NE(message.find("IDX rank 1 (magic 0x00000801) but rank 3 (magic 0x00000803) was expected"),
            std::string::npos)
      << message;
}

TEST_F(IdxFilesTest, RejectsTrailingData) {
  write_gz(dir / "labels.gz", idx_bytes(kLabelsMagic, {3}, {1, 2, 3, 4}));
  const std::string message = error_of([&] { read_idx_ubyte((dir / "labels.gz").string(), 1); });
  EXPECT_NE(message.find("data continues after the 3-byte payload"), std::string::npos) << message;
}

TEST_F(IdxFilesTest, FashionMnistFromGeneratedFiles) {
  write_split("t10k", 3, {7, 0, 9});
  const FashionMnist test_split(dir.string(), Split::Test);
  EXPECT_EQ(test_split.size(), 3);
  EXPECT_EQ(test_split.image_shape(), (Shape{1, 28, 28}));
  EXPECT_EQ(test_split.label(2), 9);
  const std::vector<uint8_t> pixels = iota_bytes(3 * 28 * 28);
  const auto second = test_split.image(1);
  EXPECT_TRUE(std::equal(second.begin(), second.end(), pixels.begin() + 28 * 28));
}

TEST_F(IdxFilesTest, FashionMnistAcceptsUncompressedFiles) {
  write_plain(dir / "train-images-idx3-ubyte", idx_bytes(kImagesMagic, {2, 28, 28}, iota_bytes(2 * 28 * 28)));
  write_plain(dir / "train-labels-idx1-ubyte", idx_bytes(kLabelsMagic, {2}, {3, 4}));
  const FashionMnist train(dir.string(), Split::Train);
  EXPECT_EQ(train.size(), 2);
  EXPECT_EQ(train.label(1), 4);
}

TEST_F(IdxFilesTest, FashionMnistMissingRootSaysWhatToInstall) {
  const std::string message = error_of([&] { FashionMnist(dir.string() + "/nowhere", Split::Train); });
  EXPECT_NE(message.find("cannot open '" + dir.string() + "/nowhere/train-images-idx3-ubyte.gz': No such file or "
                         "directory — install Debian's dataset-fashion-mnist or set data.root"),
            std::string::npos)
      << message;
}

TEST_F(IdxFilesTest, FashionMnistRejectsCountMismatch) {
  write_split("train", 3, {1, 2});
  const std::string message = error_of([&] { FashionMnist(dir.string(), Split::Train); });
  EXPECT_NE(message.find("train-images-idx3-ubyte.gz' holds 3 images but '"), std::string::npos) << message;
  EXPECT_NE(message.find("train-labels-idx1-ubyte.gz' holds 2 labels"), std::string::npos) << message;
}

TEST_F(IdxFilesTest, FashionMnistRejectsLabelOutOfRange) {
  write_split("train", 3, {1, 10, 2});
  const std::string message = error_of([&] { FashionMnist(dir.string(), Split::Train); });
  EXPECT_NE(message.find("label 10 of sample 1 is outside [0, 10)"), std::string::npos) << message;
  EXPECT_NE(message.find("train-labels-idx1-ubyte.gz"), std::string::npos) << message;
}

TEST_F(IdxFilesTest, FashionMnistRejectsWrongImageSize) {
  write_gz(dir / "train-images-idx3-ubyte.gz", idx_bytes(kImagesMagic, {1, 32, 32}, iota_bytes(32 * 32)));
  write_gz(dir / "train-labels-idx1-ubyte.gz", idx_bytes(kLabelsMagic, {1}, {0}));
  const std::string message = error_of([&] { FashionMnist(dir.string(), Split::Train); });
  EXPECT_NE(message.find("images are 32x32, Fashion-MNIST's are 28x28"), std::string::npos) << message;
}

TEST(FashionMnistSplit, ParsesNames) {
  EXPECT_EQ(split_from_name("train"), Split::Train);
  EXPECT_EQ(split_from_name("test"), Split::Test);
  EXPECT_STREQ(split_name(Split::Test), "test");
  EXPECT_NE(error_of([] { split_from_name("val"); }).find("unknown data split 'val'; expected 'train' or 'test'"),
            std::string::npos);
}

// The files Debian's dataset-fashion-mnist installs; skipped where the package is absent.
TEST(FashionMnistReal, LoadsBothSplits) {
  if (!fs::exists(FashionMnist::kDefaultRoot)) {
    GTEST_SKIP() << FashionMnist::kDefaultRoot << " not found: install Debian's dataset-fashion-mnist to run this test";
  }
  const auto start = std::chrono::steady_clock::now();
  const FashionMnist train(FashionMnist::kDefaultRoot, Split::Train);
  const double load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "[ info     ] loaded the Fashion-MNIST training set in " << load_seconds * 1e3 << " ms\n";
  const FashionMnist test(FashionMnist::kDefaultRoot, Split::Test);

  ASSERT_EQ(train.size(), 60000);
  ASSERT_EQ(test.size(), 10000);
  const std::vector<int64_t> train_head(train.labels().begin(), train.labels().begin() + 10);
  const std::vector<int64_t> test_head(test.labels().begin(), test.labels().begin() + 10);
  EXPECT_EQ(train_head, (std::vector<int64_t>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5}));
  EXPECT_EQ(test_head, (std::vector<int64_t>{9, 2, 1, 1, 6, 1, 4, 6, 5, 7}));
  // Pixel sums of the first images, from Python's gzip module on the same files.
  const auto sum_of = [](std::span<const uint8_t> image) { return std::accumulate(image.begin(), image.end(), 0); };
  EXPECT_EQ(sum_of(train.image(0)), 76247);
  EXPECT_EQ(sum_of(test.image(0)), 33456);
  std::vector<int64_t> per_class(FashionMnist::kNumClasses, 0);
  for (int64_t label : train.labels()) ++per_class[label];
  EXPECT_EQ(per_class, std::vector<int64_t>(FashionMnist::kNumClasses, 6000));  // balanced classes
}

// ---- Bytes in memory (the parser read_idx_ubyte runs; tests/fuzz/fuzz_idx) -------------------

std::vector<uint8_t> gzip_bytes(const std::vector<uint8_t>& plain) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::vector<uint8_t> out(deflateBound(&z, plain.size()));
  z.next_in = const_cast<Bytef*>(plain.data());
  z.avail_in = static_cast<uInt>(plain.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

TEST_F(IdxFilesTest, ParsingBytesInMemoryGivesWhatReadingTheFileGives) {
  const std::vector<uint8_t> plain = idx_bytes(kImagesMagic, {3, 2, 4}, iota_bytes(3 * 2 * 4));
  write_gz(dir / "images.gz", plain);
  const std::vector<uint8_t> gz = read_plain(dir / "images.gz");
  for (const std::vector<uint8_t>* bytes : {&plain, &gz}) {
    const IdxArray array = parse_idx_ubyte(*bytes, 3, "images");
    EXPECT_EQ(array.dims, (Shape{3, 2, 4}));
    EXPECT_EQ(array.data, iota_bytes(3 * 2 * 4));
  }
  // Errors name what the caller called the bytes.
  const std::vector<uint8_t> cut(plain.begin(), plain.begin() + 3);
  EXPECT_EQ(error_of([&] { parse_idx_ubyte(cut, 3, "in-memory"); }), "'in-memory': too short for an IDX header (3 bytes)");
  EXPECT_NE(error_of([&] { parse_idx_ubyte(gzip_bytes(cut), 3, "in-memory"); }).find("'in-memory': too short"),
            std::string::npos);
}

// As zlib's gzread did when the reader opened files with gzopen (and as gzip -d does): gzip
// members one after another are one stream, and what follows the last one is ignored.
TEST_F(IdxFilesTest, ConcatenatedGzipMembersAreOneStreamAndTrailingBytesAreIgnored) {
  const std::vector<uint8_t> plain = idx_bytes(kLabelsMagic, {6}, {1, 2, 3, 4, 5, 6});
  std::vector<uint8_t> two = gzip_bytes({plain.begin(), plain.begin() + 7});
  const std::vector<uint8_t> second = gzip_bytes({plain.begin() + 7, plain.end()});
  two.insert(two.end(), second.begin(), second.end());
  EXPECT_EQ(parse_idx_ubyte(two, 1, "two-members").data, (std::vector<uint8_t>{1, 2, 3, 4, 5, 6}));
  std::vector<uint8_t> trailing = gzip_bytes(plain);
  trailing.insert(trailing.end(), {'x', 'y', 0x1F});
  EXPECT_EQ(parse_idx_ubyte(trailing, 1, "trailing").data, (std::vector<uint8_t>{1, 2, 3, 4, 5, 6}));
  // A member cut short is truncation, not the end, even when only its trailer (CRC-32, length)
  // is missing; a wrong CRC is corruption.
  std::vector<uint8_t> cut = gzip_bytes(plain);
  cut.resize(cut.size() - 4);
  EXPECT_EQ(error_of([&] { parse_idx_ubyte(cut, 1, "cut"); }), "'cut': the gzip stream ends early (file truncated?)");
  std::vector<uint8_t> bad_crc = gzip_bytes(plain);
  bad_crc[bad_crc.size() - 8] ^= 1;
  EXPECT_NE(error_of([&] { parse_idx_ubyte(bad_crc, 1, "bad-crc"); }).find("'bad-crc': corrupt gzip stream (incorrect data check)"),
            std::string::npos);
}

}  // namespace
}  // namespace dp

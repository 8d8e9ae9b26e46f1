// JPEG decoding against PIL's (both on libjpeg-turbo: the same pixels), DCT-domain scaling,
// CMYK and greyscale files, the choice of scale, and the errors for what is not a good JPEG.
#include <gtest/gtest.h>

#include "common/reference.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/data/jpeg.h"

namespace dp {
namespace {

class JpegTest : public ::testing::Test {
 protected:
  std::vector<uint8_t> bytes(const std::string& name) {
    const Tensor t = fixture.tensor(name, cpu);
    return std::vector<uint8_t>(t.data<uint8_t>(), t.data<uint8_t>() + t.numel());
  }
  static int max_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
    EXPECT_EQ(a.size(), b.size());
    int worst = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
    return worst;
  }
  static std::string error_of(JpegDecoder& d, const std::vector<uint8_t>& data) {
    RgbImage image;
    try {
      d.decode(data, 8, image);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  CpuBackend backend{1};
  Device cpu{&backend};
  testing::Fixture fixture{"image_transforms"};
  JpegDecoder decoder;
};

TEST_F(JpegTest, DecodesAsPilDoes) {
  for (const std::string kind : {"rgb", "gray"}) {
    SCOPED_TRACE(kind);
    const std::vector<uint8_t> file = bytes("jpeg_" + kind);
    const JpegHeader header = decoder.read_header(file);
    EXPECT_EQ(header.width, 64);
    EXPECT_EQ(header.height, 48);
    EXPECT_FALSE(header.cmyk);
    RgbImage image;
    decoder.decode(file, 8, image);
    ASSERT_EQ(image.width, 64);
    ASSERT_EQ(image.height, 48);
    EXPECT_EQ(max_difference(image.pixels, bytes("decoded_" + kind)), 0);
  }
}

TEST_F(JpegTest, CmykIsConvertedAsPilConvertsIt) {
  const std::vector<uint8_t> file = bytes("jpeg_cmyk");
  EXPECT_TRUE(decoder.read_header(file).cmyk);
  RgbImage image;
  decoder.decode(file, 8, image);
  EXPECT_EQ(max_difference(image.pixels, bytes("decoded_cmyk")), 0);
}

TEST_F(JpegTest, DctScalingEqualsPilsDraftMode) {
  RgbImage image;
  decoder.decode(bytes("jpeg_rgb"), 4, image);  // 4/8
  ASSERT_EQ(image.width, 32);
  ASSERT_EQ(image.height, 24);
  EXPECT_EQ(max_difference(image.pixels, bytes("decoded_rgb_half")), 0);
  decoder.decode(bytes("jpeg_rgb"), 3, image);  // 3/8 of 64x48, rounded up
  EXPECT_EQ(image.width, 24);
  EXPECT_EQ(image.height, 18);
}

TEST_F(JpegTest, EncodedImagesDecodeBackClosely) {
  RgbImage original;
  decoder.decode(bytes("jpeg_rgb"), 8, original);
  RgbImage again;
  decoder.decode(encode_jpeg(original, 95, /*full_chroma=*/true), 8, again);
  ASSERT_EQ(again.pixels.size(), original.pixels.size());
  double error = 0;
  for (size_t i = 0; i < again.pixels.size(); ++i) error += std::abs(again.pixels[i] - original.pixels[i]);
  EXPECT_LT(error / static_cast<double>(again.pixels.size()), 2.0);  // quality 95: about a grey level
  EXPECT_THROW(encode_jpeg(RgbImage{2, 2, std::vector<uint8_t>(5)}, 90), Error);
  EXPECT_THROW(encode_jpeg(original, 0), Error);
}

TEST_F(JpegTest, ScaleIsTheSmallestThatStillShrinks) {
  // Only the SIMD-accelerated scales 1/8, 2/8, 4/8 (the others cost more than a full decode).
  EXPECT_EQ(jpeg_scale_for(500, 375, 224, 224), 8);   // 4/8 gives 250x187: too small
  EXPECT_EQ(jpeg_scale_for(1000, 460, 224, 224), 4);  // 500x230 ≥ 225 (a pixel spare)
  EXPECT_EQ(jpeg_scale_for(2000, 1600, 224, 224), 2);  // 2/8: 500x400
  EXPECT_EQ(jpeg_scale_for(100, 100, 224, 224), 8);    // an enlargement: full size
  EXPECT_EQ(jpeg_scale_for(1000, 1000, 224, 224), 2);  // 250 ≥ 225
  EXPECT_EQ(jpeg_scale_for(899, 899, 224, 224), 4);    // 2/8 gives 224.75 < 225; 3/8 is not used
  EXPECT_EQ(jpeg_scaled_size(375, 3), 141);            // ceil(375 * 3 / 8)
}

TEST_F(JpegTest, BadFilesAreNamedForWhatTheyAre) {
  const std::vector<uint8_t> good = bytes("jpeg_rgb");
  EXPECT_NE(error_of(decoder, {}).find("empty"), std::string::npos);
  EXPECT_NE(error_of(decoder, {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n', 0, 0}).find("PNG"), std::string::npos);
  EXPECT_NE(error_of(decoder, {'G', 'I', 'F', '8', '9', 'a'}).find("GIF"), std::string::npos);
  EXPECT_NE(error_of(decoder, {'h', 'e', 'l', 'l', 'o'}).find("JPEG marker"), std::string::npos);
  // Truncated at half: libjpeg would fill the rest with grey and warn; we refuse.
  const std::vector<uint8_t> truncated(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(good.size() / 2));
  EXPECT_NE(error_of(decoder, truncated).find("truncated"), std::string::npos) << error_of(decoder, truncated);
  // Only the header: no scan data at all.
  const std::vector<uint8_t> header_only(good.begin(), good.begin() + 200);
  EXPECT_FALSE(error_of(decoder, header_only).empty());
  // Garbage after the signature.
  std::vector<uint8_t> garbage = {0xFF, 0xD8, 0xFF};
  garbage.resize(300, 0x55);
  EXPECT_FALSE(error_of(decoder, garbage).empty());
  // The decoder stays usable after errors, a header cut before its scan included (TurboJPEG's
  // handle would otherwise read the next file's header as 0x0).
  EXPECT_FALSE(error_of(decoder, std::vector<uint8_t>(good.begin(), good.begin() + 300)).empty());
  EXPECT_EQ(decoder.read_header(good).width, 64);
  RgbImage image;
  decoder.decode(good, 8, image);
  EXPECT_EQ(max_difference(image.pixels, bytes("decoded_rgb")), 0);
}

// Bytes before the end marker: libjpeg's "Corrupt JPEG data: N extraneous bytes before marker
// 0xd9", a warning with every pixel decoded (some ImageNet files have it). Decoded as PIL does,
// and the warning is returned for the loader to count; a clean file returns none. (16 bytes: the
// entropy decoder's bit buffer may swallow the first few as padding, and then N is smaller.)
TEST_F(JpegTest, DamagedButDecodableDataIsDecodedAndItsWarningReturned) {
  const std::vector<uint8_t> good = bytes("jpeg_rgb");
  ASSERT_GE(good.size(), 2u);
  ASSERT_EQ(good[good.size() - 2], 0xFF);
  ASSERT_EQ(good[good.size() - 1], 0xD9);
  std::vector<uint8_t> damaged(good.begin(), good.end() - 2);
  for (int i = 0; i < 16; ++i) damaged.push_back(static_cast<uint8_t>(0x11 * (i % 7 + 1)));
  damaged.insert(damaged.end(), {0xFF, 0xD9});
  RgbImage clean, decoded;
  EXPECT_EQ(decoder.decode(good, 8, clean), "");
  const std::string warning = decoder.decode(damaged, 8, decoded);
  EXPECT_NE(warning.find("Corrupt JPEG data: "), std::string::npos) << warning;
  EXPECT_NE(warning.find(" extraneous bytes before marker 0xd9"), std::string::npos) << warning;
  EXPECT_EQ(max_difference(decoded.pixels, clean.pixels), 0);
  // The handle is clean for the next file.
  EXPECT_EQ(decoder.decode(good, 8, decoded), "");
}

}  // namespace
}  // namespace dp

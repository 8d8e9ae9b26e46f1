// make_image_folder: writes an ImageNet-format JPEG folder (train/<class>/*.JPEG, val/<class>/...)
// for tests, demos and loader benchmarks, from
//   --source fashion_mnist   Fashion-MNIST (train → train/, t10k → val/), greyscale 28x28 made RGB
//                            and resized to --size with PIL's bilinear filter; classes 0_T-shirt-top
//                            ... 9_Ankle-boot (sorted order = the label order)
//   --source synthetic       photo-like images of --width x --height (smooth colour fields, edges
//                            and noise), --classes classes: bytes and decode cost like a photo's
// The folder is written under <out>.partial and renamed to <out> when complete, so an
// interrupted run never leaves something that looks like a dataset; an existing <out> is refused.
//   make_image_folder --source fashion_mnist --out /tmp/fmnist_jpeg --size 64 [--train-limit N --val-limit N]
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/core/error.h"
#include "runtime/data/fashion_mnist.h"
#include "runtime/data/image_transforms.h"
#include "runtime/data/jpeg.h"

namespace {

namespace fs = std::filesystem;

struct Options {
  std::string source = "fashion_mnist";
  std::string out;
  std::string root = dp::FashionMnist::kDefaultRoot;
  int size = 64;
  int width = 500, height = 375;
  int classes = 10;
  int64_t train_limit = 0, val_limit = 0;  // 0: all (fashion_mnist); synthetic: images per split
  int quality = 90;
};

void write_file(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  DP_CHECK(f.good(), "cannot write ", path.string());
}

std::string fashion_class_folder(int64_t label) {
  std::string name = std::to_string(label) + "_" + dp::FashionMnist::kClassNames[label];
  for (char& c : name)
    if (c == '/' || c == ' ') c = '-';
  return name;
}

int64_t write_fashion_split(const Options& o, dp::Split split, const fs::path& dir, int64_t limit) {
  const dp::FashionMnist data(o.root, split);
  const int64_t n = limit > 0 ? std::min(limit, data.size()) : data.size();
  dp::ResizeScratch scratch;
  dp::RgbImage grey{28, 28, std::vector<uint8_t>(28 * 28 * 3)};
  dp::RgbImage image{o.size, o.size, std::vector<uint8_t>(static_cast<size_t>(o.size) * o.size * 3)};
  for (int64_t label = 0; label < dp::FashionMnist::kNumClasses; ++label)
    fs::create_directories(dir / fashion_class_folder(label));
  for (int64_t i = 0; i < n; ++i) {
    const std::span<const uint8_t> pixels = data.image(i);
    for (int p = 0; p < 28 * 28; ++p) grey.pixels[3 * p] = grey.pixels[3 * p + 1] = grey.pixels[3 * p + 2] = pixels[p];
    dp::resize_bilinear({grey.pixels.data(), 28, 28, 28 * 3}, {0, 0, 28, 28}, o.size, o.size, {0, 0, o.size, o.size},
                        image.pixels.data(), static_cast<int64_t>(o.size) * 3, false, scratch);
    char name[32];
    std::snprintf(name, sizeof name, "%06lld.JPEG", static_cast<long long>(i));
    write_file(dir / fashion_class_folder(data.label(i)) / name, dp::encode_jpeg(image, o.quality));
  }
  for (int64_t label = 0; label < dp::FashionMnist::kNumClasses; ++label)
    DP_CHECK(!fs::is_empty(dir / fashion_class_folder(label)), "the first ", n, " ", dp::split_name(split),
             " images hold no ", fashion_class_folder(label), ": raise the limit (a class folder without images is "
             "not a dataset)");
  return n;
}

// A photo-like image: two colour fields at random frequencies, a few hard-edged shapes, and
// sensor-like noise, so that its JPEG has a photo's entropy (and decode cost).
dp::RgbImage synthetic_photo(int width, int height, uint64_t seed) {
  dp::SampleRng rng(seed, 0, 0);
  dp::RgbImage image{width, height, std::vector<uint8_t>(static_cast<size_t>(width) * height * 3)};
  double f[6], base[3];
  for (double& v : f) v = rng.uniform(0.005, 0.05);
  for (double& v : base) v = rng.uniform(60, 190);
  const int cx = static_cast<int>(rng.integer(0, width)), cy = static_cast<int>(rng.integer(0, height));
  const int radius = static_cast<int>(rng.integer(height / 8, height / 2));
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      const bool inside = (x - cx) * (x - cx) + (y - cy) * (y - cy) < radius * radius;
      for (int c = 0; c < 3; ++c) {
        double v = base[c] + 50 * std::sin(x * f[c] + y * f[c + 3]) + (inside ? 40.0 * (c - 1) : 0.0);
        v += static_cast<double>(rng.next_u64() % 25) - 12.0;
        image.pixels[(static_cast<size_t>(y) * width + x) * 3 + c] = static_cast<uint8_t>(std::clamp(v, 0.0, 255.0));
      }
    }
  return image;
}

int64_t write_synthetic_split(const Options& o, const fs::path& dir, int64_t count, uint64_t seed_base) {
  for (int c = 0; c < o.classes; ++c) {
    char name[16];
    std::snprintf(name, sizeof name, "class%04d", c);
    fs::create_directories(dir / name);
  }
  for (int64_t i = 0; i < count; ++i) {
    char cls[16], file[32];
    std::snprintf(cls, sizeof cls, "class%04d", static_cast<int>(i % o.classes));
    std::snprintf(file, sizeof file, "%08lld.JPEG", static_cast<long long>(i));
    write_file(dir / cls / file, dp::encode_jpeg(synthetic_photo(o.width, o.height, seed_base + i), o.quality));
  }
  return count;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Writes an ImageNet-format JPEG folder (train/<class>/*.JPEG, val/<class>/*.JPEG)", "make_image_folder"};
  app.add_option("--source", o.source, "fashion_mnist or synthetic")->check(CLI::IsMember({"fashion_mnist", "synthetic"}));
  app.add_option("--out", o.out, "Output folder (must not exist)")->required();
  app.add_option("--root", o.root, "Fashion-MNIST's IDX files");
  app.add_option("--size", o.size, "fashion_mnist: side of the RGB images")->check(CLI::Range(8, 4096));
  app.add_option("--width", o.width, "synthetic: image width")->check(CLI::Range(8, 8192));
  app.add_option("--height", o.height, "synthetic: image height")->check(CLI::Range(8, 8192));
  app.add_option("--classes", o.classes, "synthetic: number of classes")->check(CLI::Range(1, 100000));
  app.add_option("--train-limit", o.train_limit, "Images in train/ (fashion_mnist: 0 = all 60000)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  app.add_option("--val-limit", o.val_limit, "Images in val/ (fashion_mnist: 0 = all 10000)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  app.add_option("--quality", o.quality, "JPEG quality")->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);
  try {
    const fs::path out(o.out), partial(o.out + ".partial");
    DP_CHECK(!fs::exists(out), o.out, " exists already: choose a new folder (nothing was written)");
    DP_CHECK(o.source != "synthetic" || (o.train_limit > 0 && o.val_limit > 0),
             "--source synthetic needs --train-limit and --val-limit (the number of images per split)");
    fs::remove_all(partial);  // an earlier interrupted run's
    int64_t train = 0, val = 0;
    if (o.source == "fashion_mnist") {
      train = write_fashion_split(o, dp::Split::Train, partial / "train", o.train_limit);
      val = write_fashion_split(o, dp::Split::Test, partial / "val", o.val_limit);
    } else {
      train = write_synthetic_split(o, partial / "train", o.train_limit, 0);
      val = write_synthetic_split(o, partial / "val", o.val_limit, uint64_t{1} << 40);
    }
    fs::rename(partial, out);
    std::printf("make_image_folder: %lld train and %lld val JPEG images in %s\n", static_cast<long long>(train),
                static_cast<long long>(val), o.out.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_image_folder: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

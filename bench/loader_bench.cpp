// Image loader throughput: JPEG read + decode + augment into uint8 batch slots, the work a
// loader thread does per image (NOTE [ Image pipeline ] in runtime/data/image_folder.h), timed
// through the DataLoader with --threads decode threads. Prints one JSON line per case:
//   {"case": "train_224", "threads": 1, "images": 2000, "images_per_second": ...}
//   loader_bench --root /tmp/photos/train [--threads 1] [--images 2000] [--size 224] [--eval] [--no-dct]
// bench/compare_loader.py runs it next to torchvision + PIL on the same folder.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/data/image_folder.h"
#include "runtime/data/loader.h"
#include "runtime/data/sampler.h"

int main(int argc, char** argv) {
  std::string root;
  int threads = 1, size = 224, batch = 32;
  int64_t images = 2000;
  bool eval = false, no_dct = false;
  CLI::App app{"Image loader throughput (decode + augment)", "loader_bench"};
  app.add_option("--root", root, "An ImageFolder split: <root>/<class>/*.JPEG")->required();
  app.add_option("--threads", threads, "Decode threads")->check(CLI::PositiveNumber);
  app.add_option("--images", images, "Images to load (from the start of a shuffled order)")->check(CLI::PositiveNumber);
  app.add_option("--size", size, "Output side (train crop; eval crop with resize size * 256/224)")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "Batch size")->check(CLI::PositiveNumber);
  app.add_flag("--eval", eval, "Eval transform (resize + centre crop) instead of the train one");
  app.add_flag("--no-dct", no_dct, "Decode every JPEG at full size (PIL's behaviour)");
  CLI11_PARSE(app, argc, argv);

  dp::CpuBackend backend(1);
  dp::Device cpu(&backend);
  dp::ImageTransformOptions t;
  t.train = !eval;
  t.crop_size = t.eval_crop_size = size;
  t.eval_resize_size = size * 256 / 224;
  t.dct_scaling = !no_dct;
  const dp::ImageFolder data(root, t);
  const int64_t n = std::min<int64_t>(images, data.size());
  dp::DataLoaderOptions o;
  o.num_threads = threads;
  o.prefetch = 2 * threads + 2;
  auto batches = std::make_unique<dp::FixedSizeBatchSampler>(std::make_unique<dp::RandomSampler>(data.size(), 0),
                                                              batch, false);
  dp::DataLoader loader(data, std::move(batches), cpu, o);
  // Warm up the page cache and the threads' decoders on the first epoch's first batches.
  loader.begin_epoch(0);
  for (int i = 0; i < 2 * threads && loader.next(); ++i) {
  }
  loader.begin_epoch(1);
  int64_t loaded = 0;
  const auto start = std::chrono::steady_clock::now();
  while (loaded < n) {
    std::optional<dp::LoadedBatch> b = loader.next();
    if (!b) loader.begin_epoch(2), b = loader.next();
    loaded += b->size();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("{\"case\": \"%s_%d%s\", \"threads\": %d, \"images\": %lld, \"images_per_second\": %.1f}\n",
              eval ? "eval" : "train", size, no_dct ? "_nodct" : "", threads, static_cast<long long>(loaded),
              static_cast<double>(loaded) / seconds);
  return 0;
}

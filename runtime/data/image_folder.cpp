#include "runtime/data/image_folder.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "runtime/core/hash.h"
#include "runtime/data/jpeg.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"

namespace dp {

namespace fs = std::filesystem;

namespace {

// What one loader thread reuses from sample to sample: the decoder's handle and every buffer.
struct DecodeWorker {
  JpegDecoder decoder;
  RgbImage image;
  ResizeScratch scratch;
  std::vector<uint8_t> file;
};

DecodeWorker& this_thread_worker() {
  thread_local DecodeWorker worker;
  return worker;
}

// Reads the whole file into `bytes` (its capacity reused from file to file), in one read of
// the size fstat reports.
void read_file(const std::string& path, std::vector<uint8_t>& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw Error(std::string("cannot open it: ") + std::strerror(errno));
  struct stat st {};
  const size_t expected = fstat(fileno(f), &st) == 0 && st.st_size > 0 ? static_cast<size_t>(st.st_size) : 0;
  bytes.resize(expected + 1);  // one spare byte: a file that grew is read on below
  size_t n = std::fread(bytes.data(), 1, bytes.size(), f);
  while (n == bytes.size()) {
    bytes.resize(2 * bytes.size());
    n += std::fread(bytes.data() + n, 1, bytes.size() - n, f);
  }
  bytes.resize(n);
  const bool failed = std::ferror(f);
  const int err = errno;
  std::fclose(f);
  if (failed) throw Error(std::string("cannot read it: ") + std::strerror(err));
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool is_jpeg_name(const std::string& ext) { return ext == ".jpg" || ext == ".jpeg"; }

// torchvision's IMG_EXTENSIONS beyond JPEG: images ImageFolder would take that we do not decode.
bool is_other_image_name(const std::string& ext) {
  for (const char* e : {".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"})
    if (ext == e) return true;
  return false;
}

void check_transform(const ImageTransformOptions& t) {
  DP_CHECK(t.crop_size > 0 && t.eval_crop_size > 0 && t.eval_resize_size >= t.eval_crop_size,
           "image transform: sizes must be positive and eval_resize_size (", t.eval_resize_size,
           ") at least eval_crop_size (", t.eval_crop_size, ")");
  DP_CHECK(0 < t.crop.scale_min && t.crop.scale_min <= t.crop.scale_max && t.crop.scale_max <= 1 &&
               0 < t.crop.ratio_min && t.crop.ratio_min <= t.crop.ratio_max,
           "image transform: random_resized_crop needs 0 < scale_min <= scale_max <= 1 and 0 < ratio_min <= "
           "ratio_max, got scale [",
           t.crop.scale_min, ", ", t.crop.scale_max, "], ratio [", t.crop.ratio_min, ", ", t.crop.ratio_max, "]");
  DP_CHECK(t.mean.size() == 3 && t.std.size() == 3, "image transform: RGB images need 3 means and 3 stds, got ",
           t.mean.size(), " and ", t.std.size());
  for (int c = 0; c < 3; ++c)
    DP_CHECK(std::isfinite(t.mean[c]) && t.std[c] > 0 && std::isfinite(t.std[c]),
             "image transform: channel ", c, " needs a finite mean and a positive std, got ", t.mean[c], " and ",
             t.std[c]);
}

}  // namespace

// ---- RgbImageDataset ----

RgbImageDataset::RgbImageDataset(ImageTransformOptions transform) : transform_(std::move(transform)) {
  check_transform(transform_);
}

Shape RgbImageDataset::input_shape() const {
  const int64_t s = transform_.output_size();
  return {3, s, s};
}

int64_t RgbImageDataset::sample_bytes() const {
  const int64_t s = transform_.output_size();
  return s * s * 3 + 8;
}

Batch RgbImageDataset::allocate_batch(int64_t capacity, Device device) const {
  const int64_t s = transform_.output_size();
  return Batch{{kImages, Tensor::empty({capacity, s, s, 3}, kUInt8, device)}, {kLabels, Tensor::empty({capacity}, kInt64, device)}};
}

void RgbImageDataset::fill_batch(std::span<const int64_t> indices, int64_t epoch, const Batch& out) const {
  const Tensor& out_images = out[kImages];
  const Tensor& out_labels = out[kLabels];
  const int64_t batch = static_cast<int64_t>(indices.size());
  const int64_t s = transform_.output_size(), image_bytes = s * s * 3;
  DP_CHECK(out_images.device().is_cpu() && out_images.dtype() == kUInt8 && out_images.shape() == Shape({batch, s, s, 3}) &&
               out_images.is_contiguous(),
           description(), ": fill_batch needs contiguous uint8 images [", batch, ", ", s, ", ", s, ", 3] on the CPU, got ",
           out_images.str());
  DP_CHECK(out_labels.device().is_cpu() && out_labels.dtype() == kInt64 && out_labels.shape() == Shape{batch} &&
               out_labels.is_contiguous(),
           description(), ": fill_batch needs contiguous int64 labels [", batch, "] on the CPU, got ", out_labels.str());
  uint8_t* images = out_images.data<uint8_t>();
  int64_t* labels = out_labels.data<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    DP_CHECK(indices[b] >= 0 && indices[b] < size(), description(), ": sample index ", indices[b],
             " is outside [0, ", size(), ")");
    labels[b] = fill_sample(indices[b], epoch, images + b * image_bytes);
  }
}

Tensor RgbImageDataset::model_input(const Tensor& images, MemoryFormat format) const {
  DP_CHECK(images.dtype() == kUInt8 && images.dim() == 4 && images.size(3) == 3, description(),
           ": model_input expects uint8 images [B, H, W, 3], got ", images.str());
  std::pair<Tensor, Tensor> constants;
  {
    std::lock_guard lock(constants_mutex_);
    auto it = constants_.find(images.device().str());
    if (it == constants_.end()) {
      std::vector<float> scale(3), shift(3);
      for (int c = 0; c < 3; ++c) {
        scale[c] = static_cast<float>(1.0 / (255.0 * transform_.std[c]));
        shift[c] = static_cast<float>(-transform_.mean[c] / transform_.std[c]);
      }
      it = constants_
               .emplace(images.device().str(),
                        std::pair{from_vector<float>(scale, {1, 3, 1, 1}, images.device()),
                                  from_vector<float>(shift, {1, 3, 1, 1}, images.device())})
               .first;
    }
    constants = it->second;
  }
  // [B, H, W, 3] uint8 seen as [B, 3, H, W] (channels-last strides), cast to float32 in `format`
  // in one pass; the affine map keeps the format.
  const Tensor hwc = images.permute({0, 3, 1, 2});
  Tensor x = Tensor::empty(hwc.shape(), kFloat32, images.device(), format);
  x.copy_(hwc);
  return add(mul(x, constants.first), constants.second);
}

// ---- ImageFolder ----

std::vector<std::string> image_folder_classes(const std::string& split_dir) {
  std::error_code ec;
  DP_CHECK(fs::is_directory(split_dir, ec), "image folder ", split_dir, ": ",
           fs::exists(split_dir, ec) ? "is not a directory" : "does not exist",
           " (data.root must hold train/ and val/, each with one folder of JPEG files per class)");
  std::vector<std::string> classes;
  fs::directory_iterator it(split_dir, fs::directory_options::follow_directory_symlink, ec);
  DP_CHECK(!ec, "image folder ", split_dir, ": cannot list it: ", ec.message());
  for (const fs::directory_entry& entry : it)
    if (entry.is_directory(ec)) classes.push_back(entry.path().filename().string());
  std::sort(classes.begin(), classes.end());  // bytes, as Python's sorted() on names
  return classes;
}

ImageFolder::ImageFolder(const std::string& split_dir, ImageTransformOptions transform, bool skip_bad_files,
                         const std::vector<std::string>& expected_classes)
    : RgbImageDataset(std::move(transform)), skip_bad_files_(skip_bad_files) {
  classes_ = image_folder_classes(split_dir);
  DP_CHECK(!classes_.empty(), "image folder ", split_dir, " has no class folders: expected ", split_dir,
           "/<class>/<image>.JPEG");
  if (!expected_classes.empty() && classes_ != expected_classes) {
    std::string first_difference;
    for (size_t i = 0; i < std::max(classes_.size(), expected_classes.size()); ++i) {
      const std::string mine = i < classes_.size() ? classes_[i] : "(none)";
      const std::string theirs = i < expected_classes.size() ? expected_classes[i] : "(none)";
      if (mine != theirs) {
        first_difference = "class " + std::to_string(i) + " is '" + mine + "' here but '" + theirs + "' in training";
        break;
      }
    }
    throw Error(detail::concat("image folder ", split_dir, " has ", classes_.size(), " classes, the training split ",
                               expected_classes.size(), ", and they differ (", first_difference,
                               "): the labels would not match; both splits need the same class folders"));
  }
  // torchvision's make_dataset: per class in order, the walk's directories sorted, files sorted.
  // Symbolic links to folders are followed, as torchvision does; but a folder reached twice — a
  // link loop, or a link into another class's folder — is an error here: the walk would count its
  // images many times over (a loop ends only at the kernel's 40-link limit) or under the wrong class.
  std::map<std::pair<dev_t, ino_t>, std::string> walked;  // every folder of the split, by identity
  const auto first_visit = [&](const fs::path& dir) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) return;  // vanished or unreadable: the listing says so
    const auto [seen, fresh] = walked.emplace(std::make_pair(st.st_dev, st.st_ino), dir.string());
    if (!fresh)
      throw Error(detail::concat("image folder ", split_dir, ": the folder ", dir.string(), " is ", seen->second,
                                 " again (a symbolic link loop, or a link into another class's folder): its images ",
                                 "would be counted more than once or under the wrong class; remove the link"));
  };
  for (const std::string& name : classes_) first_visit(fs::path(split_dir) / name);
  std::vector<std::string> ignored_examples;
  for (size_t label = 0; label < classes_.size(); ++label) {
    const fs::path class_dir = fs::path(split_dir) / classes_[label];
    std::vector<std::pair<std::string, std::string>> files;  // (directory, file name)
    std::error_code ec;
    fs::recursive_directory_iterator it(class_dir, fs::directory_options::follow_directory_symlink, ec);
    DP_CHECK(!ec, "image folder: cannot list ", class_dir.string(), ": ", ec.message());
    fs::path last_folder = class_dir;  // the folder the walk enters next: what a failed step could not list
    for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      const fs::directory_entry& entry = *it;
      std::error_code type_ec;
      if (entry.is_directory(type_ec)) {
        first_visit(entry.path());
        last_folder = entry.path();
        continue;
      }
      const std::string ext = lower(entry.path().extension().string());
      if (is_jpeg_name(ext)) {
        files.emplace_back(entry.path().parent_path().string(), entry.path().filename().string());
      } else if (is_other_image_name(ext)) {
        ++ignored_files_;
        if (ignored_examples.size() < 3) ignored_examples.push_back(entry.path().string());
      }
    }
    DP_CHECK(!ec, "image folder: cannot list ", last_folder.string(), " (in class folder ", class_dir.string(),
             "): ", ec.message());
    DP_CHECK(!files.empty(), "image folder: class folder ", class_dir.string(),
             " has no .jpg/.jpeg files: every class needs at least one image (remove the folder or add its images)");
    std::sort(files.begin(), files.end());
    for (auto& [dir, name] : files) samples_.push_back({(fs::path(dir) / name).string(), static_cast<int64_t>(label)});
  }
  description_ = detail::concat("image folder ", split_dir, " (", classes_.size(), " classes, ", samples_.size(),
                                " images)");
  Fnv1a digest;
  digest.word(samples_.size());
  for (const std::string& name : classes_) digest.text(name);
  const size_t below = (fs::path(split_dir) / "").string().size();  // paths as seen from the split folder
  for (const Sample& s : samples_) digest.text(std::string_view(s.path).substr(below)).word(static_cast<uint64_t>(s.label));
  content_digest_ = digest.value();
  if (ignored_files_ > 0) {
    std::string examples;
    for (const std::string& e : ignored_examples) examples += (examples.empty() ? "" : ", ") + e;
    DP_CHECK(skip_bad_files_, "image folder ", split_dir, ": ", ignored_files_,
             " image file(s) are not JPEG and dptrain decodes only JPEG (", examples,
             "): convert them, or set data.skip_bad_files: true to train without them");
  }
}

const std::string& ImageFolder::path(int64_t index) const {
  DP_CHECK(index >= 0 && index < size(), description_, ": sample index ", index, " is outside [0, ", size(), ")");
  return samples_[index].path;
}

int64_t ImageFolder::label(int64_t index) const {
  DP_CHECK(index >= 0 && index < size(), description_, ": sample index ", index, " is outside [0, ", size(), ")");
  return samples_[index].label;
}

void ImageFolder::load(int64_t index, int64_t epoch, uint8_t* out) const {
  const std::string& file = path(index);
  DecodeWorker& w = this_thread_worker();
  std::string warning;
  try {
    read_file(file, w.file);
    const JpegHeader header = w.decoder.read_header(w.file);
    const ImageTransformOptions& t = transform_;
    const int s = t.output_size();
    if (t.train) {
      SampleRng rng(t.seed, epoch, index);
      const CropBox crop = random_resized_crop_box(header.height, header.width, t.crop, rng);
      const bool flip = t.horizontal_flip && rng.uniform(0.0, 1.0) < 0.5;
      const int eighths = t.dct_scaling ? jpeg_scale_for(crop.width, crop.height, s, s) : 8;
      warning = w.decoder.decode(w.file, eighths, w.image);
      // The crop in the decoded image's pixels; the filter's taps stop at the crop's edges (it
      // is cut out before the resize in torchvision), so the source is the crop's window.
      const double fx = static_cast<double>(w.image.width) / header.width;
      const double fy = static_cast<double>(w.image.height) / header.height;
      const double x0 = crop.left * fx, x1 = std::min<double>((crop.left + crop.width) * fx, w.image.width);
      const double y0 = crop.top * fy, y1 = std::min<double>((crop.top + crop.height) * fy, w.image.height);
      const int wx0 = static_cast<int>(std::floor(x0)), wy0 = static_cast<int>(std::floor(y0));
      const int wx1 = static_cast<int>(std::ceil(x1)), wy1 = static_cast<int>(std::ceil(y1));
      const int64_t stride = static_cast<int64_t>(w.image.width) * 3;
      const RgbView window{w.image.pixels.data() + wy0 * stride + 3 * wx0, wy1 - wy0, wx1 - wx0, stride};
      resize_bilinear(window, {x0 - wx0, y0 - wy0, x1 - wx0, y1 - wy0}, s, s, {0, 0, s, s}, out,
                      static_cast<int64_t>(s) * 3, flip, w.scratch);
    } else {
      const auto [rh, rw] = resize_shorter_side(header.height, header.width, t.eval_resize_size);
      const CropBox crop = center_crop_box(rh, rw, s, s);
      // Shrinking the whole image to rh x rw: decode at the smallest scale that still shrinks.
      const int eighths = t.dct_scaling ? jpeg_scale_for(header.width, header.height, rw, rh) : 8;
      warning = w.decoder.decode(w.file, eighths, w.image);
      const RgbView whole{w.image.pixels.data(), w.image.height, w.image.width,
                          static_cast<int64_t>(w.image.width) * 3};
      resize_bilinear(whole, {0, 0, static_cast<double>(w.image.width), static_cast<double>(w.image.height)}, rh, rw,
                      crop, out, static_cast<int64_t>(s) * 3, false, w.scratch);
    }
  } catch (const Error& e) {
    throw Error(file + ": " + e.what());
  }
  if (!warning.empty()) {
    std::lock_guard lock(warned_mutex_);
    if (first_warning_.empty()) first_warning_ = file + ": " + warning;
    warned_in_epoch_[epoch].insert(index);
  }
}

int64_t ImageFolder::fill_sample(int64_t index, int64_t epoch, uint8_t* image) const {
  // Give up after a long run of bad files: that is a broken dataset rather than a few bad images.
  constexpr int kMaxConsecutiveBad = 100;
  for (int attempt = 0;; ++attempt) {
    DP_CHECK(attempt < kMaxConsecutiveBad, description_, ": ", kMaxConsecutiveBad,
             " files in a row could not be read (the first: ", first_skipped(), "): the dataset looks broken");
    if (any_skipped_.load(std::memory_order_relaxed)) {
      std::lock_guard lock(skipped_mutex_);
      if (skipped_.count(index)) {
        skipped_in_epoch_[epoch].insert(index);
        index = (index + 1) % size();
        continue;
      }
    }
    try {
      load(index, epoch, image);
      return label(index);
    } catch (const Error& e) {
      if (!skip_bad_files_) throw;
      std::lock_guard lock(skipped_mutex_);
      if (skipped_.empty()) first_skipped_ = e.what();
      skipped_.insert(index);
      skipped_in_epoch_[epoch].insert(index);
      any_skipped_.store(true, std::memory_order_relaxed);
    }
    index = (index + 1) % size();
  }
}

int64_t ImageFolder::skipped_files() const {
  std::lock_guard lock(skipped_mutex_);
  return static_cast<int64_t>(skipped_.size());
}

namespace {

// The files (sample indices) recorded for `epoch`.
int64_t files_in_epoch(const std::map<int64_t, std::set<int64_t>>& by_epoch, int64_t epoch) {
  const auto it = by_epoch.find(epoch);
  return it == by_epoch.end() ? 0 : static_cast<int64_t>(it->second.size());
}

}  // namespace

int64_t ImageFolder::skipped_files(int64_t epoch) const {
  std::lock_guard lock(skipped_mutex_);
  return files_in_epoch(skipped_in_epoch_, epoch);
}

std::string ImageFolder::first_skipped() const {
  std::lock_guard lock(skipped_mutex_);
  return first_skipped_;
}

int64_t ImageFolder::files_with_decode_warnings() const {
  std::lock_guard lock(warned_mutex_);
  std::set<int64_t> all;
  for (const auto& [epoch, files] : warned_in_epoch_) all.insert(files.begin(), files.end());
  return static_cast<int64_t>(all.size());
}

int64_t ImageFolder::files_with_decode_warnings(int64_t epoch) const {
  std::lock_guard lock(warned_mutex_);
  return files_in_epoch(warned_in_epoch_, epoch);
}

std::string ImageFolder::first_decode_warning() const {
  std::lock_guard lock(warned_mutex_);
  return first_warning_;
}

// ---- SyntheticImages ----

SyntheticImages::SyntheticImages(int64_t size, int64_t num_classes, ImageTransformOptions transform)
    : RgbImageDataset(std::move(transform)), size_(size), num_classes_(num_classes) {
  DP_CHECK(size > 0 && num_classes > 0, "synthetic images: need positive size and classes, got ", size, " and ",
           num_classes);
  description_ = detail::concat("synthetic images (", size, " samples, ", num_classes, " classes, ",
                                transform_.output_size(), "x", transform_.output_size(), " RGB)");
}

int64_t SyntheticImages::fill_sample(int64_t index, int64_t /*epoch*/, uint8_t* image) const {
  // The same image every epoch. The evaluation split draws from a stream of its own: with the
  // training split's it would be a copy of its first samples, and its accuracy training accuracy.
  SampleRng rng(transform_.seed, transform_.train ? -1 : -2, index);
  const int64_t label = rng.integer(0, num_classes_);
  const int64_t s = transform_.output_size(), image_bytes = s * s * 3;
  for (int64_t p = 0; p < image_bytes; p += 8) {
    const uint64_t word = rng.next_u64();
    std::memcpy(image + p, &word, static_cast<size_t>(std::min<int64_t>(8, image_bytes - p)));
  }
  return label;
}

}  // namespace dp

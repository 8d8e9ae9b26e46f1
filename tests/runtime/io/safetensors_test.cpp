#include "runtime/io/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace dp {
namespace {

std::vector<std::byte> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng() & 0xff);
  return out;
}

SafetensorsEntry random_entry(const std::string& dtype, std::vector<int64_t> shape, uint32_t seed) {
  size_t bytes = static_cast<size_t>(safetensors_numel(shape)) * safetensors_dtype_size(dtype);
  return {dtype, std::move(shape), random_bytes(bytes, seed)};
}

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_all(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A file with this exact header text and `data_bytes` zero bytes of data.
std::string raw_file(const std::string& header, size_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\0');
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("dptrain_safetensors_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Only the named files are in the directory: no temporaries left behind.
  void expect_dir_holds(const std::vector<std::string>& names) const {
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(dir_)) found.push_back(e.path().filename().string());
    std::sort(found.begin(), found.end());
    auto want = names;
    std::sort(want.begin(), want.end());
    EXPECT_EQ(found, want);
  }

  // Reading `bytes` as a file fails with a dp::Error naming the file and containing `needle`.
  void expect_read_error(const std::string& bytes, const std::string& needle) {
    const std::string p = path("bad.safetensors");
    write_all(p, bytes);
    try {
      read_safetensors(p);
      ADD_FAILURE() << "no error; expected one containing: " << needle;
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(p), std::string::npos) << "message does not name the file: " << msg;
      EXPECT_NE(msg.find(needle), std::string::npos) << "expected '" << needle << "' in: " << msg;
    }
  }

  fs::path dir_;
};

// ---- Round trips ----------------------------------------------------------------------------

TEST_F(SafetensorsTest, RoundTripsEveryDtypeAndShapeKind) {
  SafetensorsFile f;
  uint32_t seed = 1;
  for (const char* dtype : {"F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL"}) {
    std::string d = dtype;
    f.add(d + "_matrix", random_entry(d, {3, 5}, seed++));
    f.add(d + "_scalar", random_entry(d, {}, seed++));  // 0-d: one element
    f.add(d + "_empty", random_entry(d, {0}, seed++));
    f.add(d + "_empty_inner", random_entry(d, {2, 0, 3}, seed++));
    f.add(d + "_4d", random_entry(d, {2, 1, 3, 2}, seed++));
  }
  f.metadata = {{"format", "pt"}, {"step", "1200"}, {"note", "spaces, \"quotes\" and ünïcödé"}};

  const std::string p = path("all.safetensors");
  write_safetensors(p, f);
  SafetensorsFile g = read_safetensors(p);

  ASSERT_EQ(g.tensors.size(), f.tensors.size());
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    const auto& [name, e] = f.tensors[i];
    SCOPED_TRACE(name);
    EXPECT_EQ(g.tensors[i].first, name);  // written order is file order
    EXPECT_EQ(g.tensors[i].second.dtype, e.dtype);
    EXPECT_EQ(g.tensors[i].second.shape, e.shape);
    EXPECT_EQ(g.tensors[i].second.data, e.data);
  }
  EXPECT_EQ(g.metadata, f.metadata);
  EXPECT_EQ(g.at("F32_scalar").data.size(), 4u);
  EXPECT_TRUE(g.at("F64_empty").data.empty());

  // Header padded so the data is 8-byte aligned.
  std::string raw = read_all(p);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(raw[i]);
  EXPECT_EQ(n % 8, 0u);
  expect_dir_holds({"all.safetensors"});
}

TEST_F(SafetensorsTest, NoMetadataAndNoTensors) {
  const std::string p = path("empty.safetensors");
  write_safetensors(p, SafetensorsFile{});
  EXPECT_EQ(read_all(p).find("__metadata__"), std::string::npos);
  SafetensorsFile g = read_safetensors(p);
  EXPECT_TRUE(g.tensors.empty());
  EXPECT_TRUE(g.metadata.empty());
}

TEST_F(SafetensorsTest, TypedHelpers) {
  std::vector<double> v{1.5, -2.25, 3.0, 1e-300, -0.0, 7};
  SafetensorsFile f;
  f.add("w", make_safetensors_entry<double>({2, 3}, v));
  std::vector<int64_t> idx{-100, 4};
  f.add("t", make_safetensors_entry<int64_t>({2}, idx));
  write_safetensors(path("t.safetensors"), f);
  SafetensorsFile g = read_safetensors(path("t.safetensors"));
  EXPECT_EQ(safetensors_values<double>(g.at("w")), v);
  EXPECT_EQ(safetensors_values<int64_t>(g.at("t")), idx);
  EXPECT_THROW(safetensors_values<float>(g.at("w")), Error);
  EXPECT_THROW(make_safetensors_entry<double>({4}, v), Error);
  EXPECT_THROW(g.at("missing"), Error);
  EXPECT_THROW(f.add("w", {}), Error);
  EXPECT_THROW(f.add("__metadata__", {}), Error);
}

// ---- Atomic writes --------------------------------------------------------------------------

TEST_F(SafetensorsTest, OverwriteReplacesWholeFile) {
  const std::string p = path("ckpt.safetensors");
  SafetensorsFile big;
  big.add("a", random_entry("F32", {1000}, 1));
  write_safetensors(p, big);
  SafetensorsFile small;
  small.add("b", random_entry("I8", {3}, 2));
  write_safetensors(p, small);
  SafetensorsFile g = read_safetensors(p);
  ASSERT_EQ(g.tensors.size(), 1u);
  EXPECT_EQ(g.tensors[0].first, "b");
  expect_dir_holds({"ckpt.safetensors"});
}

TEST_F(SafetensorsTest, InvalidEntryLeavesExistingFileUntouched) {
  const std::string p = path("ckpt.safetensors");
  SafetensorsFile good;
  good.add("a", random_entry("F64", {4}, 1));
  write_safetensors(p, good);
  const std::string before = read_all(p);

  SafetensorsFile bad;
  bad.add("a", {"F64", {4}, random_bytes(31, 2)});  // one byte short
  EXPECT_THROW(write_safetensors(p, bad), Error);
  SafetensorsFile unknown;
  unknown.add("a", {"F8_E4M3", {4}, random_bytes(4, 3)});
  EXPECT_THROW(write_safetensors(p, unknown), Error);
  SafetensorsFile negative;
  negative.add("a", {"F32", {-1}, {}});
  EXPECT_THROW(write_safetensors(p, negative), Error);

  EXPECT_EQ(read_all(p), before);
  expect_dir_holds({"ckpt.safetensors"});
}

TEST_F(SafetensorsTest, FailedRenameRemovesTemporary) {
  // The target is a directory, so rename() fails after the temporary was fully written.
  fs::create_directories(dir_ / "target");
  SafetensorsFile f;
  f.add("a", random_entry("U8", {10}, 1));
  try {
    write_safetensors(path("target"), f);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rename"), std::string::npos) << e.what();
  }
  expect_dir_holds({"target"});
}

TEST_F(SafetensorsTest, MissingDirectoryIsAnError) {
  SafetensorsFile f;
  f.add("a", random_entry("U8", {1}, 1));
  const std::string p = path("no/such/dir/x.safetensors");
  try {
    write_safetensors(p, f);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

// ---- Corrupt input --------------------------------------------------------------------------

TEST_F(SafetensorsTest, MissingFile) {
  const std::string p = path("nope.safetensors");
  try {
    read_safetensors(p);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(p), std::string::npos) << msg;
    EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
  }
}

TEST_F(SafetensorsTest, ReadingADirectory) {
  EXPECT_THROW(read_safetensors(dir_.string()), Error);
}

TEST_F(SafetensorsTest, TooShortForHeaderLength) {
  expect_read_error("", "truncated");
  expect_read_error(std::string("\x10\0\0", 3), "truncated");
}

TEST_F(SafetensorsTest, HeaderLengthLargerThanFile) {
  expect_read_error(le64(1000) + "{}", "header length 1000 is larger than");
  expect_read_error(le64(UINT64_MAX) + "{}", "is larger than");
}

TEST_F(SafetensorsTest, BadJson) {
  expect_read_error(raw_file(R"({"a": {"dtype": "F32",)", 0), "not valid JSON");
  expect_read_error(raw_file("\x89PNG\r\n\x1a\n", 0), "not valid JSON");
  expect_read_error(raw_file("[1, 2]", 0), "must be a JSON object");
}

TEST_F(SafetensorsTest, MalformedEntries) {
  expect_read_error(raw_file(R"({"a": 3})", 0), "must be a JSON object");
  expect_read_error(raw_file(R"({"a": {"shape": [1], "data_offsets": [0, 4]}})", 4), "\"dtype\"");
  expect_read_error(raw_file(R"({"a": {"dtype": "F32", "data_offsets": [0, 4]}})", 4), "\"shape\"");
  expect_read_error(raw_file(R"({"a": {"dtype": "F32", "shape": [1]}})", 4), "\"data_offsets\"");
  expect_read_error(raw_file(R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4),
                    "non-negative");
  expect_read_error(raw_file(R"({"a": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4),
                    "non-negative");
  expect_read_error(raw_file(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4),
                    "two non-negative integers");
  expect_read_error(raw_file(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})", 4),
                    "end before they begin");
  expect_read_error(raw_file(R"({"__metadata__": {"k": 1}})", 0), "must be a string");
  expect_read_error(raw_file(R"({"__metadata__": [1]})", 0), "must be an object");
  expect_read_error(
      raw_file(R"({"a": {"dtype": "F64", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]}})", 8),
      "overflow");
}

TEST_F(SafetensorsTest, UnknownDtype) {
  expect_read_error(raw_file(R"({"a": {"dtype": "X32", "shape": [1], "data_offsets": [0, 4]}})", 4),
                    "unknown dtype \"X32\"");
}

TEST_F(SafetensorsTest, SizeNotMatchingDtypeTimesNumel) {
  expect_read_error(raw_file(R"({"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})", 20),
                    "span 20 bytes but dtype F32");
}

TEST_F(SafetensorsTest, OffsetsOutOfRange) {
  // Header promises 24 bytes; only 16 are there (a file cut short in its data).
  expect_read_error(raw_file(R"({"a": {"dtype": "F64", "shape": [3], "data_offsets": [0, 24]}})", 16),
                    "run past the end");
}

TEST_F(SafetensorsTest, OverlappingOffsets) {
  expect_read_error(raw_file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                             R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                             12),
                    "overlap tensor 'a'");
}

TEST_F(SafetensorsTest, HoleAndTrailingBytes) {
  expect_read_error(raw_file(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8), "hole");
  expect_read_error(raw_file(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 8),
                    "cover only 4");
}

TEST_F(SafetensorsTest, EveryTruncationOfAValidFileIsAnError) {
  SafetensorsFile f;
  f.add("a", random_entry("F32", {3, 2}, 1));
  f.add("b", random_entry("I64", {}, 2));
  f.metadata["k"] = "v";
  const std::string p = path("ok.safetensors");
  write_safetensors(p, f);
  const std::string full = read_all(p);
  const std::string cut = path("cut.safetensors");
  for (size_t len = 0; len < full.size(); ++len) {
    write_all(cut, full.substr(0, len));
    EXPECT_THROW(read_safetensors(cut), Error) << "truncated to " << len << " of " << full.size();
  }
}

// ---- Files written by Python (tests/fixtures/make_fixtures.py) --------------------------------

#ifdef DPTRAIN_SOURCE_DIR
const fs::path kFixtures = fs::path(DPTRAIN_SOURCE_DIR) / "tests" / "fixtures";

std::pair<int64_t, int64_t> parse_pair(const std::string& s) {
  auto comma = s.find(',');
  return {std::stoll(s.substr(0, comma)), std::stoll(s.substr(comma + 1))};
}

template <typename T>
std::vector<double> as_f64(const SafetensorsEntry& e) {
  auto v = safetensors_values<T>(e);
  return {v.begin(), v.end()};
}

std::vector<double> values_f64(const SafetensorsEntry& e) {
  return e.dtype == "F64" ? as_f64<double>(e) : as_f64<float>(e);
}

// A direct conv2d over the fixture's own inputs must reproduce the fixture's output: proves
// the bytes, shapes and metadata were read as PyTorch wrote them.
void check_conv_fixture(const std::string& name, double tol) {
  SCOPED_TRACE(name);
  SafetensorsFile f = read_safetensors((kFixtures / (name + ".safetensors")).string());
  EXPECT_EQ(f.metadata.at("op"), "conv2d");
  const auto& xs = f.at("x").shape;
  const auto& ws = f.at("weight").shape;
  const auto& os = f.at("out").shape;
  ASSERT_EQ(xs.size(), 4u);
  ASSERT_EQ(ws.size(), 4u);
  ASSERT_EQ(os.size(), 4u);
  auto x = values_f64(f.at("x")), w = values_f64(f.at("weight")), out = values_f64(f.at("out"));
  std::vector<double> bias(ws[0], 0.0);
  if (f.metadata.at("bias") == "true") bias = values_f64(f.at("bias"));
  auto [sh, sw] = parse_pair(f.metadata.at("stride"));
  auto [ph, pw] = parse_pair(f.metadata.at("padding"));
  auto [dh, dw] = parse_pair(f.metadata.at("dilation"));
  const int64_t groups = std::stoll(f.metadata.at("groups"));
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], OC = ws[0], CG = ws[1], KH = ws[2], KW = ws[3];
  EXPECT_EQ(CG * groups, C);
  EXPECT_EQ(os[0], N);
  EXPECT_EQ(os[1], OC);
  const int64_t OH = os[2], OW = os[3];
  EXPECT_EQ(OH, (H + 2 * ph - dh * (KH - 1) - 1) / sh + 1);
  EXPECT_EQ(OW, (W + 2 * pw - dw * (KW - 1) - 1) / sw + 1);
  double max_err = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oc = 0; oc < OC; ++oc)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = bias[oc];
          const int64_t g = oc / (OC / groups);
          for (int64_t c = 0; c < CG; ++c)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                int64_t ih = oh * sh - ph + kh * dh, iw = ow * sw - pw + kw * dw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += x[((n * C + g * CG + c) * H + ih) * W + iw] * w[((oc * CG + c) * KH + kh) * KW + kw];
              }
          max_err = std::max(max_err, std::abs(acc - out[((n * OC + oc) * OH + oh) * OW + ow]));
        }
  EXPECT_LT(max_err, tol);
}

TEST(SafetensorsFixtures, ConvOutputsMatchDirectConvolution) {
  for (const char* name : {"conv2d_basic", "conv2d_stride2_dilation2", "conv2d_groups2", "conv2d_1x1"}) {
    check_conv_fixture(name, 1e-12);
    check_conv_fixture(std::string(name) + "_f32", 1e-4);
  }
}

TEST(SafetensorsFixtures, MaxPoolIndicesPointAtTheMaxima) {
  for (const char* name : {"max_pool2d_k2s2", "max_pool2d_k3s2p1"}) {
    SCOPED_TRACE(name);
    SafetensorsFile f = read_safetensors((kFixtures / (std::string(name) + ".safetensors")).string());
    auto x = safetensors_values<double>(f.at("x"));
    auto out = safetensors_values<double>(f.at("out"));
    auto idx = safetensors_values<int64_t>(f.at("indices"));
    const auto& xs = f.at("x").shape;
    const auto& os = f.at("out").shape;
    const int64_t planes = xs[0] * xs[1], in_plane = xs[2] * xs[3], out_plane = os[2] * os[3];
    ASSERT_EQ(idx.size(), out.size());
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t i = 0; i < out_plane; ++i)
        EXPECT_EQ(out[p * out_plane + i], x[p * in_plane + idx[p * out_plane + i]]);
  }
}

TEST(SafetensorsFixtures, CrossEntropyHasScalarLossAndIgnoredTarget) {
  SafetensorsFile f = read_safetensors((kFixtures / "cross_entropy_smooth_ignore_mean.safetensors").string());
  EXPECT_EQ(f.metadata.at("label_smoothing"), "0.1");
  EXPECT_EQ(f.metadata.at("reduction"), "mean");
  EXPECT_TRUE(f.at("loss").shape.empty());
  EXPECT_TRUE(f.at("grad_out").shape.empty());
  EXPECT_EQ(f.at("target").dtype, "I64");
  auto t = safetensors_values<int64_t>(f.at("target"));
  EXPECT_EQ(std::count(t.begin(), t.end(), -100), 1);
  EXPECT_EQ(f.at("grad_logits").shape, (std::vector<int64_t>{8, 5}));
}

TEST(SafetensorsFixtures, EveryFixtureReadsAndIsComplete) {
  // The op fixtures of make_fixtures.py carry an op, its output and gradients; the others are
  // named here with the script that writes them (tests/fixtures/README.md).
  const std::set<std::string> not_op_fixtures = {
      "image_transforms",   // make_image_fixtures.py: PIL/torchvision pixels and JPEG files
      "resnet50_forward",   // make_resnet_fixtures.py: an input and torchvision's logits
      "resnet18_forward",   // the same for ResNet-18
      "bert_tiny",          // make_bert_fixtures.py: Hugging Face-named weights, logits and gradients
  };
  int ops = 0;
  uintmax_t total = 0;
  for (const auto& e : fs::directory_iterator(kFixtures)) {
    if (e.path().extension() != ".safetensors") continue;
    SCOPED_TRACE(e.path().string());
    SafetensorsFile f = read_safetensors(e.path().string());
    total += e.file_size();
    if (not_op_fixtures.count(e.path().stem().string())) continue;
    EXPECT_TRUE(f.metadata.count("op"));
    EXPECT_TRUE(f.metadata.count("torch_version"));
    EXPECT_TRUE(f.contains("grad_out"));
    EXPECT_TRUE(f.contains("out") || f.contains("loss"));
    ++ops;
  }
  EXPECT_GE(ops, 23);
  EXPECT_LT(total, 768u * 1024u) << "fixtures should stay small";  // 633 KiB with BERT's 216
}
#endif

// ---- Bytes in memory (the parser read_safetensors runs; tests/fuzz/fuzz_safetensors) ---------

TEST_F(SafetensorsTest, ParsingBytesInMemoryGivesWhatReadingTheFileGives) {
  SafetensorsFile f;
  f.add("w", random_entry("F32", {2, 3}, 1));
  f.add("empty", random_entry("I64", {0}, 2));
  f.add("s", random_entry("BF16", {}, 3));
  f.metadata["format"] = "pt";
  const std::string p = path("m.safetensors");
  write_safetensors(p, f);
  const std::string bytes = read_all(p);
  const auto span = std::as_bytes(std::span<const char>(bytes.data(), bytes.size()));
  const SafetensorsFile from_file = read_safetensors(p);
  const SafetensorsFile from_memory = parse_safetensors(span, "m.safetensors");
  ASSERT_EQ(from_memory.tensors.size(), from_file.tensors.size());
  for (size_t i = 0; i < from_file.tensors.size(); ++i) {
    EXPECT_EQ(from_memory.tensors[i].first, from_file.tensors[i].first);
    EXPECT_EQ(from_memory.tensors[i].second.dtype, from_file.tensors[i].second.dtype);
    EXPECT_EQ(from_memory.tensors[i].second.shape, from_file.tensors[i].second.shape);
    EXPECT_EQ(from_memory.tensors[i].second.data, from_file.tensors[i].second.data);
  }
  EXPECT_EQ(from_memory.metadata, from_file.metadata);
  // Errors name what the caller called the bytes; every cut is an error, as for a file.
  try {
    parse_safetensors(span.first(5), "in-memory");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'in-memory' is truncated: 5 bytes"), std::string::npos) << e.what();
  }
  for (size_t len = 0; len < span.size(); ++len)
    EXPECT_THROW(parse_safetensors(span.first(len), "cut"), Error) << "truncated to " << len;
}

// Found with tests/fuzz/fuzz_safetensors (seed corpus/safetensors/regression_deep_nesting): nlohmann::json
// copies values recursively while it parses (an ordered_json object growing) and prints them
// recursively (our error messages), so a header of brackets nested a million deep crashed the
// reader with a stack overflow instead of an error.
TEST_F(SafetensorsTest, AHeaderNestedTooDeepIsAnErrorNotAStackOverflow) {
  const auto nested = [](size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  const std::string refused = "header nests lists or objects more than 64 deep";
  expect_read_error(raw_file(R"({"a": {"dtype": "F32", "shape": )" + nested(1'000'000) + R"(, "data_offsets": [0, 0]}})", 0),
                    refused);
  expect_read_error(raw_file(R"({"a": )" + nested(1'000'000) + "}", 0), refused);
  expect_read_error(raw_file(R"({"__metadata__": {"k": )" + nested(1'000'000) + "}}", 0), refused);
  // The limit: the header, an entry and 62 levels of shape lists is 64 deep and parses (then is
  // refused as a shape); one more level is too deep.
  expect_read_error(raw_file(R"({"a": {"dtype": "F32", "shape": )" + nested(62) + R"(, "data_offsets": [0, 0]}})", 0),
                    "shape must be a list of non-negative integers");
  expect_read_error(raw_file(R"({"a": {"dtype": "F32", "shape": )" + nested(63) + R"(, "data_offsets": [0, 0]}})", 0),
                    refused);
}

}  // namespace
}  // namespace dp

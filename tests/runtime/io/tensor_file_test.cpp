// Tensors through safetensors files: every dtype round-trips bit for bit (views and 0-d
// tensors included), metadata is kept, and what dptrain cannot hold is refused naming the entry.
#include "runtime/io/tensor_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "common/expect_error.h"
#include "common/run_program.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/ops/creation.h"

namespace dp {
namespace {

namespace fs = std::filesystem;

class TensorFileTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::make_test_dir("dptrain_tensor_file"); }
  void TearDown() override { fs::remove_all(dir_); }

  // The tensor's bytes as stored (contiguous copy).
  static std::vector<std::byte> bytes_of(const Tensor& t) { return to_safetensors_entry(t).data; }

  CpuBackend backend_{1};
  Device cpu_{&backend_};
  Generator gen_{3};
  fs::path dir_;
};

TEST_F(TensorFileTest, EveryDtypeRoundTripsBitForBit) {
  const Tensor f32 = randn({3, 4}, gen_, kFloat32, cpu_);
  NamedTensorList tensors = {
      {"f32", f32},
      {"f64", randn({5}, gen_, kFloat64, cpu_)},
      {"f16", randn({2, 3}, gen_, kFloat32, cpu_).to(kFloat16)},
      {"bf16", randn({2, 3}, gen_, kFloat32, cpu_).to(kBFloat16)},
      {"i32", from_vector<int32_t>({-7, 0, 2147483647}, {3}, cpu_)},
      {"i64", from_vector<int64_t>({-9007199254740993LL, 42}, {2}, cpu_)},
      {"u8", from_vector<uint8_t>({0, 17, 255}, {3}, cpu_)},
      {"bool", from_vector<uint8_t>({1, 0, 1}, {3}, cpu_).to(kBool)},
      {"scalar", scalar_tensor(41, kInt64, cpu_)},
      {"view", f32.narrow(1, 1, 2)},  // not contiguous: stored as its values
      {"empty", zeros({0, 3}, kFloat32, cpu_)},
  };
  const std::string path = (dir_ / "t.safetensors").string();
  save_tensors(path, tensors, {{"format", "dptrain test"}, {"step", "12"}});
  std::map<std::string, std::string> metadata;
  const NamedTensorList back = load_tensors(path, cpu_, &metadata);
  EXPECT_EQ(metadata, (std::map<std::string, std::string>{{"format", "dptrain test"}, {"step", "12"}}));
  ASSERT_EQ(back.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    EXPECT_EQ(back[i].first, name);
    EXPECT_EQ(back[i].second.dtype(), t.dtype()) << name;
    EXPECT_EQ(back[i].second.shape(), t.shape()) << name;
    EXPECT_EQ(bytes_of(back[i].second), bytes_of(t)) << name;
  }
  EXPECT_EQ(back[9].second.to_vector<float>(), f32.narrow(1, 1, 2).to_vector<float>());
  EXPECT_EQ(std::string(safetensors_dtype_name(kBFloat16)), "BF16");
}

TEST_F(TensorFileTest, WhatCannotBeHeldOrWrittenIsRefusedNamingIt) {
  const std::string path = (dir_ / "bad.safetensors").string();
  EXPECT_ERROR_CONTAINS(save_tensors(path, {{"w", zeros({2}, kFloat32, cpu_)}, {"w", zeros({2}, kFloat32, cpu_)}}),
                        "tensor 'w' is given twice");
  EXPECT_FALSE(fs::exists(path)) << "nothing written when refused";
  SafetensorsFile file;
  file.add("ok", make_safetensors_entry<float>({1}, std::vector<float>{1.0f}));
  file.add("small", make_safetensors_entry<int8_t>({2}, std::vector<int8_t>{1, -1}));
  write_safetensors(path, file);
  EXPECT_ERROR_CONTAINS(load_tensors(path, cpu_), path + ": 'small': dtype I8 has no dptrain tensor");
  EXPECT_ERROR_CONTAINS(load_tensors((dir_ / "missing.safetensors").string(), cpu_), "missing.safetensors");
}

}  // namespace
}  // namespace dp

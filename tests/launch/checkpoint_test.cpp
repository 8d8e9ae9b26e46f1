// Checkpoint directories (NOTE [ Checkpoint layout ] in launch/checkpoint.h): a save reads back
// bit for bit; an existing one is never replaced; listing skips temporaries; pruning keeps the
// newest; and a truncated, bit-flipped, wrong-version, foreign or incomplete checkpoint is
// refused naming the file and the problem.
#include "launch/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/expect_error.h"
#include "common/run_program.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/ops/creation.h"

namespace dp {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::make_test_dir("dptrain_checkpoint"); }
  void TearDown() override { fs::remove_all(dir_); }

  std::string checkpoints() const { return (dir_ / "checkpoints").string(); }
  Checkpoint sample(int64_t step) {
    Checkpoint c;
    c.position = {step, 2, 5, 4321};
    c.world_size = 2;
    c.config_hash = 0xfedcba9876543210ull;
    c.facts = {{"model", "resnet18"}};
    c.model = {{"conv1.weight", randn({4, 3, 3, 3}, gen_, kFloat32, cpu_)},
               {"bn1.num_batches_tracked", scalar_tensor(7, kInt64, cpu_)}};
    c.state = {{"optimizer.state.0.momentum_buffer", randn({4, 3, 3, 3}, gen_, kFloat32, cpu_)},
               {"scaler.scale", scalar_tensor(65536, kFloat32, cpu_)}};
    return c;
  }
  static void expect_same(const NamedTensorList& a, const NamedTensorList& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].first, b[i].first);
      EXPECT_EQ(to_safetensors_entry(a[i].second).data, to_safetensors_entry(b[i].second).data) << a[i].first;
    }
  }
  // Rewrites the manifest through `edit` (a text replacement).
  static void edit_manifest(const std::string& dir, const std::string& from, const std::string& to) {
    const fs::path p = fs::path(dir) / "checkpoint.json";
    std::string text = testing::read_text_file(p);
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << text;
    text.replace(at, from.size(), to);
    std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
  }

  CpuBackend backend_{1};
  Device cpu_{&backend_};
  Generator gen_{11};
  fs::path dir_;
};

TEST_F(CheckpointTest, ASaveReadsBackBitForBit) {
  const Checkpoint saved = sample(12);
  const std::string path = save_checkpoint(checkpoints(), saved);
  EXPECT_EQ(fs::path(path).filename(), "step_000000012");
  EXPECT_EQ(list_checkpoints(checkpoints()), std::vector<std::string>{path});
  const Checkpoint back = load_checkpoint(path, cpu_);
  EXPECT_EQ(back.position.step, 12);
  EXPECT_EQ(back.position.epoch, 2);
  EXPECT_EQ(back.position.step_in_epoch, 5);
  EXPECT_EQ(back.position.samples, 4321);
  EXPECT_EQ(back.world_size, 2);
  EXPECT_EQ(back.config_hash, saved.config_hash);
  EXPECT_EQ(back.facts, saved.facts);
  expect_same(back.model, saved.model);
  expect_same(back.state, saved.state);
  // Nothing but the checkpoint is left behind.
  EXPECT_EQ(std::distance(fs::directory_iterator(checkpoints()), fs::directory_iterator()), 1);
  EXPECT_EQ(std::distance(fs::directory_iterator(path), fs::directory_iterator()), 3);
}

TEST_F(CheckpointTest, AnExistingCheckpointIsNeverReplaced) {
  const std::string path = save_checkpoint(checkpoints(), sample(3));
  const std::string before = testing::read_text_file(fs::path(path) / "checkpoint.json");
  EXPECT_ERROR_CONTAINS(save_checkpoint(checkpoints(), sample(3)), "step_000000003' exists already");
  EXPECT_EQ(testing::read_text_file(fs::path(path) / "checkpoint.json"), before);
  EXPECT_EQ(std::distance(fs::directory_iterator(checkpoints()), fs::directory_iterator()), 1) << "no temporary left";
}

TEST_F(CheckpointTest, ListingSkipsTemporariesAndPruningKeepsTheNewest) {
  for (int64_t step : {30, 4, 100}) save_checkpoint(checkpoints(), sample(step));
  fs::create_directories(fs::path(checkpoints()) / "step_000000200.tmp.123");  // a save killed midway
  std::ofstream(fs::path(checkpoints()) / "notes.txt") << "mine";
  fs::create_directories(fs::path(checkpoints()) / "step_x");
  const std::vector<std::string> all = list_checkpoints(checkpoints());
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(fs::path(all[0]).filename(), "step_000000004");
  EXPECT_EQ(fs::path(all[2]).filename(), "step_000000100");
  EXPECT_EQ(prune_checkpoints(checkpoints(), 2), std::vector<std::string>{all[0]});
  EXPECT_EQ(list_checkpoints(checkpoints()), (std::vector<std::string>{all[1], all[2]}));
  EXPECT_TRUE(fs::exists(fs::path(checkpoints()) / "notes.txt"));
  EXPECT_EQ(remove_unfinished_saves(checkpoints()),
            std::vector<std::string>{(fs::path(checkpoints()) / "step_000000200.tmp.123").string()});
  EXPECT_EQ(list_checkpoints(checkpoints()).size(), 2u);
  EXPECT_TRUE(fs::exists(fs::path(checkpoints()) / "step_x")) << "not ours: left alone";
  EXPECT_TRUE(list_checkpoints((dir_ / "none").string()).empty());
  EXPECT_ERROR_CONTAINS(prune_checkpoints(checkpoints(), 0), "keep must be at least 1");
}

TEST_F(CheckpointTest, DamagedOrForeignCheckpointsAreRefusedNamingFileAndProblem) {
  auto fresh = [&](int64_t step) { return save_checkpoint(checkpoints(), sample(step)); };
  // Truncated.
  const std::string truncated = fresh(1);
  const fs::path model = fs::path(truncated) / "model.safetensors";
  fs::resize_file(model, fs::file_size(model) - 10);
  EXPECT_ERROR_CONTAINS(load_checkpoint(truncated, cpu_), model.string() + "' has ");
  EXPECT_ERROR_CONTAINS(load_checkpoint(truncated, cpu_), "(truncated or replaced)");
  // One bit flipped in the data.
  const std::string flipped = fresh(2);
  const fs::path state = fs::path(flipped) / "state.safetensors";
  {
    std::fstream f(state, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(-3, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(-3, std::ios::end);
    f.write(&c, 1);
  }
  EXPECT_ERROR_CONTAINS(load_checkpoint(flipped, cpu_), state.string() + "' does not match its digest");
  // Another format version.
  const std::string future = fresh(3);
  edit_manifest(future, "\"format_version\": 1", "\"format_version\": 99");
  EXPECT_ERROR_CONTAINS(load_checkpoint(future, cpu_), "format version 99 (written by dptrain 0.1.0); this dptrain");
  // Not a checkpoint at all, or one whose manifest never got written.
  const std::string foreign = fresh(4);
  edit_manifest(foreign, "dptrain checkpoint", "something else");
  EXPECT_ERROR_CONTAINS(load_checkpoint(foreign, cpu_), "is not a dptrain checkpoint manifest");
  const std::string incomplete = fresh(5);
  fs::remove(fs::path(incomplete) / "checkpoint.json");
  EXPECT_ERROR_CONTAINS(load_checkpoint(incomplete, cpu_), "cannot read its manifest");
  const std::string garbled = fresh(6);
  std::ofstream(fs::path(garbled) / "checkpoint.json", std::ios::trunc) << "{\"format\": ";
  EXPECT_ERROR_CONTAINS(load_checkpoint(garbled, cpu_), "is not valid JSON");
  // The manifest is covered by its own digest: an edited position is refused.
  const std::string edited = fresh(10);
  edit_manifest(edited, "\"epoch\": 2", "\"epoch\": 99");
  EXPECT_ERROR_CONTAINS(load_checkpoint(edited, cpu_), "checkpoint.json does not match its own digest (edited or corrupt)");
  // Manifests written before that digest (older dptrain) are read, their entries checked.
  const auto without_digest = [&](int64_t step) {
    const std::string dir = fresh(step);
    edit_manifest(dir, "\"manifest_fnv1a64\"", "\"unused_entry\"");
    return dir;
  };
  const std::string lacking = without_digest(7);
  edit_manifest(lacking, "\"step_in_epoch\"", "\"steps_in_epoch\"");
  EXPECT_ERROR_CONTAINS(load_checkpoint(lacking, cpu_), "lacks or mistypes an entry");
  const std::string negative = without_digest(11);
  edit_manifest(negative, "\"step\": 11", "\"step\": -5");
  EXPECT_ERROR_CONTAINS(load_checkpoint(negative, cpu_), "holds an impossible position or world size (step -5, epoch 2");
  const std::string no_ranks = without_digest(12);
  edit_manifest(no_ranks, "\"world_size\": 2", "\"world_size\": 0");
  EXPECT_ERROR_CONTAINS(load_checkpoint(no_ranks, cpu_), "world size 0)");
  // Written before dptrain counted the samples trained: the count is unknown, not an error.
  const std::string uncounted = without_digest(9);
  edit_manifest(uncounted, "\"samples\"", "\"unknown_key\"");
  EXPECT_EQ(load_checkpoint(uncounted, cpu_).position.samples, -1);
  EXPECT_EQ(load_checkpoint(without_digest(13), cpu_).position.step, 13);
  const std::string missing_file = fresh(8);
  fs::remove(fs::path(missing_file) / "state.safetensors");
  EXPECT_ERROR_CONTAINS(load_checkpoint(missing_file, cpu_), "state.safetensors' is missing");
}

// A save that cannot complete (here: the place for it is a file) leaves nothing half-written and
// the earlier checkpoints as they were.
TEST_F(CheckpointTest, AFailedSaveLeavesTheEarlierCheckpoints) {
  const std::string first = save_checkpoint(checkpoints(), sample(1));
  Checkpoint bad = sample(2);
  bad.model.emplace_back("conv1.weight", zeros({1}, kFloat32, cpu_));  // a duplicated name: refused midway
  EXPECT_ERROR_CONTAINS(save_checkpoint(checkpoints(), bad), "tensor 'conv1.weight' is given twice");
  EXPECT_EQ(list_checkpoints(checkpoints()), std::vector<std::string>{first});
  EXPECT_EQ(std::distance(fs::directory_iterator(checkpoints()), fs::directory_iterator()), 1) << "no temporary left";
  EXPECT_NO_THROW(load_checkpoint(first, cpu_));
  std::ofstream(dir_ / "a_file") << "x";
  EXPECT_ERROR_CONTAINS(save_checkpoint((dir_ / "a_file").string(), sample(3)), "cannot create");
}

}  // namespace
}  // namespace dp

// End-to-end, NOTE [ Evaluating weights ] (launch/evaluate_command.h): `dptrain evaluate` gives the
// accuracy, loss and model digest that training reported for the same weights — from the weights
// file, from a checkpoint, on one process and on 3 ranks — writes nothing, and refuses damaged or
// unfitting weights naming the option and the file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/run_program.h"

namespace {

namespace fs = std::filesystem;
using dp::testing::dptrain_binary;
using dp::testing::model_digest;
using dp::testing::ProgramResult;
using dp::testing::run_program;
using dp::testing::test_accuracy;
using ::testing::HasSubstr;
using ::testing::Not;

// "(loss 0.7280)" after the first "test accuracy" in dptrain's output; empty when absent.
std::string test_loss_text(const std::string& output) {
  const size_t at = output.find("test accuracy");
  const size_t loss = at == std::string::npos ? at : output.find("(loss ", at);
  return loss == std::string::npos ? "" : output.substr(loss, output.find(')', loss) - loss + 1);
}

// Flips `mask`'s bits of the byte `from_end` bytes before the end of `file` (inside the last
// tensor's data of a safetensors file).
void flip_bit(const fs::path& file, int from_end, int mask) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-from_end, std::ios::end);
  char c = 0;
  f.read(&c, 1);
  f.seekp(-from_end, std::ios::end);
  c = static_cast<char>(c ^ mask);
  f.write(&c, 1);
}

// Every file under `dir` with its size: what evaluating must leave as it was.
std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    std::string entry = e.path().string();
    if (e.is_regular_file()) entry.append(1, ' ').append(std::to_string(e.file_size()));
    files.push_back(entry);
  }
  std::sort(files.begin(), files.end());
  return files;
}

class Evaluate : public ::testing::Test {
 protected:
  // One training run shared by the tests: an MLP on Fashion-MNIST, 12 steps with checkpoints at
  // steps 6 and 12 and the final weights, evaluated at its end.
  static void SetUpTestSuite() {
    // (make_test_dir names the folder after the current test, and none runs yet.)
    dir_ = new fs::path(fs::temp_directory_path() / ("dptrain_evaluate_" + std::to_string(getpid())));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    std::ofstream(*dir_ / "c.yaml") << "run: {output_dir: " << (*dir_ / "out").string()
                                    << ", threads: 1, epochs: 1, max_steps: 12, checkpoint_every: 6}\n"
                                    << "data: {batch_size: 1000, eval_batch_size: 2500}\n"
                                    << "model: {name: mlp, mlp_hidden: [32]}\n";
    trained_ = new ProgramResult(run_program(dptrain_binary() + " --config " + recipe()));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete trained_;
  }
  void SetUp() override { ASSERT_EQ(trained_->exit_code, 0) << trained_->output; }

  static std::string recipe() { return (*dir_ / "c.yaml").string(); }
  static fs::path out() { return *dir_ / "out"; }
  static ProgramResult evaluate(const std::string& args) {
    return run_program(dptrain_binary() + " evaluate --config " + recipe() + " " + args);
  }

  static fs::path* dir_;
  static ProgramResult* trained_;
};

fs::path* Evaluate::dir_ = nullptr;
ProgramResult* Evaluate::trained_ = nullptr;

TEST_F(Evaluate, TheWeightsFileGivesWhatTrainingReportedAndNothingIsWritten) {
  const std::vector<std::string> before = listing(out());
  const ProgramResult r = evaluate("--weights " + (out() / "model.safetensors").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(model_digest(r.output), model_digest(trained_->output)) << r.output;
  EXPECT_EQ(test_accuracy(r.output), test_accuracy(trained_->output)) << r.output;
  EXPECT_EQ(test_loss_text(r.output), test_loss_text(trained_->output)) << r.output;
  EXPECT_THAT(r.output, HasSubstr("evaluation: 10000 samples"));
  EXPECT_EQ(listing(out()), before);  // no metrics file moved aside, nothing new
  // The weights and the checkpoints' model files record Fashion-MNIST's class names, in label order.
  const std::string names = R"("classes":"[\"T-shirt/top\",\"Trouser\",\"Pullover\",)";
  EXPECT_THAT(dp::testing::read_text_file(out() / "model.safetensors"), HasSubstr(names));
  EXPECT_THAT(dp::testing::read_text_file(out() / "checkpoints" / "step_000000012" / "model.safetensors"),
              HasSubstr(names));
}

TEST_F(Evaluate, ACheckpointGivesItsStepsModel) {
  const ProgramResult newest = evaluate("--checkpoint auto");
  ASSERT_EQ(newest.exit_code, 0) << newest.output;
  EXPECT_THAT(newest.output, HasSubstr("from checkpoint " + (out() / "checkpoints" / "step_000000012").string()));
  EXPECT_EQ(model_digest(newest.output), model_digest(trained_->output));
  EXPECT_EQ(test_accuracy(newest.output), test_accuracy(trained_->output));

  // The older one is another model; its model.safetensors (with its model's digest) loads as
  // weights too.
  const fs::path older = out() / "checkpoints" / "step_000000006";
  const ProgramResult r = evaluate("--checkpoint " + older.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(model_digest(r.output), model_digest(trained_->output));
  const ProgramResult weights = evaluate("--weights " + (older / "model.safetensors").string());
  ASSERT_EQ(weights.exit_code, 0) << weights.output;
  EXPECT_EQ(model_digest(weights.output), model_digest(r.output));
  EXPECT_EQ(test_loss_text(weights.output), test_loss_text(r.output));
  EXPECT_THAT(dp::testing::read_text_file(older / "model.safetensors"),
              HasSubstr("\"model_digest\":\"" + model_digest(r.output) + "\""));

  // A checkpoint directory given as --weights is named for what it is.
  const ProgramResult directory = evaluate("--weights " + older.string());
  EXPECT_EQ(directory.exit_code, 1) << directory.output;
  EXPECT_THAT(directory.output, HasSubstr("is a directory, not a weights file (a checkpoint: evaluate it with "
                                          "--checkpoint " + older.string() + ")"));
}

// One bit of a checkpoint's model file flipped: refused as --weights (its recorded digest) and as
// --checkpoint (the manifest's file digest).
TEST_F(Evaluate, ADamagedCheckpointModelIsRefusedEitherWay) {
  const fs::path copy = *dir_ / "damaged_checkpoint";
  fs::remove_all(copy);
  fs::copy(out() / "checkpoints" / "step_000000006", copy);
  flip_bit(copy / "model.safetensors", 4, 4);
  const ProgramResult weights = evaluate("--weights " + (copy / "model.safetensors").string());
  EXPECT_EQ(weights.exit_code, 1) << weights.output;
  EXPECT_THAT(weights.output, HasSubstr("records model digest"));
  const ProgramResult checkpoint = evaluate("--checkpoint " + copy.string());
  EXPECT_EQ(checkpoint.exit_code, 1) << checkpoint.output;
  EXPECT_THAT(checkpoint.output, HasSubstr("--checkpoint: "));
  EXPECT_THAT(checkpoint.output, HasSubstr("model.safetensors"));
}

TEST_F(Evaluate, JsonIsOneObjectWithTheFigures) {
  const ProgramResult r = evaluate("--weights " + (out() / "model.safetensors").string() + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);  // the whole output: one line, nothing else
  EXPECT_EQ(j.at("event"), "evaluation");
  EXPECT_EQ(j.at("kind"), "weights");
  EXPECT_EQ(j.at("model"), "mlp");
  EXPECT_EQ(j.at("model_digest"), model_digest(trained_->output));
  EXPECT_EQ(j.at("samples"), 10000);
  EXPECT_EQ(j.at("count"), 10000);
  EXPECT_EQ(j.at("ranks"), 1);
  EXPECT_NEAR(j.at("accuracy").get<double>() * 100.0, test_accuracy(trained_->output), 0.005);
  EXPECT_EQ(j.at("skipped_files"), 0);
  EXPECT_EQ(j.at("decode_warnings"), 0);
  EXPECT_TRUE(j.at("accuracy_top5").is_null());  // 10 classes: not counted

  // The result is the command's product: a full disk does not pass for success.
  const ProgramResult full = evaluate("--weights " + (out() / "model.safetensors").string() + " --json > /dev/full");
  EXPECT_EQ(full.exit_code, 1) << full.output;  // (its message went to /dev/full too)
}

// Three ranks: the recipe's training batch (1000) does not divide by them, which must not matter,
// and the 10000 test samples split unevenly (3334, 3333, 3333).
TEST_F(Evaluate, ThreeRanksGiveOneProcesssFigures) {
  const ProgramResult r = run_program(dp::testing::mpirun(3) + dptrain_binary() + " evaluate --config " + recipe() +
                                      " --weights " + (out() / "model.safetensors").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("3 ranks"));
  EXPECT_EQ(model_digest(r.output), model_digest(trained_->output));
  EXPECT_EQ(test_accuracy(r.output), test_accuracy(trained_->output));
}

TEST_F(Evaluate, DamagedOrUnfittingWeightsAreClearErrors) {
  // One bit of the last tensor flipped: the recorded digest no longer fits.
  const fs::path bad = *dir_ / "flipped.safetensors";
  fs::copy_file(out() / "model.safetensors", bad, fs::copy_options::overwrite_existing);
  flip_bit(bad, 8, 1);
  ProgramResult r = evaluate("--weights " + bad.string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--weights: " + bad.string() + " records model digest " +
                                  model_digest(trained_->output) + " but its tensors give"));
  // The same file as model.init_from of a training run: refused before training, naming the key.
  r = run_program(dptrain_binary() + " --config " + recipe() + " --set model.init_from=" + bad.string() +
                  " --set run.output_dir=" + (*dir_ / "init").string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("model.init_from: " + bad.string() + " records model digest"));
  EXPECT_THAT(r.output, Not(HasSubstr("epoch 1/")));

  r = evaluate("--weights " + (out() / "model.safetensors").string() + " --set model.mlp_hidden=[16]");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--weights: " + (out() / "model.safetensors").string() +
                                  " does not fit the recipe's model mlp with 10 classes"));
  r = evaluate("--weights " + (out() / "model.safetensors").string() +
               " --set model.name=small_cnn --set model.mlp_hidden=[1024,1024]");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--weights: " + (out() / "model.safetensors").string() + " holds the weights of "
                                  "model mlp, not of the recipe's model small_cnn with 10 classes"));
  r = evaluate("--checkpoint auto --set model.name=small_cnn --set model.mlp_hidden=[1024,1024]");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("holds model mlp with 10 classes; the recipe builds model small_cnn"));
  r = evaluate("--weights " + (*dir_ / "absent.safetensors").string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--weights: '" + (*dir_ / "absent.safetensors").string() + "' does not exist"));
  EXPECT_THAT(r.output, Not(HasSubstr("model mlp:")));  // found before the run is built
}

TEST_F(Evaluate, AnEvalRootFashionMnistDoesNotReadIsRefused) {
  const ProgramResult r = evaluate("--weights " + (out() / "model.safetensors").string() +
                                   " --set data.eval_root=" + out().string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("data.eval_root is read by data.dataset image_folder and text only; "
                                  "fashion_mnist has its own test split"));
}

TEST_F(Evaluate, NothingToEvaluateOrNoCheckpointIsSaid) {
  ProgramResult r = evaluate("");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("nothing to evaluate: give --weights FILE"));
  r = evaluate("--checkpoint auto --set run.output_dir=" + (*dir_ / "empty").string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--checkpoint auto: no complete checkpoint under"));
  EXPECT_FALSE(fs::exists(*dir_ / "empty"));  // nothing created either
  // Without an option, the recipe's model.init_from is what is evaluated.
  r = evaluate("--set model.init_from=" + (out() / "model.safetensors").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(model_digest(r.output), model_digest(trained_->output));
}

// NOTE [ Top-5 accuracy ]: a model with more than 10 classes reports top-5 too — epoch line,
// metrics record, `dptrain evaluate` (the same figure) — and Fashion-MNIST's 10 classes do not.
TEST(Top5Accuracy, IsReportedForMoreThanTenClassesAndEvaluateGivesTheSameFigure) {
  const fs::path dir = dp::testing::make_test_dir("dptrain_top5");
  const ProgramResult made = run_program(fs::path(dptrain_binary()).parent_path().string() +
                                         "/make_image_folder --source synthetic --classes 12 --width 32 --height 32 "
                                         "--train-limit 600 --val-limit 240 --out " + (dir / "data").string());
  ASSERT_EQ(made.exit_code, 0) << made.output;
  std::ofstream(dir / "c.yaml") << "run: {output_dir: " << (dir / "out").string() << ", threads: 2, epochs: 2}\n"
                                << "data: {dataset: image_folder, root: " << (dir / "data").string()
                                << ", batch_size: 50, eval_batch_size: 60, image_size: 28, eval_resize_size: 32,"
                                << " eval_image_size: 28}\n"
                                << "model: {name: small_cnn, num_classes: 12}\n"
                                << "optimizer: {name: sgd, lr: 0.05, momentum: 0.9}\n";
  const ProgramResult trained = run_program(dptrain_binary() + " --config " + (dir / "c.yaml").string());
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  // "epoch 2/2: ..., test accuracy A % (loss L), top-5 T %, ..."
  const size_t epoch2 = trained.output.find("epoch 2/2: ");
  ASSERT_NE(epoch2, std::string::npos) << trained.output;
  const size_t top5_at = trained.output.find(", top-5 ", epoch2);
  ASSERT_NE(top5_at, std::string::npos) << trained.output;
  const std::string top5 = trained.output.substr(top5_at, trained.output.find('%', top5_at) - top5_at + 1);
  const double top5_percent = std::stod(top5.substr(8));
  EXPECT_GE(top5_percent, test_accuracy(trained.output.substr(epoch2)));
  EXPECT_LE(top5_percent, 100.0);

  const std::string metrics = dp::testing::read_text_file(dir / "out" / "metrics.jsonl");
  nlohmann::json last_epoch;
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (record.at("event") == "epoch") last_epoch = record;
  }
  ASSERT_TRUE(last_epoch.contains("test_accuracy_top5")) << metrics;
  EXPECT_NEAR(last_epoch.at("test_accuracy_top5").get<double>() * 100.0, top5_percent, 0.005);

  const ProgramResult evaluated = run_program(dptrain_binary() + " evaluate --config " + (dir / "c.yaml").string() +
                                              " --weights " + (dir / "out" / "model.safetensors").string());
  ASSERT_EQ(evaluated.exit_code, 0) << evaluated.output;
  EXPECT_THAT(evaluated.output, HasSubstr(top5 + ", ")) << trained.output;
  EXPECT_THAT(evaluated.output, HasSubstr("evaluation: 240 samples"));

  // data.eval_root: another folder of the same classes (here the training images) instead of val/.
  const ProgramResult other = run_program(dptrain_binary() + " evaluate --config " + (dir / "c.yaml").string() +
                                          " --weights " + (dir / "out" / "model.safetensors").string() +
                                          " --set data.eval_root=" + (dir / "data" / "train").string());
  ASSERT_EQ(other.exit_code, 0) << other.output;
  EXPECT_THAT(other.output, HasSubstr("evaluation: 600 samples"));
  fs::remove_all(dir);
}

TEST_F(Evaluate, TenClassesReportNoTop5) {
  EXPECT_THAT(trained_->output, Not(HasSubstr("top-5")));
  EXPECT_THAT(dp::testing::read_text_file(out() / "metrics.jsonl"), Not(HasSubstr("top5")));
}

}  // namespace

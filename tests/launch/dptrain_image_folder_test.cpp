// End-to-end: data.dataset image_folder (ImageNet's layout, written from Fashion-MNIST by the
// make_image_folder tool) trains, evaluates every epoch, stops at run.target_accuracy, and
// writes an MLLOG file our checker accepts; the shipped ResNet-50 recipes' hyperparameters obey
// the MLPerf rules; bad folders stop the run naming what is wrong.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/run_program.h"
#include "launch/config.h"
#include "launch/mllog.h"
#include "launch/mllog_checker.h"

namespace {

namespace fs = std::filesystem;
using dp::testing::dptrain_binary;
using dp::testing::ProgramResult;
using dp::testing::run_program;
using ::testing::HasSubstr;

class ImageFolderRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // 4000 training and 500 validation images, 32x32 RGB JPEG, shared by the tests below.
    // (make_test_dir names the directory after the current test, which a suite set-up has not.)
    data_ = fs::temp_directory_path() / ("dptrain_image_folder_data_" + std::to_string(::getpid())) / "fmnist32";
    fs::remove_all(data_.parent_path());
    fs::create_directories(data_.parent_path());
    const ProgramResult made =
        run_program(fs::path(dptrain_binary()).parent_path().string() + "/make_image_folder --source fashion_mnist --out " +
                    data_.string() + " --size 32 --train-limit 4000 --val-limit 500");
    ASSERT_EQ(made.exit_code, 0) << made.output;
    ASSERT_THAT(made.output, HasSubstr("4000 train and 500 val JPEG images"));
  }
  static void TearDownTestSuite() { fs::remove_all(data_.parent_path()); }
  void SetUp() override { dir_ = dp::testing::make_test_dir("dptrain_image_folder"); }
  void TearDown() override { fs::remove_all(dir_); }

  // SmallCNN (3 input channels, 28x28 crops) with the MLPerf LARS form of the ResNet recipe.
  // `overrides`: extra command-line arguments (--set ...).
  ProgramResult run(const std::string& name, const std::string& overrides = "", const fs::path& root = data_,
                    const std::string& schedule = "epochs: 8, target_accuracy: 0.759") {
    const fs::path p = dir_ / (name + ".yaml");
    std::ofstream(p) << "run: {output_dir: " << (dir_ / name).string() << ", threads: 2, log_every: 40, eval_every: 1, "
                     << schedule << "}\n"
                     << "data: {dataset: image_folder, root: " << root.string()
                     << ", batch_size: 50, eval_batch_size: 100, image_size: 28, eval_resize_size: 32,"
                     << " eval_image_size: 28, crop_scale: [0.5, 1]}\n"
                     << "model: {name: small_cnn, num_classes: 10}\n"
                     << "optimizer: {name: lars, lr: 8.0, weight_decay: 0.0001, eps: 0, exclude_1d: false}\n"
                     << "schedule: {name: poly, warmup_epochs: 0.5, power: 2, min_lr: 0.0001}\n"
                     << "loss: {label_smoothing: 0.1}\n"
                     << "logging: {mllog: mllog.log}\n";
    return run_program(dptrain_binary() + " --config " + p.string() + " " + overrides);
  }

  static fs::path data_;
  fs::path dir_;
};
fs::path ImageFolderRun::data_;

TEST_F(ImageFolderRun, TrainsToTheTargetAndWritesACompliantMllog) {
  const ProgramResult r = run("lars");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("model small_cnn: "));
  EXPECT_THAT(r.output, HasSubstr("4000 training / 500 test samples, 80 steps per epoch"));
  EXPECT_THAT(r.output, HasSubstr("target accuracy 75.90 % reached after epoch "));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("epoch 8/8:")));  // stopped early
  EXPECT_THAT(dp::testing::read_text_file(dir_ / "lars" / "metrics.jsonl"), HasSubstr("\"reason\":\"target_reached\""));
  const std::string log = (dir_ / "lars" / "mllog.log").string();
  const dp::MlCheckReport report = dp::check_mllog_file(log, dp::MlBenchmark::kResnet);
  std::string violations;
  for (const dp::MlViolation& v : report.violations) violations += v.str() + "\n";
  EXPECT_TRUE(report.compliant()) << violations;
  EXPECT_THAT(dp::testing::read_text_file(log), HasSubstr("\"key\": \"run_stop\", \"value\": null, \"metadata\": {\"file\": \"trainer.cpp\""));
  EXPECT_THAT(dp::testing::read_text_file(log), HasSubstr("\"status\": \"success\"}}"));
  // The program's own checker agrees.
  const ProgramResult checked = run_program(dptrain_binary() + " check-mllog " + log + " --benchmark resnet");
  EXPECT_EQ(checked.exit_code, 0) << checked.output;
}

TEST_F(ImageFolderRun, AnUnreachedTargetEndsTheLogAborted) {
  // Two epochs with the target out of reach: run_stop says aborted, and the checker names the
  // missing result.
  const ProgramResult r = run("unreached", "", data_, "epochs: 2, target_accuracy: 0.99");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("epoch 2/2:"));
  const std::string log = (dir_ / "unreached" / "mllog.log").string();
  const dp::MlCheckReport report = dp::check_mllog_file(log, dp::MlBenchmark::kResnet);
  EXPECT_FALSE(report.compliant());
  EXPECT_TRUE(report.has("result"));
  EXPECT_THAT(dp::testing::read_text_file(log), HasSubstr("\"status\": \"aborted\"}}"));
  EXPECT_THAT(dp::testing::read_text_file(dir_ / "unreached" / "metrics.jsonl"), HasSubstr("\"reason\":\"completed\""));
}

TEST_F(ImageFolderRun, BadFoldersStopTheRunNamingWhatIsWrong) {
  // No val/ beside train/.
  const fs::path partial = dir_ / "partial";
  fs::create_directories(partial);
  fs::copy(data_ / "train", partial / "train", fs::copy_options::recursive);
  ProgramResult r = run("no_val", "", partial);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("image folder " + (partial / "val").string() + ": does not exist"));
  // A val/ whose classes are not train's.
  fs::copy(data_ / "val", partial / "val", fs::copy_options::recursive);
  fs::rename(partial / "val" / "9_Ankle-boot", partial / "val" / "9_Boot");
  r = run("mismatch", "", partial);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("class 9 is '9_Boot' here but '9_Ankle-boot' in training"));
  fs::rename(partial / "val" / "9_Boot", partial / "val" / "9_Ankle-boot");
  // A truncated training image: the error names the file (the loader's batch and epoch too);
  // with data.skip_bad_files it is skipped and counted.
  const fs::path victim = *fs::directory_iterator(partial / "train" / "3_Dress");
  fs::resize_file(victim, fs::file_size(victim) / 2);
  r = run("truncated", "", partial);
  EXPECT_NE(r.exit_code, 0);
  // (Cut in half, this small file loses its scan header: "not a readable JPEG: ... missing SOS".)
  EXPECT_THAT(r.output, ::testing::MatchesRegex(".*DataLoader: loading batch [0-9]+ of epoch [0-9]+ failed: " +
                                                victim.string() + ": not a readable JPEG: .*"));
  r = run("skipped", "--set data.skip_bad_files=true --set run.epochs=1", partial);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("unreadable files skipped (data.skip_bad_files): 1 training this epoch, 0 test; "
                                  "the first: " + victim.string()));
}

// Bytes inserted before a JPEG's end marker: libjpeg warns ("Corrupt JPEG data: 14 extraneous
// bytes before marker 0xd9") and decodes every pixel. The run trains on it, as PIL would, and the
// epoch line and record count such files of both splits and name the first.
TEST_F(ImageFolderRun, DamagedButDecodableJpegsAreUsedAndReported) {
  const fs::path damaged = dir_ / "damaged";
  fs::create_directories(damaged);
  fs::copy(data_, damaged, fs::copy_options::recursive);
  auto damage = [](const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    bytes.insert(bytes.end() - 2, 16, '\x5A');  // (16: see tests/runtime/data/jpeg_test.cpp)
    std::ofstream(file, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  };
  const fs::path train_victim = *fs::directory_iterator(damaged / "train" / "3_Dress");
  const fs::path val_victim = *fs::directory_iterator(damaged / "val" / "7_Sneaker");
  damage(train_victim);
  damage(val_victim);
  const ProgramResult r = run("damaged", "--set run.epochs=1", damaged);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string said = "JPEG files decoded with a libjpeg warning (damaged data, used as decoded, as PIL does): "
                           "1 training this epoch, 1 test; ";
  EXPECT_THAT(r.output, HasSubstr(said + "the first: " + train_victim.string() + ": Corrupt JPEG data: "));
  EXPECT_THAT(dp::testing::read_text_file(dir_ / "damaged" / "metrics.jsonl"),
              HasSubstr("\"decode_warnings\":{\"test\":1,\"train\":1}"));
  // Two ranks: each loads its own shard, and the counts are added over them.
  const ProgramResult two = run_program(dp::testing::mpirun(2) + dptrain_binary() + " --config " +
                                        (dir_ / "damaged.yaml").string() + " --set run.epochs=1 --set run.threads=1" +
                                        " --set run.output_dir=" + (dir_ / "damaged2").string());
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_THAT(two.output, HasSubstr(said));
  // dptrain evaluate says it of the test files.
  const ProgramResult evaluated =
      run_program(dptrain_binary() + " evaluate --config " + (dir_ / "damaged.yaml").string() + " --weights " +
                  (dir_ / "damaged" / "model.safetensors").string());
  ASSERT_EQ(evaluated.exit_code, 0) << evaluated.output;
  EXPECT_THAT(evaluated.output, HasSubstr("test files: 0 skipped as unreadable (data.skip_bad_files: replaced by the "
                                          "next readable ones), 1 decoded with a libjpeg warning (damaged data, used "
                                          "as decoded, as PIL does); the first damaged: " + val_victim.string()));
  // The undamaged folder says nothing of the kind.
  const ProgramResult clean = run("clean", "--set run.epochs=1");
  ASSERT_EQ(clean.exit_code, 0) << clean.output;
  EXPECT_THAT(clean.output, ::testing::Not(HasSubstr("libjpeg warning")));
}

// The class names a safetensors file records (its metadata entry `classes`, a JSON list).
std::vector<std::string> recorded_classes(const fs::path& weights) {
  std::ifstream in(weights, std::ios::binary);
  uint64_t header_bytes = 0;
  in.read(reinterpret_cast<char*>(&header_bytes), sizeof header_bytes);
  std::string header(header_bytes, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_bytes));
  const nlohmann::json metadata = nlohmann::json::parse(header).at("__metadata__");
  return nlohmann::json::parse(metadata.at("classes").get<std::string>()).get<std::vector<std::string>>();
}

// NOTE [ Evaluating weights ]: the weights record the training set's class names; `dptrain
// evaluate` takes a validation folder alone (no train/ beside it) with its own class folders as
// the classes, gives the figures training gave, and refuses a folder whose classes differ from
// the recorded ones (every label would mean another class).
TEST_F(ImageFolderRun, AValidationFolderAloneIsEvaluatedAgainstTheRecordedClasses) {
  const ProgramResult trained = run("trained", "", data_, "epochs: 1");
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const fs::path weights = dir_ / "trained" / "model.safetensors";
  const std::vector<std::string> classes = recorded_classes(weights);
  ASSERT_EQ(classes.size(), 10u);
  EXPECT_EQ(classes.front(), "0_T-shirt-top");
  EXPECT_EQ(classes.back(), "9_Ankle-boot");

  const fs::path alone = dir_ / "val_only";
  fs::create_directories(alone);
  fs::copy(data_ / "val", alone / "val", fs::copy_options::recursive);
  const std::string evaluate = dptrain_binary() + " evaluate --config " + (dir_ / "trained.yaml").string() +
                               " --weights " + weights.string() + " --set data.root=" + alone.string();
  const ProgramResult r = run_program(evaluate);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("classes: the 10 class folders of " + (alone / "val").string() + " (" +
                                  (alone / "train").string() + " does not exist)"));
  EXPECT_THAT(r.output, HasSubstr("evaluation: 500 samples: "));
  EXPECT_EQ(dp::testing::model_digest(r.output), dp::testing::model_digest(trained.output));
  EXPECT_DOUBLE_EQ(dp::testing::test_accuracy(r.output),
                   dp::testing::test_accuracy(trained.output.substr(trained.output.find("epoch 1/1: "))));

  // A class folder renamed: refused, naming the label.
  fs::rename(alone / "val" / "9_Ankle-boot", alone / "val" / "9_Boot");
  const ProgramResult renamed = run_program(evaluate);
  EXPECT_EQ(renamed.exit_code, 1) << renamed.output;
  EXPECT_THAT(renamed.output, HasSubstr("--weights: " + weights.string() + " records the classes it was trained on, "
                                        "and image folder " + (alone / "val").string()));
  EXPECT_THAT(renamed.output, HasSubstr("label 9 is '9_Ankle-boot' in training and '9_Boot' here"));
  // A class folder missing: the same.
  fs::remove_all(alone / "val" / "9_Boot");
  const ProgramResult missing = run_program(evaluate);
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_THAT(missing.output, HasSubstr("training had 10 classes, this set has 9 (the first only in training: "
                                        "'9_Ankle-boot')"));
}

// NOTE [ Resuming a run ]: a checkpoint records the samples its run read (count and content
// digest), so a resumed run on changed data is refused instead of silently drawing another
// order; the folder may move (data.root), and the run then ends where the uninterrupted one does.
TEST_F(ImageFolderRun, ResumingNeedsTheSameSamplesWhereverTheFolderIs) {
  const fs::path copy = dir_ / "copy";
  fs::copy(data_, copy, fs::copy_options::recursive);
  const std::string deterministic = " --set run.deterministic=true";
  const ProgramResult whole = run("whole", "--set run.max_steps=8" + deterministic, copy, "epochs: 1");
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const ProgramResult first = run("part", "--set run.max_steps=4 --set run.checkpoint_every=4" + deterministic, copy,
                                  "epochs: 1");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  // One training image fewer.
  const fs::path victim = *fs::directory_iterator(copy / "train" / "3_Dress");
  fs::rename(victim, dir_ / "aside.jpg");
  const ProgramResult changed = run("part", "--resume auto --set run.max_steps=8" + deterministic, copy, "epochs: 1");
  EXPECT_EQ(changed.exit_code, 1) << changed.output;
  EXPECT_THAT(changed.output, HasSubstr("the training data differ from the checkpoint's: 4000 samples, content digest "));
  EXPECT_THAT(changed.output, HasSubstr(" then, 3999 samples, content digest "));
  EXPECT_THAT(changed.output, HasSubstr("start a new run from the checkpoint's weights"));
  // Put back, and the whole folder moved elsewhere: the run continues to the uninterrupted model.
  fs::rename(dir_ / "aside.jpg", victim);
  const fs::path moved = dir_ / "moved";
  fs::rename(copy, moved);
  const ProgramResult resumed = run("part", "--resume auto --set run.max_steps=8" + deterministic, moved, "epochs: 1");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(dp::testing::model_digest(resumed.output), dp::testing::model_digest(whole.output));
}

// The shipped ResNet-50 recipes log hyperparameters the MLPerf rules accept: a log made of
// their records (and a run that reaches the target) passes the checker.
TEST(ResNet50Recipes, HyperparametersPassTheMlperfRules) {
  for (const char* name : {"resnet50.yaml", "resnet50_sgd.yaml"}) {
    SCOPED_TRACE(name);
    const dp::Config config = dp::load_config((fs::path(DPTRAIN_SOURCE_DIR) / "configs" / name).string());
    EXPECT_EQ(config.model.name, "resnet50");
    EXPECT_EQ(config.data.dataset, "image_folder");
    const fs::path dir = dp::testing::make_test_dir(std::string("recipe_") + name);
    int64_t now = 1'000'000;
    {
      dp::MlLogger log((dir / "mllog.log").string(), [&] { return now += 1000; });
      for (const dp::MlRecord& r : dp::mllog_submission_records({"dptrain", "8xH100", "closed", "onprem",
                                                                  dp::MlBenchmark::kResnet}))
        log.event(r.key, r.value);
      log.event(dp::mllog::kCacheClear, true);
      log.start(dp::mllog::kInitStart);
      dp::MlRunFacts facts;
      facts.steps_per_epoch = 1'281'167 / config.data.batch_size + 1;
      facts.bn_span = config.data.batch_size / 8;
      facts.train_samples = 1'281'167;
      facts.eval_samples = 50'000;
      for (const dp::MlRecord& r : dp::mllog_hyperparameters(dp::MlBenchmark::kResnet, config, facts))
        log.event(r.key, r.value);
      log.end(dp::mllog::kInitStop);
      log.start(dp::mllog::kRunStart);
      for (int64_t e = 1; e <= 3; ++e) {
        log.start(dp::mllog::kEpochStart, nullptr, {{"epoch_num", e}});
        log.end(dp::mllog::kEpochStop, nullptr, {{"epoch_num", e}});
      }
      log.start(dp::mllog::kEvalStart, nullptr, {{"epoch_num", int64_t{3}}});
      log.event(dp::mllog::kEvalAccuracy, 0.7601, {{"epoch_num", int64_t{3}}});
      log.end(dp::mllog::kEvalStop, nullptr, {{"epoch_num", int64_t{3}}});
      log.end(dp::mllog::kRunStop, nullptr, {{"status", "success"}});
    }
    const dp::MlCheckReport report = dp::check_mllog_file((dir / "mllog.log").string(), dp::MlBenchmark::kResnet);
    std::string violations;
    for (const dp::MlViolation& v : report.violations) violations += v.str() + "\n";
    EXPECT_TRUE(report.compliant()) << violations;
    fs::remove_all(dir);
  }
}

}  // namespace

// End-to-end: BERT masked-LM pretraining from `dptrain prepare-text` shards — the loss falls and
// the epoch reports the MLM accuracy and the token-batching figures; one process and two MPI ranks
// training the same global batches end with the same weights (deterministic, no dropout); bad
// text input is one clear error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>

#include "common/run_program.h"
#include "common/scratch_dir.h"
#include "runtime/core/runtime.h"
#include "runtime/io/tensor_file.h"
#include "runtime/text/corpus.h"

namespace {

namespace fs = std::filesystem;
using dp::testing::dptrain_binary;
using dp::testing::run_program;
using ::testing::HasSubstr;

class Bert : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::is_directory(std::string(dp::text::kFortuneDirectory)))
      GTEST_SKIP() << dp::text::kFortuneDirectory << " is absent (apt-get install -y fortunes provides it)";
    // The built-in corpus (2.6 MB, ~17000 sequences of up to 64 tokens), prepared in under a second.
    const auto r = run_program(dptrain_binary() + " prepare-text --max-seq-length 64 --vocab-words 3000 --out " +
                               shards());
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  std::string shards() const { return (scratch_.path() / "shards").string(); }
  // A BERT-tiny run on the shards, 1 thread, into <scratch>/<out>; `extra` are --set arguments.
  std::string args(const std::string& out, const std::string& extra) const {
    const std::string config = scratch_.write("bert.yaml", "run: {threads: 1, log_every: 10, seed: 3}\n"
                                                           "data: {dataset: text, root: " + shards() + "}\n"
                                                           "model: {name: bert, size: tiny}\n"
                                                           "optimizer: {name: adamw, lr: 0.002}\n");
    return " --config " + config + " --set run.output_dir=" + (scratch_.path() / out).string() + " " + extra;
  }
  // configs/bert_large.yaml (the MLPerf phase-2 recipe) cut to BERT-tiny on the built-in corpus,
  // fp32 on the CPU, global batch 32, no phase-1 checkpoint; `extra` are more --set arguments.
  std::string large_recipe(const std::string& out, const std::string& extra) const {
    return dptrain_binary() + " --config " + DPTRAIN_SOURCE_DIR + "/configs/bert_large.yaml --set model.size=tiny "
           "--set model.init_from='\"\"' --set data.root=" + shards() + " --set data.max_seq_length=64 "
           "--set data.max_predictions=10 --set data.batch_size=32 --set data.loader_threads=1 "
           "--set run.device=cpu --set run.precision=fp32 --set run.threads=1 --set run.log_every=10 "
           "--set run.output_dir=" + (scratch_.path() / out).string() + " " + extra;
  }
  dp::testing::ScratchDir scratch_{"dptrain_bert"};
};

std::vector<double> losses(const std::string& output) {  // the progress lines' losses, in order
  std::vector<double> out;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find("  loss ");
    if (line.rfind("epoch ", 0) == 0 && at != std::string::npos) out.push_back(std::stod(line.substr(at + 7)));
  }
  return out;
}

TEST_F(Bert, TinyLearnsTheCorpusAndReportsTokenBatching) {
  const auto r = run_program(dptrain_binary() + args("run", "--set data.batching=max_tokens --set data.max_tokens=2048 "
                                                            "--set run.max_steps=60 --set model.dropout=0.1"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("model bert tiny: "));
  EXPECT_THAT(r.output, HasSubstr("token batching: max 2048 padded tokens per rank batch, balance sort_and_deal"));
  EXPECT_THAT(r.output, HasSubstr("  token batching: padding waste "));
  const std::vector<double> l = losses(r.output);
  ASSERT_GE(l.size(), 6u) << r.output;
  EXPECT_LT(l.back(), l.front() - 0.5) << r.output;
  // The masked-LM accuracy of the held-out documents: above the most frequent token's share.
  const size_t at = r.output.find("test accuracy ");
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_GT(std::stod(r.output.substr(at + 14)), 3.0) << r.output;
  EXPECT_THAT(dp::testing::read_text_file(scratch_.path() / "run" / "metrics.jsonl"),
              HasSubstr("\"token_batching\":{\"batch_sizes\":"));
}

TEST_F(Bert, OneProcessAndTwoRanksTrainTheSameGlobalBatchesToTheSameWeights) {
  // Fixed batches of 16 rows a step; packing and per-step balancing move rows between ranks, but
  // every step's sequences and the loss normalisation (their predicted tokens) stay the same. SGD
  // shows the gradients' agreement as it is: Adam's normalised update would turn the rounding
  // noise of near-zero gradients (rare tokens' embedding rows) into lr-sized differences.
  // Both runs also check that no step reads on the host (run.check_host_syncs), packed and balanced.
  const std::string common = "--set run.deterministic=true --set run.check_host_syncs=true --set run.max_steps=8 "
                             "--set data.batching=fixed "
                             "--set data.batch_size=16 --set data.packing=greedy --set data.balance=sort_and_deal "
                             "--set optimizer.name=sgd --set optimizer.lr=0.5 --set optimizer.momentum=0.9";
  const auto one = run_program(dptrain_binary() + args("one", common));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto two = run_program(dp::testing::mpirun(2) + dptrain_binary() + args("two", common));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_THAT(two.output, HasSubstr("data-parallel over 2 ranks (mpi): token batches (above), "));
  dp::Runtime runtime;
  const auto a = dp::load_tensors((scratch_.path() / "one" / "model.safetensors").string(), runtime.cpu());
  const auto b = dp::load_tensors((scratch_.path() / "two" / "model.safetensors").string(), runtime.cpu());
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].first, b[i].first);
    const auto x = a[i].second.to_vector<float>(), y = b[i].second.to_vector<float>();
    for (size_t k = 0; k < x.size(); ++k) worst = std::max(worst, static_cast<double>(std::abs(x[k] - y[k])));
  }
  std::printf("largest weight difference after 8 steps, 1 process vs 2 ranks: %.3g\n", worst);
  EXPECT_LE(worst, 1e-5) << "largest weight difference after 8 steps";
  const std::vector<double> l1 = losses(one.output), l2 = losses(two.output);
  ASSERT_FALSE(l1.empty());
  ASSERT_EQ(l1.size(), l2.size());
  EXPECT_NEAR(l1.back(), l2.back(), 1e-4);
  EXPECT_GT(worst, 0.0) << "two ranks sum the gradients in another order: exact equality would be a surprise";
}

TEST_F(Bert, MaxTokensRunsOnAnyWorldSize) {
  // data.batch_size (128) is not a multiple of 3, and max_tokens batching does not use it.
  const auto r = run_program(dp::testing::mpirun(3) + dptrain_binary() +
                             args("three", "--set data.batching=max_tokens --set data.max_tokens=1024 "
                                           "--set run.max_steps=3"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("data-parallel over 3 ranks"));
  EXPECT_THAT(r.output, HasSubstr("test accuracy "));
}

TEST_F(Bert, AResumedRunEndsWithTheUninterruptedModel) {
  // Mid-epoch, with dropout: the loader restarts at the step's batch of the same plan and masks,
  // the generator where it was.
  const std::string common = "--set data.batching=max_tokens --set data.max_tokens=1024 --set model.dropout=0.1";
  const auto whole = run_program(dptrain_binary() + args("whole", common + " --set run.max_steps=30"));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const std::string parts = common + " --set run.checkpoint_every=15";
  const auto first = run_program(dptrain_binary() + args("parts", parts + " --set run.max_steps=15"));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto second = run_program(dptrain_binary() + args("parts", parts + " --set run.max_steps=30 --resume auto"));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_THAT(second.output, HasSubstr("after step 15 (epoch 1, step 15 of "));
  EXPECT_EQ(dp::testing::model_digest(second.output), dp::testing::model_digest(whole.output));
  // The checkpoint holds the tied MLM decoder once, as the word embedding (and the head's bias).
  dp::Runtime runtime;
  size_t embeddings = 0, decoders = 0;
  for (const auto& [name, t] : dp::load_tensors(
           (scratch_.path() / "parts" / "checkpoints" / "step_000000015" / "model.safetensors").string(),
           runtime.cpu())) {
    embeddings += name == "bert.embeddings.word_embeddings.weight" || name == "cls.predictions.bias";
    decoders += name.rfind("cls.predictions.decoder.", 0) == 0;
  }
  EXPECT_EQ(embeddings, 2u);
  EXPECT_EQ(decoders, 0u);
  EXPECT_NE(dp::testing::model_digest(first.output), dp::testing::model_digest(whole.output));
}

// The values of `key` in an MLLOG file's records (e.g. the eval_accuracy records' epoch_num).
std::vector<int64_t> mllog_metadata(const std::string& log, const std::string& key, const std::string& field) {
  std::vector<int64_t> out;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"key\": \"" + key + "\"") == std::string::npos) continue;
    const size_t at = line.find("\"" + field + "\": ");
    if (at != std::string::npos) out.push_back(std::stoll(line.substr(at + field.size() + 4)));
  }
  return out;
}

// MLPerf BERT's evaluation schedule: every N samples (sequences over all ranks), MLLOG counting
// samples; a resumed run goes on counting from its checkpoint, and evaluating changes nothing.
TEST_F(Bert, TheLargeRecipeEvaluatesEveryNSamplesAndAResumedRunKeepsTheCount) {
  const std::string common = "--set logging.submission_division=open --set run.eval_every_samples=400 "
                             "--set schedule.total_steps=30";
  const auto whole = run_program(large_recipe("whole", common + " --set run.max_steps=30"));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  // 32 sequences a step: 400 is passed at step 13 (416), 800 at step 25; the last step, 30, too.
  EXPECT_THAT(whole.output, HasSubstr("evaluation after 416 samples (step 13, epoch 1): test accuracy "));
  EXPECT_THAT(whole.output, HasSubstr("evaluation after 800 samples (step 25, epoch 1): test accuracy "));
  EXPECT_THAT(whole.output, HasSubstr("evaluation after 960 samples (step 30, epoch 1): test accuracy "));
  const std::string log = dp::testing::read_text_file(scratch_.path() / "whole" / "mllog.log");
  EXPECT_EQ(mllog_metadata(log, "eval_accuracy", "epoch_num"), (std::vector<int64_t>{416, 800, 960}));
  EXPECT_EQ(mllog_metadata(log, "block_start", "samples_count"), (std::vector<int64_t>{0, 416, 800}));
  EXPECT_EQ(mllog_metadata(log, "block_stop", "samples_count"), (std::vector<int64_t>{416, 800, 960}));
  EXPECT_EQ(log.find("\"epoch_start\""), std::string::npos) << "blocks replace epochs when counting samples";
  EXPECT_THAT(log, HasSubstr("\"key\": \"opt_learning_rate_training_steps\", \"value\": 30,"));
  const auto check = run_program(dptrain_binary() + " check-mllog " + (scratch_.path() / "whole" / "mllog.log").string() +
                                 " --benchmark bert");
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_THAT(dp::testing::read_text_file(scratch_.path() / "whole" / "metrics.jsonl"),
              HasSubstr("\"event\":\"evaluation\",\"reached_target\":false,\"samples\":800,"));

  const std::string parts = common + " --set run.checkpoint_every=10";
  const auto first = run_program(large_recipe("parts", parts + " --set run.max_steps=20"));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto second = run_program(large_recipe("parts", parts + " --set run.max_steps=30 --resume auto"));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_THAT(second.output, HasSubstr("after step 20 (epoch 1, step 20 of "));
  EXPECT_THAT(second.output, HasSubstr("evaluation after 800 samples (step 25, epoch 1)"));
  EXPECT_THAT(second.output, HasSubstr("evaluation after 960 samples (step 30, epoch 1)"));
  EXPECT_EQ(dp::testing::model_digest(second.output), dp::testing::model_digest(whole.output));
}

TEST_F(Bert, TheLargeRecipeStopsAtItsTargetAndKeepsTheClosedDivisionInterval) {
  // LAMB at lr 0.01 passes 3 % masked-LM accuracy (the commonest tokens) within 10 steps.
  const auto r = run_program(large_recipe("target", "--set logging.submission_division=open "
                                                    "--set run.eval_every_samples=320 --set run.max_steps=60 "
                                                    "--set optimizer.lr=0.01 --set run.target_accuracy=0.03"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("target accuracy 3.00 % reached: stopping"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("done: 60 steps")));
  EXPECT_THAT(dp::testing::read_text_file(scratch_.path() / "target" / "mllog.log"), HasSubstr("\"status\": \"success\""));
  // Closed division: the rules' interval for the batch (150,000 for 32 sequences), nothing else.
  const auto closed = run_program(large_recipe("closed", "--set run.eval_every_samples=400"));
  EXPECT_NE(closed.exit_code, 0);
  EXPECT_THAT(closed.output, HasSubstr("run.eval_every_samples: closed-division MLPerf BERT evaluates every "));
  EXPECT_THAT(closed.output, HasSubstr("150000 for data.batch_size 32; got 400"));
}

TEST_F(Bert, BadTextInputIsOneClearError) {
  auto error_of = [&](const std::string& extra) {
    const auto r = run_program(dptrain_binary() + args("bad", extra));
    EXPECT_NE(r.exit_code, 0) << r.output;
    return r.output;
  };
  const std::string too_long = error_of("--set data.max_tokens=40 --set data.batching=max_tokens");
  EXPECT_THAT(too_long, HasSubstr("training text in " + shards() + ": sequence "));
  EXPECT_THAT(too_long, HasSubstr(" of the shard " + shards() + "/shard_00000)"));  // the file it is in
  EXPECT_THAT(error_of("--set data.root=" + (scratch_.path() / "none").string()),
              HasSubstr("data.vocab is unset and '" + (scratch_.path() / "none" / "vocab.txt").string() +
                        "' is not a file"));
  const std::string other = scratch_.write("other_vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n");
  EXPECT_THAT(error_of("--set data.vocab=" + other), HasSubstr("data.root: "));
  EXPECT_THAT(error_of("--set model.name=small_cnn"), HasSubstr("data.dataset text trains a masked language model"));
  EXPECT_THAT(error_of("--set data.batching=max_tokens"), HasSubstr("data.max_tokens"));
  // Shards without an evaluation split: the way out is data.eval_root.
  const std::string vocab = shards() + "/vocab.txt";
  const std::string no_eval = (scratch_.path() / "no_eval").string();
  ASSERT_EQ(run_program(dptrain_binary() + " prepare-text --vocab " + vocab + " --eval-fraction 0 --out " + no_eval +
                        " " + scratch_.write("words.txt", "The cat sat.\nA dog ran.\n"))
                .exit_code,
            0);
  EXPECT_THAT(error_of("--set data.root=" + no_eval + " --set data.vocab=" + vocab),
              HasSubstr("data.eval_root is unset and data.root '" + no_eval + "' has no eval/ folder"));
  // Text of special tokens alone: nothing to predict, said before training.
  const std::string specials = (scratch_.path() / "specials").string();
  ASSERT_EQ(run_program(dptrain_binary() + " prepare-text --vocab " + vocab + " --eval-fraction 0.4 --out " +
                        specials + " " +
                        scratch_.write("specials.txt", "[MASK] [SEP]\n\n[CLS] [MASK]\n\n[PAD] [SEP]\n"))
                .exit_code,
            0);
  const std::string nothing = error_of("--set data.root=" + specials + " --set data.vocab=" + vocab);
  EXPECT_THAT(nothing, HasSubstr("but no token to predict: masking chooses among ordinary tokens"));
  EXPECT_THAT(nothing, ::testing::Not(HasSubstr("epoch 1/")));
}

}  // namespace

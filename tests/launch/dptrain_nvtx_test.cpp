// End-to-end: the NVTX ranges dptrain emits (NOTE [ NVTX ranges ] in runtime/core/nvtx.h), seen
// through an NVTX tool of our own (tests/tools/nvtx_recorder.cpp) loaded the way Nsight Systems
// loads its own: steps enclosing their phases, checkpoints and evaluations between steps, the MPI
// communication thread's collectives, every range closed on the thread that opened it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/run_program.h"
#include "common/scratch_dir.h"
#include "runtime/core/nvtx.h"

namespace {

namespace fs = std::filesystem;
using dp::testing::dptrain_binary;
using dp::testing::ProgramResult;
using dp::testing::run_program;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// One closed range: its name, the names of the ranges around it (outermost first), its thread.
struct Range {
  long thread = 0;
  std::string name;
  std::vector<std::string> enclosing;
};

// Replays a recorder file: every pop must close a range its thread opened, and nothing may be left
// open at the end; returns the closed ranges in the order they opened.
std::vector<Range> closed_ranges(const fs::path& file, std::string& problems) {
  std::map<long, std::vector<size_t>> open;  // per thread: indices into `ranges`
  std::vector<Range> ranges;
  std::istringstream lines(dp::testing::read_text_file(file));
  std::string line;
  for (int n = 1; std::getline(lines, line); ++n) {
    std::istringstream fields(line);
    long thread = 0;
    std::string event, name;
    fields >> thread >> event;
    std::getline(fields >> std::ws, name);
    std::vector<size_t>& stack = open[thread];
    if (event == "push") {
      Range r{thread, name, {}};
      for (size_t i : stack) r.enclosing.push_back(ranges[i].name);
      stack.push_back(ranges.size());
      ranges.push_back(r);
    } else if (event == "pop" && !stack.empty()) {
      stack.pop_back();
    } else {
      problems += "line " + std::to_string(n) + " '" + line + "': a pop with no open range on its thread\n";
    }
  }
  for (const auto& [thread, stack] : open)
    for (size_t i : stack) problems += "range '" + ranges[i].name + "' never closed\n";
  return ranges;
}

std::vector<std::string> names_inside(const std::vector<Range>& ranges, const std::string& outer) {
  std::vector<std::string> names;
  for (const Range& r : ranges)
    if (r.enclosing.size() == 1 && r.enclosing[0] == outer) names.push_back(r.name);
  return names;
}

class NvtxRanges : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef DPTRAIN_NVTX_RECORDER
    GTEST_SKIP() << "this build has no NVTX (no CUDA toolkit with nvtx3 headers)";
#else
    ASSERT_TRUE(dp::nvtx::enabled());
#endif
  }
  // Runs `launch` + dptrain with the recorder loaded, one epoch of 3 steps on small synthetic
  // images; the recorder's files are <scratch>/ranges.<pid>.tsv.
  ProgramResult run(const std::string& launch) {
    const std::string config = scratch_.write(
        "run.yaml", "run: {output_dir: " + (scratch_.path() / "out").string() +
                        ", epochs: 1, threads: 1, log_every: 1, checkpoint_every: 2}\n"
                        "data: {dataset: synthetic, synthetic_train_size: 192, synthetic_eval_size: 64, "
                        "image_size: 28, eval_image_size: 28, batch_size: 64, eval_batch_size: 64}\n"
                        "model: {name: small_cnn, num_classes: 10}\n");
#ifdef DPTRAIN_NVTX_RECORDER
    const std::string env = std::string("NVTX_INJECTION64_PATH=") + DPTRAIN_NVTX_RECORDER +
                            " NVTX_RECORDER_FILE=" + (scratch_.path() / "ranges.%p.tsv").string() + " ";
#else
    const std::string env;
#endif
    return run_program(env + launch + dptrain_binary() + " --config " + config);
  }
  std::vector<fs::path> range_files() const {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(scratch_.path()))
      if (entry.path().filename().string().rfind("ranges.", 0) == 0) files.push_back(entry.path());
    return files;
  }

  dp::testing::ScratchDir scratch_{"dptrain_nvtx"};
};

TEST_F(NvtxRanges, StepsEncloseTheirPhasesAndCheckpointsAndEvaluationsFallBetweenSteps) {
  const ProgramResult r = run("");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<fs::path> files = range_files();
  ASSERT_EQ(files.size(), 1u) << "the recorder wrote no file: dptrain emitted no range";
  std::string problems;
  const std::vector<Range> ranges = closed_ranges(files[0], problems);
  EXPECT_EQ(problems, "");

  std::vector<std::string> outermost;
  for (const Range& r : ranges)
    if (r.enclosing.empty()) outermost.push_back(r.name);
  // Step 2's checkpoint (checkpoint_every: 2) and the evaluation after the epoch, between steps;
  // the epoch ends without a step that finds no batch; the final weights' save last.
  EXPECT_THAT(outermost, ElementsAre("step 1", "step 2", "checkpoint", "step 3", "evaluation", "save weights"));
  for (const char* step : {"step 1", "step 2", "step 3"})
    EXPECT_THAT(names_inside(ranges, step), ElementsAre("data", "forward", "backward", "optimizer")) << step;
  // Inside forward, each module by its torch name (named_modules()), nested as the modules are;
  // the model itself is the forward range. Evaluation runs the same modules.
  const std::vector<std::string> forward{"step 1", "forward"};
  std::vector<std::string> modules, features;
  for (const Range& r : ranges) {
    if (r.enclosing == forward) modules.push_back(r.name);
    if (r.enclosing.size() == 3 && r.enclosing[2] == "features" && r.enclosing[0] == "step 1")
      features.push_back(r.name);
  }
  EXPECT_THAT(modules, ElementsAre("features", "flatten", "classifier"));
  EXPECT_THAT(features, ElementsAre("features.0", "features.1", "features.2", "features.3", "features.4",
                                    "features.5"));
  EXPECT_THAT(names_inside(ranges, "evaluation"), ElementsAre("features", "flatten", "classifier"));
  // Inside backward, each autograd node by its op's name and the module whose forward made it, in
  // the order the engine runs them: the loss first (made outside the model), the leaves' gradient
  // accumulators after the op that uses them.
  std::vector<std::string> nodes;
  for (const Range& r : ranges)
    if (r.enclosing == std::vector<std::string>{"step 1", "backward"}) nodes.push_back(r.name);
  ASSERT_FALSE(nodes.empty());
  EXPECT_EQ(nodes.front(), "cross_entropy");
  EXPECT_EQ(std::count(nodes.begin(), nodes.end(), "conv2d [features.0]"), 1) << ::testing::PrintToString(nodes);
  EXPECT_EQ(std::count(nodes.begin(), nodes.end(), "conv2d [features.3]"), 1);
  EXPECT_EQ(std::count(nodes.begin(), nodes.end(), "linear [classifier.2]"), 1);
  EXPECT_EQ(std::count_if(nodes.begin(), nodes.end(),
                          [](const std::string& n) { return n.rfind("AccumulateGrad [", 0) == 0; }),
            8)
      << "SmallCNN's 8 parameters, each named by its module";
}

TEST_F(NvtxRanges, TheMpiCommunicationThreadMarksEachCollective) {
  const ProgramResult r = run("timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 ");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<fs::path> files = range_files();
  ASSERT_EQ(files.size(), 2u) << "one file per rank";
  for (const fs::path& file : files) {
    std::string problems;
    const std::vector<Range> ranges = closed_ranges(file, problems);
    EXPECT_EQ(problems, "") << file;
    long main_thread = 0;
    for (const Range& r : ranges)
      if (r.name == "step 1") main_thread = r.thread;
    ASSERT_NE(main_thread, 0) << file;
    // Each step: the gradient all-reduce between backward and the optimiser.
    EXPECT_THAT(names_inside(ranges, "step 2"), ElementsAre("data", "forward", "backward", "comm", "optimizer"));
    int gradient_reductions = 0;
    for (const Range& r : ranges) {
      if (r.name.rfind("all_reduce(", 0) != 0) continue;
      EXPECT_NE(r.thread, main_thread) << r.name << ": not on the communication thread";
      EXPECT_TRUE(r.enclosing.empty()) << r.name;
      EXPECT_THAT(r.name, ::testing::MatchesRegex(R"(all_reduce\(.*\) #[0-9]+)"));
      if (r.name.find("float32") != std::string::npos) ++gradient_reductions;
    }
    EXPECT_GE(gradient_reductions, 3) << "at least one gradient all-reduce a step";
  }
}

}  // namespace

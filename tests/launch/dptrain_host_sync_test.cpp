// End-to-end: run.check_host_syncs (NOTE [ Host-sync checking ] in runtime/core/host_sync.h).
// Every step of the device-resident optimisers, with loss scaling and clipping, reads nothing on
// the host; Shampoo, which reads its gradients' non-finite check on the host (NOTE [ Shampoo on a
// device ]), is caught at its first step, by name.
// Two ranks: tests/launch/dptrain_distributed_test.cpp; BERT: dptrain_bert_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "common/run_program.h"
#include "common/scratch_dir.h"

namespace {

using dp::testing::dptrain_binary;
using dp::testing::ProgramResult;
using dp::testing::run_program;
using ::testing::HasSubstr;

class HostSyncs : public ::testing::Test {
 protected:
  // 12 SmallCNN steps of batch 64 at one thread with run.check_host_syncs; `yaml` is more YAML,
  // `sets` more --set arguments.
  ProgramResult run(const std::string& name, const std::string& yaml, const std::string& sets = "") {
    const std::string config = scratch_.write(name + ".yaml", "run: {output_dir: " + (scratch_.path() / name).string() +
                                                                  ", max_steps: 12, threads: 1, log_every: 5, "
                                                                  "check_host_syncs: true}\n"
                                                                  "data: {batch_size: 64, eval_batch_size: 2000}\n" +
                                                                  yaml);
    return run_program(dptrain_binary() + " --config " + config + sets);
  }

  dp::testing::ScratchDir scratch_{"dptrain_host_sync"};
};

TEST_F(HostSyncs, DeviceResidentStepsReadNothingOnTheHost) {
  const struct {
    const char* name;
    const char* optimizer;
    const char* sets;
  } cases[] = {
      {"sgd", "{name: sgd, lr: 0.05, momentum: 0.9}", ""},
      {"adamw_fp16_clipped", "{name: adamw, lr: 0.001, clip_grad_norm: 1.0}", " --set run.precision=fp16"},
      {"lamb_bf16", "{name: lamb, lr: 0.005}", " --set run.precision=bf16"},
      {"lars", "{name: lars, lr: 0.5, momentum: 0.9}", ""},
  };
  for (const auto& c : cases) {
    const ProgramResult r = run(c.name, std::string("optimizer: ") + c.optimizer + "\n", c.sets);
    ASSERT_EQ(r.exit_code, 0) << c.name << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr("done: 12 steps")) << c.name;
  }
}

TEST_F(HostSyncs, AReadInsideAStepEndsTheRunNamingTheReadAndTheStep) {
  // Shampoo's step reads its gradients' non-finite check on the host before it changes any state
  // (NOTE [ Shampoo on a device ] in optim/shampoo.h), which on a GPU waits for the device.
  const ProgramResult r = run("shampoo", "optimizer: {name: shampoo, lr: 0.001}\n");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("reads a device value on the host inside training step 1 (run.check_host_syncs)"));
  EXPECT_THAT(r.output, HasSubstr("Tensor::"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("done: ")));
}

}  // namespace

// LR schedules at hand-computed points: step 0, inside and at the end of warmup, one after, last.
#include <gtest/gtest.h>

#include <initializer_list>
#include <utility>

#include "optim/lr_schedule.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/core/error.h"
#include "runtime/ops/creation.h"

namespace dp {
namespace {

LrScheduleOptions options(int64_t warmup) {
  LrScheduleOptions o;
  o.base_lr = 0.1;
  o.total_steps = 100;
  o.warmup_steps = warmup;
  o.milestones = {30, 60};
  o.gamma = 0.1;
  o.min_lr = 0.001;
  return o;
}

// Checks lr_at(step) == lr for each {step, lr} pair.
void expect_lrs(const LrSchedule& s, std::initializer_list<std::pair<int64_t, double>> expected) {
  for (const auto& [step, lr] : expected) EXPECT_DOUBLE_EQ(s.lr_at(step), lr) << "at step " << step;
}

TEST(LrScheduleTest, ConstantWithAndWithoutWarmup) {
  expect_lrs(*make_lr_schedule("constant", options(10)), {{0, 0.0}, {5, 0.05}, {10, 0.1}, {11, 0.1}, {99, 0.1}});
  expect_lrs(*make_lr_schedule("constant", options(0)), {{0, 0.1}});
}

TEST(LrScheduleTest, StepDecaysAtEachMilestone) {
  expect_lrs(*make_lr_schedule("step", options(10)), {{0, 0.0}, {10, 0.1}, {11, 0.1}, {29, 0.1}, {30, 0.01},
                                                      {59, 0.01}, {60, 0.001}, {99, 0.001}});
}

// lr(s) = 0.001 + 0.099 · (1 + cos(π (s − 10) / 90)) / 2 after 10 warmup steps.
TEST(LrScheduleTest, CosineToMinLrAfterWarmup) {
  auto s = make_lr_schedule("cosine", options(10));
  EXPECT_DOUBLE_EQ(s->lr_at(0), 0.0);
  EXPECT_DOUBLE_EQ(s->lr_at(5), 0.05);
  EXPECT_DOUBLE_EQ(s->lr_at(10), 0.1);
  EXPECT_NEAR(s->lr_at(11), 0.099969845937445239, 1e-15);  // cos(π/90) = 0.999390827019096
  EXPECT_NEAR(s->lr_at(55), 0.0505, 1e-15);                // halfway: the mean of base and floor
  EXPECT_NEAR(s->lr_at(99), 0.0010301540625547597, 1e-15);
  EXPECT_DOUBLE_EQ(s->lr_at(100), 0.001);
  EXPECT_DOUBLE_EQ(s->lr_at(250), 0.001);  // past the end: stays at the floor
  EXPECT_DOUBLE_EQ(make_lr_schedule("cosine", options(0))->lr_at(0), 0.1);
}

// MLPerf ResNet: warmup 10, then 0.001 + 0.099 · (1 − (s − 10)/90)².
TEST(LrScheduleTest, PolyDecaysQuadraticallyToTheEndLr) {
  auto s = make_lr_schedule("poly", options(10));
  EXPECT_DOUBLE_EQ(s->lr_at(0), 0.0);
  EXPECT_DOUBLE_EQ(s->lr_at(10), 0.1);                        // end of warmup
  EXPECT_NEAR(s->lr_at(11), 0.001 + 0.099 * 7921.0 / 8100.0, 1e-15);  // (89/90)²
  EXPECT_NEAR(s->lr_at(11), 0.09781222222222222, 1e-15);
  EXPECT_NEAR(s->lr_at(99), 0.0010122222222222222, 1e-15);   // last step: (1/90)²
  EXPECT_DOUBLE_EQ(s->lr_at(100), 0.001);
  EXPECT_DOUBLE_EQ(s->lr_at(500), 0.001);
  LrScheduleOptions cubic = options(10);
  cubic.power = 3;
  EXPECT_NEAR(make_lr_schedule("poly", cubic)->lr_at(55), 0.001 + 0.099 / 8, 1e-15);  // halfway: (1/2)³
}

// BERT: warmup 10, then linear to min_lr: 0.001 + 0.099 · (1 − (s − 10)/90).
TEST(LrScheduleTest, LinearDecaysToTheEndLr) {
  auto s = make_lr_schedule("linear", options(10));
  EXPECT_DOUBLE_EQ(s->lr_at(0), 0.0);
  EXPECT_DOUBLE_EQ(s->lr_at(10), 0.1);
  EXPECT_NEAR(s->lr_at(11), 0.0989, 1e-15);
  EXPECT_NEAR(s->lr_at(99), 0.0021, 1e-15);  // 0.001 + 0.099/90
  EXPECT_DOUBLE_EQ(s->lr_at(100), 0.001);
  LrScheduleOptions to_zero = options(0);
  to_zero.min_lr = 0;
  to_zero.power = 7;  // ignored: linear is power 1
  EXPECT_NEAR(make_lr_schedule("linear", to_zero)->lr_at(25), 0.075, 1e-15);
}

// NOTE [ Schedule clock ]: skipped steps advance the schedule only when counted; the clock and the
// lr lookup live on the device (a skipped step is known only there), and every looked-up lr is
// bit-identical to lr_at at the clock's count.
TEST(LrScheduleTest, ClockSkipsOverflowedStepsWhenConfigured) {
  CpuBackend backend{1};
  const Device cpu{&backend};
  auto s = make_lr_schedule("cosine", options(3));
  ScheduleClock counting(*s, 100, cpu), applied_only(*s, 100, cpu, /*count_skipped_steps=*/false);
  Tensor found_inf = scalar_tensor(0, kFloat32, cpu);
  int64_t counted = 0, applied_steps = 0;
  for (bool applied : {true, false, false, true, true, false, true}) {
    EXPECT_EQ(counting.next_lr().item<double>(), s->lr_at(counted));
    EXPECT_EQ(applied_only.next_lr().item<double>(), s->lr_at(applied_steps));
    found_inf.fill_(applied ? 0.0 : 1.0);
    counting.step_done(found_inf);
    applied_only.step_done(found_inf);
    ++counted;
    applied_steps += applied ? 1 : 0;
  }
  EXPECT_EQ(counting.steps(), 7);
  EXPECT_EQ(applied_only.steps(), 4);
  EXPECT_EQ(applied_only.lr(), s->lr_at(3));  // the last lookup, before the last step was counted
  counting.step_done();  // no verdict: applied
  EXPECT_EQ(counting.steps(), 8);
}

// Past the tabulated steps the clock keeps the last lr; resuming sets the count.
TEST(LrScheduleTest, ClockPastTheTableKeepsTheLastLrAndResumes) {
  CpuBackend backend{1};
  const Device cpu{&backend};
  auto s = make_lr_schedule("poly", options(0));
  ScheduleClock clock(*s, 10, cpu);
  clock.set_steps(25);
  EXPECT_EQ(clock.next_lr().item<double>(), s->lr_at(10));
  clock.set_steps(4);
  EXPECT_EQ(clock.steps(), 4);
  EXPECT_EQ(clock.next_lr().item<double>(), s->lr_at(4));
  EXPECT_THROW(ScheduleClock(*s, -1, cpu), Error);
}

TEST(LrScheduleTest, ErrorsNameTheScheduleAndTheFix) {
  try {
    make_lr_schedule("exponential", options(0));
    FAIL() << "expected an unknown-schedule error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "unknown lr schedule 'exponential'; known schedules: constant, step, cosine, poly, linear");
  }
  LrScheduleOptions no_milestones = options(0);
  no_milestones.milestones.clear();
  EXPECT_THROW(make_lr_schedule("step", no_milestones), Error);
  LrScheduleOptions unsorted = options(0);
  unsorted.milestones = {60, 30};
  EXPECT_THROW(make_lr_schedule("step", unsorted), Error);
  LrScheduleOptions all_warmup = options(100);
  EXPECT_THROW(make_lr_schedule("cosine", all_warmup), Error);
  LrScheduleOptions floor_above_base = options(0);
  floor_above_base.min_lr = 0.2;
  EXPECT_THROW(make_lr_schedule("cosine", floor_above_base), Error);
  EXPECT_THROW(make_lr_schedule("constant", options(0))->lr_at(-1), Error);
  EXPECT_THROW(make_lr_schedule("poly", all_warmup), Error);
  EXPECT_THROW(make_lr_schedule("linear", floor_above_base), Error);
  LrScheduleOptions no_power = options(0);
  no_power.power = 0;
  EXPECT_THROW(make_lr_schedule("poly", no_power), Error);
}

}  // namespace
}  // namespace dp

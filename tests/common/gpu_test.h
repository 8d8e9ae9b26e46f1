// Base of the GPU test fixtures: a test skips, saying why, when no GPU is visible (never passes
// vacuously); otherwise it has cuda:0 and the CPU of one Runtime.
#pragma once

#include <gtest/gtest.h>

#include "runtime/core/runtime.h"

namespace dp::testing {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Runtime::cuda_device_count() == 0)
      GTEST_SKIP() << "no CUDA GPU is visible (no driver or no device); this test needs one";
    gpu_ = runtime_.cuda(0);
    cpu_ = runtime_.cpu();
  }

  Runtime runtime_;
  Device gpu_, cpu_;
};

}  // namespace dp::testing

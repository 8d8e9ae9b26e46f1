// When an NCCL group sharing its GPU with others sets NCCL_LAUNCH_ORDER_IMPLICIT, and when it
// refuses to go on (NOTE [ Several communicators on one GPU ] in comm/nccl/nccl_process_group.h).
// Needs no GPU; the groups themselves: tests/comm/nccl/shared_gpu_nccltest.cpp.
#include <gtest/gtest.h>

#include <string>

#include "common/expect_error.h"
#ifdef DPTRAIN_HAVE_NCCL
#include "comm/nccl/nccl_process_group.h"
#endif

namespace dp {
namespace {

#ifdef DPTRAIN_HAVE_NCCL

TEST(ImplicitLaunchOrder, UnsetOrEmptyIsSetByDptrain) {
  EXPECT_TRUE(must_set_implicit_launch_order(nullptr, 22809));
  EXPECT_TRUE(must_set_implicit_launch_order("", 22809));  // NCCL reads an empty value as unset
  EXPECT_TRUE(must_set_implicit_launch_order(nullptr, 22600));
}

TEST(ImplicitLaunchOrder, AValueNcclReadsAsOnIsKept) {
  // NCCL parses it with strtoll, base 0, and ignores what follows the number.
  for (const char* on : {"1", "2", "0x1", " 1", "1 ", "-1"})
    EXPECT_FALSE(must_set_implicit_launch_order(on, 22809)) << '"' << on << '"';
}

TEST(ImplicitLaunchOrder, AValueNcclReadsAsOffIsRefusedWithWhatToChange) {
  for (const char* off : {"0", "00", "no", "true", "0x0", "99999999999999999999"}) {
    EXPECT_ERROR_CONTAINS(must_set_implicit_launch_order(off, 22809),
                          std::string("the environment sets NCCL_LAUNCH_ORDER_IMPLICIT=") + off +
                              ", which NCCL reads as off: unset it (dptrain then sets it to 1) or set it to 1, or "
                              "turn distributed.sync_batchnorm off");
  }
  EXPECT_ERROR_CONTAINS(must_set_implicit_launch_order("0", 22809),
                        "several NCCL communicators busy on one GPU (synchronised BatchNorm beside the gradients) "
                        "needs NCCL to order their launches, or the ranks can deadlock");
}

TEST(ImplicitLaunchOrder, AnNcclWithoutItIsRefused) {
  EXPECT_ERROR_CONTAINS(must_set_implicit_launch_order(nullptr, 22507),
                        "NCCL_LAUNCH_ORDER_IMPLICIT, which does, came with NCCL 2.26 and this process loaded NCCL "
                        "2.25.7: put a newer libnccl.so.2 first on the library path, or turn "
                        "distributed.sync_batchnorm off");
  // Checked first: a variable set to 1 does nothing in an NCCL that does not know it.
  EXPECT_ERROR_CONTAINS(must_set_implicit_launch_order("1", 21903), "this process loaded NCCL 2.19.3");
  EXPECT_ERROR_CONTAINS(must_set_implicit_launch_order(nullptr, 2804), "loaded NCCL 2.8.4:");  // codes before 2.9
}

#else

TEST(ImplicitLaunchOrder, NeedsNccl) { GTEST_SKIP() << "this build has no NCCL backend"; }

#endif

}  // namespace
}  // namespace dp

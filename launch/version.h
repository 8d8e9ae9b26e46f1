// dptrain's version, as CMakeLists.txt's project() gives it: --version prints it, checkpoints
// record it.
#pragma once

namespace dp {

inline constexpr const char* kDptrainVersion = "0.1.0";

}  // namespace dp

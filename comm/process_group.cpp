#include "comm/process_group.h"

#include "runtime/core/error.h"

namespace dp {

WorkPtr ProcessGroup::replay_graph(const std::function<void()>&, int64_t collectives, int64_t) {
  throw Error(detail::concat("the ", backend_name(), " process group cannot hold collectives in a CUDA graph (",
                             collectives, " were asked for a replay); only the NCCL backend captures them"));
}

}  // namespace dp

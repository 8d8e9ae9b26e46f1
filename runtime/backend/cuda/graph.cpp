// CUDA graphs: stream capture into a private memory pool, instantiation and replay
// (NOTE [ Graph memory ] in cuda_backend.h).
#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "runtime/backend/cuda/cuda_backend.h"
#include "runtime/backend/cuda/cuda_check.h"
#include "runtime/backend/cuda/graph_memory.h"

namespace dp::cuda {

namespace {

class CudaGraph final : public DeviceGraph {
 public:
  CudaGraph(CudaBackend& backend, cudaGraph_t graph, cudaGraphExec_t exec, size_t nodes)
      : backend_(backend), graph_(graph), exec_(exec), nodes_(nodes) {}
  ~CudaGraph() override {
    DP_CUDA_REPORT(backend_.device_index(), cudaGraphExecDestroy(exec_));
    DP_CUDA_REPORT(backend_.device_index(), cudaGraphDestroy(graph_));
    backend_.graph_destroyed();
  }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  void replay() override {
    DP_CUDA_CHECK(backend_.device_index(), cudaGraphLaunch(exec_, backend_.stream()), "replaying a CUDA graph of ",
                  nodes_, " nodes");
  }
  size_t node_count() const override { return nodes_; }

 private:
  CudaBackend& backend_;
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
  size_t nodes_;
};

}  // namespace

void CudaBackend::begin_capture() {
  DP_CHECK(!capturing_, "begin_capture: a capture is already in progress on cuda:", device_);
  activate();
  // Blocks the ordinary pool holds but nobody uses go back to the driver first: the graph's own
  // pool is about to hold the step's working memory (a one-off wait, between steps).
  DP_CUDA_CHECK(device_, cudaStreamSynchronize(stream_), "before a CUDA graph capture");
  raise_device_errors();
  DP_CUDA_CHECK(device_, cudaMemPoolTrimTo(pool_, 0));
  if (!graph_memory_) graph_memory_ = std::make_unique<GraphMemory>(device_);
  // Thread-local: other threads (data loading, a communicator's watchdog) may go on calling CUDA.
  DP_CUDA_CHECK(device_, cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
}

std::unique_ptr<DeviceGraph> CudaBackend::end_capture() {
  DP_CHECK(capturing_, "end_capture: no capture is in progress on cuda:", device_);
  activate();
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t status = cudaStreamEndCapture(stream_, &graph);
  if (status != cudaSuccess) {
    if (graph) DP_CUDA_REPORT(device_, cudaGraphDestroy(graph));
    (void)cudaGetLastError();
    release_graph_memory_if_unused();
    throw_cuda_error("cudaStreamEndCapture(stream_, &graph)", status, device_,
                     "the capture was invalidated by an operation a CUDA graph cannot hold (a host "
                     "synchronisation, a copy from pageable memory, or work from another stream that was never joined)");
  }
  size_t nodes = 0;
  cudaGraphExec_t exec = nullptr;
  try {
    DP_CUDA_CHECK(device_, cudaGraphGetNodes(graph, nullptr, &nodes));
    DP_CUDA_CHECK(device_, cudaGraphInstantiateWithFlags(&exec, graph, 0), "instantiating a CUDA graph of ", nodes,
                  " nodes");
    DP_CUDA_CHECK(device_, cudaGraphUpload(exec, stream_));  // the first replay then pays no upload
  } catch (...) {
    if (exec) DP_CUDA_REPORT(device_, cudaGraphExecDestroy(exec));
    DP_CUDA_REPORT(device_, cudaGraphDestroy(graph));
    release_graph_memory_if_unused();
    throw;
  }
  ++live_graphs_;
  return std::make_unique<CudaGraph>(*this, graph, exec, nodes);
}

void CudaBackend::abort_capture() noexcept {
  if (!capturing_) return;
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  (void)cudaStreamEndCapture(stream_, &graph);  // invalidated captures report an error here
  if (graph) DP_CUDA_REPORT(device_, cudaGraphDestroy(graph));
  (void)cudaGetLastError();
  release_graph_memory_if_unused();
}

void CudaBackend::graph_destroyed() noexcept {
  --live_graphs_;
  release_graph_memory_if_unused();
}

void CudaBackend::release_graph_memory_if_unused() noexcept {
  if (!graph_memory_ || capturing_ || live_graphs_ > 0) return;
  // No graph can read them any more: queued behind every replay on the stream.
  for (void* ptr : graph_memory_->kept) DP_CUDA_REPORT(device_, cudaFreeAsync(ptr, stream_));
  graph_memory_->kept.clear();
  if (graph_memory_->arena.live_blocks() > 0) return;  // tensors made during a capture still hold blocks
  DP_CUDA_REPORT(device_, cudaStreamSynchronize(stream_));
  for (void* base : graph_memory_->arena.release()) DP_CUDA_REPORT(device_, cudaFree(base));
  graph_memory_.reset();
}

size_t CudaBackend::graph_pool_bytes() const { return graph_memory_ ? graph_memory_->arena.reserved_bytes() : 0; }

void* CudaBackend::allocate_for_capture(size_t nbytes) { return graph_memory_->arena.allocate(nbytes); }

bool CudaBackend::free_graph_block(void* ptr) noexcept {
  if (graph_memory_ && graph_memory_->arena.owns(ptr)) {
    graph_memory_->arena.free(ptr);  // cannot throw: owns() said it is a live block
    release_graph_memory_if_unused();
    return true;
  }
  if (capturing_) {  // an ordinary block the graph may use: kept until no graph is left
    graph_memory_->kept.push_back(ptr);
    return true;
  }
  return false;
}

}  // namespace dp::cuda

// CUDA graphs (Backend::begin_capture / end_capture, NOTE [ Graph memory ]): recorded work replays
// on new inputs, a whole training step replayed equals the same steps run eagerly, the private
// pool is reused and given back, and what a graph cannot hold is refused with a clear error that
// leaves the backend usable. Every test skips without a GPU; the pool's bookkeeping is
// tests/runtime/backend/block_arena_test.cpp, on any machine.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/expect_error.h"
#include "common/gpu_test.h"
#include "models/registry.h"
#include "optim/sgd.h"
#include "runtime/autograd/autocast.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/dropout.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/loss.h"
#ifdef DPTRAIN_HAVE_CUDA
#include "runtime/backend/cuda/cuda_backend.h"
#endif

namespace dp {
namespace {

#ifdef DPTRAIN_HAVE_CUDA

using testing::error_of;

class CudaGraphTest : public testing::GpuTest {
 protected:
  cuda::CudaBackend& backend() { return static_cast<cuda::CudaBackend&>(gpu_.backend()); }

  std::unique_ptr<DeviceGraph> capture(const std::function<void()>& work) { return capture_graph(backend(), work); }
  std::vector<float> host(const Tensor& t) { return t.to(cpu_).to_vector<float>(); }
  void set(const Tensor& dst, const std::vector<float>& values) {
    backend().copy(from_vector<float>(values, dst.shape(), gpu_), dst);
  }
};

TEST_F(CudaGraphTest, ReplaysTheRecordedWorkOnNewInputs) {
  Tensor x = zeros({4}, kFloat32, gpu_);
  Tensor y;
  std::unique_ptr<DeviceGraph> graph = capture([&] { y = add(mul(x, 2.0), relu(x)); });
  ASSERT_TRUE(graph);
  EXPECT_FALSE(backend().capturing());
  EXPECT_GE(graph->node_count(), 3u);  // mul, relu, add
  set(x, {1, -2, 3, -4});
  graph->replay();
  EXPECT_EQ(host(y), (std::vector<float>{3, -4, 9, -8}));
  set(x, {0.5f, 10, -1, 2});  // the graph reads x's address again
  graph->replay();
  EXPECT_EQ(host(y), (std::vector<float>{1.5f, 30, -2, 6}));
}

TEST_F(CudaGraphTest, ATrainingStepReplayedEqualsTheSameStepsRunEagerly) {
  // Two identical MLPs and SGD with momentum: one steps eagerly, the other is captured after one
  // warm-up step (which creates the momentum buffers) and replayed; the same kernels in the same
  // order must give the same weights.
  auto make = [&](Generator& gen) {
    ModelSpec spec;
    spec.name = "mlp";
    spec.num_classes = 10;
    spec.in_channels = 1;
    spec.image_size = 28;
    return build_model(spec, gpu_, gen);
  };
  Generator gen_a(7), gen_b(7), data_gen(3);
  auto eager_model = make(gen_a), graph_model = make(gen_b);
  SgdOptions o;
  o.lr = 0.05;
  o.momentum = 0.9;
  SGD eager_sgd(eager_model->parameters(), o), graph_sgd(graph_model->parameters(), o);
  const int64_t batch = 32;
  std::vector<Tensor> inputs;
  for (int s = 0; s < 5; ++s) inputs.push_back(randn({batch, 1, 28, 28}, data_gen, kFloat32, gpu_));
  std::vector<int64_t> label_values(batch);
  for (int64_t i = 0; i < batch; ++i) label_values[i] = (i * 7) % 10;
  const Tensor labels = from_vector<int64_t>(label_values, {batch}, gpu_);
  auto step = [&](nn::Module& model, SGD& sgd, const Tensor& x) {
    Tensor loss = cross_entropy(model.forward(x), labels);
    loss.backward();
    sgd.step();
    sgd.zero_grad(/*set_to_none=*/true);
    return loss.detach();
  };
  std::vector<float> eager_losses;
  for (const Tensor& x : inputs) eager_losses.push_back(host(step(*eager_model, eager_sgd, x))[0]);

  Tensor static_x = empty({batch, 1, 28, 28}, kFloat32, gpu_);
  backend().copy(inputs[0], static_x);
  const float first_loss = host(step(*graph_model, graph_sgd, static_x))[0];  // warm-up, eager
  Tensor loss;
  std::unique_ptr<DeviceGraph> graph = capture([&] { loss = step(*graph_model, graph_sgd, static_x); });
  std::vector<float> graph_losses{first_loss};
  for (size_t s = 1; s < inputs.size(); ++s) {
    backend().copy(inputs[s], static_x);
    graph->replay();
    graph_losses.push_back(host(loss)[0]);
  }
  EXPECT_EQ(graph_losses, eager_losses);
  const std::vector<Tensor> a = eager_model->parameters(), b = graph_model->parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(host(a[i]), host(b[i])) << "parameter " << i;
}

TEST_F(CudaGraphTest, ThePrivatePoolIsReusedAndGivenBackWhenNothingNeedsIt) {
  Tensor x = full({1 << 20}, 1.0, kFloat32, gpu_);
  Tensor out;
  {
    std::unique_ptr<DeviceGraph> graph = capture([&] {
      Tensor t = x;
      for (int k = 0; k < 8; ++k) t = add(t, 1.0);  // each temporary freed as the next is made
      out = t;
    });
    // Two 4 MiB blocks alive at a time at most (plus rounding): the temporaries were reused.
    EXPECT_LE(backend().graph_pool_bytes(), size_t(12) << 20);
    graph->replay();
    EXPECT_EQ(host(out)[123], 9.0f);
    graph->replay();  // x unchanged: the same result, in the same output
    EXPECT_EQ(host(out)[0], 9.0f);
  }
  EXPECT_GT(backend().graph_pool_bytes(), 0u) << "`out` still holds a block of the graph's pool";
  out = Tensor();
  EXPECT_EQ(backend().graph_pool_bytes(), 0u) << "no graph and no tensor of it: the pool goes back to the driver";
}

TEST_F(CudaGraphTest, WhatAGraphCannotHoldIsRefusedAndTheBackendStaysUsable) {
  const std::string copy = error_of([&] { capture([&] { from_vector<float>({1, 2}, {2}, gpu_); }); });
  EXPECT_NE(copy.find("host → device copy"), std::string::npos) << copy;
  EXPECT_NE(copy.find("CUDA graph capture"), std::string::npos) << copy;
  Generator gen(1);
  const std::string random = error_of([&] { capture([&] { randn({8}, gen, kFloat32, gpu_); }); });
  EXPECT_NE(random.find("random numbers"), std::string::npos) << random;
  EXPECT_FALSE(backend().capturing());
  // A host read invalidates the capture: an error, and the stream works afterwards.
  Tensor x = full({4}, 2.0, kFloat32, gpu_);
  EXPECT_THROW(capture([&] { (void)add(x, 1.0).to(cpu_); }), Error);
  EXPECT_FALSE(backend().capturing());
  EXPECT_EQ(host(add(x, 1.0)), (std::vector<float>{3, 3, 3, 3}));
  backend().synchronize();
  EXPECT_EQ(backend().graph_pool_bytes(), 0u);
}

// NOTE [ Random numbers in CUDA graphs ]: dropout captured with a relative generator draws, at
// each replay, the mask of the eager call at the same point of the stream.
TEST_F(CudaGraphTest, ReplayedDropoutDrawsTheEagerMasks) {
  Tensor x = ones({5000}, kFloat32, gpu_);
  Generator eager(3), graphed(3);
  std::vector<std::vector<float>> masks;
  for (int k = 0; k < 3; ++k) masks.push_back(host(dropout(x, 0.4, true, eager)));
  Tensor base = zeros({1}, kInt64, gpu_);
  Tensor y;
  graphed.begin_relative(base);
  std::unique_ptr<DeviceGraph> graph = capture([&] { y = dropout(x, 0.4, true, graphed); });
  const uint64_t drawn = graphed.end_relative();
  ASSERT_TRUE(graph);
  EXPECT_EQ(drawn, 5000u);
  EXPECT_EQ(graphed.offset(), 0u);
  for (int k = 0; k < 3; ++k) {
    backend().fill(base, static_cast<double>(graphed.reserve(drawn)));
    graph->replay();
    EXPECT_EQ(host(y), masks[static_cast<size_t>(k)]) << "replay " << k;
  }
  EXPECT_EQ(graphed.offset(), eager.offset());
}

TEST_F(CudaGraphTest, CaptureCallsOutOfOrderAreErrors) {
  EXPECT_THROW(backend().end_capture(), Error);
  backend().begin_capture();
  EXPECT_THROW(backend().begin_capture(), Error);
  backend().abort_capture();
  EXPECT_FALSE(backend().capturing());
  backend().abort_capture();  // none in progress: nothing to do
}

#endif  // DPTRAIN_HAVE_CUDA

TEST(DeviceGraph, TheCpuBackendHasNoCapture) {
  Runtime runtime;
  Backend& cpu = runtime.cpu().backend();
  EXPECT_FALSE(cpu.supports_capture());
  EXPECT_FALSE(cpu.capturing());
  const std::string message = testing::error_of([&] { cpu.begin_capture(); });
  EXPECT_NE(message.find("begin_capture"), std::string::npos) << message;
  cpu.abort_capture();  // harmless
}

}  // namespace
}  // namespace dp

// Optimiser state through a safetensors file: an optimiser restored from it continues exactly
// as the one that saved it; bad state is refused with the entry named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

#include "optim/registry.h"
#include "optim_harness.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/io/tensor_file.h"

namespace dp {
namespace {

using testing::OptimHarness;
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

NamedTensors named(const std::vector<ParamGroup>& groups) {
  NamedTensors out;
  for (const ParamGroup& g : groups)
    for (size_t i = 0; i < g.params.size(); ++i) out.emplace_back(std::string("p").append(std::to_string(out.size())), g.params[i]);
  return out;
}

class OptimizerStateTest : public ::testing::TestWithParam<const char*> {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};
};

TEST_P(OptimizerStateTest, RoundTripContinuesIdentically) {
  OptimizerSpec spec;
  spec.name = GetParam();
  spec.lr = spec.name == "lars" ? 1.0 : 0.01;
  spec.weight_decay = 0.01;
  OptimHarness a(cpu, kFloat32, spec.lr, 0.01, spec.lr);
  std::unique_ptr<Optimizer> first = make_optimizer(spec, named(a.groups));
  for (int step = 0; step < 5; ++step) {
    a.set_grads(step);
    first->step();
    first->zero_grad();
  }
  const std::string path =
      (std::filesystem::temp_directory_path() / ("dptrain_optim_state_" + spec.name + ".safetensors")).string();
  save_tensors(path, first->state_dict());

  // A second optimiser over copies of the parameters, its state read back from the file.
  OptimHarness b(cpu, kFloat32, spec.lr, 0.01, spec.lr);
  NoGradGuard no_grad;
  for (size_t g = 0; g < 2; ++g)
    for (size_t i = 0; i < a.groups[g].params.size(); ++i) {
      b.groups[g].params[i].copy_(a.groups[g].params[i]);
      b.ref[g][i] = a.ref[g][i];
    }
  std::unique_ptr<Optimizer> second = make_optimizer(spec, named(b.groups));
  second->load_state_dict(load_tensors(path, cpu));
  std::filesystem::remove(path);
  EXPECT_EQ(second->step_count(0, 0), 5);
  for (int step = 5; step < 10; ++step) {
    a.set_grads(step);
    b.set_grads(step);
    first->step();
    second->step();
    first->zero_grad();
    second->zero_grad();
  }
  for (size_t g = 0; g < 2; ++g)
    for (size_t i = 0; i < a.groups[g].params.size(); ++i)
      EXPECT_EQ(a.groups[g].params[i].to_vector<float>(), b.groups[g].params[i].to_vector<float>())
          << spec.name << ": group " << g << " parameter " << i;
}

INSTANTIATE_TEST_SUITE_P(Optimizers, OptimizerStateTest, ::testing::Values("sgd", "adamw", "lars", "lamb", "shampoo"));

TEST(OptimizerStateErrors, NameTheEntry) {
  CpuBackend backend(1);
  Device cpu(&backend);
  OptimHarness h(cpu, kFloat64, 0.01, 0.0, 0.01);
  OptimizerSpec spec;
  spec.name = "adamw";
  std::unique_ptr<Optimizer> opt = make_optimizer(spec, named(h.groups));
  auto error_of = [&](const NamedTensors& state) {
    try {
      opt->load_state_dict(state);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error_of({{"state.0.momentum_buffer", zeros({3, 4}, kFloat64, cpu)}}),
              ::testing::HasSubstr("adamw: load_state_dict: unknown entry 'state.0.momentum_buffer'"));
  EXPECT_THAT(error_of({{"state.99.exp_avg", zeros({3, 4}, kFloat64, cpu)}}),
              ::testing::HasSubstr("unknown entry 'state.99.exp_avg'"));
  EXPECT_THAT(error_of({{"state.0.step", zeros({}, kInt64, cpu)}, {"state.0.exp_avg", zeros({4, 3}, kFloat64, cpu)}}),
              ::testing::HasSubstr("'state.0.exp_avg' is float64[4, 3]"));
  EXPECT_THAT(error_of({{"state.0.exp_avg", zeros({3, 4}, kFloat64, cpu)}}),
              ::testing::HasSubstr("'state.0.step' is missing"));
}

}  // namespace
}  // namespace dp

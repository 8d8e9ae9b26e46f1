// nn::Module: registration, PyTorch-style dotted names and order, modes, zero_grad.
#include <gtest/gtest.h>

#include "nn_test_util.h"

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/nn/activation.h"
#include "runtime/nn/linear.h"
#include "runtime/nn/module.h"
#include "runtime/nn/sequential.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/reduce.h"

namespace dp::nn {
namespace {

// A module with its own parameter and buffer besides children, like torch modules that mix them.
class Block : public Module {
 public:
  Block(Device device, Generator& gen) {
    scale = register_parameter("scale", ones({4}, kFloat32, device));
    steps = register_buffer("steps", zeros({}, kInt64, device));
    proj = register_module("proj", std::make_shared<Linear>(4, 4, device, gen));
    body = register_module("body", std::make_shared<Sequential>(std::initializer_list<std::shared_ptr<Module>>{
                                        std::make_shared<Linear>(4, 3, device, gen), std::make_shared<ReLU>(),
                                        std::make_shared<Linear>(3, 2, device, gen, /*with_bias=*/false)}));
  }
  Tensor forward(const Tensor& x) override { return body->forward(proj->forward(x)); }

  Tensor scale, steps;
  std::shared_ptr<Linear> proj;
  std::shared_ptr<Sequential> body;
};

class ModuleTest : public ::testing::Test {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};
  Generator gen{7};
};

TEST_F(ModuleTest, NamesAreDottedPathsInTorchOrder) {
  Block block(cpu, gen);
  // Own entries first, then children in registration order (pre-order), as torch.
  EXPECT_EQ(names_of(block.named_parameters()),
            (std::vector<std::string>{"scale", "proj.weight", "proj.bias", "body.0.weight", "body.0.bias",
                                      "body.2.weight"}));
  EXPECT_EQ(names_of(block.named_buffers()), (std::vector<std::string>{"steps"}));
  std::vector<std::string> modules;
  for (const auto& [name, m] : block.named_modules()) modules.push_back(name);
  EXPECT_EQ(modules, (std::vector<std::string>{"", "proj", "body", "body.0", "body.1", "body.2"}));
  EXPECT_EQ(block.named_children().size(), 2u);
}

TEST_F(ModuleTest, ParametersAreTheLayersOwnLeavesRequiringGrad) {
  Block block(cpu, gen);
  const std::vector<Tensor> params = block.parameters();
  ASSERT_EQ(params.size(), 6u);
  EXPECT_TRUE(params[1].same(block.proj->weight));  // the registered handle is the member itself
  EXPECT_TRUE(params[5].same(std::static_pointer_cast<Linear>((*block.body)[2])->weight));
  for (const Tensor& p : params) {
    EXPECT_TRUE(p.is_leaf());
    EXPECT_TRUE(p.requires_grad());
  }
  EXPECT_FALSE(block.buffers()[0].requires_grad());
  EXPECT_EQ(block.buffers()[0].dtype(), kInt64);
}

// A module holding only what is registered on it.
class Holder : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
};

// A decoder that is the embedding (BERT's MLM head): one parameter, two state names.
class Tied : public Module {
 public:
  Tied(Device device, Generator& gen) {
    embed = register_module("embed", std::make_shared<Linear>(3, 4, device, gen, /*with_bias=*/false));
    decoder = register_module("decoder", std::make_shared<Holder>());
  }
  Tensor forward(const Tensor& x) override { return x; }
  std::shared_ptr<Linear> embed;
  std::shared_ptr<Holder> decoder;
};

TEST_F(ModuleTest, ATiedTensorIsOneParameterWithTwoStateNames) {
  Tied tied(cpu, gen);
  tied.decoder->register_parameter("weight", tied.embed->weight);
  EXPECT_EQ(names_of(tied.named_parameters()), (std::vector<std::string>{"embed.weight"}));  // once, as torch
  EXPECT_EQ(names_of(tied.state_dict()), (std::vector<std::string>{"embed.weight", "decoder.weight"}));
  // Written once (checkpoints: as Hugging Face's files), under the first name.
  EXPECT_EQ(names_of(without_tied_duplicates(tied.state_dict())), (std::vector<std::string>{"embed.weight"}));
  EXPECT_TRUE(tied.load_state_dict(without_tied_duplicates(tied.state_dict())).missing.empty());
  // Either name alone loads it (Hugging Face files keep one); both must agree.
  const Tensor value = full({4, 3}, 0.5, kFloat32, cpu);
  EXPECT_TRUE(tied.load_state_dict({{"decoder.weight", value}}).missing.empty());
  EXPECT_EQ(tied.embed->weight.to_vector<float>(), value.to_vector<float>());
  EXPECT_NO_THROW(tied.load_state_dict({{"embed.weight", value}, {"decoder.weight", value}}));
  try {
    tied.load_state_dict({{"embed.weight", value}, {"decoder.weight", full({4, 3}, 0.25, kFloat32, cpu)}});
    FAIL() << "tied names with different values were loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'decoder.weight' and 'embed.weight' are one tied tensor in the model but "
                                         "differ in the state"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(tied.load_state_dict({}), Error);  // neither name: missing
}

TEST_F(ModuleTest, RegistrationRejectsBadNames) {
  Block block(cpu, gen);
  Tensor t = zeros({2}, kFloat32, cpu);
  EXPECT_THROW(block.register_parameter("scale", t), Error);  // taken by a parameter
  EXPECT_THROW(block.register_buffer("proj", t), Error);      // taken by a submodule
  EXPECT_THROW(block.register_parameter("a.b", t), Error);
  EXPECT_THROW(block.register_parameter("", t), Error);
  EXPECT_THROW(block.register_module("relu", std::shared_ptr<ReLU>()), Error);
  try {
    block.register_buffer("steps", t);
    FAIL() << "expected a duplicate-name error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'steps' is already used"), std::string::npos) << e.what();
  }
}

TEST_F(ModuleTest, TrainAndEvalAreRecursive) {
  Block block(cpu, gen);
  EXPECT_TRUE(block.is_training());
  block.eval();
  for (const auto& [name, m] : block.named_modules()) EXPECT_FALSE(m->is_training()) << name;
  block.train();
  for (const auto& [name, m] : block.named_modules()) EXPECT_TRUE(m->is_training()) << name;
}

TEST_F(ModuleTest, ZeroGradDropsOrZeroesInPlace) {
  Block block(cpu, gen);
  sum(block.forward(ones({5, 4}, kFloat32, cpu))).backward();
  for (const Tensor& p : block.parameters()) {
    if (!p.same(block.scale)) {
      ASSERT_TRUE(p.grad().defined());  // scale is unused by forward
    }
  }
  EXPECT_FALSE(block.scale.grad().defined());

  const Tensor weight_grad = block.proj->weight.grad();
  block.zero_grad(/*set_to_none=*/false);
  EXPECT_TRUE(block.proj->weight.grad().same(weight_grad));  // same storage, now zero
  for (float v : weight_grad.to_vector<float>()) EXPECT_EQ(v, 0.0f);

  block.zero_grad();
  for (const Tensor& p : block.parameters()) EXPECT_FALSE(p.grad().defined());
}

TEST_F(ModuleTest, ForwardShapeErrorNamesTheLayer) {
  Linear fc(4, 3, cpu, gen);
  try {
    fc.forward(ones({2, 5}, kFloat32, cpu));
    FAIL() << "expected a shape error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Linear(in_features=4, out_features=3)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dp::nn

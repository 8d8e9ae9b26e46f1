// torchvision's ResNet family for ImageNet (v1.5): parameter counts of every depth, ResNet-50's
// names against torchvision's, the stride in conv2, zero_init_residual, and ResNet-50's
// eval-mode logits against torchvision's (tests/fixtures/make_resnet_fixtures.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "common/expect_error.h"
#include "common/reference.h"
#include "model_test_util.h"

#include "models/registry.h"
#include "models/resnet.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/io/tensor_file.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/loss.h"

namespace dp {
namespace {

using testing::parameter_count;

class ResNetImageNetTest : public ::testing::Test {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};
  Generator gen{50};
};

// "parameter <name> [d0,d1,...]" / "buffer <name> [...]" lines, as resnet50_names.txt holds them.
std::vector<std::string> described(const nn::Module& m) {
  std::vector<std::string> out;
  auto describe = [&](const std::string& kind, const std::vector<nn::NamedTensor>& named) {
    for (const auto& [name, t] : named) {
      std::string dims;
      for (int64_t d : t.shape()) {
        if (!dims.empty()) dims += ',';
        dims += std::to_string(d);
      }
      out.push_back(kind + " " + name + " [" + dims + "]");
    }
  };
  describe("parameter", m.named_parameters());
  describe("buffer", m.named_buffers());
  return out;
}

// fill_values() of tests/fixtures/make_resnet_fixtures.py, element for element: the k-th tensor
// of named_parameters() then named_buffers() gets u(i) = ((((i + 7919 k) · 2654435761) mod 2^32)
// >> 16) / 32768 − 1 scaled by its kind; every step is exact or correctly rounded in both
// languages, so both models hold the same float32 values.
void fill_like_the_fixture(nn::Module& model) {
  NoGradGuard no_grad;
  std::vector<nn::NamedTensor> named = model.named_parameters();
  for (nn::NamedTensor& b : model.named_buffers()) named.push_back(b);
  for (size_t k = 0; k < named.size(); ++k) {
    auto& [name, t] = named[k];
    if (name.ends_with("num_batches_tracked")) continue;  // eval mode never reads it
    const auto numel = static_cast<uint64_t>(t.numel());
    const double fan_in = static_cast<double>(t.numel() / t.size(0));
    const double scale = t.dim() < 2 ? 0.0 : name == "fc.weight" ? 1.0 / std::sqrt(fan_in) : std::sqrt(6.0 / fan_in);
    std::vector<float> v(numel);
    for (uint64_t i = 0; i < numel; ++i) {
      const uint64_t h = ((i + 7919 * k) * 2654435761ull) % (1ull << 32);
      const double u = static_cast<double>(h >> 16) / 32768.0 - 1.0;
      const double x = t.dim() >= 2                      ? u * scale
                       : name.ends_with("running_var") ? 1.0 + 0.5 * u
                       : name.ends_with("weight")      ? 1.0 + 0.1 * u
                                                       : 0.1 * u;
      v[i] = static_cast<float>(x);
    }
    t.copy_(from_vector<float>(v, t.shape(), t.device()));
  }
}

// torchvision.models.resnet{18,34,50,101,152}() (1000 classes, 3 channels), counted in torch.
TEST_F(ResNetImageNetTest, ParameterCountsMatchTorchvision) {
  EXPECT_EQ(parameter_count(*resnet18(1000, 3, cpu, gen)), 11'689'512);
  EXPECT_EQ(parameter_count(*resnet34(1000, 3, cpu, gen)), 21'797'672);
  EXPECT_EQ(parameter_count(*resnet50(1000, 3, cpu, gen)), 25'557'032);
  EXPECT_EQ(parameter_count(*resnet101(1000, 3, cpu, gen)), 44'549'160);
  auto r152 = resnet152(1000, 3, cpu, gen);
  EXPECT_EQ(parameter_count(*r152), 60'192'808);
  EXPECT_EQ(r152->named_parameters().size(), 467u);  // torch: 467 parameter tensors, 465 buffers
  EXPECT_EQ(r152->named_buffers().size(), 465u);
  EXPECT_EQ(r152->fc->weight.shape(), (Shape{1000, 2048}));
}

TEST_F(ResNetImageNetTest, ResNet50NamesAndShapesFollowTorchvision) {
  std::ifstream in(std::string(DPTRAIN_SOURCE_DIR) + "/tests/fixtures/resnet50_names.txt");
  ASSERT_TRUE(in) << "tests/fixtures/resnet50_names.txt is missing (make_resnet_fixtures.py writes it)";
  std::vector<std::string> expected;
  for (std::string line; std::getline(in, line);) expected.push_back(line);
  ASSERT_EQ(expected.size(), 161u + 159u);  // a truncated fixture would pass the comparison below

  const std::vector<std::string> actual = described(*resnet50(1000, 3, cpu, gen));
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) ASSERT_EQ(actual[i], expected[i]) << "entry " << i;
}

// v1.5: a Bottleneck strides in conv2 (3×3), conv1 (1×1) keeps the size; the shortcut strides
// too. On 64×64: stem 32 → maxpool 16 → layer1 16 → layer2 8 → layer3 4 → layer4 2.
TEST_F(ResNetImageNetTest, ResNet50StridesInConv2) {
  auto model = resnet50(10, 3, cpu, gen);
  model->eval();
  NoGradGuard no_grad;
  Tensor h = model->maxpool->forward(model->relu->forward(model->bn1->forward(model->conv1->forward(
      randn({1, 3, 64, 64}, gen, kFloat32, cpu)))));
  EXPECT_EQ(h.shape(), (Shape{1, 64, 16, 16}));
  const std::array<int64_t, 4> sizes = {16, 8, 4, 2};
  for (size_t l = 0; l < 4; ++l) {
    SCOPED_TRACE("layer" + std::to_string(l + 1));
    const int64_t in_size = h.size(2), planes = int64_t{64} << l;
    auto* first = dynamic_cast<Bottleneck*>((*model->layers[l])[0].get());
    ASSERT_NE(first, nullptr);
    const Tensor after_conv1 = first->conv1->forward(h);
    EXPECT_EQ(after_conv1.shape(), (Shape{1, planes, in_size, in_size}));  // 1×1, stride 1
    EXPECT_EQ(first->conv2->forward(after_conv1).shape(), (Shape{1, planes, sizes[l], sizes[l]}));
    ASSERT_NE(first->downsample, nullptr);  // layer1: 64 → 256 channels at stride 1
    EXPECT_EQ(first->downsample->forward(h).shape(), (Shape{1, 4 * planes, sizes[l], sizes[l]}));
    EXPECT_EQ(first->conv1->options.stride, 1);
    EXPECT_EQ(first->conv2->options.stride, l == 0 ? 1 : 2);
    h = model->layers[l]->forward(h);
    EXPECT_EQ(h.shape(), (Shape{1, 4 * planes, sizes[l], sizes[l]}));
    for (size_t b = 1; b < model->layers[l]->size(); ++b)  // later blocks keep the shape
      EXPECT_EQ(dynamic_cast<Bottleneck*>((*model->layers[l])[b].get())->downsample, nullptr) << "block " << b;
  }
}

// Every BN weight of the model: 0 exactly for the residual branches' last BN (one per block)
// when asked, else 1.
void expect_zero_init(nn::Module& model, const std::string& last_bn, bool zero_init_residual, int64_t blocks) {
  int64_t zeroed = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    if (p.dim() != 1 || !name.ends_with("weight")) continue;  // BN weights only
    const bool zero = zero_init_residual && name.ends_with("." + last_bn + ".weight");
    zeroed += zero;
    EXPECT_EQ(p.to_vector<float>(), std::vector<float>(static_cast<size_t>(p.numel()), zero ? 0.0f : 1.0f)) << name;
  }
  EXPECT_EQ(zeroed, zero_init_residual ? blocks : 0);
}

TEST_F(ResNetImageNetTest, ZeroInitResidualZeroesTheLastBnOfEveryBranch) {
  // Both have 3 + 4 + 6 + 3 = 16 blocks.
  expect_zero_init(*resnet34(10, 3, cpu, gen), "bn2", false, 16);
  expect_zero_init(*resnet34(10, 3, cpu, gen, true), "bn2", true, 16);
  expect_zero_init(*resnet50(10, 3, cpu, gen), "bn3", false, 16);
  auto r50 = resnet50(10, 3, cpu, gen, true);
  expect_zero_init(*r50, "bn3", true, 16);
  for (const auto& [name, p] : r50->named_parameters()) {  // BN biases stay 0
    if (name.ends_with("bias") && !name.starts_with("fc.")) {
      ASSERT_EQ(p.to_vector<float>(), std::vector<float>(static_cast<size_t>(p.numel()), 0.0f)) << name;
    }
  }
  // A zeroed branch leaves the block relu(0 + shortcut): in eval mode, a block without
  // downsample maps a non-negative x to itself.
  r50->eval();
  NoGradGuard no_grad;
  const Tensor x = relu(randn({1, 256, 4, 4}, gen, kFloat32, cpu));
  EXPECT_EQ((*r50->layers[0])[1]->forward(x).to_vector<float>(), x.to_vector<float>());
}

// Conv init (kaiming_normal_, fan_out, relu) holds for the Bottleneck's convs and shortcuts too.
TEST_F(ResNetImageNetTest, ResNet50InitialisationFollowsTorchvision) {
  auto model = resnet50(10, 3, cpu, gen);
  int64_t convs = 0;
  for (const auto& [name, p] : model->named_parameters()) {
    if (p.dim() != 4) continue;
    ++convs;
    double sq = 0;
    for (double x : p.to_vector<double>()) sq += x * x;
    const double expected_std = std::sqrt(2.0 / static_cast<double>(p.size(0) * p.size(2) * p.size(3)));
    // The sample std of n normals is within a few 1/√(2n) of the truth; the smallest conv has 4096.
    EXPECT_NEAR(std::sqrt(sq / static_cast<double>(p.numel())), expected_std, 0.05 * expected_std) << name;
  }
  EXPECT_EQ(convs, 53);  // stem + 16 blocks × 3 + 4 shortcuts
  for (double x : model->fc->weight.to_vector<double>()) ASSERT_LT(std::abs(x), 1.0 / std::sqrt(2048.0));
}

// Same weights (fill_like_the_fixture) and input on both sides; torchvision's logits in float64.
TEST_F(ResNetImageNetTest, ResNet50EvalLogitsMatchTorchvision) {
  const testing::Fixture f("resnet50_forward");
  ASSERT_EQ(f.option("model"), "resnet50");
  auto model = resnet50(std::stoll(f.option("num_classes")), 3, cpu, gen);
  fill_like_the_fixture(*model);
  model->eval();
  const Tensor x = f.tensor("x", cpu), expected = f.tensor("logits", cpu);  // [2, 3, 64, 64], [2, 10]
  const Tensor logits = model->forward(x);
  // float32 against float64: torch's own float32 forward is 5e-7 off; a stride in conv1 instead
  // of conv2 (v1) moves the logits by 0.11, BN eps 1e-3 instead of 1e-5 by 4e-3.
  EXPECT_TENSOR_NEAR("logits", logits, expected, 1e-5);
  double worst = 0;
  const std::vector<double> a = logits.to_vector<double>(), e = expected.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - e[i]));
  std::ostringstream text;
  text << std::scientific << std::setprecision(2) << worst;
  RecordProperty("max_abs_diff", text.str());  // --gtest_output=xml shows it
}

// The same with the input channels-last (run.channels_last, NOTE [ Channels-last ]): every conv,
// batch norm, pool and residual add runs on NHWC memory, and the logits are torchvision's still.
TEST_F(ResNetImageNetTest, ResNet50ChannelsLastEvalLogitsMatchTorchvision) {
  const testing::Fixture f("resnet50_forward");
  auto model = resnet50(std::stoll(f.option("num_classes")), 3, cpu, gen);
  fill_like_the_fixture(*model);
  model->eval();
  const Tensor x = f.tensor("x", cpu).contiguous(MemoryFormat::ChannelsLast);
  ASSERT_EQ(x.suggest_memory_format(), MemoryFormat::ChannelsLast);
  EXPECT_TENSOR_NEAR("logits", model->forward(x), f.tensor("logits", cpu), 1e-5);
}

// Training mode: a channels-last step gives the NCHW step's loss, every parameter's gradient and
// the running statistics bit for bit when the convolutions are the same computation (the im2col
// path, which runs channels-last calls in NCHW): batch norm, pooling, the residual adds and the
// head are exactly the NCHW arithmetic. (With oneDNN's kernels the two formats run different
// convolution algorithms; a random ResNet-50's float32 gradients then differ by about as much as
// two NCHW algorithms' do, ~2 % of the largest element — the op tests bound them per layer.)
TEST_F(ResNetImageNetTest, ResNet50ChannelsLastTrainingStepIsTheNchwStep) {
  CpuBackend im2col_backend(2, std::nullopt, cpu::ConvPath::Im2col);
  Device device(&im2col_backend);
  auto nchw = resnet50(10, 3, device, gen);
  auto nhwc = resnet50(10, 3, device, gen);
  nhwc->load_state_dict(nchw->state_dict(), /*strict=*/true);
  const Tensor x = randn({8, 3, 64, 64}, gen, kFloat32, device);
  const Tensor labels = from_vector<int64_t>({3, 7, 0, 9, 1, 2, 5, 5}, {8}, device);
  const Tensor loss_a = cross_entropy(nchw->forward(x), labels);
  const Tensor loss_b = cross_entropy(nhwc->forward(x.contiguous(MemoryFormat::ChannelsLast)), labels);
  loss_a.backward();
  loss_b.backward();
  EXPECT_EQ(loss_b.item<double>(), loss_a.item<double>());
  const auto pa = nchw->named_parameters(), pb = nhwc->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(pb[i].second.grad().to_vector<double>(), pa[i].second.grad().to_vector<double>()) << pa[i].first;
  const auto ba = nchw->named_buffers(), bb = nhwc->named_buffers();
  for (size_t i = 0; i < ba.size(); ++i)
    EXPECT_EQ(bb[i].second.to_vector<double>(), ba[i].second.to_vector<double>()) << ba[i].first;
}

// Weights through a file with torch's names (model.init_from, and what dptrain writes): a
// ResNet-18 and a ResNet-50 filled as the fixtures' torchvision models, saved with state_dict()
// — torch's names in torch's order, each module's parameters then its buffers — and loaded
// strictly into fresh models give torchvision's logits within 1e-5 (float32 against torch's
// float64; 7e-7 measured for ResNet-50). The same file loads into torchvision with
// load_state_dict(strict=True) (bench/torchvision_interop.py), holding the very values torch's
// logits were computed from. A state that does not fit is refused listing every problem.
TEST_F(ResNetImageNetTest, WeightsThroughATorchNamedFileGiveTorchvisionsLogits) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("dptrain_resnet_weights_" + std::to_string(::getpid()) + ".safetensors"))
                               .string();
  std::vector<nn::NamedTensor> state;
  for (const char* name : {"resnet18", "resnet50"}) {
    const testing::Fixture f(std::string(name) + "_forward");
    ASSERT_EQ(f.option("model"), name);
    ModelSpec spec;
    spec.name = name;
    spec.num_classes = 10;
    spec.in_channels = 3;
    spec.image_size = 64;
    auto filled = build_model(spec, cpu, gen);
    fill_like_the_fixture(*filled);
    state = filled->state_dict();
    EXPECT_EQ(state.size(), filled->named_parameters().size() + filled->named_buffers().size());
    save_tensors(path, state);
    Generator other(7);
    auto fresh = build_model(spec, cpu, other);
    const nn::Module::LoadReport report = fresh->load_state_dict(load_tensors(path, cpu));
    std::filesystem::remove(path);
    EXPECT_TRUE(report.missing.empty() && report.unexpected.empty());
    fresh->eval();
    EXPECT_TENSOR_NEAR(name, fresh->forward(f.tensor("x", cpu)), f.tensor("logits", cpu), 1e-5);
  }
  ASSERT_GE(state.size(), 7u);  // ResNet-50's, from here on
  std::vector<std::string> head;
  for (size_t i = 0; i < 7; ++i) head.push_back(state[i].first);
  EXPECT_EQ(head, (std::vector<std::string>{"conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean",
                                            "bn1.running_var", "bn1.num_batches_tracked", "layer1.0.conv1.weight"}));
  Generator other(7);

  // Strict: missing and unexpected names and wrong shapes, all in one message; nothing loaded.
  std::vector<nn::NamedTensor> broken(state.begin() + 1, state.end());  // conv1.weight missing
  broken.emplace_back("fc.extra", zeros({3}, kFloat32, cpu));
  auto thousand = resnet50(1000, 3, cpu, other);
  const std::vector<float> before = thousand->state_dict().front().second.to_vector<float>();
  EXPECT_ERROR_CONTAINS(thousand->load_state_dict(broken), "1 missing: conv1.weight");
  EXPECT_ERROR_CONTAINS(thousand->load_state_dict(broken), "1 unexpected: fc.extra");
  EXPECT_ERROR_CONTAINS(thousand->load_state_dict(broken),
                        "'fc.weight' is float32[10, 2048] on cpu in the state but float32[1000, 2048] on cpu");
  EXPECT_EQ(thousand->state_dict().front().second.to_vector<float>(), before);
  // Not strict: the names left out are reported, the rest loaded (shapes must still fit).
  broken.pop_back();
  std::vector<nn::NamedTensor> fitting;
  for (const auto& e : broken)
    if (!e.first.starts_with("fc.")) fitting.push_back(e);
  const nn::Module::LoadReport partial = thousand->load_state_dict(fitting, /*strict=*/false);
  EXPECT_EQ(partial.missing, (std::vector<std::string>{"conv1.weight", "fc.weight", "fc.bias"}));
  EXPECT_TRUE(partial.unexpected.empty());
}

TEST_F(ResNetImageNetTest, ForwardBackwardGivesEveryParameterAFiniteGradient) {
  for (const char* depth : {"resnet50", "resnet34"}) {
    SCOPED_TRACE(depth);
    auto model = std::string(depth) == "resnet50" ? resnet50(10, 3, cpu, gen) : resnet34(10, 3, cpu, gen);
    // 32×32: layer4 runs at 1×1, so training-mode BN there sees 2 values per channel.
    const Tensor logits = model->forward(randn({2, 3, 32, 32}, gen, kFloat32, cpu));
    EXPECT_EQ(logits.shape(), (Shape{2, 10}));
    cross_entropy(logits, from_vector<int64_t>({3, 7}, {2}, cpu)).backward();
    for (const auto& [name, p] : model->named_parameters()) {
      ASSERT_TRUE(p.grad().defined()) << name;
      double sq = 0;
      for (double g : p.grad().to_vector<double>()) sq += g * g;
      EXPECT_TRUE(std::isfinite(sq)) << name;
      EXPECT_GT(sq, 0.0) << name << ": every parameter reaches the loss";
    }
  }
}

}  // namespace
}  // namespace dp

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "common/batch_norm_fold.h"
#include "common/batch_norm_kink.h"
#include "common/expect_error.h"
#include "common/gradcheck.h"
#include "common/reference.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/norm.h"

namespace dp {
namespace {

using testing::compare_float32_with_float64;
using testing::gradcheck;
using testing::noncontiguous_copy;
using testing::random_input;

constexpr double kEps = 1e-5, kMomentum = 0.1;

class NormTest : public ::testing::Test {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};
  Generator gen{7};
  Tensor in(const Shape& s, double lo = -1, double hi = 1) { return random_input(s, gen, cpu, lo, hi); }
  Tensor constant(const Shape& s, double lo = -1, double hi = 1) { return rand(s, gen, kFloat64, cpu, lo, hi); }
};

std::string case_name(bool training, bool affine, const Shape& shape, bool noncontiguous) {
  return std::string(training ? "train" : "eval") + (affine ? " affine " : " plain ") + shape_str(shape) +
         (noncontiguous ? " noncontiguous" : "");
}

// ---- batch_norm ------------------------------------------------------------------------------

TEST_F(NormTest, BatchNormGradcheckTrainEvalAffine2dAnd4dNoncontiguous) {
  for (bool training : {true, false})
    for (bool affine : {true, false})
      for (const Shape& shape : {Shape{5, 3}, Shape{2, 3, 3, 2}})
        for (bool noncontiguous : {false, true}) {
          SCOPED_TRACE(case_name(training, affine, shape, noncontiguous));
          Tensor running_mean = constant({3}, -0.5, 0.5), running_var = constant({3}, 0.5, 1.5);
          Tensor x = in(shape);
          Tensor x_used = noncontiguous ? noncontiguous_copy(x) : x;
          // Built whole: push_back onto a one-element vector trips gcc 12's -Warray-bounds.
          const std::vector<Tensor> inputs =
              affine ? std::vector<Tensor>{x_used, in({3}, 0.5, 1.5), in({3})} : std::vector<Tensor>{x_used};
          auto fn = [=](const std::vector<Tensor>& v) {
            return batch_norm(v[0], affine ? v[1] : Tensor(), affine ? v[2] : Tensor(), running_mean, running_var,
                              training, kMomentum, kEps);
          };
          EXPECT_GRADCHECK(gradcheck(fn, inputs));
        }
}

TEST_F(NormTest, BatchNormParameterGradientsWithoutInputGradient) {
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "train" : "eval");
    Tensor x = constant({4, 3, 2, 2}), running_mean = constant({3}), running_var = constant({3}, 0.5, 1.5);
    auto fn = [=](const std::vector<Tensor>& v) {
      return batch_norm(x, v[0], v[1], running_mean, running_var, training, kMomentum, kEps);
    };
    EXPECT_GRADCHECK(gradcheck(fn, {in({3}), in({3})}));
  }
}

TEST_F(NormTest, BatchNormTrainingStepValuesAndRunningStats) {
  // Channel 0: 1, 2, 3, 4 (mean 2.5, biased var 1.25, unbiased 5/3).
  // Channel 1: 0, 0, 0, 8 (mean 2, biased var 12, unbiased 16).
  Tensor x = from_vector<double>({1, 0, 2, 0, 3, 0, 4, 8}, {4, 2}, cpu);
  x.set_requires_grad(true);
  Tensor running_mean = from_vector<double>({0.5, -1}, {2}, cpu);
  Tensor running_var = from_vector<double>({1, 2}, {2}, cpu);
  const uint64_t mean_version = running_mean.version(), var_version = running_var.version();
  Tensor y = batch_norm(x, Tensor(), Tensor(), running_mean, running_var, true, kMomentum, kEps);

  const std::vector<double> rm = running_mean.to_vector<double>(), rv = running_var.to_vector<double>();
  EXPECT_NEAR(rm[0], 0.9 * 0.5 + 0.1 * 2.5, 1e-15);
  EXPECT_NEAR(rm[1], 0.9 * -1 + 0.1 * 2.0, 1e-15);
  EXPECT_NEAR(rv[0], 0.9 * 1 + 0.1 * (5.0 / 3.0), 1e-15);
  EXPECT_NEAR(rv[1], 0.9 * 2 + 0.1 * 16.0, 1e-15);
  EXPECT_EQ(running_mean.version(), mean_version + 1);
  EXPECT_EQ(running_var.version(), var_version + 1);
  EXPECT_FALSE(running_mean.requires_grad());
  EXPECT_TRUE(running_mean.is_leaf());
  EXPECT_NE(y.grad_fn(), nullptr);

  const std::vector<double> out = y.to_vector<double>();
  EXPECT_NEAR(out[0], (1 - 2.5) / std::sqrt(1.25 + kEps), 1e-12);
  EXPECT_NEAR(out[7], (8 - 2.0) / std::sqrt(12 + kEps), 1e-12);

  // Eval normalises with the running statistics and leaves them alone.
  Tensor e = batch_norm(x, Tensor(), Tensor(), running_mean, running_var, false, kMomentum, kEps);
  EXPECT_NEAR(e.to_vector<double>()[2], (2 - rm[0]) / std::sqrt(rv[0] + kEps), 1e-12);
  EXPECT_EQ(running_mean.to_vector<double>(), rm);
  EXPECT_EQ(running_mean.version(), mean_version + 1);
}

TEST_F(NormTest, BatchNormWithoutRunningStatsTrains) {
  Tensor x = in({6, 2});
  auto fn = [](const std::vector<Tensor>& v) {
    return batch_norm(v[0], Tensor(), Tensor(), Tensor(), Tensor(), true, kMomentum, kEps);
  };
  EXPECT_GRADCHECK(gradcheck(fn, {x}));
}

// The variance stays exact when |mean| >> std (Σx² - (Σx)²/n would lose ~8 digits here).
TEST_F(NormTest, BatchNormStatisticsExactForLargeMean) {
  Tensor noise = constant({16, 2, 8}, -1e-2, 1e-2);
  Tensor x = noise + 1e4;
  Tensor y = batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, kMomentum, 0.0);
  Tensor expected = batch_norm(noise, Tensor(), Tensor(), Tensor(), Tensor(), true, kMomentum, 0.0);
  EXPECT_TENSOR_NEAR("large-mean output", y, expected, 1e-7);
}

// Big enough for the threaded path (> kParallelGrain elements); float32 against float64.
TEST_F(NormTest, BatchNormFloat32MatchesFloat64Threaded) {
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "train" : "eval");
    Tensor running_mean = constant({16}), running_var = constant({16}, 0.5, 1.5);
    auto fn = [=](const std::vector<Tensor>& v) {
      // Running stats cast to the input's dtype; a copy per call, so both runs see the same ones.
      return batch_norm(v[0], v[1], v[2], running_mean.to(v[0].dtype()), running_var.to(v[0].dtype()), training,
                        kMomentum, kEps);
    };
    Tensor x = in({8, 16, 16, 16}, -3, 5);
    EXPECT_EQ(compare_float32_with_float64(fn, {x, in({16}), in({16})}, 2e-4), "");
  }
}

// Each channel is reduced by one thread in a fixed order (NOTE [ Batch norm memory order ] in
// the CPU kernel), so any thread count gives bit-identical results. C = 1 and C = 5 leave some of
// the 3 threads without channels; the inputs are above the parallel grain.
TEST_F(NormTest, BatchNormResultsIndependentOfThreadCount) {
  for (bool training : {true, false})
    for (int64_t C : {1, 5, 16}) {
      SCOPED_TRACE(std::string(training ? "train" : "eval") + " C=" + std::to_string(C));
      const Shape shape{8, C, 70, 70};
      Tensor x = constant(shape, -2, 3), upstream = constant(shape), w = constant({C}, 0.5, 1.5), b = constant({C});
      Tensor mean0 = constant({C}), var0 = constant({C}, 0.5, 1.5);
      auto run_with = [&](CpuBackend& be) {
        Device dev(&be);
        Tensor xd = x.to(dev), wd = w.to(dev), bd = b.to(dev), rm = mean0.to(dev), rv = var0.to(dev);
        for (Tensor* t : {&xd, &wd, &bd}) t->set_requires_grad(true);
        Tensor y = batch_norm(xd, wd, bd, rm, rv, training, kMomentum, kEps);
        y.backward(upstream.to(dev));
        std::vector<std::vector<double>> results;
        for (const Tensor& t : {y, xd.grad(), wd.grad(), bd.grad(), rm, rv}) results.push_back(t.to_vector<double>());
        return results;
      };
      CpuBackend serial(1), threaded(3);
      EXPECT_EQ(run_with(serial), run_with(threaded));
    }
}

TEST_F(NormTest, BatchNormErrors) {
  Tensor x = constant({4, 3, 2}), stat = constant({3}, 0.5, 1.5);
  EXPECT_ERROR_CONTAINS(batch_norm(constant({4}), Tensor(), Tensor(), Tensor(), Tensor(), true, kMomentum, kEps),
                        "batch_norm: expected an input [N, C, *]");
  EXPECT_ERROR_CONTAINS(batch_norm(x, constant({4}), Tensor(), stat, stat, true, kMomentum, kEps),
                        "weight must have shape [3]");
  EXPECT_ERROR_CONTAINS(batch_norm(x, constant({3}).to(kFloat32), Tensor(), stat, stat, true, kMomentum, kEps),
                        "must have the input's dtype");
  EXPECT_ERROR_CONTAINS(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false, kMomentum, kEps),
                        "evaluation mode normalises with running_mean and running_var");
  EXPECT_ERROR_CONTAINS(batch_norm(x, Tensor(), Tensor(), stat, Tensor(), true, kMomentum, kEps),
                        "both running_mean and running_var");
  EXPECT_ERROR_CONTAINS(batch_norm(constant({1, 3}), Tensor(), Tensor(), stat, stat.clone(), true, kMomentum, kEps),
                        "more than 1 value per channel");
  Tensor strided_stat = constant({3, 2}).select(1, 0);
  EXPECT_ERROR_CONTAINS(batch_norm(x, Tensor(), Tensor(), strided_stat, stat, false, kMomentum, kEps),
                        "running_mean must be a contiguous buffer");
}

// ---- batch_norm_add_relu -----------------------------------------------------------------------

// The fused epilogue gives the composition relu(batch_norm(x) + residual) bit for bit in float32 and
// float64 — output, running statistics and every gradient (x, weight, bias, residual) — NCHW and
// channels-last, training and eval, with and without a residual, serial and threaded (8·16·16·16
// passes the parallel grain).
TEST_F(NormTest, BatchNormAddReluIsTheCompositionBitForBit) {
  for (DType dtype : {kFloat32, kFloat64})
    for (bool channels_last : {false, true})
      for (bool training : {true, false})
        for (bool with_residual : {true, false})
          for (const Shape& shape : {Shape{4, 3, 5, 5}, Shape{8, 16, 16, 16}}) {
            SCOPED_TRACE(std::string(dtype_name(dtype)) + (channels_last ? " channels-last " : " ") +
                         (training ? "train " : "eval ") + (with_residual ? "+residual " : "") + shape_str(shape));
            const int64_t C = shape[1];
            const MemoryFormat format = channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
            Tensor x0 = constant(shape, -2, 3).to(dtype).contiguous(format);
            Tensor r0 = constant(shape, -1.5, 1.5).to(dtype).contiguous(format);
            Tensor w0 = constant({C}, 0.5, 1.5).to(dtype), b0 = constant({C}).to(dtype);
            Tensor rm0 = constant({C}).to(dtype), rv0 = constant({C}, 0.5, 1.5).to(dtype);
            Tensor upstream = constant(shape).to(dtype);
            auto run = [&](bool fused) {
              Tensor x = x0.clone().contiguous(format), r = r0.clone().contiguous(format), w = w0.clone(),
                     b = b0.clone();
              for (Tensor* t : {&x, &r, &w, &b}) t->set_requires_grad(true);
              Tensor rm = rm0.clone(), rv = rv0.clone();
              Tensor residual = with_residual ? r : Tensor();
              Tensor y = fused ? batch_norm_add_relu(x, residual, w, b, rm, rv, training, kMomentum, kEps)
                               : relu(with_residual ? add(batch_norm(x, w, b, rm, rv, training, kMomentum, kEps), r)
                                                    : batch_norm(x, w, b, rm, rv, training, kMomentum, kEps));
              EXPECT_EQ(y.suggest_memory_format(), format);
              y.backward(upstream);
              std::vector<std::vector<double>> out;
              for (const Tensor& t : {y, x.grad(), w.grad(), b.grad(), rm, rv})
                out.push_back(t.to(kFloat64).contiguous().to_vector<double>());
              if (with_residual) out.push_back(r.grad().to(kFloat64).contiguous().to_vector<double>());
              else EXPECT_FALSE(r.grad().defined());
              return out;
            };
            EXPECT_EQ(run(true), run(false));
          }
}

// Without a residual, training's backward masks inside batch norm, recomputing relu(bn(x)) from x
// (BatchNormGradPrologue) instead of reading y. At the kink — pre-activations within an ulp of zero
// (common/batch_norm_kink.h), where a recomputation that differed from the forward in any rounding
// would flip the mask — it still gives the composition's results bit for bit, in every dtype (without
// a residual both round once), NCHW and channels-last, serial and threaded.
TEST_F(NormTest, BatchNormReluMaskRecomputedAtTheKinkIsTheComposition) {
  for (DType dtype : {kFloat32, kFloat64, kBFloat16, kFloat16})
    for (bool channels_last : {false, true})
      for (const Shape& shape : {Shape{4, 9, 5, 5}, Shape{8, 16, 16, 16}})
        for (int threads : {1, 2}) {
          SCOPED_TRACE(std::string(dtype_name(dtype)) + (channels_last ? " channels-last " : " ") +
                       shape_str(shape) + " threads " + std::to_string(threads));
          CpuBackend cpu_backend(threads);
          Device dev(&cpu_backend);
          const MemoryFormat format = channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
          const testing::BatchNormKinkCase c = testing::batch_norm_kink_case(dev, dev, dtype, format, shape, 11, kEps);
          const auto fused = testing::batch_norm_relu_step(c, dev, true, kEps);
          EXPECT_EQ(fused, testing::batch_norm_relu_step(c, dev, false, kEps));
          const testing::KinkOutcomes o = testing::kink_outcomes(c, dev, fused[0]);
          EXPECT_GT(c.at_kink, 2 * shape[1]);
          EXPECT_EQ(o.positive + o.zero, c.at_kink);
          if (dtype != kFloat16) {  // float16 stores most kink values as 0
            EXPECT_GT(o.positive, 0);
            EXPECT_GT(o.zero, 0);
          }
        }
}

// The relu prologue recomputes a training forward: refused in eval mode.
TEST_F(NormTest, BatchNormReluPrologueRefusedInEval) {
  Tensor x = constant({4, 3, 5}), dy = constant({4, 3, 5}), dx = Tensor::empty({4, 3, 5}, kFloat64, cpu);
  Tensor mean = constant({3}), invstd = constant({3}, 0.5, 1.5);
  EXPECT_ERROR_CONTAINS(backend.batch_norm_backward(dy, x, Tensor(), mean, invstd, dx, Tensor(), Tensor(), false,
                                                    BatchNormGradPrologue{true, Tensor(), Tensor(), Tensor()}),
                        "relu prologue recomputes the training forward's output");
}

// bn → add → relu's backward: relu's mask read from y and folded into the sums pass
// (BatchNormGradPrologue::relu_output) gives relu's backward then batch norm's, bit for bit.
TEST_F(NormTest, BatchNormReluMaskFoldedIntoTheSumsPassIsTheTwoPasses) {
  testing::expect_relu_mask_fold_matches_two_passes(cpu, cpu);
  testing::expect_relu_mask_fold_refusals(cpu);
}

// Half types: rounded once (the composition rounds after the normalisation and after the add), so
// close to the float64 composition rather than equal to the half one. Gradients through the mask
// of the fused output.
TEST_F(NormTest, BatchNormAddReluHalfTypesCloseToFloat64) {
  for (DType dtype : {kBFloat16, kFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Shape shape{4, 8, 6, 6};
    Tensor x = constant(shape, -2, 3).to(dtype), r = constant(shape, -1.5, 1.5).to(dtype);
    Tensor w = constant({8}, 0.5, 1.5).to(kFloat32), b = constant({8}).to(kFloat32);
    Tensor y = batch_norm_add_relu(x, r, w, b, Tensor(), Tensor(), true, kMomentum, kEps);
    EXPECT_EQ(y.dtype(), dtype);
    Tensor want = relu(add(batch_norm(x.to(kFloat64), w.to(kFloat64), b.to(kFloat64), Tensor(), Tensor(), true,
                                      kMomentum, kEps),
                           r.to(kFloat64)));
    EXPECT_TENSOR_NEAR("y", y.to(kFloat64), want, dtype == kBFloat16 ? 2e-2 : 4e-3);
  }
}

// A residual that broadcasts or has another dtype runs as the composition (same result); a bad
// one gets the composition's error.
TEST_F(NormTest, BatchNormAddReluUnfusableResidualRunsTheComposition) {
  Tensor x = constant({4, 3, 2, 2}), w = constant({3}, 0.5, 1.5), b = constant({3});
  Tensor row = constant({1, 3, 1, 1});
  Tensor fused = batch_norm_add_relu(x, row, w, b, Tensor(), Tensor(), true, kMomentum, kEps);
  Tensor composed = relu(add(batch_norm(x, w, b, Tensor(), Tensor(), true, kMomentum, kEps), row));
  EXPECT_EQ(fused.to_vector<double>(), composed.to_vector<double>());
  Tensor f32 = constant({4, 3, 2, 2}).to(kFloat32);
  EXPECT_EQ(batch_norm_add_relu(x, f32, w, b, Tensor(), Tensor(), true, kMomentum, kEps).dtype(), kFloat64);
  EXPECT_ERROR_CONTAINS(batch_norm_add_relu(x, constant({4, 5}), w, b, Tensor(), Tensor(), true, kMomentum, kEps),
                        "add");
}

// ---- layer_norm ------------------------------------------------------------------------------

TEST_F(NormTest, LayerNormGradcheckOneAndTwoNormalizedDims) {
  const std::pair<Shape, Shape> cases[] = {{{3, 5}, {5}}, {{2, 3, 4}, {3, 4}}};
  for (const auto& [shape, normalized] : cases)
    for (bool affine : {true, false})
      for (bool noncontiguous : {false, true}) {
        SCOPED_TRACE(case_name(true, affine, shape, noncontiguous) + " over " + shape_str(normalized));
        Tensor x = in(shape);
        Tensor x_used = noncontiguous ? noncontiguous_copy(x) : x;
        const std::vector<Tensor> inputs =
            affine ? std::vector<Tensor>{x_used, noncontiguous ? noncontiguous_copy(in(normalized)) : in(normalized),
                                         in(normalized)}
                   : std::vector<Tensor>{x_used};
        Shape ns = normalized;
        auto fn = [ns, affine](const std::vector<Tensor>& v) {
          return layer_norm(v[0], ns, affine ? v[1] : Tensor(), affine ? v[2] : Tensor(), kEps);
        };
        EXPECT_GRADCHECK(gradcheck(fn, inputs));
      }
}

TEST_F(NormTest, LayerNormParameterGradientsWithoutInputGradient) {
  Tensor x = constant({4, 6});
  auto fn = [x](const std::vector<Tensor>& v) { return layer_norm(x, {6}, v[0], v[1], kEps); };
  EXPECT_GRADCHECK(gradcheck(fn, {in({6}), in({6})}));
}

TEST_F(NormTest, LayerNormValues) {
  Tensor x = from_vector<double>({1, 2, 3, 4, 10, 10, 10, 13}, {2, 4}, cpu);
  const std::vector<double> y = layer_norm(x, {4}, Tensor(), Tensor(), kEps).to_vector<double>();
  EXPECT_NEAR(y[0], (1 - 2.5) / std::sqrt(1.25 + kEps), 1e-12);
  // Row 2: mean 10.75, variance (3·0.5625 + 5.0625)/4 = 1.6875.
  EXPECT_NEAR(y[7], (13 - 10.75) / std::sqrt(1.6875 + kEps), 1e-12);
}

TEST_F(NormTest, LayerNormFloat32MatchesFloat64Threaded) {
  auto fn = [](const std::vector<Tensor>& v) { return layer_norm(v[0], {256}, v[1], v[2], kEps); };
  EXPECT_EQ(compare_float32_with_float64(fn, {in({4, 64, 256}, -2, 3), in({256}), in({256})}, 2e-4), "");
}

TEST_F(NormTest, LayerNormErrors) {
  Tensor x = constant({2, 3, 4});
  EXPECT_ERROR_CONTAINS(layer_norm(x, {3}, Tensor(), Tensor(), kEps),
                        "layer_norm: normalized_shape [3] must match the trailing dims of input");
  EXPECT_ERROR_CONTAINS(layer_norm(x, {2, 3, 4, 5}, Tensor(), Tensor(), kEps), "must match the trailing dims");
  EXPECT_ERROR_CONTAINS(layer_norm(x, {3, 4}, constant({4}), Tensor(), kEps), "weight must have shape [3, 4]");
}

// ---- PyTorch fixtures ------------------------------------------------------------------------

#ifdef DPTRAIN_SOURCE_DIR
constexpr double kTorchTol = 1e-10;

TEST_F(NormTest, BatchNormMatchesPyTorch) {
  for (const char* name : {"batch_norm_train", "batch_norm_eval"}) {
    SCOPED_TRACE(name);
    testing::Fixture f(name);
    const bool training = f.option("training") == "true";
    Tensor x = f.tensor("x", cpu), weight = f.tensor("weight", cpu), bias = f.tensor("bias", cpu);
    for (Tensor* t : {&x, &weight, &bias}) t->set_requires_grad(true);
    Tensor running_mean = f.tensor("running_mean", cpu), running_var = f.tensor("running_var", cpu);
    Tensor y = batch_norm(x, weight, bias, running_mean, running_var, training, f.option_double("momentum"),
                          f.option_double("eps"));
    y.backward(f.tensor("grad_out", cpu));
    EXPECT_TENSOR_NEAR("out", y, f.tensor("out", cpu), kTorchTol);
    EXPECT_TENSOR_NEAR("grad_x", x.grad(), f.tensor("grad_x", cpu), kTorchTol);
    EXPECT_TENSOR_NEAR("grad_weight", weight.grad(), f.tensor("grad_weight", cpu), kTorchTol);
    EXPECT_TENSOR_NEAR("grad_bias", bias.grad(), f.tensor("grad_bias", cpu), kTorchTol);
    const char* mean_after = training ? "running_mean_updated" : "running_mean";
    const char* var_after = training ? "running_var_updated" : "running_var";
    EXPECT_TENSOR_NEAR("running_mean", running_mean, f.tensor(mean_after, cpu), kTorchTol);
    EXPECT_TENSOR_NEAR("running_var", running_var, f.tensor(var_after, cpu), kTorchTol);
  }
}

Shape parse_shape(const std::string& s) {
  Shape shape;
  for (size_t pos = 0; pos < s.size();) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    shape.push_back(std::stoll(s.substr(pos, comma - pos)));
    pos = comma + 1;
  }
  return shape;
}

TEST_F(NormTest, LayerNormMatchesPyTorch) {
  for (const char* name : {"layer_norm_last1", "layer_norm_last2"}) {
    SCOPED_TRACE(name);
    testing::Fixture f(name);
    Tensor x = f.tensor("x", cpu), weight = f.tensor("weight", cpu), bias = f.tensor("bias", cpu);
    for (Tensor* t : {&x, &weight, &bias}) t->set_requires_grad(true);
    Tensor y = layer_norm(x, parse_shape(f.option("normalized_shape")), weight, bias, f.option_double("eps"));
    y.backward(f.tensor("grad_out", cpu));
    EXPECT_TENSOR_NEAR("out", y, f.tensor("out", cpu), kTorchTol);
    EXPECT_TENSOR_NEAR("grad_x", x.grad(), f.tensor("grad_x", cpu), kTorchTol);
    EXPECT_TENSOR_NEAR("grad_weight", weight.grad(), f.tensor("grad_weight", cpu), kTorchTol);
    EXPECT_TENSOR_NEAR("grad_bias", bias.grad(), f.tensor("grad_bias", cpu), kTorchTol);
  }
}
#endif

}  // namespace
}  // namespace dp

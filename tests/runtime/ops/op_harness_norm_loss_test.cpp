// Op harness table: batch_norm (training and eval, affine or not, running stats or not, 2-D and
// 4-D), batch_norm_add_relu (the fused epilogue), layer_norm, softmax/log_softmax, attention_softmax, cross_entropy (reductions, label smoothing,
// ignore_index) and embedding (padding_idx).
#include <string>
#include <vector>

#include "common/op_harness.h"
#include "runtime/ops/attention.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/embedding.h"
#include "runtime/ops/loss.h"
#include "runtime/ops/norm.h"

namespace dp::testing::harness {

namespace {

using V = std::vector<Tensor>;

constexpr double kEps = 1e-5, kMomentum = 0.1;

}  // namespace

std::vector<OpCase> norm_loss_cases() {
  std::vector<OpCase> cases;

  // ---- batch_norm: inputs x, then [weight, bias], then [running_mean, running_var] ----
  const std::vector<Kernel> bk{Kernel::BatchNormForward, Kernel::BatchNormBackward, Kernel::Unary,
                              Kernel::BinaryScalar};
  // dx through the batch statistics cancels: a little more room than a pointwise op.
  const Tolerance bt = Tolerance{}.scaled(3);
  auto bn_case = [&](const std::string& name, InputSpec x, bool training, bool affine, bool running) {
    const int64_t C = x.shape[1];
    std::vector<InputSpec> in{std::move(x)};
    if (affine) {
      in.push_back(InputSpec("weight", {C}).positive());
      in.push_back(InputSpec("bias", {C}));
    }
    if (running) {
      in.push_back(InputSpec("running_mean", {C}).range(-0.5, 0.5).no_grad());
      in.push_back(InputSpec("running_var", {C}).positive().no_grad());
    }
    cases.push_back({name, bk, in, [training, affine, running](const V& v) {
                       const size_t r = affine ? 3 : 1;
                       Tensor w = affine ? v[1] : Tensor(), b = affine ? v[2] : Tensor();
                       Tensor rm = running ? v[r] : Tensor(), rv = running ? v[r + 1] : Tensor();
                       Tensor y = kept_format(v[0], batch_norm(v[0], w, b, rm, rv, training, kMomentum, kEps));
                       // The running statistics (updated in place when training) are compared too.
                       return running ? V{y, rm, rv} : V{y};
                     },
                     true, bt});
  };
  bn_case("batch_norm_train_affine_running_4d", InputSpec("x", {4, 3, 5, 5}), true, true, true);
  bn_case("batch_norm_train_affine_running_2d_transposed", InputSpec("x", {9, 5}).transposed(), true, true, true);
  bn_case("batch_norm_train_plain_no_running_2d", InputSpec("x", {7, 33}), true, false, false);
  bn_case("batch_norm_train_plain_running_4d_odd", InputSpec("x", {2, 3, 7, 9}).narrowed(), true, false, true);
  bn_case("batch_norm_train_affine_no_running_4d", InputSpec("x", {3, 4, 3, 5}).range(2, 4), true, true, false);
  bn_case("batch_norm_eval_affine_4d", InputSpec("x", {4, 3, 5, 5}).transposed(), false, true, true);
  bn_case("batch_norm_eval_plain_2d", InputSpec("x", {9, 5}), false, false, true);
  bn_case("batch_norm_eval_affine_empty_batch", InputSpec("x", {0, 3, 4, 4}), false, true, true);
  // Channels-last (NOTE [ Channels-last ]): the CPU's row kernels and CUDA's column kernels / cuDNN
  // NHWC against NCHW float64. 40 channels: more than one 32-channel column tile.
  bn_case("batch_norm_train_affine_running_channels_last", InputSpec("x", {3, 40, 5, 7}).channels_last(), true, true,
          true);
  bn_case("batch_norm_train_plain_channels_last_odd", InputSpec("x", {2, 3, 7, 9}).channels_last(), true, false, false);
  bn_case("batch_norm_eval_affine_channels_last", InputSpec("x", {4, 5, 3, 3}).channels_last(), false, true, true);

  // ---- batch_norm_add_relu: relu(batch_norm(x) + residual) with the epilogue in the kernel;
  // inputs x, [residual], weight, bias, [running_mean, running_var] ----
  const std::vector<Kernel> bark{Kernel::BatchNormForward, Kernel::BatchNormBackward, Kernel::Unary,
                                 Kernel::UnaryBackward, Kernel::BinaryScalar};
  // Gradcheck's loss Σ w·y (w in [0.5, 1.5)) no longer cancels as it does for batch_norm's
  // zero-mean output: relu keeps it positive, ~0.5 per element, so ~2000 over the 4200-element
  // cases, and its rounding (~1e-13) over the 2e-6 step puts ~1e-7 of noise in each numeric
  // derivative (the plain composition shows the same). atol 1e-6 covers that noise.
  const Tolerance bar_tol = bt.gradcheck(1e-6, 1e-5);
  auto bn_add_relu_case = [&](const std::string& name, InputSpec x, bool residual, bool training, bool running) {
    const int64_t C = x.shape[1];
    std::vector<InputSpec> in{x};
    if (residual) {
      InputSpec r = x;
      r.name = "residual";
      in.push_back(r.range(-1.5, 1.5));
    }
    in.push_back(InputSpec("weight", {C}).positive());
    in.push_back(InputSpec("bias", {C}));
    if (running) {
      in.push_back(InputSpec("running_mean", {C}).range(-0.5, 0.5).no_grad());
      in.push_back(InputSpec("running_var", {C}).positive().no_grad());
    }
    cases.push_back({name, bark, in, [residual, training, running](const V& v) {
                       const size_t w = residual ? 2 : 1;
                       Tensor r = residual ? v[1] : Tensor();
                       Tensor rm = running ? v[w + 2] : Tensor(), rv = running ? v[w + 3] : Tensor();
                       Tensor y = kept_format(v[0], batch_norm_add_relu(v[0], r, v[w], v[w + 1], rm, rv, training,
                                                                        kMomentum, kEps));
                       return running ? V{y, rm, rv} : V{y};
                     },
                     true, bar_tol});
  };
  bn_add_relu_case("batch_norm_add_relu_train_running_4d", InputSpec("x", {4, 3, 5, 5}), true, true, true);
  bn_add_relu_case("batch_norm_relu_train_4d_odd", InputSpec("x", {2, 3, 7, 9}).narrowed(), false, true, false);
  bn_add_relu_case("batch_norm_add_relu_eval_2d", InputSpec("x", {9, 5}), true, false, true);
  // Channels-last, 40 channels (16-byte columns in CUDA's kernels) and 3 (one-channel columns).
  bn_add_relu_case("batch_norm_add_relu_train_channels_last", InputSpec("x", {3, 40, 5, 7}).channels_last(), true,
                   true, true);
  bn_add_relu_case("batch_norm_relu_train_channels_last_odd", InputSpec("x", {2, 3, 7, 9}).channels_last(), false,
                   true, false);
  bn_add_relu_case("batch_norm_add_relu_eval_channels_last", InputSpec("x", {4, 5, 3, 3}).channels_last(), true,
                   false, true);

  // ---- layer_norm ----
  const std::vector<Kernel> lk{Kernel::LayerNormForward, Kernel::LayerNormBackward};
  const Tolerance lt = Tolerance{}.scaled(3);
  cases.push_back({"layer_norm_affine_7x33", lk, {InputSpec("x", {7, 33}), InputSpec("w", {33}).positive(), InputSpec("b", {33})},
                   [](const V& v) { return V{layer_norm(v[0], {33}, v[1], v[2], kEps)}; }, true, lt});
  cases.push_back({"layer_norm_plain_5x257_transposed", lk, {InputSpec("x", {5, 257}).transposed()},
                   [](const V& v) { return V{layer_norm(v[0], {257}, Tensor(), Tensor(), kEps)}; }, true, lt});
  cases.push_back({"layer_norm_two_dims_3x4x5", lk,
                   {InputSpec("x", {3, 4, 5}).narrowed(), InputSpec("w", {4, 5}).positive().transposed(), InputSpec("b", {4, 5})},
                   [](const V& v) { return V{layer_norm(v[0], {4, 5}, v[1], v[2], kEps)}; }, true, lt});
  cases.push_back({"layer_norm_weight_only_1x7", lk, {InputSpec("x", {1, 7}).range(5, 6), InputSpec("w", {7}).positive()},
                   [](const V& v) { return V{layer_norm(v[0], {7}, v[1], Tensor(), kEps)}; }, true, lt});
  cases.push_back({"layer_norm_empty_rows_0x8", lk, {InputSpec("x", {0, 8}), InputSpec("w", {8}), InputSpec("b", {8})},
                   [](const V& v) { return V{layer_norm(v[0], {8}, v[1], v[2], kEps)}; }, true, lt});

  // ---- softmax / log_softmax ----
  const std::vector<Kernel> sk{Kernel::SoftmaxForward, Kernel::SoftmaxBackward, Kernel::Copy};
  const Tolerance st = Tolerance{}.scaled(2);
  cases.push_back({"softmax_last_7x33", sk, {InputSpec("x", {7, 33}).range(-3, 3)},
                   [](const V& v) { return V{softmax(v[0], -1)}; }, true, st});
  // |log p| ≈ 5.5 over 1285 outputs: the finite differences' rounding needs a larger eps.
  Tolerance st_long = st;
  st_long.gc_eps = 1e-5;
  st_long.gc_atol = 1e-6;
  cases.push_back({"log_softmax_last_5x257_narrowed", sk, {InputSpec("x", {5, 257}).range(-3, 3).narrowed()},
                   [](const V& v) { return V{log_softmax(v[0], -1)}; }, true, st_long});
  cases.push_back({"softmax_dim0_33x7_transposed", sk, {InputSpec("x", {33, 7}).range(-3, 3).transposed()},
                   [](const V& v) { return V{softmax(v[0], 0)}; }, true, st});
  cases.push_back({"log_softmax_dim1_3x5x7", sk, {InputSpec("x", {3, 5, 7}).range(-3, 3)},
                   [](const V& v) { return V{log_softmax(v[0], 1)}; }, true, st});
  // Large logits: only a kernel that subtracts the row maximum stays finite.
  cases.push_back({"softmax_large_logits_3x33", sk, {InputSpec("x", {3, 33}).range(-80, 80)},
                   [](const V& v) { return V{softmax(v[0], -1)}; }, true, st.gradcheck(1e-6, 1e-4)});
  cases.push_back({"log_softmax_single_class_4x1", sk, {InputSpec("x", {4, 1})},
                   [](const V& v) { return V{log_softmax(v[0], -1)}; }, true, st});
  cases.push_back({"softmax_empty_0x5", sk, {InputSpec("x", {0, 5})}, [](const V& v) { return V{softmax(v[0], -1)}; }});

  // ---- attention_softmax: scores, then the additive mask (NOTE [ Attention softmax ]) ----
  const std::vector<Kernel> ak{Kernel::AttentionSoftmaxForward, Kernel::AttentionSoftmaxBackward, Kernel::Copy};
  auto attention_case = [&](const std::string& name, std::vector<InputSpec> inputs, double scale) {
    cases.push_back({name, ak, std::move(inputs),
                     [scale](const V& v) { return V{attention_softmax(v[0], v.size() > 1 ? v[1] : Tensor(), scale)}; },
                     true, st});
  };
  // A key mask per batch element (BERT's padding mask), warp kernel.
  attention_case("attention_softmax_key_mask_2x3x5x7",
                 {InputSpec("scores", {2, 3, 5, 7}).range(-3, 3), InputSpec("mask", {2, 1, 1, 7}).range(-4, 0).no_grad()},
                 0.5);
  // A mask per query (packed rows' block-diagonal mask), scores a transposed view.
  attention_case("attention_softmax_query_mask_2x2x4x4_transposed",
                 {InputSpec("scores", {2, 2, 4, 4}).range(-3, 3).transposed(),
                  InputSpec("mask", {2, 1, 4, 4}).range(-4, 0).no_grad()},
                 0.25);
  attention_case("attention_softmax_no_mask_1x2x3x33_narrowed", {InputSpec("scores", {1, 2, 3, 33}).range(-3, 3).narrowed()},
                 0.125);
  // Rows past a warp's 1024 columns (the block kernels), one mask for every batch element.
  attention_case("attention_softmax_long_rows_3x1x2x1100",
                 {InputSpec("scores", {3, 1, 2, 1100}).range(-3, 3), InputSpec("mask", {1, 1, 1, 1100}).range(-4, 0).no_grad()},
                 1.0);
  attention_case("attention_softmax_empty_0x2x3x4", {InputSpec("scores", {0, 2, 3, 4})}, 1.0);

  // ---- cross_entropy ----
  const std::vector<Kernel> xk{Kernel::CrossEntropyForward, Kernel::CrossEntropyBackward, Kernel::Reduce,
                               Kernel::Binary, Kernel::BinaryScalar};
  const Tolerance xt = Tolerance{}.scaled(2);
  auto ce_case = [&](const std::string& name, InputSpec logits, InputSpec target, Reduction r, int64_t ignore,
                     double smoothing) {
    cases.push_back({name, xk, {std::move(logits), std::move(target)},
                     [r, ignore, smoothing](const V& v) { return V{cross_entropy(v[0], v[1], r, ignore, smoothing)}; },
                     true, xt});
  };
  ce_case("cross_entropy_mean_7x33", InputSpec("logits", {7, 33}).range(-3, 3), indices("target", {7}, 33),
          Reduction::Mean, -100, 0.0);
  ce_case("cross_entropy_sum_smoothing_0p1_5x257", InputSpec("logits", {5, 257}).range(-3, 3).narrowed(),
          indices("target", {5}, 257), Reduction::Sum, -100, 0.1);
  ce_case("cross_entropy_none_transposed_9x7", InputSpec("logits", {9, 7}).range(-3, 3).transposed(),
          indices("target", {9}, 7), Reduction::None, -100, 0.0);
  ce_case("cross_entropy_mean_ignore_default", InputSpec("logits", {6, 5}).range(-3, 3),
          indices("target", {6}, 5, {1, -100, 4, 0, -100, 2}), Reduction::Mean, -100, 0.0);
  ce_case("cross_entropy_mean_ignore_3_smoothing_0p2", InputSpec("logits", {6, 5}).range(-3, 3),
          indices("target", {6}, 5, {3, 1, 3, 0, 4, 2}), Reduction::Mean, 3, 0.2);
  ce_case("cross_entropy_none_ignore_smoothing_1", InputSpec("logits", {4, 3}).range(-3, 3),
          indices("target", {4}, 3, {2, -1, 0, 1}), Reduction::None, -1, 1.0);
  ce_case("cross_entropy_sum_single_class_3x1", InputSpec("logits", {3, 1}), indices("target", {3}, 1),
          Reduction::Sum, -100, 0.0);
  ce_case("cross_entropy_sum_empty_batch", InputSpec("logits", {0, 5}), indices("target", {0}, 5), Reduction::Sum,
          -100, 0.1);

  // ---- embedding ----
  const std::vector<Kernel> ek{Kernel::EmbeddingForward, Kernel::EmbeddingBackward, Kernel::Fill, Kernel::Copy};
  auto emb_case = [&](const std::string& name, InputSpec idx, InputSpec weight, int64_t padding_idx) {
    // Gradcheck: the padding row gets no gradient by definition, so the rows looked up at
    // padding_idx are multiplied by 0 (a constant mask) and their true derivative is 0 too.
    OpFn masked = [padding_idx](const V& v) {
      Tensor y = embedding(v[0], v[1], padding_idx);
      if (padding_idx < 0) return V{y};
      Tensor idx = Tensor::empty(v[0].shape(), v[1].dtype(), v[0].device());
      v[0].device().backend().copy(v[0], idx);
      Tensor is_pad = Tensor::empty(v[0].shape(), v[1].dtype(), v[0].device());
      v[0].device().backend().binary_scalar(BinaryOp::Equal, idx, static_cast<double>(padding_idx), is_pad);
      return V{mul(y, add(mul(is_pad, -1.0), 1.0).unsqueeze(-1))};
    };
    cases.push_back({name, ek, {std::move(idx), std::move(weight)},
                     [padding_idx](const V& v) { return V{embedding(v[0], v[1], padding_idx)}; }, true, Tolerance{},
                     masked});
  };
  emb_case("embedding_repeated_indices_11_7x33", indices("idx", {11}, 7), InputSpec("weight", {7, 33}), -1);
  emb_case("embedding_padding_idx_2_3x4", indices("idx", {3, 4}, 5, {2, 0, 2, 4, 1, 2, 3, 3, 0, 4, 2, 1}),
           InputSpec("weight", {5, 257}).narrowed(), 2);
  emb_case("embedding_transposed_weight_2x5", indices("idx", {2, 5}, 9), InputSpec("weight", {9, 6}).transposed(), -1);
  emb_case("embedding_padding_idx_0_d1", indices("idx", {9}, 3, {0, 1, 2, 0, 1, 2, 2, 2, 0}), InputSpec("weight", {3, 1}), 0);
  emb_case("embedding_empty_indices", indices("idx", {0}, 4), InputSpec("weight", {4, 5}), -1);
  return cases;
}

}  // namespace dp::testing::harness

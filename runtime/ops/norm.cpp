#include "runtime/ops/norm.h"

#include <algorithm>

#include "runtime/autograd/grad_mode.h"
#include "runtime/autograd/node.h"
#include "runtime/backend/backend.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/kernel_view.h"

namespace dp {

namespace {

// An optional per-feature tensor (weight, bias, running stats): when defined it must have
// `shape`, the input's device, and the input's dtype or, for a float16/bfloat16 input, float32
// (mixed precision: float32 parameters and statistics with low-precision activations,
// NOTE [ Autocast policy ]).
void check_optional_param(const char* op, const char* name, const Tensor& p, const Shape& shape, const Tensor& x) {
  if (!p.defined()) return;
  DP_CHECK(p.shape() == shape, op, ": ", name, " must have shape ", shape_str(shape), " for input ", x.str(),
           ", got ", p.str());
  DP_CHECK(p.dtype() == x.dtype() || p.dtype() == compute_dtype(x.dtype()), op, ": ", name, " ", p.str(),
           " must have the input's dtype",
           compute_dtype(x.dtype()) != x.dtype() ? " or float32" : "", " (input ", x.str(), ")");
  check_same_device(op, x, p);
}

// Detached contiguous view of an optional tensor, reshaped to `shape`; undefined stays undefined.
Tensor optional_operand(const Tensor& t, const Shape& shape) {
  return t.defined() ? t.detach().contiguous().view(shape) : Tensor();
}

// A gradient buffer of `dtype` for input i when backward needs it, else undefined (the kernel
// skips it): the parameter's gradient home when offered (NOTE [ Gradient homes ]). Zero-filled
// for an empty input x, where the kernel does not run.
Tensor grad_buffer_if_needed(const Node& node, size_t i, const Shape& shape, DType dtype, const Tensor& x,
                             MemoryFormat format = MemoryFormat::Contiguous) {
  if (!node.needs_input_grad(i)) return Tensor();
  Tensor buf = format == MemoryFormat::Contiguous ? node.grad_buffer(i, shape, dtype, x.device())
                                                  : Tensor::empty(shape, dtype, x.device(), format);
  if (x.numel() == 0) buf.zero_();
  return buf;
}

// The dtype of a defined parameter, else `fallback` (its gradient is then not needed).
DType dtype_or(const Tensor& t, DType fallback) { return t.defined() ? t.dtype() : fallback; }

// Running statistics are buffers the kernel updates in place (training) and reads as flat arrays.
void check_running_stat(const char* name, const Tensor& stat) {
  if (!stat.defined()) return;
  DP_CHECK(stat.is_contiguous(), "batch_norm: ", name, " must be a contiguous buffer (updated in place), got ",
           stat.str());
  DP_CHECK(!stat.requires_grad(), "batch_norm: ", name, " is a buffer updated in place and must not require grad");
}

// batch_norm, and batch_norm_add_relu's fused form: y = relu(bn(x) + residual) with the epilogue
// applied by the kernel writing y (residual undefined: none; relu false: no clamp). The caller
// has checked that a residual matches x (shape, dtype, device).
Tensor batch_norm_with_epilogue(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                                const Tensor& running_mean, const Tensor& running_var, bool training,
                                double momentum, double eps, const Tensor& residual, bool relu) {
  check_floating(op, x);
  DP_CHECK(x.dim() >= 2, op, ": expected an input [N, C, *] with at least 2 dims, got ", x.str());
  const int64_t C = x.size(1);
  const Shape channels{C};
  check_optional_param(op, "weight", weight, channels, x);
  check_optional_param(op, "bias", bias, channels, x);
  check_optional_param(op, "running_mean", running_mean, channels, x);
  check_optional_param(op, "running_var", running_var, channels, x);
  DP_CHECK(running_mean.defined() == running_var.defined(), op,
           ": give both running_mean and running_var, or neither");
  DP_CHECK(training || running_mean.defined(), op,
           ": evaluation mode normalises with running_mean and running_var, which were not given");
  DP_CHECK(!training || x.numel() / std::max<int64_t>(C, 1) > 1, op,
           ": expected more than 1 value per channel when training, got input ", x.str());
  check_running_stat("running_mean", running_mean);
  check_running_stat("running_var", running_var);

  // A channels-last input is normalised as it lies (NOTE [ Channels-last ]); y, the residual and
  // the gradients keep its format.
  const MemoryFormat format = x.suggest_memory_format();
  Tensor xc = x.detach().contiguous(format);
  Tensor rc = residual.defined() ? residual.detach().contiguous(format) : Tensor();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device(), format);
  Tensor save_mean, save_invstd;
  if (training) {
    save_mean = Tensor::empty(channels, compute_dtype(x.dtype()), x.device());
    save_invstd = Tensor::empty(channels, compute_dtype(x.dtype()), x.device());
  }
  Tensor w = optional_operand(weight, channels), b = optional_operand(bias, channels);
  if (x.numel() > 0)
    x.device().backend().batch_norm_forward(xc, w, b, running_mean, running_var, y, save_mean, save_invstd,
                                            training, momentum, eps, BatchNormEpilogue{rc, relu});
  if (training && running_mean.defined()) {
    // Updated in place by the kernel, outside autograd: bump the versions so a stale saved copy
    // of a running stat is caught.
    running_mean.bump_version();
    running_var.bump_version();
  }

  if (any_requires_grad({&x, &weight, &bias, &residual})) {
    if (!training) {
      // Eval backward treats the running statistics as constants (see the kernel's contract).
      NoGradGuard no_grad;
      save_mean = running_mean.detach();
      save_invstd = rsqrt(running_var.detach() + eps);
    }
    SavedTensor sx(xc), sw(w), smean(save_mean), sinvstd(save_invstd);
    // relu's mask is y > 0 (y = relu(...)), as relu's own backward reads it. Without a residual in
    // training, batch norm's backward recomputes it from x instead (BatchNormGradPrologue: one
    // pass over y, dy and the masked gradient less); with one, the masked gradient is also the
    // residual's: the backward's sums pass writes it as it reads dy and y (relu_output), or, where
    // no sums are taken (eval, or nothing but the residual needs a gradient), relu's backward
    // makes it.
    const bool relu_prologue = relu && training && !residual.defined();
    SavedTensor sy = relu && !relu_prologue ? SavedTensor(y) : SavedTensor();
    SavedTensor sb = relu_prologue ? SavedTensor(b) : SavedTensor();
    const DType weight_dtype = dtype_or(weight, x.dtype()), bias_dtype = dtype_or(bias, x.dtype());
    record(op, y, {x, weight, bias, residual}, [=](const Tensor& g, const Node& n) {
      // g, dx, dresidual [N, C, *] in x's dtype; dweight, dbias [C] in the parameters' dtypes
      Tensor saved_x = sx.get(op);
      const Tensor g_in = g.contiguous(format);
      Tensor gy = g_in;  // the gradient batch norm's output receives: relu's masked one
      Tensor dx = grad_buffer_if_needed(n, 0, saved_x.shape(), saved_x.dtype(), saved_x, format);
      Tensor dweight = grad_buffer_if_needed(n, 1, channels, weight_dtype, saved_x);
      Tensor dbias = grad_buffer_if_needed(n, 2, channels, bias_dtype, saved_x);
      BatchNormGradPrologue prologue;
      prologue.relu = relu_prologue;
      prologue.bias = sb.get(op);
      if (relu && !relu_prologue && saved_x.numel() > 0) {
        // The gradient of y's pre-relu value, which is also the residual's (y = relu(bn + r)).
        const Tensor saved_y = sy.get(op);
        Tensor masked = Tensor::empty(gy.shape(), gy.dtype(), gy.device(), format);
        // (A size-1 dimension may leave gy's strides unlike y's: then the pass of its own.)
        if (training && batch_norm_takes_sums(training, dx, dweight, dbias) && saved_y.strides() == gy.strides()) {
          prologue.relu_output = saved_y;  // folded into the sums pass
          prologue.masked_dy = masked;
        } else {
          saved_x.device().backend().unary_backward(UnaryOp::Relu, kernel_view(saved_y, format),
                                                    kernel_view(saved_y, format), kernel_view(gy, format),
                                                    kernel_view(masked, format));
        }
        gy = masked;
      }
      if (saved_x.numel() > 0) {
        const Tensor dy = prologue.relu_output.defined() ? g_in : gy;
        saved_x.device().backend().batch_norm_backward(dy, saved_x, sw.get(op), smean.get(op), sinvstd.get(op), dx,
                                                       dweight, dbias, training, prologue);
      }
      Tensor dresidual = n.needs_input_grad(3) ? gy : Tensor();
      return std::vector<Tensor>{dx, dweight, dbias, dresidual};
    });
  }
  return y;
}

}  // namespace

// x [N, C, *]; weight, bias, running_mean, running_var [C]; y like x.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum, double eps) {
  return batch_norm_with_epilogue("batch_norm", x, weight, bias, running_mean, running_var, training, momentum,
                                  eps, Tensor(), /*relu=*/false);
}

Tensor batch_norm_add_relu(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                           const Tensor& running_mean, const Tensor& running_var, bool training, double momentum,
                           double eps) {
  constexpr const char* op = "batch_norm_add_relu";
  const bool fusable = !residual.defined() || (residual.shape() == x.shape() && residual.dtype() == x.dtype() &&
                                               residual.device() == x.device());
  if (!fusable)  // broadcasting, type promotion or a device error: the composition handles (or reports) them
    return relu(add(batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps), residual));
  return batch_norm_with_epilogue(op, x, weight, bias, running_mean, running_var, training, momentum, eps,
                                  residual, /*relu=*/true);
}

// x [*, normalized_shape]; weight, bias [normalized_shape]; the kernel sees x as [M, N] with
// N = numel(normalized_shape).
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  constexpr const char* op = "layer_norm";
  check_floating(op, x);
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  DP_CHECK(k >= 1 && x.dim() >= k && std::equal(normalized_shape.begin(), normalized_shape.end(), x.shape().end() - k),
           op, ": normalized_shape ", shape_str(normalized_shape), " must match the trailing dims of input ", x.str());
  check_optional_param(op, "weight", weight, normalized_shape, x);
  check_optional_param(op, "bias", bias, normalized_shape, x);
  const int64_t N = numel_of(normalized_shape);
  const int64_t M = N > 0 ? x.numel() / N : 0;
  const Shape rows{M, N}, features{N};

  Tensor xc = x.detach().contiguous().view(rows);
  Tensor w = optional_operand(weight, features), b = optional_operand(bias, features);
  Tensor y = Tensor::empty(rows, x.dtype(), x.device());
  Tensor save_mean = Tensor::empty({M}, compute_dtype(x.dtype()), x.device());
  Tensor save_rstd = Tensor::empty({M}, compute_dtype(x.dtype()), x.device());
  if (x.numel() > 0) x.device().backend().layer_norm_forward(xc, w, b, y, save_mean, save_rstd, eps);
  Tensor out = y.view(x.shape());

  if (any_requires_grad({&x, &weight, &bias})) {
    SavedTensor sx(xc), sw(w), smean(save_mean), srstd(save_rstd);
    const Shape x_shape = x.shape();
    const DType weight_dtype = dtype_or(weight, x.dtype()), bias_dtype = dtype_or(bias, x.dtype());
    record(op, out, {x, weight, bias}, [=](const Tensor& g, const Node& n) {
      // g, dx [M, N] in x's dtype; dweight, dbias [N] in the parameters' dtypes (returned in the
      // caller's shapes)
      Tensor saved_x = sx.get(op);
      Tensor dx = grad_buffer_if_needed(n, 0, rows, saved_x.dtype(), saved_x);
      // dweight and dbias in the parameters' shapes (their homes' when offered), flat for the kernel.
      Tensor dweight = grad_buffer_if_needed(n, 1, normalized_shape, weight_dtype, saved_x);
      Tensor dbias = grad_buffer_if_needed(n, 2, normalized_shape, bias_dtype, saved_x);
      auto shaped = [](const Tensor& t, const Shape& s) { return t.defined() ? t.view(s) : t; };
      if (saved_x.numel() > 0)
        saved_x.device().backend().layer_norm_backward(g.contiguous().view(rows), saved_x, sw.get(op),
                                                       smean.get(op), srstd.get(op), dx, shaped(dweight, features),
                                                       shaped(dbias, features));
      return std::vector<Tensor>{shaped(dx, x_shape), dweight, dbias};
    });
  }
  return out;
}

}  // namespace dp

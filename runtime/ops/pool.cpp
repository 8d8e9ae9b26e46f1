#include "runtime/ops/pool.h"

#include "runtime/autograd/node.h"

namespace dp {

namespace {

void check_input(const char* op, const Tensor& x) {
  DP_CHECK(x.dim() == 4, op, ": expected a 4-D input [N, C, H, W], got ", x.str());
  check_floating(op, x);
}

// Validates the window and returns the pooled shape [N, C, OH, OW].
Shape pooled_shape(const char* op, const Tensor& x, const Pool2dParams& p) {
  DP_CHECK(p.kernel_h >= 1 && p.kernel_w >= 1 && p.stride_h >= 1 && p.stride_w >= 1, op,
           ": kernel and stride must be ≥ 1, got kernel ", p.kernel_h, "x", p.kernel_w, ", stride ", p.stride_h, "x",
           p.stride_w);
  DP_CHECK(p.pad_h >= 0 && p.pad_w >= 0 && 2 * p.pad_h <= p.kernel_h && 2 * p.pad_w <= p.kernel_w, op,
           ": padding must be ≥ 0 and at most half the kernel (got pad ", p.pad_h, "x", p.pad_w, " for kernel ",
           p.kernel_h, "x", p.kernel_w, ")");
  DP_CHECK(x.size(2) + 2 * p.pad_h >= p.kernel_h && x.size(3) + 2 * p.pad_w >= p.kernel_w, op, ": input ", x.str(),
           " is smaller than the kernel ", p.kernel_h, "x", p.kernel_w, " (padding ", p.pad_h, "x", p.pad_w,
           "): the output would be empty");
  const int64_t OH = (x.size(2) + 2 * p.pad_h - p.kernel_h) / p.stride_h + 1;
  const int64_t OW = (x.size(3) + 2 * p.pad_w - p.kernel_w) / p.stride_w + 1;
  return {x.size(0), x.size(1), OH, OW};
}

}  // namespace

// x [N, C, H, W] → y, indices [N, C, OH, OW]; backward scatters dy to the saved indices.
// y, indices and the gradients keep x's memory format (NOTE [ Channels-last ]).
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x_in, const Pool2dParams& p) {
  check_input("max_pool2d", x_in);
  const MemoryFormat format = x_in.suggest_memory_format();
  Tensor x = x_in.detach().contiguous(format);
  const Shape out_shape = pooled_shape("max_pool2d", x, p);
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device(), format);
  Tensor indices = Tensor::empty(out_shape, kInt32, x.device(), format);
  x.device().backend().max_pool2d_forward(x, y, indices, p);
  const Shape x_shape = x.shape();
  record("max_pool2d", y, {x_in}, [indices, x_shape, p, format](const Tensor& g, const Node&) {
    Tensor dx = Tensor::empty(x_shape, g.dtype(), g.device(), format);
    g.device().backend().max_pool2d_backward(g.contiguous(format), indices, dx, p);
    return std::vector<Tensor>{dx};
  });
  return {y, indices};
}

Tensor max_pool2d(const Tensor& x, const Pool2dParams& p) { return max_pool2d_with_indices(x, p).first; }

// x [N, C, H, W] → y [N, C, OH, OW]; backward spreads each dy over its window.
Tensor avg_pool2d(const Tensor& x_in, const Pool2dParams& p) {
  check_input("avg_pool2d", x_in);
  const MemoryFormat format = x_in.suggest_memory_format();
  Tensor x = x_in.detach().contiguous(format);
  Tensor y = Tensor::empty(pooled_shape("avg_pool2d", x, p), x.dtype(), x.device(), format);
  x.device().backend().avg_pool2d_forward(x, y, p);
  const Shape x_shape = x.shape();
  record("avg_pool2d", y, {x_in}, [x_shape, p, format](const Tensor& g, const Node&) {
    Tensor dx = Tensor::empty(x_shape, g.dtype(), g.device(), format);
    g.device().backend().avg_pool2d_backward(g.contiguous(format), dx, p);
    return std::vector<Tensor>{dx};
  });
  return y;
}

// x [N, C, H, W] → y [N, C, out_h, out_w]
Tensor adaptive_avg_pool2d(const Tensor& x_in, int64_t out_h, int64_t out_w) {
  check_input("adaptive_avg_pool2d", x_in);
  DP_CHECK(out_h >= 1 && out_w >= 1, "adaptive_avg_pool2d: output size must be ≥ 1, got ", out_h, "x", out_w,
           " for input ", x_in.str());
  DP_CHECK(x_in.size(2) >= 1 && x_in.size(3) >= 1, "adaptive_avg_pool2d: input ", x_in.str(),
           " has an empty plane");
  const MemoryFormat format = x_in.suggest_memory_format();
  Tensor x = x_in.detach().contiguous(format);
  Tensor y = Tensor::empty({x.size(0), x.size(1), out_h, out_w}, x.dtype(), x.device(), format);
  x.device().backend().adaptive_avg_pool2d_forward(x, y);
  const Shape x_shape = x.shape();
  record("adaptive_avg_pool2d", y, {x_in}, [x_shape, format](const Tensor& g, const Node&) {
    Tensor dx = Tensor::empty(x_shape, g.dtype(), g.device(), format);
    g.device().backend().adaptive_avg_pool2d_backward(g.contiguous(format), dx);
    return std::vector<Tensor>{dx};
  });
  return y;
}

}  // namespace dp

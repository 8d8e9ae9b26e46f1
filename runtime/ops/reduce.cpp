#include "runtime/ops/reduce.h"

#include <algorithm>

#include "runtime/autograd/autocast.h"
#include "runtime/autograd/node.h"
#include "runtime/backend/backend.h"
#include "runtime/ops/elementwise.h"

namespace dp {

namespace {

// keepdim shape with size 1 on the reduced dims.
Shape kept_shape(const Tensor& x, const Shape& dims, const char* op, std::vector<bool>* reduced_out) {
  std::vector<bool> reduced(x.dim(), dims.empty());
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, x.dim(), op);
    DP_CHECK(!reduced[w] || dims.empty(), op, ": dim ", d, " given twice");
    reduced[w] = true;
  }
  Shape shape = x.shape();
  for (int64_t d = 0; d < x.dim(); ++d)
    if (reduced[d]) shape[d] = 1;
  if (reduced_out) *reduced_out = reduced;
  return shape;
}

Shape drop_reduced(const Shape& kept, const std::vector<bool>& reduced) {
  Shape out;
  for (size_t d = 0; d < kept.size(); ++d)
    if (!reduced[d]) out.push_back(kept[d]);
  return out;
}

Tensor reduce_forward(ReduceOp op, const Tensor& x, const Shape& dims, bool keepdim, const char* name,
                      Shape* kept_out) {
  check_floating(name, x);
  std::vector<bool> reduced;
  Shape kept = kept_shape(x, dims, name, &reduced);
  Tensor out = Tensor::empty(kept, x.dtype(), x.device());
  if (x.numel() == 0 && (op == ReduceOp::Max || op == ReduceOp::Min)) {
    DP_CHECK(false, name, ": cannot reduce an empty tensor ", x.str());
  }
  x.device().backend().reduce(op, x, out);
  *kept_out = kept;
  return keepdim ? out : out.view(drop_reduced(kept, reduced));
}

}  // namespace

Tensor sum(const Tensor& x_in, const Shape& dims, bool keepdim) {
  const Tensor x = autocast_input(AutocastOp::Sum, x_in);  // float32 under autocast
  Shape kept;
  Tensor out = reduce_forward(ReduceOp::Sum, x, dims, keepdim, "sum", &kept);
  Shape in_shape = x.shape();
  record("sum", out, {x}, [in_shape, kept](const Tensor& g, const Node&) {
    return std::vector<Tensor>{g.reshape(kept).expand(in_shape)};
  });
  return out;
}

Tensor sum(const Tensor& x) { return sum(x, {}, false); }

Tensor mean(const Tensor& x_in, const Shape& dims, bool keepdim) {
  const Tensor x = autocast_input(AutocastOp::Mean, x_in);  // float32 under autocast
  Shape kept;
  Tensor out = reduce_forward(ReduceOp::Mean, x, dims, keepdim, "mean", &kept);
  Shape in_shape = x.shape();
  double count = static_cast<double>(x.numel()) / std::max<int64_t>(numel_of(kept), 1);
  record("mean", out, {x}, [in_shape, kept, count](const Tensor& g, const Node&) {
    return std::vector<Tensor>{mul(g.reshape(kept), 1.0 / count).expand(in_shape)};
  });
  return out;
}

Tensor mean(const Tensor& x) { return mean(x, {}, false); }

Tensor amax(const Tensor& x, const Shape& dims, bool keepdim) {
  Shape kept;
  Tensor out = reduce_forward(ReduceOp::Max, x, dims, keepdim, "amax", &kept);
  if (any_requires_grad({&x})) {
    SavedTensor sx(x), sout(out);
    record("amax", out, {x}, [sx, sout, kept](const Tensor& g, const Node&) {
      Tensor x = sx.get("amax");
      Tensor mask = Tensor::empty(x.shape(), x.dtype(), x.device());
      x.device().backend().binary(BinaryOp::Equal, x, sout.get("amax").reshape(kept).expand(x.shape()), mask);
      Tensor count = sum_to(mask, kept);
      return std::vector<Tensor>{div(mul(mask, g.reshape(kept)), count)};
    });
  }
  return out;
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  size_t lead = x.dim() - shape.size();
  DP_CHECK(x.dim() >= static_cast<int64_t>(shape.size()), "sum_to: cannot reduce ", x.str(), " to ",
           shape_str(shape));
  Shape dims;
  for (size_t d = 0; d < static_cast<size_t>(x.dim()); ++d) {
    if (d < lead) {
      dims.push_back(static_cast<int64_t>(d));
    } else if (shape[d - lead] == 1 && x.shape()[d] != 1) {
      dims.push_back(static_cast<int64_t>(d));
    } else {
      DP_CHECK(shape[d - lead] == x.shape()[d], "sum_to: cannot reduce ", x.str(), " to ", shape_str(shape));
    }
  }
  if (dims.empty()) return x.reshape(shape);
  return sum(x, dims, true).reshape(shape);
}

Tensor argmax(const Tensor& x, int64_t dim) {
  DP_CHECK(x.dim() == 2 && wrap_dim(dim, 2, "argmax") == 1, "argmax: supports dim=-1 of a 2-D tensor, got ",
           x.str(), " dim ", dim);
  Tensor xc = x.detach().contiguous();
  Tensor out = Tensor::empty({x.shape()[0]}, kInt64, x.device());
  x.device().backend().argmax_rows(xc, out);
  return out;
}

}  // namespace dp

#include "runtime/ops/shape_ops.h"

#include "runtime/autograd/node.h"
#include "runtime/backend/backend.h"

namespace dp {

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim_in) {
  DP_CHECK(!tensors.empty(), "cat: no tensors given");
  const Tensor& first = tensors[0];
  int64_t d = wrap_dim(dim_in, first.dim(), "cat");
  Shape shape = first.shape();
  shape[d] = 0;
  std::vector<int64_t> sizes;
  for (const Tensor& t : tensors) {
    check_same_device("cat", first, t);
    DP_CHECK(t.dtype() == first.dtype() && t.dim() == first.dim(), "cat: ", t.str(), " does not match ", first.str());
    for (int64_t i = 0; i < t.dim(); ++i)
      DP_CHECK(i == d || t.size(i) == first.size(i), "cat: ", t.str(), " and ", first.str(),
               " differ outside dim ", d);
    sizes.push_back(t.size(d));
    shape[d] += t.size(d);
  }
  Tensor out = Tensor::empty(shape, first.dtype(), first.device());
  int64_t start = 0;
  for (const Tensor& t : tensors) {
    first.device().backend().copy(t, out.detach().narrow(d, start, t.size(d)));
    start += t.size(d);
  }
  record("cat", out, tensors, [sizes, d](const Tensor& g, const Node&) {
    std::vector<Tensor> grads;
    int64_t begin = 0;
    for (int64_t s : sizes) {
      grads.push_back(g.narrow(d, begin, s));
      begin += s;
    }
    return grads;
  });
  return out;
}

std::vector<Tensor> split(const Tensor& t, const std::vector<int64_t>& sizes, int64_t dim_in) {
  int64_t d = wrap_dim(dim_in, t.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  DP_CHECK(total == t.size(d), "split: sizes sum to ", total, " but dim ", d, " of ", t.str(), " has ", t.size(d));
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(t.narrow(d, start, s));
    start += s;
  }
  return out;
}

}  // namespace dp

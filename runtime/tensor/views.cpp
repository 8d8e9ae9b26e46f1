// Views: new shape/strides/offset over the same storage, each with its backward beside it.
#include <algorithm>
#include <numeric>

#include "runtime/autograd/node.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/reduce.h"
#include "runtime/tensor/tensor.h"

namespace dp {

namespace {

// Strides for viewing a tensor of (sizes, strides) as `shape` without copying, or empty when
// impossible (PyTorch's computeStride: each run of merged dims must be contiguous in itself).
Shape view_strides(const Shape& sizes, const Shape& strides, const Shape& shape) {
  if (numel_of(sizes) <= 1 || sizes.empty()) return contiguous_strides(shape);
  Shape out(shape.size());
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[d];
    if (d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return {};
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return {};
  return out;
}

Shape infer_shape(const Shape& shape, int64_t numel, const char* op) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      DP_CHECK(infer < 0, op, ": only one dimension can be -1 in ", shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else {
      DP_CHECK(out[i] >= 0, op, ": invalid size in ", shape_str(shape));
      known *= out[i];
    }
  }
  if (infer >= 0) {
    DP_CHECK(known > 0 && numel % known == 0, op, ": shape ", shape_str(shape), " is invalid for ",
             numel, " elements");
    out[infer] = numel / known;
  }
  DP_CHECK(numel_of(out) == numel, op, ": shape ", shape_str(shape), " is invalid for ", numel,
           " elements");
  return out;
}

std::vector<Tensor> one(Tensor g) { return {std::move(g)}; }

}  // namespace

Tensor Tensor::make_view(Shape sizes, Shape strides, int64_t offset) const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = impl_->dtype;
  impl->version = impl_->version;  // views share the version counter with their base
  return Tensor(std::move(impl));
}

Tensor Tensor::view(const Shape& shape_in) const {
  Shape shape = infer_shape(shape_in, numel(), "view");
  Shape st = view_strides(this->shape(), strides(), shape);
  DP_CHECK(!st.empty() || shape.empty(), "view: ", str(), " cannot be viewed as ", shape_str(shape),
           " without a copy (its strides don't allow it); use reshape()");
  Tensor out = make_view(shape, st, offset());
  Shape in_shape = this->shape();
  record("view", out, {*this}, [in_shape](const Tensor& g, const Node&) { return one(g.reshape(in_shape)); });
  return out;
}

Tensor Tensor::reshape(const Shape& shape_in) const {
  Shape shape = infer_shape(shape_in, numel(), "reshape");
  if (!view_strides(this->shape(), strides(), shape).empty() || shape.empty()) return view(shape);
  return contiguous().view(shape);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  int64_t s = wrap_dim(start_dim, dim(), "flatten"), e = wrap_dim(end_dim, dim(), "flatten");
  DP_CHECK(s <= e, "flatten: start_dim ", start_dim, " after end_dim ", end_dim);
  Shape shape(this->shape().begin(), this->shape().begin() + s);
  int64_t merged = 1;
  for (int64_t d = s; d <= e; ++d) merged *= this->shape()[d];
  shape.push_back(merged);
  shape.insert(shape.end(), this->shape().begin() + e + 1, this->shape().end());
  return reshape(shape);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  Shape perm(dim());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[wrap_dim(d0, dim(), "transpose")], perm[wrap_dim(d1, dim(), "transpose")]);
  return permute(perm);
}

Tensor Tensor::permute(const Shape& dims) const {
  DP_CHECK(static_cast<int64_t>(dims.size()) == dim(), "permute: ", dims.size(), " dims given for ", str());
  Shape sizes(dim()), st(dim()), inverse(dim());
  std::vector<bool> seen(dim(), false);
  for (int64_t i = 0; i < dim(); ++i) {
    int64_t d = wrap_dim(dims[i], dim(), "permute");
    DP_CHECK(!seen[d], "permute: repeated dim ", dims[i]);
    seen[d] = true;
    sizes[i] = shape()[d];
    st[i] = strides()[d];
    inverse[d] = i;
  }
  Tensor out = make_view(sizes, st, offset());
  record("permute", out, {*this}, [inverse](const Tensor& g, const Node&) { return one(g.permute(inverse)); });
  return out;
}

Tensor Tensor::narrow(int64_t dim_in, int64_t start, int64_t length) const {
  int64_t d = wrap_dim(dim_in, dim(), "narrow");
  if (start < 0) start += shape()[d];
  DP_CHECK(start >= 0 && length >= 0 && start + length <= shape()[d], "narrow: range [", start, ", ",
           start + length, ") out of bounds for dim ", d, " of ", str());
  Shape sizes = shape();
  sizes[d] = length;
  Tensor out = make_view(sizes, strides(), offset() + start * strides()[d]);
  Shape in_shape = shape();
  record("narrow", out, {*this}, [in_shape, d, start, length](const Tensor& g, const Node&) {
    Tensor full = zeros(in_shape, g.dtype(), g.device());
    full.narrow(d, start, length).copy_(g);
    return one(full);
  });
  return out;
}

Tensor Tensor::select(int64_t dim_in, int64_t index) const {
  int64_t d = wrap_dim(dim_in, dim(), "select");
  return narrow(d, index, 1).squeeze(d);
}

Tensor Tensor::expand(const Shape& shape_in) const {
  DP_CHECK(static_cast<int64_t>(shape_in.size()) >= dim(), "expand: ", str(), " to fewer dims ",
           shape_str(shape_in));
  size_t lead = shape_in.size() - dim();
  Shape sizes(shape_in.size()), st(shape_in.size(), 0);
  for (size_t i = 0; i < shape_in.size(); ++i) {
    if (i < lead) {
      DP_CHECK(shape_in[i] >= 0, "expand: new leading dims need explicit sizes, got ", shape_str(shape_in));
      sizes[i] = shape_in[i];
      continue;
    }
    int64_t have = shape()[i - lead], want = shape_in[i] == -1 ? have : shape_in[i];
    DP_CHECK(have == want || have == 1, "expand: ", str(), " cannot be expanded to ", shape_str(shape_in));
    sizes[i] = want;
    st[i] = have == want ? strides()[i - lead] : 0;
  }
  if (sizes == shape()) return *this;
  Tensor out = make_view(sizes, st, offset());
  Shape in_shape = shape();
  record("expand", out, {*this}, [in_shape](const Tensor& g, const Node&) { return one(sum_to(g, in_shape)); });
  return out;
}

Tensor Tensor::unsqueeze(int64_t dim_in) const {
  int64_t d = wrap_dim(dim_in, dim() + 1, "unsqueeze");
  Shape sizes = shape(), st = strides();
  int64_t stride = d < dim() ? shape()[d] * strides()[d] : 1;
  sizes.insert(sizes.begin() + d, 1);
  st.insert(st.begin() + d, stride);
  return view_like(sizes, st);
}

Tensor Tensor::squeeze(int64_t dim_in) const {
  int64_t d = wrap_dim(dim_in, dim(), "squeeze");
  if (shape()[d] != 1) return *this;
  Shape sizes = shape(), st = strides();
  sizes.erase(sizes.begin() + d);
  st.erase(st.begin() + d);
  return view_like(sizes, st);
}

// A view with explicit sizes/strides over the same elements (unsqueeze/squeeze): its backward
// is a reshape back.
Tensor Tensor::view_like(Shape sizes, Shape strides) const {
  Tensor out = make_view(std::move(sizes), std::move(strides), offset());
  Shape in_shape = shape();
  record("view", out, {*this}, [in_shape](const Tensor& g, const Node&) { return one(g.reshape(in_shape)); });
  return out;
}

}  // namespace dp

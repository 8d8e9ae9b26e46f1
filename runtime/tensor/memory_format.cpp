// NOTE [ Channels-last ] (memory_format.h).
#include "runtime/tensor/memory_format.h"

#include <string>

#include "runtime/tensor/tensor.h"

namespace dp {

const char* memory_format_name(MemoryFormat format) {
  return format == MemoryFormat::ChannelsLast ? "channels_last" : "contiguous";
}

Shape strides_for(const Shape& shape, MemoryFormat format) {
  if (format == MemoryFormat::Contiguous) return contiguous_strides(shape);
  DP_CHECK(shape.size() == 4, "channels_last needs a 4-D shape [N, C, H, W], got ", shape_str(shape));
  const int64_t C = shape[1], H = shape[2], W = shape[3];
  return {H * W * C, 1, W * C, C};
}

namespace {

// Dense in the dim order `order` (outermost first), ignoring size-1 dims (is_contiguous()'s rule).
bool dense_in_order(const Tensor& t, std::initializer_list<int> order) {
  if (t.numel() == 0) return true;
  int64_t expected = 1;
  for (auto it = std::rbegin(order); it != std::rend(order); ++it) {
    const int64_t size = t.shape()[*it];
    if (size == 1) continue;
    if (t.strides()[*it] != expected) return false;
    expected *= size;
  }
  return true;
}

}  // namespace

bool is_contiguous_in(const Tensor& t, MemoryFormat format) {
  if (format == MemoryFormat::Contiguous) return t.is_contiguous();
  return t.dim() == 4 && dense_in_order(t, {0, 2, 3, 1});
}

MemoryFormat suggest_memory_format(const Tensor& t) {
  if (t.dim() != 4 || t.strides() == contiguous_strides(t.shape())) return MemoryFormat::Contiguous;
  return is_contiguous_in(t, MemoryFormat::ChannelsLast) ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
}

MemoryFormat common_memory_format(const char* op, std::initializer_list<const Tensor*> tensors) {
  bool all_nchw = true, all_nhwc = true;
  for (const Tensor* t : tensors) {
    all_nchw = all_nchw && t->is_contiguous();
    all_nhwc = all_nhwc && is_contiguous_in(*t, MemoryFormat::ChannelsLast);
  }
  if (all_nchw) return MemoryFormat::Contiguous;  // (also when both hold: the same memory)
  if (all_nhwc) return MemoryFormat::ChannelsLast;
  std::string operands;
  for (const Tensor* t : tensors)
    operands += detail::concat(operands.empty() ? "" : ", ", t->str(), " strides ", shape_str(t->strides()));
  throw Error(detail::concat(op, ": expected every operand contiguous or every operand channels-last, got ",
                             operands));
}

}  // namespace dp

// Op harness table: conv2d (bias or not, stride, padding, dilation, groups, 1×1, empty batch) and
// pooling (max with indices, avg with count_include_pad both ways, adaptive avg), each also on
// channels-last input (compared with the NCHW float64 reference; the output must stay
// channels-last).
#include <string>
#include <vector>

#include "common/op_harness.h"
#include "runtime/ops/conv.h"
#include "runtime/ops/pool.h"

namespace dp::testing::harness {

namespace {

using V = std::vector<Tensor>;

Conv2dParams conv(int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh = 1, int64_t dw = 1, int64_t groups = 1) {
  return Conv2dParams{sh, sw, ph, pw, dh, dw, groups};
}

Pool2dParams pool(int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph = 0, int64_t pw = 0,
                  bool count_include_pad = true) {
  return Pool2dParams{kh, kw, sh, sw, ph, pw, count_include_pad};
}

}  // namespace

std::vector<OpCase> conv_pool_cases() {
  std::vector<OpCase> cases;

  // ---- conv2d ----
  const std::vector<Kernel> ck{Kernel::Conv2dForward, Kernel::Conv2dBackwardInput, Kernel::Conv2dBackwardWeight};
  const Tolerance ct = Tolerance{}.scaled(3);  // float32: cuDNN may pick Winograd/FFT algorithms
  auto conv_case = [&](const std::string& name, InputSpec x, Shape w, bool bias, Conv2dParams p) {
    std::vector<InputSpec> in{std::move(x), InputSpec("w", std::move(w))};
    if (bias) in.push_back(InputSpec("bias", {in[1].shape[0]}));
    cases.push_back({name, ck, in,
                     [bias, p](const V& v) { return V{kept_format(v[0], conv2d(v[0], v[1], bias ? v[2] : Tensor(), p))}; },
                     true, ct});
  };
  conv_case("conv2d_3x3_pad1_bias", InputSpec("x", {2, 3, 7, 7}), {4, 3, 3, 3}, true, conv(1, 1, 1, 1));
  conv_case("conv2d_stride2_dilation2", InputSpec("x", {2, 3, 9, 8}), {4, 3, 3, 3}, false, conv(2, 2, 0, 0, 2, 2));
  conv_case("conv2d_dilation2_pad2_same_size", InputSpec("x", {2, 2, 6, 5}), {3, 2, 3, 3}, true, conv(1, 1, 2, 2, 2, 2));
  conv_case("conv2d_groups2_3x2_stride2x1_pad1x0", InputSpec("x", {2, 4, 7, 6}), {6, 2, 3, 2}, true,
            conv(2, 1, 1, 0, 1, 1, 2));
  conv_case("conv2d_depthwise_groups4", InputSpec("x", {2, 4, 5, 5}), {4, 1, 3, 3}, true, conv(1, 1, 1, 1, 1, 1, 4));
  conv_case("conv2d_1x1_bias", InputSpec("x", {2, 3, 5, 7}), {5, 3, 1, 1}, true, conv(1, 1, 0, 0));
  conv_case("conv2d_1x1_stride2", InputSpec("x", {2, 3, 5, 5}), {4, 3, 1, 1}, false, conv(2, 2, 0, 0));
  conv_case("conv2d_5x3_pad2x1_odd_1x2x7x33", InputSpec("x", {1, 2, 7, 33}), {3, 2, 5, 3}, true, conv(1, 1, 2, 1));
  conv_case("conv2d_transposed_input", InputSpec("x", {3, 2, 5, 4}).transposed(), {3, 2, 3, 3}, true, conv(1, 1, 1, 1));
  conv_case("conv2d_narrowed_input_stride3", InputSpec("x", {2, 3, 8, 7}).narrowed(), {2, 3, 2, 2}, true, conv(3, 3, 1, 1));
  conv_case("conv2d_single_output_pixel", InputSpec("x", {3, 2, 3, 3}), {4, 2, 3, 3}, true, conv(1, 1, 0, 0));
  conv_case("conv2d_empty_batch", InputSpec("x", {0, 3, 5, 5}), {4, 3, 3, 3}, true, conv(1, 1, 1, 1));
  // More channels: longer reductions in every direction (K = Cin·KH·KW = 144).
  conv_case("conv2d_16ch_3x3", InputSpec("x", {2, 16, 6, 6}), {8, 16, 3, 3}, true, conv(1, 1, 1, 1));
  // Channels-last (NOTE [ Channels-last ]): cuDNN's NHWC kernels with the transposed filter, oneDNN's
  // nhwc primitives, the im2col fallback.
  conv_case("conv2d_channels_last_3x3_pad1_bias", InputSpec("x", {2, 16, 6, 5}).channels_last(), {8, 16, 3, 3}, true,
            conv(1, 1, 1, 1));
  conv_case("conv2d_channels_last_1x1_stride2", InputSpec("x", {2, 8, 7, 7}).channels_last(), {16, 8, 1, 1}, false,
            conv(2, 2, 0, 0));
  conv_case("conv2d_channels_last_gray_input", InputSpec("x", {3, 1, 6, 6}).channels_last(), {8, 1, 3, 3}, true,
            conv(1, 1, 1, 1));
  conv_case("conv2d_channels_last_groups2_dilation2", InputSpec("x", {2, 4, 7, 6}).channels_last(), {6, 2, 3, 3}, true,
            conv(1, 1, 2, 2, 2, 2, 2));
  conv_case("conv2d_channels_last_odd_3ch_stride2", InputSpec("x", {1, 3, 9, 7}).channels_last(), {5, 3, 3, 3}, false,
            conv(2, 2, 1, 1));

  // ---- max_pool2d: values and the int32 indices; distinct inputs, so no ties in any dtype ----
  const std::vector<Kernel> mk{Kernel::MaxPool2dForward, Kernel::MaxPool2dBackward};
  auto max_case = [&](const std::string& name, InputSpec x, Pool2dParams p) {
    cases.push_back({name, mk, {std::move(x)}, [p](const V& v) {
                       auto [y, idx] = max_pool2d_with_indices(v[0], p);
                       return V{kept_format(v[0], y), kept_format(v[0], idx)};
                     }});
  };
  max_case("max_pool2d_3x3_stride2_pad1", InputSpec("x", {2, 3, 7, 7}).distinct(), pool(3, 3, 2, 2, 1, 1));
  max_case("max_pool2d_2x2_stride2_odd_7x9", InputSpec("x", {2, 2, 7, 9}).distinct().narrowed(), pool(2, 2, 2, 2));
  max_case("max_pool2d_overlapping_3x2_stride1", InputSpec("x", {1, 3, 5, 6}).distinct().transposed(), pool(3, 2, 1, 1));
  max_case("max_pool2d_pad1x0_2x1_stride1x2", InputSpec("x", {2, 2, 5, 5}).distinct(), pool(2, 1, 1, 2, 1, 0));
  max_case("max_pool2d_empty_batch", InputSpec("x", {0, 2, 4, 4}), pool(2, 2, 2, 2));
  max_case("max_pool2d_channels_last_3x3_stride2_pad1", InputSpec("x", {2, 5, 7, 7}).distinct().channels_last(),
           pool(3, 3, 2, 2, 1, 1));
  // 16 channels: whole 16-byte vectors of channels in every dtype (the CUDA vector kernels).
  max_case("max_pool2d_channels_last_16ch_3x3_stride2_pad1", InputSpec("x", {2, 16, 7, 9}).distinct().channels_last(),
           pool(3, 3, 2, 2, 1, 1));
  max_case("max_pool2d_channels_last_overlapping_3x2", InputSpec("x", {1, 3, 5, 6}).distinct().channels_last(),
           pool(3, 2, 1, 1));

  // ---- avg_pool2d ----
  const std::vector<Kernel> ak{Kernel::AvgPool2dForward, Kernel::AvgPool2dBackward};
  auto avg_case = [&](const std::string& name, InputSpec x, Pool2dParams p) {
    cases.push_back({name, ak, {std::move(x)}, [p](const V& v) { return V{kept_format(v[0], avg_pool2d(v[0], p))}; }});
  };
  avg_case("avg_pool2d_3x3_stride2_pad1_include_pad", InputSpec("x", {2, 3, 7, 7}), pool(3, 3, 2, 2, 1, 1, true));
  avg_case("avg_pool2d_3x3_stride2_pad1_exclude_pad", InputSpec("x", {2, 3, 7, 7}).narrowed(), pool(3, 3, 2, 2, 1, 1, false));
  avg_case("avg_pool2d_2x2_stride2_odd_7x9", InputSpec("x", {2, 2, 7, 9}).transposed(), pool(2, 2, 2, 2));
  avg_case("avg_pool2d_3x2_stride1_pad1x1_exclude_pad", InputSpec("x", {1, 2, 5, 6}), pool(3, 2, 1, 1, 1, 1, false));
  avg_case("avg_pool2d_2x3_stride1x2_pad1x1_include_pad", InputSpec("x", {1, 2, 5, 6}), pool(2, 3, 1, 2, 1, 1, true));
  avg_case("avg_pool2d_channels_last_3x3_stride2_pad1_exclude_pad", InputSpec("x", {2, 3, 7, 7}).channels_last(),
           pool(3, 3, 2, 2, 1, 1, false));

  // ---- adaptive_avg_pool2d: uneven windows, global, identity, more outputs than inputs ----
  const std::vector<Kernel> dk{Kernel::AdaptiveAvgPool2dForward, Kernel::AdaptiveAvgPool2dBackward};
  auto adaptive_case = [&](const std::string& name, InputSpec x, int64_t oh, int64_t ow) {
    cases.push_back({name, dk, {std::move(x)},
                     [oh, ow](const V& v) { return V{kept_format(v[0], adaptive_avg_pool2d(v[0], oh, ow))}; }});
  };
  adaptive_case("adaptive_avg_pool2d_7x9_to_3x4", InputSpec("x", {2, 3, 7, 9}), 3, 4);
  adaptive_case("adaptive_avg_pool2d_global_5x7_to_1x1", InputSpec("x", {2, 3, 5, 7}).narrowed(), 1, 1);
  adaptive_case("adaptive_avg_pool2d_identity_4x5", InputSpec("x", {1, 2, 4, 5}).transposed(), 4, 5);
  adaptive_case("adaptive_avg_pool2d_upsample_3x3_to_5x7", InputSpec("x", {1, 2, 3, 3}), 5, 7);
  adaptive_case("adaptive_avg_pool2d_channels_last_global", InputSpec("x", {2, 6, 5, 7}).channels_last(), 1, 1);
  adaptive_case("adaptive_avg_pool2d_channels_last_7x9_to_3x4", InputSpec("x", {2, 3, 7, 9}).channels_last(), 3, 4);
  return cases;
}

}  // namespace dp::testing::harness

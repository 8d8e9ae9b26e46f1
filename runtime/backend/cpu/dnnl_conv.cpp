// NOTE [ CPU convolution on oneDNN ] (dnnl_conv.h).
#include "runtime/backend/cpu/dnnl_conv.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>

#include "runtime/backend/cpu/bf16_gemm.h"
#include "runtime/backend/cpu/omp_threads_scope.h"
#include "runtime/core/error.h"
#include "runtime/ops/creation.h"

namespace dp::cpu {

namespace {

using dnnl::memory;

// ---- Which path ---------------------------------------------------------------------------------


// DPTRAIN_DNNL_CONV_LAYOUT (measuring only): `plain` runs the primitives on NCHW itself;
// `blocked` reorders channels-last activations into oneDNN's blocked layout as NCHW ones are.
bool layout_variable_is(const char* value) {
  const char* v = std::getenv("DPTRAIN_DNNL_CONV_LAYOUT");
  return v != nullptr && std::strcmp(v, value) == 0;
}
bool plain_layout() {
  static const bool plain = layout_variable_is("plain");
  return plain;
}
bool blocked_channels_last() {
  static const bool blocked = layout_variable_is("blocked");
  return blocked;
}

// ---- Keys and compiled primitives --------------------------------------------------------------

enum Pass : int64_t { kForward, kBackwardData, kBackwardWeights };

// Everything a primitive is compiled for: pass, dtype, bias, layout choice, threads, then the
// geometry N C H W K KH KW OH OW stride pad dilation groups.
struct Key {
  std::array<int64_t, 21> v{};
  bool operator==(const Key& o) const { return v == o.v; }
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
    for (int64_t x : k.v) h = (h ^ static_cast<uint64_t>(x)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

struct Geometry {
  int64_t N, C, H, W, K, KH, KW, OH, OW;
  Conv2dParams p;
  DType dtype;
  bool bias;
  bool channels_last;  // activations NHWC (NOTE [ Channels-last ]), else NCHW
};

const char* pass_name(int64_t pass) {
  return pass == kForward ? "conv2d_forward" : pass == kBackwardData ? "conv2d_backward_input" : "conv2d_backward_weight";
}

std::string describe(int64_t pass, const Geometry& g) {
  return detail::concat(pass_name(pass), " on oneDNN: x [", g.N, ", ", g.C, ", ", g.H, ", ", g.W, "], w [", g.K, ", ",
                        g.C / g.p.groups, ", ", g.KH, ", ", g.KW, "], y [", g.N, ", ", g.K, ", ", g.OH, ", ", g.OW,
                        "], stride ", g.p.stride_h, "x", g.p.stride_w, ", pad ", g.p.pad_h, "x", g.p.pad_w,
                        ", dilation ", g.p.dilation_h, "x", g.p.dilation_w, ", groups ", g.p.groups, ", ",
                        dtype_name(g.dtype), g.bias ? ", bias" : "", g.channels_last ? ", channels-last" : "");
}

// One tensor argument: our NCHW (or [K, C/g, KH, KW]) description and the primitive's; when they
// differ, a reorder each way.
struct Operand {
  memory::desc user, inner;
  bool reordered = false;
  dnnl::reorder in, out;  // user → inner (inputs), inner → user (outputs)
};

struct Compiled {
  bool refused = false;
  std::string why;
  dnnl::primitive primitive;
  memory::desc scratch;
  // Forward: x (src), w, y (dst). Backward data: dy (diff_dst), w, dx (diff_src). Backward
  // weights: x (src), dy (diff_dst), dw (diff_weights).
  Operand in0, in1, out;
  // Backward data with accumulate: the result, in the primitive's layout, added into the user's
  // tensor by a reorder with a sum post-op (the backward-data primitive takes no post-ops) — the
  // reorder back that a blocked layout makes anyway, so the sum costs one more read of dx.
  dnnl::reorder out_sum;
  bool can_sum = false;
  int arg_in0 = 0, arg_in1 = 0, arg_out = 0;
  memory::desc bias;  // plain [K]; input of forward, output of backward weights
};

class ThreadCache {
 public:
  ThreadCache() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

  const Compiled& get(const Key& key, int64_t pass, const Geometry& g, bool plain) {
    auto it = compiled_.find(key);
    if (it != compiled_.end()) return it->second;
    Compiled c;
    try {
      build(c, pass, g, plain);
    } catch (const dnnl::error& e) {
      c = Compiled{};
      c.refused = true;
      c.why = e.what();
    }
    return compiled_.emplace(key, std::move(c)).first->second;
  }

  // Runs c on user pointers (bias: forward's input or backward weights' output; may be null);
  // with `sum` (c.can_sum) adds the result into out. The blocked copies and the scratchpad are
  // tensors of `cpu` for the call's length: its caching allocator hands the same blocks out again
  // (to the next call, or to any tensor), and they count towards its limit (NOTE [ CPU memory
  // limit ] in cpu_backend.h) — buffers of our own would hold the largest call's sizes for the
  // thread's life, unseen by the limit.
  void run(const Compiled& c, const void* in0, const void* in1, void* out, void* bias, bool sum, Device cpu) {
    std::array<Tensor, 4> buffers;  // in0, in1, out, scratchpad
    const auto buffer = [&](int i, size_t bytes) {
      buffers[i] = empty({static_cast<int64_t>(std::max<size_t>(bytes, 1))}, kUInt8, cpu);
      return buffers[i].raw_data();
    };
    std::unordered_map<int, memory> args;
    args.emplace(c.arg_in0, input(c.in0, in0, c.in0.reordered ? buffer(0, c.in0.inner.get_size()) : nullptr));
    args.emplace(c.arg_in1, input(c.in1, in1, c.in1.reordered ? buffer(1, c.in1.inner.get_size()) : nullptr));
    memory user_out(c.out.user, engine_, out);
    memory inner_out = c.out.reordered || sum ? memory(c.out.inner, engine_, buffer(2, c.out.inner.get_size()))
                                              : user_out;
    args.emplace(c.arg_out, inner_out);
    if (bias != nullptr)
      args.emplace(c.arg_out == DNNL_ARG_DST ? DNNL_ARG_BIAS : DNNL_ARG_DIFF_BIAS, memory(c.bias, engine_, bias));
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(c.scratch, engine_, buffer(3, c.scratch.get_size())));
    c.primitive.execute(stream_, args);
    if (sum) c.out_sum.execute(stream_, inner_out, user_out);
    else if (c.out.reordered) c.out.out.execute(stream_, inner_out, user_out);
    stream_.wait();
  }

 private:
  memory input(const Operand& o, const void* user, void* buffer) {
    memory u(o.user, engine_, const_cast<void*>(user));
    if (!o.reordered) return u;
    memory inner(o.inner, engine_, buffer);
    o.in.execute(stream_, u, inner);
    return inner;
  }

  void operand(Operand& o, const memory::desc& user, const memory::desc& inner, bool is_input) {
    o.user = user;
    o.inner = inner;
    o.reordered = user != inner;
    if (!o.reordered) return;
    if (is_input) o.in = dnnl::reorder(dnnl::reorder::primitive_desc(engine_, user, engine_, inner));
    else o.out = dnnl::reorder(dnnl::reorder::primitive_desc(engine_, inner, engine_, user));
  }

  void build(Compiled& c, int64_t pass, const Geometry& g, bool plain) {
    const auto dt = g.dtype == kBFloat16 ? memory::data_type::bf16 : memory::data_type::f32;
    const auto tag = g.channels_last ? memory::format_tag::nhwc : memory::format_tag::nchw;
    const memory::desc x({g.N, g.C, g.H, g.W}, dt, tag), y({g.N, g.K, g.OH, g.OW}, dt, tag);
    const int64_t G = g.p.groups;
    const memory::desc w = G == 1 ? memory::desc({g.K, g.C, g.KH, g.KW}, dt, memory::format_tag::oihw)
                                  : memory::desc({G, g.K / G, g.C / G, g.KH, g.KW}, dt, memory::format_tag::goihw);
    auto any = [&](const memory::desc& d) { return plain ? d : memory::desc(d.dims(), dt, memory::format_tag::any); };
    // Channels-last activations are what oneDNN's direct kernels take as they are (NOTE
    // [ Channels-last convolution on oneDNN ]): no reorder either way; only the weights are
    // reordered into the kernel's blocked layout.
    const bool activations_as_given = plain || (g.channels_last && !blocked_channels_last());
    const memory::desc xa = activations_as_given ? x : any(x), ya = activations_as_given ? y : any(y), wa = any(w);
    c.bias = g.bias ? memory::desc({g.K}, dt, memory::format_tag::x) : memory::desc();
    const memory::dims strides{g.p.stride_h, g.p.stride_w}, dilates{g.p.dilation_h - 1, g.p.dilation_w - 1},
        pad_l{g.p.pad_h, g.p.pad_w};
    // Right/bottom padding that makes oneDNN's output size ours (none where the last window
    // ends inside the image: rows it never reaches need no padding).
    const memory::dims pad_r{
        std::max<int64_t>(0, (g.OH - 1) * g.p.stride_h + (g.KH - 1) * g.p.dilation_h + 1 - g.H - g.p.pad_h),
        std::max<int64_t>(0, (g.OW - 1) * g.p.stride_w + (g.KW - 1) * g.p.dilation_w + 1 - g.W - g.p.pad_w)};
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const auto algo = dnnl::algorithm::convolution_direct;
    const bool fwd_bias = pass == kForward && g.bias;
    const dnnl::convolution_forward::desc fwd_desc =
        fwd_bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, xa, wa, c.bias, ya, strides,
                                                   dilates, pad_l, pad_r)
                 : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, xa, wa, ya, strides, dilates,
                                                   pad_l, pad_r);
    if (pass == kForward) {
      dnnl::convolution_forward::primitive_desc pd(fwd_desc, attr, engine_);
      operand(c.in0, x, pd.src_desc(), true);
      operand(c.in1, w, pd.weights_desc(), true);
      operand(c.out, y, pd.dst_desc(), false);
      c.arg_in0 = DNNL_ARG_SRC, c.arg_in1 = DNNL_ARG_WEIGHTS, c.arg_out = DNNL_ARG_DST;
      c.scratch = pd.scratchpad_desc();
      c.primitive = dnnl::convolution_forward(pd);
      return;
    }
    const dnnl::convolution_forward::primitive_desc hint(fwd_desc, engine_);
    if (pass == kBackwardData) {
      dnnl::convolution_backward_data::primitive_desc pd(
          dnnl::convolution_backward_data::desc(algo, xa, wa, ya, strides, dilates, pad_l, pad_r), attr, engine_, hint);
      operand(c.in0, y, pd.diff_dst_desc(), true);
      operand(c.in1, w, pd.weights_desc(), true);
      operand(c.out, x, pd.diff_src_desc(), false);
      try {
        dnnl::post_ops sum;
        sum.append_sum(1.0f);
        dnnl::primitive_attr sum_attr;
        sum_attr.set_post_ops(sum);
        c.out_sum = dnnl::reorder(dnnl::reorder::primitive_desc(engine_, c.out.inner, engine_, x, sum_attr));
        c.can_sum = true;
      } catch (const dnnl::error&) {  // accumulating calls then take the im2col path
      }
      c.arg_in0 = DNNL_ARG_DIFF_DST, c.arg_in1 = DNNL_ARG_WEIGHTS, c.arg_out = DNNL_ARG_DIFF_SRC;
      c.scratch = pd.scratchpad_desc();
      c.primitive = dnnl::convolution_backward_data(pd);
      return;
    }
    const auto bwd_desc = g.bias ? dnnl::convolution_backward_weights::desc(algo, xa, wa, c.bias, ya, strides, dilates,
                                                                             pad_l, pad_r)
                                 : dnnl::convolution_backward_weights::desc(algo, xa, wa, ya, strides, dilates, pad_l,
                                                                             pad_r);
    dnnl::convolution_backward_weights::primitive_desc pd(bwd_desc, attr, engine_, hint);
    operand(c.in0, x, pd.src_desc(), true);
    operand(c.in1, y, pd.diff_dst_desc(), true);
    operand(c.out, w, pd.diff_weights_desc(), false);
    c.arg_in0 = DNNL_ARG_SRC, c.arg_in1 = DNNL_ARG_DIFF_DST, c.arg_out = DNNL_ARG_DIFF_WEIGHTS;
    c.scratch = pd.scratchpad_desc();
    c.primitive = dnnl::convolution_backward_weights(pd);
  }

  dnnl::engine engine_;
  dnnl::stream stream_;
  std::unordered_map<Key, Compiled, KeyHash> compiled_;
};

ThreadCache& thread_cache() {
  thread_local ThreadCache cache;
  return cache;
}

// Whether `auto` sends this convolution to oneDNN. Measured (bench/conv_bench, 2 threads):
// oneDNN's blocked kernels win on ResNet's layers (the 3-channel stem too, 0.64 vs 1.09 ms);
// im2col keeps convolutions with few channels per group (SmallCNN's 1→32 first conv: 0.46 vs
// 0.65 ms) and the weight gradient of a grouped kernel on a 1×1 map, where im2col computes only
// the centre tap. (Weight gradients with at most half their (tap, output) pairs live never get
// here: conv.cpp runs them tap by tap, NOTE [ Weight gradient tap by tap ].)
bool auto_choice(int64_t pass, const Geometry& g) {
  if (g.channels_last) return true;  // im2col would copy the activations to NCHW and back
  const int64_t Cg = g.C / g.p.groups;
  if (!(Cg >= 8 || g.K / g.p.groups >= 64)) return false;
  if (pass == kBackwardWeights && g.H == 1 && g.W == 1 && g.KH * g.KW > 1) return false;
  return true;
}

// Runs `pass` on oneDNN when chosen; false when the im2col path should.
bool convolve(int64_t pass, const Geometry& g, const void* in0, const void* in1, void* out, void* bias, bool sum,
              int threads, ConvPath path, Device cpu) {
  if (path == ConvPath::Im2col) return false;
  if (g.dtype != kFloat32 && !(g.dtype == kBFloat16 && bf16_gemm_available())) return false;
  if (g.N == 0 || g.C == 0 || g.K == 0 || g.OH <= 0 || g.OW <= 0) return false;  // nothing oneDNN can describe
  if (path == ConvPath::Auto && !auto_choice(pass, g)) return false;
  const bool plain = plain_layout();
  Key key;
  key.v = {pass, static_cast<int64_t>(g.dtype), g.bias, plain, threads, g.N, g.C, g.H, g.W, g.K, g.KH, g.KW, g.OH,
           g.OW, g.p.stride_h, g.p.stride_w, g.p.pad_h, g.p.pad_w, g.p.dilation_h * 4096 + g.p.dilation_w, g.p.groups,
           g.channels_last};
  ThreadCache& cache = thread_cache();
  const Compiled* c;
  {
    OmpThreadsScope scope(threads);  // kernels are blocked for the team they will run on
    c = &cache.get(key, pass, g, plain);
  }
  if (c->refused) {
    if (path == ConvPath::Auto) return false;
    throw Error(detail::concat(describe(pass, g), ": oneDNN refused it (", c->why, ")"));
  }
  if (sum && !c->can_sum) {
    if (path == ConvPath::Auto) return false;
    throw Error(detail::concat(describe(pass, g), ": oneDNN cannot add the result into the gradient"));
  }
  OmpThreadsScope scope(threads);
  try {
    cache.run(*c, in0, in1, out, bias, sum, cpu);
  } catch (const dnnl::error& e) {
    throw Error(detail::concat(describe(pass, g), ": oneDNN failed (", e.what(), ")"));
  }
  return true;
}

// x and y: the input and output side's activations (dx and dy for the backward passes).
Geometry geometry(const char* op, const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& p,
                  bool bias) {
  const bool channels_last = common_memory_format(op, {&x, &y}) == MemoryFormat::ChannelsLast;
  return {x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2), w.size(3), y.size(2), y.size(3),
          p,         x.dtype(), bias,      channels_last};
}

}  // namespace

ConvPath conv_path_from_environment() {
  const char* v = std::getenv("DPTRAIN_CPU_CONV");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) return ConvPath::Auto;
  if (std::strcmp(v, "im2col") == 0) return ConvPath::Im2col;
  if (std::strcmp(v, "onednn") == 0 || std::strcmp(v, "dnnl") == 0) return ConvPath::Dnnl;
  throw Error(detail::concat("DPTRAIN_CPU_CONV must be auto, im2col or onednn, not '", v, "'"));
}

bool dnnl_conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, const Conv2dParams& p,
                         int threads, ConvPath path) {
  const Geometry g = geometry("conv2d_forward", x, w, y, p, bias.defined());
  return convolve(kForward, g, x.raw_data(), w.raw_data(), y.raw_data(), bias.defined() ? bias.raw_data() : nullptr,
                  false, threads, path, x.device());
}

bool dnnl_conv2d_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx, const Conv2dParams& p,
                                bool accumulate, int threads, ConvPath path) {
  const Geometry g = geometry("conv2d_backward_input", dx, w, dy, p, false);
  return convolve(kBackwardData, g, dy.raw_data(), w.raw_data(), dx.raw_data(), nullptr, accumulate, threads, path,
                  dy.device());
}

bool dnnl_conv2d_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& dbias,
                                 const Conv2dParams& p, int threads, ConvPath path) {
  const Geometry g = geometry("conv2d_backward_weight", x, dw, dy, p, dbias.defined());
  return convolve(kBackwardWeights, g, x.raw_data(), dy.raw_data(), dw.raw_data(),
                  dbias.defined() ? dbias.raw_data() : nullptr, false, threads, path, x.device());
}

}  // namespace dp::cpu

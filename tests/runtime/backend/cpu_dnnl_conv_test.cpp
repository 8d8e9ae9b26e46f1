// The oneDNN convolution path (NOTE [ CPU convolution on oneDNN ]) against the im2col path and
// the float64 im2col result, over geometries ResNet and SmallCNN use and awkward ones.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <iterator>
#include <string>
#include <vector>

#include "runtime/backend/cpu/bf16_gemm.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cpu/dnnl_conv.h"
#include "runtime/ops/creation.h"

namespace dp {
namespace {

using cpu::ConvPath;

struct Geo {
  const char* name;
  int64_t N, C, H, W, K, KH, KW;
  int64_t sh, sw, ph, pw, dil, groups;
  bool bias;
};

const Geo kGeos[] = {
    {"1x1", 5, 16, 8, 8, 16, 1, 1, 1, 1, 0, 0, 1, 1, false},
    {"1x1_s2_downsample", 5, 64, 8, 8, 128, 1, 1, 2, 2, 0, 0, 1, 1, false},
    {"3x3_odd_C3_bias", 5, 3, 13, 17, 20, 3, 3, 1, 1, 1, 1, 1, 1, true},
    {"3x3_s1_odd", 1, 24, 13, 17, 40, 3, 3, 1, 1, 1, 1, 1, 1, false},
    {"3x3_s2_odd", 5, 24, 13, 17, 40, 3, 3, 2, 2, 1, 1, 1, 1, false},
    {"3x3_s2_resnet", 5, 64, 8, 8, 128, 3, 3, 2, 2, 1, 1, 1, 1, false},
    {"7x7_s2_stem", 2, 3, 32, 32, 64, 7, 7, 2, 2, 3, 3, 1, 1, false},
    {"3x3_dilation2_bias", 5, 32, 9, 9, 48, 3, 3, 1, 1, 2, 2, 2, 1, true},
    {"3x3_groups4_bias", 5, 32, 10, 12, 64, 3, 3, 1, 1, 1, 1, 1, 4, true},
    {"3x3_depthwise", 1, 40, 7, 7, 40, 3, 3, 1, 1, 1, 1, 1, 40, false},
    {"5x3_strides21_bias", 3, 17, 11, 14, 33, 5, 3, 2, 1, 2, 1, 1, 1, true},
    {"3x3_on_1x1_map", 5, 512, 1, 1, 64, 3, 3, 1, 1, 1, 1, 1, 1, false},
    {"smallcnn_conv1", 5, 1, 28, 28, 32, 3, 3, 1, 1, 1, 1, 1, 1, true},
};

int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

struct Result {
  std::vector<double> y, dx, dw, db;
};

// Forward, input gradient and weight (+bias) gradient of g on `path`, in `dtype`, from the same
// float32 draws (rounded to dtype first when narrower).
Result run(const Geo& g, int threads, ConvPath path, DType dtype) {
  CpuBackend backend(threads, CpuGemm::OpenBlas, path);
  Device cpu(&backend);
  Generator gen(11);
  Conv2dParams p;
  p.stride_h = g.sh, p.stride_w = g.sw, p.pad_h = g.ph, p.pad_w = g.pw, p.dilation_h = p.dilation_w = g.dil;
  p.groups = g.groups;
  const Shape ys{g.N, g.K, out_size(g.H, g.KH, g.sh, g.ph, g.dil), out_size(g.W, g.KW, g.sw, g.pw, g.dil)};
  Tensor x = rand({g.N, g.C, g.H, g.W}, gen, kFloat32, cpu, -1, 1).to(dtype);
  Tensor w = rand({g.K, g.C / g.groups, g.KH, g.KW}, gen, kFloat32, cpu, -1, 1).to(dtype);
  Tensor b = g.bias ? rand({g.K}, gen, kFloat32, cpu, -1, 1).to(dtype) : Tensor();
  Tensor dy = rand(ys, gen, kFloat32, cpu, -1, 1).to(dtype);
  Tensor y = empty(ys, dtype, cpu), dx = empty(x.shape(), dtype, cpu), dw = empty(w.shape(), dtype, cpu);
  Tensor db = g.bias ? empty({g.K}, dtype, cpu) : Tensor();
  backend.conv2d_forward(x, w, b, y, p);
  backend.conv2d_backward_input(dy, w, dx, p, false);
  backend.conv2d_backward_weight(dy, x, dw, db, p);
  Result r;
  r.y = y.to(kFloat64).to_vector<double>();
  r.dx = dx.to(kFloat64).to_vector<double>();
  r.dw = dw.to(kFloat64).to_vector<double>();
  if (g.bias) r.db = db.to(kFloat64).to_vector<double>();
  return r;
}

// |got - want| ≤ abs_tol·sqrt(terms) + rel_tol·|want| for every element.
void expect_close(const std::vector<double>& got, const std::vector<double>& want, int64_t terms, double abs_tol,
                  double rel_tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double tol = abs_tol * std::sqrt(static_cast<double>(terms));
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol + rel_tol * std::abs(want[i])) << what << ", element " << i;
}

void compare(const Geo& g, const Result& got, const Result& want, double abs_tol, double rel_tol,
             const std::string& what) {
  const int64_t OH = out_size(g.H, g.KH, g.sh, g.ph, g.dil), OW = out_size(g.W, g.KW, g.sw, g.pw, g.dil);
  const int64_t fwd_terms = g.C / g.groups * g.KH * g.KW, dx_terms = g.K / g.groups * g.KH * g.KW,
                dw_terms = g.N * OH * OW;
  expect_close(got.y, want.y, fwd_terms, abs_tol, rel_tol, what + " forward");
  expect_close(got.dx, want.dx, dx_terms, abs_tol, rel_tol, what + " backward_input");
  expect_close(got.dw, want.dw, dw_terms, abs_tol, rel_tol, what + " backward_weight");
  expect_close(got.db, want.db, dw_terms, abs_tol, rel_tol, what + " backward_bias");
}

TEST(CpuDnnlConv, Float32MatchesIm2colAndFloat64) {
  for (const Geo& g : kGeos) {
    const Result ref = run(g, 1, ConvPath::Im2col, kFloat64);
    for (int threads : {1, 2}) {
      const std::string what = std::string(g.name) + ", " + std::to_string(threads) + " thread(s)";
      const Result onednn = run(g, threads, ConvPath::Dnnl, kFloat32);
      const Result im2col = run(g, threads, ConvPath::Im2col, kFloat32);
      compare(g, onednn, ref, 1e-5, 1e-6, what + ", oneDNN vs float64");
      compare(g, onednn, im2col, 2e-5, 2e-6, what + ", oneDNN vs im2col");
    }
  }
}

TEST(CpuDnnlConv, AutoMatchesIm2col) {
  for (const Geo& g : kGeos) {
    const Result a = run(g, 2, ConvPath::Auto, kFloat32), b = run(g, 2, ConvPath::Im2col, kFloat32);
    compare(g, a, b, 2e-5, 2e-6, std::string(g.name) + ", auto vs im2col");
  }
}

TEST(CpuDnnlConv, Float64StaysOnIm2col) {  // oneDNN has no float64: even when forced, im2col runs
  const Geo& g = kGeos[2];
  const Result a = run(g, 2, ConvPath::Dnnl, kFloat64), b = run(g, 1, ConvPath::Im2col, kFloat64);
  compare(g, a, b, 1e-13, 1e-13, "float64 forced to oneDNN");
}

TEST(CpuDnnlConv, BFloat16MatchesFloat64WithFloat32Accumulation) {
  if (!cpu::bf16_gemm_available()) GTEST_SKIP() << "no native bfloat16 on this CPU";
  for (const Geo& g : kGeos) {
    // Inputs are the same bfloat16 values on every side; outputs are rounded once to bfloat16
    // (2^-8 relative), plus float32 accumulation error.
    const Result ref = run(g, 1, ConvPath::Im2col, kBFloat16);  // the im2col path in bfloat16
    const Result onednn = run(g, 2, ConvPath::Dnnl, kBFloat16);
    compare(g, onednn, ref, 1e-4, 1.0 / 128, std::string(g.name) + ", bfloat16 oneDNN vs im2col");
  }
}

// backward_input with accumulate (NOTE [ Summing into a pending gradient ]): dx += the gradient,
// on every path, dtype and memory format — oneDNN adds in its reorder back, im2col starts its
// col2im sums (or its direct GEMM's beta) from dx, float16 reads dx into its float32 operand.
struct SummedDx {
  std::vector<double> prior, fresh, summed;
};

SummedDx summed_dx(const Geo& g, ConvPath path, DType dtype, MemoryFormat format) {
  CpuBackend backend(2, CpuGemm::OpenBlas, path);
  Device cpu(&backend);
  Generator gen(23);
  Conv2dParams p;
  p.stride_h = g.sh, p.stride_w = g.sw, p.pad_h = g.ph, p.pad_w = g.pw, p.dilation_h = p.dilation_w = g.dil;
  p.groups = g.groups;
  const Shape xs{g.N, g.C, g.H, g.W};
  const Shape ys{g.N, g.K, out_size(g.H, g.KH, g.sh, g.ph, g.dil), out_size(g.W, g.KW, g.sw, g.pw, g.dil)};
  const Tensor w = rand({g.K, g.C / g.groups, g.KH, g.KW}, gen, kFloat32, cpu, -1, 1).to(dtype);
  const Tensor dy = rand(ys, gen, kFloat32, cpu, -1, 1).to(dtype).contiguous(format);
  const Tensor prior = rand(xs, gen, kFloat32, cpu, -1, 1).to(dtype).contiguous(format);
  const Tensor fresh = Tensor::empty(xs, dtype, cpu, format);
  backend.conv2d_backward_input(dy, w, fresh, p, false);
  Tensor summed = Tensor::empty(xs, dtype, cpu, format);
  summed.copy_(prior);
  backend.conv2d_backward_input(dy, w, summed, p, true);
  EXPECT_TRUE(summed.is_contiguous(format));
  return {prior.to(kFloat64).to_vector<double>(), fresh.to(kFloat64).to_vector<double>(),
          summed.to(kFloat64).to_vector<double>()};
}

TEST(CpuConvAccumulate, BackwardInputAddsIntoDxOnEveryPath) {
  std::vector<Geo> geos(std::begin(kGeos), std::end(kGeos));
  geos.push_back({"1x1_one_image_direct_gemm", 1, 16, 8, 8, 24, 1, 1, 1, 1, 0, 0, 1, 1, false});
  for (const Geo& g : geos) {
    const int64_t terms = g.K / g.groups * g.KH * g.KW;
    for (ConvPath path : {ConvPath::Dnnl, ConvPath::Im2col, ConvPath::Auto}) {
      for (DType dtype : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
        // Rounding of the sum: once or twice in dtype, plus the path's reassociation of the taps.
        const double rel = dtype == kFloat64 ? 1e-14 : dtype == kFloat32 ? 1e-6 : dtype == kFloat16 ? 2e-3 : 1.6e-2;
        const double abs = (dtype == kFloat64 ? 1e-14 : 1e-6) * std::sqrt(static_cast<double>(terms));
        for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
          const char* path_name = path == ConvPath::Dnnl ? "oneDNN" : path == ConvPath::Im2col ? "im2col" : "auto";
          const std::string what = std::string(g.name) + ", " + path_name + ", " + dtype_name(dtype) +
                                   (format == MemoryFormat::ChannelsLast ? ", channels-last" : ", NCHW");
          const SummedDx r = summed_dx(g, path, dtype, format);
          ASSERT_EQ(r.summed.size(), r.prior.size()) << what;
          for (size_t i = 0; i < r.summed.size(); ++i) {
            const double want = r.prior[i] + r.fresh[i];
            ASSERT_NEAR(r.summed[i], want, abs + rel * (std::abs(r.prior[i]) + std::abs(r.fresh[i])))
                << what << ", element " << i << " (prior " << r.prior[i] << ", gradient " << r.fresh[i] << ")";
          }
        }
      }
    }
  }
}

TEST(CpuDnnlConv, PathIsTheBackendsOwn) {
  EXPECT_EQ(CpuBackend(1, CpuGemm::OpenBlas, ConvPath::Im2col).conv_path(), ConvPath::Im2col);
  EXPECT_EQ(CpuBackend(1, CpuGemm::OpenBlas, ConvPath::Dnnl).conv_path(), ConvPath::Dnnl);
  // Unset: DPTRAIN_CPU_CONV (auto when unset), read when the backend is made.
  const char* saved = std::getenv("DPTRAIN_CPU_CONV");
  const std::string restore = saved ? saved : "";
  setenv("DPTRAIN_CPU_CONV", "im2col", 1);
  EXPECT_EQ(CpuBackend(1).conv_path(), ConvPath::Im2col);
  setenv("DPTRAIN_CPU_CONV", "fast", 1);
  EXPECT_THROW(CpuBackend(1), Error);
  unsetenv("DPTRAIN_CPU_CONV");
  EXPECT_EQ(CpuBackend(1).conv_path(), ConvPath::Auto);
  if (saved) setenv("DPTRAIN_CPU_CONV", restore.c_str(), 1);
}

}  // namespace
}  // namespace dp

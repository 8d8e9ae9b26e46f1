// Shampoo against an independent float64 transcription of NOTE [ Shampoo update ] (plain loops and
// a hand-written Jacobi eigensolver, no Eigen), the polar-factor golden value, and its edge cases:
// non-finite gradients, the root schedule, failed roots, state save/load.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "common/expect_error.h"
#include "optim/shampoo.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/ops/creation.h"

namespace dp {

// For gtest's parameter names and messages (found by ADL).
void PrintTo(ShampooKernels k, std::ostream* os) {
  *os << (k == ShampooKernels::Eigen ? "Eigen" : k == ShampooKernels::Backend ? "Backend" : "Auto");
}

namespace {

using Vec = std::vector<double>;

// ---- The reference ----------------------------------------------------------------------------

// Symmetric eigendecomposition by cyclic Jacobi rotations (Golub & Van Loan 8.5): A = V diag(λ) Vᵀ.
// False when it does not converge.
bool jacobi_eigen(Vec A, int64_t n, Vec& lambda, Vec& V) {
  V.assign(n * n, 0.0);
  for (int64_t i = 0; i < n; ++i) V[i * n + i] = 1.0;
  double total = 0;
  for (double a : A) total += a * a;
  bool converged = false;
  for (int sweep = 0; sweep < 100 && !converged; ++sweep) {
    double off = 0;
    for (int64_t p = 0; p < n; ++p)
      for (int64_t q = p + 1; q < n; ++q) off += A[p * n + q] * A[p * n + q];
    if (off <= 1e-34 * total) {
      converged = true;
      break;
    }
    for (int64_t p = 0; p < n; ++p) {
      for (int64_t q = p + 1; q < n; ++q) {
        const double apq = A[p * n + q];
        if (apq == 0) continue;
        const double tau = (A[q * n + q] - A[p * n + p]) / (2 * apq);
        const double t = (tau >= 0 ? 1.0 : -1.0) / (std::abs(tau) + std::sqrt(1 + tau * tau));
        const double c = 1 / std::sqrt(1 + t * t), s = t * c;
        for (int64_t k = 0; k < n; ++k) {  // A ← A J
          const double akp = A[k * n + p], akq = A[k * n + q];
          A[k * n + p] = c * akp - s * akq;
          A[k * n + q] = s * akp + c * akq;
        }
        for (int64_t k = 0; k < n; ++k) {  // A ← Jᵀ A
          const double apk = A[p * n + k], aqk = A[q * n + k];
          A[p * n + k] = c * apk - s * aqk;
          A[q * n + k] = s * apk + c * aqk;
        }
        for (int64_t k = 0; k < n; ++k) {  // V ← V J
          const double vkp = V[k * n + p], vkq = V[k * n + q];
          V[k * n + p] = c * vkp - s * vkq;
          V[k * n + q] = s * vkp + c * vkq;
        }
      }
    }
  }
  lambda.resize(n);
  for (int64_t i = 0; i < n; ++i) lambda[i] = A[i * n + i];
  return converged;
}

struct ReferenceShampoo {
  ShampooOptions o;  // process_group and host unused
  int64_t D = 0;
  struct Block {
    int kind = 0;  // 0 matrix, 1 full vector, 2 diagonal
    int64_t r0 = 0, nr = 0, c0 = 0, nc = 1;
    Vec L, R, Li, Ri, V;
  };
  struct Param {
    int64_t rows = 0, cols = 0;  // cols 0: vector
    Vec w, m;
    double lr = 0, wd = 0;
    std::vector<Block> blocks;
  };
  std::vector<Param> params;
  int64_t t = 0;
  int64_t failures = 0, root_steps = 0;
  bool round_to_float = false;

  static Vec eye(int64_t n) {
    Vec v(n * n, 0.0);
    for (int64_t i = 0; i < n; ++i) v[i * n + i] = 1;
    return v;
  }

  void add(const Shape& shape, Vec w, double lr, double wd) {
    Param p;
    Shape dims;
    for (int64_t d : shape)
      if (d != 1) dims.push_back(d);
    const int64_t numel = static_cast<int64_t>(w.size());
    p.rows = dims.size() <= 1 ? numel : dims[0];
    p.cols = dims.size() <= 1 ? 0 : numel / dims[0];
    p.w = std::move(w);
    p.m.assign(numel, 0.0);
    p.lr = lr;
    p.wd = wd;
    if (p.cols == 0) {
      Block b;
      b.nr = numel;
      b.kind = numel <= D ? 1 : 2;
      b.L.assign(b.kind == 1 ? numel * numel : numel, 0.0);
      b.Li = b.kind == 1 ? eye(numel) : Vec(numel, 1.0);
      b.V.assign(numel, 0.0);
      p.blocks.push_back(b);
    } else {
      for (int64_t r0 = 0; r0 < p.rows; r0 += D) {
        for (int64_t c0 = 0; c0 < p.cols; c0 += D) {
          Block b;
          b.r0 = r0;
          b.nr = std::min(D, p.rows - r0);
          b.c0 = c0;
          b.nc = std::min(D, p.cols - c0);
          b.L.assign(b.nr * b.nr, 0.0);
          b.R.assign(b.nc * b.nc, 0.0);
          b.Li = eye(b.nr);
          b.Ri = eye(b.nc);
          b.V.assign(b.nr * b.nc, 0.0);
          p.blocks.push_back(b);
        }
      }
    }
    params.push_back(std::move(p));
  }

  // Element (i, j) of block b in the parameter's flat buffer.
  static int64_t at(const Param& p, const Block& b, int64_t i, int64_t j) {
    return b.kind == 0 ? (b.r0 + i) * p.cols + (b.c0 + j) : i;
  }

  // F ← β2 F + (1 − β2) X (or F + X when β2 = 1), for F, X of the same size.
  void accumulate(Vec& F, const Vec& X) const {
    for (size_t k = 0; k < F.size(); ++k) F[k] = o.beta2 < 1 ? o.beta2 * F[k] + (1 - o.beta2) * X[k] : F[k] + X[k];
  }

  void root(const Vec& F, int64_t n, bool diagonal, double r, Vec& inv) {
    const double b2 = o.beta2 < 1 ? 1 - std::pow(o.beta2, static_cast<double>(t)) : 1.0;
    for (double f : F) {
      if (!std::isfinite(f)) {
        ++failures;
        return;
      }
    }
    if (diagonal) {
      Vec out(n);
      for (int64_t i = 0; i < n; ++i) {
        const double a = F[i] / b2 + o.epsilon;
        if (!(a > 0)) {
          ++failures;
          return;
        }
        out[i] = 1 / std::sqrt(a);
      }
      inv = out;
      return;
    }
    Vec A(F);
    for (double& a : A) a /= b2;
    for (int64_t i = 0; i < n; ++i) A[i * n + i] += o.epsilon;
    Vec lambda, V;
    if (!jacobi_eigen(A, n, lambda, V)) {
      ++failures;
      return;
    }
    for (double l : lambda) {
      if (!(l > 0)) {
        ++failures;
        return;
      }
    }
    Vec out(n * n, 0.0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t k = 0; k < n; ++k) out[i * n + j] += V[i * n + k] * std::pow(lambda[k], -1 / r) * V[j * n + k];
    inv = out;
  }

  double graft_of(const Block& b, double m, int64_t e) const {
    switch (o.grafting) {
      case ShampooGrafting::None:
      case ShampooGrafting::Sgd: return m;
      case ShampooGrafting::AdaGrad: return m / (std::sqrt(b.V[e]) + o.grafting_epsilon);
      case ShampooGrafting::Adam:
        return m / (std::sqrt(b.V[e] / (1 - std::pow(o.grafting_beta2, static_cast<double>(t)))) + o.grafting_epsilon);
    }
    return 0;
  }

  void step(const std::vector<Vec>& grads) {
    ++t;
    const int64_t start = o.start_preconditioning_step < 0 ? o.precondition_frequency : o.start_preconditioning_step;
    std::vector<Vec> M(params.size());
    for (size_t k = 0; k < params.size(); ++k) {
      Param& p = params[k];
      const Vec& g = grads[k];
      for (Block& b : p.blocks) {
        const int64_t nc = b.kind == 0 ? b.nc : 1;
        if (b.kind == 0) {
          Vec GGt(b.nr * b.nr, 0.0), GtG(b.nc * b.nc, 0.0);
          for (int64_t i = 0; i < b.nr; ++i)
            for (int64_t j = 0; j < b.nr; ++j)
              for (int64_t c = 0; c < b.nc; ++c) GGt[i * b.nr + j] += g[at(p, b, i, c)] * g[at(p, b, j, c)];
          for (int64_t i = 0; i < b.nc; ++i)
            for (int64_t j = 0; j < b.nc; ++j)
              for (int64_t r = 0; r < b.nr; ++r) GtG[i * b.nc + j] += g[at(p, b, r, i)] * g[at(p, b, r, j)];
          accumulate(b.L, GGt);
          accumulate(b.R, GtG);
        } else if (b.kind == 1) {
          Vec ggt(b.nr * b.nr);
          for (int64_t i = 0; i < b.nr; ++i)
            for (int64_t j = 0; j < b.nr; ++j) ggt[i * b.nr + j] = g[i] * g[j];
          accumulate(b.L, ggt);
        } else {
          Vec g2(b.nr);
          for (int64_t i = 0; i < b.nr; ++i) g2[i] = g[i] * g[i];
          accumulate(b.L, g2);
        }
        for (int64_t i = 0; i < b.nr; ++i) {
          for (int64_t j = 0; j < nc; ++j) {
            const double x = g[at(p, b, i, j)];
            double& v = b.V[i * nc + j];
            if (o.grafting == ShampooGrafting::AdaGrad) v += x * x;
            if (o.grafting == ShampooGrafting::Adam) v = o.grafting_beta2 * v + (1 - o.grafting_beta2) * x * x;
          }
        }
      }
      M[k] = g;
      if (o.beta1 > 0) {
        for (size_t e = 0; e < g.size(); ++e) {
          p.m[e] = o.beta1 * p.m[e] + (1 - o.beta1) * g[e];
          M[k][e] = p.m[e] / (1 - std::pow(o.beta1, static_cast<double>(t)));
        }
      }
    }
    if (t >= start && (t - start) % o.precondition_frequency == 0) {
      ++root_steps;
      for (Param& p : params) {
        for (Block& b : p.blocks) {
          root(b.L, b.nr, b.kind == 2, b.kind == 0 ? 4.0 : 2.0, b.Li);
          if (b.kind == 0) root(b.R, b.nc, false, 4.0, b.Ri);
        }
      }
    }
    for (size_t k = 0; k < params.size(); ++k) {
      Param& p = params[k];
      Vec dir(p.w.size(), 0.0);
      for (Block& b : p.blocks) {
        const int64_t nc = b.kind == 0 ? b.nc : 1;
        Vec S(b.nr * nc, 0.0), graft(b.nr * nc);
        double s2 = 0, g2 = 0;
        for (int64_t i = 0; i < b.nr; ++i) {
          for (int64_t j = 0; j < nc; ++j) {
            graft[i * nc + j] = graft_of(b, M[k][at(p, b, i, j)], i * nc + j);
            g2 += graft[i * nc + j] * graft[i * nc + j];
            double s = 0;
            if (b.kind == 0) {  // (L⁻ M R⁻)_ij
              for (int64_t a = 0; a < b.nr; ++a)
                for (int64_t c = 0; c < b.nc; ++c) s += b.Li[i * b.nr + a] * M[k][at(p, b, a, c)] * b.Ri[c * b.nc + j];
            } else if (b.kind == 1) {
              for (int64_t a = 0; a < b.nr; ++a) s += b.Li[i * b.nr + a] * M[k][a];
            } else {
              s = b.Li[i] * M[k][i];
            }
            S[i * nc + j] = s;
            s2 += s * s;
          }
        }
        const double scale = o.grafting == ShampooGrafting::None ? 1.0 : (s2 > 0 ? std::sqrt(g2) / std::sqrt(s2) : 0.0);
        for (int64_t i = 0; i < b.nr; ++i)
          for (int64_t j = 0; j < nc; ++j)
            dir[at(p, b, i, j)] = t < start ? graft[i * nc + j] : scale * S[i * nc + j];
      }
      for (size_t e = 0; e < p.w.size(); ++e) {
        p.w[e] -= p.lr * (dir[e] + p.wd * p.w[e]);
        if (round_to_float) p.w[e] = static_cast<float>(p.w[e]);
      }
    }
  }
};

// A gradient that depends on the parameter, the step and the position, so that factors gain
// rank quickly and trajectories diverge on any mistake.
Vec synthetic_grad(const Vec& w, int step, size_t which) {
  Vec g(w.size());
  for (size_t i = 0; i < w.size(); ++i)
    g[i] = std::cos((1 + 0.1 * step) * w[i]) + 0.5 * std::sin(0.37 * static_cast<double>((i + 1) * (step + 1) + which));
  return g;
}

// max |a − b| / max |b| over one tensor.
double relative_difference(const Vec& a, const Vec& b) {
  double diff = 0, scale = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    diff = std::max(diff, std::abs(a[k] - b[k]));
    scale = std::max(scale, std::abs(b[k]));
  }
  return scale > 0 ? diff / scale : diff;
}

class ShampooTest : public ::testing::Test {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};
  Generator gen{11};
  Tensor param(const Shape& shape, DType dtype = kFloat64) {
    return randn(shape, gen, kFloat64, cpu).to(dtype).set_requires_grad(true);
  }
  Tensor tensor(const Vec& v, const Shape& shape, DType dtype) { return from_vector<double>(v, shape, cpu).to(dtype); }
};

// The tests that pin the update run both ways through it (NOTE [ Shampoo on a device ]): Eigen,
// and the backend kernels — on the CPU here, the code a GPU runs.
class ShampooKernelsTest : public ShampooTest, public ::testing::WithParamInterface<ShampooKernels> {
 protected:
  ShampooOptions with_kernels(ShampooOptions o) const {
    o.kernels = GetParam();
    return o;
  }
};

TEST_P(ShampooKernelsTest, FirstStepIsThePolarFactorOfTheGradient) {
  // β1 = 0, β2 = 1, ε = 0, no grafting: L^(−1/4) G R^(−1/4) = (G Gᵀ)^(−1/4) U Σ Vᵀ (Gᵀ G)^(−1/4) = U Vᵀ.
  Tensor w = tensor({0.5, -1.0, 2.0, 0.25}, {2, 2}, kFloat64).set_requires_grad(true);
  const Vec w0 = w.to_vector<double>();
  Shampoo opt({w}, with_kernels({.lr = 0.1, .epsilon = 0.0, .grafting = ShampooGrafting::None}));
  EXPECT_EQ(opt.uses_backend_kernels(), GetParam() == ShampooKernels::Backend);
  w.set_grad(tensor({1, 2, 3, 4}, {2, 2}, kFloat64));
  opt.step();
  const Vec polar = {-0.514495755428, 0.857492925713, 0.857492925713, 0.514495755428};
  const Vec w1 = w.to_vector<double>();
  for (size_t k = 0; k < 4; ++k) EXPECT_NEAR(w1[k] - w0[k], -0.1 * polar[k], 1e-12) << "element " << k;
  EXPECT_EQ(opt.root_computations(), 1);
  EXPECT_EQ(opt.root_failures(), 0);
}

struct Case {
  ShampooOptions options;
  const char* what;
};

void run_against_reference(const Case& c, DType dtype, double tolerance, Device cpu, Generator& gen,
                           ShampooKernels kernels) {
  SCOPED_TRACE(std::string(c.what) + (dtype == kFloat32 ? ", float32" : ", float64"));
  // max_preconditioner_dim 4: [6, 5] is cut into 4×4, 4×1, 2×4, 2×1 blocks; [3] and [1, 4] are
  // full vectors, [7] diagonal; [3, 2, 2] is viewed as 3 × 4; group 1 has its own lr and decay.
  const std::vector<Shape> shapes0 = {{6, 5}, {3}, {7}, {3, 2, 2}, {1, 4}};
  const std::vector<Shape> shapes1 = {{2, 3}};
  ShampooOptions o = c.options;
  o.max_preconditioner_dim = 4;
  o.kernels = kernels;
  ReferenceShampoo ref;
  ref.o = o;
  ref.D = 4;
  ref.round_to_float = dtype == kFloat32;
  std::vector<Tensor> p0, p1, all;
  for (const Shape& s : shapes0) p0.push_back(randn(s, gen, kFloat64, cpu).to(dtype).set_requires_grad(true));
  for (const Shape& s : shapes1) p1.push_back(randn(s, gen, kFloat64, cpu).to(dtype).set_requires_grad(true));
  const double lr1 = 0.5 * o.lr, wd1 = 0.02;
  for (const Tensor& p : p0) ref.add(p.shape(), p.to_vector<double>(), o.lr, o.weight_decay);
  for (const Tensor& p : p1) ref.add(p.shape(), p.to_vector<double>(), lr1, wd1);
  all = p0;
  all.insert(all.end(), p1.begin(), p1.end());
  std::vector<ParamGroup> groups(2);
  groups[0].params = p0;
  groups[0].lr = o.lr;
  groups[0].weight_decay = o.weight_decay;
  groups[1].params = p1;
  groups[1].lr = lr1;
  groups[1].weight_decay = wd1;
  Shampoo opt(groups, o);
  std::vector<Vec> initial;
  for (const Tensor& p : all) initial.push_back(p.to_vector<double>());
  EXPECT_EQ(opt.blocks().size(), 4u + 1 + 1 + 1 + 1 + 1);
  for (int step = 0; step < 60; ++step) {
    std::vector<Vec> grads;
    for (size_t k = 0; k < all.size(); ++k) {
      Vec g = synthetic_grad(ref.params[k].w, step, k);
      if (dtype == kFloat32)
        for (double& x : g) x = static_cast<float>(x);
      all[k].set_grad(from_vector<double>(g, all[k].shape(), cpu).to(dtype));
      grads.push_back(g);
    }
    ref.step(grads);
    opt.step();
    opt.zero_grad();
  }
  EXPECT_EQ(opt.root_computations(), ref.root_steps);
  EXPECT_EQ(opt.root_failures(), ref.failures);
  EXPECT_EQ(opt.root_failures(), 0);
  double worst = 0;
  for (size_t k = 0; k < all.size(); ++k) {
    const double d = relative_difference(all[k].to_vector<double>(), ref.params[k].w);
    worst = std::max(worst, d);
    EXPECT_LE(d, tolerance) << "parameter " << k << " " << all[k].str();
    // The run moved the parameter: the comparison is not of two untouched tensors.
    EXPECT_GT(relative_difference(all[k].to_vector<double>(), initial[k]), 1e-3) << "parameter " << k;
  }
  std::printf("[ shampoo  ] %-52s %s, %s kernels: worst relative difference %.3g after 60 steps (%lld root steps)\n",
              c.what, dtype == kFloat32 ? "float32" : "float64", opt.uses_backend_kernels() ? "backend" : "Eigen", worst,
              static_cast<long long>(ref.root_steps));
}

const Case kCases[] = {
    {{.lr = 0.02, .beta1 = 0.9, .beta2 = 1.0, .weight_decay = 0.01, .precondition_frequency = 3,
      .start_preconditioning_step = 5, .grafting = ShampooGrafting::Adam},
     "adam grafting, beta1 0.9, sums, decoupled decay"},
    {{.lr = 0.02, .beta1 = 0.0, .beta2 = 0.99, .precondition_frequency = 2, .start_preconditioning_step = 6,
      .grafting = ShampooGrafting::Sgd},
     "sgd grafting, EMA beta2 0.99"},
    {{.lr = 0.05, .beta1 = 0.5, .beta2 = 0.95, .weight_decay = 0.05, .precondition_frequency = 1,
      .start_preconditioning_step = 6, .grafting = ShampooGrafting::AdaGrad, .grafting_epsilon = 1e-10},
     "adagrad grafting, EMA beta2 0.95, beta1 0.5, decay"},
    {{.lr = 0.01, .precondition_frequency = 5, .start_preconditioning_step = 5, .grafting = ShampooGrafting::None},
     "no grafting, sums"},
    {{.lr = 0.02, .beta1 = 0.9, .beta2 = 0.999, .epsilon = 1e-8, .precondition_frequency = 4,
      .start_preconditioning_step = 8, .grafting = ShampooGrafting::Adam, .grafting_beta2 = 0.99},
     "adam grafting, EMA beta2 0.999, epsilon 1e-8"},
};

TEST_P(ShampooKernelsTest, MatchesFloat64ReferenceFor60StepsInFloat64) {
  for (const Case& c : kCases) run_against_reference(c, kFloat64, 1e-12, cpu, gen, GetParam());
}

TEST_P(ShampooKernelsTest, MatchesFloat64ReferenceFor60StepsInFloat32) {
  for (const Case& c : kCases) run_against_reference(c, kFloat32, 1e-6, cpu, gen, GetParam());
}

TEST_P(ShampooKernelsTest, NonFiniteGradientIsAClearErrorAndChangesNothing) {
  Tensor a = param({3, 2}), b = param({4});
  Shampoo opt({a, b}, with_kernels({.lr = 0.1}));
  const Vec before = b.to_vector<double>();
  a.set_grad(tensor(Vec(6, 1.0), {3, 2}, kFloat64));
  Vec g(4, 1.0);
  g[2] = std::nan("");
  b.set_grad(tensor(g, {4}, kFloat64));
  EXPECT_ERROR_CONTAINS(opt.step(), "shampoo: step 1: the gradient of group 0 parameter 1 (float64[4] on cpu) holds nan "
                                    "at flat index 2");
  EXPECT_EQ(opt.steps(), 0);
  EXPECT_EQ(b.to_vector<double>(), before);
  for (const auto& [name, t] : opt.state_dict()) {
    if (name.ends_with(".L") || name.ends_with(".R")) {
      for (double x : t.to_vector<double>()) EXPECT_EQ(x, 0.0) << name;  // statistics untouched
    }
  }
  g[2] = -INFINITY;
  b.set_grad(tensor(g, {4}, kFloat32).to(kFloat64));
  EXPECT_ERROR_CONTAINS(opt.step(), "holds -inf at flat index 2");
}

TEST_P(ShampooKernelsTest, RootsAreRecomputedExactlyAtTheConfiguredSteps) {
  Tensor w = param({3, 3});
  Shampoo opt({w}, with_kernels({.lr = 0.01, .precondition_frequency = 3, .start_preconditioning_step = 5}));
  const auto state = opt.state_dict();
  auto find = [&](const std::string& name) {
    for (const auto& [n, t] : state)
      if (n == name) return t;
    return Tensor();
  };
  const Tensor L_inv = find("state.0.block0.L_inv_root");
  ASSERT_TRUE(L_inv.defined());
  std::vector<int64_t> recomputed_at;
  Vec last = L_inv.to_vector<double>();
  for (int step = 1; step <= 20; ++step) {
    w.set_grad(from_vector<double>(synthetic_grad(w.to_vector<double>(), step, 0), {3, 3}, cpu));
    const int64_t before = opt.root_computations();
    opt.step();
    const bool changed = L_inv.to_vector<double>() != last;
    last = L_inv.to_vector<double>();
    if (opt.root_computations() != before) recomputed_at.push_back(step);
    EXPECT_EQ(changed, opt.root_computations() != before) << "step " << step;
  }
  EXPECT_EQ(recomputed_at, (std::vector<int64_t>{5, 8, 11, 14, 17, 20}));
  EXPECT_EQ(opt.steps(), 20);
}

TEST_P(ShampooKernelsTest, FailedRootKeepsThePreviousInverseAndIsCounted) {
  Tensor w = param({2, 2});
  Shampoo opt({w}, with_kernels({.lr = 0.01, .epsilon = 0.0, .grafting = ShampooGrafting::None}));
  Tensor L_inv, R_inv;
  for (const auto& [n, t] : opt.state_dict()) {
    if (n == "state.0.block0.L_inv_root") L_inv = t;
    if (n == "state.0.block0.R_inv_root") R_inv = t;
  }
  // Step 1: a zero gradient with ε = 0 leaves L = R = 0, whose roots are infinite: both fail and
  // the identity they started from is kept.
  w.set_grad(zeros({2, 2}, kFloat64, cpu));
  opt.step();
  EXPECT_EQ(opt.root_failures(), 2);
  EXPECT_EQ(L_inv.to_vector<double>(), (Vec{1, 0, 0, 1}));
  EXPECT_EQ(R_inv.to_vector<double>(), (Vec{1, 0, 0, 1}));
  // Step 2: a real gradient; both roots succeed.
  w.set_grad(tensor({1, 2, 3, 4}, {2, 2}, kFloat64));
  opt.step();
  EXPECT_EQ(opt.root_failures(), 2);
  const Vec L2 = L_inv.to_vector<double>(), R2 = R_inv.to_vector<double>();
  EXPECT_NE(L2, (Vec{1, 0, 0, 1}));
  // Step 3: a finite gradient whose square overflows: the statistics become infinite, both roots
  // fail, the step-2 inverses stay and the parameter stays finite.
  w.set_grad(tensor({1e200, 0, 0, 1e200}, {2, 2}, kFloat64));
  opt.step();
  EXPECT_EQ(opt.root_failures(), 4);
  EXPECT_EQ(opt.root_computations(), 3);
  EXPECT_EQ(L_inv.to_vector<double>(), L2);
  EXPECT_EQ(R_inv.to_vector<double>(), R2);
  for (double x : w.to_vector<double>()) EXPECT_TRUE(std::isfinite(x));
}

TEST_F(ShampooTest, OneDimensionalParametersAreFullUpToTheMaxDimAndDiagonalBeyond) {
  Tensor small = param({4}), large = param({5}), conv = param({2, 3, 2, 2}), row = param({1, 3});
  Shampoo opt({small, large, conv, row}, {.max_preconditioner_dim = 4});
  using Kind = Shampoo::BlockInfo::Kind;
  ASSERT_EQ(opt.blocks().size(), 1u + 1 + 3 + 1);
  EXPECT_EQ(opt.blocks()[0].kind, Kind::Vector);
  EXPECT_EQ(opt.blocks()[1].kind, Kind::Diagonal);
  for (size_t b = 2; b < 5; ++b) {  // conv viewed as 2 × 12: blocks 2×4 at columns 0, 4, 8
    EXPECT_EQ(opt.blocks()[b].kind, Kind::Matrix);
    EXPECT_EQ(opt.blocks()[b].rows, 2);
    EXPECT_EQ(opt.blocks()[b].cols, 4);
    EXPECT_EQ(opt.blocks()[b].col0, static_cast<int64_t>(4 * (b - 2)));
  }
  EXPECT_EQ(opt.blocks()[5].kind, Kind::Vector);  // [1, 3] drops its size-1 dimension
  EXPECT_EQ(opt.blocks()[5].rows, 3);
  std::vector<std::string> names;
  for (const auto& [n, t] : opt.state_dict()) names.push_back(n + " " + shape_str(t.shape()));
  const std::vector<std::string> expect_prefix = {"shampoo.step []", "state.0.block0.L [4, 4]",
                                                  "state.0.block0.L_inv_root [4, 4]", "state.0.block0.graft_state [4]",
                                                  "state.1.block0.L [5]"};
  for (size_t k = 0; k < expect_prefix.size(); ++k) EXPECT_EQ(names.at(k), expect_prefix[k]);
}

TEST_P(ShampooKernelsTest, StateRoundTripContinuesBitIdentically) {
  const ShampooOptions o = with_kernels({.lr = 0.05, .beta1 = 0.9, .beta2 = 0.99, .max_preconditioner_dim = 4,
                                         .precondition_frequency = 2, .start_preconditioning_step = 3});
  Tensor a = param({5, 3}), b = param({6});
  Tensor a2 = a.detach().clone().set_requires_grad(true), b2 = b.detach().clone().set_requires_grad(true);
  Shampoo first({a, b}, o), second({a2, b2}, o);
  auto feed = [&](Tensor& x, Tensor& y, int step) {
    x.set_grad(from_vector<double>(synthetic_grad(x.to_vector<double>(), step, 0), x.shape(), cpu));
    y.set_grad(from_vector<double>(synthetic_grad(y.to_vector<double>(), step, 1), y.shape(), cpu));
  };
  for (int s = 0; s < 5; ++s) {
    feed(a, b, s);
    first.step();
  }
  // Through the base class, as a checkpoint sees every optimiser.
  const Optimizer& first_base = first;
  Optimizer& second_base = second;
  std::vector<std::pair<std::string, Tensor>> saved;
  for (const auto& [n, t] : first_base.state_dict()) saved.emplace_back(n, t.clone());
  ASSERT_GT(saved.size(), 5u);
  second_base.load_state_dict(saved);
  a2.detach().copy_(a);
  b2.detach().copy_(b);
  EXPECT_EQ(second.steps(), 5);
  for (int s = 5; s < 12; ++s) {
    feed(a, b, s);
    feed(a2, b2, s);
    first.step();
    second.step();
  }
  EXPECT_EQ(a.to_vector<double>(), a2.to_vector<double>());
  EXPECT_EQ(b.to_vector<double>(), b2.to_vector<double>());
  EXPECT_ERROR_CONTAINS(second.load_state_dict({{"state.9.block0.L", zeros({2}, kFloat64, cpu)},
                                                {"shampoo.step", saved[0].second}}),
                        "unknown entry 'state.9.block0.L'");
  EXPECT_ERROR_CONTAINS(second.load_state_dict({{"state.0.block0.L", zeros({2}, kFloat64, cpu)}}),
                        "but expected float64[4, 4]");
  // Every entry is needed, in its dtype; a refused load changes nothing.
  const std::vector<double> before = second.state_dict().at(1).second.to_vector<double>();
  std::vector<std::pair<std::string, Tensor>> partial(saved.begin(), saved.end() - 1);
  for (auto& [n, t] : partial) t = zeros(t.shape(), t.dtype(), cpu);
  EXPECT_ERROR_CONTAINS(second.load_state_dict(partial), "1 entry of this optimiser's state missing: '" + saved.back().first);
  std::vector<std::pair<std::string, Tensor>> narrowed = saved;
  narrowed[1].second = narrowed[1].second.to(kFloat32);
  EXPECT_ERROR_CONTAINS(second.load_state_dict(narrowed), "but expected float64");
  EXPECT_EQ(second.state_dict().at(1).second.to_vector<double>(), before);
}

TEST_F(ShampooTest, RejectsInvalidOptions) {
  Tensor p = param({2});
  EXPECT_THROW(Shampoo({p}, {.beta1 = 1.0}), Error);
  EXPECT_THROW(Shampoo({p}, {.beta2 = 0.0}), Error);
  EXPECT_THROW(Shampoo({p}, {.epsilon = -1}), Error);
  EXPECT_THROW(Shampoo({p}, {.max_preconditioner_dim = 0}), Error);
  EXPECT_THROW(Shampoo({p}, {.precondition_frequency = 0}), Error);
  EXPECT_THROW(Shampoo({p}, {.start_preconditioning_step = 0}), Error);
  EXPECT_EQ(parse_shampoo_grafting("adagrad"), ShampooGrafting::AdaGrad);
  EXPECT_ERROR_CONTAINS(parse_shampoo_grafting("rmsprop"), "unknown grafting 'rmsprop'");
  Shampoo defaults({p}, {.precondition_frequency = 7});
  EXPECT_EQ(defaults.options().start_preconditioning_step, 7);
  EXPECT_EQ(defaults.name(), "shampoo");
}

INSTANTIATE_TEST_SUITE_P(Kernels, ShampooKernelsTest, ::testing::Values(ShampooKernels::Eigen, ShampooKernels::Backend),
                         [](const ::testing::TestParamInfo<ShampooKernels>& info) {
                           return info.param == ShampooKernels::Eigen ? "Eigen" : "Backend";
                         });

// Both ways give the same trajectory up to the rounding of the products' summation order.
TEST_F(ShampooTest, BackendKernelsFollowTheEigenPathOnTheCpu) {
  const std::vector<Shape> shapes = {{6, 5}, {3}, {7}, {2, 3, 2, 2}, {1, 4}};
  ShampooOptions o{.lr = 0.02, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.01, .max_preconditioner_dim = 4,
                   .precondition_frequency = 2, .start_preconditioning_step = 3, .grafting = ShampooGrafting::Adam};
  std::vector<Tensor> eigen_params, backend_params;
  for (const Shape& s : shapes) {
    eigen_params.push_back(param(s, kFloat32));
    backend_params.push_back(eigen_params.back().detach().clone().set_requires_grad(true));
  }
  Shampoo eigen(eigen_params, o);
  o.kernels = ShampooKernels::Backend;
  Shampoo backend(backend_params, o);
  ASSERT_FALSE(eigen.uses_backend_kernels());
  ASSERT_TRUE(backend.uses_backend_kernels());
  for (int step = 0; step < 20; ++step) {
    for (size_t k = 0; k < shapes.size(); ++k) {
      const Vec g = synthetic_grad(eigen_params[k].to_vector<double>(), step, k);
      eigen_params[k].set_grad(from_vector<double>(g, shapes[k], cpu).to(kFloat32));
      backend_params[k].set_grad(from_vector<double>(g, shapes[k], cpu).to(kFloat32));
    }
    eigen.step();
    backend.step();
  }
  EXPECT_EQ(backend.root_computations(), eigen.root_computations());
  const auto a = eigen.state_dict(), b = backend.state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].first, b[k].first);
    EXPECT_LE(relative_difference(b[k].second.to_vector<double>(), a[k].second.to_vector<double>()), 1e-12)
        << a[k].first;
  }
  for (size_t k = 0; k < shapes.size(); ++k)
    EXPECT_LE(relative_difference(backend_params[k].to_vector<double>(), eigen_params[k].to_vector<double>()), 1e-6)
        << "parameter " << k;
}

}  // namespace
}  // namespace dp

#include "optim/shampoo.h"

#include <omp.h>
#include <time.h>

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cfloat>
#include <cmath>
#include <numeric>

#include "comm/process_group.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/matmul.h"
#include "runtime/ops/reduce.h"
#include "runtime/ops/shape_ops.h"

namespace dp {

namespace {

using RowMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatMap = Eigen::Map<RowMat>;
using VecMap = Eigen::Map<Eigen::VectorXd>;
// A block of a row-major m × n buffer: `rows` × `cols` starting at (row0, col0), row stride n.
using BlockMap = Eigen::Map<RowMat, 0, Eigen::OuterStride<>>;
using ConstBlockMap = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
using ConstVecMap = Eigen::Map<const Eigen::VectorXd>;

using ConstMatMap = Eigen::Map<const RowMat>;

MatMap matrix_of(const Tensor& t) { return MatMap(t.data<double>(), t.size(0), t.size(1)); }
VecMap vector_of(const Tensor& t) { return VecMap(t.data<double>(), t.numel()); }

// out = a op s through the backend (a division stays a division, as the Eigen path computes it).
Tensor with_scalar(BinaryOp op, const Tensor& a, double s) {
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  a.device().backend().binary_scalar(op, a, s, out);
  return out;
}

// ‖x‖_F as a 0-d tensor on x's device.
Tensor frobenius_norm(const Tensor& x) { return sqrt(sum(square(x))); }

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

ParamGroup single_group(std::vector<Tensor> params, const ShampooOptions& o) {
  ParamGroup g;
  g.params = std::move(params);
  g.lr = o.lr;
  g.weight_decay = o.weight_decay;
  return g;
}

Tensor identity(int64_t n, Device device) {
  std::vector<double> eye(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) eye[static_cast<size_t>(i * n + i)] = 1.0;
  return from_vector<double>(eye, {n, n}, device);
}

// (F / b2 + εI)^(−1/root) into out (n × n, row-major); false, out untouched, on failure
// (NOTE [ Shampoo update ]).
bool full_inverse_root(const ConstMatMap& F, double b2, double eps, double root, double* out) {
  if (!F.allFinite()) return false;
  Eigen::MatrixXd A = F / b2;
  A.diagonal().array() += eps;
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(A);
  if (es.info() != Eigen::Success) return false;
  const Eigen::VectorXd& lambda = es.eigenvalues();
  if (!lambda.allFinite() || lambda.minCoeff() <= 0) return false;
  const Eigen::VectorXd powered = lambda.array().pow(-1.0 / root).matrix();
  const Eigen::MatrixXd& Q = es.eigenvectors();
  const RowMat X = Q * powered.asDiagonal() * Q.transpose();
  if (!X.allFinite()) return false;
  std::copy(X.data(), X.data() + X.size(), out);
  return true;
}

// (l / b2 + ε)^(−1/2) elementwise into out.
bool diagonal_inverse_root(const ConstVecMap& l, double b2, double eps, double* out) {
  const int64_t n = l.size();
  for (int64_t i = 0; i < n; ++i) {
    const double a = l[i] / b2 + eps;
    if (!std::isfinite(a) || a <= 0) return false;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = std::pow(l[i] / b2 + eps, -0.5);
  return true;
}

}  // namespace

const char* shampoo_grafting_name(ShampooGrafting g) {
  switch (g) {
    case ShampooGrafting::None: return "none";
    case ShampooGrafting::Sgd: return "sgd";
    case ShampooGrafting::AdaGrad: return "adagrad";
    case ShampooGrafting::Adam: return "adam";
  }
  return "?";
}

ShampooGrafting parse_shampoo_grafting(const std::string& name) {
  for (ShampooGrafting g : {ShampooGrafting::None, ShampooGrafting::Sgd, ShampooGrafting::AdaGrad, ShampooGrafting::Adam})
    if (name == shampoo_grafting_name(g)) return g;
  throw Error("shampoo: unknown grafting '" + name + "' (expected none, sgd, adagrad or adam)");
}

Shampoo::Shampoo(std::vector<Tensor> params, const ShampooOptions& options)
    : Shampoo(std::vector<ParamGroup>{single_group(std::move(params), options)}, options) {}

Shampoo::Shampoo(std::vector<ParamGroup> groups, const ShampooOptions& options)
    : Optimizer(std::move(groups)), options_(options) {
  ShampooOptions& o = options_;
  if (o.start_preconditioning_step < 0) o.start_preconditioning_step = o.precondition_frequency;
  DP_CHECK(o.beta1 >= 0 && o.beta1 < 1, "shampoo: beta1 must be in [0, 1), got ", o.beta1);
  DP_CHECK(o.beta2 > 0 && o.beta2 <= 1, "shampoo: beta2 must be in (0, 1], got ", o.beta2);
  DP_CHECK(o.epsilon >= 0, "shampoo: epsilon must be >= 0, got ", o.epsilon);
  DP_CHECK(o.max_preconditioner_dim >= 1, "shampoo: max_preconditioner_dim must be >= 1, got ",
           o.max_preconditioner_dim);
  DP_CHECK(o.precondition_frequency >= 1, "shampoo: precondition_frequency must be >= 1, got ",
           o.precondition_frequency);
  DP_CHECK(o.start_preconditioning_step >= 1, "shampoo: start_preconditioning_step must be >= 1 (or -1 for "
           "precondition_frequency), got ", o.start_preconditioning_step);
  DP_CHECK(o.grafting_epsilon > 0 || o.grafting == ShampooGrafting::None || o.grafting == ShampooGrafting::Sgd,
           "shampoo: grafting_epsilon must be > 0, got ", o.grafting_epsilon);
  DP_CHECK(o.grafting_beta2 > 0 && o.grafting_beta2 < 1, "shampoo: grafting_beta2 must be in (0, 1), got ",
           o.grafting_beta2);
  state_device_ = o.state_device;
  for (size_t g = 0; g < groups_.size() && !state_device_.valid(); ++g)
    if (!groups_[g].params.empty()) state_device_ = groups_[g].params.front().device();
  DP_CHECK(state_device_.valid(), "shampoo: no parameters and no ShampooOptions::state_device");
  use_backend_ = o.kernels == ShampooKernels::Backend || (o.kernels == ShampooKernels::Auto && !state_device_.is_cpu());
  DP_CHECK(use_backend_ || state_device_.is_cpu(), "shampoo: the Eigen kernels need the state on a CPU device, not ",
           state_device_.str(), " (use ShampooKernels::Backend or Auto)");
  build_blocks();
  assign_owners();
}

void Shampoo::build_blocks() {
  const int64_t D = options_.max_preconditioner_dim;
  const bool graft_state = options_.grafting == ShampooGrafting::AdaGrad || options_.grafting == ShampooGrafting::Adam;
  views_.resize(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    views_[g].resize(groups_[g].params.size());
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor& p = groups_[g].params[i];
      ParamView& v = views_[g][i];
      if (p.numel() == 0) continue;
      Shape dims;
      for (int64_t d : p.shape())
        if (d != 1) dims.push_back(d);
      if (dims.size() <= 1) {
        v.rows = p.numel();
        v.cols = 0;
      } else {
        v.rows = dims[0];
        v.cols = p.numel() / dims[0];
      }
      if (options_.beta1 > 0) v.filtered = zeros({p.numel()}, kFloat64, state_device_);
      auto add = [&](BlockInfo info, Block block) {
        info.group = g;
        info.index = i;
        v.blocks.push_back(blocks_.size());
        block_info_.push_back(info);
        blocks_.push_back(std::move(block));
      };
      if (v.cols == 0) {  // vector
        const int64_t n = v.rows;
        BlockInfo info;
        info.rows = n;
        Block b;
        if (n <= D) {
          info.kind = BlockInfo::Kind::Vector;
          info.cost = static_cast<double>(n) * n * n;
          b.L = zeros({n, n}, kFloat64, state_device_);
          b.L_inv = identity(n, state_device_);
        } else {
          info.kind = BlockInfo::Kind::Diagonal;
          info.cost = static_cast<double>(n);
          b.L = zeros({n}, kFloat64, state_device_);
          b.L_inv = ones({n}, kFloat64, state_device_);
        }
        if (graft_state) b.graft = zeros({n}, kFloat64, state_device_);
        add(info, std::move(b));
        continue;
      }
      for (int64_t r0 = 0; r0 < v.rows; r0 += D) {
        for (int64_t c0 = 0; c0 < v.cols; c0 += D) {
          BlockInfo info;
          info.kind = BlockInfo::Kind::Matrix;
          info.row0 = r0;
          info.rows = std::min(D, v.rows - r0);
          info.col0 = c0;
          info.cols = std::min(D, v.cols - c0);
          info.cost = std::pow(static_cast<double>(info.rows), 3) + std::pow(static_cast<double>(info.cols), 3);
          Block b;
          b.L = zeros({info.rows, info.rows}, kFloat64, state_device_);
          b.R = zeros({info.cols, info.cols}, kFloat64, state_device_);
          b.L_inv = identity(info.rows, state_device_);
          b.R_inv = identity(info.cols, state_device_);
          if (graft_state) b.graft = zeros({info.rows, info.cols}, kFloat64, state_device_);
          add(info, std::move(b));
        }
      }
    }
  }
}

// Longest-processing-time first: heaviest block to the least-loaded rank (NOTE [ Distributed
// Shampoo roots ]); every rank computes the same assignment.
void Shampoo::assign_owners() {
  const ProcessGroup* pg = options_.process_group;
  const int world = pg ? pg->size() : 1;
  std::vector<size_t> order(block_info_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return block_info_[a].cost > block_info_[b].cost; });
  std::vector<double> load(static_cast<size_t>(world), 0.0);
  for (size_t b : order) {
    const int r = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    block_info_[b].owner = r;
    load[static_cast<size_t>(r)] += block_info_[b].cost;
  }
}

size_t Shampoo::local_blocks() const {
  const int rank = options_.process_group ? options_.process_group->rank() : 0;
  size_t n = 0;
  for (const BlockInfo& b : block_info_) n += b.owner == rank ? 1 : 0;
  return n;
}

double Shampoo::local_cost() const {
  const int rank = options_.process_group ? options_.process_group->rank() : 0;
  double c = 0;
  for (const BlockInfo& b : block_info_) c += b.owner == rank ? b.cost : 0.0;
  return c;
}

bool Shampoo::is_root_step(int64_t t) const {
  const int64_t start = options_.start_preconditioning_step;
  return t >= start && (t - start) % options_.precondition_frequency == 0;
}

void Shampoo::compute_roots(int64_t t) {
  ProcessGroup* pg = options_.process_group;
  const int world = pg ? pg->size() : 1;
  const int rank = pg ? pg->rank() : 0;
  const double b2 = options_.beta2 < 1 ? 1.0 - std::pow(options_.beta2, static_cast<double>(t)) : 1.0;
  const double eps = options_.epsilon;

  // Each rank's part: for its blocks in block order, per factor (L, then R): a success flag,
  // then the inverse root's values.
  auto factors = [&](size_t b) {
    std::vector<std::pair<Tensor, Tensor>> f{{blocks_[b].L, blocks_[b].L_inv}};
    if (blocks_[b].R.defined()) f.emplace_back(blocks_[b].R, blocks_[b].R_inv);
    return f;
  };
  std::vector<int64_t> part(static_cast<size_t>(world), 0);
  for (size_t b = 0; b < blocks_.size(); ++b)
    for (const auto& [F, inv] : factors(b)) part[static_cast<size_t>(block_info_[b].owner)] += 1 + inv.numel();
  const int64_t width = std::max<int64_t>(1, *std::max_element(part.begin(), part.end()));

  // This rank's factors on the host: the Eigen path's state itself, else one copy of them all.
  // The backend path goes through the copies even on a CPU (NOTE [ Shampoo on a device ]): one code
  // path for every device, the one the CPU tests run.
  const bool on_host = !use_backend_;
  std::vector<double> staged;
  if (!on_host) {
    std::vector<Tensor> owned;
    for (size_t b = 0; b < blocks_.size(); ++b)
      if (block_info_[b].owner == rank)
        for (const auto& [F, inv] : factors(b)) owned.push_back(F.reshape({-1}));
    if (!owned.empty()) staged = cat(owned, 0).to_vector<double>();
  }

  const auto wall0 = std::chrono::steady_clock::now();
  const double cpu0 = thread_cpu_seconds();
  std::vector<double> mine(static_cast<size_t>(width), 0.0);
  double* out = mine.data();
  const double* next = staged.data();
  for (size_t b = 0; b < blocks_.size(); ++b) {
    if (block_info_[b].owner != rank) continue;
    const double root = block_info_[b].kind == BlockInfo::Kind::Matrix ? 4.0 : 2.0;
    for (const auto& [F, inv] : factors(b)) {
      const double* f = on_host ? F.data<double>() : next;
      next += on_host ? 0 : F.numel();
      const bool ok = block_info_[b].kind == BlockInfo::Kind::Diagonal
                          ? diagonal_inverse_root(ConstVecMap(f, F.numel()), b2, eps, out + 1)
                          : full_inverse_root(ConstMatMap(f, F.size(0), F.size(1)), b2, eps, root, out + 1);
      out[0] = ok ? 1.0 : 0.0;
      out += 1 + inv.numel();
    }
  }
  root_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  root_cpu_seconds_ += thread_cpu_seconds() - cpu0;

  // Every rank's part: on the state device (the process group's) where the gather or the backend
  // path's copies need it, and on the host (one rank: this rank's part as computed).
  Tensor all;
  if (world > 1 || !on_host) all = from_vector<double>(mine, {width}, state_device_);
  std::vector<double> gathered;
  if (world > 1) {
    const auto comm0 = std::chrono::steady_clock::now();
    Tensor part = all;
    all = Tensor::empty({world * width}, kFloat64, state_device_);
    pg->all_gather(part, all)->wait();
    gathered = all.to_vector<double>();  // NCCL's wait is stream-ordered: the host waits here
    root_comm_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - comm0).count();
  }
  const double* host_all = world == 1 ? mine.data() : gathered.data();
  // Every rank walks every rank's part in the same order: same roots, same failures everywhere.
  std::vector<int64_t> cursor(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) cursor[static_cast<size_t>(r)] = r * width;
  for (size_t b = 0; b < blocks_.size(); ++b) {
    int64_t& at = cursor[static_cast<size_t>(block_info_[b].owner)];
    for (const auto& [F, inv] : factors(b)) {
      if (host_all[at] == 1.0) {
        if (on_host) {
          std::copy(host_all + at + 1, host_all + at + 1 + inv.numel(), inv.data<double>());
        } else {
          Tensor dst = inv;
          dst.copy_(all.narrow(0, at + 1, inv.numel()).view(inv.shape()));  // device to device
        }
      } else {
        ++root_failures_;
      }
      at += 1 + inv.numel();
    }
  }
  ++root_computations_;
}

namespace {
// omp_set_num_threads for the calling thread (an ICV of this thread, not a process setting) while
// in scope: Eigen's products take their thread count from it.
class OmpThreadsScope {
 public:
  explicit OmpThreadsScope(int threads) : saved_(omp_get_max_threads()), active_(threads > 0) {
    if (active_) omp_set_num_threads(threads);
  }
  ~OmpThreadsScope() {
    if (active_) omp_set_num_threads(saved_);
  }
  OmpThreadsScope(const OmpThreadsScope&) = delete;
  OmpThreadsScope& operator=(const OmpThreadsScope&) = delete;

 private:
  int saved_;
  bool active_;
};
}  // namespace

void Shampoo::update(const DeviceStep&) {  // host-gated: Optimizer::step resolved the control
  NoGradGuard no_grad;
  OmpThreadsScope threads(options_.threads);
  DP_CHECK(views_.size() == groups_.size(), name(), ": parameter groups were added after construction");
  for (size_t g = 0; g < groups_.size(); ++g)
    DP_CHECK(views_[g].size() == groups_[g].params.size(), name(), ": group ", g,
             " gained or lost parameters after construction (its state is indexed by position)");
  if (use_backend_) {
    update_with_backend();
  } else {
    update_with_eigen();
  }
}

void Shampoo::throw_non_finite(size_t g, size_t i, size_t at, double value) const {
  throw Error(detail::concat(name(), ": step ", step_ + 1, ": the gradient of ", describe_param(g, i), " (",
                             groups_[g].params[i].str(), ") holds ", value, " at flat index ", at,
                             "; a non-finite value would poison the preconditioner statistics for good, so nothing "
                             "was updated (lower the learning rate or loss scale, or skip steps whose gradients "
                             "overflow)"));
}

template <typename Visit>
void Shampoo::for_each_gradient(Visit&& visit) const {
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor& p = groups_[g].params[i];
      const Tensor grad = p.grad();
      if (!grad.defined() || p.numel() == 0) continue;
      DP_CHECK(grad.numel() == p.numel(), name(), ": ", describe_param(g, i), " is ", p.str(), " but its gradient is ",
               grad.str());
      visit(g, i, grad);
    }
  }
}

void Shampoo::update_with_eigen() {
  struct Item {
    size_t g, i;
    std::vector<double> grad;
  };
  // 1. Gather and check every gradient before any state changes.
  std::vector<Item> items;
  for_each_gradient([&](size_t g, size_t i, const Tensor& grad) {
    Item item{g, i, grad.to_vector<double>()};
    for (size_t k = 0; k < item.grad.size(); ++k)
      if (!std::isfinite(item.grad[k])) throw_non_finite(g, i, k, item.grad[k]);
    items.push_back(std::move(item));
  });
  const int64_t t = ++step_;
  const ShampooOptions& o = options_;
  const double beta2 = o.beta2;

  // 2. Statistics, grafting state and filtered gradients.
  std::vector<std::vector<double>> filtered(items.size());
  for (size_t k = 0; k < items.size(); ++k) {
    const Item& it = items[k];
    const ParamView& v = views_[it.g][it.i];
    const std::vector<double>& G = it.grad;
    for (size_t b : v.blocks) {
      const BlockInfo& info = block_info_[b];
      Block& blk = blocks_[b];
      if (info.kind == BlockInfo::Kind::Matrix) {
        const ConstBlockMap Gb(G.data() + info.row0 * v.cols + info.col0, info.rows, info.cols, Eigen::OuterStride<>(v.cols));
        MatMap L = matrix_of(blk.L), R = matrix_of(blk.R);
        if (beta2 < 1) {
          L = beta2 * L + (1 - beta2) * (Gb * Gb.transpose());
          R = beta2 * R + (1 - beta2) * (Gb.transpose() * Gb);
        } else {
          L.noalias() += Gb * Gb.transpose();
          R.noalias() += Gb.transpose() * Gb;
        }
        if (blk.graft.defined()) {
          MatMap V = matrix_of(blk.graft);
          if (o.grafting == ShampooGrafting::AdaGrad) {
            V.array() += Gb.array().square();
          } else {
            V.array() = o.grafting_beta2 * V.array() + (1 - o.grafting_beta2) * Gb.array().square();
          }
        }
      } else {
        const ConstVecMap g(G.data(), info.rows);
        if (info.kind == BlockInfo::Kind::Vector) {
          MatMap L = matrix_of(blk.L);
          if (beta2 < 1) {
            L = beta2 * L + (1 - beta2) * (g * g.transpose());
          } else {
            L.noalias() += g * g.transpose();
          }
        } else {
          VecMap l = vector_of(blk.L);
          if (beta2 < 1) {
            l.array() = beta2 * l.array() + (1 - beta2) * g.array().square();
          } else {
            l.array() += g.array().square();
          }
        }
        if (blk.graft.defined()) {
          VecMap V = vector_of(blk.graft);
          if (o.grafting == ShampooGrafting::AdaGrad) {
            V.array() += g.array().square();
          } else {
            V.array() = o.grafting_beta2 * V.array() + (1 - o.grafting_beta2) * g.array().square();
          }
        }
      }
    }
    if (o.beta1 > 0) {
      VecMap m = vector_of(v.filtered);
      const ConstVecMap g(G.data(), static_cast<int64_t>(G.size()));
      m = o.beta1 * m + (1 - o.beta1) * g;
      const double b1 = 1.0 - std::pow(o.beta1, static_cast<double>(t));
      filtered[k].resize(G.size());
      VecMap(filtered[k].data(), static_cast<int64_t>(G.size())) = m / b1;
    } else {
      filtered[k] = G;
    }
  }

  // 3. Roots, on schedule.
  if (is_root_step(t)) compute_roots(t);

  // 4. Directions and the update.
  const bool precondition = t >= o.start_preconditioning_step;
  const double graft_b2 = 1.0 - std::pow(o.grafting_beta2, static_cast<double>(t));
  for (size_t k = 0; k < items.size(); ++k) {
    const Item& it = items[k];
    const ParamView& v = views_[it.g][it.i];
    const std::vector<double>& M = filtered[k];
    std::vector<double> dir(M.size());
    for (size_t b : v.blocks) {
      const BlockInfo& info = block_info_[b];
      const Block& blk = blocks_[b];
      const bool matrix = info.kind == BlockInfo::Kind::Matrix;
      const int64_t stride = matrix ? v.cols : 1;
      const int64_t cols = matrix ? info.cols : 1;
      const int64_t offset = matrix ? info.row0 * v.cols + info.col0 : 0;
      const ConstBlockMap Mb(M.data() + offset, info.rows, cols, Eigen::OuterStride<>(stride));
      BlockMap Db(dir.data() + offset, info.rows, cols, Eigen::OuterStride<>(stride));
      // graft(M) for this block
      RowMat graft;
      switch (o.grafting) {
        case ShampooGrafting::None:
        case ShampooGrafting::Sgd: graft = Mb; break;
        case ShampooGrafting::AdaGrad: {
          const MatMap V(blk.graft.data<double>(), info.rows, cols);
          graft = (Mb.array() / (V.array().sqrt() + o.grafting_epsilon)).matrix();
          break;
        }
        case ShampooGrafting::Adam: {
          const MatMap V(blk.graft.data<double>(), info.rows, cols);
          graft = (Mb.array() / ((V.array() / graft_b2).sqrt() + o.grafting_epsilon)).matrix();
          break;
        }
      }
      if (!precondition) {
        Db = graft;
        continue;
      }
      RowMat S;
      if (matrix) {
        S = matrix_of(blk.L_inv) * Mb * matrix_of(blk.R_inv);
      } else if (info.kind == BlockInfo::Kind::Vector) {
        S = matrix_of(blk.L_inv) * Mb;
      } else {
        S = (vector_of(blk.L_inv).array() * Mb.col(0).array()).matrix();
      }
      if (o.grafting != ShampooGrafting::None) {
        const double s_norm = S.norm();
        S *= s_norm > 0 ? graft.norm() / s_norm : 0.0;
      }
      Db = S;
    }
    const Tensor& p = groups_[it.g].params[it.i];
    const double lr = groups_[it.g].lr, wd = groups_[it.g].weight_decay;
    std::vector<double> w = p.to_vector<double>();
    for (size_t j = 0; j < w.size(); ++j) w[j] -= lr * (dir[j] + wd * w[j]);
    Tensor updated = from_vector<double>(w, p.shape(), state_device_);
    Tensor param = p;
    param.copy_(updated);  // casts to the parameter's dtype, crosses devices, bumps the version
  }
}

// The Eigen path's formulas (NOTE [ Shampoo update ]) as the state device's kernels (NOTE [ Shampoo
// on a device ]); every tensor float64 on state_device_.
void Shampoo::update_with_backend() {
  Backend& backend = state_device_.backend();
  struct Item {
    size_t g, i;
    Tensor grad;  // flat [numel], contiguous
  };
  // 1. Gather and check every gradient before any state changes: one flag per gradient, read at once.
  std::vector<Item> items;
  std::vector<Tensor> flags;
  for_each_gradient([&](size_t g, size_t i, const Tensor& grad) {
    Tensor flat = grad.to(state_device_).to(kFloat64).contiguous().reshape({grad.numel()});
    flags.push_back(sum(mul(flat, 0.0)).reshape({1}));  // 0 when finite, NaN otherwise
    items.push_back({g, i, std::move(flat)});
  });
  if (!items.empty()) {
    const std::vector<double> verdict = cat(flags, 0).to_vector<double>();
    for (size_t k = 0; k < items.size(); ++k) {
      if (std::isfinite(verdict[k])) continue;
      const std::vector<double> bad = items[k].grad.to_vector<double>();
      for (size_t at = 0; at < bad.size(); ++at)
        if (!std::isfinite(bad[at])) throw_non_finite(items[k].g, items[k].i, at, bad[at]);
    }
  }
  const int64_t t = ++step_;
  const ShampooOptions& o = options_;
  // x ← a·s + b·x forms of the EMAs and sums: (1 − β, β), or (1, 1) for a plain sum.
  const double stat_new = o.beta2 < 1 ? 1 - o.beta2 : 1.0, stat_old = o.beta2 < 1 ? o.beta2 : 1.0;
  const bool adagrad = o.grafting == ShampooGrafting::AdaGrad;
  const double graft_new = adagrad ? 1.0 : 1 - o.grafting_beta2, graft_old = adagrad ? 1.0 : o.grafting_beta2;

  // 2. Statistics, grafting state and filtered gradients.
  std::vector<Tensor> filtered(items.size());
  for (size_t k = 0; k < items.size(); ++k) {
    const Item& it = items[k];
    const ParamView& v = views_[it.g][it.i];
    const Tensor G = v.cols > 0 ? it.grad.view({v.rows, v.cols}) : it.grad.view({v.rows, 1});
    for (size_t b : v.blocks) {
      const BlockInfo& info = block_info_[b];
      Block& blk = blocks_[b];
      if (info.kind == BlockInfo::Kind::Matrix) {
        const Tensor Gb = G.narrow(0, info.row0, info.rows).narrow(1, info.col0, info.cols);  // strided block
        backend.gemm(Gb, Gb.transpose(0, 1), blk.L, stat_new, stat_old);
        backend.gemm(Gb.transpose(0, 1), Gb, blk.R, stat_new, stat_old);
        if (blk.graft.defined()) backend.axpby(graft_new, square(Gb), graft_old, blk.graft);
      } else {
        if (info.kind == BlockInfo::Kind::Vector) {
          backend.gemm(G, G.transpose(0, 1), blk.L, stat_new, stat_old);  // g gᵀ, K = 1
        } else {
          backend.axpby(stat_new, square(it.grad), stat_old, blk.L);
        }
        if (blk.graft.defined()) backend.axpby(graft_new, square(it.grad), graft_old, blk.graft);
      }
    }
    if (o.beta1 > 0) {
      backend.axpby(1 - o.beta1, it.grad, o.beta1, v.filtered);
      filtered[k] = with_scalar(BinaryOp::Div, v.filtered, 1.0 - std::pow(o.beta1, static_cast<double>(t)));
    } else {
      filtered[k] = it.grad;
    }
  }

  // 3. Roots, on schedule.
  if (is_root_step(t)) compute_roots(t);

  // 4. Directions and the update.
  const bool precondition = t >= o.start_preconditioning_step;
  const double graft_b2 = 1.0 - std::pow(o.grafting_beta2, static_cast<double>(t));
  for (size_t k = 0; k < items.size(); ++k) {
    const Item& it = items[k];
    const ParamView& v = views_[it.g][it.i];
    const Tensor& p = groups_[it.g].params[it.i];
    const Shape view = v.cols > 0 ? Shape{v.rows, v.cols} : Shape{v.rows, 1};
    const Tensor M = filtered[k].view(view);
    Tensor dir = Tensor::empty({p.numel()}, kFloat64, state_device_);  // the blocks tile it
    const Tensor D = dir.view(view);
    for (size_t b : v.blocks) {
      const BlockInfo& info = block_info_[b];
      const Block& blk = blocks_[b];
      const bool matrix = info.kind == BlockInfo::Kind::Matrix;
      const Tensor Mb = matrix ? M.narrow(0, info.row0, info.rows).narrow(1, info.col0, info.cols) : M;
      Tensor Db = matrix ? D.narrow(0, info.row0, info.rows).narrow(1, info.col0, info.cols) : D;
      Tensor graft = Mb;  // graft(M) for this block; sgd and none: M itself
      if (blk.graft.defined()) {
        const Tensor V = blk.graft.view(Mb.shape());
        const Tensor second = adagrad ? V : with_scalar(BinaryOp::Div, V, graft_b2);
        graft = div(Mb, add(sqrt(second), o.grafting_epsilon));
      }
      if (!precondition) {
        Db.copy_(graft);
        continue;
      }
      Tensor S;
      if (matrix) {
        S = matmul(matmul(blk.L_inv, Mb), blk.R_inv);
      } else if (info.kind == BlockInfo::Kind::Vector) {
        S = matmul(blk.L_inv, Mb);
      } else {
        S = mul(blk.L_inv.view(Mb.shape()), Mb);
      }
      if (o.grafting != ShampooGrafting::None) {
        // S · ‖graft‖ / ‖S‖, and 0 when S = 0: the ratio is kept finite (S = 0 times any finite
        // number is 0) by flooring ‖S‖ at the smallest normal double and capping the quotient.
        const Tensor s_norm = with_scalar(BinaryOp::Maximum, frobenius_norm(S), DBL_MIN);
        const Tensor ratio = with_scalar(BinaryOp::Minimum, div(frobenius_norm(graft), s_norm), DBL_MAX);
        S = mul(S, ratio);
      }
      Db.copy_(S);
    }
    // p ← p − lr · (D + wd · p), in float64, then cast into the parameter.
    const double lr = groups_[it.g].lr, wd = groups_[it.g].weight_decay;
    const Tensor w = p.to(state_device_).to(kFloat64).contiguous().reshape({p.numel()});
    if (wd != 0) backend.axpby(wd, w, 1.0, dir);
    backend.axpby(1.0, w, -lr, dir);
    Tensor param = p;
    param.copy_(dir.view(p.shape()));  // casts to the parameter's dtype, crosses devices, bumps the version
  }
}

std::vector<std::pair<std::string, Tensor>> Shampoo::state_dict() const {
  std::vector<std::pair<std::string, Tensor>> out;
  out.emplace_back("shampoo.step", from_vector<int64_t>({step_}, {}, state_device_));
  size_t k = 0;
  for (size_t g = 0; g < views_.size(); ++g) {
    for (size_t i = 0; i < views_[g].size(); ++i, ++k) {
      const ParamView& v = views_[g][i];
      const std::string prefix = "state." + std::to_string(k) + ".";
      if (v.filtered.defined()) out.emplace_back(prefix + "filtered_grad", v.filtered);
      for (size_t j = 0; j < v.blocks.size(); ++j) {
        const Block& blk = blocks_[v.blocks[j]];
        const std::string bp = prefix + "block" + std::to_string(j) + ".";
        out.emplace_back(bp + "L", blk.L);
        out.emplace_back(bp + "L_inv_root", blk.L_inv);
        if (blk.R.defined()) {
          out.emplace_back(bp + "R", blk.R);
          out.emplace_back(bp + "R_inv_root", blk.R_inv);
        }
        if (blk.graft.defined()) out.emplace_back(bp + "graft_state", blk.graft);
      }
    }
  }
  return out;
}

void Shampoo::load_state_dict(const std::vector<std::pair<std::string, Tensor>>& state) {
  const std::vector<std::pair<std::string, Tensor>> mine = state_dict();
  // Check everything first, so that a bad entry leaves the state as it was.
  std::vector<bool> given(mine.size(), false);
  std::vector<std::pair<Tensor, Tensor>> copies;
  int64_t step = 0;
  for (const auto& [key, value] : state) {
    auto it = std::find_if(mine.begin(), mine.end(), [&](const auto& e) { return e.first == key; });
    DP_CHECK(it != mine.end(), name(), ": load_state_dict: unknown entry '", key,
             "' (this optimiser's parameters and options do not have it)");
    const size_t at = static_cast<size_t>(it - mine.begin());
    DP_CHECK(!given[at], name(), ": load_state_dict: entry '", key, "' is given twice");
    given[at] = true;
    DP_CHECK(value.defined() && value.shape() == it->second.shape() && value.dtype() == it->second.dtype(), name(),
             ": load_state_dict: '", key, "' is ", value.defined() ? value.str() : "undefined", " but expected ",
             it->second.str());
    if (key == "shampoo.step") {
      step = value.item<int64_t>();
      DP_CHECK(step >= 0, name(), ": load_state_dict: 'shampoo.step' must be >= 0, got ", step);
    } else {
      copies.emplace_back(it->second, value);
    }
  }
  std::string missing;
  int missing_count = 0;
  for (size_t at = 0; at < mine.size(); ++at)
    if (!given[at] && ++missing_count <= 5) missing += (missing.empty() ? "'" : ", '") + mine[at].first + "'";
  DP_CHECK(missing_count == 0, name(), ": load_state_dict: ", missing_count, " entr", missing_count == 1 ? "y" : "ies",
           " of this optimiser's state missing: ", missing, missing_count > 5 ? ", ..." : "",
           " (a state saved with other parameters or options?)");
  for (auto& [dst, src] : copies) dst.copy_(src);
  step_ = step;
}

}  // namespace dp

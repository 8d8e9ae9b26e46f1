// Shampoo (block-diagonal Kronecker-factored preconditioning with grafting), with the semantics of
// Meta's distributed_shampoo (facebookresearch/optimizers), and its data-parallel root computation.
//
// NOTE [ Shampoo update ]
// Every parameter is first given a matrix or vector view: size-1 dimensions are dropped; a 0-d or
// 1-d result is a vector of n; 2 dims are an m × n matrix; 3 or more are flattened to
// d0 × (d1 · d2 · ...) (a conv weight [out, in, kh, kw] becomes out × in·kh·kw). The view is then
// cut into blocks, D = max_preconditioner_dim:
//   matrix m × n:  row chunks of D × column chunks of D, each block ≤ D × D, order 2;
//   vector n ≤ D:  one block, one full n × n factor, order 1;
//   vector n > D:  one block, one diagonal factor (a vector of n), order 1.
// Step t = 1, 2, ... (one count for the optimiser; lr and wd are the group's), per block with
// gradient block G (for a vector block, g) — all of it in float64, whatever the parameter dtype:
//   statistics:  β2 = 1:  L += G Gᵀ,  R += Gᵀ G            (vector: L += g gᵀ; diagonal: l += g²)
//                β2 < 1:  L = β2 L + (1 − β2) G Gᵀ, R likewise
//   grafting state (from G):  adagrad: v += G²;  adam: v = β2g v + (1 − β2g) G²;  sgd/none: none
//   filtered gradient:  β1 = 0: M = G;  β1 > 0: m = β1 m + (1 − β1) G, M = m / (1 − β1^t)
//   roots, at t = start, start + f, start + 2f, ... (f = precondition_frequency, start =
//     start_preconditioning_step), for every factor F of every block:
//       A = F / b2 + ε I,  b2 = 1 − β2^t (1 when β2 = 1);  A = Q Λ Qᵀ (SelfAdjointEigenSolver)
//       F⁻ = Q Λ^(−1/r) Qᵀ,  r = 2 · order (4 for matrix blocks, 2 for vectors); the diagonal
//       factor: F⁻ = (l / b2 + ε)^(−1/2) elementwise.
//     A root fails when F or the result is not finite, the solver does not converge or some
//     eigenvalue of A is ≤ 0; the previous F⁻ is then kept (identity before the first success)
//     and root_failures() counts it.
//   direction:   t < start:  D = graft(M)                     (M itself without grafting)
//                t ≥ start:  S = L⁻ M R⁻ (vector: L⁻ M; diagonal: l⁻ ⊙ M);
//                            grafting none: D = S;  otherwise D = S · ‖graft(M)‖_F / ‖S‖_F (0 when S = 0)
//     graft(M):  sgd: M;  adagrad: M / (√v + ε_g);  adam: M / (√(v / (1 − β2g^t)) + ε_g)
//   update:      p ← p − lr · (D + wd · p)                      (decoupled weight decay)
// The step is all-or-nothing with respect to non-finite gradients: every gradient is checked
// before any state changes, and a NaN or infinity is a dp::Error naming the parameter and step.
//
// NOTE [ Distributed Shampoo roots ]
// With a process group of more than one rank (the gradients already averaged, so every rank holds
// the same statistics), the root computations are spread over the ranks: blocks are assigned by
// longest-processing-time first on the cost Σ dim³ over their factors (ties: lower block index
// first, then the lowest rank), identically on every rank. At a root step each rank computes its
// own blocks' roots, then one all_gather (float64, every rank's part padded to the largest) gives
// every rank all of them, with a success flag per factor so that every rank keeps the same previous
// inverse for a failed root and counts the same failures. The result is bit-identical to one rank
// given bit-identical gradients. Every rank must call step() in lockstep (a root step issues one
// collective, NOTE [ Process group contract ]); the group must take tensors on the state device
// (MPI for the CPU, NCCL for a GPU).
//
// NOTE [ Shampoo on a device ]
// The state lives on ShampooOptions::state_device (default: the parameters' device). Two ways to
// compute the statistics, grafting, filtered gradient and preconditioned direction (the same
// formulas, in float64):
//   Eigen:   on the host, over the state's memory (the state must be on the CPU);
//   backend: the state device's kernels, so on a GPU the state never leaves it — the factor
//            updates are GEMMs with alpha/beta (L = β2 L + (1 − β2) G Gᵀ in one cuBLAS call over a
//            strided block of the gradient), the rest pointwise kernels and reductions.
// Auto (the default) takes Eigen on a CPU and the backend elsewhere; the backend path on a CPU
// device is what the tests compare against the reference, the same code a GPU runs.
// The roots are Eigen's symmetric eigensolver on the host either way (chosen over cuSOLVER's
// syevd: the eigendecomposition of a ≤ 1024 × 1024 factor every precondition_frequency steps is
// a small, latency-bound job, the distributed root computation already spreads it over the
// ranks, and the host's result is bit-identical across devices and ranks); a root step copies
// this rank's factors to the host in one transfer and the gathered roots back in one. A step of
// the backend path reads one value on the host (one flag per gradient: its non-finite check,
// which must precede every state change), plus the host-gated found_inf/lr read under a loss
// scaler (NOTE [ Device-resident optimiser step ]).
//
// State (all float64, on the state device): state_dict() names every tensor; see there.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "optim/optimizer.h"

namespace dp {

class ProcessGroup;

enum class ShampooGrafting { None, Sgd, AdaGrad, Adam };
// Auto: Eigen when the state is on a CPU, the state device's backend kernels otherwise.
enum class ShampooKernels { Auto, Eigen, Backend };
// "none", "sgd", "adagrad", "adam"; parse throws dp::Error on anything else.
const char* shampoo_grafting_name(ShampooGrafting g);
ShampooGrafting parse_shampoo_grafting(const std::string& name);

struct ShampooOptions {
  double lr = 0.01;
  double beta1 = 0.0;    // EMA of the gradient before preconditioning (bias-corrected); 0 = none
  double beta2 = 1.0;    // factor EMA; 1 = plain sums
  double epsilon = 1e-12;
  double weight_decay = 0.0;  // decoupled (used by the one-group constructor)
  int64_t max_preconditioner_dim = 1024;
  int64_t precondition_frequency = 1;
  // First step (1-based) that uses Shampoo's direction; −1 means precondition_frequency.
  int64_t start_preconditioning_step = -1;
  ShampooGrafting grafting = ShampooGrafting::Adam;
  double grafting_epsilon = 1e-8;
  double grafting_beta2 = 0.999;  // adam grafting only
  // Spreads the root computations over its ranks (NOTE [ Distributed Shampoo roots ]); null or a
  // group of one rank computes every root locally. Not owned; must outlive the optimiser.
  ProcessGroup* process_group = nullptr;
  // Where the float64 state lives; invalid = the parameters' device (NOTE [ Shampoo on a device ]).
  Device state_device{};
  // How the statistics and directions are computed (NOTE [ Shampoo on a device ]).
  ShampooKernels kernels = ShampooKernels::Auto;
  // CPU threads for the host's float64 products and roots (Eigen over OpenMP), set for the calling
  // thread during step() only; 0 leaves OpenMP's setting as it is.
  int threads = 0;
};

class Shampoo : public Optimizer {
 public:
  // One group with options.lr and options.weight_decay.
  Shampoo(std::vector<Tensor> params, const ShampooOptions& options);
  // Groups carry their own lr and weight_decay.
  Shampoo(std::vector<ParamGroup> groups, const ShampooOptions& options);

  std::string name() const override { return "shampoo"; }

  const ShampooOptions& options() const { return options_; }
  // The device holding the state, and whether its backend's kernels compute the step.
  Device state_device() const { return state_device_; }
  bool uses_backend_kernels() const { return use_backend_; }
  int64_t steps() const { return step_; }
  // One count for the whole optimiser (NOTE [ Shampoo update ]): every parameter's is steps().
  int64_t step_count(size_t, size_t) const override { return step_; }

  // ---- Blocks and their assignment to ranks ----
  struct BlockInfo {
    size_t group = 0, index = 0;  // the parameter
    enum class Kind { Matrix, Vector, Diagonal } kind = Kind::Matrix;
    int64_t row0 = 0, rows = 0;  // in the parameter's view; a vector block: its n elements
    int64_t col0 = 0, cols = 1;  // matrix blocks only
    double cost = 0;             // Σ dim³ over its factors (n for a diagonal one)
    int owner = 0;               // rank that computes its roots
  };
  const std::vector<BlockInfo>& blocks() const { return block_info_; }
  // Number of blocks whose roots this rank computes, and their summed cost.
  size_t local_blocks() const;
  double local_cost() const;

  // ---- Counters ----
  // Root recomputations so far (steps at which the roots were recomputed), and failed roots
  // (one per factor whose previous inverse was kept; the same on every rank).
  int64_t root_computations() const { return root_computations_; }
  int64_t root_failures() const { return root_failures_; }
  // Time this rank spent computing its roots (wall clock and this thread's CPU time), and in the
  // all_gather that shares them, summed over all root steps.
  double root_seconds() const { return root_seconds_; }
  double root_cpu_seconds() const { return root_cpu_seconds_; }
  double root_comm_seconds() const { return root_comm_seconds_; }

  // ---- State ----
  // Every state tensor by a stable name; k counts parameters across groups in order (as
  // NOTE [ Optimiser state ]), b the parameter's blocks in row-major block order:
  //   "shampoo.step"                       int64 0-d
  //   "state.<k>.filtered_grad"            [numel]          (β1 > 0)
  //   "state.<k>.block<b>.L", ".R"         factors: [rows, rows], [cols, cols]; a vector block
  //                                        has only L ([n, n], or [n] when diagonal)
  //   "state.<k>.block<b>.L_inv_root", ".R_inv_root"   their inverse roots, same shapes
  //   "state.<k>.block<b>.graft_state"     [rows, cols] or [n] (adagrad / adam grafting)
  // All float64 but the step. The tensors are the live state (shared, not copied). Every rank
  // holds all of it (NOTE [ Distributed Shampoo roots ]: the roots are gathered each root step),
  // so rank 0's copy is the whole state. load_state_dict copies values into them and needs every
  // entry, with its shape and dtype: a name missing, unknown or mis-shaped is a dp::Error naming
  // it, and nothing changes (a checkpoint of another model or other options would otherwise
  // continue with part of its state silently reset).
  std::vector<std::pair<std::string, Tensor>> state_dict() const override;
  void load_state_dict(const std::vector<std::pair<std::string, Tensor>>& state) override;

 protected:
  // Shampoo keeps its state itself (state_dict()), none in the base class's buffers.
  void update(const DeviceStep& device) override;
  std::vector<std::string> state_names() const override { return {}; }

 private:
  struct Block {
    Tensor L, R, L_inv, R_inv, graft;  // float64 on state_device_; R, R_inv undefined for vector blocks
  };
  struct ParamView {
    int64_t rows = 0, cols = 0;  // cols == 0: a vector of `rows`
    std::vector<size_t> blocks;  // indices into blocks_
    Tensor filtered;             // [numel] when β1 > 0
  };

  void build_blocks();
  void assign_owners();
  bool is_root_step(int64_t t) const;
  void compute_roots(int64_t t);
  // The two ways through a step (NOTE [ Shampoo on a device ]); both check every gradient first.
  void update_with_eigen();
  void update_with_backend();
  [[noreturn]] void throw_non_finite(size_t g, size_t i, size_t at, double value) const;
  // visit(group, index, gradient) for each parameter with a gradient and elements, in order,
  // after checking the gradient's size.
  template <typename Visit>
  void for_each_gradient(Visit&& visit) const;

  ShampooOptions options_;
  Device state_device_;
  bool use_backend_ = false;
  int64_t step_ = 0;
  std::vector<std::vector<ParamView>> views_;  // [group][param]
  std::vector<BlockInfo> block_info_;
  std::vector<Block> blocks_;
  int64_t root_computations_ = 0, root_failures_ = 0;
  double root_seconds_ = 0, root_cpu_seconds_ = 0, root_comm_seconds_ = 0;
};

}  // namespace dp

#include "comm/ddp/sync_batch_norm.h"

#include <functional>
#include <utility>
#include <vector>

#include "runtime/autograd/grad_mode.h"
#include "runtime/autograd/node.h"
#include "runtime/backend/backend.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/norm.h"
#include "runtime/ops/reduce.h"
#include "runtime/ops/shape_ops.h"

namespace dp {

namespace {

// "sync_batch_norm 'layer1.0.bn1' (rank 1 of 4)": errors say which layer and which rank.
std::string describe(const std::string& name, const ProcessGroup& group) {
  return detail::concat("sync_batch_norm", name.empty() ? "" : " '" + name + "'", " (rank ", group.rank(), " of ",
                        group.size(), ")");
}

// A per-channel tensor (weight, bias, running stats), when given: [C], on x's device, in x's
// dtype or, for a float16/bfloat16 input, float32 (as dp::batch_norm). Checked before any
// collective, so that a bad call fails on its own instead of in the middle of one.
void check_per_channel(const std::string& where, const char* what, const Tensor& t, const Tensor& x) {
  if (!t.defined()) return;
  const int64_t C = x.size(1);
  DP_CHECK(t.shape() == Shape{C}, where, ": ", what, " must have shape [", C, "] for input ", x.str(), ", got ",
           t.str());
  DP_CHECK(t.device() == x.device(), where, ": ", what, " ", t.str(), " is on ", t.device().str(),
           " but the input is on ", x.device().str());
  DP_CHECK(t.dtype() == x.dtype() || t.dtype() == compute_dtype(x.dtype()), where, ": ", what, " ", t.str(),
           " must have the input's dtype or its statistics dtype (input ", x.str(), ")");
}

// Submits one collective and waits for it; a failure (such as a group that serves another device
// than the tensors', or ranks that disagree) is rethrown naming the layer and the step.
void run_collective(const std::string& where, const char* step, const ProcessGroup& group,
                    const std::function<WorkPtr()>& submit) {
  try {
    submit()->wait();
  } catch (const Error& e) {
    throw Error(detail::concat(where, ": ", step, " over the ", group.backend_name(), " process group failed: ",
                               e.what()));
  }
}

Shape channel_view(int64_t C) { return {1, C, 1, 1}; }

}  // namespace

// x [N, C, H, W]; weight, bias, running_mean, running_var [C]; y like x. NOTE [ SyncBatchNorm as
// a fused op ] in the header.
Tensor sync_batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                       const Tensor& running_var, double momentum, double eps, ProcessGroup& group,
                       const std::string& name) {
  const std::string where = describe(name, group);
  DP_CHECK(x.defined() && x.dim() == 4, where, ": expected an input [N, C, H, W], got ",
           x.defined() ? x.str() : std::string("an undefined tensor"));
  check_floating(where.c_str(), x);
  check_per_channel(where, "weight", weight, x);
  check_per_channel(where, "bias", bias, x);
  check_per_channel(where, "running_mean", running_mean, x);
  check_per_channel(where, "running_var", running_var, x);
  DP_CHECK(running_mean.defined() == running_var.defined(), where,
           ": give both running_mean and running_var, or neither");
  // A single process normalises over its own batch already (PyTorch skips the collectives too).
  if (group.size() == 1) return batch_norm(x, weight, bias, running_mean, running_var, true, momentum, eps);
  const int64_t C = x.size(1);
  // Every rank contributes at least one value per channel, so the global count N ≥ size() ≥ 2
  // and the unbiased variance M2 / (N − 1) is defined. (An empty shard on one rank only would
  // fail there while the others wait in the all-gather: the watchdog then names it.)
  DP_CHECK(x.numel() > 0, where, ": this rank's shard ", x.str(), " is empty; every rank needs at least one sample");

  const DType stat = compute_dtype(x.dtype());  // float32 for float16/bfloat16 inputs
  const Device device = x.device();
  const MemoryFormat format = x.suggest_memory_format();  // y keeps it (NOTE [ Channels-last ])
  const Tensor xc = x.detach().contiguous(format);
  const bool differentiable = any_requires_grad({&x, &weight, &bias});
  Tensor y, mean_s, invstd, total;  // the output and what backward needs
  {
    // Statistics and running stats are outside autograd; the one node is recorded below.
    NoGradGuard no_grad;

    // Local statistics, two-pass: the mean, then M2 = Σ(x − mean)² (no Σx² cancellation). The
    // runtime's reductions accumulate in double on the CPU.
    const Tensor xs = xc.to(stat);
    const Tensor local_mean = mean(xs, {0, 2, 3});
    const Tensor local_m2 = sum(square(sub(xs, local_mean.view(channel_view(C)))), {0, 2, 3});
    const double local_count = static_cast<double>(x.numel() / C);

    // All ranks' (n_r, mean_r [C], M2_r [C]) in float64, combined in rank order (Chan).
    const Tensor mine =
        cat({full({1}, local_count, kFloat64, device), local_mean.to(kFloat64), local_m2.to(kFloat64)}, 0);
    const Tensor all = empty({group.size(), 2 * C + 1}, kFloat64, device);
    run_collective(where, "all-gather of the batch statistics", group,
                   [&] { return group.all_gather(mine, all); });
    const Tensor counts = all.narrow(1, 0, 1).contiguous();   // [W, 1]
    const Tensor means = all.narrow(1, 1, C).contiguous();    // [W, C]
    const Tensor m2s = all.narrow(1, C + 1, C).contiguous();  // [W, C]
    total = sum(counts, {0});                                 // [1]: N
    const Tensor global_mean = div(sum(mul(counts, means), {0}), total);                         // [C]
    const Tensor global_m2 = sum(add(m2s, mul(counts, square(sub(means, global_mean)))), {0});  // [C]
    const Tensor biased_var = div(global_m2, total);

    // y = (x − mean)·invstd·weight + bias by the backend's kernel, given the global statistics
    // (its evaluation mode normalises with the statistics it is handed).
    mean_s = global_mean.to(stat);
    const Tensor var_s = biased_var.to(stat);
    y = batch_norm(xc, weight, bias, mean_s, var_s, false, 0.0, eps);

    if (running_mean.defined()) {
      // As the kernel: running = (1 − momentum)·running + momentum·batch, unbiased batch variance.
      const Tensor unbiased_var = div(global_m2, add(total, -1.0));
      const Tensor new_mean = add(mul(running_mean.to(kFloat64), 1.0 - momentum), mul(global_mean, momentum));
      const Tensor new_var = add(mul(running_var.to(kFloat64), 1.0 - momentum), mul(unbiased_var, momentum));
      Tensor rm = running_mean, rv = running_var;
      rm.copy_(new_mean.to(running_mean.dtype()));  // copy_ bumps the versions
      rv.copy_(new_var.to(running_var.dtype()));
    }
    invstd = rsqrt(add(biased_var, eps)).to(stat);
  }

  if (differentiable) {
    const Tensor w = weight.defined() ? weight.detach() : Tensor();
    SavedTensor sx(xc), sw(w), smean(mean_s), sinvstd(invstd), stotal(total);
    const DType weight_dtype = weight.defined() ? weight.dtype() : stat;
    const DType bias_dtype = bias.defined() ? bias.dtype() : stat;
    ProcessGroup* g_group = &group;
    record("sync_batch_norm", y, {x, weight, bias}, [=](const Tensor& g, const Node& n) {
      // g, dx [N, C, H, W] in x's dtype; dweight, dbias [C] in the parameters' dtypes.
      NoGradGuard no_grad_inside;
      const char* op = "sync_batch_norm";
      const Tensor saved_x = sx.get(op), saved_w = sw.get(op), mu = smean.get(op), inv = sinvstd.get(op);
      const bool need_dx = n.needs_input_grad(0);
      // The kernel's evaluation-mode backward gives this rank's Σdy·x̂ (its "dweight") and Σdy
      // (its "dbias") per channel, and w·invstd·dy, the part of dx that does not go through the
      // statistics.
      const Tensor sum_dy_xhat = empty({C}, stat, device), sum_dy = empty({C}, stat, device);
      const Tensor dx_direct =
          need_dx ? Tensor::empty(saved_x.shape(), saved_x.dtype(), device, format) : Tensor();
      device.backend().batch_norm_backward(g.contiguous(format), saved_x, saved_w, mu, inv, dx_direct, sum_dy_xhat,
                                           sum_dy, false, {});
      // Local sums: the reducer averages them over ranks (gradient convention in the header).
      const Tensor dweight = n.needs_input_grad(1) ? sum_dy_xhat.to(weight_dtype) : Tensor();
      const Tensor dbias = n.needs_input_grad(2) ? sum_dy.to(bias_dtype) : Tensor();
      Tensor dx;
      if (need_dx) {
        // dx = w·invstd·(dy − Σdy/N − x̂·Σ(dy·x̂)/N) with the sums over the global batch
        //    = w·invstd·dy − a − (x − mean)·b,  a = w·invstd·Σdy/N,  b = w·invstd²·Σ(dy·x̂)/N.
        const Tensor sums = cat({sum_dy.to(kFloat64), sum_dy_xhat.to(kFloat64)}, 0);
        run_collective(where, "all-reduce of the gradient sums", *g_group,
                       [&] { return g_group->all_reduce(sums, CollectiveReduce::Sum); });
        const Tensor inv64 = inv.to(kFloat64);
        const Tensor scale = saved_w.defined() ? mul(saved_w.to(kFloat64), inv64) : inv64;  // w·invstd
        const Tensor n_total = stotal.get(op);
        const Tensor a = div(mul(scale, sums.narrow(0, 0, C).contiguous()), n_total).to(stat);
        const Tensor b = div(mul(mul(scale, inv64), sums.narrow(0, C, C).contiguous()), n_total).to(stat);
        const Tensor centred = sub(saved_x.to(stat), mu.view(channel_view(C)));
        dx = sub(sub(dx_direct.to(stat), a.view(channel_view(C))), mul(centred, b.view(channel_view(C))))
                 .to(saved_x.dtype());
      }
      return std::vector<Tensor>{dx, dweight, dbias};
    });
  }
  return y;
}

Tensor SyncBatchNormSynchronizer::batch_norm_training(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                                      const Tensor& running_mean, const Tensor& running_var,
                                                      double momentum, double eps) {
  return sync_batch_norm(x, weight, bias, running_mean, running_var, momentum, eps, group_, name_);
}

int convert_sync_batchnorm(nn::Module& model, ProcessGroup& group) {
  int converted = 0;
  for (auto& [name, module] : model.named_modules()) {
    if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(module)) {
      bn->set_synchronizer(std::make_shared<SyncBatchNormSynchronizer>(group, name));
      ++converted;
    }
  }
  return converted;
}

}  // namespace dp

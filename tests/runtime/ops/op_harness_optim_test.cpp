// Op harness table: the fused optimiser kernels, called as optim/*.cpp call them, compared
// forward-only on the updated buffers (sgd_update with nesterov/dampening/first_step,
// adamw_update, lamb_direction, lars_update in both forms and with device trust ratios from
// lars_trust_ratios, LAMB's device step with lamb_update, squared_norms over several tensors), and
// the loss-scaling pair
// (amp_unscale_and_check, amp_update_scale).
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/op_harness.h"
#include "runtime/ops/creation.h"

namespace dp::testing::harness {

namespace {

using V = std::vector<Tensor>;

InputSpec buffer(const char* name, int64_t n, double lo = -1.0, double hi = 1.0) {
  return InputSpec(name, {n}).range(lo, hi).no_grad();
}

}  // namespace

std::vector<OpCase> optimizer_cases() {
  std::vector<OpCase> cases;
  const double nan = std::numeric_limits<double>::quiet_NaN();

  // ---- sgd_update: param, grad, momentum buffer ----
  auto sgd_case = [&](const std::string& name, int64_t n, SgdParams p) {
    cases.push_back({name, {Kernel::SgdUpdate}, {buffer("param", n), buffer("grad", n), buffer("momentum_buf", n)},
                     [p, nan](const V& v) {
                       // first_step: the buffer must be written, not read (NaN would show).
                       if (p.first_step) Tensor(v[2]).fill_(nan);
                       v[0].device().backend().sgd_update(v[0], v[1], v[2], p);
                       return p.momentum != 0.0 ? V{v[0], v[2]} : V{v[0]};
                     },
                     false});
  };
  sgd_case("sgd_update_plain_257", 257, SgdParams{0.1, 0.0, 0.0, 0.0, false, false, {}});
  sgd_case("sgd_update_weight_decay_no_momentum_33", 33, SgdParams{0.05, 0.0, 0.0, 0.01, false, false, {}});
  sgd_case("sgd_update_momentum_dampening_wd_1031", 1031, SgdParams{0.1, 0.9, 0.1, 1e-2, false, false, {}});
  sgd_case("sgd_update_nesterov_257", 257, SgdParams{0.1, 0.9, 0.0, 5e-4, true, false, {}});
  sgd_case("sgd_update_first_step_7", 7, SgdParams{0.1, 0.9, 0.5, 1e-2, false, true, {}});
  sgd_case("sgd_update_first_step_nesterov_4099", 4099, SgdParams{0.2, 0.8, 0.0, 0.0, true, true, {}});

  // ---- adamw_update / lamb_direction: param, grad, exp_avg, exp_avg_sq ----
  auto adam_inputs = [](int64_t n) {
    return std::vector<InputSpec>{buffer("param", n), buffer("grad", n), buffer("exp_avg", n, -0.1, 0.1),
                                  buffer("exp_avg_sq", n, 1e-4, 1e-2)};
  };
  auto adam_params = [](double lr, double wd, int64_t step, double divisor) {
    AdamParams p;
    p.lr = lr;
    p.weight_decay = wd;
    p.step = step;
    p.grad_divisor = divisor;
    return p;
  };
  auto adamw_case = [&](const std::string& name, int64_t n, AdamParams p) {
    cases.push_back({name, {Kernel::AdamwUpdate}, adam_inputs(n),
                     [p](const V& v) {
                       v[0].device().backend().adamw_update(v[0], v[1], v[2], v[3], p);
                       return V{v[0], v[2], v[3]};
                     },
                     false});
  };
  adamw_case("adamw_update_step1_257", 257, adam_params(1e-2, 0.0, 1, 1.0));
  adamw_case("adamw_update_step10_wd_divisor_1031", 1031, adam_params(1e-3, 0.01, 10, 2.5));
  adamw_case("adamw_update_odd_5", 5, adam_params(0.1, 0.1, 3, 1.0));
  auto lamb_case = [&](const std::string& name, int64_t n, AdamParams p) {
    cases.push_back({name, {Kernel::LambDirection}, adam_inputs(n),
                     [p](const V& v) {
                       Tensor update = Tensor::empty(v[0].shape(), v[0].dtype(), v[0].device());
                       v[0].device().backend().lamb_direction(v[0], v[1], v[2], v[3], update, p);
                       return V{update, v[2], v[3], v[0]};  // the param is read, not written
                     },
                     false});
  };
  lamb_case("lamb_direction_step1_257", 257, adam_params(1e-2, 0.01, 1, 1.0));
  lamb_case("lamb_direction_step7_divisor_4099", 4099, adam_params(1e-3, 0.0, 7, 3.0));

  // ---- lars_update: param, grad, momentum buffer; both forms ----
  auto lars_case = [&](const std::string& name, int64_t n, LarsParams p) {
    cases.push_back({name, {Kernel::LarsUpdate}, {buffer("param", n), buffer("grad", n), buffer("momentum_buf", n)},
                     [p](const V& v) {
                       v[0].device().backend().lars_update(v[0], v[1], v[2], p);
                       return V{v[0], v[2]};
                     },
                     false});
  };
  lars_case("lars_update_lr_inside_257", 257, LarsParams{0.1, 0.9, 5e-4, 0.37, false, {}, 0, {}});
  lars_case("lars_update_lr_outside_1031", 1031, LarsParams{0.2, 0.9, 1e-4, 1.7, true, {}, 0, {}});
  lars_case("lars_update_no_momentum_33", 33, LarsParams{0.05, 0.0, 0.0, 0.5, false, {}, 0, {}});

  // ---- lars_trust_ratios + lars_update reading its ratio on the device (LARS::step's path):
  // parameters a and b with their gradients; b's gradient zeroed gives the ratio 1 ----
  cases.push_back({"lars_device_trust_ratios_257_33", {Kernel::SquaredNorms, Kernel::LarsTrustRatios, Kernel::LarsUpdate},
                   {buffer("a", 257), buffer("grad_a", 257), buffer("buf_a", 257), buffer("b", 33), buffer("grad_b", 33),
                    buffer("buf_b", 33)},
                   [](const V& v) {
                     Backend& be = v[0].device().backend();
                     Tensor(v[4]).fill_(0.0);
                     Tensor sq = Tensor::empty({4}, kFloat64, v[0].device());
                     be.squared_norms({v[0], v[1], v[3], v[4]}, sq);
                     Tensor ratios = Tensor::empty({2}, kFloat64, v[0].device());
                     be.lars_trust_ratios(sq, 5e-4, 0.02, 1e-9, ratios);
                     for (int k = 0; k < 2; ++k) {
                       LarsParams p{0.1, 0.9, 5e-4, 1.0, k == 1, ratios, k, {}};
                       be.lars_update(v[3 * k], v[3 * k + 1], v[3 * k + 2], p);
                     }
                     return V{ratios, v[0], v[2], v[3], v[5]};
                   },
                   false});

  // ---- LAMB::step's device path: the global norm (clip_coefficient) decides apex's divisor in
  // lamb_direction, ‖w‖/‖u‖ come from lars_trust_ratios (η 1, λ 0, ε 0), lamb_update applies
  // w −= lr·r·u; parameter a adapted, b not (r = 1). The gradients' norm (~15) exceeds
  // max_grad_norm 2, so the divisor is in play. ----
  cases.push_back({"lamb_device_step_257_33",
                   {Kernel::SquaredNorms, Kernel::ClipCoefficient, Kernel::LambDirection, Kernel::LarsTrustRatios,
                    Kernel::LambUpdate},
                   {buffer("a", 257), buffer("grad_a", 257), buffer("m_a", 257, -0.1, 0.1),
                    buffer("v_a", 257, 1e-4, 1e-2), buffer("b", 33), buffer("grad_b", 33), buffer("m_b", 33, -0.1, 0.1),
                    buffer("v_b", 33, 1e-4, 1e-2)},
                   [](const V& v) {
                     Backend& be = v[0].device().backend();
                     const Device d = v[0].device();
                     Tensor grad_sq = Tensor::empty({2}, kFloat64, d), clip = Tensor::empty({2}, kFloat64, d);
                     be.squared_norms({v[1], v[5]}, grad_sq);
                     Tensor found = Tensor::empty({}, kFloat32, d);
                     found.fill_(0.0);
                     be.clip_coefficient(grad_sq, 2.0, found, clip);
                     V updates;
                     for (int k = 0; k < 2; ++k) {
                       AdamParams p;
                       p.lr = 0.01;
                       p.weight_decay = k == 0 ? 0.01 : 0.0;
                       p.step = 3;
                       p.grad_norm = clip.narrow(0, 0, 1);
                       p.max_grad_norm = 2.0;
                       updates.push_back(Tensor::empty(v[4 * k].shape(), v[4 * k].dtype(), d));
                       be.lamb_direction(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3], updates[k], p);
                     }
                     Tensor sq = Tensor::empty({2}, kFloat64, d), ratio = Tensor::empty({1}, kFloat64, d);
                     be.squared_norms({v[0], updates[0]}, sq);
                     be.lars_trust_ratios(sq, 0.0, 1.0, 0.0, ratio);
                     LambUpdateParams pa, pb;
                     pa.lr = pb.lr = 0.01;
                     pa.trust_ratios = ratio;
                     be.lamb_update(v[0], updates[0], pa);
                     be.lamb_update(v[4], updates[1], pb);
                     return V{clip.narrow(0, 0, 1), ratio, updates[0], updates[1], v[0], v[2], v[4], v[7]};
                   },
                   false});

  // ---- squared_norms: one call over several tensors (sizes 257, 1, 0, 231, 4099), float64 out ----
  const std::vector<InputSpec> norm_inputs{buffer("a", 257), InputSpec("b", {1}).no_grad(), InputSpec("c", {0}).no_grad(),
                                           InputSpec("d", {7, 33}).range(-3, 3).no_grad(), buffer("e", 4099)};
  cases.push_back({"squared_norms_five_tensors", {Kernel::SquaredNorms}, norm_inputs,
                   [](const V& v) {
                     Tensor out = Tensor::empty({static_cast<int64_t>(v.size())}, kFloat64, v[0].device());
                     v[0].device().backend().squared_norms(v, out);
                     return V{out};
                   },
                   false});
  // float32 and float64 tensors in one call (the float64 ones stay float64 in every run).
  cases.push_back({"squared_norms_mixed_dtypes", {Kernel::SquaredNorms},
                   {buffer("a", 33), buffer("b", 257).float64(), buffer("c", 1031), InputSpec("d", {2}).float64().no_grad()},
                   [](const V& v) {
                     Tensor out = Tensor::empty({static_cast<int64_t>(v.size())}, kFloat64, v[0].device());
                     v[0].device().backend().squared_norms(v, out);
                     return V{out};
                   },
                   false});

  // ---- amp_unscale_and_check, then amp_update_scale (GradScaler's step): finite gradients grow
  // the scale (growth_interval 1); an inf in the second tensor sets the verdict and backs it off ----
  auto amp_case = [&](const std::string& name, bool with_inf) {
    cases.push_back({name, {Kernel::AmpUnscaleAndCheck, Kernel::AmpUpdateScale},
                     {buffer("grad_a", 257, -1e4, 1e4), buffer("grad_b", 1031, -1e4, 1e4), buffer("grad_c", 3)},
                     [with_inf](const V& v) {
                       const Device d = v[0].device();
                       if (with_inf) Tensor(v[1]).narrow(0, 1000, 1).fill_(std::numeric_limits<double>::infinity());
                       Tensor found = scalar_tensor(0, kFloat32, d);
                       Tensor scale = scalar_tensor(3.0, kFloat32, d);
                       Tensor tracker = scalar_tensor(0, kInt32, d);
                       d.backend().amp_unscale_and_check(v, found, scale);
                       d.backend().amp_update_scale(scale, tracker, found, 2.0, 0.5, 1);
                       return V{v[0], v[2], found, scale, tracker.to(kFloat32)};
                     },
                     false});
  };
  amp_case("amp_unscale_finite_then_grow_scale", false);
  amp_case("amp_unscale_with_inf_then_back_off", true);

  // ---- Device-controlled updates (NOTE [ Device-resident optimiser step ]): SGD's first step
  // decided by a zero step count, AdamW's bias correction from a count of 4, LARS and both others
  // taking lr · lr_scale from the device; then a second round with found_inf set, which must
  // leave every buffer as it was; the counters advanced by count_steps after each round ----
  cases.push_back({"device_controlled_updates_then_skipped",
                   {Kernel::SgdUpdate, Kernel::AdamwUpdate, Kernel::LarsUpdate, Kernel::CountSteps},
                   {buffer("sgd_param", 257), buffer("sgd_grad", 257), buffer("adam_param", 1031),
                    buffer("adam_grad", 1031), buffer("exp_avg", 1031, -0.1, 0.1), buffer("exp_avg_sq", 1031, 1e-4, 1e-2),
                    buffer("lars_param", 33), buffer("lars_grad", 33), buffer("lars_buf", 33)},
                   [](const V& v) {
                     const Device d = v[0].device();
                     Backend& be = d.backend();
                     Tensor sgd_buf = Tensor::empty(v[0].shape(), v[0].dtype(), d).fill_(0.0);
                     Tensor sgd_count = scalar_tensor(0, kInt64, d), adam_count = scalar_tensor(4, kInt64, d);
                     Tensor lr = scalar_tensor(0.05, kFloat64, d), found = scalar_tensor(0, kFloat32, d);
                     V outputs;
                     for (int round = 0; round < 2; ++round) {
                       if (round == 1) found.fill_(1.0);
                       StepControl c{found, lr, 2.0, sgd_count};
                       be.sgd_update(v[0], v[1], sgd_buf, SgdParams{99.0, 0.9, 0.25, 1e-2, false, true, c});
                       AdamParams ap;
                       ap.lr = 99.0;  // replaced by the device lr
                       ap.weight_decay = 0.01;
                       ap.step = 99;  // replaced by the device count + 1
                       ap.control = StepControl{found, lr, 0.5, adam_count};
                       be.adamw_update(v[2], v[3], v[4], v[5], ap);
                       be.lars_update(v[6], v[7], v[8], LarsParams{99.0, 0.9, 5e-4, 0.37, false, {}, 0, {found, lr, 3.0, {}}});
                       be.count_steps({sgd_count, adam_count}, found, StepCounting::IfApplied);
                       for (const Tensor& t : {v[0], sgd_buf, v[2], v[4], v[5], v[6], v[8]}) outputs.push_back(t.clone());
                       outputs.push_back(sgd_count.to(kFloat64));
                       outputs.push_back(adam_count.to(kFloat64));
                     }
                     return outputs;
                   },
                   false});

  // ---- count_steps' four rules over two verdicts; lr_lookup inside and past its table ----
  cases.push_back({"count_steps_rules_and_lr_lookup", {Kernel::CountSteps, Kernel::LrLookup},
                   {InputSpec("table", {5}).float64().range(0.0, 1.0).no_grad()},
                   [](const V& v) {
                     const Device d = v[0].device();
                     Backend& be = d.backend();
                     V out;
                     for (float verdict : {0.0f, 1.0f}) {
                       Tensor found = scalar_tensor(verdict, kFloat32, d);
                       for (StepCounting how : {StepCounting::IfApplied, StepCounting::IfSkipped, StepCounting::SkipRun,
                                                StepCounting::Always}) {
                         Tensor c = scalar_tensor(3, kInt64, d);
                         be.count_steps({c}, found, how);
                         out.push_back(c.to(kFloat64));
                       }
                     }
                     const Tensor table = v[0].to(kFloat64).contiguous();
                     for (int64_t step : {0, 3, 4, 9}) {
                       Tensor clock = scalar_tensor(static_cast<double>(step), kInt64, d);
                       Tensor lr = scalar_tensor(-1, kFloat64, d);
                       be.lr_lookup(table, clock, lr);
                       out.push_back(lr);
                     }
                     return out;
                   },
                   false});

  // ---- clip_coefficient + scale_by (clip_grad_norm_on_device_): a norm above max_norm scales
  // the gradients; an inf leaves them and sets found_inf ----
  auto clip_case = [&](const std::string& name, bool with_inf) {
    cases.push_back({name, {Kernel::SquaredNorms, Kernel::ClipCoefficient, Kernel::ScaleBy},
                     {buffer("grad_a", 257, -3, 3), buffer("grad_b", 1031, -3, 3)},
                     [with_inf](const V& v) {
                       const Device d = v[0].device();
                       Backend& be = d.backend();
                       if (with_inf) Tensor(v[1]).narrow(0, 7, 1).fill_(std::numeric_limits<double>::infinity());
                       Tensor sq = Tensor::empty({2}, kFloat64, d);
                       be.squared_norms(v, sq);
                       Tensor found = scalar_tensor(0, kFloat32, d);
                       Tensor out = Tensor::empty({2}, kFloat64, d);
                       be.clip_coefficient(sq, 1.5, found, out);
                       be.scale_by(v, out.narrow(0, 1, 1));
                       return with_inf ? V{v[0], found, out.narrow(0, 1, 1)} : V{v[0], v[1], found, out};
                     },
                     false});
  };
  clip_case("clip_coefficient_scales_gradients", false);
  clip_case("clip_coefficient_with_inf_sets_found_inf", true);
  // A tensor listed three times is scaled three times, one after the other (on CUDA: in separate
  // launches, not racing in one), as a caller's list naming a tied weight's gradient twice would.
  cases.push_back({"scale_by_repeated_tensor", {Kernel::ScaleBy},
                   {buffer("grad_a", 1031, -3, 3), buffer("grad_b", 257, -3, 3)},
                   [](const V& v) {
                     const Device d = v[0].device();
                     d.backend().scale_by({v[0], v[1], v[0], v[0]}, scalar_tensor(0.75, kFloat64, d));
                     return V{v[0], v[1]};
                   },
                   false});
  return cases;
}

}  // namespace dp::testing::harness

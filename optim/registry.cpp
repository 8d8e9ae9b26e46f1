#include "optim/registry.h"

#include "optim/adamw.h"
#include "optim/lamb.h"
#include "optim/lars.h"
#include "optim/param_groups.h"
#include "optim/sgd.h"
#include "optim/shampoo.h"
#include "runtime/core/error.h"

namespace dp {

std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec,
                                          const std::vector<std::pair<std::string, Tensor>>& named_parameters,
                                          const OptimizerContext& context) {
  const std::string& name = spec.name;
  const double wd = spec.weight_decay.value_or(default_weight_decay(name));
  const double eps = spec.eps.value_or(default_eps(name));
  DP_CHECK(spec.lr > 0, "optimizer.lr: expected a positive number, got ", spec.lr);
  DP_CHECK(wd >= 0, "optimizer.weight_decay: expected a non-negative number, got ", wd);
  DP_CHECK(eps >= 0, "optimizer.eps: expected a non-negative number, got ", eps);
  DP_CHECK(spec.betas.size() == 2, "optimizer.betas: expected two numbers [beta1, beta2], got ", spec.betas.size());
  const double beta1 = spec.betas[0], beta2 = spec.betas[1];
  // Shampoo's β2 = 1 means plain sums of the factors; Adam-type moments need β2 < 1.
  const bool beta2_may_be_one = name == "shampoo";
  DP_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && (beta2 < 1 || (beta2_may_be_one && beta2 == 1)),
           "optimizer.betas: expected two numbers in [0, 1)", beta2_may_be_one ? " (β2 = 1 allowed)" : "", ", got [",
           beta1, ", ", beta2, "]");
  ExclusionRule rule;
  rule.one_dimensional = spec.exclude_1d.value_or(default_exclude_1d(name));
  rule.name_contains = spec.exclude_names;
  std::vector<ParamGroup> groups = make_param_groups(named_parameters, spec.lr, wd, rule);

  if (name == "sgd") {
    DP_CHECK(!spec.nesterov || (spec.momentum > 0 && spec.dampening == 0),
             "optimizer.nesterov: nesterov needs momentum > 0 and dampening 0");
    return std::make_unique<SGD>(std::move(groups), SgdOptions{.lr = spec.lr, .momentum = spec.momentum,
                                                               .dampening = spec.dampening,
                                                               .nesterov = spec.nesterov, .weight_decay = wd});
  }
  if (name == "adamw")
    return std::make_unique<AdamW>(std::move(groups), AdamWOptions{.lr = spec.lr, .beta1 = beta1,
                                                                   .beta2 = beta2, .eps = eps,
                                                                   .weight_decay = wd});
  if (name == "lars") {
    DP_CHECK(spec.eta > 0, "optimizer.eta: expected a positive number, got ", spec.eta);
    return std::make_unique<LARS>(std::move(groups),
                                  LarsOptions{.lr = spec.lr, .momentum = spec.momentum, .weight_decay = wd,
                                              .eta = spec.eta, .eps = eps,
                                              .lr_outside_momentum = spec.lr_outside_momentum});
  }
  if (name == "lamb") {
    DP_CHECK(spec.max_grad_norm >= 0, "optimizer.max_grad_norm: expected a non-negative number, got ",
             spec.max_grad_norm);
    return std::make_unique<LAMB>(std::move(groups), LambOptions{.lr = spec.lr, .beta1 = beta1,
                                                                 .beta2 = beta2, .eps = eps,
                                                                 .weight_decay = wd,
                                                                 .max_grad_norm = spec.max_grad_norm});
  }
  if (name == "shampoo") {
    DP_CHECK(beta2 > 0, "optimizer.betas: shampoo needs β2 in (0, 1], got ", beta2);
    DP_CHECK(spec.max_preconditioner_dim >= 1, "optimizer.max_preconditioner_dim: expected a positive integer, got ",
             spec.max_preconditioner_dim);
    DP_CHECK(spec.precondition_frequency >= 1, "optimizer.precondition_frequency: expected a positive integer, got ",
             spec.precondition_frequency);
    DP_CHECK(spec.start_preconditioning_step >= 1 || spec.start_preconditioning_step == -1,
             "optimizer.start_preconditioning_step: expected a positive integer or -1 (= precondition_frequency), got ",
             spec.start_preconditioning_step);
    DP_CHECK(spec.grafting_eps > 0, "optimizer.grafting_eps: expected a positive number, got ", spec.grafting_eps);
    DP_CHECK(spec.grafting_beta2 > 0 && spec.grafting_beta2 < 1,
             "optimizer.grafting_beta2: expected a number in (0, 1), got ", spec.grafting_beta2);
    ShampooOptions o;
    o.lr = spec.lr;
    o.beta1 = beta1;
    o.beta2 = beta2;
    o.epsilon = eps;
    o.weight_decay = wd;
    o.max_preconditioner_dim = spec.max_preconditioner_dim;
    o.precondition_frequency = spec.precondition_frequency;
    o.start_preconditioning_step = spec.start_preconditioning_step;
    try {
      o.grafting = parse_shampoo_grafting(spec.grafting);
    } catch (const Error&) {
      throw Error("optimizer.grafting: unknown grafting '" + spec.grafting + "' (known: none, sgd, adagrad, adam)");
    }
    o.grafting_epsilon = spec.grafting_eps;
    o.grafting_beta2 = spec.grafting_beta2;
    o.process_group = context.process_group;
    // The state on the parameters' device: on a GPU the backend kernels (NOTE [ Shampoo on a device ]).
    o.threads = context.threads;
    return std::make_unique<Shampoo>(std::move(groups), o);
  }
  throw_unknown_optimizer(name);
}

}  // namespace dp

// Whether ops record autograd history on this thread (like torch.no_grad / torch::NoGradGuard).
#pragma once

namespace dp {

class GradMode {
 public:
  static bool enabled();
  static void set_enabled(bool enabled);
};

// RAII: disables gradient recording in a scope (evaluation, optimiser updates).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace dp

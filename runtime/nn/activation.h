// Parameter-free activation modules (torch.nn.ReLU, GELU, Tanh, Sigmoid, SiLU).
#pragma once

#include "runtime/backend/backend.h"
#include "runtime/nn/module.h"

namespace dp::nn {

// Applies one pointwise op; the named subclasses below are what models use.
class Activation : public Module {
 public:
  explicit Activation(UnaryOp op) : op_(op) {}
  // x [*] → same shape
  Tensor forward(const Tensor& x) override;

 private:
  UnaryOp op_;
};

class ReLU : public Activation { public: ReLU() : Activation(UnaryOp::Relu) {} };
// Exact (erf) GELU, torch's default.
class GELU : public Activation { public: GELU() : Activation(UnaryOp::Gelu) {} };
class Tanh : public Activation { public: Tanh() : Activation(UnaryOp::Tanh) {} };
class Sigmoid : public Activation { public: Sigmoid() : Activation(UnaryOp::Sigmoid) {} };
class SiLU : public Activation { public: SiLU() : Activation(UnaryOp::Silu) {} };

}  // namespace dp::nn

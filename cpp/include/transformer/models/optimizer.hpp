// optimizer.hpp — Adam with the warm-up schedule of the paper, and gradient clipping.
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)        (torch.optim.Adam)
//   lr(step) = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5),  step counted from 1.
#pragma once

#include <vector>

#include "transformer/core/tensor.hpp"

namespace transformer {

double warmup_learning_rate(Index step, Index d_model, Index warmup = 4000, double scale = 1.0);

template <typename T>
class Adam {
 public:
  explicit Adam(ParameterList<T> params, double beta1 = 0.9, double beta2 = 0.98, double eps = 1e-9);

  // One update with learning rate lr; increments step_count() first (bias correction uses it).
  void step(double lr);
  // The fused form used by training: each gradient is multiplied by grad_scale (clipping) as it is
  // read, and set to zero after use when zero_grads — one pass over p, g, m, v instead of three.
  // With `check_who`, a read-only pass first makes sure no weight or moment would become NaN or
  // infinite; if one would, it throws NonFiniteError (naming check_who) and changes nothing.
  void step(double lr, double grad_scale, bool zero_grads, const char* check_who = nullptr);
  // step(lr, grad_scale, false, check_who) with the gradients read from one contiguous buffer
  // (the parameters' gradients one after another, in params() order) instead of each
  // parameter's own gradient storage, which is left alone.
  void step_flat(const T* grads, double lr, double grad_scale, const char* check_who = nullptr);
  // Global L2 norm of all gradients, without changing them.
  double grad_norm() const;
  // grad_norm() and, in the same pass over p, g, m, v, the check that step(lr, 1, ..., who) makes
  // first: when the norm is finite and an update with learning rate lr and grad_scale 1 would make
  // a weight or moment non-finite, throws that NonFiniteError (naming check_who), changing nothing.
  // Training without clipping calls this and then step(lr, 1, true) without its own check.
  double grad_norm_checked(double lr, const char* check_who) const;
  // Global L2 norm of all gradients; if max_norm > 0 and the norm exceeds it, every gradient is
  // scaled by max_norm / norm. Returns the norm before clipping.
  double clip_grad_norm(double max_norm);

  Index step_count() const { return t_; }
  void set_step_count(Index t) { t_ = t; }
  // Moment buffers as parameters named "<param>.m" / "<param>.v" (value = the moment; grad is
  // nullptr), for checkpoints.
  ParameterList<T> state();
  const ParameterList<T>& params() const { return params_; }
  void reset_state();  // zero moments and step count

  double beta1, beta2, eps;

 private:
  // the update's constants for learning rate lr at step t_ + 1 (see step)
  struct Coefficients {
    T b1, b2, one_minus_b1, one_minus_b2, step_size, inv_sqrt_bc2, e;
  };
  Coefficients coefficients(double lr) const;
  [[noreturn]] void refuse(const char* check_who, double lr) const;
  ParameterList<T> params_;
  std::vector<std::vector<T>> m_, v_;
  Index t_ = 0;
};

}  // namespace transformer

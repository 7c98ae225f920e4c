// optimizer.hpp — Adam with the warm-up schedule of the paper, and gradient clipping; the
// optimiser's configuration, and what both models train with (TrainableModel).
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)        (torch.optim.Adam)
//   lr(step) = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5),  step counted from 1.
#pragma once

#include <memory>
#include <vector>

#include "transformer/core/config.hpp"
#include "transformer/core/tensor.hpp"

namespace transformer {

// Adam, the learning-rate schedule, clipping and label smoothing. Each member is listed once
// more, with what it allows, in ConfigTable<OptimizerConfig> (optimizer.cpp), as for
// TransformerConfig.
struct OptimizerConfig {
  Index warmup = 4000;  // lr = lr_scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
  double lr_scale = 1.0;
  double fixed_lr = 0.0;  // > 0: use this constant learning rate instead of the schedule
  double beta1 = 0.9, beta2 = 0.98, eps = 1e-9;
  double clip_norm = 0.0;  // > 0: clip gradients to this global L2 norm
  double label_smoothing = 0.0;
  Index total_steps = 0;  // > warmup: after the warm-up, decay linearly from the peak to 0 at this step
                          // (with fixed_lr: >= 1, decay from fixed_lr at step 0 to 0 at this step)
};

template <>
struct ConfigTable<OptimizerConfig> {
  static const char* owner() { return "configure_optimizer"; }
  static const std::vector<ConfigField<OptimizerConfig>>& fields();
};

// Throw std::invalid_argument (ValueError) naming the first bad field and what is allowed: every
// field against its row, then total_steps after the warm-up.
void validate(const OptimizerConfig& o);

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
  // step and step_flat: the checks, the optional finiteness pass and the fused update, with
  // parameter q's gradient at grad_of(q) (T*, zeroed after use when zero_grads, or const T*);
  // total is the number of elements of all parameters
  template <typename GradOf>
  void update(double lr, double grad_scale, bool zero_grads, const char* check_who, Index total, GradOf grad_of);
  ParameterList<T> params_;
  std::vector<std::vector<T>> m_, v_;
  Index t_ = 0;
};

// What the Transformer and the language model train with, written once: the optimiser's
// configuration, Adam over the model's parameters() (created on first use), the learning-rate
// schedule at the model's width, and the update of a training step (global norm, clipping, one
// fused Adam pass). A model derives from it and lists its parameters.
template <typename T>
class TrainableModel {
 public:
  virtual ParameterList<T> parameters() = 0;

  const OptimizerConfig& optimizer_config() const { return opt_config_; }
  void set_optimizer_config(const OptimizerConfig& o);  // validate(o) first
  Adam<T>& optimizer();                                 // created on first use
  bool has_optimizer() const { return adam_ != nullptr; }
  // Updates taken so far (0 before the first), read without creating the optimiser.
  Index step_count() const { return adam_ ? adam_->step_count() : 0; }
  // Set the updates taken (to resume); 0 on a model without an optimiser leaves it without one
  // (its moments, as large as the weights, are made when training needs them).
  void set_step_count(Index t) {
    if (t != 0 || adam_) optimizer().set_step_count(t);
  }
  // The schedule at a 1-based step: warmup_learning_rate at the model's d_model; with total_steps,
  // from the peak at the warm-up's end straight down to 0 at total_steps; or the fixed rate
  // (decaying from step 0 to 0 at total_steps, when given).
  double learning_rate(Index step) const;
  double last_grad_norm() const { return last_grad_norm_; }

  // Rows per chunk of the training loss (train_step, compute_gradients), which runs the output
  // layer, the loss and the output layer's backward chunk by chunk (chunked_output_loss) so that
  // the (rows, V) logits are never stored whole: 0 (the default) sizes the chunks from the
  // vocabulary (tuning::kOutputChunkBytes), n > 0 takes n rows; kUnfusedOutputLoss computes the
  // whole logits matrix, then output_cross_entropy and the backward products over it: the
  // readable reference the chunked path is tested against. Results agree up to float rounding.
  static constexpr Index kUnfusedOutputLoss = -1;
  void set_output_chunk_rows(Index rows);
  Index output_chunk_rows() const { return output_chunk_rows_; }

 protected:
  // owner: what messages start with ("Transformer"); d_model: the width the schedule scales by
  TrainableModel(const char* owner, Index d_model) : owner_(owner), d_model_(d_model) {}
  ~TrainableModel() = default;
  TrainableModel(TrainableModel&&) noexcept = default;
  TrainableModel& operator=(TrainableModel&&) noexcept = default;

  // Refuses (std::invalid_argument naming who) an update when the step count is at its maximum.
  void check_step_count(const char* who) const;
  // One update from the gradients in parameters(): the global norm, clipping to clip_norm, and
  // one Adam step at learning_rate(step_count() + 1) that also zeroes the gradients. Refuses
  // (NonFiniteError naming who, nothing changed) a non-finite norm and an update that would make
  // a weight or an Adam moment non-finite.
  void update(const char* who);
  // The same from the contiguous gradients `grads` (parameters() order), each multiplied by
  // grad_scale, whose global norm (after grad_scale) is `norm`; the parameters' own gradient
  // storage is left alone.
  void update_flat(const T* grads, double grad_scale, double norm, const char* who);

 private:
  // the norm as the update's: a non-finite one is refused, changing nothing
  void set_norm(double norm, const char* who);
  const char* owner_;
  Index d_model_;
  OptimizerConfig opt_config_;
  std::unique_ptr<Adam<T>> adam_;
  double last_grad_norm_ = 0.0;
  Index output_chunk_rows_ = 0;  // see set_output_chunk_rows()
};

}  // namespace transformer

#include "transformer/models/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "transformer/core/checks.hpp"

namespace transformer {

const std::vector<ConfigField<OptimizerConfig>>& ConfigTable<OptimizerConfig>::fields() {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  using C = OptimizerConfig;
  static const std::vector<ConfigField<C>> table = complete_table<C>(
      {
          field<&C::warmup>("warmup", Limit::integer(1, 1000000000),
                            "warm-up steps of the schedule lr = lr_scale * d_model^-0.5 * min(step^-0.5, step * "
                            "warmup^-1.5)"),
          field<&C::lr_scale>("lr_scale", Limit::number(0.0, kInf, true), "multiplies the learning-rate schedule"),
          field<&C::fixed_lr>("fixed_lr", Limit::number(0.0),
                              "a constant learning rate instead of the schedule (0 = the schedule)"),
          field<&C::beta1>("beta1", Limit::number(0.0, 1.0, false, true), "Adam's first-moment decay (paper 0.9)"),
          field<&C::beta2>("beta2", Limit::number(0.0, 1.0, false, true), "Adam's second-moment decay (paper 0.98)"),
          field<&C::eps>("eps", Limit::number(0.0, kInf, true), "Adam's epsilon (paper 1e-9)", "adam_eps"),
          field<&C::clip_norm>("clip_norm", Limit::number(0.0), "clip gradients to this global norm (0 = off)"),
          field<&C::label_smoothing>("label_smoothing", Limit::number(0.0, 1.0, false, true),
                                     "label smoothing (paper 0.1)"),
          field<&C::total_steps>("total_steps", Limit::integer(0),
                                 "after the warm-up, decay the learning rate linearly to 0 at this step (0 = no "
                                 "decay; must be > warmup; with fixed_lr, >= 1 and the decay starts at step 0)",
                                 kNoOption),
      },
      "OptimizerConfig");
  return table;
}

void validate(const OptimizerConfig& o) {
  check_fields(o);
  // the decay starts after the warm-up; a fixed learning rate has none and decays from step 1
  if (o.fixed_lr == 0.0)
    TCPP_CHECK(o.total_steps == 0 || o.total_steps > o.warmup, ConfigTable<OptimizerConfig>::owner(),
               ": total_steps must be 0 (no decay) or > warmup ", o.warmup, ", got ", o.total_steps);
}

double warmup_learning_rate(Index step, Index d_model, Index warmup, double scale) {
  TCPP_CHECK(step >= 1, "warmup_learning_rate: step is counted from 1, got ", step);
  TCPP_CHECK(d_model > 0, "warmup_learning_rate: d_model must be positive, got ", d_model);
  TCPP_CHECK(warmup > 0, "warmup_learning_rate: warmup must be positive, got ", warmup);
  TCPP_CHECK(std::isfinite(scale) && scale >= 0.0, "warmup_learning_rate: scale must be a finite number >= 0, got ",
             scale);
  const double s = static_cast<double>(step);
  const double w = static_cast<double>(warmup);
  // rises linearly for `warmup` steps, then decays as step^-1/2; the two meet at step == warmup
  return scale / std::sqrt(static_cast<double>(d_model)) * std::min(1.0 / std::sqrt(s), s / (w * std::sqrt(w)));
}

template <typename T>
Adam<T>::Adam(ParameterList<T> params, double beta1_, double beta2_, double eps_)
    : beta1(beta1_), beta2(beta2_), eps(eps_), params_(std::move(params)) {
  TCPP_CHECK(beta1 >= 0.0 && beta1 < 1.0, "Adam: beta1 must be in [0, 1), got ", beta1);
  TCPP_CHECK(beta2 >= 0.0 && beta2 < 1.0, "Adam: beta2 must be in [0, 1), got ", beta2);
  // eps = 0 divides by zero where a gradient has always been 0 (as configure_optimizer says)
  TCPP_CHECK(eps > 0.0 && std::isfinite(eps), "Adam: eps must be a finite number > 0, got ", eps);
  m_.reserve(params_.size());
  v_.reserve(params_.size());
  for (const auto& p : params_) {
    TCPP_CHECK(p.value != nullptr && p.grad != nullptr, "Adam: parameter '", p.name,
               "' has no value or gradient storage");
    m_.emplace_back(static_cast<size_t>(p.size()), T(0));  // first moment, shaped like the parameter
    v_.emplace_back(static_cast<size_t>(p.size()), T(0));  // second moment
  }
}

template <typename T>
void Adam<T>::step(double lr) {
  step(lr, 1.0, false);
}

template <typename T>
typename Adam<T>::Coefficients Adam<T>::coefficients(double lr) const {
  const double t = static_cast<double>(t_ + 1);
  // torch.optim.Adam (single-tensor path): step_size = lr / bc1, denom = sqrt(v) / sqrt(bc2) + eps
  return {static_cast<T>(beta1),
          static_cast<T>(beta2),
          static_cast<T>(1.0 - beta1),
          static_cast<T>(1.0 - beta2),
          static_cast<T>(lr / (1.0 - std::pow(beta1, t))),
          static_cast<T>(1.0 / std::sqrt(1.0 - std::pow(beta2, t))),
          static_cast<T>(eps)};
}

// The update of one element (gradient already scaled), computed with the update's own arithmetic
// and reduced to a probe: x * 0 is 0 for a finite x and NaN otherwise, so the probe is 0 exactly
// when the new moment, second moment and weight are all finite. Branch-free, so loops that add
// probes up lane by lane vectorise; a NaN stays in its lane's sum.
template <typename T, typename C>
inline T update_probe(const C& k, T p, T gi, T m, T v) {
  const T mi = k.b1 * m + k.one_minus_b1 * gi;
  const T vi = k.b2 * v + k.one_minus_b2 * gi * gi;
  const T pi = p - k.step_size * mi / (std::sqrt(vi) * k.inv_sqrt_bc2 + k.e);
  return mi * T(0) + vi * T(0) + pi * T(0);
}

// Whether the update of one element stays finite (exact: the update's own arithmetic).
template <typename T, typename C>
inline bool update_is_finite(const C& k, T p, T gi, T m, T v) {
  return update_probe(k, p, gi, m, v) == T(0);
}

namespace {

// The lanes of the vectorised reductions below: each lane sums its own elements in order, so the
// compiler may vectorise the loop (a scalar double sum cannot be reordered); the lanes are added
// at the end. A float reordering of the sum of squares, nothing else.
constexpr Index kLanes = tuning::kReduceLanes;
// Elements per unit of work shared among the threads (a multiple of kLanes).
constexpr Index kChunk = tuning::kElementChunk;

// Sum of g[i]^2 over [0, n), in double, lane by lane.
template <typename T>
double sum_of_squares(const T* g, Index n) {
  double acc[kLanes] = {};
  Index i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (Index j = 0; j < kLanes; ++j) acc[j] += static_cast<double>(g[i + j]) * static_cast<double>(g[i + j]);
  for (; i < n; ++i) acc[0] += static_cast<double>(g[i]) * static_cast<double>(g[i]);
  double s = 0.0;
  for (Index j = 0; j < kLanes; ++j) s += acc[j];
  return s;
}

// sum_of_squares(g, n), and whether update_is_finite fails for any element, in one vectorised
// pass: each lane adds up its elements' update_probe, which stays 0 exactly when all are finite.
template <typename T, typename C>
double sum_of_squares_checked(const C& k, const T* p, const T* g, const T* m, const T* v, Index n, bool& bad) {
  double acc[kLanes] = {};
  T probe[kLanes] = {};
  Index i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (Index j = 0; j < kLanes; ++j) {
      const T gi = g[i + j];
      acc[j] += static_cast<double>(gi) * static_cast<double>(gi);
      probe[j] += update_probe(k, p[i + j], gi, m[i + j], v[i + j]);
    }
  for (; i < n; ++i) {
    acc[0] += static_cast<double>(g[i]) * static_cast<double>(g[i]);
    if (!update_is_finite(k, p[i], g[i], m[i], v[i])) bad = true;
  }
  double s = 0.0;
  for (Index j = 0; j < kLanes; ++j) {
    s += acc[j];
    if (!(probe[j] == T(0))) bad = true;
  }
  return s;
}

// Whether update_is_finite fails for any element of [0, n), the gradient scaled by gs: the probe
// of sum_of_squares_checked without the sum.
template <typename T, typename C>
bool any_update_nonfinite(const C& k, const T* p, const T* g, const T* m, const T* v, Index n, T gs) {
  T probe[kLanes] = {};
  bool bad = false;
  Index i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (Index j = 0; j < kLanes; ++j) probe[j] += update_probe(k, p[i + j], g[i + j] * gs, m[i + j], v[i + j]);
  for (; i < n; ++i)
    if (!update_is_finite(k, p[i], g[i] * gs, m[i], v[i])) bad = true;
  for (Index j = 0; j < kLanes; ++j)
    if (!(probe[j] == T(0))) bad = true;
  return bad;
}

}  // namespace

template <typename T>
void Adam<T>::refuse(const char* check_who, double lr) const {
  throw NonFiniteError(concat(check_who, ": the update (learning rate ", lr,
                              ") would make weights or Adam "
                              "moments non-finite: training has diverged; no update was applied, the "
                              "weights are those of the last good step"));
}

template <typename T>
template <typename GradOf>
void Adam<T>::update(double lr, double grad_scale, bool zero_grads, const char* check_who, Index total,
                     GradOf grad_of) {
  TCPP_CHECK(std::isfinite(lr) && lr >= 0.0, "Adam: learning rate must be a finite number >= 0, got ", lr);
  TCPP_CHECK(t_ < std::numeric_limits<Index>::max(), "Adam: the step count ", t_,
             " is at its maximum (2**63 - 1); no update was applied");
  TCPP_CHECK(std::isfinite(grad_scale), "Adam: gradient scale must be finite, got ", grad_scale);
  // T* (step: the parameter's own gradient, which may be zeroed) or const T* (step_flat)
  using GradPtr = decltype(grad_of(size_t{0}));
  const Coefficients k = coefficients(lr);
  const T b1 = k.b1, b2 = k.b2, one_minus_b1 = k.one_minus_b1, one_minus_b2 = k.one_minus_b2;
  const T step_size = k.step_size, inv_sqrt_bc2 = k.inv_sqrt_bc2, e = k.e;
  const T gs = static_cast<T>(grad_scale);
  if (check_who != nullptr) {
    // the update below, computed without writing anything: is every result finite?
    int bad = 0;
#pragma omp parallel if (total >= kParallelElements) reduction(| : bad)
    for (size_t q = 0; q < params_.size(); ++q) {
      const T* p = params_[q].value;
      const T* g = grad_of(q);
      const T* m = m_[q].data();
      const T* v = v_[q].data();
      const Index n = params_[q].size();
#pragma omp for schedule(static) nowait
      for (Index c = 0; c < n; c += kChunk)
        bad |= any_update_nonfinite(k, p + c, g + c, m + c, v + c, std::min(kChunk, n - c), gs) ? 1 : 0;
    }
    if (bad) refuse(check_who, lr);
  }
  ++t_;
  // One region for all parameters; each parameter's elements are shared out among the threads
  // and `nowait` lets a thread move on to the next parameter at once (parameters are independent).
#pragma omp parallel if (total >= kParallelElements)
  for (size_t q = 0; q < params_.size(); ++q) {
    T* __restrict p = params_[q].value;
    GradPtr __restrict g = grad_of(q);
    T* __restrict m = m_[q].data();
    T* __restrict v = v_[q].data();
    const Index n = params_[q].size();
#pragma omp for schedule(static) nowait
    for (Index i = 0; i < n; ++i) {
      const T gi = g[i] * gs;
      m[i] = b1 * m[i] + one_minus_b1 * gi;
      v[i] = b2 * v[i] + one_minus_b2 * gi * gi;
      p[i] -= step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + e);
      if constexpr (!std::is_const_v<std::remove_pointer_t<GradPtr>>)
        if (zero_grads) g[i] = T(0);
    }
  }
}

template <typename T>
void Adam<T>::step(double lr, double grad_scale, bool zero_grads, const char* check_who) {
  Index total = 0;
  for (const auto& p : params_) total += p.size();
  update(lr, grad_scale, zero_grads, check_who, total, [this](size_t q) { return params_[q].grad; });
}

template <typename T>
void Adam<T>::step_flat(const T* grads, double lr, double grad_scale, const char* check_who) {
  TCPP_CHECK(grads != nullptr, "Adam.step_flat: no gradient buffer");
  std::vector<Index> offset(params_.size() + 1, 0);  // where each parameter's gradient starts in grads
  for (size_t k = 0; k < params_.size(); ++k) offset[k + 1] = offset[k] + params_[k].size();
  update(lr, grad_scale, false, check_who, offset.back(),
         [grads, &offset](size_t q) -> const T* { return grads + offset[q]; });
}

template <typename T>
double Adam<T>::grad_norm() const {
  Index total = 0;
  for (const auto& p : params_) total += p.size();
  double sumsq = 0.0;
  // one region for all parameters, each parameter's chunks shared among the threads
#pragma omp parallel if (total >= kParallelElements) reduction(+ : sumsq)
  for (size_t k = 0; k < params_.size(); ++k) {
    const T* g = params_[k].grad;
    const Index n = params_[k].size();
#pragma omp for schedule(static) nowait
    for (Index c = 0; c < n; c += kChunk) sumsq += sum_of_squares(g + c, std::min(kChunk, n - c));
  }
  return std::sqrt(sumsq);
}

template <typename T>
double Adam<T>::grad_norm_checked(double lr, const char* check_who) const {
  TCPP_CHECK(std::isfinite(lr) && lr >= 0.0, "Adam: learning rate must be a finite number >= 0, got ", lr);
  const Coefficients k = coefficients(lr);
  Index total = 0;
  for (const auto& p : params_) total += p.size();
  double sumsq = 0.0;
  int bad = 0;
  // grad_norm()'s loop (same partition, same sums) with step()'s check beside it
#pragma omp parallel if (total >= kParallelElements) reduction(+ : sumsq) reduction(| : bad)
  for (size_t q = 0; q < params_.size(); ++q) {
    const T* p = params_[q].value;
    const T* g = params_[q].grad;
    const T* m = m_[q].data();
    const T* v = v_[q].data();
    const Index n = params_[q].size();
#pragma omp for schedule(static) nowait
    for (Index c = 0; c < n; c += kChunk) {
      bool chunk_bad = false;
      sumsq += sum_of_squares_checked(k, p + c, g + c, m + c, v + c, std::min(kChunk, n - c), chunk_bad);
      bad |= chunk_bad ? 1 : 0;
    }
  }
  const double norm = std::sqrt(sumsq);
  if (bad && std::isfinite(norm)) refuse(check_who, lr);
  return norm;
}

template <typename T>
double Adam<T>::clip_grad_norm(double max_norm) {
  double sumsq = 0.0;
  for (const auto& p : params_) {
    const T* g = p.grad;
    const Index n = p.size();
#pragma omp parallel for schedule(static) reduction(+ : sumsq) if (n >= kParallelElements)
    for (Index i = 0; i < n; ++i) sumsq += static_cast<double>(g[i]) * static_cast<double>(g[i]);
  }
  const double norm = std::sqrt(sumsq);
  // A non-finite norm is returned unchanged for the caller to act on; scaling by 0 or NaN would
  // only hide where the problem came from.
  if (max_norm > 0.0 && std::isfinite(norm) && norm > max_norm) {
    const T factor = static_cast<T>(max_norm / norm);
    for (const auto& p : params_) {
      T* g = p.grad;
      const Index n = p.size();
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
      for (Index i = 0; i < n; ++i) g[i] *= factor;
    }
  }
  return norm;
}

template <typename T>
ParameterList<T> Adam<T>::state() {
  ParameterList<T> out;
  out.reserve(2 * params_.size());
  for (size_t k = 0; k < params_.size(); ++k) {
    out.push_back({params_[k].name + ".m", m_[k].data(), nullptr, params_[k].shape});
    out.push_back({params_[k].name + ".v", v_[k].data(), nullptr, params_[k].shape});
  }
  return out;
}

template <typename T>
void Adam<T>::reset_state() {
  for (auto& m : m_) std::fill(m.begin(), m.end(), T(0));
  for (auto& v : v_) std::fill(v.begin(), v.end(), T(0));
  t_ = 0;
}

template class Adam<float>;
template class Adam<double>;

// ---------------------------------------------------------------- TrainableModel

template <typename T>
void TrainableModel<T>::set_optimizer_config(const OptimizerConfig& o) {
  validate(o);
  opt_config_ = o;
}

template <typename T>
Adam<T>& TrainableModel<T>::optimizer() {
  if (!adam_) {
    double n = 0;
    for (const auto& p : parameters()) n += static_cast<double>(p.size());
    check_memory(owner_, "the Adam moments", 2 * n * sizeof(T));
    adam_ = std::make_unique<Adam<T>>(parameters(), opt_config_.beta1, opt_config_.beta2, opt_config_.eps);
  }
  adam_->beta1 = opt_config_.beta1;
  adam_->beta2 = opt_config_.beta2;
  adam_->eps = opt_config_.eps;
  return *adam_;
}

template <typename T>
void TrainableModel<T>::set_output_chunk_rows(Index rows) {
  TCPP_CHECK(rows >= kUnfusedOutputLoss, owner_, ".output_chunk_rows: expected 0 (sized from the vocabulary), ",
             "a positive number of rows or ", kUnfusedOutputLoss, " (the unfused reference), got ", rows);
  output_chunk_rows_ = rows;
}

template <typename T>
double TrainableModel<T>::learning_rate(Index step) const {
  const OptimizerConfig& o = opt_config_;
  if (o.fixed_lr > 0.0) {
    if (o.total_steps <= 0) return o.fixed_lr;
    // fitted to the run's length: from fixed_lr straight down to 0 at `total_steps`
    const double left = static_cast<double>(o.total_steps - step) / static_cast<double>(o.total_steps);
    return o.fixed_lr * std::max(0.0, std::min(1.0, left));
  }
  if (o.total_steps > 0 && step > o.warmup) {
    // fitted to the run's length: from the peak at `warmup` straight down to 0 at `total_steps`
    const double peak = warmup_learning_rate(o.warmup, d_model_, o.warmup, o.lr_scale);
    const double left = static_cast<double>(o.total_steps - step) / static_cast<double>(o.total_steps - o.warmup);
    return peak * std::max(0.0, left);
  }
  return warmup_learning_rate(step, d_model_, o.warmup, o.lr_scale);
}

template <typename T>
void TrainableModel<T>::check_step_count(const char* who) const {
  TCPP_CHECK(step_count() < std::numeric_limits<Index>::max(), who, ": the step count ", step_count(),
             " is at its maximum (2**63 - 1); no update was applied");
}

template <typename T>
void TrainableModel<T>::set_norm(double norm, const char* who) {
  last_grad_norm_ = norm;
  if (!std::isfinite(norm))
    throw NonFiniteError(concat(who, ": non-finite gradient norm: training has diverged; no update was applied, ",
                                "the weights are those of the last good step"));
}

template <typename T>
void TrainableModel<T>::update(const char* who) {
  Adam<T>& adam = optimizer();
  const double lr = learning_rate(adam.step_count() + 1);
  const double clip = opt_config_.clip_norm;
  // without clipping the update's scale is 1 whatever the norm, so the pass that computes the
  // norm also checks that the update stays finite (refusing, changing nothing, if a weight or
  // moment would not); with clipping the scale needs the norm first and Adam checks in its pass
  set_norm(clip > 0.0 ? adam.grad_norm() : adam.grad_norm_checked(lr, who), who);
  // clipping to a global norm is a factor applied inside the fused Adam pass, which also zeroes
  // the gradients for the next step (so no separate zero_grad pass is needed)
  const double scale = (clip > 0.0 && last_grad_norm_ > clip) ? clip / last_grad_norm_ : 1.0;
  adam.step(lr, scale, true, clip > 0.0 ? who : nullptr);
}

template <typename T>
void TrainableModel<T>::update_flat(const T* grads, double grad_scale, double norm, const char* who) {
  Adam<T>& adam = optimizer();
  set_norm(norm, who);
  const double clip = opt_config_.clip_norm;
  const double scale = (clip > 0.0 && last_grad_norm_ > clip) ? clip / last_grad_norm_ : 1.0;
  adam.step_flat(grads, learning_rate(adam.step_count() + 1), grad_scale * scale, who);
}

template class TrainableModel<float>;
template class TrainableModel<double>;

}  // namespace transformer

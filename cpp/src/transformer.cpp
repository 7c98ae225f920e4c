#include "transformer/transformer.hpp"

#include <algorithm>
#include <cmath>

#include "transformer/random.hpp"

namespace transformer {

template <typename T>
static ConstMatrixMap<T> cmap(const Matrix<T>& m) {
  return ConstMatrixMap<T>(m.data(), m.rows(), m.cols());
}

template <typename T>
Transformer<T>::Transformer(const TransformerConfig& c) : config_(c) {
  TCPP_CHECK(c.src_vocab_size > 1 && c.tgt_vocab_size > 1, "Transformer: src_vocab_size and tgt_vocab_size ",
             "must be at least 2 (padding plus one token), got ", c.src_vocab_size, " and ", c.tgt_vocab_size);
  TCPP_CHECK(c.d_model > 0 && c.n_layers > 0 && c.n_heads > 0 && c.d_ff > 0 && c.max_length > 0,
             "Transformer: d_model, n_layers, n_heads, d_ff and max_length must be positive");
  TCPP_CHECK(c.d_model % c.n_heads == 0, "Transformer: d_model ", c.d_model, " is not divisible by n_heads ",
             c.n_heads);
  TCPP_CHECK(c.dropout >= 0.0 && c.dropout < 1.0, "Transformer: dropout must be in [0, 1), got ", c.dropout);
  encoder_ = std::make_unique<Encoder<T>>(c.src_vocab_size, c.d_model, c.n_layers, c.n_heads, c.d_ff, c.dropout,
                                          c.max_length, c.layout, c.pre_norm, c.layer_norm_eps,
                                          splitmix64(c.seed + 1));
  decoder_ = std::make_unique<Decoder<T>>(c.tgt_vocab_size, c.d_model, c.n_layers, c.n_heads, c.d_ff, c.dropout,
                                          c.max_length, c.layout, c.pre_norm, c.layer_norm_eps,
                                          splitmix64(c.seed + 2));
  out_bias_ = RowVector<T>::Zero(c.tgt_vocab_size);
  dout_bias_ = RowVector<T>::Zero(c.tgt_vocab_size);
  if (!c.share_embeddings) {
    // Glorot uniform, as for any Linear
    out_weight_.resize(c.tgt_vocab_size, c.d_model);
    dout_weight_ = Matrix<T>::Zero(c.tgt_vocab_size, c.d_model);
    Rng rng(splitmix64(c.seed + 3));
    const double a = std::sqrt(6.0 / static_cast<double>(c.tgt_vocab_size + c.d_model));
    for (Index i = 0; i < out_weight_.size(); ++i) out_weight_.data()[i] = static_cast<T>(rng.uniform(-a, a));
  }
}

template <typename T>
T* Transformer<T>::output_weight() {
  return config_.share_embeddings ? decoder_->embedding_.embedding().weight_.data() : out_weight_.data();
}
template <typename T>
T* Transformer<T>::output_weight_grad() {
  return config_.share_embeddings ? decoder_->embedding_.embedding().dweight_.data() : dout_weight_.data();
}

template <typename T>
void Transformer<T>::check_batch(ConstTokenMap src, ConstTokenMap tgt, const char* who) const {
  TCPP_CHECK(src.rows() == tgt.rows(), "Transformer.", who, ": src has batch size ", src.rows(),
             " but tgt_in has ", tgt.rows(), "; they must match");
  TCPP_CHECK(src.rows() > 0 && src.cols() > 0 && tgt.cols() > 0, "Transformer.", who,
             ": empty batch (src shape (", src.rows(), ", ", src.cols(), "), tgt_in shape (", tgt.rows(), ", ",
             tgt.cols(), "))");
}

template <typename T>
const Matrix<T>& Transformer<T>::forward(ConstTokenMap src, ConstTokenMap tgt_in, bool training) {
  check_batch(src, tgt_in, "forward");
  run(src, tgt_in, nullptr, training, false);
  B_ = tgt_in.rows();  // backward() may follow
  T_ = tgt_in.cols();
  return logits_;
}

template <typename T>
const Matrix<T>& Transformer<T>::run(ConstTokenMap src, ConstTokenMap tgt_in, const std::int64_t* tgt_out,
                                     bool training, bool pack) {
  // Until a forward completes there is no valid state for backward(): the encoder may accept a
  // new batch and the decoder then reject its target ids, leaving the two out of step.
  B_ = -1;
  const Matrix<T>& memory = encoder_->forward(src, training, pack);  // (rows_src, d)
  const Matrix<T>& y = decoder_->forward(tgt_in, cmap(memory), encoder_->layout(), encoder_->key_padding().data(),
                                         training, tgt_out, pack);  // (rows_tgt, d)
  const Index V = config_.tgt_vocab_size, d = config_.d_model;
  ConstMatrixMap<T> W(output_weight(), V, d);
  // logits = y W^T + b                                                    (rows_tgt, V)
  logits_.resize(y.rows(), V);
  logits_.noalias() = y * W.transpose();
  add_row_vector(logits_.data(), logits_.rows(), V, out_bias_.data());
  return logits_;
}

template <typename T>
void Transformer<T>::backward(ConstMatrixMap<T> dlogits) {
  if (B_ < 0) throw std::runtime_error("Transformer: backward() called before forward()");
  const Index V = config_.tgt_vocab_size;
  TCPP_CHECK(dlogits.rows() == B_ * T_ && dlogits.cols() == V, "Transformer.backward: dlogits has shape (",
             dlogits.rows(), ", ", dlogits.cols(), "), expected (", B_ * T_, ", ", V, ")");
  backward_rows(dlogits);
}

template <typename T>
void Transformer<T>::backward_rows(ConstMatrixMap<T> dlogits) {
  grads_zero_ = false;
  const Index V = config_.tgt_vocab_size, d = config_.d_model;
  const Matrix<T>& y = decoder_->output();
  ConstMatrixMap<T> W(output_weight(), V, d);
  MatrixMap<T> dW(output_weight_grad(), V, d);
  // logits = y W^T + b, so dW += dlogits^T y, db += column sums, dy = dlogits W
  dW.noalias() += dlogits.transpose() * y;
  add_column_sums(dlogits.data(), dlogits.rows(), V, dout_bias_.data());
  dy_.resize(y.rows(), d);
  dy_.noalias() = dlogits * W;
  decoder_->backward(cmap(dy_));
  encoder_->backward(cmap(decoder_->dmemory()));
}

template <typename T>
const std::int64_t* Transformer<T>::row_targets(ConstTokenMap tgt_out) {
  const RowLayout& l = decoder_->layout();
  if (!l.packed) return tgt_out.data();
  targets_.resize(l.ids.size());
  for (size_t r = 0; r < l.ids.size(); ++r) targets_[r] = tgt_out.data()[l.ids[r]];
  return targets_.data();
}

template <typename T>
Adam<T>& Transformer<T>::optimizer() {
  if (!adam_)
    adam_ = std::make_unique<Adam<T>>(parameters(), opt_config_.beta1, opt_config_.beta2, opt_config_.eps);
  adam_->beta1 = opt_config_.beta1;
  adam_->beta2 = opt_config_.beta2;
  adam_->eps = opt_config_.eps;
  return *adam_;
}

template <typename T>
double Transformer<T>::learning_rate(Index step) const {
  if (opt_config_.fixed_lr > 0.0) return opt_config_.fixed_lr;
  const OptimizerConfig& o = opt_config_;
  if (o.total_steps > 0 && step > o.warmup) {
    // fitted to the run's length: from the peak at `warmup` straight down to 0 at `total_steps`
    const double peak = warmup_learning_rate(o.warmup, config_.d_model, o.warmup, o.lr_scale);
    const double left = static_cast<double>(o.total_steps - step) / static_cast<double>(o.total_steps - o.warmup);
    return peak * std::max(0.0, left);
  }
  return warmup_learning_rate(step, config_.d_model, o.warmup, o.lr_scale);
}

template <typename T>
LossStats Transformer<T>::train_step(ConstTokenMap src, ConstTokenMap tgt_in, ConstTokenMap tgt_out) {
  TCPP_CHECK(tgt_out.rows() == tgt_in.rows() && tgt_out.cols() == tgt_in.cols(),
             "Transformer.train_step: tgt_out has shape (", tgt_out.rows(), ", ", tgt_out.cols(),
             ") but tgt_in has (", tgt_in.rows(), ", ", tgt_in.cols(), "); they must match");
  Adam<T>& adam = optimizer();
  if (!grads_zero_) zero_grad();
  grads_zero_ = false;
  // only the rows that matter to the loss are computed ("packed": padding removed)
  check_batch(src, tgt_in, "train_step");
  run(src, tgt_in, tgt_out.data(), true, true);
  // the gradient of the loss replaces the logits in place: one (rows, V) buffer, not two
  LossStats stats =
      masked_cross_entropy<T>(cmap(logits_), row_targets(tgt_out), &logits_, opt_config_.label_smoothing);
  backward_rows(cmap(logits_));
  last_grad_norm_ = adam.grad_norm();
  if (!std::isfinite(last_grad_norm_))
    throw std::runtime_error("Transformer.train_step: the gradient norm is not finite; no update was applied");
  // clipping to a global norm is a factor applied inside the fused Adam pass, which also zeroes
  // the gradients for the next step (so no separate zero_grad pass is needed)
  const double clip = opt_config_.clip_norm;
  const double scale = (clip > 0.0 && last_grad_norm_ > clip) ? clip / last_grad_norm_ : 1.0;
  adam.step(learning_rate(adam.step_count() + 1), scale, true);
  grads_zero_ = true;
  return stats;
}

template <typename T>
LossStats Transformer<T>::evaluate(ConstTokenMap src, ConstTokenMap tgt_in, ConstTokenMap tgt_out) {
  TCPP_CHECK(tgt_out.rows() == tgt_in.rows() && tgt_out.cols() == tgt_in.cols(),
             "Transformer.evaluate: tgt_out has shape (", tgt_out.rows(), ", ", tgt_out.cols(),
             ") but tgt_in has (", tgt_in.rows(), ", ", tgt_in.cols(), "); they must match");
  check_batch(src, tgt_in, "evaluate");
  const Matrix<T>& logits = run(src, tgt_in, tgt_out.data(), false, true);
  return masked_cross_entropy<T>(cmap(logits), row_targets(tgt_out), nullptr, opt_config_.label_smoothing);
}

template <typename T>
ParameterList<T> Transformer<T>::parameters() {
  ParameterList<T> ps;
  append_parameters(ps, encoder_->parameters(), "encoder");
  append_parameters(ps, decoder_->parameters(), "decoder");
  if (!config_.share_embeddings)
    ps.push_back({"output.weight", out_weight_.data(), dout_weight_.data(),
                  {config_.tgt_vocab_size, config_.d_model}});
  ps.push_back({"output.bias", out_bias_.data(), dout_bias_.data(), {config_.tgt_vocab_size}});
  return ps;
}

template <typename T>
void Transformer<T>::zero_grad() {
  encoder_->zero_grad();
  decoder_->zero_grad();
  dout_weight_.setZero();
  dout_bias_.setZero();
}

template <typename T>
std::uint64_t Transformer<T>::dropout_calls() const {
  return const_cast<Encoder<T>&>(*encoder_).dropouts().front()->calls();
}

template <typename T>
void Transformer<T>::set_dropout_calls(std::uint64_t calls) {
  for (auto* d : encoder_->dropouts()) d->set_calls(calls);
  for (auto* d : decoder_->dropouts()) d->set_calls(calls);
}

template <typename T>
void Transformer<T>::set_dropout_seed(std::uint64_t seed) {
  for (auto* d : encoder_->dropouts()) d->set_seed(seed);
  for (auto* d : decoder_->dropouts()) d->set_seed(seed);
}

template class Transformer<float>;
template class Transformer<double>;

}  // namespace transformer

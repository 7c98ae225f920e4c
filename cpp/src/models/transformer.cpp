#include "transformer/models/transformer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
#include <stdexcept>

#include "transformer/core/checks.hpp"
#include "transformer/core/random.hpp"

namespace transformer {

namespace {
constexpr std::uint64_t kMaxSeed = std::numeric_limits<std::uint64_t>::max();
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

const std::vector<ConfigField<TransformerConfig>>& ConfigTable<TransformerConfig>::fields() {
  using C = TransformerConfig;
  static const std::vector<ConfigField<C>> table = complete_table<C>(
      {
          field<&C::src_vocab_size>("src_vocab_size", Limit::integer(2),
                                    "source vocabulary size (the padding id included)", kNoOption),
          field<&C::tgt_vocab_size>("tgt_vocab_size", Limit::integer(2),
                                    "target vocabulary size (the padding id included)", kNoOption),
          // the upper bounds of the sizes: beyond them no model fits in a computer's memory (the
          // memory a model of the requested sizes needs is checked as well)
          field<&C::d_model>("d_model", Limit::integer(1, 16384), "model width"),
          field<&C::n_layers>("n_layers", Limit::integer(1, 256), "encoder layers and decoder layers"),
          field<&C::n_encoder_layers>("n_encoder_layers", Limit::integer(0, 256),
                                      "encoder layers when they differ from n_layers (0: n_layers)", kNoOption),
          field<&C::n_decoder_layers>("n_decoder_layers", Limit::integer(0, 256),
                                      "decoder layers when they differ from n_layers (0: n_layers)", kNoOption),
          field<&C::n_heads>("n_heads", Limit::integer(1, 1024), "attention heads (d_model must be divisible by them)"),
          field<&C::d_ff>("d_ff", Limit::integer(1, 262144), "inner width of the feed-forward networks"),
          field<&C::dropout>("dropout", Limit::number(0.0, 1.0, false, true),
                             "dropout rate on the embeddings, the sub-layer outputs and inside the feed-forward "
                             "networks"),
          field<&C::max_length>("max_length", Limit::integer(1),
                                "positional-table rows built up front; a cache: longer sequences extend it", kNoOption),
          field<&C::layout>("layout", Limit::one_of({"interleaved", "concatenated"}),
                            "positional-encoding layout: interleaved (the paper's: sine and cosine of each "
                            "frequency side by side) or concatenated (the TensorFlow tutorial's: all sines, "
                            "then all cosines)"),
          field<&C::pre_norm>("pre_norm", Limit::flag(),
                              "layer normalisation before each sub-layer (and after each stack) instead of "
                              "after it (the paper's post-norm)"),
          field<&C::share_embeddings>("share_embeddings", Limit::flag(),
                                      "tie the decoder embedding to the output layer (fewer weights)"),
          field<&C::share_source_embedding>("share_source_embedding", Limit::flag(),
                                            "one embedding for the source and the target (a joint vocabulary: "
                                            "src_vocab_size must equal tgt_vocab_size)",
                                            kNoOption),
          field<&C::activation>("activation", Limit::one_of({"relu", "gelu", "swish"}),
                                "activation of the feed-forward networks: relu, gelu (the exact erf form) or swish "
                                "(x sigmoid(x), also called SiLU)",
                                kNoOption),
          field<&C::scale_embedding>("scale_embedding", Limit::flag(),
                                     "multiply the token embeddings by sqrt(d_model) before adding the positions",
                                     kNoOption),
          field<&C::pad_id>("pad_id", Limit::integer(0), "the padding token id (masked, no loss)", kNoOption),
          field<&C::start_id>("start_id", Limit::integer(0), "the decoder's first input token id", kNoOption),
          field<&C::end_id>("end_id", Limit::integer(0), "the token id that ends a translation", kNoOption),
          field<&C::layer_norm_eps>("layer_norm_eps", Limit::number(0.0, kInf, true),
                                    "epsilon inside the layer normalisation's square root"),
          field<&C::seed>("seed", Limit::integer(0, kMaxSeed), "seed of the initial weights and the dropout masks",
                          kNoOption),
          field<&C::encoder_attention>(
              "encoder_attention", Limit::one_of(attention_kind_names(fits_encoder_self_attention)),
              "the encoder's self-attention: softmax (the paper's), or linear (Katharopoulos et al. 2020: linear in "
              "the source length)"),
          field<&C::decoder_attention>(
              "decoder_attention", Limit::one_of(attention_kind_names(fits_decoder_self_attention)),
              "the decoder's masked self-attention: softmax (the paper's), or linear (Katharopoulos et al. 2020: "
              "linear in the target length, decoding with a fixed-size state per head instead of a key/value "
              "cache); the cross-attention stays softmax"),
          field<&C::precision>("precision", Limit::one_of({"float32", "bf16"}),
                               "matrix products of the dense layers (attention projections, feed-forward, output "
                               "layer), forward and backward: float32, or bf16 mixed precision (bfloat16 inputs "
                               "summed in float32 by AVX512_BF16 instructions; weights, gradients, optimiser, "
                               "normalisation, softmax and loss stay float32; needs a float32 model on a CPU with "
                               "AVX512_BF16). Decoding has a precision of its own (the compute type: float32, int8 "
                               "or bf16)"),
      },
      "TransformerConfig");
  return table;
}

void check_config(const TransformerConfig& c) {
  check_fields(c);
  TCPP_CHECK(c.d_model % c.n_heads == 0, "Transformer: d_model ", c.d_model, " is not divisible by n_heads ",
             c.n_heads);
  TCPP_CHECK(c.layout != PositionalLayout::Concatenated || c.d_model % 2 == 0,
             "Transformer: the concatenated layout needs an even d_model, got ", c.d_model);
  TCPP_CHECK(!c.share_source_embedding || c.src_vocab_size == c.tgt_vocab_size,
             "Transformer: share_source_embedding needs src_vocab_size equal to tgt_vocab_size, got ", c.src_vocab_size,
             " and ", c.tgt_vocab_size);
  const std::int64_t V = std::min(c.src_vocab_size, c.tgt_vocab_size);
  TCPP_CHECK(c.pad_id < V, "Transformer: pad_id must be below both vocabulary sizes (", V, "), got ", c.pad_id);
  // start_id and end_id are checked against the vocabulary by the search that takes them
  TCPP_CHECK(c.end_id != c.pad_id, "Transformer: end_id must differ from pad_id, both are ", c.pad_id);
}

template <typename T>
void validate(const TransformerConfig& c) {
  check_config(c);
  check_precision<T>(c.precision, "Transformer");
  // every weight (value and gradient) and the two positional tables, before any is allocated
  const double d = static_cast<double>(c.d_model), Le = static_cast<double>(encoder_layers(c));
  const double Ld = static_cast<double>(decoder_layers(c));
  const double V = static_cast<double>(c.tgt_vocab_size), dff = static_cast<double>(c.d_ff);
  const double params = (c.share_source_embedding ? 0.0 : static_cast<double>(c.src_vocab_size) * d) +
                        Le * encoder_layer_parameters(d, dff) + V * d + Ld * decoder_layer_parameters(d, dff) +
                        (c.share_embeddings ? 0.0 : V * d) + V + (c.pre_norm ? 4 * d : 0.0);
  checked_size<T>(
      "Transformer",
      concat("a model with src_vocab_size ", c.src_vocab_size, ", tgt_vocab_size ", c.tgt_vocab_size, ", d_model ",
             c.d_model, ", n_layers ", c.n_layers, ", d_ff ", c.d_ff, " and max_length ", c.max_length),
      params, 2.0 * static_cast<double>(c.max_length) * d, 0);
}

template <typename T>
Transformer<T>::Transformer(const TransformerConfig& c) : TrainableModel<T>("Transformer", c.d_model), config_(c) {
  validate<T>(c);
  // the decoder first: with a shared source embedding the encoder embeds with the decoder's (its
  // own is never made); each stack's weights come from its own seed, whatever the order
  decoder_ = std::make_unique<Decoder<T>>(c.tgt_vocab_size, c.d_model, decoder_layers(c), c.n_heads, c.d_ff, c.dropout,
                                          c.max_length, c.layout, c.pre_norm, c.layer_norm_eps, splitmix64(c.seed + 2));
  encoder_ = std::make_unique<Encoder<T>>(c.src_vocab_size, c.d_model, encoder_layers(c), c.n_heads, c.d_ff, c.dropout,
                                          c.max_length, c.layout, c.pre_norm, c.layer_norm_eps, splitmix64(c.seed + 1),
                                          c.share_source_embedding ? &decoder_->embedding_.embedding() : nullptr);
  // the options that leave the defaults' layers as they are: padding id, embedding scale, activation
  encoder_->set_padding_id(c.pad_id);
  decoder_->set_padding_id(c.pad_id);
  decoder_->set_start_is_padding(c.start_id == c.pad_id);
  encoder_->embedding_.set_scale(c.scale_embedding);
  decoder_->embedding_.set_scale(c.scale_embedding);
  // every dense layer's products in the configured precision (the output layer's: run/backward_rows)
  encoder_->set_self_attention(c.encoder_attention);
  for (auto& layer : encoder_->layers_) {
    layer->self_attention_.set_precision(c.precision);
    layer->feed_forward_.set_precision(c.precision);
    layer->feed_forward_.set_activation(c.activation);
  }
  decoder_->set_self_attention(c.decoder_attention);
  for (auto& layer : decoder_->layers_) {
    layer->set_precision(c.precision);
    layer->feed_forward_.set_activation(c.activation);
  }
  set_attention_impl(impl_);
  init_output_layer(c.tgt_vocab_size, c.d_model, c.share_embeddings, splitmix64(c.seed + 3), out_weight_, dout_weight_,
                    out_bias_, dout_bias_);
}

template <typename T>
void Transformer<T>::set_attention_impl(AttentionImpl impl) {
  impl_ = impl;
  for (auto& layer : encoder_->layers_) layer->self_attention_.set_attention_impl(impl);
  for (auto& layer : decoder_->layers_) {
    layer->self_attention_.set_attention_impl(impl);
    layer->cross_attention_.set_attention_impl(impl);
  }
}

template <typename T>
T* Transformer<T>::output_weight() {
  return config_.share_embeddings ? decoder_->embedding_.embedding().weight_.data() : out_weight_.data();
}
template <typename T>
const T* Transformer<T>::output_weight() const {
  return config_.share_embeddings ? decoder_->embedding_.embedding().weight_.data() : out_weight_.data();
}
template <typename T>
T* Transformer<T>::output_weight_grad() {
  return config_.share_embeddings ? decoder_->embedding_.embedding().dweight_.data() : dout_weight_.data();
}

template <typename T>
void Transformer<T>::check_batch(ConstTokenMap src, ConstTokenMap tgt, const char* who) {
  const bool vouched = std::exchange(weights_vouched_, false);
  TCPP_CHECK(src.rows() == tgt.rows(), "Transformer.", who, ": src has batch size ", src.rows(), " but tgt_in has ",
             tgt.rows(), "; they must match");
  TCPP_CHECK(src.rows() > 0 && src.cols() > 0 && tgt.cols() > 0, "Transformer.", who, ": empty batch (src shape (",
             src.rows(), ", ", src.cols(), "), tgt_in shape (", tgt.rows(), ", ", tgt.cols(), "))");
  // the activations of a padded pass (packed passes need less): every layer keeps its inputs,
  // attention weights (B, H, Tq, Tk) unless the tiled kernel runs, and masks; then the logits
  // and their gradient
  const TransformerConfig& c = config_;
  const double B = static_cast<double>(src.rows()), S = static_cast<double>(src.cols());
  const double Tt = static_cast<double>(tgt.cols()), d = static_cast<double>(c.d_model);
  const double H = static_cast<double>(c.n_heads), dff = static_cast<double>(c.d_ff);
  const double Le = static_cast<double>(encoder_layers(c)), V = static_cast<double>(c.tgt_vocab_size);
  const double Ld = static_cast<double>(decoder_layers(c));
  // the weights term of attention_elements, for the attention that does not keep them: a kind
  // without full weights (linear), or softmax on the tiled kernel
  auto weights_not_kept = [&](bool full_weights, double Tq, double Tk) {
    return !full_weights || runs_tiled(impl_, static_cast<Index>(Tk)) ? 2 * B * H * Tq * Tk : 0.0;
  };
  const bool enc_full = attention_kind(c.encoder_attention).full_weights;
  const bool dec_full = attention_kind(c.decoder_attention).full_weights;
  const double elements = Le * encoder_layer_elements(B * S, B, H, S, d, dff) +
                          Ld * decoder_layer_elements(B * Tt, B * S, B, H, Tt, S, d, dff) + 4 * B * (S + Tt) * d +
                          2 * B * Tt * V - weights_not_kept(enc_full, S, S) * Le -
                          (weights_not_kept(dec_full, Tt, Tt) + weights_not_kept(true, Tt, S)) * Ld;
  const double mask_bytes = B * (S * S + Tt * Tt + Tt * S);
  check_memory(
      concat("Transformer.", who),
      concat("a batch of ", src.rows(), " sequences of source length ", src.cols(), " and target length ", tgt.cols()),
      elements * static_cast<double>(sizeof(T)) + mask_bytes);
  if (!vouched) check_finite_parameters(parameters(), concat("Transformer.", who));
}

template <typename T>
ConstMatrixMap<T> Transformer<T>::forward(ConstTokenMap src, ConstTokenMap tgt_in, bool training) {
  check_batch(src, tgt_in, "forward");
  const ConstMatrixMap<T> out = run(src, tgt_in, nullptr, training, false);
  const Index bad = first_nonfinite(out.data(), out.size());
  if (bad >= 0)
    throw NonFiniteError(concat("Transformer.forward: the logits are not finite (", out.data()[bad], " at flat index ",
                                bad, "): the activations overflowed; the weights are too large"));
  B_ = tgt_in.rows();  // backward() may follow
  T_ = tgt_in.cols();
  return out;
}

template <typename T>
const Matrix<T>& Transformer<T>::run_hidden(ConstTokenMap src, ConstTokenMap tgt_in, const std::int64_t* tgt_out,
                                            bool training, bool pack) {
  // Until a forward completes there is no valid state for backward(): the encoder may accept a
  // new batch and the decoder then reject its target ids, leaving the two out of step.
  B_ = -1;
  const Matrix<T>& memory = encoder_->forward(src, training, pack);  // (rows_src, d)
  return decoder_->forward(tgt_in, cmap(memory), encoder_->layout(), encoder_->key_padding().data(), training, tgt_out,
                           pack);  // (rows_tgt, d)
}

template <typename T>
ConstMatrixMap<T> Transformer<T>::output_logits(const Matrix<T>& y, bool add_bias) {
  const Index V = config_.tgt_vocab_size, d = config_.d_model;
  ConstMatrixMap<T> W(output_weight(), V, d);
  // logits = y W^T + b                                                    (rows_tgt, V)
  const size_t need = static_cast<size_t>(y.rows()) * static_cast<size_t>(V);
  if (logits_capacity_ < need) {
    logits_.reset();  // the old buffer goes before the larger one is allocated
    logits_capacity_ = 0;
    const size_t bytes = (need * sizeof(T) + 63) / 64 * 64;  // aligned_alloc wants a multiple of 64
    logits_.reset(static_cast<T*>(std::aligned_alloc(64, bytes)));
    if (logits_ == nullptr) throw std::bad_alloc();
    logits_capacity_ = need;
  }
  logits_rows_ = y.rows();
  dense_forward<T>(config_.precision, cmap(y), W, logits_mut(), add_bias ? out_bias_.data() : nullptr);
  return logits();
}

template <typename T>
ConstMatrixMap<T> Transformer<T>::run(ConstTokenMap src, ConstTokenMap tgt_in, const std::int64_t* tgt_out,
                                      bool training, bool pack) {
  return output_logits(run_hidden(src, tgt_in, tgt_out, training, pack), true);
}

template <typename T>
void Transformer<T>::backward(ConstMatrixMap<T> dlogits) {
  if (B_ < 0) throw std::runtime_error("Transformer: backward() called before forward()");
  const Index V = config_.tgt_vocab_size;
  TCPP_CHECK(dlogits.rows() == B_ * T_ && dlogits.cols() == V, "Transformer.backward: dlogits has shape (",
             dlogits.rows(), ", ", dlogits.cols(), "), expected (", B_ * T_, ", ", V, ")");
  backward_rows(dlogits, false);
}

template <typename T>
void Transformer<T>::backward_rows(ConstMatrixMap<T> dlogits, bool bias_grad_done) {
  grads_zero_ = false;
  const Index V = config_.tgt_vocab_size, d = config_.d_model;
  const Matrix<T>& y = decoder_->output();
  ConstMatrixMap<T> W(output_weight(), V, d);
  MatrixMap<T> dW(output_weight_grad(), V, d);
  // logits = y W^T + b, so dW += dlogits^T y, db += column sums, dy = dlogits W
  dense_backward_weight<T>(config_.precision, dlogits, cmap(y), dW);
  if (!bias_grad_done) add_column_sums(dlogits.data(), dlogits.rows(), V, dout_bias_.data());
  if (dy_.size() < y.size()) dy_.resize(y.rows(), d);  // grows only
  const MatrixMap<T> dy(dy_.data(), y.rows(), d);
  dense_backward_input<T>(config_.precision, dlogits, W, dy);
  decoder_->backward(ConstMatrixMap<T>(dy.data(), y.rows(), d));
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

// The masked loss; a non-finite one is a NonFiniteError that says nothing was changed.
template <typename Loss>
static LossStats loss_or_throw(Loss&& loss, const char* who) {
  try {
    return loss();
  } catch (const NonFiniteError& e) {
    const bool training = std::string(who) == "train_step";
    throw NonFiniteError(concat("Transformer.", who, ": non-finite loss (NaN or infinity): the model has diverged ",
                                "or its weights are too large",
                                training ? "; no update was applied, the weights "
                                           "are those of the last good step"
                                         : "",
                                " [", e.what(), "]"));
  }
}

template <typename T>
LossStats Transformer<T>::loss_and_backward(ConstTokenMap tgt_out, const char* who) {
  grads_zero_ = false;
  const Matrix<T>& y = decoder_->output();
  const double eps = this->optimizer_config().label_smoothing;
  if (this->output_chunk_rows() == this->kUnfusedOutputLoss) {
    // the reference: the whole logits matrix (without the output bias: the fused loss adds it and
    // sums its gradient), whose gradient then replaces it in place, and the backward over it
    output_logits(y, false);
    LossStats stats = loss_or_throw(
        [&] {
          return output_cross_entropy<T>(logits_mut(), out_bias_.data(), row_targets(tgt_out), eps, dout_bias_.data(),
                                         loss_partial_, config_.pad_id);
        },
        who);
    backward_rows(logits(), true);
    return stats;
  }
  const Index V = config_.tgt_vocab_size, d = config_.d_model, rows = y.rows();
  if (dy_.size() < y.size()) dy_.resize(rows, d);  // grows only
  const MatrixMap<T> dy(dy_.data(), rows, d);
  // chunk by chunk of rows: logits, loss and its gradient, dW, the bias gradient and dy
  LossStats stats = loss_or_throw(
      [&] {
        return chunked_output_loss<T>(config_.precision, cmap(y), ConstMatrixMap<T>(output_weight(), V, d),
                                      out_bias_.data(), row_targets(tgt_out), eps,
                                      MatrixMap<T>(output_weight_grad(), V, d), dout_bias_.data(), dy, loss_scratch_,
                                      this->output_chunk_rows(), config_.pad_id);
      },
      who);
  decoder_->backward(ConstMatrixMap<T>(dy.data(), rows, d));
  encoder_->backward(cmap(decoder_->dmemory()));
  return stats;
}

namespace {
// The labels of a loss, tgt_out, have tgt_in's shape (`method` names the call in the message).
void check_labels(ConstTokenMap tgt_in, ConstTokenMap tgt_out, const char* method) {
  TCPP_CHECK(tgt_out.rows() == tgt_in.rows() && tgt_out.cols() == tgt_in.cols(), "Transformer.", method,
             ": tgt_out has shape (", tgt_out.rows(), ", ", tgt_out.cols(), ") but tgt_in has (", tgt_in.rows(), ", ",
             tgt_in.cols(), "); they must match");
}
}  // namespace

template <typename T>
LossStats Transformer<T>::train_step(ConstTokenMap src, ConstTokenMap tgt_in, ConstTokenMap tgt_out) {
  check_labels(tgt_in, tgt_out, "train_step");
  check_batch(src, tgt_in, "train_step");
  this->check_step_count("Transformer.train_step");
  // a batch of padding labels has no loss to learn from: a step would only move the weights by
  // Adam's momentum and advance the schedule, and report a loss of 0
  TCPP_CHECK((tgt_out.array() != config_.pad_id).any(), "Transformer.train_step: tgt_out holds no target token ",
             "(every label is the padding id ", config_.pad_id,
             "): there is nothing to learn from; no update was applied");
  this->optimizer();
  if (!grads_zero_) zero_grad();
  grads_zero_ = false;
  // only the rows that matter to the loss are computed ("packed": padding removed); the output
  // layer runs with the loss, chunk by chunk of rows, and the backward follows
  run_hidden(src, tgt_in, tgt_out.data(), true, true);
  LossStats stats = loss_and_backward(tgt_out, "train_step");
  this->update("Transformer.train_step");
  grads_zero_ = true;
  return stats;
}

template <typename T>
LossStats Transformer<T>::evaluate(ConstTokenMap src, ConstTokenMap tgt_in, ConstTokenMap tgt_out) {
  check_labels(tgt_in, tgt_out, "evaluate");
  check_batch(src, tgt_in, "evaluate");
  const ConstMatrixMap<T> logits = run(src, tgt_in, tgt_out.data(), false, true);
  return loss_or_throw(
      [&] {
        return masked_cross_entropy<T>(logits, row_targets(tgt_out), nullptr, this->optimizer_config().label_smoothing,
                                       config_.pad_id);
      },
      "evaluate");
}

// ------------------------------------------------------------------ data parallelism

template <typename T>
Index Transformer<T>::flat_parameter_count() {
  Index n = 0;
  for (const auto& p : parameters()) n += p.size();
  return n;
}

template <typename T>
T* Transformer<T>::flat_gradients() {
  if (flat_grads_.empty()) flat_grads_.assign(static_cast<size_t>(flat_parameter_count() + kFlatSpareSlots), T(0));
  return flat_grads_.data();
}

template <typename T>
void Transformer<T>::zero_flat_gradients() {
  T* flat = flat_gradients();
  std::fill(flat, flat + flat_grads_.size(), T(0));
  this->optimizer();
  flat_pending_ = true;
}

template <typename T>
LossStats Transformer<T>::compute_gradients(ConstTokenMap src, ConstTokenMap tgt_in, ConstTokenMap tgt_out,
                                            double grad_scale, bool accumulate) {
  const char* who = "Transformer.compute_gradients";
  check_labels(tgt_in, tgt_out, "compute_gradients");
  TCPP_CHECK(std::isfinite(grad_scale), who, ": grad_scale must be finite, got ", grad_scale);
  check_batch(src, tgt_in, "train_step");
  TCPP_CHECK((tgt_out.array() != config_.pad_id).any(), who,
             ": tgt_out holds no target token (every label is the padding id ", config_.pad_id,
             "): there is nothing to learn from");
  TCPP_CHECK(!accumulate || flat_pending_, who,
             ": accumulate adds to gradients not yet applied; call compute_gradients without it first");
  this->optimizer();  // the Adam moments exist before the first apply_gradients
  T* flat = flat_gradients();
  flat_pending_ = false;
  if (!grads_zero_) zero_grad();
  grads_zero_ = false;
  // the same passes as train_step
  run_hidden(src, tgt_in, tgt_out.data(), true, true);
  LossStats stats = loss_and_backward(tgt_out, "train_step");
  // gather: flat = grad * grad_scale (with accumulate, flat += grad * grad_scale), and grad = 0
  // for the next step (one pass)
  const T gs = static_cast<T>(grad_scale);
  Index offset = 0;
  for (const auto& p : parameters()) {
    T* __restrict g = p.grad;
    T* __restrict f = flat + offset;
    const Index n = p.size();
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (Index i = 0; i < n; ++i) {
      f[i] = accumulate ? f[i] + g[i] * gs : g[i] * gs;
      g[i] = T(0);
    }
    offset += n;
  }
  grads_zero_ = true;
  flat_pending_ = true;
  return stats;
}

template <typename T>
double Transformer<T>::flat_gradient_norm(double grad_scale) const {
  TCPP_CHECK(!flat_grads_.empty(), "Transformer.flat_gradient_norm: no gradients yet (call compute_gradients)");
  const Index n = static_cast<Index>(flat_grads_.size()) - kFlatSpareSlots;
  // fixed blocks, each summed in order by one thread, then the block sums in order: the result does
  // not depend on the thread count
  constexpr Index kBlock = tuning::kFlatNormBlock;
  const Index blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
  const T* g = flat_grads_.data();
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (Index b = 0; b < blocks; ++b) {
    double s = 0.0;
    const Index end = std::min(n, (b + 1) * kBlock);
    for (Index i = b * kBlock; i < end; ++i) s += static_cast<double>(g[i]) * static_cast<double>(g[i]);
    partial[static_cast<size_t>(b)] = s;
  }
  double sumsq = 0.0;
  for (double s : partial) sumsq += s;
  return std::sqrt(sumsq) * std::abs(grad_scale);
}

template <typename T>
void Transformer<T>::apply_gradients(double grad_scale) {
  const char* who = "Transformer.apply_gradients";
  TCPP_CHECK(flat_pending_, who, ": no gradients to apply (call compute_gradients first; each gradient is applied ",
             "once)");
  TCPP_CHECK(std::isfinite(grad_scale), who, ": grad_scale must be finite, got ", grad_scale);
  this->check_step_count(who);
  this->update_flat(flat_grads_.data(), grad_scale, flat_gradient_norm(grad_scale), who);
  flat_pending_ = false;
}

template <typename T>
void Transformer<T>::infer_start(ConstTokenMap src, Index max_steps, InferenceBackend<T>& be,
                                 InferenceState<T>& state) {
  TCPP_CHECK(max_steps >= 1, "Transformer: max_steps must be >= 1, got ", max_steps);
  encoder_->embedding_.reserve_positions(src.cols());
  decoder_->embedding_.reserve_positions(max_steps);  // positions 0 .. max_steps-1 are fed
  encoder_->infer(src, state.decoder.memory_rows, be, state.scratch, state.memory);
  decoder_->infer_start(state.memory, state.decoder.memory_rows, max_steps, be, state.decoder);
}

template <typename T>
const Matrix<T>& Transformer<T>::infer_step(const std::int64_t* tokens, InferenceBackend<T>& be,
                                            InferenceState<T>& state) const {
  const Matrix<T>& y = decoder_->infer_step(tokens, state.decoder, be, state.scratch);  // (R, d)
  // logits = y W_out^T + b                                                   (R, V)
  be.linear(y, output_weight(), out_bias_.data(), config_.tgt_vocab_size, state.logits);
  return state.logits;
}

template <typename T>
ParameterList<T> Transformer<T>::parameters() {
  ParameterList<T> ps;
  append_parameters(ps, encoder_->parameters(), "encoder");
  append_parameters(ps, decoder_->parameters(), "decoder");
  append_output_parameters(ps, config_.share_embeddings, out_weight_, dout_weight_, out_bias_, dout_bias_);
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

template void validate<float>(const TransformerConfig&);
template void validate<double>(const TransformerConfig&);
template class Transformer<float>;
template class Transformer<double>;

}  // namespace transformer

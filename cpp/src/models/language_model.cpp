#include "transformer/models/language_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

#include "transformer/attention/kinds.hpp"
#include "transformer/core/checks.hpp"
#include "transformer/core/random.hpp"
#include "transformer/core/runtime.hpp"
#include "transformer/kernels/matmul.hpp"
#include "transformer/layers/stack.hpp"

namespace transformer {

// ------------------------------------------------------------------ configuration

const std::vector<ConfigField<LanguageModelConfig>>& ConfigTable<LanguageModelConfig>::fields() {
  using C = LanguageModelConfig;
  static const std::vector<ConfigField<C>> table = complete_table<C>(
      {
          field<&C::vocab_size>("vocab_size", Limit::integer(2), "vocabulary size (the padding id 0 included)",
                                kNoOption),
          field<&C::d_model>("d_model", Limit::integer(1, 16384), "model width"),
          field<&C::n_layers>("n_layers", Limit::integer(1, 256), "blocks (causal self-attention and feed-forward)"),
          field<&C::n_heads>("n_heads", Limit::integer(1, 1024), "attention heads (d_model must be divisible by them)"),
          field<&C::d_ff>("d_ff", Limit::integer(1, 262144), "inner width of the feed-forward networks"),
          field<&C::dropout>("dropout", Limit::number(0.0, 1.0, false, true),
                             "dropout rate on the embedding, the sub-layer outputs and inside the feed-forward "
                             "networks"),
          field<&C::max_len>("max_len", Limit::integer(1),
                             "positional-table rows built up front; a cache: longer sequences extend it", kNoOption),
          field<&C::attention>("attention", Limit::one_of(self_attention_kinds()),
                               "the blocks' causal self-attention; relative: Transformer-XL's relative positions "
                               "(no absolute positional encoding) and a segment memory"),
          field<&C::memory_length>("memory_length", Limit::integer(0, 1 << 20),
                                   "relative attention: positions of the preceding segments each block attends to "
                                   "(a stop-gradient memory carried from segment to segment; 0: none)"),
          field<&C::lsh_hashes>("lsh_hashes", Limit::integer(1, 64), "LSH attention: hash rounds"),
          field<&C::lsh_chunk>("lsh_chunk", Limit::integer(1, 1048576),
                               "LSH attention: positions per chunk (a chunk attends to itself and the one before)"),
          field<&C::lsh_buckets>("lsh_buckets", Limit::integer(0, 1048576),
                                 "LSH attention: buckets per hash round, even (0: 2 * max(1, length / lsh_chunk))"),
          field<&C::reversible>("reversible", Limit::flag(),
                                "the blocks as a reversible residual stack (Reformer): the activations of one "
                                "block are stored, whatever the depth; needs pre_norm"),
          field<&C::pre_norm>("pre_norm", Limit::flag(),
                              "layer normalisation before each sub-layer and after the last block (GPT-2) instead "
                              "of after each sub-layer (the paper's post-norm)"),
          field<&C::share_embeddings>("share_embeddings", Limit::flag(),
                                      "tie the output projection to the token embedding (fewer weights)"),
          field<&C::seed>("seed", Limit::integer(0, std::numeric_limits<std::uint64_t>::max()),
                          "seed of the initial weights and the dropout masks"),
      },
      "LanguageModelConfig");
  return table;
}

void check_config(const LanguageModelConfig& c) {
  check_fields(c);
  if (c.d_model % c.n_heads != 0)
    throw std::invalid_argument("LanguageModel: d_model " + std::to_string(c.d_model) +
                                " is not divisible by n_heads " + std::to_string(c.n_heads));
  if (c.lsh_buckets % 2 != 0)
    throw std::invalid_argument("LanguageModel: lsh_buckets must be even (each hash is argmax([xR; -xR])) or 0, got " +
                                std::to_string(c.lsh_buckets));
  if (c.reversible && !c.pre_norm)
    throw std::invalid_argument(
        "LanguageModel: reversible blocks are pre-norm (y1 = x1 + Attn(LN(x2)), y2 = x2 + FFN(LN(y1))): "
        "reversible=True needs pre_norm=True");
  const AttentionKind& kind = attention_kind(c.attention, "LanguageModel");
  if (c.memory_length > 0 && !kind.memory)
    throw std::invalid_argument("LanguageModel: memory_length " + std::to_string(c.memory_length) +
                                " needs attention " + quoted_attention_kinds(takes_memory) +
                                " (the segment memory is Transformer-XL's), got '" + c.attention + "'");
  if (c.reversible && !kind.reversible)
    throw std::invalid_argument(
        "LanguageModel: reversible blocks recompute each block from the next one's output, which a segment "
        "memory does not allow: reversible=True needs attention " +
        quoted_attention_kinds(works_reversible) + ", got '" + c.attention + "'");
}

// ------------------------------------------------------------------ block

namespace {
constexpr double kLayerNormEps = 1e-6;

// The settings of the configuration's attention kind.
SelfAttentionOptions attention_options(const LanguageModelConfig& c) {
  SelfAttentionOptions o;
  o.lsh_chunk = c.lsh_chunk;
  o.lsh_hashes = c.lsh_hashes;
  o.lsh_buckets = c.lsh_buckets;
  return o;
}
}  // namespace

template <typename T>
LanguageModelBlock<T>::LanguageModelBlock(const LanguageModelConfig& c, std::uint64_t seed)
    : self_attention_(
          make_self_attention<T>(c.attention, c.d_model, c.n_heads, splitmix64(seed + 1), attention_options(c))),
      norm1_(c.d_model, kLayerNormEps),
      feed_forward_(c.d_model, c.d_ff, c.dropout, splitmix64(seed + 2)),
      norm2_(c.d_model, kLayerNormEps),
      pre_norm_(c.pre_norm),
      dropout1_(c.dropout, seed, splitmix64(seed + 3)),
      dropout2_(c.dropout, seed, splitmix64(seed + 4)) {
  relative_ = dynamic_cast<RelativeMultiHeadAttention<T>*>(self_attention_.get());
  memory_length_ = c.memory_length;
}

template <typename T>
const Matrix<T>& LanguageModelBlock<T>::forward(ConstMatrixMap<T> x, Index B, Index T_len, bool training) {
  has_forward_ = true;
  // post-norm: h = LN1(x + Dropout(Attn(x))), y = LN2(h + Dropout(FFN(h)));
  // pre-norm: r1 = x + Dropout(Attn(LN1(x))), y = r1 + Dropout(FFN(LN2(r1)))
  const Matrix<T>& h = residual_forward<T>(
      pre_norm_, norm1_, dropout1_,
      [&](ConstMatrixMap<T> in) -> Matrix<T>& {
        // the residual helper drops out the attention's output in place
        if (relative_ != nullptr) return const_cast<Matrix<T>&>(relative_forward(in, B, T_len));
        return const_cast<Matrix<T>&>(self_attention_->forward(in, B, T_len, true));
      },
      x, training, nullptr, r1_);
  return layer_residual<T>(pre_norm_, norm2_, dropout2_, cmap(h), training, nullptr, out_, feed_forward_, training);
}

template <typename T>
const Matrix<T>& LanguageModelBlock<T>::backward(ConstMatrixMap<T> dout) {
  if (!has_forward_) throw std::runtime_error("LanguageModelBlock: backward() called before forward()");
  // the two residual sub-layers in reverse: feed-forward, then self-attention
  layer_residual_backward<T>(pre_norm_, norm2_, dropout2_, feed_forward_, dout, dtmp_, dh_);
  layer_residual_backward<T>(pre_norm_, norm1_, dropout1_, *self_attention_, cmap(dh_), dtmp_, dx_);
  return dx_;
}

template <typename T>
ParameterList<T> LanguageModelBlock<T>::parameters() {
  return attention_block_parameters<T>(self_attention_->parameters(), norm1_, feed_forward_, norm2_);
}

template <typename T>
std::vector<Dropout<T>*> LanguageModelBlock<T>::dropouts() {
  return {&dropout1_, &feed_forward_.dropout(), &dropout2_};
}

// ------------------------------------------------------------------ block: relative attention's memory

template <typename T>
const Matrix<T>& LanguageModelBlock<T>::relative_forward(ConstMatrixMap<T> in, Index B, Index T_len) {
  TCPP_CHECK(memory_held_ == 0 || memory_batch_ == B, "LanguageModel: the memory holds ", memory_batch_,
             " sequences, the batch has ", B, "; feed the same number of texts or call reset_memory() first");
  const Index M = memory_held_, d = in.cols();
  // queries: the segment; keys and values: [memory ; segment] (the memory gets no gradient)
  const Matrix<T>& out = relative_->forward(in, ConstMatrixMap<T>(memory_.data(), B * M, d), B, T_len, M);
  if (update_memory_ && memory_length_ > 0) {
    // the next memory: the last `keep` rows of [memory ; in] of each sequence   (B*keep, d)
    const Index keep = std::min(memory_length_, M + T_len);
    memory_next_.resize(B * keep, d);
    for (Index b = 0; b < B; ++b)
      for (Index r = 0; r < keep; ++r) {
        const Index p = M + T_len - keep + r;  // row in [memory ; in] of sequence b
        const T* src = p < M ? memory_.data() + (b * M + p) * d : in.data() + (b * T_len + p - M) * d;
        std::copy(src, src + d, memory_next_.data() + (b * keep + r) * d);
      }
    memory_.swap(memory_next_);
    memory_held_ = keep;
    memory_batch_ = B;
  } else if (update_memory_) {
    reset_memory();
  }
  return out;
}

// ------------------------------------------------------------------ model

namespace {
// Every weight of a configuration (value and gradient are counted by checked_size).
double lm_parameters(const LanguageModelConfig& c) {
  const double d = static_cast<double>(c.d_model), V = static_cast<double>(c.vocab_size);
  const double block = attention_parameters(d) + feed_forward_parameters(d, static_cast<double>(c.d_ff)) + 4 * d;
  return V * d + static_cast<double>(c.n_layers) * block + (c.share_embeddings ? 0.0 : V * d) + V +
         (c.pre_norm ? 2 * d : 0.0);
}

// The vocabulary size of a configuration that check_config allows (before anything is allocated).
Index checked_vocab_size(const LanguageModelConfig& c) {
  check_config(c);
  return c.vocab_size;
}
}  // namespace

template <typename T>
LanguageModel<T>::LanguageModel(const LanguageModelConfig& c)
    : TrainableModel<T>("LanguageModel", c.d_model),
      embedding_(checked_size<T>("LanguageModel",
                                 concat("a model with vocab_size ", checked_vocab_size(c), ", d_model ", c.d_model,
                                        ", n_layers ", c.n_layers, ", d_ff ", c.d_ff, " and max_len ", c.max_len),
                                 lm_parameters(c), static_cast<double>(c.max_len) * static_cast<double>(c.d_model),
                                 c.vocab_size),
                 c.d_model, c.max_len, PositionalLayout::Interleaved, splitmix64(c.seed + 1)),
      config_(c),
      dropout_(c.dropout, c.seed, splitmix64(c.seed + 2)) {
  if (c.reversible) {
    ReversibleStackOptions o;
    o.n_layers = c.n_layers;
    o.d_model = c.d_model;
    o.n_heads = c.n_heads;
    o.d_ff = c.d_ff;
    o.dropout = c.dropout;
    o.causal = true;
    o.seed = splitmix64(c.seed + 100);
    o.attention = c.attention;
    o.attention_options = attention_options(c);
    o.reversible = true;
    o.eps = kLayerNormEps;
    reversible_ = std::make_unique<ReversibleStack<T>>(o);
    for (Index i = 0; i < c.n_layers; ++i)
      if (auto* lsh = dynamic_cast<LSHSelfAttention<T>*>(&reversible_->attention(i))) lsh_.push_back(lsh);
  } else {
    for (Index i = 0; i < c.n_layers; ++i) {
      layers_.push_back(
          std::make_unique<LanguageModelBlock<T>>(c, splitmix64(c.seed + 100 + static_cast<std::uint64_t>(i))));
      if (auto* lsh = dynamic_cast<LSHSelfAttention<T>*>(layers_.back()->self_attention_.get())) lsh_.push_back(lsh);
    }
  }
  // the rotations of a forward are chosen by the model (hidden()), not by a count of forwards
  for (auto* lsh : lsh_) lsh->set_freeze_hash(true);
  if (c.pre_norm) final_norm_ = std::make_unique<LayerNorm<T>>(c.d_model, kLayerNormEps);
  memory_length_ = c.memory_length;
  init_output_layer(c.vocab_size, c.d_model, c.share_embeddings, splitmix64(c.seed + 3), out_weight_, dout_weight_,
                    out_bias_, dout_bias_);
}

template <typename T>
T* LanguageModel<T>::output_weight() {
  return config_.share_embeddings ? embedding_.embedding().weight_.data() : out_weight_.data();
}
template <typename T>
T* LanguageModel<T>::output_weight_grad() {
  return config_.share_embeddings ? embedding_.embedding().dweight_.data() : dout_weight_.data();
}

template <typename T>
void LanguageModel<T>::check_tokens(ConstTokenMap tokens, Index min_length, const char* who) {
  TCPP_CHECK(tokens.rows() > 0 && tokens.cols() >= min_length, "LanguageModel.", who, ": tokens must have shape (B, ",
             min_length > 1 ? "T+1" : "T", ") with B >= 1 and T >= 1, got (", tokens.rows(), ", ", tokens.cols(), ")");
  const Index V = config_.vocab_size;
  for (Index i = 0; i < tokens.size(); ++i) {
    const std::int64_t t = tokens.data()[i];
    TCPP_CHECK(t >= 0 && t < V, "LanguageModel.", who, ": token id ", t, " at flat index ", i,
               " is out of range for vocab_size ", V);
  }
  check_activations(static_cast<double>(tokens.rows()), static_cast<double>(tokens.cols()), who);
  check_finite_parameters(parameters(), concat("LanguageModel.", who));
}

template <typename T>
void LanguageModel<T>::check_batch(Index batch, Index length, const char* who) const {
  TCPP_CHECK(batch > 0 && length > 1, "LanguageModel.", who,
             ": a batch needs B >= 1 sequences of T+1 >= 2 tokens, got ", batch, " of ", length);
  check_activations(static_cast<double>(batch), static_cast<double>(length), who);
}

template <typename T>
void LanguageModel<T>::check_activations(double B, double Tl, const char* who) const {
  // the activations: a block keeps its input, its attention's and feed-forward's buffers and, with
  // softmax attention on the plain kernel, the weights (B, H, T, T) and a (T, T) mask; every
  // block keeps them, or one block at a time plus the two streams of a reversible stack; then
  // the logits (and the batch's own token ids)
  const LanguageModelConfig& c = config_;
  const double d = static_cast<double>(c.d_model), H = static_cast<double>(c.n_heads);
  const AttentionKind& kind = attention_kind(c.attention);
  const bool plain = kind.full_weights && Tl < static_cast<double>(tuning::kTiledAttentionMinLength);
  double block = encoder_layer_elements(B * Tl, B, H, Tl, d, static_cast<double>(c.d_ff));
  if (!plain) block -= 2 * B * H * Tl * Tl;  // the weights term of attention_elements
  if (kind.hashed) {
    const double buckets = c.lsh_buckets > 0 ? static_cast<double>(c.lsh_buckets)
                                             : 2.0 * std::max(1.0, std::floor(Tl / static_cast<double>(c.lsh_chunk)));
    block += lsh_attention_elements(B * Tl, B, H, Tl, d, static_cast<double>(c.lsh_hashes), buckets,
                                    static_cast<double>(c.lsh_chunk), static_cast<double>(get_num_threads()));
  }
  const double elements = (c.reversible ? block + 3 * B * Tl * d : static_cast<double>(c.n_layers) * block) +
                          4 * B * Tl * d + B * Tl * static_cast<double>(c.vocab_size);
  check_memory(
      concat("LanguageModel.", who),
      concat("a batch of ", static_cast<std::int64_t>(B), " sequences of length ", static_cast<std::int64_t>(Tl)),
      elements * static_cast<double>(sizeof(T)) + (plain ? Tl * Tl : 0.0) + B * Tl * 8.0);
}

template <typename T>
const Matrix<T>& LanguageModel<T>::hidden(ConstTokenMap tokens, bool training) {
  B_ = -1;  // until this forward completes, no backward may follow
  const Index B = tokens.rows(), Tl = tokens.cols();
  if (attention_kind(config_.attention).memory) {
    // relative attention encodes positions itself: embedding * sqrt(d) only  (B*T, d)
    x_ = embedding_.embedding().forward(tokens, static_cast<T>(std::sqrt(static_cast<double>(config_.d_model))));
    dropout_.forward_inplace(mmap(x_), training);
  } else {
    // (B*T, d): Dropout(embedding * sqrt(d) + PE), one pass
    embedding_.forward_dropout(tokens, RowLayout::dense(B, Tl), dropout_, training, x_);
  }
  // LSH attention hashes with the rotations of the number of updates taken so far
  const auto draw = static_cast<std::uint64_t>(this->step_count());
  for (auto* lsh : lsh_) lsh->set_calls(draw);
  const Matrix<T>* h = &x_;
  if (reversible_) h = &reversible_->forward(cmap(x_), B, Tl, training);
  for (auto& layer : layers_) h = &layer->forward(cmap(*h), B, Tl, training);
  if (final_norm_) h = &final_norm_->forward(cmap(*h));
  y_ = h;
  return *h;
}

template <typename T>
const Matrix<T>& LanguageModel<T>::forward(ConstTokenMap tokens, bool training) {
  check_tokens(tokens, 1, "forward");
  const Matrix<T>& y = hidden(tokens, training);
  const Index V = config_.vocab_size, d = config_.d_model;
  // logits = y W^T + b                                                        (B*T, V)
  logits_.resize(y.rows(), V);
  dense_forward<T>(Precision::Float32, cmap(y), ConstMatrixMap<T>(output_weight(), V, d), mmap(logits_),
                   out_bias_.data());
  const Index bad = first_nonfinite(logits_.data(), logits_.size());
  if (bad >= 0)
    throw NonFiniteError(concat("LanguageModel.forward: the logits are not finite (", logits_.data()[bad],
                                " at flat index ", bad, "): the activations overflowed; the weights are too large"));
  B_ = tokens.rows();
  T_ = tokens.cols();
  return logits_;
}

template <typename T>
void LanguageModel<T>::backward(ConstMatrixMap<T> dlogits) {
  if (B_ < 0 || y_ == nullptr) throw std::runtime_error("LanguageModel: backward() called before forward()");
  const Index V = config_.vocab_size, d = config_.d_model;
  TCPP_CHECK(dlogits.rows() == B_ * T_ && dlogits.cols() == V, "LanguageModel.backward: dlogits has shape (",
             dlogits.rows(), ", ", dlogits.cols(), "), expected (", B_ * T_, ", ", V, ")");
  const Matrix<T>& y = *y_;
  ConstMatrixMap<T> W(output_weight(), V, d);
  MatrixMap<T> dW(output_weight_grad(), V, d);
  // logits = y W^T + b: dW += dlogits^T y, db += column sums of dlogits, dy = dlogits W
  dense_backward_weight<T>(Precision::Float32, dlogits, cmap(y), dW);
  add_column_sums(dlogits.data(), dlogits.rows(), V, dout_bias_.data());
  dy_.resize(y.rows(), d);
  dense_backward_input<T>(Precision::Float32, dlogits, W, mmap(dy_));
  blocks_backward();
}

template <typename T>
void LanguageModel<T>::blocks_backward() {
  // the blocks in reverse (and the final norm first), then the input dropout and the embedding
  if (reversible_) {
    const Matrix<T>& dn = final_norm_->backward(cmap(dy_));
    dx_ = reversible_->backward(cmap(dn));
  } else {
    dx_ = stack_backward<T>(cmap(dy_), layers_, final_norm_.get(), [](LanguageModelBlock<T>&) {});
  }
  dropout_.backward_inplace(mmap(dx_));
  embedding_.backward(cmap(dx_));
}

template <typename T>
void LanguageModel<T>::split_shifted(ConstTokenMap tokens) {
  const Index B = tokens.rows(), Tl = tokens.cols() - 1;
  inputs_.resize(B, Tl);
  labels_.resize(static_cast<size_t>(B * Tl));
  for (Index b = 0; b < B; ++b)
    for (Index t = 0; t < Tl; ++t) {
      inputs_(b, t) = tokens(b, t);
      labels_[static_cast<size_t>(b * Tl + t)] = tokens(b, t + 1);
    }
}

// The loss; a non-finite one is a NonFiniteError that says nothing was changed.
template <typename Loss>
static LossStats lm_loss_or_throw(Loss&& loss, const char* who, bool training) {
  try {
    return loss();
  } catch (const NonFiniteError& e) {
    throw NonFiniteError(concat("LanguageModel.", who, ": non-finite loss (NaN or infinity): the model has diverged ",
                                "or its weights are too large",
                                training ? "; no update was applied, the weights are those of the last good step" : "",
                                " [", e.what(), "]"));
  }
}

template <typename T>
LossStats LanguageModel<T>::output_loss(const Matrix<T>& y) {
  const Index V = config_.vocab_size, d = config_.d_model;
  ConstMatrixMap<T> W(output_weight(), V, d);
  MatrixMap<T> dW(output_weight_grad(), V, d);
  dy_.resize(y.rows(), d);  // no allocation while the batch shape stays
  if (this->output_chunk_rows() != this->kUnfusedOutputLoss)
    // chunk by chunk of rows: logits, loss and its gradient, dW, the bias gradient and dy
    return chunked_output_loss<T>(Precision::Float32, cmap(y), W, out_bias_.data(), labels_.data(), 0.0, dW,
                                  dout_bias_.data(), mmap(dy_), loss_scratch_, this->output_chunk_rows());
  // the reference: logits without the bias (the fused loss adds it, writes d loss / d logits over
  // the logits and sums the bias gradient while each row is in cache), then backward() without
  // the bias gradient
  logits_.resize(y.rows(), V);
  dense_forward<T>(Precision::Float32, cmap(y), W, mmap(logits_), nullptr);
  const LossStats stats =
      output_cross_entropy<T>(mmap(logits_), out_bias_.data(), labels_.data(), 0.0, dout_bias_.data(), loss_partial_);
  dense_backward_weight<T>(Precision::Float32, cmap(logits_), cmap(y), dW);
  dense_backward_input<T>(Precision::Float32, cmap(logits_), W, mmap(dy_));
  return stats;
}

template <typename T>
LossStats LanguageModel<T>::compute_gradients(ConstTokenMap tokens, bool training) {
  check_tokens(tokens, 2, "train_step");
  split_shifted(tokens);
  TCPP_CHECK(std::any_of(labels_.begin(), labels_.end(), [](std::int64_t t) { return t != 0; }),
             "LanguageModel.train_step: every label is the padding id 0: there is nothing to learn from");
  zero_grad();
  ConstTokenMap in(inputs_.data(), inputs_.rows(), inputs_.cols());
  const Matrix<T>& y = hidden(in, training);
  LossStats stats = lm_loss_or_throw([&] { return output_loss(y); }, "train_step", true);
  B_ = inputs_.rows();
  T_ = inputs_.cols();
  blocks_backward();
  B_ = -1;  // the logits now hold their gradient: no backward() may follow
  return stats;
}

template <typename T>
LossStats LanguageModel<T>::train_step(ConstTokenMap tokens) {
  this->optimizer();
  this->check_step_count("LanguageModel.train_step");
  LossStats stats = compute_gradients(tokens, true);
  this->update("LanguageModel.train_step");
  return stats;
}

template <typename T>
void LanguageModel<T>::apply_gradients() {
  this->optimizer();
  this->check_step_count("LanguageModel.apply_gradients");
  this->update("LanguageModel.apply_gradients");
}

template <typename T>
LossStats LanguageModel<T>::evaluate_loss(ConstTokenMap tokens) {
  check_tokens(tokens, 2, "evaluate_loss");
  split_shifted(tokens);
  ConstTokenMap in(inputs_.data(), inputs_.rows(), inputs_.cols());
  const Matrix<T>& y = hidden(in, false);
  const Index V = config_.vocab_size, d = config_.d_model;
  logits_.resize(y.rows(), V);
  dense_forward<T>(Precision::Float32, cmap(y), ConstMatrixMap<T>(output_weight(), V, d), mmap(logits_),
                   out_bias_.data());
  return lm_loss_or_throw([&] { return masked_cross_entropy<T>(cmap(logits_), labels_.data(), nullptr, 0.0); },
                          "evaluate_loss", false);
}

namespace {
// The block's attention when it is linear attention (its RNN step generates), else nullptr.
template <typename T>
const LinearMultiHeadAttention<T>* linear_attention(const LanguageModelBlock<T>& block) {
  return dynamic_cast<const LinearMultiHeadAttention<T>*>(block.self_attention_.get());
}
template <typename T>
const SoftmaxSelfAttention<T>* softmax_attention(const LanguageModelBlock<T>& block) {
  return dynamic_cast<const SoftmaxSelfAttention<T>*>(block.self_attention_.get());
}
}  // namespace

template <typename T>
bool LanguageModel<T>::has_cached_step() const {
  return !reversible_ && attention_kind(config_.attention).has_cached_step();
}

template <typename T>
void LanguageModel<T>::set_memory_length(Index length) {
  TCPP_CHECK(length >= 0, "LanguageModel.set_memory_length: the memory length must be >= 0, got ", length);
  TCPP_CHECK(length == 0 || attention_kind(config_.attention).memory, "LanguageModel.set_memory_length: a memory ",
             "needs attention ", quoted_attention_kinds(takes_memory), ", the model has '", config_.attention, "'");
  memory_length_ = length;
  for (auto& layer : layers_) {
    layer->memory_length_ = length;
    layer->reset_memory();
  }
}

template <typename T>
void LanguageModel<T>::set_clamp_len(Index clamp) {
  TCPP_CHECK(clamp >= -1, "LanguageModel.set_clamp_len: the clamp length must be >= 0 (or -1: none), got ", clamp);
  TCPP_CHECK(clamp < 0 || attention_kind(config_.attention).memory, "LanguageModel.set_clamp_len: a clamp length ",
             "needs attention ", quoted_attention_kinds(takes_memory), ", the model has '", config_.attention, "'");
  clamp_len_ = clamp;
  for (auto& layer : layers_)
    if (layer->relative_ != nullptr) layer->relative_->set_clamp_len(clamp);
}

template <typename T>
Index LanguageModel<T>::memory_held() const {
  return layers_.empty() ? 0 : layers_.front()->memory_held_;
}

template <typename T>
void LanguageModel<T>::reset_memory() {
  for (auto& layer : layers_) layer->reset_memory();
}

template <typename T>
void LanguageModel<T>::set_memory_update(bool update) {
  memory_update_ = update;
  for (auto& layer : layers_) layer->update_memory_ = update;
}

template <typename T>
void LanguageModel<T>::infer_start(Index rows, Index capacity, LanguageModelState<T>& state) {
  TCPP_CHECK(!reversible_, "LanguageModel: reversible blocks have no cached generation step; generate with ",
             "forward() over the context instead");
  TCPP_CHECK(has_cached_step(), "LanguageModel: attention '", config_.attention,
             "' has no cached generation step; generate with forward() over the context instead");
  TCPP_CHECK(rows >= 1 && capacity >= 1, "LanguageModel.infer_start: rows and capacity must be >= 1, got ", rows,
             " and ", capacity);
  const double d = static_cast<double>(config_.d_model), L = static_cast<double>(config_.n_layers);
  const double dk = d / static_cast<double>(config_.n_heads);
  const AttentionKind& kind = attention_kind(config_.attention);
  const bool relative = kind.memory;  // positions encoded by the attention: no positional table
  if (kind.step == GenerationStep::RecurrentState)
    // S (d_k x d_k) and z (d_k) per (sequence, head, block), whatever the capacity
    check_memory("LanguageModel.infer_start", concat("linear-attention states of ", rows, " sequences"),
                 L * static_cast<double>(rows) * static_cast<double>(config_.n_heads) * (dk * dk + dk) *
                     static_cast<double>(sizeof(T)));
  else
    check_memory(
        "LanguageModel.infer_start", concat("key/value caches of ", rows, " sequences of ", capacity, " positions"),
        2.0 * L * static_cast<double>(rows) * static_cast<double>(capacity) * d * static_cast<double>(sizeof(T)));
  check_finite_parameters(parameters(), "LanguageModel.infer_start");
  if (!relative) embedding_.reserve_positions(capacity);
  state.caches.clear();
  state.linear.clear();
  state.relative.clear();
  for (const auto& layer : layers_) {
    if (layer->relative_ != nullptr) {
      // the keys and values of the last capacity - 1 positions: a step sees at most `capacity`
      state.relative.emplace_back();
      state.relative.back().reset(rows, capacity - 1);
    } else if (const auto* lin = linear_attention(*layer)) {
      state.linear.emplace_back();
      lin->reset_state(state.linear.back(), rows);
    } else {
      state.caches.emplace_back();
      state.caches.back().reset(rows, capacity, config_.d_model);
    }
  }
  state.rows = rows;
  state.length = 0;
  state.capacity = capacity;
  state.backend.begin(ComputeType::Float32, false, true);
}

template <typename T>
const Matrix<T>& LanguageModel<T>::infer_step(const std::int64_t* tokens, LanguageModelState<T>& state) {
  const Index R = state.rows, t = state.position(), V = config_.vocab_size;
  TCPP_CHECK(R >= 1 && state.caches.size() + state.linear.size() + state.relative.size() == layers_.size(),
             "LanguageModel.infer_step: call infer_start first");
  const bool relative = !state.relative.empty();
  TCPP_CHECK(relative || t < state.capacity, "LanguageModel.infer_step: ", t,
             " positions were fed, the capacity given to infer_start; start again with a larger capacity");
  InferenceScratch<T>& s = state.scratch;
  if (relative) {
    // x = embedding[token] * sqrt(d) (relative attention adds no positional encoding)   (R, d)
    const Matrix<T>& w = embedding_.embedding().weight_;
    const T scale = static_cast<T>(std::sqrt(static_cast<double>(config_.d_model)));
    s.x.resize(R, config_.d_model);
    for (Index r = 0; r < R; ++r) {
      TCPP_CHECK(tokens[r] >= 0 && tokens[r] < config_.vocab_size, "LanguageModel.infer_step: token id ", tokens[r],
                 " is out of range for vocab_size ", config_.vocab_size);
      s.x.row(r) = w.row(tokens[r]) * scale;
    }
  } else {
    // x = embedding[token] * sqrt(d) + PE[t]                                      (R, d)
    embedding_.infer(R, [&](Index r) { return std::make_pair(tokens[r], t); }, s.x);
  }
  size_t n_cache = 0, n_linear = 0, n_relative = 0;
  for (size_t l = 0; l < layers_.size(); ++l) {
    LanguageModelBlock<T>& block = *layers_[l];
    // the two residual sub-layers of forward(), without dropout: the new position attends to the
    // positions before and itself (softmax: append its key and value to the cache; linear: add
    // phi(k)^T v and phi(k) to the state), then the feed-forward network
    if (block.relative_ != nullptr) {
      RelativeAttentionCache<T>& cache = state.relative[n_relative++];
      residual_infer<T>(
          block.pre_norm_, block.norm1_,
          [&](const Matrix<T>& in, Matrix<T>& out) { block.relative_->infer(cmap(in), 1, cache, state.backend, out); },
          s.x, s.n, s.a);
    } else if (const auto* lin = linear_attention(block)) {
      LinearAttentionState<T>& st = state.linear[n_linear++];
      residual_infer<T>(
          block.pre_norm_, block.norm1_,
          [&](const Matrix<T>& in, Matrix<T>& out) { lin->step(cmap(in), st, state.backend, out); }, s.x, s.n, s.a);
    } else {
      const MultiHeadAttention<T>& attn = softmax_attention(block)->attention();
      KVCache<T>& cache = state.caches[n_cache++];
      residual_infer<T>(
          block.pre_norm_, block.norm1_,
          [&](const Matrix<T>& in, Matrix<T>& out) { attn.infer_step(in, cache, state.backend, s, out); }, s.x, s.n,
          s.a);
    }
    residual_infer<T>(
        block.pre_norm_, block.norm2_,
        [&](const Matrix<T>& in, Matrix<T>& out) { block.feed_forward_.infer(in, state.backend, s, out); }, s.x, s.n,
        s.a);
  }
  ++state.length;
  const Matrix<T>* y = &s.x;
  if (final_norm_) {
    s.n.resize(R, s.x.cols());
    final_norm_->forward_inference(s.x.data(), nullptr, s.n.data(), R);
    y = &s.n;
  }
  // logits = y W^T + b                                                          (R, V)
  state.backend.linear(*y, output_weight(), out_bias_.data(), V, state.logits);
  return state.logits;
}

template <typename T>
ParameterList<T> LanguageModel<T>::parameters() {
  ParameterList<T> ps;
  append_parameters(ps, embedding_.parameters(), "embedding");
  if (reversible_) append_parameters(ps, reversible_->parameters(), "");
  for (size_t i = 0; i < layers_.size(); ++i)
    append_parameters(ps, layers_[i]->parameters(), "layers." + std::to_string(i));
  if (final_norm_) append_parameters(ps, final_norm_->parameters(), "norm");
  append_output_parameters(ps, config_.share_embeddings, out_weight_, dout_weight_, out_bias_, dout_bias_);
  return ps;
}

template <typename T>
void LanguageModel<T>::zero_grad() {
  embedding_.zero_grad();
  if (reversible_) reversible_->zero_grad();
  for (auto& l : layers_) l->zero_grad();
  if (final_norm_) final_norm_->zero_grad();
  dout_weight_.setZero();
  dout_bias_.setZero();
}

template <typename T>
std::vector<Dropout<T>*> LanguageModel<T>::dropouts() {
  std::vector<Dropout<T>*> ds{&dropout_};
  if (reversible_)
    for (auto* d : reversible_->dropouts()) ds.push_back(d);
  for (auto& l : layers_)
    for (auto* d : l->dropouts()) ds.push_back(d);
  return ds;
}

template <typename T>
void LanguageModel<T>::set_dropout_calls(std::uint64_t calls) {
  for (auto* d : dropouts()) d->set_calls(calls);
}

template <typename T>
void LanguageModel<T>::set_dropout_seed(std::uint64_t seed) {
  for (auto* d : dropouts()) d->set_seed(seed);
}

template class LanguageModelBlock<float>;
template class LanguageModelBlock<double>;
template class LanguageModel<float>;
template class LanguageModel<double>;

}  // namespace transformer

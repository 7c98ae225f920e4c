// language_model.hpp — the decoder-only (GPT-style) language model: token embedding * sqrt(d) +
// sinusoidal positions, N blocks of causal self-attention and feed-forward network with residual
// connections, an output projection to the vocabulary, softmax cross-entropy and Adam.
//
// post-norm (the paper's):   h = LN1(x + Dropout(Attn(x)))          y = LN2(h + Dropout(FFN(h)))
// pre-norm (GPT-2, default): h = x + Dropout(Attn(LN1(x)))          y = h + Dropout(FFN(LN2(h)))
//                            and a final LN after the last block
// logits = y W^T + b, W (V, d) the token embedding's weight when share_embeddings.
//
// The block's attention is any SelfAttention<T> (self_attention.hpp), made by name from the
// configuration's `attention` (make_self_attention): "softmax", "linear", "lsh" or "relative".
//
// reversible (Reformer): the blocks are a ReversibleStack (reversible.hpp) instead, pre-norm:
//   x1 = x2 = x;  y1 = x1 + Dropout(Attn(LN1(x2))),  y2 = x2 + Dropout(FFN(LN2(y1)));  h = (y1 + y2) / 2
// then the final LN. Backward rebuilds each block's inputs from its outputs, so the activations of
// one block are held, whatever the depth. A different function from the stack of ordinary blocks.
//
// LSH attention draws random rotations: the model's draw them from the number of updates taken
// (the optimizer's step count), so every training step hashes anew, while evaluation, the gradient
// of compute_gradients and a resumed run are deterministic.
//
// attention "relative" (Transformer-XL, Dai et al. 2019): no absolute positional encoding is added
// to the embedding; each block's RelativeMultiHeadAttention (relative_attention.hpp) encodes the
// distance between query and key, and attends to the current segment plus a memory: its own
// inputs at the last memory_length positions before the segment, kept from the previous forward
// (segment-level recurrence). The memory is a stop-gradient input: backward sends no gradient
// into it. Consecutive forwards must therefore feed consecutive segments of the same B texts;
// reset_memory() starts afresh (a new text, or a stripe that wrapped around).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transformer/attention/attention.hpp"
#include "transformer/attention/linear_attention.hpp"
#include "transformer/attention/lsh_attention.hpp"
#include "transformer/attention/relative_attention.hpp"
#include "transformer/attention/self_attention.hpp"
#include "transformer/attention/tiled_attention.hpp"
#include "transformer/core/config.hpp"
#include "transformer/core/gradient_buffer.hpp"
#include "transformer/kernels/inference_backend.hpp"
#include "transformer/layers/dropout.hpp"
#include "transformer/layers/embedding.hpp"
#include "transformer/layers/feed_forward.hpp"
#include "transformer/layers/layer_norm.hpp"
#include "transformer/layers/loss.hpp"
#include "transformer/models/optimizer.hpp"
#include "transformer/models/reversible.hpp"

namespace transformer {

// The model's configuration. As for TransformerConfig, each member is listed once more in
// ConfigTable<LanguageModelConfig> (language_model.cpp) with what it allows; checks, the Python
// class, keyword arguments, checkpoint JSON and command-line options come from the member and its
// row.
struct LanguageModelConfig {
  std::int64_t vocab_size = 0;        // tokens, the padding id 0 included
  std::int64_t d_model = 256;         // model width
  std::int64_t n_layers = 4;          // blocks
  std::int64_t n_heads = 4;           // attention heads, d_k = d_model / n_heads
  std::int64_t d_ff = 1024;           // inner width of the feed-forward network
  double dropout = 0.1;               // on the embedding, the sub-layer outputs and inside the feed-forward network
  std::int64_t max_len = 1024;        // positional-table rows built up front (a cache: longer inputs extend it)
  std::string attention = "softmax";  // the blocks' self-attention (self_attention_kinds())
  std::int64_t memory_length = 0;     // "relative": positions of the preceding text each block attends to
  std::int64_t lsh_hashes = 4;        // LSH attention: hash rounds
  std::int64_t lsh_chunk = 64;        // LSH attention: positions per chunk
  std::int64_t lsh_buckets = 0;       // LSH attention: buckets per round, even; 0: 2 * max(1, T / lsh_chunk)
  bool reversible = false;            // the blocks as a reversible stack (pre-norm; activations of one block)
  bool pre_norm = true;               // x + F(LN(x)) and a final LayerNorm (GPT-2), or LN(x + F(x)) (the paper)
  bool share_embeddings = true;       // the output projection is the token embedding
  std::uint64_t seed = 0;
};

template <>
struct ConfigTable<LanguageModelConfig> {
  static const char* owner() { return "LanguageModel"; }
  static const std::vector<ConfigField<LanguageModelConfig>>& fields();
};

// Throw std::invalid_argument (ValueError) naming the first bad field and what is allowed: every
// field against its row, then d_model divisible by n_heads, an even lsh_buckets, and reversible
// blocks only pre-norm.
void check_config(const LanguageModelConfig& c);

// One block: the causal self-attention and the feed-forward network as residual sub-layers
// (stack.hpp), post-norm or pre-norm.
template <typename T>
class LanguageModelBlock {
 public:
  LanguageModelBlock(const LanguageModelConfig& c, std::uint64_t seed);

  // x (B*T, d) -> (B*T, d); `x` must stay alive until backward().
  const Matrix<T>& forward(ConstMatrixMap<T> x, Index B, Index T_len, bool training);
  const Matrix<T>& backward(ConstMatrixMap<T> dout);  // -> dx (B*T, d); parameter gradients accumulate

  ParameterList<T> parameters();  // self_attention.*, norm1.*, feed_forward.*, norm2.*
  void zero_grad() { zero_grads(*self_attention_, norm1_, feed_forward_, norm2_); }
  std::vector<Dropout<T>*> dropouts();

  std::unique_ptr<SelfAttention<T>> self_attention_;
  LayerNorm<T> norm1_;
  FeedForward<T> feed_forward_;
  LayerNorm<T> norm2_;
  bool pre_norm_;

  // ---- relative attention's segment memory (attention "relative"; otherwise unused)
  RelativeMultiHeadAttention<T>* relative_ = nullptr;  // self_attention_ when it is relative attention
  Index memory_length_ = 0;                            // positions kept after each forward
  bool update_memory_ = true;                          // false: the memory stays as it is (a constant input)
  Index memory_batch_ = 0;                             // sequences the memory holds
  Index memory_held_ = 0;                              // positions held per sequence, <= memory_length_
  Matrix<T> memory_;                                   // (memory_batch_*memory_held_, d) the attention's inputs
  void reset_memory() { memory_batch_ = memory_held_ = 0; }

 private:
  // Relative attention over [memory ; in], then the memory becomes the last memory_length_ rows of
  // [memory ; in] of each sequence (when update_memory_).                in (B*T, d) -> (B*T, d)
  const Matrix<T>& relative_forward(ConstMatrixMap<T> in, Index B, Index T_len);
  Matrix<T> memory_next_;  // (B*memory_length_, d) the next memory, swapped in
  Dropout<T> dropout1_, dropout2_;
  bool has_forward_ = false;
  Matrix<T> r1_, out_;        // pre-norm residual sums (B*T, d)
  Matrix<T> dtmp_, dh_, dx_;  // (B*T, d) gradient buffers
};

// The generation state of R sequences: each block's attention state over the positions fed so far
// (softmax attention: keys and values; linear attention: the RNN state S and z, of constant size),
// buffers, and the last step's logits.
template <typename T>
struct LanguageModelState {
  std::vector<KVCache<T>> caches;               // one per block (softmax attention)
  std::vector<LinearAttentionState<T>> linear;  // one per block (linear attention)
  InferenceBackend<T> backend;                  // plain float products
  InferenceScratch<T> scratch;
  Matrix<T> logits;  // (R, V)
  Index rows = 0;
  Index length = 0;    // positions fed so far
  Index capacity = 0;  // positions there is room for
  Index position() const { return length; }
  // the keys and values of the last positions of each block (relative attention)
  std::vector<RelativeAttentionCache<T>> relative;
};

template <typename T>
class LanguageModel : public TrainableModel<T> {
 public:
  // Checks the configuration (check_config) and the memory the weights need first.
  explicit LanguageModel(const LanguageModelConfig& config);

  // tokens (B, T) -> logits (B*T, V); row b*T + t predicts the token after tokens[b, t].
  const Matrix<T>& forward(ConstTokenMap tokens, bool training);
  // dlogits (B*T, V) of the last forward: accumulates every parameter gradient.
  void backward(ConstMatrixMap<T> dlogits);
  // tokens (B, T+1): inputs tokens[:, :-1], labels tokens[:, 1:] (label 0, padding, is ignored).
  // zero_grad, forward (training), mean cross-entropy, backward, clipping, one Adam step. Refuses
  // (NonFiniteError, nothing changed) non-finite weights, loss, gradient norm or update.
  LossStats train_step(ConstTokenMap tokens);
  // Throws MemoryError-style std::runtime_error (check_memory) when a training step on a batch of
  // `batch` sequences of `length` tokens (T+1, as train_step takes them) needs more memory than
  // there is, before any batch is built; `who` names the caller.
  void check_batch(Index batch, Index length, const char* who) const;
  // The same loss and gradients as train_step, without the update (gradients stay in parameters()).
  LossStats compute_gradients(ConstTokenMap tokens, bool training);
  // train_step's second half on the gradients in parameters() (compute_gradients', or a sum of
  // several batches' written there: gradient accumulation): clipping, one Adam step, the
  // gradients zeroed. Refuses (NonFiniteError, nothing changed) as train_step does.
  void apply_gradients();
  // The mean cross-entropy in inference mode (no dropout, no update); count = labels scored.
  LossStats evaluate_loss(ConstTokenMap tokens);

  // Generation one position at a time: start R empty sequences with room for `capacity`
  // positions, then feed one token per sequence per step: logits (R, V) of the next. Softmax
  // attention appends to a key/value cache (a step costs O(t)); linear attention advances its
  // recurrent state (a step costs the same at every position).
  void infer_start(Index rows, Index capacity, LanguageModelState<T>& state);
  const Matrix<T>& infer_step(const std::int64_t* tokens, LanguageModelState<T>& state);
  // Whether infer_step can run (the blocks' attention has a step): softmax, linear or relative
  // attention in ordinary blocks (relative attention keeps the keys and values of the last
  // capacity - 1 positions: a sliding window, so steps go on past `capacity`). LSH attention and
  // reversible blocks have none: generate with forward() over the context.
  bool has_cached_step() const;

  // Relative attention's segment memory (attention "relative"). Every forward (training or not)
  // attends to the memory and then keeps its last memory_length() positions. Changing the length
  // (0 to keep none; any length, longer than in training too) starts from an empty memory.
  Index memory_length() const { return memory_length_; }
  void set_memory_length(Index length);
  Index memory_held() const;  // positions the memory holds now
  void reset_memory();
  // false: forwards attend to the memory but leave it as it is (a constant input, e.g. for a
  // gradient check); true (default): the memory moves on with each forward.
  void set_memory_update(bool update);
  bool memory_update() const { return memory_update_; }
  // Relative attention: distances beyond clamp_len() are encoded as clamp_len() (Transformer-XL's
  // clamp_len: with a memory longer than in training, the farthest positions meet no distance the
  // model never saw); -1 (default): no clamp. The next forward or start of generation uses it.
  Index clamp_len() const { return clamp_len_; }
  void set_clamp_len(Index clamp);

  // embedding.weight, layers.i.* (reversible: ReversibleStack's names), (pre-norm) norm.*, (untied)
  // output.weight, output.bias
  ParameterList<T> parameters() override;
  void zero_grad();
  const LanguageModelConfig& config() const { return config_; }
  std::uint64_t dropout_calls() const { return dropout_.calls(); }
  void set_dropout_calls(std::uint64_t calls);
  void set_dropout_seed(std::uint64_t seed);
  std::vector<Dropout<T>*> dropouts();

  PositionalEmbedding<T> embedding_;
  std::vector<std::unique_ptr<LanguageModelBlock<T>>> layers_;  // ordinary blocks (empty when reversible)
  std::unique_ptr<ReversibleStack<T>> reversible_;              // the blocks when reversible
  std::unique_ptr<LayerNorm<T>> final_norm_;                    // pre-norm only
  RowVector<T> out_bias_;                                       // (V)
  GradientBuffer<T> dout_bias_;                                 // (1, V)

 private:
  T* output_weight();
  T* output_weight_grad();
  void check_tokens(ConstTokenMap tokens, Index min_length, const char* who);
  void check_activations(double B, double Tl, const char* who) const;
  // inputs tokens[:, :-1] into inputs_, labels tokens[:, 1:] into labels_
  void split_shifted(ConstTokenMap tokens);
  // dy_ -> the blocks (and final norm) in reverse, the input dropout, the embedding
  void blocks_backward();
  // embedding, blocks, final norm: the last hidden states (B*T, d)
  const Matrix<T>& hidden(ConstTokenMap tokens, bool training);
  // The training loss over the hidden states y (B*T, d) and labels_: the output layer, the loss
  // and the output layer's gradients, with d loss / d y into dy_; chunked or the unfused
  // reference, see set_output_chunk_rows.
  LossStats output_loss(const Matrix<T>& y);

  // LSH attention of the blocks (hash counter frozen; set to the step count before each forward)
  std::vector<LSHSelfAttention<T>*> lsh_;
  LanguageModelConfig config_;
  Dropout<T> dropout_;                 // after the embedding
  Matrix<T> out_weight_;               // (V, d) when not tied
  GradientBuffer<T> dout_weight_;      // (V, d) when not tied
  Index B_ = -1, T_ = 0;               // shape of the last forward (-1: none that backward may follow)
  const Matrix<T>* y_ = nullptr;       // (B*T, d) the last hidden states
  Matrix<T> x_;                        // (B*T, d) embedded and dropped-out input
  Matrix<T> logits_;                   // (B*T, V) of forward, evaluate_loss and the unfused loss
  Matrix<T> dy_, dx_;                  // (B*T, d)
  Matrix<T> loss_partial_;             // scratch of the unfused loss's bias gradient
  OutputLossScratch<T> loss_scratch_;  // one chunk of logits of the chunked loss
  TokenMatrix inputs_;                 // (B, T)
  std::vector<std::int64_t> labels_;   // (B*T)
  Index memory_length_ = 0;
  bool memory_update_ = true;
  Index clamp_len_ = -1;
};

}  // namespace transformer

// transformer.hpp — the encoder-decoder Transformer: encoder, decoder, and the final linear layer
// to target-vocabulary logits; training step (forward, masked loss, backward, Adam) in one call.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "transformer/core/config.hpp"
#include "transformer/core/gradient_buffer.hpp"
#include "transformer/kernels/matmul.hpp"
#include "transformer/layers/loss.hpp"
#include "transformer/models/decoder.hpp"
#include "transformer/models/encoder.hpp"
#include "transformer/models/optimizer.hpp"

namespace transformer {

// The model's configuration. Each member is listed once more, with what it allows, in the table
// ConfigTable<TransformerConfig> below (a member missing from it is an error when the table is
// first used); everything else (checks, the Python class, keyword arguments, checkpoint JSON,
// command-line options) is derived from the member and its row.
struct TransformerConfig {
  Index src_vocab_size = 0;
  Index tgt_vocab_size = 0;
  Index d_model = 512;         // model width
  Index n_layers = 6;          // encoder layers = decoder layers, unless one of the next two says otherwise
  Index n_encoder_layers = 0;  // 0: n_layers
  Index n_decoder_layers = 0;  // 0: n_layers
  Index n_heads = 8;           // attention heads, d_k = d_model / n_heads
  Index d_ff = 2048;           // inner width of the feed-forward network
  double dropout = 0.1;        // on embeddings, sub-layer outputs and inside the feed-forward network
  Index max_length = 2048;     // positional-table rows built up front (a cache: longer inputs extend it)
  PositionalLayout layout = PositionalLayout::Interleaved;
  bool pre_norm = false;                     // post-norm as in the paper by default
  bool share_embeddings = false;             // tie the decoder embedding and the output projection
  bool share_source_embedding = false;       // the encoder uses the decoder's embedding (one vocabulary)
  Activation activation = Activation::Relu;  // of the feed-forward networks
  bool scale_embedding = true;               // embeddings multiplied by sqrt(d_model)
  // the special token ids: padding (masked, skipped by the loss), the decoder's first input, the end
  std::int64_t pad_id = 0;
  std::int64_t start_id = 1;
  std::int64_t end_id = 2;
  double layer_norm_eps = 1e-6;
  std::uint64_t seed = 0;
  // The encoder's self-attention and the decoder's masked self-attention: kinds of kinds.hpp that
  // fits_encoder_self_attention / fits_decoder_self_attention; the cross-attention is softmax.
  std::string encoder_attention = "softmax";
  std::string decoder_attention = "softmax";
  // The matrix products of every dense layer (attention projections, feed-forward, output layer),
  // forward and backward: float32, or bfloat16 inputs with float32 sums (AVX512_BF16). Weights,
  // gradients, Adam, LayerNorm, softmax, attention scores and the loss stay float32 either way.
  Precision precision = Precision::Float32;
};

// The enums of TransformerConfig by name, for its table (see detail::from_value).
inline void parse_name(const std::string& name, PositionalLayout& out) { out = parse_positional_layout(name); }
inline void parse_name(const std::string& name, Precision& out) { out = parse_precision(name); }
inline void parse_name(const std::string& name, Activation& out) { out = parse_activation(name); }

// The layer counts in use: n_encoder_layers / n_decoder_layers, or n_layers where they are 0.
inline Index encoder_layers(const TransformerConfig& c) {
  return c.n_encoder_layers > 0 ? c.n_encoder_layers : c.n_layers;
}
inline Index decoder_layers(const TransformerConfig& c) {
  return c.n_decoder_layers > 0 ? c.n_decoder_layers : c.n_layers;
}

// The tables. A row: the member, its name, what it allows, a line of help (Python's docstring and
// the command line's --help), and its option (the name of the command line's option and of the
// training setting, when not the member's; kNoOption: a field the program sets). Help text is
// written for a command-line user and a Python user alike.
template <>
struct ConfigTable<TransformerConfig> {
  static const char* owner() { return "Transformer"; }
  static const std::vector<ConfigField<TransformerConfig>>& fields();
};

// Throw std::invalid_argument (ValueError) naming the first bad field and what is allowed: every
// field against its row of the table (check_fields), then what involves several (d_model divisible
// by n_heads; total_steps after the warm-up), the precision available (bf16: float32 models on a
// CPU with AVX512_BF16), and the weights within the memory there is (checked before anything is
// allocated).
template <typename T>
void validate(const TransformerConfig& c);
// validate<T> without what depends on the scalar type and the machine (precision, memory): every
// field against its row and the combinations.
void check_config(const TransformerConfig& c);

// The inference state of a batch being decoded (inference/decoding.hpp): the encoder's output, the decoder's
// caches, buffers and the last step's logits. Reused from batch to batch (buffers grow, never
// shrink, so steady decoding at a fixed shape allocates nothing).
template <typename T>
struct InferenceState {
  Matrix<T> memory;  // (source rows, d) the encoder's output, its rows in decoder.memory_rows
  DecoderCache<T> decoder;
  InferenceScratch<T> scratch;
  Matrix<T> logits;  // (R, V)
  Index rows() const { return decoder.rows(); }
  Index position() const { return decoder.position(); }
  Index sentence_of(Index row) const { return decoder.sentence_of[static_cast<size_t>(row)]; }
  // Keep rows: new row i is old row rows[i] with its caches (rows may repeat: beam expansion).
  void select_rows(const std::vector<Index>& rows) { decoder.select_rows(rows, scratch.gather); }
};

template <typename T>
class Transformer : public TrainableModel<T> {
 public:
  explicit Transformer(const TransformerConfig& config);

  // src (B, S), tgt_in (B, T) token ids -> logits (B*T, V_tgt), valid until the next pass.
  ConstMatrixMap<T> forward(ConstTokenMap src, ConstTokenMap tgt_in, bool training);
  // dlogits (B*T, V_tgt): accumulates every parameter gradient.
  void backward(ConstMatrixMap<T> dlogits);
  // zero_grad, forward (training), masked loss, backward, clipping, one Adam step.
  // Refuses (NonFiniteError, nothing changed) non-finite weights, a non-finite loss or gradient
  // norm, and an update that would make a weight or an Adam moment non-finite.
  LossStats train_step(ConstTokenMap src, ConstTokenMap tgt_in, ConstTokenMap tgt_out);
  // forward (inference) and masked loss/accuracy, no update. train_step and evaluate compute only
  // the positions the loss depends on (padding rows removed); the result equals the padded pass.
  LossStats evaluate(ConstTokenMap src, ConstTokenMap tgt_in, ConstTokenMap tgt_out);

  // Data parallelism (several processes, one gradient sum per step): train_step in two halves
  // around a sum of flat_gradients() over the processes (an MPI all-reduce in Python).
  // compute_gradients is train_step's first half: the same checks, forward, masked loss and
  // backward, then every parameter gradient multiplied by grad_scale is copied into
  // flat_gradients() (parameters() order) and the layers' gradients are zeroed. Nothing else
  // changes: no weight, Adam moment or step count. A non-finite loss throws NonFiniteError.
  // With accumulate, the scaled gradients are added to flat_gradients() instead (gradient
  // accumulation: one update from several batches); it needs gradients not yet applied.
  LossStats compute_gradients(ConstTokenMap src, ConstTokenMap tgt_in, ConstTokenMap tgt_out, double grad_scale,
                              bool accumulate = false);
  // The contiguous gradient buffer: flat_parameter_count() gradient values, then kFlatSpareSlots
  // values the caller may use to sum its own numbers along with the gradients (same all-reduce).
  static constexpr Index kFlatSpareSlots = 8;
  T* flat_gradients();  // allocated on first use, never reallocated afterwards
  // A process with no share of a batch (or whose share failed) adds zeros: flat_gradients() set to
  // 0, ready for the sum and apply_gradients, as after compute_gradients.
  void zero_flat_gradients();
  Index flat_parameter_count();
  // train_step's second half on flat_gradients() (each value multiplied by grad_scale first):
  // the global norm, summed in a fixed order whatever the thread count (so processes that use
  // different thread counts clip alike), clipping, one Adam step. Refuses, changing nothing, as
  // train_step does. Every process that applies the same flat buffer gets the same weights.
  void apply_gradients(double grad_scale);
  // The norm apply_gradients uses (of flat_gradients() * grad_scale), without changing anything.
  double flat_gradient_norm(double grad_scale) const;

  // Inference (kernels/inference_backend.hpp; greedy and beam search call these): encode src (B, S) once and
  // prepare `state` for up to max_steps decoder positions of one hypothesis per sentence (row r
  // of sentence r). Grows the positional tables when they are shorter; changes nothing else.
  void infer_start(ConstTokenMap src, Index max_steps, InferenceBackend<T>& be, InferenceState<T>& state);
  // Feed tokens[r] at the next position of every row of `state`: logits (R, V), in state.logits.
  const Matrix<T>& infer_step(const std::int64_t* tokens, InferenceBackend<T>& be, InferenceState<T>& state) const;

  ParameterList<T> parameters() override;
  void zero_grad();
  const TransformerConfig& config() const { return config_; }
  // The next train_step / evaluate / forward may skip its check that every weight is finite (a pass
  // over all of them, a read of the whole model per step): for a caller that knows nothing can have
  // written the weights since a call that left them finite (a successful train_step: its update is
  // checked element by element). Applies to the next call only (false withdraws it).
  void vouch_weights_finite(bool vouched = true) { weights_vouched_ = vouched; }
  // The kernel of every softmax attention's training forward and backward (the layers' self-
  // and cross-attention; AttentionImpl): Auto, the default, runs the tiled kernel from
  // tuning::kTiledAttentionMinLength keys on, whose memory grows linearly with the length but
  // which keeps no attention weights; Plain keeps them at every length.
  void set_attention_impl(AttentionImpl impl);
  AttentionImpl attention_impl() const { return impl_; }
  // Number of training forwards so far: the dropout masks' counter (restored on resume).
  std::uint64_t dropout_calls() const;
  void set_dropout_calls(std::uint64_t calls);
  void set_dropout_seed(std::uint64_t seed);

  // the last forward's or evaluate's logits (rows, V); after train_step with the unfused
  // reference loss, d loss / d logits
  ConstMatrixMap<T> logits() const { return ConstMatrixMap<T>(logits_.get(), logits_rows_, config_.tgt_vocab_size); }
  Encoder<T>& encoder() { return *encoder_; }
  Decoder<T>& decoder() { return *decoder_; }

  // Output projection: logits = y W^T + b with W (V, d) own or tied to the decoder embedding.
  T* output_weight();
  const T* output_weight() const;
  T* output_weight_grad();
  RowVector<T> out_bias_;        // (V)
  GradientBuffer<T> dout_bias_;  // (1, V)

 private:
  // forward over the rows to compute: all (pack = false) or, with pack, only those that the loss on
  // tgt_out depends on; returns logits (rows, V)
  ConstMatrixMap<T> run(ConstTokenMap src, ConstTokenMap tgt_in, const std::int64_t* tgt_out, bool training, bool pack);
  // run's encoder and decoder: the decoder's output y (rows, d), before the output layer
  const Matrix<T>& run_hidden(ConstTokenMap src, ConstTokenMap tgt_in, const std::int64_t* tgt_out, bool training,
                              bool pack);
  // logits = y W^T (+ b with add_bias) into the logits buffer
  ConstMatrixMap<T> output_logits(const Matrix<T>& y, bool add_bias);
  // The training loss after run_hidden (training, packed): the output layer, the masked loss and
  // every gradient (the output layer's, then the decoder's and the encoder's backward); chunked
  // or the unfused reference, see set_output_chunk_rows. `who` names the step in errors.
  LossStats loss_and_backward(ConstTokenMap tgt_out, const char* who);
  MatrixMap<T> logits_mut() { return MatrixMap<T>(logits_.get(), logits_rows_, config_.tgt_vocab_size); }
  // every gradient from dlogits (rows, V); bias_grad_done: the output bias's gradient is already in
  void backward_rows(ConstMatrixMap<T> dlogits, bool bias_grad_done);
  const std::int64_t* row_targets(ConstTokenMap tgt_out);  // tgt_out for the decoder's computed rows
  std::vector<std::int64_t> targets_;
  AttentionImpl impl_ = AttentionImpl::Auto;
  // Shapes, then the memory the pass will need (before it allocates); then finite weights, unless
  // the caller vouched for them (vouch_weights_finite) just before this call.
  void check_batch(ConstTokenMap src, ConstTokenMap tgt, const char* who);
  bool weights_vouched_ = false;  // see vouch_weights_finite(); consumed by the next check_batch
  TransformerConfig config_;
  std::unique_ptr<Encoder<T>> encoder_;
  std::unique_ptr<Decoder<T>> decoder_;
  Matrix<T> out_weight_;           // (V, d) when not tied
  GradientBuffer<T> dout_weight_;  // (V, d) when not tied
  Index B_ = -1, T_ = 0;
  // (rows, V) logits; after train_step, d loss / d logits (computed in place). The buffer only
  // grows: the row count changes from batch to batch, and a buffer this large (tens of MB) freed
  // and allocated again each step comes back from the OS as fresh pages, each one faulted in and
  // zeroed while the product writes it. 64-byte aligned, so that the vectorised loss pass splits
  // every row the same way (and sums it in the same order) wherever the buffer lands.
  struct FreeAligned {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T[], FreeAligned> logits_;
  size_t logits_capacity_ = 0;  // values
  Index logits_rows_ = 0;
  Matrix<T> dy_;                       // (B*T, d); grows only, the rows of a step are its first rows
  Matrix<T> loss_partial_;             // (row blocks, V) scratch of the unfused loss's bias gradient
  OutputLossScratch<T> loss_scratch_;  // one chunk of logits of the chunked loss
  bool grads_zero_ = false;            // the last train_step's fused Adam pass left every gradient at 0
  std::vector<T> flat_grads_;          // (parameters + kFlatSpareSlots): see flat_gradients()
  bool flat_pending_ = false;          // compute_gradients filled flat_grads_ and apply_gradients has not run
};

}  // namespace transformer

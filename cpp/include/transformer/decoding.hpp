// decoding.hpp — fast inference: greedy and beam search over an incremental (KV-cached) decoder.
//
// The encoder runs once per batch. For every decoder layer the cross-attention keys and values
// of the memory are projected once per sentence, and the self-attention keys and values of each
// hypothesis are appended to a cache one position per step, so step t costs O(t) attention work
// and O(1) projections instead of re-running the decoder on the whole prefix.
//
// Generation never emits the padding id 0 (its logit is treated as -inf), so outputs can be
// padded with 0 after the end token.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "transformer/decode_kernels.hpp"
#include "transformer/quantized_linear.hpp"
#include "transformer/transformer.hpp"

namespace transformer {

// One dense layer's weight packed for decoding: float32 panels (PackedLinear), or int8 / bf16
// (QuantizedLinear), by the compute type it was packed for.
template <typename T>
struct DecodeLinear {
  ComputeType type = ComputeType::Float32;
  PackedLinear<T> f32;
  QuantizedLinear low;  // float models only

  void pack(ComputeType t, const T* W, Index N, Index K, Index ldw, const T* b);
  // y (R, N) = x (R, K) W^T + b
  void apply(const T* x, Index R, Index ldx, T* y, Index ldy) const;
  Index out_features() const { return type == ComputeType::Float32 ? f32.out_features() : low.out_features(); }
};

// The model's weights (encoder and decoder layers, output projection; not the embeddings) packed
// for PackedLinear (see decode_kernels.hpp), kept between decodes.
// update() fingerprints the model's current weights (one read pass, about a third of the cost of
// packing them) and packs again only when they differ from what is held, so weights changed in
// any way (training, checkpoint loading, writes through the NumPy views) are always seen.
template <typename T>
struct DecodeWeights {
  // Steps with fewer live rows than this use few_rows_linear (no packing pays off at batch 1).
  static constexpr Index kMinRows = 4;
  // Packing float32 weights is worth it only for float builds with the AVX-512 kernels; int8 and
  // bf16 always pack (check_compute_type says whether they can run).
  static bool available() { return std::is_same_v<T, float> && have_decode_kernels(); }
  // Whether a decode of `rows` rows (after the first step) with compute type c uses packed weights.
  static bool wanted(ComputeType c, Index rows) {
    return c != ComputeType::Float32 || (available() && rows >= kMinRows);
  }

  struct Layer {
    DecodeLinear<T> self_qkv, self_out, cross_q, cross_kv, cross_out, ff1, ff2;
  };
  struct EncoderLayer {
    DecodeLinear<T> qkv, out, ff1, ff2;
  };
  std::vector<Layer> layers;                 // the decoder's
  std::vector<EncoderLayer> encoder_layers;  // the encoder's
  DecodeLinear<T> output;

  // Make the packed weights equal to the model's, in compute type c; returns true when it had to
  // pack. With verify false the caller knows the weights are unchanged since the last update:
  // the fingerprint is skipped when this model's weights are held in compute type c.
  bool update(Transformer<T>& model, ComputeType c = ComputeType::Float32, bool verify = true);
  ComputeType compute_type() const { return type_; }

 private:
  // One dense layer as decoding multiplies by it: where it is packed, its (N, K) weight and bias
  // (N) in the model (fused products: several consecutive weights of the same K).
  struct Dense {
    DecodeLinear<T>* slot;
    const T* W;
    const T* b;
    Index N, K;
  };
  // Every dense layer decoding packs, found once by their parameters() names (the one list that
  // the fingerprint and the packing both walk); sizes `layers` and `encoder_layers`.
  std::vector<Dense> dense_layers(Transformer<T>& model);
  ComputeType type_ = ComputeType::Float32;
  bool held_ = false;
  const Transformer<T>* model_ = nullptr;
  std::uint64_t fingerprint_ = 0;
};

template <typename T>
class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(Transformer<T>& model);

  // Encode src (B, S) and prepare caches for up to max_steps positions, one hypothesis per
  // sentence (row r belongs to sentence r). With `packed` (float32: only when
  // DecodeWeights::available()), it is brought up to date with the model's weights in compute type
  // c, and steps use it (float32: those with at least kMinRows rows).
  void start(ConstTokenMap src, Index max_steps, DecodeWeights<T>* packed = nullptr,
             ComputeType c = ComputeType::Float32, bool verify = true);
  // Feed tokens[r] at the next position for every live row; returns logits (R, V).
  const Matrix<T>& step(const std::int64_t* tokens);
  // Keep rows: new row i is old row rows[i] (with its cache); rows may repeat (beam expansion).
  void select_rows(const std::vector<Index>& rows);

  Transformer<T>& model() const { return model_; }
  Index rows() const { return R_; }
  Index position() const { return t_; }
  Index sentence_of(Index row) const { return row_sentence_[static_cast<size_t>(row)]; }

 private:
  struct LayerCache {
    Matrix<T> k, v;    // (R, max_steps * d): row r holds positions 0..t-1 of hypothesis r
    Matrix<T> mk, mv;  // (B*S, d): cross-attention keys/values of the memory, per sentence
  };
  // The encoder's forward on the packed weights, for the non-padding source positions only:
  // the computation of Encoder::forward(src, training = false, pack = true), into memory_.
  void encode_packed(ConstTokenMap src);
  void attention_self(const Matrix<T>& qkv, LayerCache& c, Matrix<T>& ctx);
  void attention_cross(const Matrix<T>& q, const LayerCache& c, Matrix<T>& ctx);

  // y = x W^T + b for the rows of a step, by the fastest kernel that applies            (R, out)
  template <typename WeightMatrix, typename Bias>
  void linear(const Matrix<T>& x, const WeightMatrix& W, const Bias& b, const DecodeLinear<T>* packed,
              Matrix<T>& y) const;

  Transformer<T>& model_;
  DecodeWeights<T>* packed_ = nullptr;
  Index d_, h_, dk_, V_;
  Index B_ = 0, S_ = 0, R_ = 0, t_ = 0, max_steps_ = 0;
  std::vector<LayerCache> caches_;
  std::vector<Index> row_sentence_;
  std::vector<std::uint8_t> src_padding_;  // (B, S)
  // step buffers (R, .)
  Matrix<T> x_, qkv_, q_, ctx_, a_, h1_, h2_, f1_, y_, logits_, tmp_;
  Matrix<T> gather_;  // scratch for select_rows
  Matrix<T> kv_;      // scratch for the memory keys/values in start
  // encode_packed: source rows (non-padding positions in order), sentence b's rows
  // [enc_offset_[b], enc_offset_[b + 1]), activations and the memory (rows, d)
  std::vector<Index> enc_rows_, enc_offset_;
  Matrix<T> ex_, eqkv_, ectx_, ea_, eh_, ef_, memory_;
};

// What a model keeps between decodes: the packed weights and the decoder with its buffers (so
// steady decoding at a fixed batch shape allocates nothing). One per model; not thread-safe.
template <typename T>
struct DecodeWorkspace {
  explicit DecodeWorkspace(Transformer<T>& model) : decoder(model) {}
  IncrementalDecoder<T> decoder;
  // the packed weights of each compute type, packed at its first use (switching between compute
  // types does not repack; each copy follows the weights by its own fingerprint)
  DecodeWeights<T> packs[3];
  DecodeWeights<T>& weights(ComputeType c) { return packs[static_cast<int>(c)]; }
  bool finite_checked = false;  // the last decode found every weight finite
};

// Greedy decoding: (B, L) ids generated after start_id, up to and including end_id, then 0.
// L <= max_length (the positional table grows to max_length rows if it is shorter).
// `workspace` (optional, for `model`) keeps packed weights and buffers between calls.
// `compute` is the matrix products' compute type (quantized_linear.hpp; int8 and bf16 need a
// float model and the CPU's support, else std::invalid_argument naming what is missing).
// `weights_unchanged`: the caller knows the weights did not change since the last decode with this
// workspace (the bindings track train steps and NumPy views): its fingerprint and finite check
// (full passes over the weights, the largest cost of a one-sentence decode) are skipped.
template <typename T>
TokenMatrix greedy_decode(Transformer<T>& model, ConstTokenMap src, std::int64_t start_id, std::int64_t end_id,
                          Index max_length, DecodeWorkspace<T>* workspace = nullptr,
                          ComputeType compute = ComputeType::Float32, bool weights_unchanged = false);

struct BeamHypothesis {
  std::vector<std::int64_t> tokens;  // generated ids (ending with end_id unless cut at max_length)
  double log_prob = 0.0;             // sum of token log-probabilities
  double score = 0.0;                // log_prob / ((5 + len)^alpha / 6^alpha)  (GNMT length penalty)
  bool finished = false;             // ended with end_id
};

// The largest beam_search accepts: each live beam keeps its own key/value caches.
constexpr Index kMaxBeamSize = 1024;

// Both decoders check first, before allocating: sizes against the memory there is (caches for
// max_length positions), ids and options, and that every weight is finite (NonFiniteError);
// logits that overflow while decoding are a NonFiniteError too, never a silent choice.

// Beam search with beam size k and GNMT length penalty alpha; returns the n_best hypotheses of
// each sentence, best first. A sentence stops as soon as no live beam can still beat its
// n_best-th finished hypothesis (an exact bound, since log-probabilities only decrease), or at
// max_length. With beam_size 1 this is greedy decoding.
template <typename T>
std::vector<std::vector<BeamHypothesis>> beam_search(Transformer<T>& model, ConstTokenMap src, std::int64_t start_id,
                                                     std::int64_t end_id, Index max_length, Index beam_size,
                                                     double alpha, Index n_best,
                                                     DecodeWorkspace<T>* workspace = nullptr,
                                                     ComputeType compute = ComputeType::Float32,
                                                     bool weights_unchanged = false);

}  // namespace transformer

// decoder.hpp — the decoder layer and stack of Figure 1 (right).
//
// post-norm (default):  h1 = LN1(x  + Dropout(MaskedSelfAttention(x)))
//                       h2 = LN2(h1 + Dropout(CrossAttention(h1, memory)))
//                       y  = LN3(h2 + Dropout(FFN(h2)))
// pre-norm (option): each sub-layer reads LN(input) and adds its output to the input; a final LN
// after the stack.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transformer/attention/attention.hpp"
#include "transformer/attention/layer_attention.hpp"
#include "transformer/attention/linear_attention.hpp"
#include "transformer/layers/dropout.hpp"
#include "transformer/layers/embedding.hpp"
#include "transformer/layers/feed_forward.hpp"
#include "transformer/layers/layer_norm.hpp"
#include "transformer/layers/stack.hpp"

namespace transformer {

// The inference state of a decoder for a batch of hypotheses (kernels/inference_backend.hpp): per layer, what the
// self-attention keeps of the positions fed so far (softmax: their keys and values; linear: the
// RNN state) and the cross-attention's keys and values of the memory; the memory's rows and which
// sentence each hypothesis (row) belongs to.
template <typename T>
struct DecoderCache {
  std::vector<KVCache<T>> self;                 // per layer (softmax self-attention)
  std::vector<LinearAttentionState<T>> linear;  // per layer (linear self-attention)
  std::vector<Matrix<T>> memory_kv;             // per layer: (memory rows, 2d) = [K | V]
  Index fed = 0;                                // positions fed so far
  SentenceRows memory_rows;                     // the encoder output's rows (sentence b's: memory_rows.offsets)
  std::vector<Index> sentence_of;               // (R) the sentence of each row
  // With record_cross, each step keeps every layer's cross-attention weights in cross_weights[l]
  // (MultiHeadAttention::infer_cross's `weights`: (R * heads, longest source)).
  bool record_cross = false;
  std::vector<Matrix<T>> cross_weights;  // per layer
  Index rows() const { return static_cast<Index>(sentence_of.size()); }
  Index position() const { return fed; }
  // Keep rows: new row i is old row rows[i] with its caches (rows may repeat: beam expansion).
  void select_rows(const std::vector<Index>& rows, Matrix<T>& scratch);
};

template <typename T>
class DecoderLayer {
 public:
  DecoderLayer(Index d_model, Index n_heads, Index d_ff, double dropout = 0.1, bool pre_norm = false, double eps = 1e-6,
               std::uint64_t seed = 0);

  // The masked self-attention's kind (kinds.hpp): "softmax" (MultiHeadAttention, built by the
  // constructor) or another kind that fits a decoder (kDecoderSelfAttention), which replaces
  // it with the same seed (layer_attention.hpp). Resets the layer's self-attention weights.
  void set_self_attention(const std::string& kind) {
    self_attention_.set_kind(kind, kDecoderSelfAttention);
    x_ = nullptr;  // the next backward needs a forward of the new kind
  }
  const AttentionKind& self_attention_kind() const { return self_attention_.kind(); }
  Index n_heads() const { return cross_attention_.n_heads(); }
  // The dense products of every sub-layer (matmul.hpp).
  void set_precision(Precision p);

  // x: (B*T, d), memory: (B*S, d). self_mask (B, T, T): look-ahead and target padding;
  // cross_mask (B, T, S): source padding. Inputs must stay alive until backward().
  const Matrix<T>& forward(ConstMatrixMap<T> x, ConstMatrixMap<T> memory, Index B, Index T_len, Index S,
                           const AttentionMask& self_mask, const AttentionMask& cross_mask, bool training);
  // The same over the rows of layouts (x: rows of lx; memory: rows of lm; masks in padded
  // coordinates). x, memory and both layouts must stay alive until backward().
  const Matrix<T>& forward(ConstMatrixMap<T> x, ConstMatrixMap<T> memory, const RowLayout& lx, const RowLayout& lm,
                           const AttentionMask& self_mask, const AttentionMask& cross_mask, bool training);
  // -> dx (B*T, d); the memory gradient of this layer is in dmemory().
  const Matrix<T>& backward(ConstMatrixMap<T> dout);
  const Matrix<T>& dmemory() const { return cross_attention_.dmemory(); }
  const Matrix<T>& output() const { return pre_norm_ ? out_ : norm3_.output(); }
  // Inference (kernels/inference_backend.hpp) of one new position per hypothesis: x (R, d) updated in place;
  // masked self-attention over what `self` (softmax) or `linear` (linear attention) keeps of the
  // positions so far (this position added), cross-attention to the memory keys and values
  // `memory_kv` of sentence sentence_of[r] (rows of memory_rows); no dropout, the products through
  // `be`, nothing of forward()'s state touched. With cross_weights, the cross-attention weights are
  // kept there (MultiHeadAttention::infer_cross).
  void infer_step(Matrix<T>& x, KVCache<T>& self, LinearAttentionState<T>& linear, const Matrix<T>& memory_kv,
                  const SentenceRows& memory_rows, const std::vector<Index>& sentence_of, InferenceBackend<T>& be,
                  InferenceScratch<T>& s, Matrix<T>* cross_weights = nullptr) const;

  ParameterList<T> parameters();  // self_attention, norm1, cross_attention, norm2, feed_forward, norm3
  void zero_grad();
  std::vector<Dropout<T>*> dropouts();

  // The softmax self-attention (nullptr for another kind) and a linear one (nullptr for another kind).
  MultiHeadAttention<T>* softmax_self_attention() { return self_attention_.softmax(); }
  const MultiHeadAttention<T>* softmax_self_attention() const { return self_attention_.softmax(); }
  const LinearMultiHeadAttention<T>* linear_self_attention() const { return self_attention_.linear(); }

  LayerSelfAttention<T> self_attention_;
  LayerNorm<T> norm1_;
  MultiHeadAttention<T> cross_attention_;
  LayerNorm<T> norm2_;
  FeedForward<T> feed_forward_;
  LayerNorm<T> norm3_;

 private:
  bool pre_norm_;
  Dropout<T> dropout1_, dropout2_, dropout3_;
  const T* x_ = nullptr;
  RowLayout own_x_, own_m_;        // the dense convenience's layouts
  Matrix<T> r1_, r2_, out_;        // pre-norm residual sums
  Matrix<T> d2_, d3_, dtmp_, dx_;  // gradient buffers (B*T, d)
};

// The decoder, a LayerStack (stack.hpp) of decoder layers over the target tokens, each attending
// to the encoder's output (the memory) as well as to the positions before its own.
template <typename T>
class Decoder : public LayerStack<T, DecoderLayer<T>> {
 public:
  Decoder(Index vocab_size, Index d_model, Index n_layers, Index n_heads, Index d_ff, double dropout, Index max_length,
          PositionalLayout layout, bool pre_norm, double eps, std::uint64_t seed);

  // tokens (B, T), memory (B*S, d), source_padding (B, S) bytes (1 = padding) -> (B*T, d).
  const Matrix<T>& forward(ConstTokenMap tokens, ConstMatrixMap<T> memory, Index S, const std::uint8_t* source_padding,
                           bool training);
  // memory holds the rows of memory_layout (e.g. a packed encoder). With pack, only the positions
  // where tokens or targets are not padding (targets (B, T) may be nullptr) are computed, and the
  // output has layout().rows() rows.
  const Matrix<T>& forward(ConstTokenMap tokens, ConstMatrixMap<T> memory, const RowLayout& memory_layout,
                           const std::uint8_t* source_padding, bool training, const std::int64_t* targets, bool pack);
  const RowLayout& layout() const { return layout_; }
  // Accumulates parameter gradients; the summed memory gradient is in dmemory().
  void backward(ConstMatrixMap<T> dout);
  const Matrix<T>& dmemory() const { return dmemory_; }
  // Inference (kernels/inference_backend.hpp), one position at a time over key/value caches. infer_start prepares
  // `cache` for a memory (the encoder's infer: rows of memory_rows) and up to max_steps positions
  // of one hypothesis per sentence (row r of sentence r): each layer's cross-attention keys and
  // values of the memory are computed here, once. The positional table must hold max_steps
  // positions (embedding_.reserve_positions).
  void infer_start(const Matrix<T>& memory, const SentenceRows& memory_rows, Index max_steps, InferenceBackend<T>& be,
                   DecoderCache<T>& cache) const;
  // Feed tokens[r] at the next position of every row of `cache`: the decoder's output (R, d) (after
  // the final norm, if any), in a buffer of s.
  const Matrix<T>& infer_step(const std::int64_t* tokens, DecoderCache<T>& cache, InferenceBackend<T>& be,
                              InferenceScratch<T>& s) const;
  Index batch() const { return B_; }
  Index length() const { return T_; }
  // Every layer's masked self-attention of `kind` (DecoderLayer::set_self_attention).
  void set_self_attention(const std::string& kind) {
    for (auto& layer : this->layers_) layer->set_self_attention(kind);
  }
  // The start id equals the padding id (as in Marian): position 0 of every input is the start
  // token, never masked or skipped as padding.
  void set_start_is_padding(bool yes) { start_is_padding_ = yes; }

 private:
  Index B_ = -1, T_ = 0, S_ = 0, mem_rows_ = 0;
  RowLayout layout_, own_memory_;
  std::vector<std::uint8_t> key_padding_, self_mask_, cross_mask_;
  bool start_is_padding_ = false;
  Matrix<T> x_, dmemory_;
};

}  // namespace transformer

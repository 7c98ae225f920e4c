// encoder.hpp — the encoder layer and stack of Figure 1 (left).
//
// post-norm (paper, default):  h = LN1(x + Dropout(SelfAttention(x)))
//                              y = LN2(h + Dropout(FFN(h)))
// pre-norm (option):           h = x + Dropout(SelfAttention(LN1(x)))
//                              y = h + Dropout(FFN(LN2(h)))   and a final LN after the stack
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transformer/attention/attention.hpp"
#include "transformer/attention/layer_attention.hpp"
#include "transformer/layers/dropout.hpp"
#include "transformer/layers/embedding.hpp"
#include "transformer/layers/feed_forward.hpp"
#include "transformer/layers/layer_norm.hpp"
#include "transformer/layers/stack.hpp"

namespace transformer {

template <typename T>
class EncoderLayer {
 public:
  EncoderLayer(Index d_model, Index n_heads, Index d_ff, double dropout = 0.1, bool pre_norm = false, double eps = 1e-6,
               std::uint64_t seed = 0);

  // The self-attention's kind (kinds.hpp): "softmax" (MultiHeadAttention, built by the
  // constructor) or another kind that fits an encoder (kEncoderSelfAttention), which replaces
  // it with the same seed (layer_attention.hpp). Resets the layer's self-attention weights.
  void set_self_attention(const std::string& kind) {
    self_attention_.set_kind(kind, kEncoderSelfAttention);
    x_ = nullptr;  // the next backward needs a forward of the new kind
  }
  const AttentionKind& self_attention_kind() const { return self_attention_.kind(); }
  // The softmax self-attention (nullptr for another kind).
  MultiHeadAttention<T>* softmax_self_attention() { return self_attention_.softmax(); }
  const MultiHeadAttention<T>* softmax_self_attention() const { return self_attention_.softmax(); }

  // x: (rows, d) -> (rows, d) for the rows of `layout` (all B*T, or the packed non-padding ones);
  // mask (B, T, T) in padded coordinates; key_padding (B, T) bytes, 1 = padding, which a kind
  // other than softmax needs (softmax reads the mask). `x` and `layout` must stay alive until
  // backward().
  const Matrix<T>& forward(ConstMatrixMap<T> x, const RowLayout& layout, const AttentionMask& mask, bool training,
                           const std::uint8_t* key_padding = nullptr);
  // Dense convenience: x (B*T, d).
  const Matrix<T>& forward(ConstMatrixMap<T> x, Index B, Index T_len, const AttentionMask& mask, bool training);
  const Matrix<T>& backward(ConstMatrixMap<T> dout);  // -> dx (B*T, d)
  const Matrix<T>& output() const { return pre_norm_ ? out_ : norm2_.output(); }
  // Inference (kernels/inference_backend.hpp): x (rows, d), the rows of `rows` (no padding), updated in place; no
  // dropout, the products through `be`, nothing of forward()'s state touched.
  void infer(Matrix<T>& x, const SentenceRows& rows, InferenceBackend<T>& be, InferenceScratch<T>& s) const;

  Index n_heads() const { return self_attention_.n_heads(); }
  ParameterList<T> parameters();  // self_attention.*, norm1.*, feed_forward.*, norm2.*
  void zero_grad() { zero_grads(self_attention_, norm1_, feed_forward_, norm2_); }
  std::vector<Dropout<T>*> dropouts();

  LayerSelfAttention<T> self_attention_;
  LayerNorm<T> norm1_;
  FeedForward<T> feed_forward_;
  LayerNorm<T> norm2_;

 private:
  bool pre_norm_;
  Dropout<T> dropout1_, dropout2_;
  const T* x_ = nullptr;
  Index rows_ = -1;
  RowLayout own_;             // the dense convenience's layout
  Matrix<T> r1_, out_;        // pre-norm residual sums (B*T, d)
  Matrix<T> dtmp_, dh_, dx_;  // (B*T, d) gradient buffers
};

// The encoder, a LayerStack (stack.hpp) of encoder layers over the source tokens.
template <typename T>
class Encoder : public LayerStack<T, EncoderLayer<T>> {
 public:
  // With shared_embedding (a decoder's token embedding), the source tokens are embedded with it.
  Encoder(Index vocab_size, Index d_model, Index n_layers, Index n_heads, Index d_ff, double dropout, Index max_length,
          PositionalLayout layout, bool pre_norm, double eps, std::uint64_t seed,
          Embedding<T>* shared_embedding = nullptr);

  // tokens (B, S) -> memory (B*S, d). Padding (token 0) keys are masked in self-attention.
  // With pack, only the non-padding positions are computed: memory is then (layout().rows(), d).
  const Matrix<T>& forward(ConstTokenMap tokens, bool training, bool pack = false);
  const RowLayout& layout() const { return layout_; }
  void backward(ConstMatrixMap<T> dmemory);  // accumulates into all parameter gradients
  // Inference (kernels/inference_backend.hpp): the memory of tokens (B, S) at its non-padding positions only
  // (padding positions are keys that every query ignores), which `rows` lists (assigned here):
  // memory (rows, d). The positional table must hold S positions (embedding_.reserve_positions).
  void infer(ConstTokenMap tokens, SentenceRows& rows, InferenceBackend<T>& be, InferenceScratch<T>& s,
             Matrix<T>& memory) const;
  // Every layer's self-attention of `kind` (EncoderLayer::set_self_attention).
  void set_self_attention(const std::string& kind) {
    for (auto& layer : this->layers_) layer->set_self_attention(kind);
  }
  // (B, S) bytes, 1 where the last source was padding.
  const std::vector<std::uint8_t>& key_padding() const { return key_padding_; }
  Index batch() const { return B_; }
  Index length() const { return S_; }

 private:
  Index B_ = -1, S_ = 0;
  RowLayout layout_;
  std::vector<std::uint8_t> key_padding_, mask_;  // (B, S), (B, S, S)
  Matrix<T> x_;                                   // (B*S, d) embedded and dropped-out input
};

}  // namespace transformer

// layer_attention.hpp — the self-attention of an encoder or decoder layer, of the kind its model
// chose (kinds.hpp).
//
// The layer builds softmax attention (MultiHeadAttention) by default; set_kind replaces it with
// another kind of the records, built by the record's maker from the same seed. forward() and
// backward() run softmax through MultiHeadAttention's own masked, packed path (softmax(): the
// plain kernel, or the tiled one for long inputs, see set_attention_impl), and any other kind
// here: the rows of a packed RowLayout are placed in a zeroed (B*T, d) batch, the kind runs on it
// (causal, or with the batch's key padding), and the layout's rows are read back. For a decoder,
// the rows a packed batch leaves out are target padding after each sentence, which a causal query
// never reaches; an encoder's padded keys are masked by the kind (SelfAttention::forward_key_padding).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "transformer/attention/attention.hpp"
#include "transformer/attention/kinds.hpp"
#include "transformer/attention/linear_attention.hpp"
#include "transformer/attention/self_attention.hpp"
#include "transformer/core/tensor.hpp"

namespace transformer {

template <typename T>
class LayerSelfAttention {
 public:
  LayerSelfAttention(Index d_model, Index n_heads, std::uint64_t seed);

  // The kind named `kind`, which must fit `use` (the message names the use and the kinds that
  // fit it). Resets the attention's weights when the kind changes.
  void set_kind(const std::string& kind, const AttentionUse& use);
  const AttentionKind& kind() const { return *kind_; }
  // The softmax kind's MultiHeadAttention (nullptr for another kind); the linear kind's layer
  // (nullptr for another kind), whose RNN step and inference forward decoding calls.
  MultiHeadAttention<T>* softmax() { return softmax_; }
  const MultiHeadAttention<T>* softmax() const { return softmax_; }
  const LinearMultiHeadAttention<T>* linear() const { return linear_; }
  // The kernel of the softmax kind's training forward and backward (AttentionImpl; Auto, the
  // default, tiles from tuning::kTiledAttentionMinLength keys); kept when the kind changes, and
  // ignored by the other kinds.
  void set_attention_impl(AttentionImpl impl);

  // Self-attention over the rows of `layout` (x holds layout.rows() rows): softmax with `mask`
  // (the batch's (B, T, T) bytes); another kind from the mask's structure, causal or with
  // key_padding (B, T) bytes, 1 = a key no query sees. x, layout and the masks must stay alive
  // until backward.
  void forward(ConstMatrixMap<T> x, const RowLayout& layout, const AttentionMask& mask, bool causal,
               const std::uint8_t* key_padding);
  Matrix<T>& output_mut() { return softmax_ != nullptr ? softmax_->output_mut() : out_; }
  const Matrix<T>& backward(ConstMatrixMap<T> dout);

  ParameterList<T> parameters() { return attention_->parameters(); }
  void zero_grad() { attention_->zero_grad(); }
  void set_precision(Precision p);
  Index n_heads() const { return attention_->n_heads(); }

 private:
  Index d_;
  std::uint64_t seed_;
  Precision precision_ = Precision::Float32;
  AttentionImpl impl_ = AttentionImpl::Auto;
  const AttentionKind* kind_;
  std::unique_ptr<SelfAttention<T>> attention_;
  MultiHeadAttention<T>* softmax_ = nullptr;
  const LinearMultiHeadAttention<T>* linear_ = nullptr;
  const RowLayout* layout_ = nullptr;
  Matrix<T> dense_, out_;  // the batch's input (kept: the kind's backward reads it), its output rows
  Matrix<T> ddense_, dx_;  // the same for the gradients
  void select(const AttentionKind& k);
};

}  // namespace transformer

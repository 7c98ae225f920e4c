#include "transformer/models/encoder.hpp"

#include <new>
#include <utility>

#include "transformer/core/checks.hpp"
#include "transformer/core/random.hpp"
#include "transformer/layers/stack.hpp"

namespace transformer {

template <typename T>
EncoderLayer<T>::EncoderLayer(Index d_model, Index n_heads, Index d_ff, double dropout, bool pre_norm, double eps,
                              std::uint64_t seed)
    : self_attention_(checked_size<T>("EncoderLayer", concat("d_model ", d_model, ", d_ff ", d_ff),
                                      encoder_layer_parameters(d_model, d_ff), 0, d_model),
                      n_heads, splitmix64(seed + 1)),
      norm1_(d_model, eps),
      feed_forward_(d_model, d_ff, dropout, splitmix64(seed + 2)),
      norm2_(d_model, eps),
      pre_norm_(pre_norm),
      dropout1_(dropout, seed, splitmix64(seed + 3)),
      dropout2_(dropout, seed, splitmix64(seed + 4)) {}

template <typename T>
const Matrix<T>& EncoderLayer<T>::forward(ConstMatrixMap<T> x, Index B, Index T_len, const AttentionMask& mask,
                                          bool training) {
  TCPP_CHECK(B > 0 && T_len > 0 && x.rows() == B * T_len, "EncoderLayer: input has ", x.rows(),
             " rows, expected B*T = ", B, "*", T_len);
  own_ = RowLayout::dense(B, T_len);
  return forward(x, own_, mask, training);
}

template <typename T>
const Matrix<T>& EncoderLayer<T>::forward(ConstMatrixMap<T> x, const RowLayout& layout, const AttentionMask& mask,
                                          bool training, const std::uint8_t* key_padding) {
  TCPP_CHECK(self_attention_.softmax() != nullptr || key_padding != nullptr, "EncoderLayer: attention '",
             self_attention_.kind().name, "' takes the key padding of the batch, not a mask");
  x_ = x.data();
  rows_ = x.rows();
  const Index* ids = layout.row_ids();
  // post-norm: h = LN1(x + Dropout(SelfAttention(x))), y = LN2(h + Dropout(FFN(h)));
  // pre-norm: r1 = x + Dropout(SelfAttention(LN1(x))), y = r1 + Dropout(FFN(LN2(r1)))
  const Matrix<T>& h = layer_residual<T>(pre_norm_, norm1_, dropout1_, x, training, ids, r1_, self_attention_, layout,
                                         mask, false, key_padding);
  return layer_residual<T>(pre_norm_, norm2_, dropout2_, cmap(h), training, ids, out_, feed_forward_, training, ids);
}

template <typename T>
const Matrix<T>& EncoderLayer<T>::backward(ConstMatrixMap<T> dout) {
  if (x_ == nullptr) throw std::runtime_error("EncoderLayer: backward() called before forward()");
  // the two residual sub-layers in reverse: feed-forward, then self-attention
  layer_residual_backward<T>(pre_norm_, norm2_, dropout2_, feed_forward_, dout, dtmp_, dh_);
  layer_residual_backward<T>(pre_norm_, norm1_, dropout1_, self_attention_, cmap(dh_), dtmp_, dx_);
  return dx_;
}

template <typename T>
void EncoderLayer<T>::infer(Matrix<T>& x, const SentenceRows& rows, InferenceBackend<T>& be,
                            InferenceScratch<T>& s) const {
  // the two residual sub-layers of forward(), without dropout: self-attention, feed-forward
  residual_infer<T>(
      pre_norm_, norm1_,
      [&](const Matrix<T>& in, Matrix<T>& out) {
        if (const auto* lin = self_attention_.linear())
          lin->infer(in, rows, be, s, out);
        else
          self_attention_.softmax()->infer(in, rows, be, s, out);
      },
      x, s.n, s.a);
  residual_infer<T>(
      pre_norm_, norm2_, [&](const Matrix<T>& in, Matrix<T>& out) { feed_forward_.infer(in, be, s, out); }, x, s.n,
      s.a);
}

template <typename T>
ParameterList<T> EncoderLayer<T>::parameters() {
  return attention_block_parameters<T>(self_attention_.parameters(), norm1_, feed_forward_, norm2_);
}

template <typename T>
std::vector<Dropout<T>*> EncoderLayer<T>::dropouts() {
  return {&dropout1_, &feed_forward_.dropout(), &dropout2_};
}

// ---------------------------------------------------------------------------------------------

template <typename T>
Encoder<T>::Encoder(Index vocab_size, Index d_model, Index n_layers, Index n_heads, Index d_ff, double dropout,
                    Index max_length, PositionalLayout layout, bool pre_norm, double eps, std::uint64_t seed,
                    Embedding<T>* shared_embedding)
    : LayerStack<T, EncoderLayer<T>>("Encoder", encoder_layer_parameters(d_model, d_ff), 100, vocab_size, d_model,
                                     n_layers, n_heads, d_ff, dropout, max_length, layout, pre_norm, eps, seed,
                                     shared_embedding) {}

template <typename T>
const Matrix<T>& Encoder<T>::forward(ConstTokenMap tokens, bool training, bool pack) {
  const Index B = tokens.rows(), S = tokens.cols();
  TCPP_CHECK(B > 0 && S > 0, "Encoder: the source batch is empty (shape (", B, ", ", S, "))");
  // rows to compute: all, or (pack) only the non-padding positions — padding rows are keys that
  // every query ignores, so nothing downstream depends on their values
  layout_.B = B;
  layout_.T = S;
  layout_.packed = false;
  layout_.ids.clear();  // keeps its capacity: no allocation per step
  if (pack) {
    for (Index i = 0; i < B * S; ++i)
      if (tokens.data()[i] != this->padding_id_) layout_.ids.push_back(i);
    // nothing to compute (an all-padding batch): run unpacked rather than with zero rows
    layout_.packed = !layout_.ids.empty() && static_cast<Index>(layout_.ids.size()) < B * S;
    if (!layout_.packed) layout_.ids.clear();
  }
  // (rows, d): Dropout(embedding * sqrt(d) + PE), one pass
  this->embedding_.forward_dropout(tokens, layout_, this->dropout_, training, x_);
  B_ = B;
  S_ = S;
  key_padding_.resize(static_cast<size_t>(B * S));
  for (Index i = 0; i < B * S; ++i) key_padding_[i] = tokens.data()[i] == this->padding_id_;
  build_attention_mask(mask_, key_padding_.data(), B, S, S, false);
  AttentionMask mask{mask_.data(), S * S};
  const Matrix<T>* h = &x_;
  for (auto& layer : this->layers_) h = &layer->forward(cmap(*h), layout_, mask, training, key_padding_.data());
  if (this->final_norm_) h = &this->final_norm_->forward(cmap(*h));
  return *h;
}

template <typename T>
void Encoder<T>::infer(ConstTokenMap tokens, SentenceRows& rows, InferenceBackend<T>& be, InferenceScratch<T>& s,
                       Matrix<T>& memory) const {
  const Index B = tokens.rows(), S = tokens.cols();
  TCPP_CHECK(B > 0 && S > 0, "Encoder: the source batch is empty (shape (", B, ", ", S, "))");
  rows.assign(tokens, this->padding_id_);  // the non-padding positions, sentence by sentence
  const std::int64_t* tok = tokens.data();
  const Index* ids = rows.ids.data();
  // x = embedding[token] * sqrt(d) + PE[t]                                   (rows, d)
  this->embedding_.infer(rows.rows(), [&](Index i) { return std::make_pair(tok[ids[i]], ids[i] % S); }, memory);
  for (const auto& layer : this->layers_) layer->infer(memory, rows, be, s);
  if (this->final_norm_) {
    s.n.resize(memory.rows(), memory.cols());
    this->final_norm_->forward_inference(memory.data(), nullptr, s.n.data(), memory.rows());
    memory.swap(s.n);
  }
}

template <typename T>
void Encoder<T>::backward(ConstMatrixMap<T> dmemory) {
  if (B_ < 0) throw std::runtime_error("Encoder: backward() called before forward()");
  this->backward_through(dmemory, [](EncoderLayer<T>&) {});
}

template class EncoderLayer<float>;
template class EncoderLayer<double>;
template class Encoder<float>;
template class Encoder<double>;

}  // namespace transformer

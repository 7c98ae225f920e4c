#include "transformer/decoder.hpp"

#include <new>

#include "transformer/random.hpp"
#include "transformer/stack.hpp"

namespace transformer {

template <typename T>
static ConstMatrixMap<T> cmap(const Matrix<T>& m) {
  return ConstMatrixMap<T>(m.data(), m.rows(), m.cols());
}
template <typename T>
static MatrixMap<T> mmap(Matrix<T>& m) {
  return MatrixMap<T>(m.data(), m.rows(), m.cols());
}

template <typename T>
DecoderLayer<T>::DecoderLayer(Index d_model, Index n_heads, Index d_ff, double dropout, bool pre_norm,
                              double eps, std::uint64_t seed)
    : self_attention_(d_model, n_heads, splitmix64(seed + 1)),
      norm1_(d_model, eps),
      cross_attention_(d_model, n_heads, splitmix64(seed + 2)),
      norm2_(d_model, eps),
      feed_forward_(d_model, d_ff, dropout, splitmix64(seed + 3)),
      norm3_(d_model, eps),
      pre_norm_(pre_norm),
      dropout1_(dropout, seed, splitmix64(seed + 4)),
      dropout2_(dropout, seed, splitmix64(seed + 5)),
      dropout3_(dropout, seed, splitmix64(seed + 6)) {}

template <typename T>
const Matrix<T>& DecoderLayer<T>::forward(ConstMatrixMap<T> x, ConstMatrixMap<T> memory, Index B, Index T_len,
                                          Index S, const AttentionMask& self_mask,
                                          const AttentionMask& cross_mask, bool training) {
  TCPP_CHECK(B > 0 && T_len > 0 && S > 0 && x.rows() == B * T_len && memory.rows() == B * S,
             "DecoderLayer: x has ", x.rows(), " rows and memory ", memory.rows(), ", expected B*T = ", B, "*", T_len,
             " and B*S = ", B, "*", S);
  own_x_ = RowLayout::dense(B, T_len);
  own_m_ = RowLayout::dense(B, S);
  return forward(x, memory, own_x_, own_m_, self_mask, cross_mask, training);
}

template <typename T>
const Matrix<T>& DecoderLayer<T>::forward(ConstMatrixMap<T> x, ConstMatrixMap<T> memory, const RowLayout& lx,
                                          const RowLayout& lm, const AttentionMask& self_mask,
                                          const AttentionMask& cross_mask, bool training) {
  x_ = x.data();
  const Index* ids = lx.row_ids();
  if (!pre_norm_) {
    // h1 = LN1(x + Dropout(MaskedSelfAttention(x)))
    self_attention_.forward(x, lx, self_mask);
    Matrix<T>& a1 = self_attention_.output_mut();
    dropout1_.forward_inplace(mmap(a1), training, ids);
    const Matrix<T>& h1 = norm1_.forward_residual(x, cmap(a1));
    // h2 = LN2(h1 + Dropout(CrossAttention(h1, memory)))
    cross_attention_.forward(cmap(h1), memory, lx, lm, cross_mask);
    Matrix<T>& a2 = cross_attention_.output_mut();
    dropout2_.forward_inplace(mmap(a2), training, ids);
    const Matrix<T>& h2 = norm2_.forward_residual(cmap(h1), cmap(a2));
    // y = LN3(h2 + Dropout(FFN(h2)))
    feed_forward_.forward(cmap(h2), training, ids);
    Matrix<T>& f = feed_forward_.output_mut();
    dropout3_.forward_inplace(mmap(f), training, ids);
    return norm3_.forward_residual(cmap(h2), cmap(f));
  }
  // r1 = x + Dropout(MaskedSelfAttention(LN1(x)))
  const Matrix<T>& n1 = norm1_.forward(x);
  self_attention_.forward(cmap(n1), lx, self_mask);
  Matrix<T>& a1 = self_attention_.output_mut();
  dropout1_.forward_inplace(mmap(a1), training, ids);
  r1_.resize(x.rows(), x.cols());
  add_arrays(r1_.data(), x.data(), a1.data(), r1_.size());
  // r2 = r1 + Dropout(CrossAttention(LN2(r1), memory))
  const Matrix<T>& n2 = norm2_.forward(cmap(r1_));
  cross_attention_.forward(cmap(n2), memory, lx, lm, cross_mask);
  Matrix<T>& a2 = cross_attention_.output_mut();
  dropout2_.forward_inplace(mmap(a2), training, ids);
  r2_.resize(x.rows(), x.cols());
  add_arrays(r2_.data(), r1_.data(), a2.data(), r2_.size());
  // y = r2 + Dropout(FFN(LN3(r2)))
  const Matrix<T>& n3 = norm3_.forward(cmap(r2_));
  feed_forward_.forward(cmap(n3), training, ids);
  Matrix<T>& f = feed_forward_.output_mut();
  dropout3_.forward_inplace(mmap(f), training, ids);
  out_.resize(x.rows(), x.cols());
  add_arrays(out_.data(), r2_.data(), f.data(), out_.size());
  return out_;
}

template <typename T>
const Matrix<T>& DecoderLayer<T>::backward(ConstMatrixMap<T> dout) {
  if (x_ == nullptr) throw std::runtime_error("DecoderLayer: backward() called before forward()");
  if (!pre_norm_) {
    // y = LN3(h2 + f'): the gradient of the sum reaches h2 directly and through the FFN
    const Matrix<T>& ds3 = norm3_.backward(dout);
    dtmp_ = ds3;
    dropout3_.backward_inplace(mmap(dtmp_));
    const Matrix<T>& dh2_ffn = feed_forward_.backward(cmap(dtmp_));
    d3_.resize(ds3.rows(), ds3.cols());
    add_arrays(d3_.data(), ds3.data(), dh2_ffn.data(), d3_.size());  // d h2
    // h2 = LN2(h1 + a2'): to h1 directly and through the cross-attention queries
    const Matrix<T>& ds2 = norm2_.backward(cmap(d3_));
    dtmp_ = ds2;
    dropout2_.backward_inplace(mmap(dtmp_));
    const Matrix<T>& dh1_cross = cross_attention_.backward(cmap(dtmp_));
    d2_.resize(ds2.rows(), ds2.cols());
    add_arrays(d2_.data(), ds2.data(), dh1_cross.data(), d2_.size());  // d h1
    // h1 = LN1(x + a1'): to x directly and through the masked self-attention
    const Matrix<T>& ds1 = norm1_.backward(cmap(d2_));
    dtmp_ = ds1;
    dropout1_.backward_inplace(mmap(dtmp_));
    const Matrix<T>& dx_self = self_attention_.backward(cmap(dtmp_));
    dx_.resize(ds1.rows(), ds1.cols());
    add_arrays(dx_.data(), ds1.data(), dx_self.data(), dx_.size());
    return dx_;
  }
  // y = r2 + f'(LN3(r2))
  dtmp_ = dout;
  dropout3_.backward_inplace(mmap(dtmp_));
  const Matrix<T>& dn3 = feed_forward_.backward(cmap(dtmp_));
  const Matrix<T>& dr2_norm = norm3_.backward(cmap(dn3));
  d3_.resize(dout.rows(), dout.cols());
  add_arrays(d3_.data(), dout.data(), dr2_norm.data(), d3_.size());  // d r2
  // r2 = r1 + a2'(LN2(r1), memory)
  dtmp_ = d3_;
  dropout2_.backward_inplace(mmap(dtmp_));
  const Matrix<T>& dn2 = cross_attention_.backward(cmap(dtmp_));
  const Matrix<T>& dr1_norm = norm2_.backward(cmap(dn2));
  d2_.resize(dout.rows(), dout.cols());
  add_arrays(d2_.data(), d3_.data(), dr1_norm.data(), d2_.size());  // d r1
  // r1 = x + a1'(LN1(x))
  dtmp_ = d2_;
  dropout1_.backward_inplace(mmap(dtmp_));
  const Matrix<T>& dn1 = self_attention_.backward(cmap(dtmp_));
  const Matrix<T>& dx_norm = norm1_.backward(cmap(dn1));
  dx_.resize(dout.rows(), dout.cols());
  add_arrays(dx_.data(), d2_.data(), dx_norm.data(), dx_.size());
  return dx_;
}

template <typename T>
ParameterList<T> DecoderLayer<T>::parameters() {
  ParameterList<T> ps;
  append_parameters(ps, self_attention_.parameters(), "self_attention");
  append_parameters(ps, norm1_.parameters(), "norm1");
  append_parameters(ps, cross_attention_.parameters(), "cross_attention");
  append_parameters(ps, norm2_.parameters(), "norm2");
  append_parameters(ps, feed_forward_.parameters(), "feed_forward");
  append_parameters(ps, norm3_.parameters(), "norm3");
  return ps;
}

template <typename T>
void DecoderLayer<T>::zero_grad() {
  self_attention_.zero_grad();
  norm1_.zero_grad();
  cross_attention_.zero_grad();
  norm2_.zero_grad();
  feed_forward_.zero_grad();
  norm3_.zero_grad();
}

template <typename T>
std::vector<Dropout<T>*> DecoderLayer<T>::dropouts() {
  return {&dropout1_, &dropout2_, &feed_forward_.dropout(), &dropout3_};
}

// ---------------------------------------------------------------------------------------------

template <typename T>
Decoder<T>::Decoder(Index vocab_size, Index d_model, Index n_layers, Index n_heads, Index d_ff,
                    double dropout, Index max_length, PositionalLayout layout, bool pre_norm, double eps,
                    std::uint64_t seed)
    : embedding_(vocab_size, d_model, max_length, layout, splitmix64(seed + 1)),
      dropout_(dropout, seed, splitmix64(seed + 2)) {
  TCPP_CHECK(n_layers > 0, "Decoder: n_layers must be positive, got ", n_layers);
  for (Index i = 0; i < n_layers; ++i)
    layers_.push_back(std::make_unique<DecoderLayer<T>>(d_model, n_heads, d_ff, dropout, pre_norm, eps,
                                                        splitmix64(seed + 200 + static_cast<std::uint64_t>(i))));
  if (pre_norm) final_norm_ = std::make_unique<LayerNorm<T>>(d_model, eps);
}

template <typename T>
const Matrix<T>& Decoder<T>::forward(ConstTokenMap tokens, ConstMatrixMap<T> memory, Index S,
                                     const std::uint8_t* source_padding, bool training) {
  TCPP_CHECK(memory.rows() == tokens.rows() * S, "Decoder: memory has ", memory.rows(), " rows, expected B*S = ",
             tokens.rows(), "*", S);
  own_memory_ = RowLayout::dense(tokens.rows(), S);
  return forward(tokens, memory, own_memory_, source_padding, training, nullptr, false);
}

template <typename T>
const Matrix<T>& Decoder<T>::forward(ConstTokenMap tokens, ConstMatrixMap<T> memory, const RowLayout& memory_layout,
                                     const std::uint8_t* source_padding, bool training, const std::int64_t* targets,
                                     bool pack) {
  const Index B = tokens.rows(), Tt = tokens.cols(), S = memory_layout.T;
  TCPP_CHECK(B > 0 && Tt > 0, "Decoder: the target batch is empty (shape (", B, ", ", Tt, "))");
  TCPP_CHECK(memory_layout.B == B && memory.rows() == memory_layout.rows(), "Decoder: memory has ", memory.rows(),
             " rows for batch ", memory_layout.B, ", expected ", memory_layout.rows(), " rows for batch ", B);
  // rows to compute: all, or (pack) the positions with an input token or a target — a padding
  // query whose target is padding too feeds nothing that the loss sees
  layout_.B = B;
  layout_.T = Tt;
  layout_.packed = false;
  layout_.ids.clear();
  if (pack) {
    for (Index i = 0; i < B * Tt; ++i)
      if (tokens.data()[i] != 0 || (targets != nullptr && targets[i] != 0)) layout_.ids.push_back(i);
    // nothing to compute (an all-padding batch): run unpacked rather than with zero rows
    layout_.packed = !layout_.ids.empty() && static_cast<Index>(layout_.ids.size()) < B * Tt;
    if (!layout_.packed) layout_.ids.clear();
  }
  x_ = embedding_.forward(tokens, layout_);
  dropout_.forward_inplace(mmap(x_), training, layout_.row_ids());
  B_ = B;
  T_ = Tt;
  S_ = S;
  mem_rows_ = memory.rows();
  key_padding_.resize(static_cast<size_t>(B * Tt));
  for (Index i = 0; i < B * Tt; ++i) key_padding_[i] = tokens.data()[i] == 0;
  // masked self-attention: look-ahead and target padding; cross-attention: source padding
  build_attention_mask(self_mask_, key_padding_.data(), B, Tt, Tt, true);
  build_attention_mask(cross_mask_, source_padding, B, Tt, S, false);
  AttentionMask self_mask{self_mask_.data(), Tt * Tt}, cross_mask{cross_mask_.data(), Tt * S};
  const Matrix<T>* h = &x_;
  for (auto& layer : layers_)
    h = &layer->forward(cmap(*h), memory, layout_, memory_layout, self_mask, cross_mask, training);
  if (final_norm_) h = &final_norm_->forward(cmap(*h));
  return *h;
}

template <typename T>
const Matrix<T>& Decoder<T>::output() const {
  if (final_norm_) return final_norm_->output();
  return layers_.back()->output();
}

template <typename T>
void Decoder<T>::backward(ConstMatrixMap<T> dout) {
  if (B_ < 0) throw std::runtime_error("Decoder: backward() called before forward()");
  dmemory_.setZero(mem_rows_, embedding_.dim());
  // every layer attends to the same memory: its gradient is the sum over the layers
  dx_ = stack_backward<T>(dout, layers_, final_norm_.get(),
                          [this](DecoderLayer<T>& layer) { dmemory_ += layer.dmemory(); });
  dropout_.backward_inplace(mmap(dx_));
  embedding_.backward(cmap(dx_));
}

template <typename T>
ParameterList<T> Decoder<T>::parameters() {
  return stack_parameters<T>(embedding_, layers_, final_norm_.get());
}

template <typename T>
void Decoder<T>::zero_grad() {
  stack_zero_grad<T>(embedding_, layers_, final_norm_.get());
}

template <typename T>
std::vector<Dropout<T>*> Decoder<T>::dropouts() {
  return stack_dropouts<T>(dropout_, layers_);
}

template class DecoderLayer<float>;
template class DecoderLayer<double>;
template class Decoder<float>;
template class Decoder<double>;

}  // namespace transformer

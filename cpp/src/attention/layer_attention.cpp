#include "transformer/attention/layer_attention.hpp"

#include <utility>

#include "transformer/attention/tiled_attention.hpp"
#include "transformer/core/checks.hpp"

namespace transformer {

template <typename T>
LayerSelfAttention<T>::LayerSelfAttention(Index d_model, Index n_heads, std::uint64_t seed)
    : d_(d_model),
      seed_(seed),
      kind_(&attention_kind("softmax")),
      attention_(kind_->maker<T>()(d_model, n_heads, seed, SelfAttentionOptions{})) {
  select(*kind_);
}

template <typename T>
void LayerSelfAttention<T>::set_kind(const std::string& kind, const AttentionUse& use) {
  const AttentionKind& k = attention_kind(kind, use.who);
  TCPP_CHECK(use.fits(k), use.who, ": attention '", kind, "' does not fit ", use.needs, ": use ",
             quoted_attention_kinds(use.fits));
  if (&k == kind_) return;
  auto made = k.maker<T>()(d_, attention_->n_heads(), seed_, SelfAttentionOptions{});
  made->set_precision(precision_);
  attention_ = std::move(made);
  select(k);
}

template <typename T>
void LayerSelfAttention<T>::select(const AttentionKind& k) {
  kind_ = &k;
  auto* softmax = dynamic_cast<SoftmaxSelfAttention<T>*>(attention_.get());
  softmax_ = softmax != nullptr ? &softmax->attention() : nullptr;
  if (softmax_ != nullptr) softmax_->set_attention_impl(impl_);
  linear_ = dynamic_cast<const LinearMultiHeadAttention<T>*>(attention_.get());
  layout_ = nullptr;
}

template <typename T>
void LayerSelfAttention<T>::set_attention_impl(AttentionImpl impl) {
  impl_ = impl;
  if (softmax_ != nullptr) softmax_->set_attention_impl(impl);
}

template <typename T>
void LayerSelfAttention<T>::set_precision(Precision p) {
  attention_->set_precision(p);
  precision_ = p;
}

template <typename T>
void LayerSelfAttention<T>::forward(ConstMatrixMap<T> x, const RowLayout& layout, const AttentionMask& mask,
                                    bool causal, const std::uint8_t* key_padding) {
  layout_ = &layout;
  if (softmax_ != nullptr) {
    softmax_->forward(x, layout, mask);
    return;
  }
  const Index B = layout.B, T_len = layout.T;
  auto run = [&](ConstMatrixMap<T> in) -> const Matrix<T>& {
    return key_padding != nullptr ? attention_->forward_key_padding(in, B, T_len, key_padding)
                                  : attention_->forward(in, B, T_len, causal);
  };
  if (!layout.packed) {
    out_ = run(x);
    return;
  }
  const Index* ids = layout.row_ids();
  dense_.setZero(B * T_len, x.cols());
  for (Index i = 0; i < x.rows(); ++i) dense_.row(ids[i]) = x.row(i);
  const Matrix<T>& y = run(cmap(dense_));
  out_.resize(x.rows(), x.cols());
  for (Index i = 0; i < x.rows(); ++i) out_.row(i) = y.row(ids[i]);
}

template <typename T>
const Matrix<T>& LayerSelfAttention<T>::backward(ConstMatrixMap<T> dout) {
  TCPP_CHECK(layout_ != nullptr, "LayerSelfAttention: backward() called before forward()");
  if (softmax_ != nullptr) return softmax_->backward(dout);
  if (!layout_->packed) return attention_->backward(dout);
  const Index* ids = layout_->row_ids();
  ddense_.setZero(layout_->B * layout_->T, dout.cols());
  for (Index i = 0; i < dout.rows(); ++i) ddense_.row(ids[i]) = dout.row(i);
  const Matrix<T>& dx = attention_->backward(cmap(ddense_));
  dx_.resize(dout.rows(), dout.cols());
  for (Index i = 0; i < dout.rows(); ++i) dx_.row(i) = dx.row(ids[i]);
  return dx_;
}

template class LayerSelfAttention<float>;
template class LayerSelfAttention<double>;

}  // namespace transformer

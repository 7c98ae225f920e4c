#include "transformer/layers/feed_forward.hpp"

#include "transformer/core/checks.hpp"
#include "transformer/core/random.hpp"
#include "transformer/layers/activations.hpp"

namespace transformer {

template <typename T>
FeedForward<T>::FeedForward(Index d_model, Index d_ff, double dropout, std::uint64_t seed)
    : linear1_(checked_size<T>("FeedForward", concat("d_model ", d_model, ", d_ff ", d_ff),
                               feed_forward_parameters(d_model, d_ff), 0, d_model),
               d_ff, true, splitmix64(seed + 1)),
      linear2_(d_ff, d_model, true, splitmix64(seed + 2)),
      dropout_(dropout, seed, splitmix64(seed + 3)) {}

template <typename T>
const Matrix<T>& FeedForward<T>::forward(ConstMatrixMap<T> x, bool training, const Index* row_ids) {
  // h = dropout(f(x W1^T + b1)), in place in linear1's output buffer     (N, d_ff)
  Matrix<T>& h = const_cast<Matrix<T>&>(linear1_.forward(x));
  if (activation_ == Activation::Relu) {
    dropout_.forward_relu_inplace(mmap(h), training, row_ids);  // ReLU and dropout in one pass
  } else {
    pre_ = h;
    activation_inplace<T>(activation_, h.data(), h.size());
    dropout_.forward_inplace(mmap(h), training, row_ids);
  }
  // y = h W2^T + b2                                                       (N, d_model)
  return linear2_.forward(cmap(h));
}

template <typename T>
const Matrix<T>& FeedForward<T>::backward(ConstMatrixMap<T> dy) {
  // dh = dy W2, in linear2's own input-gradient buffer (read only here)   (N, d_ff)
  Matrix<T>& dh = const_cast<Matrix<T>&>(linear2_.backward(dy));
  if (activation_ == Activation::Relu) {
    // h after ReLU and dropout is positive exactly where both kept the element, so their
    // backward is one pass that needs no mask: dh = (h > 0) ? dh / (1 - rate) : 0
    relu_dropout_backward_inplace<T>(linear1_.output().data(), dropout_.kept_scale(), dh.data(), dh.size());
  } else {
    dropout_.backward_inplace(mmap(dh));
    activation_backward_inplace<T>(activation_, pre_.data(), dh.data(), dh.size());  // at the kept input
  }
  return linear1_.backward(cmap(dh));
}

template <typename T>
void FeedForward<T>::infer(const Matrix<T>& x, InferenceBackend<T>& be, InferenceScratch<T>& s, Matrix<T>& y) const {
  be.linear(x, linear1_.weight_.data(), linear1_.bias_.data(), linear1_.out_features(), s.f);  // (N, d_ff)
  activation_inplace<T>(activation_, s.f.data(), s.f.size());
  be.linear(s.f, linear2_.weight_.data(), linear2_.bias_.data(), linear2_.out_features(), y);  // (N, d_model)
}

template class FeedForward<float>;
template class FeedForward<double>;

}  // namespace transformer

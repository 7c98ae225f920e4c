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
  if (activation_ != Activation::Relu) pre_ = h;
  activation_inplace<T>(activation_, h.data(), h.size());
  dropout_.forward_inplace(mmap(h), training, row_ids);
  // y = h W2^T + b2                                                       (N, d_model)
  return linear2_.forward(cmap(h));
}

template <typename T>
const Matrix<T>& FeedForward<T>::backward(ConstMatrixMap<T> dy) {
  dh_ = linear2_.backward(dy);  // (N, d_ff)
  MatrixMap<T> dh(dh_.data(), dh_.rows(), dh_.cols());
  dropout_.backward_inplace(dh);
  // h after dropout is 0 exactly where relu or dropout zeroed it; where dropout zeroed it the
  // mask has already zeroed the gradient, so (h > 0) is the relu derivative that remains.
  // gelu, swish: their derivative at the kept input
  if (activation_ == Activation::Relu) {
    const Matrix<T>& h = linear1_.output();
    relu_backward_inplace<T>(h.data(), dh_.data(), dh_.size());
  } else {
    activation_backward_inplace<T>(activation_, pre_.data(), dh_.data(), dh_.size());
  }
  return linear1_.backward(cmap(dh_));
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

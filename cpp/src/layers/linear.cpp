#include "transformer/layers/linear.hpp"

#include <cmath>

#include "transformer/core/checks.hpp"
#include "transformer/core/random.hpp"

namespace transformer {

template <typename T>
Linear<T>::Linear(Index in_features, Index out_features, bool bias, std::uint64_t seed) : has_bias_(bias) {
  TCPP_CHECK(in_features > 0 && out_features > 0, "Linear: in_features and out_features must be ", "positive, got ",
             in_features, " and ", out_features);
  checked_size<T>("Linear", concat("in_features ", in_features, " x out_features ", out_features),
                  linear_parameters(static_cast<double>(in_features), static_cast<double>(out_features)), 0, 0);
  weight_.resize(out_features, in_features);
  dweight_ = GradientBuffer<T>(out_features, in_features);
  bias_ = RowVector<T>::Zero(out_features);
  dbias_ = GradientBuffer<T>(1, out_features);
  glorot_uniform(weight_, seed);
}

template <typename T>
const Matrix<T>& Linear<T>::forward(ConstMatrixMap<T> x) {
  TCPP_CHECK(x.cols() == in_features(), "Linear: input has ", x.cols(), " features, expected ", in_features());
  x_ = x.data();
  rows_ = x.rows();
  y_.resize(rows_, out_features());
  // y = x W^T (+ b)                                                    (N, out)
  dense_forward<T>(precision_, x, cmap(weight_), mmap(y_), has_bias_ ? bias_.data() : nullptr);
  return y_;
}

template <typename T>
void Linear<T>::backward_params_only(ConstMatrixMap<T> dy) {
  if (x_ == nullptr) throw std::runtime_error("Linear: backward() called before forward()");
  TCPP_CHECK(dy.rows() == rows_ && dy.cols() == out_features(), "Linear: backward got dout of shape (", dy.rows(), ", ",
             dy.cols(), "), expected (", rows_, ", ", out_features(), ")");
  ConstMatrixMap<T> x(x_, rows_, in_features());
  // forward was y = x W^T + b, so dW = dy^T x and db = column sums of dy.
  dense_backward_weight<T>(precision_, dy, x, mmap(dweight_));
  if (has_bias_) add_column_sums(dy.data(), dy.rows(), dy.cols(), dbias_.data());
}

template <typename T>
const Matrix<T>& Linear<T>::backward(ConstMatrixMap<T> dy) {
  backward_params_only(dy);
  // and dx = dy W                                                       (N, in)
  dx_.resize(rows_, in_features());
  dense_backward_input<T>(precision_, dy, cmap(weight_), mmap(dx_));
  return dx_;
}

template <typename T>
void Linear<T>::set_precision(Precision p) {
  check_precision<T>(p, "Linear");
  precision_ = p;
}

template <typename T>
ParameterList<T> Linear<T>::parameters() {
  ParameterList<T> ps;
  ps.push_back({"weight", weight_.data(), dweight_.data(), {weight_.rows(), weight_.cols()}});
  if (has_bias_) ps.push_back({"bias", bias_.data(), dbias_.data(), {bias_.cols()}});
  return ps;
}

template class Linear<float>;
template class Linear<double>;

}  // namespace transformer

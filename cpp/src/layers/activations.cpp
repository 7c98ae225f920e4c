#include "transformer/layers/activations.hpp"

#include <algorithm>

namespace transformer {

namespace {

// Element-wise loops are memory bound: split them into chunks of this many elements, in
// parallel only when there are several chunks.
constexpr Index kChunk = tuning::kElementChunk;

template <typename T>
using FlatArray = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using ConstFlatArray = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

}  // namespace

template <typename T>
void relu_inplace(T* x, Index n) {
  const Index chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (Index c = 0; c < chunks; ++c) {
    const Index begin = c * kChunk, len = std::min(kChunk, n - begin);
    FlatArray<T> xs(x + begin, len);
    xs = xs.max(T(0));
  }
}

template <typename T>
void relu_backward_inplace(const T* y, T* dy, Index n) {
  const Index chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (Index c = 0; c < chunks; ++c) {
    const Index begin = c * kChunk, len = std::min(kChunk, n - begin);
    // forward was y = max(x, 0), so dx = dy where y > 0 and 0 elsewhere (0 at the kink).
    FlatArray<T> ds(dy + begin, len);
    ds = (ConstFlatArray<T>(y + begin, len) > T(0)).select(ds, T(0));
  }
}

template <typename T>
const Matrix<T>& ReLU<T>::forward(ConstMatrixMap<T> x) {
  rows_ = x.rows();
  y_.resize(x.rows(), x.cols());  // (N, C)
  const Index n = x.size();
  const T* xp = x.data();
  T* yp = y_.data();
  const Index chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (Index c = 0; c < chunks; ++c) {
    const Index begin = c * kChunk, len = std::min(kChunk, n - begin);
    FlatArray<T>(yp + begin, len) = ConstFlatArray<T>(xp + begin, len).max(T(0));
  }
  return y_;
}

template <typename T>
const Matrix<T>& ReLU<T>::backward(ConstMatrixMap<T> dy) {
  if (rows_ < 0) throw std::runtime_error("ReLU: backward() called before forward()");
  TCPP_CHECK(dy.rows() == y_.rows() && dy.cols() == y_.cols(), "ReLU: backward got dout of shape (", dy.rows(), ", ",
             dy.cols(), "), expected (", y_.rows(), ", ", y_.cols(), ")");
  dx_ = dy;  // (N, C); no reallocation when the shape is unchanged
  relu_backward_inplace(y_.data(), dx_.data(), dx_.size());
  return dx_;
}

template void relu_inplace<float>(float*, Index);
template void relu_inplace<double>(double*, Index);
template void relu_backward_inplace<float>(const float*, float*, Index);
template void relu_backward_inplace<double>(const double*, double*, Index);

template class ReLU<float>;
template class ReLU<double>;

}  // namespace transformer

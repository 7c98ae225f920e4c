#include "transformer/layers/dropout.hpp"

#include "transformer/core/random.hpp"

namespace transformer {

template <typename T>
Dropout<T>::Dropout(double rate, std::uint64_t seed, std::uint64_t stream) : rate_(rate), seed_(seed), stream_(stream) {
  TCPP_CHECK(rate >= 0.0 && rate < 1.0, "Dropout: rate must be in [0, 1), got ", rate);
}

template <typename T>
void Dropout<T>::make_mask(Index rows, Index cols, const Index* row_ids) {
  mask_.resize(static_cast<size_t>(rows * cols));
  const T keep_scale = static_cast<T>(1.0 / (1.0 - rate_));
  const std::uint64_t call = calls_++;
  T* mask = mask_.data();
#pragma omp parallel for schedule(static) if (rows * cols > 32768)
  for (Index r = 0; r < rows; ++r) {
    const std::uint64_t base = static_cast<std::uint64_t>(row_ids ? row_ids[r] : r) * static_cast<std::uint64_t>(cols);
    for (Index c = 0; c < cols; ++c)
      mask[r * cols + c] =
          counter_uniform(seed_, stream_, call, base + static_cast<std::uint64_t>(c)) < rate_ ? T(0) : keep_scale;
  }
}

template <typename T>
void Dropout<T>::forward_inplace(MatrixMap<T> x, bool training, const Index* row_ids) {
  rows_ = x.rows();
  cols_ = x.cols();
  last_training_ = training && rate_ > 0.0;
  if (!last_training_) return;
  const Index n = x.size();
  make_mask(x.rows(), x.cols(), row_ids);
  T* p = x.data();
  const T* mask = mask_.data();
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (Index i = 0; i < n; ++i) p[i] *= mask[i];
}

template <typename T>
const Matrix<T>& Dropout<T>::forward(ConstMatrixMap<T> x, bool training) {
  y_ = x;
  forward_inplace(mmap(y_), training);
  return y_;
}

template <typename T>
void Dropout<T>::backward_inplace(MatrixMap<T> dy) const {
  if (rows_ < 0) throw std::runtime_error("Dropout: backward() called before forward()");
  TCPP_CHECK(dy.rows() == rows_ && dy.cols() == cols_, "Dropout: backward got dout of shape (", dy.rows(), ", ",
             dy.cols(), "), expected (", rows_, ", ", cols_, ")");
  if (!last_training_) return;
  // forward was y = x * mask, so dx = dy * mask.
  T* p = dy.data();
  const T* mask = mask_.data();
  const Index n = dy.size();
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (Index i = 0; i < n; ++i) p[i] *= mask[i];
}

template <typename T>
const Matrix<T>& Dropout<T>::backward(ConstMatrixMap<T> dy) {
  dx_ = dy;
  backward_inplace(mmap(dx_));
  return dx_;
}

template class Dropout<float>;
template class Dropout<double>;

}  // namespace transformer

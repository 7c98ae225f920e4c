#include "transformer/softmax.hpp"

#include <limits>

namespace transformer {

namespace {

// Rows in parallel once a call has at least this many elements.
constexpr Index kParallelElements = 16384;

template <typename T>
using RowArray = Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>>;
template <typename T>
using ConstRowArray = Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>>;

}  // namespace

template <typename T>
void softmax_rows(T* x, Index rows, Index cols) {
  if (cols == 0) return;
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements)
  for (Index i = 0; i < rows; ++i) {
    RowArray<T> r(x + i * cols, cols);
    const T m = r.maxCoeff();
    if (m == -std::numeric_limits<T>::infinity()) {
      r.setZero();  // every key masked: attend to nothing rather than produce 0/0
      continue;
    }
    r = (r - m).exp();  // (cols), the largest term is exp(0) = 1 so the sum is >= 1
    r *= T(1) / r.sum();
  }
}

template <typename T>
void softmax_rows_backward(const T* y, const T* dy, T* dx, Index rows, Index cols) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements)
  for (Index i = 0; i < rows; ++i) {
    ConstRowArray<T> yr(y + i * cols, cols);
    ConstRowArray<T> dyr(dy + i * cols, cols);
    // forward was y_j = exp(x_j) / sum_k exp(x_k), so dy_j/dx_i = y_j (delta_ij - y_i) and
    //   dx_i = sum_j dy_j y_j (delta_ij - y_i) = y_i (dy_i - sum_j dy_j y_j).
    // The dot product is read in full before dx is written, so dx may alias dy.
    const T dot = (yr * dyr).sum();
    RowArray<T>(dx + i * cols, cols) = yr * (dyr - dot);
  }
}

template void softmax_rows<float>(float*, Index, Index);
template void softmax_rows<double>(double*, Index, Index);
template void softmax_rows_backward<float>(const float*, const float*, float*, Index, Index);
template void softmax_rows_backward<double>(const double*, const double*, double*, Index, Index);

}  // namespace transformer

#include "transformer/layers/softmax.hpp"

#include <cmath>
#include <limits>

namespace transformer {

template <typename T>
void softmax_rows(T* x, Index rows, Index cols) {
  if (cols == 0) return;
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements)
  for (Index i = 0; i < rows; ++i) {
    RowArray<T> r(x + i * cols, cols);
    const T m = r.template maxCoeff<Eigen::PropagateNaN>();  // a NaN anywhere makes the row NaN
    if (m == -std::numeric_limits<T>::infinity()) {
      r.setZero();  // every key masked: attend to nothing rather than produce 0/0
      continue;
    }
    if (m == std::numeric_limits<T>::infinity()) {
      // the limit as those scores grow: equal weights on the +inf entries (exp(inf - inf) is NaN)
      r = (r == m).template cast<T>();
      r *= T(1) / r.sum();
      continue;
    }
    // (cols), the largest term is exp(0) = 1 so the sum is >= 1. Masked (-inf) entries are set to
    // exactly 0: a vectorised exp may return the smallest subnormal for -inf (Eigen's SSE2 double
    // exp, which a portable build uses) instead of 0
    r = (r == -std::numeric_limits<T>::infinity()).select(T(0), (r - m).exp());
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

template <typename T>
void masked_softmax_row(T* s, Index n, const std::uint8_t* mask) {
  T mx = -std::numeric_limits<T>::infinity();
  bool open = false, nan = false;  // some key is not blocked; some unblocked score is NaN
  for (Index j = 0; j < n; ++j) {
    if (mask && mask[j]) continue;
    open = true;
    nan |= s[j] != s[j];
    if (s[j] > mx) mx = s[j];
  }
  if (!open) {  // every key blocked: attend to nothing
    for (Index j = 0; j < n; ++j) s[j] = T(0);
    return;
  }
  if (nan || mx == -std::numeric_limits<T>::infinity()) {
    // no finite score to weigh by (NaN, or every score -inf after an overflow): NaN weights, so
    // that the failure shows instead of passing for a fully masked row
    for (Index j = 0; j < n; ++j) s[j] = std::numeric_limits<T>::quiet_NaN();
    return;
  }
  T sum = T(0);
  for (Index j = 0; j < n; ++j) {
    s[j] = (mask && mask[j]) ? T(0) : std::exp(s[j] - mx);
    sum += s[j];
  }
  const T inv = T(1) / sum;
  for (Index j = 0; j < n; ++j) s[j] *= inv;
}

template void masked_softmax_row<float>(float*, Index, const std::uint8_t*);
template void masked_softmax_row<double>(double*, Index, const std::uint8_t*);
template void softmax_rows<float>(float*, Index, Index);
template void softmax_rows<double>(double*, Index, Index);
template void softmax_rows_backward<float>(const float*, const float*, float*, Index, Index);
template void softmax_rows_backward<double>(const double*, const double*, double*, Index, Index);

}  // namespace transformer

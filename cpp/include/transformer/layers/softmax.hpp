// softmax.hpp — numerically stable softmax over each row, and its backward.
//   y_j = exp(x_j - max) / sum_k exp(x_k - max)
//   dx_j = y_j * (dy_j - sum_k dy_k y_k)
// A row that is entirely -inf (fully masked) becomes all zeros; a row holding a NaN becomes NaN.
#pragma once

#include <cstdint>

#include "transformer/core/tensor.hpp"

namespace transformer {

template <typename T>
void softmax_rows(T* x, Index rows, Index cols);  // in place, rows in parallel
// Softmax of one row of n scores in place, skipping blocked entries (mask[j] != 0; mask may be
// null): they get 0, and a fully blocked row is all 0. A row whose unblocked scores hold a NaN
// or are all -inf becomes NaN, never zeros that would pass for a blocked row.
template <typename T>
void masked_softmax_row(T* s, Index n, const std::uint8_t* mask);
template <typename T>
void softmax_rows_backward(const T* y, const T* dy, T* dx, Index rows, Index cols);  // dx may alias dy

// The backward of attention weights p (rows, cols), a row-wise softmax of scores scaled by
// `scale`: d holds dP and becomes the scores' gradient, d_ij = p_ij (dP_ij - sum_k dP_ik p_ik) *
// scale. Where p_ij = 0 (a blocked key, or an underflow) d_ij is set to exactly 0, not computed,
// so that a huge dP_ij there cannot turn 0 * inf into NaN.
template <typename T>
inline void attention_weights_backward(const T* p, T* d, Index rows, Index cols, T scale) {
  for (Index i = 0; i < rows; ++i, p += cols, d += cols) {
    T dot = T(0);
    for (Index j = 0; j < cols; ++j)
      if (p[j] != T(0)) dot += d[j] * p[j];
    for (Index j = 0; j < cols; ++j) d[j] = p[j] != T(0) ? p[j] * (d[j] - dot) * scale : T(0);
  }
}

}  // namespace transformer

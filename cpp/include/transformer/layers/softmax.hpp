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

}  // namespace transformer

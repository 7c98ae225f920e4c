// activations.hpp — ReLU.
#pragma once

#include "transformer/core/tensor.hpp"

namespace transformer {

template <typename T>
class ReLU {
 public:
  const Matrix<T>& forward(ConstMatrixMap<T> x);    // y = max(x, 0)
  const Matrix<T>& backward(ConstMatrixMap<T> dy);  // dx = dy * (y > 0)
  ParameterList<T> parameters() { return {}; }
  void zero_grad() {}

 private:
  Matrix<T> y_, dx_;
  Index rows_ = -1;
};

// In place on a buffer: x = max(x, 0); and dy *= (y > 0) given the forward output y.
template <typename T>
void relu_inplace(T* x, Index n);
template <typename T>
void relu_backward_inplace(const T* y, T* dy, Index n);

}  // namespace transformer

// activations.hpp — ReLU, and the feed-forward network's activations by name (relu, gelu, swish).
#pragma once

#include <string>

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
// The backward of y = Dropout(ReLU(x)) from its output: dy = (y > 0) ? dy * kept_scale : 0, where
// kept_scale is the dropout's factor of a kept element (y > 0 only where both kept it).
template <typename T>
void relu_dropout_backward_inplace(const T* y, T kept_scale, T* dy, Index n);

// The feed-forward network's activation:
//   relu   max(x, 0)
//   gelu   x * Phi(x) = x/2 (1 + erf(x / sqrt 2))   (the exact form, not the tanh approximation)
//   swish  x * sigmoid(x)                            (also called SiLU)
enum class Activation { Relu, Gelu, Swish };
// Parse "relu" / "gelu" / "swish"; throws std::invalid_argument otherwise.
Activation parse_activation(const std::string& name);
std::string to_string(Activation a);
// x = f(x) in place.
template <typename T>
void activation_inplace(Activation a, T* x, Index n);
// dy *= f'(x) given the activation's input x (gelu, swish: relu's derivative needs only its output).
template <typename T>
void activation_backward_inplace(Activation a, const T* x, T* dy, Index n);

}  // namespace transformer

// layer_norm.hpp — LayerNorm over the last dimension:
//   y = (x - mean) / sqrt(var + eps) * weight + bias,  var the biased (1/d) variance.
#pragma once

#include "transformer/core/gradient_buffer.hpp"
#include "transformer/core/tensor.hpp"

namespace transformer {

template <typename T>
class LayerNorm {
 public:
  explicit LayerNorm(Index d, double eps = 1e-6);  // weight = 1, bias = 0

  // x: (N, d) -> y: (N, d). `x` must stay alive and unchanged until backward().
  const Matrix<T>& forward(ConstMatrixMap<T> x);
  // Fused residual: y = LN(a + b). The sum is kept in an internal buffer; backward() then
  // returns d(a + b), which is the gradient of both a and b.
  const Matrix<T>& forward_residual(ConstMatrixMap<T> a, ConstMatrixMap<T> b);
  // Inference: y = LN(a + b) for n rows (b may be null: y = LN(a)); all (n, d) row-major, y
  // distinct from a and b. Keeps nothing for backward() and leaves the layer's state alone.
  void forward_inference(const T* a, const T* b, T* y, Index n) const;
  // dy: (N, d) -> dx: (N, d); accumulates dweight, dbias.
  const Matrix<T>& backward(ConstMatrixMap<T> dy);

  ParameterList<T> parameters();  // "weight" (d), "bias" (d)
  void zero_grad() {
    dweight_.setZero();
    dbias_.setZero();
  }
  Index dim() const { return weight_.cols(); }
  double eps() const { return eps_; }
  const Matrix<T>& output() const { return y_; }

  RowVector<T> weight_, bias_;         // (d)
  GradientBuffer<T> dweight_, dbias_;  // (1, d)

 private:
  double eps_;
  const T* x_ = nullptr;  // input of the last forward (the caller's or sum_)
  Index rows_ = -1;
  Matrix<T> sum_;                                    // (N, d) a + b for forward_residual
  Eigen::Matrix<T, Eigen::Dynamic, 1> mean_, rstd_;  // (N)
  Matrix<T> y_, dx_;                                 // (N, d)
  Matrix<T> partial_;                                // (ceil(N / block), 2d) per-block dweight | dbias sums in backward
};

}  // namespace transformer

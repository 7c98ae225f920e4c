// feed_forward.hpp — the position-wise feed-forward network FFN(x) = f(x W1^T + b1) W2^T + b2,
// f = ReLU by default (or GELU, Swish: set_activation), with dropout after f (as PyTorch's
// nn.TransformerEncoderLayer).
#pragma once

#include <cstdint>

#include "transformer/kernels/inference_backend.hpp"
#include "transformer/layers/activations.hpp"
#include "transformer/layers/dropout.hpp"
#include "transformer/layers/linear.hpp"

namespace transformer {

template <typename T>
class FeedForward {
 public:
  FeedForward(Index d_model, Index d_ff, double dropout = 0.1, std::uint64_t seed = 0);

  // x: (N, d_model) -> (N, d_model). `x` must stay alive until backward().
  const Matrix<T>& forward(ConstMatrixMap<T> x, bool training, const Index* row_ids = nullptr);
  const Matrix<T>& backward(ConstMatrixMap<T> dy);  // -> dx (N, d_model)
  // Inference (kernels/inference_backend.hpp): y = max(0, x W1^T + b1) W2^T + b2, no dropout, the products through
  // `be`, the hidden layer in s.f; nothing of forward()'s state is touched.   x (N, d) -> y (N, d)
  void infer(const Matrix<T>& x, InferenceBackend<T>& be, InferenceScratch<T>& s, Matrix<T>& y) const;

  ParameterList<T> parameters() {  // linear1.{weight,bias}, linear2.{weight,bias}
    return named_parameters<T>({{"linear1", linear1_.parameters()}, {"linear2", linear2_.parameters()}});
  }
  void zero_grad() { zero_grads(linear1_, linear2_); }
  const Matrix<T>& output() const { return linear2_.output(); }
  Matrix<T>& output_mut() { return const_cast<Matrix<T>&>(linear2_.output()); }
  Dropout<T>& dropout() { return dropout_; }
  // The precision of both linear layers' products (matmul.hpp).
  void set_precision(Precision p) {
    linear1_.set_precision(p);
    linear2_.set_precision(p);
  }
  void set_activation(Activation a) { activation_ = a; }
  Activation activation() const { return activation_; }

  Linear<T> linear1_, linear2_;

 private:
  Dropout<T> dropout_;
  Activation activation_ = Activation::Relu;
  Matrix<T> pre_;  // (N, d_ff) the activation's input (gelu, swish: their derivative needs it)
};

}  // namespace transformer

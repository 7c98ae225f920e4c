// linear.hpp — the dense layer y = x W^T + b, W stored (out, in) as in PyTorch.
#pragma once

#include <cmath>
#include <cstdint>

#include "transformer/core/gradient_buffer.hpp"
#include "transformer/core/random.hpp"
#include "transformer/core/tensor.hpp"
#include "transformer/kernels/matmul.hpp"

namespace transformer {

// Glorot/Xavier uniform values (U(-a, a), a = sqrt(6 / (in + out))) for a weight w of shape
// (out, in), drawn in order from `seed`: the initial weight of every dense layer.
template <typename T>
void glorot_uniform(Matrix<T>& w, std::uint64_t seed) {
  Rng rng(seed);
  const double a = std::sqrt(6.0 / static_cast<double>(w.rows() + w.cols()));
  for (Index i = 0; i < w.size(); ++i) w.data()[i] = static_cast<T>(rng.uniform(-a, a));
}

// The output layer of a model over `vocab` classes from width d: a zero bias and, unless the
// embedding's weight serves as its weight (`tied`), a weight of its own, Glorot-uniform from
// `seed`; and their gradient buffers.
template <typename T>
void init_output_layer(Index vocab, Index d, bool tied, std::uint64_t seed, Matrix<T>& weight,
                       GradientBuffer<T>& dweight, RowVector<T>& bias, GradientBuffer<T>& dbias) {
  bias = RowVector<T>::Zero(vocab);
  dbias = GradientBuffer<T>(1, vocab);
  if (tied) return;
  weight.resize(vocab, d);
  dweight = GradientBuffer<T>(vocab, d);
  glorot_uniform(weight, seed);
}
// That output layer's parameters, by the names the models give them: output.weight (unless tied),
// output.bias.
template <typename T>
void append_output_parameters(ParameterList<T>& ps, bool tied, Matrix<T>& weight, GradientBuffer<T>& dweight,
                              RowVector<T>& bias, GradientBuffer<T>& dbias) {
  if (!tied) ps.push_back({"output.weight", weight.data(), dweight.data(), {weight.rows(), weight.cols()}});
  ps.push_back({"output.bias", bias.data(), dbias.data(), {bias.size()}});
}

template <typename T>
class Linear {
 public:
  // Glorot/Xavier uniform weights (U(-a, a), a = sqrt(6 / (in + out))), zero bias.
  Linear(Index in_features, Index out_features, bool bias = true, std::uint64_t seed = 0);

  // x: (N, in) -> y: (N, out). `x` must stay alive and unchanged until backward().
  const Matrix<T>& forward(ConstMatrixMap<T> x);
  // dy: (N, out) -> dx: (N, in); dW += dy^T x, db += sum over rows of dy.
  const Matrix<T>& backward(ConstMatrixMap<T> dy);
  // Like backward() but without computing dx (the first layer of a stack does not need it).
  void backward_params_only(ConstMatrixMap<T> dy);
  // Free the output and input gradient of the last calls (backward() then needs a new forward).
  void release() {
    x_ = nullptr;
    rows_ = -1;
    y_ = Matrix<T>();
    dx_ = Matrix<T>();
  }

  ParameterList<T> parameters();
  void zero_grad() {
    dweight_.setZero();
    dbias_.setZero();
  }

  Index in_features() const { return weight_.cols(); }
  Index out_features() const { return weight_.rows(); }
  bool has_bias() const { return has_bias_; }
  const Matrix<T>& output() const { return y_; }
  // The precision of the three products (matmul.hpp); float32 unless set. Throws
  // std::invalid_argument when it cannot run here (check_precision).
  void set_precision(Precision p);
  Precision precision() const { return precision_; }

  Matrix<T> weight_;           // (out, in)
  RowVector<T> bias_;          // (out)
  GradientBuffer<T> dweight_;  // (out, in)
  GradientBuffer<T> dbias_;    // (1, out)

 private:
  bool has_bias_;
  Precision precision_ = Precision::Float32;
  const T* x_ = nullptr;  // cached input (N, in), owned by the caller
  Index rows_ = -1;
  Matrix<T> y_;   // (N, out)
  Matrix<T> dx_;  // (N, in)
};

}  // namespace transformer

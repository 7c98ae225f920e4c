// projections.hpp — the projections every attention layer shares.
//
// An attention layer projects its input into `parts` blocks of d_model columns (queries, keys,
// values; LSH attention shares one block for queries and keys), and its heads' concatenated output
// back through W_o. The input projections are stored one under another in one (parts*d, d) matrix,
// rows [W_0; W_1; ...] as PyTorch's in_proj_weight, so one product computes any run of adjacent
// parts: self-attention projects [Q | K | V] at once, cross-attention Q from the queries and
// [K | V] from the memory. Each layer keeps its own attention arithmetic; the parameters, their
// gradients, their names, zeroing and initialisation live here once.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "transformer/core/gradient_buffer.hpp"
#include "transformer/core/tensor.hpp"
#include "transformer/kernels/matmul.hpp"
#include "transformer/layers/linear.hpp"

namespace transformer {

// One input projection: its parameter name and the random stream (seed + stream) it starts from.
struct ProjectionPart {
  const char* name;
  std::uint64_t stream;
};

template <typename T>
class AttentionProjections {
 public:
  // Each input part is Glorot-uniform as a (d, d) matrix from its own stream, biases zero; W_o is
  // a Linear from stream 4. The owning layer checks d_model and the layer's size first.
  AttentionProjections(Index d_model, std::initializer_list<ProjectionPart> parts, std::uint64_t seed);

  Index d_model() const { return d_; }
  Index parts() const { return static_cast<Index>(names_.size()); }

  // Parts first .. first+n-1 of W_in, (n*d, d), and their bias.
  ConstMatrixMap<T> weight(Index first, Index n) const {
    return ConstMatrixMap<T>(w_in.data() + first * d_ * d_, n * d_, d_);
  }
  const T* bias(Index first) const { return b_in.data() + first * d_; }

  // y (rows, n*d) = x W^T + b over parts first .. first+n-1; y (a Matrix or a GrowOnlyMatrix) is
  // resized.
  template <typename Buffer>
  void project(Precision p, ConstMatrixMap<T> x, Index first, Index n, Buffer& y) const {
    y.resize(x.rows(), n * d_);
    dense_forward<T>(p, x, weight(first, n), mmap(y), bias(first));
  }
  // The backward of project given its input x and dy (rows, n*d): dW += dy^T x, db += the column
  // sums of dy; with dx, also dx (rows, d) = dy W (resized and assigned).
  void backward(Precision p, ConstMatrixMap<T> dy, ConstMatrixMap<T> x, Index first, Index n, Matrix<T>* dx);

  // "<part>.weight", "<part>.bias" of each input part, in order.
  void append_input_parameters(ParameterList<T>& ps);
  // The input parts', then "output.weight" and "output.bias".
  ParameterList<T> parameters();
  void zero_grad();

  Matrix<T> w_in;           // (parts*d, d)
  GradientBuffer<T> dw_in;  // (parts*d, d)
  RowVector<T> b_in;        // (parts*d)
  GradientBuffer<T> db_in;  // (1, parts*d)
  Linear<T> out;            // W_o (d, d)

 private:
  Index d_;
  std::vector<std::string> names_;
};

}  // namespace transformer

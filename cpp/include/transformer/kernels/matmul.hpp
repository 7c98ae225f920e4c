// matmul.hpp — the matrix-product backend of the dense layers: float32 by the AVX-512 kernel
// (f32_gemm.hpp; Eigen's GEMM on CPUs without AVX-512F), float64 by Eigen's GEMM, or bfloat16
// inputs with float32 accumulation (bf16_gemm.hpp).
//
// A dense layer y = x W^T (W (out, in) as in PyTorch) needs three products, forward and backward:
//   dense_forward          y  = x W^T (+ b) (rows, out)
//   dense_backward_input   dx = dy W        (rows, in)
//   dense_backward_weight  dW += dy^T x     (out, in)
// Linear, the attention projections and the model's output layer call these, so the precision of
// their products is a property of this backend, not a copy of any layer. Everything else (master
// weights, gradients, Adam, LayerNorm, softmax, the loss) stays in the layer's scalar type.
#pragma once

#include <string>

#include "transformer/core/tensor.hpp"

namespace transformer {

enum class Precision {
  Float32,   // the scalar type's own products (float: float32; double: float64)
  BFloat16,  // float inputs rounded to bfloat16, products summed in float32 (needs AVX512_BF16)
};

// "float32" | "bf16" (std::invalid_argument naming both otherwise).
Precision parse_precision(const std::string& name);
std::string to_string(Precision p);

// Throws std::invalid_argument "<who>: precision 'bf16' ..." when p cannot run with scalar type T
// on this CPU (bf16 needs float and bf16::supported()); says what to use instead.
template <typename T>
void check_precision(Precision p, const char* who);

// y (rows, out) = x (rows, in) W^T + bias, W (out, in), bias (out) or nullptr for none. All maps
// contiguous row-major.
template <typename T>
void dense_forward(Precision p, ConstMatrixMap<T> x, ConstMatrixMap<T> W, MatrixMap<T> y, const T* bias = nullptr);
// dx (rows, in) = dy (rows, out) W.
template <typename T>
void dense_backward_input(Precision p, ConstMatrixMap<T> dy, ConstMatrixMap<T> W, MatrixMap<T> dx);
// dW (out, in) += dy^T (out, rows) x (rows, in).
template <typename T>
void dense_backward_weight(Precision p, ConstMatrixMap<T> dy, ConstMatrixMap<T> x, MatrixMap<T> dW);

}  // namespace transformer

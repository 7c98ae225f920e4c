#include "transformer/kernels/matmul.hpp"

#include <stdexcept>
#include <type_traits>

#include "transformer/kernels/bf16_gemm.hpp"
#include "transformer/kernels/f32_gemm.hpp"

namespace transformer {

Precision parse_precision(const std::string& name) {
  if (name == "float32") return Precision::Float32;
  if (name == "bf16") return Precision::BFloat16;
  throw std::invalid_argument("precision must be 'float32' or 'bf16', got '" + name + "'");
}

std::string to_string(Precision p) { return p == Precision::BFloat16 ? "bf16" : "float32"; }

template <typename T>
void check_precision(Precision p, const char* who) {
  if (p != Precision::BFloat16) return;
  TCPP_CHECK((std::is_same<T, float>::value), who, ": precision 'bf16' needs dtype float32 (float64 models are ",
             "for gradient checks and run every product in float64); use precision 'float32'");
  TCPP_CHECK(bf16::supported(), who, ": precision 'bf16' is not available: ", bf16::unsupported_reason(),
             "; use precision 'float32'");
}

// The bfloat16 kernel exists for float only: check_precision refuses bf16 for a double model, so
// reaching it with double is a bug, not a user error.
[[noreturn]] static void bf16_for_double() { throw std::logic_error("dense product: bf16 requested for float64"); }

// float32 products by the AVX-512 kernel when the CPU has it (float64 always by Eigen)
template <typename T>
static bool use_f32_kernel() {
  if constexpr (std::is_same_v<T, float>) return f32::supported();
  return false;
}

template <typename T>
void dense_forward(Precision p, ConstMatrixMap<T> x, ConstMatrixMap<T> W, MatrixMap<T> y, const T* bias) {
  if (p == Precision::BFloat16) {
    if constexpr (!std::is_same_v<T, float>) bf16_for_double();
    // y = x W^T: op(B) = W^T, read from W (out, in) transposed
    else
      bf16::gemm(x.rows(), W.rows(), x.cols(), x.data(), x.cols(), false, W.data(), W.cols(), true, 0.0f, y.data(),
                 y.cols());
  } else if (use_f32_kernel<T>()) {
    if constexpr (std::is_same_v<T, float>) {
      // the kernel adds the bias as it stores each tile: no second pass over y
      f32::gemm(x.rows(), W.rows(), x.cols(), x.data(), x.cols(), false, W.data(), W.cols(), true, 0.0f, y.data(),
                y.cols(), bias);
      return;
    }
  } else {
    y.noalias() = x * W.transpose();
  }
  if (bias != nullptr) add_row_vector(y.data(), y.rows(), y.cols(), bias);
}

template <typename T>
void dense_backward_input(Precision p, ConstMatrixMap<T> dy, ConstMatrixMap<T> W, MatrixMap<T> dx) {
  if (p == Precision::BFloat16) {
    if constexpr (!std::is_same_v<T, float>)
      bf16_for_double();
    else
      bf16::gemm(dy.rows(), W.cols(), dy.cols(), dy.data(), dy.cols(), false, W.data(), W.cols(), false, 0.0f,
                 dx.data(), dx.cols());
    return;
  }
  if constexpr (std::is_same_v<T, float>)
    if (use_f32_kernel<T>()) {
      f32::gemm(dy.rows(), W.cols(), dy.cols(), dy.data(), dy.cols(), false, W.data(), W.cols(), false, 0.0f, dx.data(),
                dx.cols());
      return;
    }
  dx.noalias() = dy * W;
}

template <typename T>
void dense_backward_weight(Precision p, ConstMatrixMap<T> dy, ConstMatrixMap<T> x, MatrixMap<T> dW) {
  if (p == Precision::BFloat16) {
    if constexpr (!std::is_same_v<T, float>) bf16_for_double();
    // dW += dy^T x: op(A) = dy^T, read from dy (rows, out) transposed; K = rows
    else
      bf16::gemm(dy.cols(), x.cols(), dy.rows(), dy.data(), dy.cols(), true, x.data(), x.cols(), false, 1.0f, dW.data(),
                 dW.cols());
    return;
  }
  if constexpr (std::is_same_v<T, float>)
    if (use_f32_kernel<T>()) {
      f32::gemm(dy.cols(), x.cols(), dy.rows(), dy.data(), dy.cols(), true, x.data(), x.cols(), false, 1.0f, dW.data(),
                dW.cols());
      return;
    }
  dW.noalias() += dy.transpose() * x;
}

template void check_precision<float>(Precision, const char*);
template void check_precision<double>(Precision, const char*);
template void dense_forward<float>(Precision, ConstMatrixMap<float>, ConstMatrixMap<float>, MatrixMap<float>,
                                   const float*);
template void dense_forward<double>(Precision, ConstMatrixMap<double>, ConstMatrixMap<double>, MatrixMap<double>,
                                    const double*);
template void dense_backward_input<float>(Precision, ConstMatrixMap<float>, ConstMatrixMap<float>, MatrixMap<float>);
template void dense_backward_input<double>(Precision, ConstMatrixMap<double>, ConstMatrixMap<double>,
                                           MatrixMap<double>);
template void dense_backward_weight<float>(Precision, ConstMatrixMap<float>, ConstMatrixMap<float>, MatrixMap<float>);
template void dense_backward_weight<double>(Precision, ConstMatrixMap<double>, ConstMatrixMap<double>,
                                            MatrixMap<double>);

}  // namespace transformer

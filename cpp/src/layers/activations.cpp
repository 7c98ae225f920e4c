#include "transformer/layers/activations.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "transformer/core/checks.hpp"
#include "transformer/core/enum_names.hpp"

namespace transformer {

namespace {

// Element-wise loops are memory bound: split them into chunks of this many elements, in
// parallel only when there are several chunks.
constexpr Index kChunk = tuning::kElementChunk;

template <typename T>
using FlatArray = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using ConstFlatArray = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

}  // namespace

template <typename T>
void relu_inplace(T* x, Index n) {
  const Index chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (Index c = 0; c < chunks; ++c) {
    const Index begin = c * kChunk, len = std::min(kChunk, n - begin);
    FlatArray<T> xs(x + begin, len);
    xs = xs.max(T(0));
  }
}

template <typename T>
void relu_backward_inplace(const T* y, T* dy, Index n) {
  const Index chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (Index c = 0; c < chunks; ++c) {
    const Index begin = c * kChunk, len = std::min(kChunk, n - begin);
    // forward was y = max(x, 0), so dx = dy where y > 0 and 0 elsewhere (0 at the kink).
    FlatArray<T> ds(dy + begin, len);
    ds = (ConstFlatArray<T>(y + begin, len) > T(0)).select(ds, T(0));
  }
}

template <typename T>
void relu_dropout_backward_inplace(const T* y, T kept_scale, T* dy, Index n) {
  const Index chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (Index c = 0; c < chunks; ++c) {
    const Index begin = c * kChunk, len = std::min(kChunk, n - begin);
    FlatArray<T> ds(dy + begin, len);
    ds = (ConstFlatArray<T>(y + begin, len) > T(0)).select(ds * kept_scale, T(0));
  }
}

template <typename T>
const Matrix<T>& ReLU<T>::forward(ConstMatrixMap<T> x) {
  rows_ = x.rows();
  y_.resize(x.rows(), x.cols());  // (N, C)
  const Index n = x.size();
  const T* xp = x.data();
  T* yp = y_.data();
  const Index chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (Index c = 0; c < chunks; ++c) {
    const Index begin = c * kChunk, len = std::min(kChunk, n - begin);
    FlatArray<T>(yp + begin, len) = ConstFlatArray<T>(xp + begin, len).max(T(0));
  }
  return y_;
}

template <typename T>
const Matrix<T>& ReLU<T>::backward(ConstMatrixMap<T> dy) {
  if (rows_ < 0) throw std::runtime_error("ReLU: backward() called before forward()");
  TCPP_CHECK(dy.rows() == y_.rows() && dy.cols() == y_.cols(), "ReLU: backward got dout of shape (", dy.rows(), ", ",
             dy.cols(), "), expected (", y_.rows(), ", ", y_.cols(), ")");
  dx_ = dy;  // (N, C); no reallocation when the shape is unchanged
  relu_backward_inplace(y_.data(), dx_.data(), dx_.size());
  return dx_;
}

namespace {
constexpr EnumName<Activation> kActivationNames[] = {
    {Activation::Relu, "relu"}, {Activation::Gelu, "gelu"}, {Activation::Swish, "swish"}};
}  // namespace

Activation parse_activation(const std::string& name) {
  return parse_name(kActivationNames, name, [&] {
    return concat("activation: unknown activation '", name, "'; expected relu, gelu or swish");
  });
}

std::string to_string(Activation a) { return name_of(kActivationNames, a, "relu"); }

namespace {

// Phi(x) and phi(x): the standard normal distribution function and density (gelu); sigmoid (swish)
template <typename T>
inline T normal_cdf(T x) {
  return T(0.5) * (T(1) + std::erf(x * T(M_SQRT1_2)));
}
template <typename T>
inline T normal_pdf(T x) {
  return std::exp(T(-0.5) * x * x) * T(0.5 * M_2_SQRTPI * M_SQRT1_2);
}
template <typename T>
inline T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// f(p[i]) for every element, in parallel chunks
template <typename T, typename F>
void map_elements(T* p, Index n, F&& f) {
  const Index chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (Index c = 0; c < chunks; ++c) {
    const Index begin = c * kChunk, end = std::min(n, begin + kChunk);
    for (Index i = begin; i < end; ++i) f(i);
  }
}

}  // namespace

template <typename T>
void activation_inplace(Activation a, T* x, Index n) {
  if (a == Activation::Relu) return relu_inplace(x, n);
  if (a == Activation::Gelu) return map_elements(x, n, [x](Index i) { x[i] = x[i] * normal_cdf(x[i]); });
  map_elements(x, n, [x](Index i) { x[i] = x[i] * sigmoid(x[i]); });
}

template <typename T>
void activation_backward_inplace(Activation a, const T* x, T* dy, Index n) {
  TCPP_CHECK(a != Activation::Relu, "activation_backward_inplace: relu's derivative takes its output");
  // gelu' = Phi(x) + x phi(x); swish' = s (1 + x (1 - s)), s = sigmoid(x)
  if (a == Activation::Gelu)
    return map_elements(dy, n, [x, dy](Index i) { dy[i] *= normal_cdf(x[i]) + x[i] * normal_pdf(x[i]); });
  map_elements(dy, n, [x, dy](Index i) {
    const T s = sigmoid(x[i]);
    dy[i] *= s * (T(1) + x[i] * (T(1) - s));
  });
}

template void activation_inplace<float>(Activation, float*, Index);
template void activation_inplace<double>(Activation, double*, Index);
template void activation_backward_inplace<float>(Activation, const float*, float*, Index);
template void activation_backward_inplace<double>(Activation, const double*, double*, Index);
template void relu_inplace<float>(float*, Index);
template void relu_inplace<double>(double*, Index);
template void relu_backward_inplace<float>(const float*, float*, Index);
template void relu_dropout_backward_inplace<float>(const float*, float, float*, Index);
template void relu_dropout_backward_inplace<double>(const double*, double, double*, Index);
template void relu_backward_inplace<double>(const double*, double*, Index);

template class ReLU<float>;
template class ReLU<double>;

}  // namespace transformer

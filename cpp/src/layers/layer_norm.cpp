#include "transformer/layers/layer_norm.hpp"

#include <algorithm>
#include <cmath>

#include "transformer/core/checks.hpp"

namespace transformer {

namespace {

// backward() sums dweight/dbias over fixed blocks of rows, then adds the blocks up in order, so
// the result does not depend on the thread count.
constexpr Index kBlockRows = tuning::kLayerNormBlockRows;

// The sum of f(0) + ... + f(d - 1) in an order fixed by d alone: 16 running sums over the
// columns j mod 16, then the tail, added up in order. Eigen's .sum() / .mean() start their
// vector loop at the first aligned element, so their result depends in the last bits on where the
// row is allocated (the same input can give gradients 1 ulp apart in two models); this one does not.
template <typename T, typename F>
inline T fixed_order_sum(Index d, F f) {
  constexpr Index kLanes = 16;
  T acc[kLanes] = {};
  Index j = 0;
  for (; j + kLanes <= d; j += kLanes) {
    for (Index k = 0; k < kLanes; ++k) acc[k] += f(j + k);
  }
  T tail = T(0);
  for (; j < d; ++j) tail += f(j);
  T total = T(0);
  for (Index k = 0; k < kLanes; ++k) total += acc[k];
  return total + tail;
}

// One row: mean, rstd = 1 / sqrt(var + eps), y = (x - mean) * rstd * weight + bias.
template <typename T>
inline void normalize_row(const T* x, T* y, Index d, const RowVector<T>& weight, const RowVector<T>& bias, T eps,
                          T& mean_out, T& rstd_out) {
  ConstRowArray<T> xr(x, d);
  const T inv_d = T(1) / static_cast<T>(d);
  T mean = fixed_order_sum<T>(d, [x](Index j) { return x[j]; }) * inv_d;
  const T var = fixed_order_sum<T>(d, [x, mean](Index j) { return (x[j] - mean) * (x[j] - mean); }) * inv_d;  // biased
  T rstd = T(1) / std::sqrt(var + eps);
  if (!std::isfinite(var) && xr.isFinite().all()) {
    // Rare path: finite inputs so large that the sum or the squares overflow (float32 beyond
    // ~1e19). Work in units of s = max |x|: mean = s * mean(x / s), var = s^2 * m2 with
    // m2 = mean((x / s - mean / s)^2), so rstd = 1 / (s * sqrt(m2 + eps / s^2)).
    const T s = xr.abs().maxCoeff();
    const T mean_s = (xr / s).mean();
    const T m2 = (xr / s - mean_s).square().mean();
    mean = s * mean_s;
    rstd = T(1) / (s * std::sqrt(m2 + eps / (s * s)));
    RowArray<T>(y, d) = (xr / s - mean_s) * (s * rstd) * weight.array() + bias.array();
    mean_out = mean;
    rstd_out = rstd;
    return;
  }
  RowArray<T>(y, d) = (xr - mean) * rstd * weight.array() + bias.array();
  mean_out = mean;
  rstd_out = rstd;
}

}  // namespace

template <typename T>
LayerNorm<T>::LayerNorm(Index d, double eps) : eps_(eps) {
  TCPP_CHECK(d > 0, "LayerNorm: d_model must be positive, got ", d);
  // eps = 0 divides by zero on a constant row (a NaN output that would look like an overflow)
  TCPP_CHECK(eps > 0.0 && std::isfinite(eps), "LayerNorm: eps must be a finite number > 0, got ", eps);
  checked_size<T>("LayerNorm", concat("d_model ", d), 2.0 * static_cast<double>(d), 0, 0);  // before allocating
  weight_ = RowVector<T>::Ones(d);
  bias_ = RowVector<T>::Zero(d);
  dweight_ = GradientBuffer<T>(1, d);
  dbias_ = GradientBuffer<T>(1, d);
}

template <typename T>
const Matrix<T>& LayerNorm<T>::forward(ConstMatrixMap<T> x) {
  TCPP_CHECK(x.cols() == dim(), "LayerNorm: input has ", x.cols(), " features, expected ", dim());
  const Index n = x.rows(), d = dim();
  x_ = x.data();
  rows_ = n;
  y_.resize(n, d);  // (N, d)
  mean_.resize(n);  // (N)
  rstd_.resize(n);  // (N)
  const T eps = static_cast<T>(eps_);
  const T* xp = x.data();
#pragma omp parallel for schedule(static) if (n * d >= kParallelElements)
  for (Index i = 0; i < n; ++i) {
    normalize_row(xp + i * d, y_.data() + i * d, d, weight_, bias_, eps, mean_[i], rstd_[i]);
  }
  return y_;
}

template <typename T>
const Matrix<T>& LayerNorm<T>::forward_residual(ConstMatrixMap<T> a, ConstMatrixMap<T> b) {
  TCPP_CHECK(a.cols() == dim(), "LayerNorm: input has ", a.cols(), " features, expected ", dim());
  TCPP_CHECK(a.rows() == b.rows() && a.cols() == b.cols(), "LayerNorm: forward_residual got inputs of shape (",
             a.rows(), ", ", a.cols(), ") and (", b.rows(), ", ", b.cols(), "), expected equal shapes");
  const Index n = a.rows(), d = dim();
  sum_.resize(n, d);  // (N, d) a + b, the input backward() normalises again
  y_.resize(n, d);    // (N, d)
  mean_.resize(n);    // (N)
  rstd_.resize(n);    // (N)
  x_ = sum_.data();
  rows_ = n;
  const T eps = static_cast<T>(eps_);
  const T* ap = a.data();
  const T* bp = b.data();
  T* sp = sum_.data();
#pragma omp parallel for schedule(static) if (n * d >= kParallelElements)
  for (Index i = 0; i < n; ++i) {
    RowArray<T>(sp + i * d, d) = ConstRowArray<T>(ap + i * d, d) + ConstRowArray<T>(bp + i * d, d);
    normalize_row(sp + i * d, y_.data() + i * d, d, weight_, bias_, eps, mean_[i], rstd_[i]);
  }
  return y_;
}

template <typename T>
void LayerNorm<T>::forward_inference(const T* a, const T* b, T* y, Index n) const {
  const Index d = dim();
  const T eps = static_cast<T>(eps_);
#pragma omp parallel for schedule(static) if (n * d >= kParallelElements)
  for (Index i = 0; i < n; ++i) {
    T* yr = y + i * d;
    RowArray<T>(yr, d) = ConstRowArray<T>(a + i * d, d);
    if (b != nullptr) RowArray<T>(yr, d) += ConstRowArray<T>(b + i * d, d);
    T mean, rstd;
    normalize_row(yr, yr, d, weight_, bias_, eps, mean, rstd);
  }
}

template <typename T>
const Matrix<T>& LayerNorm<T>::backward(ConstMatrixMap<T> dy) {
  if (x_ == nullptr) throw std::runtime_error("LayerNorm: backward() called before forward()");
  TCPP_CHECK(dy.rows() == rows_ && dy.cols() == dim(), "LayerNorm: backward got dout of shape (", dy.rows(), ", ",
             dy.cols(), "), expected (", rows_, ", ", dim(), ")");
  const Index n = rows_, d = dim();
  const Index blocks = (n + kBlockRows - 1) / kBlockRows;
  dx_.resize(n, d);                // (N, d)
  partial_.resize(blocks, 2 * d);  // (blocks, 2d): [sum dy * xhat | sum dy] over the block's rows
  const T* xp = x_;
  const T* dyp = dy.data();
  T* dxp = dx_.data();
  T* pp = partial_.data();
  const auto w = weight_.array();
  // forward was xhat = (x - mean) * rstd and y = xhat * w + b. With g = dy * w:
  //   dw += sum_rows dy * xhat,   db += sum_rows dy,
  //   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
  // (the two means are over the row; they come from d mean / dx and d rstd / dx).
  // xhat is recomputed from the cached input, mean and rstd instead of being stored.
#pragma omp parallel for schedule(static) if (n * d >= kParallelElements)
  for (Index blk = 0; blk < blocks; ++blk) {
    RowArray<T> pdw(pp + blk * 2 * d, d);
    RowArray<T> pdb(pp + blk * 2 * d + d, d);
    pdw.setZero();
    pdb.setZero();
    const Index end = std::min(n, (blk + 1) * kBlockRows);
    for (Index i = blk * kBlockRows; i < end; ++i) {
      const T mean = mean_[i], rstd = rstd_[i];
      ConstRowArray<T> xr(xp + i * d, d);
      ConstRowArray<T> dyr(dyp + i * d, d);
      const auto xhat = (xr - mean) * rstd;  // expressions, evaluated where used
      const auto g = dyr * w;
      const T* xi = xp + i * d;
      const T* dyi = dyp + i * d;
      const T* wp = weight_.data();
      const T inv_d = T(1) / static_cast<T>(d);
      const T mean_g = fixed_order_sum<T>(d, [dyi, wp](Index j) { return dyi[j] * wp[j]; }) * inv_d;
      const T mean_gx =
          fixed_order_sum<T>(d, [=](Index j) { return dyi[j] * wp[j] * ((xi[j] - mean) * rstd); }) * inv_d;
      RowArray<T>(dxp + i * d, d) = rstd * (g - mean_g - xhat * mean_gx);
      pdw += dyr * xhat;
      pdb += dyr;
    }
  }
  // Add the blocks up in block order.
  for (Index blk = 0; blk < blocks; ++blk) {
    RowArray<T>(dweight_.data(), d) += ConstRowArray<T>(pp + blk * 2 * d, d);
    RowArray<T>(dbias_.data(), d) += ConstRowArray<T>(pp + blk * 2 * d + d, d);
  }
  return dx_;
}

template <typename T>
ParameterList<T> LayerNorm<T>::parameters() {
  ParameterList<T> ps;
  ps.push_back({"weight", weight_.data(), dweight_.data(), {weight_.cols()}});
  ps.push_back({"bias", bias_.data(), dbias_.data(), {bias_.cols()}});
  return ps;
}

template class LayerNorm<float>;
template class LayerNorm<double>;

}  // namespace transformer

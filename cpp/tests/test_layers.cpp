// test_layers.cpp — softmax, layer norm and Linear, forward and backward (and the model's input
// layer, the embedding and dropout fused in one pass, against its two passes): the forward passes
// against plain loops written from the formulas, the backward passes against float64 central
// finite differences of L = sum(dy * y) (so dL/dx is what backward(dy) returns), float32 against
// the same loops in float64.
//
// Tolerances: float64 forwards to 1e-12 relative (a few roundings per value); float64 gradients
// to 1e-7 + 1e-6 relative (central differences with h = 1e-5 are good to about 1e-10 here);
// float32 to bounds of the float32 rounding (see each check).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "check.hpp"
#include "transformer/attention/kinds.hpp"
#include "transformer/attention/linear_attention.hpp"
#include "transformer/kernels/bf16_gemm.hpp"
#include "transformer/layers/dropout.hpp"
#include "transformer/layers/embedding.hpp"
#include "transformer/layers/layer_norm.hpp"
#include "transformer/layers/linear.hpp"
#include "transformer/layers/softmax.hpp"

using transformer::ConstMatrixMap;
using transformer::Index;
using transformer::Matrix;
using namespace transformer::testing;

namespace {

constexpr double kUnitRoundoff = 1.0 / (1 << 24);  // float32
constexpr double kGradAtol = 1e-7, kGradRtol = 1e-6;

template <typename T>
std::vector<T> cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

double dot(const double* a, const double* b, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// ---------------------------------------------------------------------------------------------
// softmax

// y_j = exp(x_j - max) / sum_k exp(x_k - max) over each row; blocked entries (mask) get 0, a row
// with nothing unblocked (or all -inf) is all 0.
std::vector<double> plain_softmax(const std::vector<double>& x, Index rows, Index cols,
                                  const std::vector<std::uint8_t>& mask = {}) {
  std::vector<double> y(x.size(), 0.0);
  for (Index i = 0; i < rows; ++i) {
    auto open = [&](Index j) { return mask.empty() || mask[j] == 0; };
    double m = -INFINITY;
    for (Index j = 0; j < cols; ++j)
      if (open(j)) m = std::max(m, x[i * cols + j]);
    if (m == -INFINITY) continue;
    double sum = 0.0;
    for (Index j = 0; j < cols; ++j)
      if (open(j)) sum += std::exp(x[i * cols + j] - m);
    for (Index j = 0; j < cols; ++j)
      if (open(j)) y[i * cols + j] = std::exp(x[i * cols + j] - m) / sum;
  }
  return y;
}

// scores of 6 rows x 37 columns in [-8, 8), the third row all -inf (fully masked), the fifth with
// some -inf entries
std::vector<double> softmax_input(Index rows, Index cols) {
  std::vector<double> x = uniform<double>(static_cast<size_t>(rows * cols), 7, -8.0, 8.0);
  for (Index j = 0; j < cols; ++j) x[2 * cols + j] = -INFINITY;
  for (Index j = 0; j < cols; j += 3) x[4 * cols + j] = -INFINITY;
  return x;
}

void test_softmax_forward() {
  const Index rows = 6, cols = 37;
  const std::vector<double> x = softmax_input(rows, cols);
  const std::vector<double> want = plain_softmax(x, rows, cols);
  std::vector<double> y64 = x;
  transformer::softmax_rows(y64.data(), rows, cols);
  CHECK_CLOSE("softmax_rows<double>", y64.data(), want.data(), want.size(), 1e-300, 1e-12);
  // float32 against the same loop on the float32 inputs: x - max is within 8 u of exact (|x| < 8
  // here, so exp is within 8 u relative), exp itself a few u, the sum and division a few more
  std::vector<float> y32 = cast<float>(x);
  const std::vector<double> want32 = plain_softmax(std::vector<double>(y32.begin(), y32.end()), rows, cols);
  transformer::softmax_rows(y32.data(), rows, cols);
  CHECK_CLOSE("softmax_rows<float>", y32.data(), want32.data(), want32.size(), 1e-30, 32 * kUnitRoundoff);
  // masked_softmax_row: blocked entries get 0 and do not count in the sum
  std::vector<std::uint8_t> mask(static_cast<size_t>(cols));
  for (Index j = 0; j < cols; ++j) mask[j] = (j % 4 == 1) ? 1 : 0;
  std::vector<double> row(x.begin(), x.begin() + cols);
  const std::vector<double> masked = plain_softmax(row, 1, cols, mask);
  transformer::masked_softmax_row(row.data(), cols, mask.data());
  CHECK_CLOSE("masked_softmax_row<double>", row.data(), masked.data(), masked.size(), 1e-300, 1e-12);
  std::fill(mask.begin(), mask.end(), 1);  // every key blocked: attend to nothing
  transformer::masked_softmax_row(row.data(), cols, mask.data());
  CHECK(std::all_of(row.begin(), row.end(), [](double v) { return v == 0.0; }));
}

void test_softmax_backward() {
  const Index rows = 5, cols = 11;
  std::vector<double> x = uniform<double>(static_cast<size_t>(rows * cols), 11, -3.0, 3.0);
  const std::vector<double> dy = uniform<double>(x.size(), 12);
  std::vector<double> y = x;
  transformer::softmax_rows(y.data(), rows, cols);
  std::vector<double> dx(x.size());
  transformer::softmax_rows_backward(y.data(), dy.data(), dx.data(), rows, cols);
  const std::vector<double> fd = finite_differences(x.data(), x.size(), [&] {
    std::vector<double> yy = x;
    transformer::softmax_rows(yy.data(), rows, cols);
    return dot(yy.data(), dy.data(), yy.size());
  });
  CHECK_CLOSE("softmax_rows_backward<double> against finite differences", dx.data(), fd.data(), fd.size(), kGradAtol,
              kGradRtol);
  // float32 against the formula dx_j = y_j (dy_j - sum_k dy_k y_k) in float64, on the float32 y
  const std::vector<float> y32 = cast<float>(y), dy32 = cast<float>(dy);
  std::vector<float> dx32(x.size());
  transformer::softmax_rows_backward(y32.data(), dy32.data(), dx32.data(), rows, cols);
  std::vector<double> want(x.size()), bound(x.size());
  for (Index i = 0; i < rows; ++i) {
    double s = 0.0, magnitude = 0.0;
    for (Index j = 0; j < cols; ++j) {
      s += static_cast<double>(dy32[i * cols + j]) * y32[i * cols + j];
      magnitude += std::fabs(static_cast<double>(dy32[i * cols + j]) * y32[i * cols + j]);
    }
    for (Index j = 0; j < cols; ++j) {
      const double yj = y32[i * cols + j], dyj = dy32[i * cols + j];
      want[i * cols + j] = yj * (dyj - s);
      bound[i * cols + j] = static_cast<double>(cols + 3) * kUnitRoundoff * yj * (std::fabs(dyj) + magnitude);
    }
  }
  CHECK_WITHIN("softmax_rows_backward<float> against the formula", dx32.data(), want.data(), bound.data(), want.size());
}

// ---------------------------------------------------------------------------------------------
// layer norm

// y = (x - mean) / sqrt(var + eps) * weight + bias over each row, var the biased (1/d) variance.
std::vector<double> plain_layer_norm(const std::vector<double>& x, Index rows, Index d, const double* weight,
                                     const double* bias, double eps) {
  std::vector<double> y(x.size());
  for (Index i = 0; i < rows; ++i) {
    const double* xr = x.data() + i * d;
    double mean = 0.0, var = 0.0;
    for (Index j = 0; j < d; ++j) mean += xr[j];
    mean /= static_cast<double>(d);
    for (Index j = 0; j < d; ++j) var += (xr[j] - mean) * (xr[j] - mean);
    var /= static_cast<double>(d);
    for (Index j = 0; j < d; ++j) y[i * d + j] = (xr[j] - mean) / std::sqrt(var + eps) * weight[j] + bias[j];
  }
  return y;
}

void test_layer_norm_forward() {
  const Index rows = 70, d = 24;  // more rows than a backward summation block
  const double eps = 1e-6;
  const std::vector<double> x = uniform<double>(static_cast<size_t>(rows * d), 21, -2.0, 3.0);
  transformer::LayerNorm<double> ln(d, eps);
  const std::vector<double> w = uniform<double>(static_cast<size_t>(d), 22, 0.5, 1.5),
                            b = uniform<double>(static_cast<size_t>(d), 23);
  std::copy(w.begin(), w.end(), ln.weight_.data());
  std::copy(b.begin(), b.end(), ln.bias_.data());
  const std::vector<double> want = plain_layer_norm(x, rows, d, w.data(), b.data(), eps);
  const Matrix<double>& y = ln.forward(ConstMatrixMap<double>(x.data(), rows, d));
  CHECK_CLOSE("LayerNorm<double>::forward", y.data(), want.data(), want.size(), 1e-12, 1e-12);
  // forward_residual normalises a + b
  std::vector<double> half(x.size());
  std::transform(x.begin(), x.end(), half.begin(), [](double v) { return v / 2; });
  const Matrix<double>& yr =
      ln.forward_residual(ConstMatrixMap<double>(half.data(), rows, d), ConstMatrixMap<double>(half.data(), rows, d));
  CHECK_CLOSE("LayerNorm<double>::forward_residual", yr.data(), want.data(), want.size(), 1e-12, 1e-12);
  // float32: mean, variance and normalisation carry about d + 8 roundings, relative to the row's
  // values; |x - mean| / std * weight + bias stays below 4 here
  transformer::LayerNorm<float> ln32(d, eps);
  std::copy(w.begin(), w.end(), ln32.weight_.data());
  std::copy(b.begin(), b.end(), ln32.bias_.data());
  const std::vector<float> x32 = cast<float>(x);
  const std::vector<double> want32 =
      plain_layer_norm(std::vector<double>(x32.begin(), x32.end()), rows, d, w.data(), b.data(), eps);
  const Matrix<float>& y32 = ln32.forward(ConstMatrixMap<float>(x32.data(), rows, d));
  CHECK_CLOSE("LayerNorm<float>::forward", y32.data(), want32.data(), want32.size(),
              4.0 * static_cast<double>(d + 8) * kUnitRoundoff, 0.0);
}

void test_layer_norm_backward() {
  const Index rows = 40, d = 9;
  std::vector<double> x = uniform<double>(static_cast<size_t>(rows * d), 31, -2.0, 2.0);
  const std::vector<double> dy = uniform<double>(x.size(), 32);
  transformer::LayerNorm<double> ln(d, 1e-6);
  const std::vector<double> w = uniform<double>(static_cast<size_t>(d), 33, 0.5, 1.5),
                            b = uniform<double>(static_cast<size_t>(d), 34);
  std::copy(w.begin(), w.end(), ln.weight_.data());
  std::copy(b.begin(), b.end(), ln.bias_.data());
  auto loss = [&] {
    const Matrix<double>& y = ln.forward(ConstMatrixMap<double>(x.data(), rows, d));
    return dot(y.data(), dy.data(), dy.size());
  };
  loss();
  const Matrix<double> dx = ln.backward(ConstMatrixMap<double>(dy.data(), rows, d));
  const std::vector<double> dweight(ln.dweight_.data(), ln.dweight_.data() + d),
      dbias(ln.dbias_.data(), ln.dbias_.data() + d);
  const std::vector<double> fd_x = finite_differences(x.data(), x.size(), loss);
  const std::vector<double> fd_w = finite_differences(ln.weight_.data(), static_cast<size_t>(d), loss);
  const std::vector<double> fd_b = finite_differences(ln.bias_.data(), static_cast<size_t>(d), loss);
  CHECK_CLOSE("LayerNorm<double>::backward dx", dx.data(), fd_x.data(), fd_x.size(), kGradAtol, kGradRtol);
  CHECK_CLOSE("LayerNorm<double>::backward dweight", dweight.data(), fd_w.data(), fd_w.size(), kGradAtol, kGradRtol);
  CHECK_CLOSE("LayerNorm<double>::backward dbias", dbias.data(), fd_b.data(), fd_b.size(), kGradAtol, kGradRtol);
  // parameter gradients accumulate: a second backward adds the same again
  ln.forward(ConstMatrixMap<double>(x.data(), rows, d));
  ln.backward(ConstMatrixMap<double>(dy.data(), rows, d));
  std::vector<double> twice(dweight);
  for (auto& v : twice) v *= 2;
  CHECK_CLOSE("LayerNorm<double>::backward accumulates dweight", ln.dweight_.data(), twice.data(), twice.size(), 1e-12,
              1e-12);
}

// ---------------------------------------------------------------------------------------------
// Linear

void test_linear_double() {
  const Index rows = 6, in = 7, out = 5;
  transformer::Linear<double> lin(in, out, true, 3);
  const std::vector<double> bias = uniform<double>(static_cast<size_t>(out), 41);
  std::copy(bias.begin(), bias.end(), lin.bias_.data());
  std::vector<double> x = uniform<double>(static_cast<size_t>(rows * in), 42);
  const std::vector<double> dy = uniform<double>(static_cast<size_t>(rows * out), 43);
  // forward against y[i, o] = sum_k x[i, k] W[o, k] + b[o]
  const Matrix<double>& y = lin.forward(ConstMatrixMap<double>(x.data(), rows, in));
  std::vector<double> want(static_cast<size_t>(rows * out));
  for (Index i = 0; i < rows; ++i)
    for (Index o = 0; o < out; ++o) {
      double s = lin.bias_[o];
      for (Index k = 0; k < in; ++k) s += x[i * in + k] * lin.weight_(o, k);
      want[i * out + o] = s;
    }
  CHECK_CLOSE("Linear<double>::forward", y.data(), want.data(), want.size(), 1e-14, 1e-13);
  // backward against finite differences of sum(dy * y)
  auto loss = [&] {
    const Matrix<double>& yy = lin.forward(ConstMatrixMap<double>(x.data(), rows, in));
    return dot(yy.data(), dy.data(), dy.size());
  };
  lin.zero_grad();
  loss();
  const Matrix<double> dx = lin.backward(ConstMatrixMap<double>(dy.data(), rows, out));
  const Matrix<double> dweight = cmap(lin.dweight_);
  const std::vector<double> dbias(lin.dbias_.data(), lin.dbias_.data() + out);
  const std::vector<double> fd_x = finite_differences(x.data(), x.size(), loss);
  const std::vector<double> fd_w =
      finite_differences(lin.weight_.data(), static_cast<size_t>(lin.weight_.size()), loss);
  const std::vector<double> fd_b = finite_differences(lin.bias_.data(), static_cast<size_t>(out), loss);
  CHECK_CLOSE("Linear<double>::backward dx", dx.data(), fd_x.data(), fd_x.size(), kGradAtol, kGradRtol);
  CHECK_CLOSE("Linear<double>::backward dweight", dweight.data(), fd_w.data(), fd_w.size(), kGradAtol, kGradRtol);
  CHECK_CLOSE("Linear<double>::backward dbias", dbias.data(), fd_b.data(), fd_b.size(), kGradAtol, kGradRtol);
}

// float32 through the dense-product backend (the float32 kernel where the CPU has it, Eigen's GEMM
// otherwise) against the three products in float64, each within (K + 3) u sum |terms|.
void test_linear_float() {
  const Index rows = 29, in = 70, out = 45;
  transformer::Linear<float> lin(in, out, true, 5);
  const std::vector<float> bias = uniform<float>(static_cast<size_t>(out), 51);
  std::copy(bias.begin(), bias.end(), lin.bias_.data());
  const std::vector<float> x = uniform<float>(static_cast<size_t>(rows * in), 52);
  const std::vector<float> dy = uniform<float>(static_cast<size_t>(rows * out), 53);
  const Matrix<float> y = lin.forward(ConstMatrixMap<float>(x.data(), rows, in));
  lin.zero_grad();
  const Matrix<float> dx = lin.backward(ConstMatrixMap<float>(dy.data(), rows, out));
  const auto& W = lin.weight_;
  std::vector<double> want, bound;
  auto expect = [&](Index m, Index n, Index k, auto term, auto extra) {
    want.assign(static_cast<size_t>(m * n), 0.0);
    bound.assign(want.size(), 0.0);
    for (Index i = 0; i < m; ++i)
      for (Index j = 0; j < n; ++j) {
        double s = extra(j), magnitude = std::fabs(extra(j));
        for (Index t = 0; t < k; ++t) {
          const double p = term(i, j, t);
          s += p;
          magnitude += std::fabs(p);
        }
        want[i * n + j] = s;
        bound[i * n + j] = static_cast<double>(k + 3) * kUnitRoundoff * magnitude;
      }
  };
  auto none = [](Index) { return 0.0; };
  expect(
      rows, out, in, [&](Index i, Index o, Index k) { return double(x[i * in + k]) * W(o, k); },
      [&](Index o) { return double(bias[o]); });
  CHECK_WITHIN("Linear<float>::forward", y.data(), want.data(), bound.data(), want.size());
  expect(rows, in, out, [&](Index i, Index k, Index o) { return double(dy[i * out + o]) * W(o, k); }, none);
  CHECK_WITHIN("Linear<float>::backward dx", dx.data(), want.data(), bound.data(), want.size());
  expect(out, in, rows, [&](Index o, Index k, Index i) { return double(dy[i * out + o]) * x[i * in + k]; }, none);
  CHECK_WITHIN("Linear<float>::backward dweight", lin.dweight_.data(), want.data(), bound.data(), want.size());
  expect(1, out, rows, [&](Index, Index o, Index i) { return double(dy[i * out + o]); }, none);
  CHECK_WITHIN("Linear<float>::backward dbias", lin.dbias_.data(), want.data(), bound.data(), want.size());
}

// The module's import check of the attention kinds' bindings: each kind bound exactly once.
void test_kind_binding_problem() {
  using transformer::kind_binding_problem;
  const std::vector<std::string_view> kinds{"softmax", "linear", "lsh"};
  CHECK(kind_binding_problem(kinds, {"lsh", "softmax", "linear"}).empty());
  CHECK(kind_binding_problem(kinds, {"softmax", "lsh"}) ==
        "attention 'linear' has a record but no binding (its bind file registers one with AttentionKindBinding)");
  CHECK(kind_binding_problem(kinds, {"softmax", "linear", "lsh", "lsh"}) ==
        "attention 'lsh' has 2 bindings registered (each kind's bind file registers it once)");
  CHECK(kind_binding_problem(kinds, {"softmax", "linear", "lsh", "plain"}) ==
        "a binding is registered for attention 'plain', which is no kind of attention_kinds()");
}

// Linear attention's projections in bf16 (set_precision): the output moves off float32's, by no
// more than bfloat16 rounding of the products' inputs (8 significant bits: relative 2^-8 each, a
// few of them compounded through the projections, the attention and the output layer), and the
// input gradient likewise.
void test_linear_attention_bf16() {
  if (!transformer::bf16::supported()) skip(transformer::bf16::unsupported_reason());
  const Index B = 2, T = 9, d = 32, H = 4;
  transformer::LinearMultiHeadAttention<float> f32(d, H, 7), b16(d, H, 7);
  b16.set_precision(transformer::Precision::BFloat16);
  const std::vector<float> x = uniform<float>(static_cast<size_t>(B * T * d), 61);
  const std::vector<float> dy = uniform<float>(static_cast<size_t>(B * T * d), 62);
  const ConstMatrixMap<float> xm(x.data(), B * T, d), dym(dy.data(), B * T, d);
  const Matrix<float> y32 = f32.forward(xm, B, T, true), y16 = b16.forward(xm, B, T, true);
  const Matrix<float> dx32 = f32.backward(dym), dx16 = b16.backward(dym);
  auto compare = [](const char* what, const Matrix<float>& got, const Matrix<float>& want) {
    const double scale = want.cwiseAbs().maxCoeff(), diff = (got - want).cwiseAbs().maxCoeff();
    CHECK(diff > 0.0);  // the bf16 products ran
    if (!(diff <= 8.0 * std::ldexp(1.0, -8) * scale))
      std::fprintf(stderr, "%s: largest difference %g against a scale of %g\n", what, diff, scale);
    CHECK(diff <= 8.0 * std::ldexp(1.0, -8) * scale);
  };
  compare("output", y16, y32);
  compare("input gradient", dx16, dx32);
}

// GrowOnlyMatrix: storage 64-byte aligned, kept while a shape fits in it (no allocation, the same
// pages), replaced only to grow; a copy holds the same values in storage of its own.
void test_grow_only_matrix() {
  transformer::GrowOnlyMatrix<float> m;
  CHECK(m.rows() == 0 && m.cols() == 0 && m.size() == 0);
  m.resize(40, 30);
  float* first = m.data();
  CHECK(reinterpret_cast<std::uintptr_t>(first) % 64 == 0);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = static_cast<float>(i);
  m.resize(7, 100);  // 700 <= 1200 values: the same storage
  CHECK(m.data() == first && m.rows() == 7 && m.cols() == 100);
  m.resize(30, 40);
  CHECK(m.data() == first && transformer::cmap(m).rows() == 30);
  CHECK(m.row(2)(3) == 83.0f);  // row 2, column 3 of the 40-wide shape: value 2 * 40 + 3
  transformer::GrowOnlyMatrix<float> c = m;
  CHECK(c.data() != m.data() && c.rows() == 30 && c.cols() == 40 && transformer::cmap(c) == transformer::cmap(m));
  m.resize(41, 30);  // more than it holds: new storage
  CHECK(m.rows() == 41 && reinterpret_cast<std::uintptr_t>(m.data()) % 64 == 0);
  bool threw = false;
  try {
    m.resize(-1, 3);
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  CHECK(threw);
  m.release();
  CHECK(m.size() == 0 && m.data() == nullptr);
}

// PositionalEmbedding::forward_dropout, the model's input layer in one pass, against its two
// passes on the dense batch (forward, then Dropout::forward_inplace with another dropout of the
// same seed and stream) and against a plain loop: x[r, c] = (w[token, c] * sqrt(d) + PE[position,
// c]) * mask[r, c], the mask's factors read back through backward(1). Dense: equal to the two
// passes; packed: row r equal to the two passes' row ids[r] (a packed row draws its padded row's
// mask). Training twice (a new mask each call), then inference; the values must be equal, not
// close: the same arithmetic.
void test_embedding_dropout_one_pass() {
  using transformer::ConstTokenMap;
  using transformer::Dropout;
  using transformer::PositionalEmbedding;
  using transformer::RowLayout;
  using transformer::TokenMatrix;
  const Index B = 3, T = 7, d = 70, V = 31;  // d past one 64-bit mask word
  const auto layout = transformer::PositionalLayout::Interleaved;
  PositionalEmbedding<double> packed_one(V, d, 16, layout, 5), dense_one(V, d, 16, layout, 5),
      twice(V, d, 16, layout, 5);
  TokenMatrix tokens(B, T);
  for (Index i = 0; i < B * T; ++i) tokens.data()[i] = (i * 7 + 3) % V;
  for (Index t = 4; t < T; ++t) tokens(1, t) = 0;  // padding
  const ConstTokenMap tok(tokens.data(), B, T);
  RowLayout packed = RowLayout::dense(B, T);
  packed.packed = true;
  for (Index i = 0; i < B * T; ++i)
    if (tokens.data()[i] != 0) packed.ids.push_back(i);
  const RowLayout dense = RowLayout::dense(B, T);
  Dropout<double> d_packed(0.3, 9, 4), d_dense(0.3, 9, 4), d_twice(0.3, 9, 4);
  const double scale = std::sqrt(static_cast<double>(d));
  for (bool training : {true, true, false}) {
    Matrix<double> want = twice.forward(tok);
    d_twice.forward_inplace(transformer::mmap(want), training);
    Matrix<double> xd, xp;
    dense_one.forward_dropout(tok, dense, d_dense, training, xd);
    packed_one.forward_dropout(tok, packed, d_packed, training, xp);
    CHECK(xd.rows() == B * T && xd.cols() == d && xd == want);
    CHECK(xp.rows() == packed.rows() && xp.cols() == d);
    const Matrix<double> ones = Matrix<double>::Ones(packed.rows(), d);
    const Matrix<double> mask = d_packed.backward(transformer::cmap(ones));
    double worst = 0.0;
    for (Index r = 0; r < packed.rows(); ++r) {
      const Index padded = packed.ids[static_cast<size_t>(r)];
      CHECK(xp.row(r) == want.row(padded));
      const std::int64_t token = tokens.data()[padded];
      for (Index c = 0; c < d; ++c) {
        const double plain = (twice.embedding().w()(token, c) * scale + twice.table()(padded % T, c)) * mask(r, c);
        worst = std::max(worst, std::abs(xp(r, c) - plain));
      }
    }
    CHECK(worst <= 1e-12);
    // backward sees the layout's rows: the packed gradient's rows, scattered into the dense batch
    // (zero at padding), give the dense embedding gradient
    Matrix<double> dy_packed(packed.rows(), d), dy_dense = Matrix<double>::Zero(B * T, d);
    for (Index r = 0; r < packed.rows(); ++r) {
      dy_packed.row(r).setConstant(0.5 + 0.01 * static_cast<double>(r));
      dy_dense.row(packed.ids[static_cast<size_t>(r)]) = dy_packed.row(r);
    }
    for (auto* e : {&packed_one, &dense_one}) e->zero_grad();
    packed_one.backward(transformer::cmap(dy_packed));
    dense_one.backward(transformer::cmap(dy_dense));
    CHECK(packed_one.embedding().dweight_.cmap() == dense_one.embedding().dweight_.cmap());
    CHECK(packed_one.embedding().dweight_.cmap().cwiseAbs().sum() > 0.0);
  }
}

}  // namespace

int main() {
  if (!level_runs()) return kSkipReturnCode;
  run("attention kinds' bindings: each kind bound exactly once", test_kind_binding_problem);
  run("softmax forward against a plain loop", test_softmax_forward);
  run("softmax backward against finite differences", test_softmax_backward);
  run("layer norm forward against a plain loop", test_layer_norm_forward);
  run("layer norm backward against finite differences", test_layer_norm_backward);
  run("Linear<double> against a plain loop and finite differences", test_linear_double);
  run("Linear<float> against float64 products", test_linear_float);
  run("linear attention in bf16 against float32", test_linear_attention_bf16);
  run("GrowOnlyMatrix keeps its storage while shapes fit", test_grow_only_matrix);
  run("embedding and dropout in one pass against their two passes", test_embedding_dropout_one_pass);
  return finish();
}

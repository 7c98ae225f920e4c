// test_kernels.cpp — the matrix-product kernels against their readable references: the float32
// GEMM (f32::gemm against f32::gemm_reference), the attention kernels' block products
// (block_product against block_product_reference, which runs the AVX2 loop or Eigen by level),
// the bfloat16 GEMM (bf16::gemm against
// bf16::gemm_reference), the float32 decoding products (PackedLinear::apply and few_rows_linear
// against a float64 product, PackedLinear::apply_reference too, first_argmax against a plain loop)
// and the int8 decoding product (QuantizedLinear::apply against apply_reference, on the AMX tiles
// and on the VNNI kernel), the finite checks against a plain loop, each where the CPU can run it
// (skipped otherwise). The references themselves are checked on every CPU: against
// a plain float64 product, or against the rounding they state. Each kernel runs at the process's
// instruction-set level (isa.hpp): ctest runs this program once per level, TRANSFORMER_CPP_ISA set
// (a level above the CPU's is reported as skipped).
//
// Tolerances are bounds, not guesses. A float32 sum of K products, in any order, is within
// K u sum_k |a_k b_k| of the exact sum (u = 2^-24, the unit roundoff); the reference rounds the
// exact sum once (u |sum|). Every check below allows (K + 3) u (sum_k |a_k b_k| + |bias| + |C|).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "check.hpp"
#include "transformer/core/checks.hpp"
#include "transformer/core/tuning.hpp"
#include "transformer/kernels/amx.hpp"
#include "transformer/kernels/bf16_gemm.hpp"
#include "transformer/kernels/block_product.hpp"
#include "transformer/kernels/decode_kernels.hpp"
#include "transformer/kernels/f32_gemm.hpp"
#include "transformer/kernels/isa.hpp"
#include "transformer/kernels/quantized_linear.hpp"

using transformer::Index;
using namespace transformer::testing;

namespace {

constexpr double kUnitRoundoff = 1.0 / (1 << 24);  // float32

// One product C (M, N) = beta C + op(A) op(B) [+ bias] with random inputs, in the layout the
// kernels take (row-major, leading dimensions = the stored widths).
struct Product {
  Index M, N, K;
  bool trans_a, trans_b;
  float beta;
  bool with_bias;
  std::vector<float> A, B, C0, bias;
  Index lda() const { return trans_a ? M : K; }
  Index ldb() const { return trans_b ? K : N; }
  float a(Index i, Index k) const { return trans_a ? A[k * M + i] : A[i * K + k]; }
  float b(Index k, Index j) const { return trans_b ? B[j * K + k] : B[k * N + j]; }

  Product(Index m, Index n, Index k, bool ta, bool tb, float bt, bool bias_, std::uint64_t seed)
      : M(m), N(n), K(k), trans_a(ta), trans_b(tb), beta(bt), with_bias(bias_) {
    A = uniform<float>(static_cast<size_t>(M * K), seed);
    B = uniform<float>(static_cast<size_t>(K * N), seed + 1);
    C0 = uniform<float>(static_cast<size_t>(M * N), seed + 2);
    bias = uniform<float>(static_cast<size_t>(N), seed + 3);
  }

  std::string name() const {
    return "M " + std::to_string(M) + " N " + std::to_string(N) + " K " + std::to_string(K) + (trans_a ? " A^T" : "") +
           (trans_b ? " B^T" : "") + (beta != 0.0f ? " beta 1" : "") + (with_bias ? " bias" : "");
  }

  // The exact product in float64 of the values `round` makes of the inputs (float products of
  // floats are exact in double; the float64 sum is within K 2^-53 of exact, far below the
  // tolerances), and the bound (K + 3) u (sum |a b| + |bias| + |beta C|) of each element.
  template <typename Round>
  void exact(Round round, std::vector<double>& want, std::vector<double>& bound) const {
    want.assign(static_cast<size_t>(M * N), 0.0);
    bound.assign(static_cast<size_t>(M * N), 0.0);
    for (Index i = 0; i < M; ++i)
      for (Index j = 0; j < N; ++j) {
        double sum = 0.0, magnitude = 0.0;
        for (Index k = 0; k < K; ++k) {
          const double p = static_cast<double>(round(a(i, k))) * static_cast<double>(round(b(k, j)));
          sum += p;
          magnitude += std::fabs(p);
        }
        if (beta != 0.0f) {
          sum += C0[i * N + j];
          magnitude += std::fabs(C0[i * N + j]);
        }
        if (with_bias) {
          sum += bias[j];
          magnitude += std::fabs(bias[j]);
        }
        want[i * N + j] = sum;
        bound[i * N + j] = static_cast<double>(K + 3) * kUnitRoundoff * magnitude;
      }
  }
};

// Odd shapes (partial register tiles and panels, k blocks that do not divide K, a single row or
// column), every transposition, beta 0 and 1, with and without bias.
std::vector<Product> products(bool bias) {
  std::vector<Product> out;
  const Index shapes[][3] = {{1, 1, 1}, {7, 33, 5}, {13, 31, 257}, {12, 64, 300}, {37, 70, 513}, {100, 3, 40}};
  std::uint64_t seed = 1;
  for (const auto& s : shapes)
    for (int t = 0; t < 8; ++t) {  // bit 0: A transposed, bit 1: B transposed, bit 2: beta 1
      const bool with_bias = bias && (seed % 3 != 0);
      out.emplace_back(s[0], s[1], s[2], (t & 1) != 0, (t & 2) != 0, (t & 4) != 0 ? 1.0f : 0.0f, with_bias, seed);
      seed += 10;
    }
  return out;
}

float identity(float x) { return x; }

void test_f32_reference() {
  for (const Product& p : products(true)) {
    std::vector<float> C = p.C0;
    transformer::f32::gemm_reference(p.M, p.N, p.K, p.A.data(), p.lda(), p.trans_a, p.B.data(), p.ldb(), p.trans_b,
                                     p.beta, C.data(), p.N, p.with_bias ? p.bias.data() : nullptr);
    std::vector<double> want, bound;
    p.exact(identity, want, bound);
    // the reference rounds the float64 sum once: within u |exact| (and the float64 sum's own error)
    for (size_t i = 0; i < want.size(); ++i) bound[i] = kUnitRoundoff * std::fabs(want[i]) + 1e-12;
    CHECK_WITHIN("f32::gemm_reference " + p.name(), C.data(), want.data(), bound.data(), C.size());
  }
}

// block_product at the shapes the attention kernels give it (64 x 128 x 64 blocks, a chunk against
// its window) and at odd ones: partial 6-row tiles, a last strip narrower than 16 columns (the
// masked loads), a single column, K = 1. A read in place or transposed, C assigned or accumulated,
// every operand with a leading dimension wider than its width (so a loop that ignores it fails).
void test_block_product() {
  const Index shapes[][3] = {{64, 128, 64}, {128, 64, 64}, {64, 64, 128}, {1, 1, 1},    {5, 7, 3},
                             {6, 16, 9},    {13, 31, 40},  {7, 33, 1},    {100, 3, 17}, {19, 48, 130}};
  std::uint64_t seed = 500;
  for (const auto& s : shapes)
    for (int t = 0; t < 4; ++t) {  // bit 0: A transposed, bit 1: accumulate into C
      const Index M = s[0], N = s[1], K = s[2];
      const bool trans_a = (t & 1) != 0, accumulate = (t & 2) != 0;
      const Index lda = (trans_a ? M : K) + 3, ldb = N + 5, ldc = N + 2;
      const std::vector<float> A = uniform<float>(static_cast<size_t>((trans_a ? K : M) * lda), seed);
      const std::vector<float> B = uniform<float>(static_cast<size_t>(K * ldb), seed + 1);
      const std::vector<float> C0 = uniform<float>(static_cast<size_t>(M * ldc), seed + 2);
      seed += 10;
      std::vector<float> C = C0, R = C0;
      transformer::block_product<float>(M, N, K, A.data(), lda, trans_a, B.data(), ldb, accumulate, C.data(), ldc);
      transformer::block_product_reference<float>(M, N, K, A.data(), lda, trans_a, B.data(), ldb, accumulate, R.data(),
                                                  ldc);
      // the bound of the header, on every element; the padding between rows of C is untouched
      std::vector<float> got, want;
      std::vector<double> bound;
      for (Index i = 0; i < M; ++i)
        for (Index j = 0; j < ldc; ++j) {
          double magnitude = accumulate ? std::fabs(C0[i * ldc + j]) : 0.0;
          for (Index k = 0; k < K && j < N; ++k)
            magnitude += std::fabs(double(trans_a ? A[k * lda + i] : A[i * lda + k]) * B[k * ldb + j]);
          got.push_back(C[i * ldc + j]);
          want.push_back(j < N ? R[i * ldc + j] : C0[i * ldc + j]);
          bound.push_back(j < N ? static_cast<double>(K + 3) * kUnitRoundoff * magnitude : 0.0);
        }
      const std::string name = "block_product (" + std::string(transformer::block_product_kernel()) + ") M " +
                               std::to_string(M) + " N " + std::to_string(N) + " K " + std::to_string(K) +
                               (trans_a ? " A^T" : "") + (accumulate ? " C +=" : "");
      CHECK_WITHIN(name, got.data(), want.data(), bound.data(), got.size());
    }
}

void test_f32_kernel() {
  if (!transformer::f32::supported())
    skip("no float32 kernel (AVX-512 or AVX2) runs on this CPU (or they are turned off)");
  for (const Product& p : products(true)) {
    const float* bias = p.with_bias ? p.bias.data() : nullptr;
    std::vector<float> C = p.C0, R = p.C0;
    transformer::f32::gemm(p.M, p.N, p.K, p.A.data(), p.lda(), p.trans_a, p.B.data(), p.ldb(), p.trans_b, p.beta,
                           C.data(), p.N, bias);
    transformer::f32::gemm_reference(p.M, p.N, p.K, p.A.data(), p.lda(), p.trans_a, p.B.data(), p.ldb(), p.trans_b,
                                     p.beta, R.data(), p.N, bias);
    std::vector<double> want, bound;
    p.exact(identity, want, bound);
    CHECK_WITHIN("f32::gemm against f32::gemm_reference, " + p.name(), C.data(), R.data(), bound.data(), C.size());
  }
}

// The AVX2 kernel reads a row-major op(A) in place (no panels) and a transposed one in place too
// while C has at most tuning::kF32ColumnsInPlaceMaxN columns, packed beyond: every way gives each
// element the same multiply-adds in the same order, so the same product from A (a window of a
// wider matrix: lda > K) and from A^T must agree to the bit, at row counts that leave a partial
// 6-row tile, with k blocks that do not divide K, and on both sides of that column count.
void test_f32_a_in_place() {
  if (!transformer::f32::supported())
    skip("no float32 kernel (AVX-512 or AVX2) runs on this CPU (or they are turned off)");
  const Index wide = transformer::tuning::kF32ColumnsInPlaceMaxN + 1;  // A^T packed
  const Index shapes[][3] = {{1, 17, 9}, {7, 33, 300}, {13, 40, 513}, {61, 70, 257}, {13, wide, 300}, {7, wide, 513}};
  std::uint64_t seed = 500;
  for (const auto& s : shapes) {
    const Index M = s[0], N = s[1], K = s[2], lda = K + 5;
    const std::vector<float> A = uniform<float>(static_cast<size_t>(M * lda), seed);
    const std::vector<float> B = uniform<float>(static_cast<size_t>(K * N), seed + 1);
    const std::vector<float> bias = uniform<float>(static_cast<size_t>(N), seed + 2);
    std::vector<float> At(static_cast<size_t>(K * M));
    for (Index i = 0; i < M; ++i)
      for (Index k = 0; k < K; ++k) At[k * M + i] = A[i * lda + k];
    for (const float beta : {0.0f, 1.0f}) {
      const std::vector<float> C0 = uniform<float>(static_cast<size_t>(M * N), seed + 3);
      std::vector<float> in_place = C0, packed = C0;
      transformer::f32::gemm(M, N, K, A.data(), lda, false, B.data(), N, false, beta, in_place.data(), N, bias.data());
      transformer::f32::gemm(M, N, K, At.data(), M, true, B.data(), N, false, beta, packed.data(), N, bias.data());
      CHECK(in_place == packed);
    }
    seed += 10;
  }
}

void test_bf16_reference() {
  for (const Product& p : products(false)) {
    std::vector<float> C = p.C0;
    transformer::bf16::gemm_reference(p.M, p.N, p.K, p.A.data(), p.lda(), p.trans_a, p.B.data(), p.ldb(), p.trans_b,
                                      p.beta, C.data(), p.N);
    std::vector<double> want, bound;
    p.exact(transformer::bf16::round_to_bf16, want, bound);
    for (size_t i = 0; i < want.size(); ++i) bound[i] = kUnitRoundoff * std::fabs(want[i]) + 1e-12;
    CHECK_WITHIN("bf16::gemm_reference " + p.name(), C.data(), want.data(), bound.data(), C.size());
  }
}

// Each bf16 kernel this CPU runs: AVX512_BF16, and the AMX tiles where the CPU and OS have them.
void test_bf16_kernel() {
  namespace bf16 = transformer::bf16;
  if (!bf16::supported()) skip(bf16::unsupported_reason());
  std::vector<bf16::Kernel> kernels{bf16::Kernel::Avx512Bf16};
  if (bf16::amx_cpu_supported()) kernels.push_back(bf16::Kernel::Amx);
  for (const bf16::Kernel kernel : kernels)
    for (const Product& p : products(false)) {
      std::vector<float> C = p.C0, R = p.C0;
      bf16::gemm(p.M, p.N, p.K, p.A.data(), p.lda(), p.trans_a, p.B.data(), p.ldb(), p.trans_b, p.beta, C.data(), p.N,
                 kernel);
      bf16::gemm_reference(p.M, p.N, p.K, p.A.data(), p.lda(), p.trans_a, p.B.data(), p.ldb(), p.trans_b, p.beta,
                           R.data(), p.N);
      // the products of bfloat16 values (8 significant bits) are exact in float32: only the sums round
      std::vector<double> want, bound;
      p.exact(bf16::round_to_bf16, want, bound);
      CHECK_WITHIN(
          std::string("bf16::gemm (") + bf16::kernel_name(kernel) + ") against bf16::gemm_reference, " + p.name(),
          C.data(), R.data(), bound.data(), C.size());
    }
}

// y (R, N) = x (R, K) W^T + b for the int8 tests; N and K cover partial panels and words.
struct Int8Case {
  Index R, N, K;
  std::vector<float> x, W, b;
  transformer::QuantizedLinear q;
  Int8Case(Index r, Index n, Index k, std::uint64_t seed) : R(r), N(n), K(k) {
    x = uniform<float>(static_cast<size_t>(R * K), seed);
    W = uniform<float>(static_cast<size_t>(N * K), seed + 1);
    b = uniform<float>(static_cast<size_t>(N), seed + 2);
    q.pack(transformer::ComputeType::Int8, W.data(), N, K, K, b.data());
  }
  std::string name() const { return "R " + std::to_string(R) + " N " + std::to_string(N) + " K " + std::to_string(K); }
};

std::vector<Int8Case> int8_cases() {
  std::vector<Int8Case> out;
  // {16, 33, 64} onwards: 16 rows or more and K a multiple of 64, computed on the AMX tiles where
  // the CPU has them
  const Index shapes[][3] = {{1, 1, 1},    {3, 33, 7},    {12, 64, 256},  {13, 45, 300}, {25, 96, 1023},
                             {16, 33, 64}, {40, 70, 512}, {129, 40, 128}, {20, 65, 2048}};
  std::uint64_t seed = 100;
  for (const auto& s : shapes) {
    out.emplace_back(s[0], s[1], s[2], seed);
    seed += 10;
  }
  return out;
}

// The reference's statement: every weight within half a step (w_scale / 2) of its int8 value,
// every input within half of its row's step, so y within sum_k (|x_k| w_scale / 2 + |w'_k|
// x_scale / 2) of the float product (plus float rounding: 1e-5 of the magnitude).
void test_int8_reference() {
  for (Int8Case& c : int8_cases()) {
    std::vector<float> y(static_cast<size_t>(c.R * c.N));
    c.q.apply_reference(c.x.data(), c.R, c.K, y.data(), c.N);
    std::vector<double> want(y.size()), bound(y.size());
    for (Index r = 0; r < c.R; ++r) {
      const float* xr = c.x.data() + r * c.K;
      double x_max = 0.0;
      for (Index k = 0; k < c.K; ++k) x_max = std::max(x_max, std::fabs(static_cast<double>(xr[k])));
      const double x_step = x_max / 127.0;
      for (Index n = 0; n < c.N; ++n) {
        const float* wn = c.W.data() + n * c.K;
        double w_max = 0.0;
        for (Index k = 0; k < c.K; ++k) w_max = std::max(w_max, std::fabs(static_cast<double>(wn[k])));
        const double w_step = w_max / 127.0;
        double sum = c.b[n], error = 0.0, magnitude = std::fabs(c.b[n]);
        for (Index k = 0; k < c.K; ++k) {
          const double w = wn[k], wq = c.q.weight(n, k);
          CHECK(std::fabs(w - wq) <= w_step * (0.5 + 1e-5));
          sum += static_cast<double>(xr[k]) * w;
          error += std::fabs(xr[k]) * w_step / 2 + std::fabs(wq) * x_step / 2;
          magnitude += std::fabs(static_cast<double>(xr[k]) * w);
        }
        want[r * c.N + n] = sum;
        bound[r * c.N + n] = error * (1 + 1e-5) + 1e-5 * magnitude;
      }
    }
    CHECK_WITHIN("QuantizedLinear::apply_reference (int8) against x W^T + b, " + c.name(), y.data(), want.data(),
                 bound.data(), y.size());
  }
}

// The kernel sums the same int8 products exactly in int32 as the reference does in int64; only the
// final scaling rounds (in float32 against the reference's float64): a few float32 roundings of the
// terms, allowed as 1e-6 of sum_k |x_k w_k| + |b| (one int8 step of difference in any product
// would be far larger).
void test_int8_kernel() {
  using transformer::ComputeType;
  if (!transformer::compute_type_supported(ComputeType::Int8))
    skip(transformer::compute_type_unsupported_reason(ComputeType::Int8));
  for (Int8Case& c : int8_cases()) {
    std::vector<float> y(static_cast<size_t>(c.R * c.N)), ref(y.size());
    c.q.apply(c.x.data(), c.R, c.K, y.data(), c.N);
    c.q.apply_reference(c.x.data(), c.R, c.K, ref.data(), c.N);
    std::vector<double> bound(y.size());
    for (Index r = 0; r < c.R; ++r)
      for (Index n = 0; n < c.N; ++n) {
        double magnitude = std::fabs(c.b[n]);
        for (Index k = 0; k < c.K; ++k)
          magnitude += std::fabs(static_cast<double>(c.x[r * c.K + k]) * c.W[n * c.K + k]);
        bound[r * c.N + n] = 1e-6 * magnitude;
      }
    CHECK_WITHIN("QuantizedLinear::apply (int8) against apply_reference, " + c.name(), y.data(), ref.data(),
                 bound.data(), y.size());
    // the AMX tiles and the VNNI kernel sum the same integers exactly and scale them alike
    std::vector<float> without_amx(y.size());
    setenv(transformer::amx::kDisableEnv, "1", 1);
    c.q.apply(c.x.data(), c.R, c.K, without_amx.data(), c.N);
    unsetenv(transformer::amx::kDisableEnv);
    CHECK(y == without_amx);
  }
}

// first_nonfinite and all_finite against the plain loop: NaN, +inf and -inf at the first, a middle
// and the last element (past the vector widths and a chunk's end), the largest finite values.
template <typename T>
void test_finite_checks() {
  const T bad[] = {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity(),
                   -std::numeric_limits<T>::infinity()};
  for (Index n : {1, 7, 16, 17, 100, 5000}) {
    std::vector<T> v = uniform<T>(static_cast<size_t>(n), 700 + static_cast<std::uint64_t>(n));
    v[0] = std::numeric_limits<T>::max();
    v[static_cast<size_t>(n - 1)] = -std::numeric_limits<T>::max();
    CHECK(transformer::all_finite(v.data(), n));
    CHECK(transformer::first_nonfinite(v.data(), n) == -1);
    for (T b : bad)
      for (Index at : {Index{0}, n / 2, n - 1}) {
        std::vector<T> w = v;
        w[static_cast<size_t>(at)] = b;
        CHECK(!transformer::all_finite(w.data(), n));
        CHECK(transformer::first_nonfinite(w.data(), n) == at);
      }
  }
}

// The float32 decoding products: y (R, N) = x (R, K) W^T + b against the float64 product, within
// the (K + 3) u bound of any summation order. Shapes: row counts across the register tiles (12 rows
// AVX-512, 6 AVX2), a partial last 32-wide panel and half panel, K across the 128-value k blocks.
struct DecodeCase {
  Index R, N, K;
  std::vector<float> x, W, b;
  std::vector<double> want, bound;
  DecodeCase(Index r, Index n, Index k, std::uint64_t seed) : R(r), N(n), K(k) {
    x = uniform<float>(static_cast<size_t>(R * K), seed);
    W = uniform<float>(static_cast<size_t>(N * K), seed + 1);
    b = uniform<float>(static_cast<size_t>(N), seed + 2);
    want.assign(static_cast<size_t>(R * N), 0.0);
    bound.assign(want.size(), 0.0);
    for (Index i = 0; i < R; ++i)
      for (Index j = 0; j < N; ++j) {
        double sum = b[j], magnitude = std::fabs(b[j]);
        for (Index k2 = 0; k2 < K; ++k2) {
          const double p = static_cast<double>(x[i * K + k2]) * W[j * K + k2];
          sum += p;
          magnitude += std::fabs(p);
        }
        want[i * N + j] = sum;
        bound[i * N + j] = static_cast<double>(K + 3) * kUnitRoundoff * magnitude;
      }
  }
  std::string name() const {
    return "R " + std::to_string(R) + " N " + std::to_string(N) + " K " + std::to_string(K) + " at " +
           transformer::isa_name(transformer::active_isa());
  }
};

std::vector<DecodeCase> decode_cases() {
  std::vector<DecodeCase> cases;
  std::uint64_t seed = 500;
  for (Index R : {1, 3, 5, 6, 7, 12, 13, 32})
    for (const auto& nk : {std::pair<Index, Index>{32, 16}, {70, 48}, {251, 64}, {517, 272}}) {
      cases.emplace_back(R, nk.first, nk.second, seed);
      seed += 3;
    }
  return cases;
}

void test_packed_linear() {
  for (DecodeCase& c : decode_cases()) {
    transformer::PackedLinear<float> p;
    p.pack(c.W.data(), c.N, c.K, c.K, c.b.data());
    std::vector<float> y(static_cast<size_t>(c.R * c.N), std::numeric_limits<float>::quiet_NaN()), ref(y);
    p.apply(c.x.data(), c.R, c.K, y.data(), c.N);
    p.apply_reference(c.x.data(), c.R, c.K, ref.data(), c.N);
    CHECK_WITHIN("PackedLinear::apply against a float64 product, " + c.name(), y.data(), c.want.data(), c.bound.data(),
                 y.size());
    CHECK_WITHIN("PackedLinear::apply_reference against a float64 product, " + c.name(), ref.data(), c.want.data(),
                 c.bound.data(), ref.size());
  }
}

void test_few_rows_linear() {
  if (!transformer::have_decode_kernels())
    skip(std::string("no few-row kernel at level ") + transformer::isa_name(transformer::active_isa()));
  for (DecodeCase& c : decode_cases()) {
    if (c.K % 16 != 0) continue;
    std::vector<float> y(static_cast<size_t>(c.R * c.N), std::numeric_limits<float>::quiet_NaN());
    transformer::few_rows_linear(c.x.data(), c.R, c.K, c.W.data(), c.N, c.b.data(), y.data());
    CHECK_WITHIN("few_rows_linear against a float64 product, " + c.name(), y.data(), c.want.data(), c.bound.data(),
                 y.size());
  }
}

// first_argmax against the plain loop: ties (the first wins), NaNs (never chosen over a number),
// lengths around the vector widths.
void test_first_argmax() {
  for (Index n : {1, 7, 8, 9, 16, 17, 33, 1000}) {
    std::vector<float> v = uniform<float>(static_cast<size_t>(n), 900 + static_cast<std::uint64_t>(n));
    for (int variant = 0; variant < 3; ++variant) {
      if (variant == 1 && n > 3) v[n / 2] = v[n - 1] = 5.0f;  // a tie: the first
      if (variant == 2) v[0] = std::numeric_limits<float>::quiet_NaN();
      Index want = 0;
      for (Index j = 1; j < n; ++j)
        if (v[j] > v[want] || v[want] != v[want]) want = j;
      CHECK(transformer::first_argmax(v.data(), n) == want);
    }
  }
}

}  // namespace

int main() {
  if (!level_runs()) return kSkipReturnCode;
  run("PackedLinear<float>::apply against a float64 product", test_packed_linear);
  run("few_rows_linear against a float64 product", test_few_rows_linear);
  run("first_argmax against the plain loop", test_first_argmax);
  run("all_finite and first_nonfinite (float) against the plain loop", test_finite_checks<float>);
  run("all_finite and first_nonfinite (double) against the plain loop", test_finite_checks<double>);
  run("f32::gemm_reference against a float64 product", test_f32_reference);
  run("f32::gemm against f32::gemm_reference", test_f32_kernel);
  run("f32::gemm: op(A) read in place equals op(A) packed, to the bit", test_f32_a_in_place);
  run("block_product against block_product_reference", test_block_product);
  run("bf16::gemm_reference against a float64 product of the rounded inputs", test_bf16_reference);
  run("bf16::gemm against bf16::gemm_reference", test_bf16_kernel);
  run("QuantizedLinear int8 reference against its rounding bound", test_int8_reference);
  run("QuantizedLinear int8 kernel against its reference", test_int8_kernel);
  return finish();
}

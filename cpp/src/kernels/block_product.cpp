#include "transformer/kernels/block_product.hpp"

#include <algorithm>
#include <type_traits>

#include "transformer/kernels/isa.hpp"

// The AVX2 + FMA loop is compiled with function target attributes (not -m flags for the whole
// file) and chosen at run time, as the kernels in avx2.cpp are.
#if defined(__x86_64__) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 8))
#define TCPP_BLOCK_AVX2 1
#include <immintrin.h>
#define TCPP_BLOCK_AVX2_TARGET __attribute__((target("avx2,fma")))
#else
#define TCPP_BLOCK_AVX2 0
#endif

namespace transformer {

namespace {

#if TCPP_BLOCK_AVX2
// C (R, 16) = [C +] op(A) (R, K) B (K, 16), the 16 columns at B and C: R x 16 values of C in 2R
// YMM registers (R <= 6 of the 16 leaves room for the two rows of B and the broadcast). A[i, k] is
// A[i * a_row + k * a_col]. With Tail, only the lanes set in m0 (columns 0-7) and m1 (8-15) are
// read and written: the last, narrower strip of a product whose N is not a multiple of 16.
// Every loop over the accumulators is unrolled, so that they stay in registers.
template <int R, bool Tail>
TCPP_BLOCK_AVX2_TARGET inline void tile(Index K, const float* A, Index a_row, Index a_col, const float* B, Index ldb,
                                        float* C, Index ldc, bool accumulate, __m256i m0, __m256i m1) {
  __m256 c[R][2];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    if (!accumulate) {
      c[r][0] = _mm256_setzero_ps();
      c[r][1] = _mm256_setzero_ps();
    } else if (Tail) {
      c[r][0] = _mm256_maskload_ps(C + r * ldc, m0);
      c[r][1] = _mm256_maskload_ps(C + r * ldc + 8, m1);
    } else {
      c[r][0] = _mm256_loadu_ps(C + r * ldc);
      c[r][1] = _mm256_loadu_ps(C + r * ldc + 8);
    }
  }
  // the k loop unrolled too: its counter and addresses cost about a quarter of the time otherwise
#pragma GCC unroll 8
  for (Index k = 0; k < K; ++k) {
    const float* b = B + k * ldb;
    const __m256 b0 = Tail ? _mm256_maskload_ps(b, m0) : _mm256_loadu_ps(b);
    const __m256 b1 = Tail ? _mm256_maskload_ps(b + 8, m1) : _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 a = _mm256_broadcast_ss(A + r * a_row + k * a_col);
      c[r][0] = _mm256_fmadd_ps(a, b0, c[r][0]);
      c[r][1] = _mm256_fmadd_ps(a, b1, c[r][1]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    if (Tail) {
      _mm256_maskstore_ps(C + r * ldc, m0, c[r][0]);
      _mm256_maskstore_ps(C + r * ldc + 8, m1, c[r][1]);
    } else {
      _mm256_storeu_ps(C + r * ldc, c[r][0]);
      _mm256_storeu_ps(C + r * ldc + 8, c[r][1]);
    }
  }
}

// The last tile of a strip, of `rows` < 6 rows (none when 0): tile<R> with R == rows, the
// comparisons made from R = Rmax down.
template <int Rmax, bool Tail>
TCPP_BLOCK_AVX2_TARGET inline void last_tile(Index rows, Index K, const float* A, Index a_row, Index a_col,
                                             const float* B, Index ldb, float* C, Index ldc, bool accumulate,
                                             __m256i m0, __m256i m1) {
  if constexpr (Rmax > 0) {
    if (rows == Rmax)
      tile<Rmax, Tail>(K, A, a_row, a_col, B, ldb, C, ldc, accumulate, m0, m1);
    else
      last_tile<Rmax - 1, Tail>(rows, K, A, a_row, a_col, B, ldb, C, ldc, accumulate, m0, m1);
  }
}

// One strip of 16 (or, with Tail, fewer) columns: tiles of 6 rows, then one tile of what remains.
template <bool Tail>
TCPP_BLOCK_AVX2_TARGET void strip(Index M, Index K, const float* A, Index a_row, Index a_col, const float* B, Index ldb,
                                  float* C, Index ldc, bool accumulate, __m256i m0, __m256i m1) {
  Index i = 0;
  for (; i + 6 <= M; i += 6)
    tile<6, Tail>(K, A + i * a_row, a_row, a_col, B, ldb, C + i * ldc, ldc, accumulate, m0, m1);
  last_tile<5, Tail>(M - i, K, A + i * a_row, a_row, a_col, B, ldb, C + i * ldc, ldc, accumulate, m0, m1);
}

// The 16-column strips left to right (each strip of B, K x 16, stays in L1 while the rows of A
// pass), then the narrower last strip with masks.
TCPP_BLOCK_AVX2_TARGET void block_product_avx2(Index M, Index N, Index K, const float* A, Index lda, bool trans_a,
                                               const float* B, Index ldb, bool accumulate, float* C, Index ldc) {
  const Index a_row = trans_a ? 1 : lda, a_col = trans_a ? lda : 1;
  const __m256i all = _mm256_set1_epi32(-1);
  Index j = 0;
  for (; j + 16 <= N; j += 16) strip<false>(M, K, A, a_row, a_col, B + j, ldb, C + j, ldc, accumulate, all, all);
  if (j < N) {
    // lane l of the strip is open when j + l < N
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(N - j)), lane);
    const __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(N - j - 8)), lane);
    strip<true>(M, K, A, a_row, a_col, B + j, ldb, C + j, ldc, accumulate, m0, m1);
  }
}
#endif

bool avx2_loop() {
#if TCPP_BLOCK_AVX2
  static const bool allowed = isa_allows(Isa::Avx2);
  return allowed;
#else
  return false;
#endif
}

}  // namespace

template <typename T>
void block_product(Index M, Index N, Index K, const T* A, Index lda, bool trans_a, const T* B, Index ldb,
                   bool accumulate, T* C, Index ldc) {
  if (M <= 0 || N <= 0) return;
#if TCPP_BLOCK_AVX2
  if constexpr (std::is_same_v<T, float>) {
    if (avx2_loop()) {
      block_product_avx2(M, N, K, A, lda, trans_a, B, ldb, accumulate, C, ldc);
      return;
    }
  }
#endif
  StridedMap<T> c(C, M, N, Eigen::OuterStride<>(ldc));
  if (!accumulate) c.setZero();
  if (K <= 0) return;
  ConstStridedMap<T> a(A, trans_a ? K : M, trans_a ? M : K, Eigen::OuterStride<>(lda));
  ConstStridedMap<T> b(B, K, N, Eigen::OuterStride<>(ldb));
  if (trans_a)
    c.noalias() += a.transpose() * b;
  else
    c.noalias() += a * b;
}

template <typename T>
void block_product_reference(Index M, Index N, Index K, const T* A, Index lda, bool trans_a, const T* B, Index ldb,
                             bool accumulate, T* C, Index ldc) {
  for (Index i = 0; i < M; ++i)
    for (Index j = 0; j < N; ++j) {
      double sum = accumulate ? static_cast<double>(C[i * ldc + j]) : 0.0;
      for (Index k = 0; k < K; ++k) {
        const T a = trans_a ? A[k * lda + i] : A[i * lda + k];
        sum += static_cast<double>(a) * static_cast<double>(B[k * ldb + j]);
      }
      C[i * ldc + j] = static_cast<T>(sum);
    }
}

const char* block_product_kernel() { return avx2_loop() ? "avx2" : "eigen"; }

template <typename T>
void transpose_block(Index rows, Index cols, const T* src, Index src_stride, T* dst, Index dst_stride) {
  // in 32 x 32 squares, so that both sides' lines stay in cache
  constexpr Index kSide = 32;
  for (Index i0 = 0; i0 < rows; i0 += kSide)
    for (Index j0 = 0; j0 < cols; j0 += kSide) {
      const Index i1 = std::min(rows, i0 + kSide), j1 = std::min(cols, j0 + kSide);
      for (Index i = i0; i < i1; ++i)
        for (Index j = j0; j < j1; ++j) dst[j * dst_stride + i] = src[i * src_stride + j];
    }
}

template void block_product<float>(Index, Index, Index, const float*, Index, bool, const float*, Index, bool, float*,
                                   Index);
template void block_product<double>(Index, Index, Index, const double*, Index, bool, const double*, Index, bool,
                                    double*, Index);
template void block_product_reference<float>(Index, Index, Index, const float*, Index, bool, const float*, Index, bool,
                                             float*, Index);
template void block_product_reference<double>(Index, Index, Index, const double*, Index, bool, const double*, Index,
                                              bool, double*, Index);
template void transpose_block<float>(Index, Index, const float*, Index, float*, Index);
template void transpose_block<double>(Index, Index, const double*, Index, double*, Index);

}  // namespace transformer

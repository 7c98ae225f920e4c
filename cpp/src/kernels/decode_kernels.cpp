#include "transformer/kernels/decode_kernels.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

#include "transformer/core/random.hpp"
#include "transformer/kernels/avx2.hpp"
#include "transformer/kernels/isa.hpp"

// The AVX-512 kernels are compiled with function target attributes, never with -m flags for the
// whole file (see bf16_gemm.cpp), and run only when isa_allows(Isa::Avx512); the AVX2 ones are in
// avx2.cpp. The fingerprint's vector loop alone follows the build's flags.
#if defined(__x86_64__) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 8))
#define TCPP_DECODE_KERNELS 1
#include <immintrin.h>
#define TCPP_AVX512_TARGET __attribute__((target("avx512f")))
#else
#define TCPP_DECODE_KERNELS 0
#endif

namespace transformer {

bool have_decode_kernels() { return TCPP_DECODE_KERNELS && isa_allows(Isa::Avx2); }

const char* decode_kernels_isa() {
  if (!have_decode_kernels()) return "reference";
  return isa_allows(Isa::Avx512) ? "avx512" : "avx2";
}

namespace {
#if TCPP_DECODE_KERNELS
// The sums of the 16 lanes of each of a, b, c, d, as one 4-float vector [sum a, sum b, sum c,
// sum d]: a transpose-and-add tree, about 2.5x fewer operations than four separate reductions.
TCPP_AVX512_TARGET inline __m128 reduce_add4(__m512 a, __m512 b, __m512 c, __m512 d) {
  // per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3] and the same for c, d
  const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  // per lane: [a, b, c, d] partial sums
  const __m512 abcd = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(ab), _mm512_castps_pd(cd))),
                                    _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(ab), _mm512_castps_pd(cd))));
  // add the four 128-bit lanes
  const __m256 half =
      _mm256_add_ps(_mm512_castps512_ps256(abcd), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(abcd), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(half), _mm256_extractf128_ps(half, 1));
}

// y (R, N) = x (R, K) W^T + b for weight rows n0..n0+4 with W (N, K) row-major and K % 16 == 0.
// Tiles of 4 weight rows x 4 input rows keep 16 accumulators in registers: each step of 16 k loads
// 8 vectors and does 16 FMAs.
TCPP_AVX512_TARGET void few_rows_avx512(const float* x, Index R, Index K, const float* W, Index N, const float* b,
                                        float* y, Index n0) {
  {
    const Index nb = std::min<Index>(4, N - n0);
    for (Index r0 = 0; r0 < R; r0 += 4) {
      const Index rb = std::min<Index>(4, R - r0);
      __m512 acc[4][4];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] = _mm512_setzero_ps();
      if (nb == 4 && rb == 4) {
        for (Index k = 0; k < K; k += 16) {
          const __m512 w0 = _mm512_loadu_ps(W + (n0 + 0) * K + k), w1 = _mm512_loadu_ps(W + (n0 + 1) * K + k);
          const __m512 w2 = _mm512_loadu_ps(W + (n0 + 2) * K + k), w3 = _mm512_loadu_ps(W + (n0 + 3) * K + k);
          for (int i = 0; i < 4; ++i) {
            const __m512 xv = _mm512_loadu_ps(x + (r0 + i) * K + k);
            acc[i][0] = _mm512_fmadd_ps(xv, w0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(xv, w1, acc[i][1]);
            acc[i][2] = _mm512_fmadd_ps(xv, w2, acc[i][2]);
            acc[i][3] = _mm512_fmadd_ps(xv, w3, acc[i][3]);
          }
        }
      } else {  // edge tiles
        for (Index k = 0; k < K; k += 16)
          for (Index i = 0; i < rb; ++i) {
            const __m512 xv = _mm512_loadu_ps(x + (r0 + i) * K + k);
            for (Index j = 0; j < nb; ++j)
              acc[i][j] = _mm512_fmadd_ps(xv, _mm512_loadu_ps(W + (n0 + j) * K + k), acc[i][j]);
          }
      }
      if (nb == 4) {
        const __m128 bias = _mm_loadu_ps(b + n0);
        for (Index i = 0; i < rb; ++i)
          _mm_storeu_ps(y + (r0 + i) * N + n0,
                        _mm_add_ps(reduce_add4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]), bias));
      } else {
        for (Index i = 0; i < rb; ++i)
          for (Index j = 0; j < nb; ++j) y[(r0 + i) * N + n0 + j] = _mm512_reduce_add_ps(acc[i][j]) + b[n0 + j];
      }
    }
  }
}
#endif
}  // namespace

void few_rows_linear(const float* x, Index R, Index K, const float* W, Index N, const float* b, float* y) {
  TCPP_CHECK(have_decode_kernels(), "few_rows_linear: no AVX2 or AVX-512 kernels at this instruction-set level (",
             isa_name(active_isa()), ")");
  TCPP_CHECK(K % 16 == 0, "few_rows_linear: K must be a multiple of 16, got ", K);
#if TCPP_DECODE_KERNELS
  if (!isa_allows(Isa::Avx512)) {
    avx2::few_rows_linear(x, R, K, W, N, b, y);
    return;
  }
#pragma omp parallel for schedule(static) if (N * K >= (1 << 17))
  for (Index n0 = 0; n0 < N; n0 += 4) few_rows_avx512(x, R, K, W, N, b, y, n0);
#else
  (void)x, (void)R, (void)W, (void)N, (void)b, (void)y;
#endif
}

std::uint64_t fingerprint(const void* data, std::size_t bytes, std::uint64_t seed) {
  constexpr int kLanes = 64;                          // word i goes to lane i % 64: 8 AVX-512 vectors of 8 words
  constexpr std::uint64_t kOdd = kSplitmixIncrement;  // odd: multiplying by it is a bijection
  const unsigned char* p = static_cast<const unsigned char*>(data);
  alignas(64) std::uint64_t lane[kLanes];
  for (int j = 0; j < kLanes; ++j) lane[j] = mix64(seed + static_cast<std::uint64_t>(j));
  std::size_t i = 0;
#if defined(__AVX512DQ__)
  // the same lanes as the loop below, 8 independent multiply chains in flight
  {
    __m512i acc[8];
    for (int v = 0; v < 8; ++v) acc[v] = _mm512_load_si512(lane + 8 * v);
    const __m512i odd = _mm512_set1_epi64(static_cast<long long>(kOdd));
    for (; i + 8 * kLanes <= bytes; i += 8 * kLanes)
      for (int v = 0; v < 8; ++v)
        acc[v] = _mm512_mullo_epi64(_mm512_xor_si512(acc[v], _mm512_loadu_si512(p + i + 64 * v)), odd);
    for (int v = 0; v < 8; ++v) _mm512_store_si512(lane + 8 * v, acc[v]);
  }
#endif
  for (; i + 8 * kLanes <= bytes; i += 8 * kLanes)
    for (int j = 0; j < kLanes; ++j) {
      std::uint64_t w;
      std::memcpy(&w, p + i + 8 * j, 8);
      lane[j] = (lane[j] ^ w) * kOdd;
    }
  // the last < 512 bytes, 8 at a time (the final word zero-padded)
  for (int j = 0; i < bytes; ++j, i += 8) {
    std::uint64_t w = 0;
    std::memcpy(&w, p + i, std::min<std::size_t>(8, bytes - i));
    lane[j] = (lane[j] ^ w) * kOdd;
  }
  std::uint64_t h = mix64(seed ^ static_cast<std::uint64_t>(bytes));
  for (int j = 0; j < kLanes; ++j) h = mix64(h ^ lane[j]) + static_cast<std::uint64_t>(j);
  return h;
}

#if TCPP_DECODE_KERNELS
namespace {
TCPP_AVX512_TARGET Index first_argmax_avx512(const float* v, Index n) {
  Index j = 0;
  // pass 1: the maximum, 16 lanes at a time (max_ps returns its second operand, the accumulator,
  // when the loaded value is NaN, so the accumulator never holds NaN)
  {
    if (n >= 16) {
      __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
      for (; j + 16 <= n; j += 16) m = _mm512_max_ps(_mm512_loadu_ps(v + j), m);
      float best = _mm512_reduce_max_ps(m);
      for (Index i = j; i < n; ++i)
        if (v[i] > best) best = v[i];
      // pass 2: its first position
      const __m512 b = _mm512_set1_ps(best);
      for (Index i = 0; i + 16 <= n; i += 16) {
        const __mmask16 eq = _mm512_cmp_ps_mask(_mm512_loadu_ps(v + i), b, _CMP_EQ_OQ);
        if (eq) return i + static_cast<Index>(__builtin_ctz(eq));
      }
      for (Index i = n - n % 16; i < n; ++i)
        if (v[i] == best) return i;
    }
  }
  // fewer than 16 values, or all NaN
  Index best = 0;
  for (j = 1; j < n; ++j)
    if (v[j] > v[best] || v[best] != v[best]) best = j;
  return best;
}
}  // namespace
#endif

template <typename T>
Index first_argmax(const T* v, Index n) {
#if TCPP_DECODE_KERNELS
  if constexpr (std::is_same_v<T, float>) {
    if (isa_allows(Isa::Avx512)) return first_argmax_avx512(v, n);
    if (isa_allows(Isa::Avx2)) return avx2::first_argmax(v, n);
  }
#endif
  Index best = 0;
  for (Index j = 1; j < n; ++j)
    if (v[j] > v[best] || v[best] != v[best]) best = j;
  return best;
}

template Index first_argmax<float>(const float*, Index);
template Index first_argmax<double>(const double*, Index);

template <typename T>
void PackedLinear<T>::pack(const T* W, Index N, Index K, Index ldw, const T* b) {
  TCPP_CHECK(N > 0 && K > 0 && ldw >= K, "PackedLinear: bad shape (", N, ", ", K, ") with leading dimension ", ldw);
  N_ = N;
  K_ = K;
  panels_ = (N + kPanel - 1) / kPanel;
  data_.resize(panels_ * K * kPanel);
  bias_.setZero(panels_ * kPanel);
  std::copy(b, b + N, bias_.data());
#pragma omp parallel for schedule(static) if (N * K >= (1 << 16))
  for (Index p = 0; p < panels_; ++p) {
    T* dst = data_.data() + p * K * kPanel;
    const Index n0 = p * kPanel, nb = std::min(kPanel, N - n0);
    // transpose a (nb, K) block of W into (K, kPanel), reading W row by row and 8 k at a time
    if (nb < kPanel) std::fill(dst, dst + K * kPanel, T(0));
    Index k0 = 0;
    for (; k0 + 8 <= K; k0 += 8)
      for (Index j = 0; j < nb; ++j) {
        const T* src = W + (n0 + j) * ldw + k0;
        for (Index k = 0; k < 8; ++k) dst[(k0 + k) * kPanel + j] = src[k];
      }
    for (; k0 < K; ++k0)
      for (Index j = 0; j < nb; ++j) dst[k0 * kPanel + j] = W[(n0 + j) * ldw + k0];
  }
}

template <typename T>
void PackedLinear<T>::apply_reference(const T* x, Index R, Index ldx, T* y, Index ldy) const {
  for (Index r = 0; r < R; ++r)
    for (Index p = 0; p < panels_; ++p) {
      const Index n0 = p * kPanel, nb = std::min(kPanel, N_ - n0);
      for (Index j = 0; j < nb; ++j) {
        T s = bias_[n0 + j];
        for (Index k = 0; k < K_; ++k) s += x[r * ldx + k] * data_[(p * K_ + k) * kPanel + j];
        y[r * ldy + n0 + j] = s;
      }
    }
}

#if TCPP_DECODE_KERNELS
namespace {

// Rows r0..r0+MR of one panel over kc values of k: MR x 32 accumulators (2 vectors per row),
// started from the bias (first k block) or from the partial sums already in y. The last panel's
// nb < 32 valid outputs are read and written with a mask. With `ahead`, the same amount of packed
// weights starting there is prefetched into L1, 128 bytes per k, in step with their use.
template <int MR>
TCPP_AVX512_TARGET void panel_rows(const float* x, Index ldx, const float* P, Index kc, const float* bias, bool first,
                                   float* y, Index ldy, Index nb, const float* ahead) {
  const __mmask16 m0 = static_cast<__mmask16>(nb >= 16 ? 0xFFFF : (1u << nb) - 1);
  const __mmask16 m1 = static_cast<__mmask16>(nb >= 32 ? 0xFFFF : nb <= 16 ? 0 : (1u << (nb - 16)) - 1);
  __m512 acc[MR][2];
  if (first) {
    const __m512 b0 = _mm512_loadu_ps(bias), b1 = _mm512_loadu_ps(bias + 16);
    for (int i = 0; i < MR; ++i) {
      acc[i][0] = b0;
      acc[i][1] = b1;
    }
  } else {
    for (int i = 0; i < MR; ++i) {
      acc[i][0] = _mm512_maskz_loadu_ps(m0, y + i * ldy);
      acc[i][1] = _mm512_maskz_loadu_ps(m1, y + i * ldy + 16);
    }
  }
  for (Index k = 0; k < kc; ++k) {
    if (ahead != nullptr) {
      _mm_prefetch(reinterpret_cast<const char*>(ahead + k * 32), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(ahead + k * 32 + 16), _MM_HINT_T0);
    }
    const __m512 w0 = _mm512_loadu_ps(P + k * 32), w1 = _mm512_loadu_ps(P + k * 32 + 16);
    for (int i = 0; i < MR; ++i) {
      const __m512 xv = _mm512_set1_ps(x[i * ldx + k]);
      acc[i][0] = _mm512_fmadd_ps(xv, w0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(xv, w1, acc[i][1]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    _mm512_mask_storeu_ps(y + i * ldy, m0, acc[i][0]);
    _mm512_mask_storeu_ps(y + i * ldy + 16, m1, acc[i][1]);
  }
}

using PanelRowsFn = void (*)(const float*, Index, const float*, Index, const float*, bool, float*, Index, Index,
                             const float*);
constexpr PanelRowsFn kPanelRows[] = {nullptr,        panel_rows<1>,  panel_rows<2>, panel_rows<3>, panel_rows<4>,
                                      panel_rows<5>,  panel_rows<6>,  panel_rows<7>, panel_rows<8>, panel_rows<9>,
                                      panel_rows<10>, panel_rows<11>, panel_rows<12>};

}  // namespace
#endif

template <typename T>
void PackedLinear<T>::apply(const T* x, Index R, Index ldx, T* y, Index ldy) const {
#if TCPP_DECODE_KERNELS
  if constexpr (std::is_same_v<T, float>) {
    if (!isa_allows(Isa::Avx512)) {
      if (isa_allows(Isa::Avx2))
        avx2::packed_linear(data_.data(), bias_.data(), N_, K_, kKBlock, x, R, ldx, y, ldy);
      else
        apply_reference(x, R, ldx, y, ldy);
      return;
    }
    static_assert(kPanel == 32 && kRowBlock == 12, "the AVX-512 kernel is written for 32-wide panels, 12 rows");
#pragma omp parallel for schedule(static) if (panels_ * K_ * R >= (1 << 15))
    for (Index p = 0; p < panels_; ++p) {
      const Index n0 = p * kPanel, nb = std::min(kPanel, N_ - n0);
      const float* P = data_.data() + p * K_ * kPanel;
      const float* end = data_.data() + data_.size();
      // k blocks of kKBlock: the block of the panel stays in L1 while every row block uses it,
      // so each weight fetched from memory serves all R rows, not just kRowBlock of them
      for (Index k0 = 0; k0 < K_; k0 += kKBlock) {
        const Index kc = std::min(kKBlock, K_ - k0);
        // the first row block also prefetches the next block of packed weights (the rest of this
        // panel, then the next one), which the hardware prefetcher alone fetches too late
        const float* next = P + (k0 + kc) * kPanel;
        const float* ahead = next + kc * kPanel <= end ? next : nullptr;
        for (Index r0 = 0; r0 < R; r0 += kRowBlock) {
          const Index rb = std::min(kRowBlock, R - r0);
          kPanelRows[rb](x + r0 * ldx + k0, ldx, P + k0 * kPanel, kc, bias_.data() + n0, k0 == 0, y + r0 * ldy + n0,
                         ldy, nb, r0 == 0 ? ahead : nullptr);
        }
      }
    }
    return;
  }
#endif
  apply_reference(x, R, ldx, y, ldy);
}

template class PackedLinear<float>;
template class PackedLinear<double>;

}  // namespace transformer

#include "transformer/kernels/avx2.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

// Compiled with function target attributes, never with -m flags for the whole file: inline
// functions of headers (std::, Eigen) instantiated here must stay plain x86-64 code, since the
// linker may keep this file's copy for the whole extension.
#if defined(__x86_64__) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 8))
#define TCPP_AVX2_KERNELS 1
#include <immintrin.h>
#define TCPP_AVX2_TARGET __attribute__((target("avx2,fma")))
#else
#define TCPP_AVX2_KERNELS 0
#endif
// AVX-VNNI's intrinsics need GCC 11 or Clang 12
#if TCPP_AVX2_KERNELS && ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && __GNUC__ >= 11))
#define TCPP_AVX_VNNI_KERNEL 1
#define TCPP_AVX_VNNI_TARGET __attribute__((target("avx2,fma,avxvnni")))
#else
#define TCPP_AVX_VNNI_KERNEL 0
#endif

namespace transformer::avx2 {

#if TCPP_AVX2_KERNELS
namespace {

// The sums of the 8 lanes of each of a, b, c, d, as one 4-float vector [sum a, sum b, sum c, sum d].
TCPP_AVX2_TARGET inline __m128 reduce_add4(__m256 a, __m256 b, __m256 c, __m256 d) {
  // [a0+a1, a2+a3, b0+b1, b2+b3 | a4+a5, a6+a7, b4+b5, b6+b7], and the same for c, d
  const __m256 ab = _mm256_hadd_ps(a, b), cd = _mm256_hadd_ps(c, d);
  // per 128-bit half: [a, b, c, d] partial sums
  const __m256 abcd = _mm256_hadd_ps(ab, cd);
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

TCPP_AVX2_TARGET inline float reduce_add(__m256 a) {
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(q, _mm_shuffle_ps(q, q, 1)));
}

// One step of few_rows_tile's k loop: acc[i][j] += x[i, k:k+8] * wj for the RB rows and the four
// weight vectors.
template <int RB>
TCPP_AVX2_TARGET inline void few_rows_step(__m256 (&acc)[RB][4], const float* x, Index K, Index k, __m256 w0, __m256 w1,
                                           __m256 w2, __m256 w3) {
#pragma GCC unroll 8
  for (int i = 0; i < RB; ++i) {
    const __m256 xv = _mm256_loadu_ps(x + i * K + k);
    acc[i][0] = _mm256_fmadd_ps(xv, w0, acc[i][0]);
    acc[i][1] = _mm256_fmadd_ps(xv, w1, acc[i][1]);
    acc[i][2] = _mm256_fmadd_ps(xv, w2, acc[i][2]);
    acc[i][3] = _mm256_fmadd_ps(xv, w3, acc[i][3]);
  }
}

// Rows r0..r0+RB of x against weight rows n0..n0+nb (nb <= 4): RB x 4 accumulators.
template <int RB>
TCPP_AVX2_TARGET inline void few_rows_tile(const float* x, Index K, const float* W, Index nb, const float* b, float* y,
                                           Index ldy) {
  __m256 acc[RB][4];
#pragma GCC unroll 8
  for (int i = 0; i < RB; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < 4; ++j) acc[i][j] = _mm256_setzero_ps();
  if (nb == 4) {
    for (Index k = 0; k < K; k += 8) {
      const __m256 w0 = _mm256_loadu_ps(W + k), w1 = _mm256_loadu_ps(W + K + k);
      const __m256 w2 = _mm256_loadu_ps(W + 2 * K + k), w3 = _mm256_loadu_ps(W + 3 * K + k);
      few_rows_step<RB>(acc, x, K, k, w0, w1, w2, w3);
    }
    const __m128 bias = _mm_loadu_ps(b);
#pragma GCC unroll 8
    for (int i = 0; i < RB; ++i)
      _mm_storeu_ps(y + i * ldy, _mm_add_ps(reduce_add4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]), bias));
    return;
  }
  // the last nb < 4 weight rows: the missing ones repeat the last real row (computed, not stored),
  // so that every accumulator index is a constant and they stay in registers
  const float* w[4];
#pragma GCC unroll 8
  for (int j = 0; j < 4; ++j) w[j] = W + std::min<Index>(j, nb - 1) * K;
  for (Index k = 0; k < K; k += 8) {
    const __m256 w0 = _mm256_loadu_ps(w[0] + k), w1 = _mm256_loadu_ps(w[1] + k);
    const __m256 w2 = _mm256_loadu_ps(w[2] + k), w3 = _mm256_loadu_ps(w[3] + k);
    few_rows_step<RB>(acc, x, K, k, w0, w1, w2, w3);
  }
#pragma GCC unroll 8
  for (int i = 0; i < RB; ++i) {
    alignas(16) float sums[4];
    _mm_store_ps(sums, reduce_add4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
    for (Index j = 0; j < nb; ++j) y[i * ldy + j] = sums[j] + b[j];
  }
}

// The first `count` of 8 lanes (count may be <= 0 or >= 8), as a maskload / maskstore mask.
TCPP_AVX2_TARGET inline __m256i first_lanes(Index count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::clamp<Index>(count, 0, 8))),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// With `ahead` (the next block of a panel of 32-value lines, 4 bytes a value), prefetches its
// line k into L1 in step with the use of this block's.
template <typename V>
TCPP_AVX2_TARGET inline void prefetch_line(const V* ahead, Index k) {
  if (ahead != nullptr) {
    _mm_prefetch(reinterpret_cast<const char*>(ahead + k * 32), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(ahead + k * 32 + 16), _MM_HINT_T0);
  }
}

// Line w of a panel of the int8 kernels (16 words, P + w * 32) in two registers, the same line of
// the next block prefetched (prefetch_line).
struct Int8Line {
  __m256i lo, hi;  // words 0-7, 8-15
};
TCPP_AVX2_TARGET inline Int8Line load_int8_line(const std::uint32_t* P, const std::uint32_t* ahead, Index w) {
  prefetch_line(ahead, w);
  return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(P + w * 32)),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(P + w * 32 + 8))};
}

// The int32 partial sums of one row of the int8 kernels kept in y between word blocks: its 16
// lanes, or with !full the lanes open in m0 (0-7) and m1 (8-15).
TCPP_AVX2_TARGET inline void load_int8_sums(const int* yr, bool full, __m256i m0, __m256i m1, __m256i& s0,
                                            __m256i& s1) {
  s0 = full ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yr)) : _mm256_maskload_epi32(yr, m0);
  s1 = full ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yr + 8)) : _mm256_maskload_epi32(yr + 8, m1);
}

// One row's result of the int8 kernels: after the last word block y = sums * w_scale * x_scale + b
// (float), before it the int32 sums themselves; stored as load_int8_sums reads them.
TCPP_AVX2_TARGET inline void store_int8_row(__m256i s0, __m256i s1, bool last, bool full, float xs, const float* ws,
                                            const float* bias, int* yr, __m256i m0, __m256i m1) {
  if (last) {
    const __m256 xsv = _mm256_set1_ps(xs);
    s0 = _mm256_castps_si256(
        _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(s0), _mm256_loadu_ps(ws)), xsv, _mm256_loadu_ps(bias)));
    s1 = _mm256_castps_si256(_mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(s1), _mm256_loadu_ps(ws + 8)), xsv,
                                             _mm256_loadu_ps(bias + 8)));
  }
  if (full) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(yr), s0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(yr + 8), s1);
  } else {
    _mm256_maskstore_epi32(yr, m0, s0);
    _mm256_maskstore_epi32(yr + 8, m1, s1);
  }
}

// Rows 0..MR of one half panel (16 output features, nb of them valid) over kc values of k: MR x 2
// accumulators, started from the bias (first k block) or from the partial sums already in y.
// P + k * 32 holds the 16 weights of k. With `ahead`, the weights of the next block are prefetched
// into L1 in step with their use.
template <int MR>
TCPP_AVX2_TARGET void panel_rows(const float* x, Index ldx, const float* P, Index kc, const float* bias, bool first,
                                 float* y, Index ldy, Index nb, const float* ahead) {
  const bool full = nb >= 16;
  const __m256i m0 = first_lanes(nb), m1 = first_lanes(nb - 8);
  __m256 acc[MR][2];
  if (first) {
    const __m256 b0 = _mm256_loadu_ps(bias), b1 = _mm256_loadu_ps(bias + 8);  // zero-filled to the panel
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      acc[i][0] = b0;
      acc[i][1] = b1;
    }
  } else {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      acc[i][0] = full ? _mm256_loadu_ps(y + i * ldy) : _mm256_maskload_ps(y + i * ldy, m0);
      acc[i][1] = full ? _mm256_loadu_ps(y + i * ldy + 8) : _mm256_maskload_ps(y + i * ldy + 8, m1);
    }
  }
  for (Index k = 0; k < kc; ++k) {
    prefetch_line(ahead, k);
    const __m256 w0 = _mm256_loadu_ps(P + k * 32), w1 = _mm256_loadu_ps(P + k * 32 + 8);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 xv = _mm256_broadcast_ss(x + i * ldx + k);
      acc[i][0] = _mm256_fmadd_ps(xv, w0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(xv, w1, acc[i][1]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    if (full) {
      _mm256_storeu_ps(y + i * ldy, acc[i][0]);
      _mm256_storeu_ps(y + i * ldy + 8, acc[i][1]);
    } else {
      _mm256_maskstore_ps(y + i * ldy, m0, acc[i][0]);
      _mm256_maskstore_ps(y + i * ldy + 8, m1, acc[i][1]);
    }
  }
}

using PanelRowsFn = void (*)(const float*, Index, const float*, Index, const float*, bool, float*, Index, Index,
                             const float*);
constexpr PanelRowsFn kPanelRows[] = {nullptr,       panel_rows<1>, panel_rows<2>, panel_rows<3>,
                                      panel_rows<4>, panel_rows<5>, panel_rows<6>};
static_assert(sizeof(kPanelRows) / sizeof(kPanelRows[0]) == kRows + 1, "one tile function per row count");

}  // namespace

void few_rows_linear(const float* x, Index R, Index K, const float* W, Index N, const float* b, float* y) {
#pragma omp parallel for schedule(static) if (N * K >= (1 << 17))
  for (Index n0 = 0; n0 < N; n0 += 4) {
    const Index nb = std::min<Index>(4, N - n0);
    Index r0 = 0;
    for (; r0 + 2 <= R; r0 += 2) few_rows_tile<2>(x + r0 * K, K, W + n0 * K, nb, b + n0, y + r0 * N + n0, N);
    if (r0 < R) few_rows_tile<1>(x + r0 * K, K, W + n0 * K, nb, b + n0, y + r0 * N + n0, N);
  }
}

void packed_linear(const float* data, const float* bias, Index N, Index K, Index kc_block, const float* x, Index R,
                   Index ldx, float* y, Index ldy) {
  constexpr Index kPanel = 32;
  const Index panels = (N + kPanel - 1) / kPanel;
  const float* end = data + panels * K * kPanel;
#pragma omp parallel for schedule(static) if (panels * K * R >= (1 << 15))
  for (Index p = 0; p < panels; ++p) {
    const Index n0 = p * kPanel, nb = std::min(kPanel, N - n0);
    const float* P = data + p * K * kPanel;
    // k blocks: the block of the panel stays in L1 while every row block uses it
    for (Index k0 = 0; k0 < K; k0 += kc_block) {
      const Index kc = std::min(kc_block, K - k0);
      const float* next = P + (k0 + kc) * kPanel;
      const float* ahead = next + kc * kPanel <= end ? next : nullptr;
      for (Index h = 0; h < 2 && 16 * h < nb; ++h)
        for (Index r0 = 0; r0 < R; r0 += kRows) {
          const Index rb = std::min(kRows, R - r0);
          kPanelRows[rb](x + r0 * ldx + k0, ldx, P + k0 * kPanel + 16 * h, kc, bias + n0 + 16 * h, k0 == 0,
                         y + r0 * ldy + n0 + 16 * h, ldy, nb - 16 * h, h == 0 && r0 == 0 ? ahead : nullptr);
        }
    }
  }
}

namespace {

// Rows 0..MR of one half panel (16 output features, nb of them valid) over wc words: MR x 2 int32
// sums, started from zero (first word block) or from the partial sums kept in y (as int32 bits);
// after the last block they are scaled and the bias added. P + w * 32 holds the 16 words of w; x
// holds the rows' words as signed bytes xq (signed_rows below).
template <int MR>
TCPP_AVX2_TARGET void int8_rows(const std::uint32_t* x, Index ldx, const std::uint32_t* P, Index wc, bool first,
                                bool last, float* y, Index ldy, Index nb, const float* xs, const float* ws,
                                const float* bias, const std::uint32_t* ahead) {
  const bool full = nb >= 16;
  const __m256i m0 = first_lanes(nb), m1 = first_lanes(nb - 8);
  auto* yi = reinterpret_cast<int*>(y);  // partial sums between word blocks, as int32 bits
  __m256i acc[MR][2];                    // every loop over them unrolled, so that they stay in registers
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    if (first) {
      acc[i][0] = acc[i][1] = _mm256_setzero_si256();
    } else {
      load_int8_sums(yi + i * ldy, full, m0, m1, acc[i][0], acc[i][1]);
    }
  }
  // 8 accumulators, 2 weight vectors, `ones`, xq, |xq| and the two sign products: 15 of the 16
  // registers, so the rows come as signed bytes (no offset to remove in the loop)
  const __m256i ones = _mm256_set1_epi16(1);
  for (Index w = 0; w < wc; ++w) {
    const auto [w0, w1] = load_int8_line(P, ahead, w);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      // |xq| times sign(xq) * Wq
      const __m256i xq = _mm256_set1_epi32(static_cast<int>(x[i * ldx + w]));
      const __m256i ax = _mm256_abs_epi8(xq);
      acc[i][0] =
          _mm256_add_epi32(acc[i][0], _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(w0, xq)), ones));
      acc[i][1] =
          _mm256_add_epi32(acc[i][1], _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(w1, xq)), ones));
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) store_int8_row(acc[i][0], acc[i][1], last, full, xs[i], ws, bias, yi + i * ldy, m0, m1);
}

#if TCPP_AVX_VNNI_KERNEL
// The same with AVX-VNNI: x + 128 (unsigned) times Wq (signed) summed in int32 by vpdpbusd, the
// sums started from -128 sum_k Wq so that they come out as sum_k xq Wq.
template <int MR>
TCPP_AVX_VNNI_TARGET void int8_rows_vnni(const std::uint32_t* x, Index ldx, const std::uint32_t* P, Index wc,
                                         const std::int32_t* offset, bool first, bool last, float* y, Index ldy,
                                         Index nb, const float* xs, const float* ws, const float* bias,
                                         const std::uint32_t* ahead) {
  const bool full = nb >= 16;
  const __m256i m0 = first_lanes(nb), m1 = first_lanes(nb - 8);
  auto* yi = reinterpret_cast<int*>(y);
  __m256i acc[MR][2];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    if (first) {
      acc[i][0] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(offset));
      acc[i][1] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(offset + 8));
    } else {
      load_int8_sums(yi + i * ldy, full, m0, m1, acc[i][0], acc[i][1]);
    }
  }
  for (Index w = 0; w < wc; ++w) {
    const auto [w0, w1] = load_int8_line(P, ahead, w);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256i xv = _mm256_set1_epi32(static_cast<int>(x[i * ldx + w]));
      acc[i][0] = _mm256_dpbusd_avx_epi32(acc[i][0], xv, w0);
      acc[i][1] = _mm256_dpbusd_avx_epi32(acc[i][1], xv, w1);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) store_int8_row(acc[i][0], acc[i][1], last, full, xs[i], ws, bias, yi + i * ldy, m0, m1);
}
#endif

using Int8RowsFn = void (*)(const std::uint32_t*, Index, const std::uint32_t*, Index, const std::int32_t*, bool, bool,
                            float*, Index, Index, const float*, const float*, const float*, const std::uint32_t*);

// int8_rows without the offset, in the signature both variants share
template <int MR>
void int8_rows_sign(const std::uint32_t* x, Index ldx, const std::uint32_t* P, Index wc, const std::int32_t* /*offset*/,
                    bool first, bool last, float* y, Index ldy, Index nb, const float* xs, const float* ws,
                    const float* bias, const std::uint32_t* ahead) {
  int8_rows<MR>(x, ldx, P, wc, first, last, y, ldy, nb, xs, ws, bias, ahead);
}

constexpr Int8RowsFn kInt8Tiles[] = {nullptr, int8_rows_sign<1>, int8_rows_sign<2>, int8_rows_sign<3>,
                                     int8_rows_sign<4>};
static_assert(sizeof(kInt8Tiles) / sizeof(kInt8Tiles[0]) == kInt8Rows + 1, "one tile function per row count");
#if TCPP_AVX_VNNI_KERNEL
constexpr Int8RowsFn kInt8TilesVnni[] = {nullptr, int8_rows_vnni<1>, int8_rows_vnni<2>, int8_rows_vnni<3>,
                                         int8_rows_vnni<4>};
#endif

// The panels split among the threads, each walked in word blocks, half by half, kInt8Rows rows at
// a time (the loop of QuantizedLinear::apply and of packed_linear above)
void int8_product(const Int8RowsFn* rows, const std::uint32_t* data, const std::int32_t* offset, const float* w_scale,
                  const float* bias, Index N, Index KW, Index word_block, const std::uint32_t* xw, const float* xs,
                  Index R, float* y, Index ldy) {
  constexpr Index kPanel = 32;
  const Index panels = (N + kPanel - 1) / kPanel;
  const std::uint32_t* end = data + panels * KW * kPanel;
#pragma omp parallel for schedule(static) if (panels * KW * 4 * R >= (1 << 15))
  for (Index p = 0; p < panels; ++p) {
    const Index n0 = p * kPanel, nb = std::min(kPanel, N - n0);
    const std::uint32_t* P = data + p * KW * kPanel;
    for (Index w0 = 0; w0 < KW; w0 += word_block) {
      const Index wc = std::min(word_block, KW - w0);
      const std::uint32_t* next = P + (w0 + wc) * kPanel;
      const std::uint32_t* ahead = next + wc * kPanel <= end ? next : nullptr;
      for (Index h = 0; h < 2 && 16 * h < nb; ++h) {
        const Index c = n0 + 16 * h;  // the half's first output feature
        for (Index r0 = 0; r0 < R; r0 += kInt8Rows) {
          const Index rb = std::min(kInt8Rows, R - r0);
          rows[rb](xw + r0 * KW + w0, KW, P + w0 * kPanel + 16 * h, wc, offset + c, w0 == 0, w0 + wc >= KW,
                   y + r0 * ldy + c, ldy, nb - 16 * h, xs + r0, w_scale + c, bias + c,
                   h == 0 && r0 == 0 ? ahead : nullptr);
        }
      }
    }
  }
}

// QuantizedLinear's rounding: the same operations as its plain loop, 8 values at a time
TCPP_AVX2_TARGET bool quantize_row(const float* x, Index K, std::uint8_t* bytes, float* scale) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 vmax = _mm256_setzero_ps();
  __m256 unordered = _mm256_setzero_ps();
  Index k = 0;
  for (; k + 8 <= K; k += 8) {
    const __m256 v = _mm256_loadu_ps(x + k);
    vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, v));
    unordered = _mm256_or_ps(unordered, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
  float amax = _mm_cvtss_f32(h);
  bool nan = _mm256_movemask_ps(unordered) != 0;
  for (Index i = k; i < K; ++i) {
    amax = std::max(amax, std::abs(x[i]));
    nan |= x[i] != x[i];
  }
  if (nan || !std::isfinite(amax)) return false;
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  const __m256 vinv = _mm256_set1_ps(inv), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  const __m256i offset = _mm256_set1_epi32(128);
  for (k = 0; k + 8 <= K; k += 8) {
    __m256 q =
        _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + k), vinv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm256_min_ps(_mm256_max_ps(q, lo), hi);
    const __m256i v = _mm256_add_epi32(_mm256_cvtps_epi32(q), offset);  // 1..255
    // 8 int32 to 8 bytes: pack to 16 bits, then 8 bits (per 128-bit half), then the halves' words
    const __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(v, v), _mm256_setzero_si256());
    const int lo4 = _mm_cvtsi128_si32(_mm256_castsi256_si128(b));
    const int hi4 = _mm_cvtsi128_si32(_mm256_extracti128_si256(b, 1));
    std::memcpy(bytes + k, &lo4, 4);
    std::memcpy(bytes + k + 4, &hi4, 4);
  }
  for (; k < K; ++k) {
    const float q = std::nearbyint(x[k] * inv);
    bytes[k] = static_cast<std::uint8_t>(static_cast<int>(std::min(127.0f, std::max(-127.0f, q))) + 128);
  }
  *scale = amax / 127.0f;
  return true;
}

}  // namespace

bool quantize_row_int8(const float* x, Index K, std::uint8_t* bytes, float* scale) {
  return quantize_row(x, K, bytes, scale);
}

void int8_linear(const std::uint32_t* data, const std::int32_t* offset, const float* w_scale, const float* bias,
                 Index N, Index KW, Index word_block, const std::uint32_t* xw, const float* xs, Index R, float* y,
                 Index ldy) {
  // the rows as signed bytes xq: (xq + 128) xor 0x80 byte by byte, once for every panel
  thread_local std::vector<std::uint32_t> signed_rows;
  signed_rows.resize(static_cast<size_t>(R * KW));
  for (Index i = 0; i < R * KW; ++i) signed_rows[static_cast<size_t>(i)] = xw[i] ^ 0x80808080u;
  int8_product(kInt8Tiles, data, offset, w_scale, bias, N, KW, word_block, signed_rows.data(), xs, R, y, ldy);
}

void int8_linear_vnni(const std::uint32_t* data, const std::int32_t* offset, const float* w_scale, const float* bias,
                      Index N, Index KW, Index word_block, const std::uint32_t* xw, const float* xs, Index R, float* y,
                      Index ldy) {
#if TCPP_AVX_VNNI_KERNEL
  int8_product(kInt8TilesVnni, data, offset, w_scale, bias, N, KW, word_block, xw, xs, R, y, ldy);
#else
  int8_linear(data, offset, w_scale, bias, N, KW, word_block, xw, xs, R, y, ldy);
#endif
}

TCPP_AVX2_TARGET Index first_argmax(const float* v, Index n) {
  Index j = 0;
  if (n >= 8) {
    // pass 1: the maximum, 8 lanes at a time (max_ps returns its second operand, the
    // accumulator, when the loaded value is NaN, so the accumulator never holds NaN)
    __m256 m = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    for (; j + 8 <= n; j += 8) m = _mm256_max_ps(_mm256_loadu_ps(v + j), m);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    float best = _mm_cvtss_f32(h);
    for (Index i = j; i < n; ++i)
      if (v[i] > best) best = v[i];
    // pass 2: its first position
    const __m256 bv = _mm256_set1_ps(best);
    for (Index i = 0; i + 8 <= n; i += 8) {
      const int eq = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(v + i), bv, _CMP_EQ_OQ));
      if (eq != 0) return i + static_cast<Index>(__builtin_ctz(static_cast<unsigned>(eq)));
    }
    for (Index i = n - n % 8; i < n; ++i)
      if (v[i] == best) return i;
  }
  // fewer than 8 values, or all NaN
  Index best = 0;
  for (j = 1; j < n; ++j)
    if (v[j] > v[best] || v[best] != v[best]) best = j;
  return best;
}

#else  // no AVX2 kernels in this build: isa_allows(Isa::Avx2) is false wherever this is compiled

void few_rows_linear(const float*, Index, Index, const float*, Index, const float*, float*) {
  throw std::logic_error("avx2::few_rows_linear: not in this build");
}
void packed_linear(const float*, const float*, Index, Index, Index, const float*, Index, Index, float*, Index) {
  throw std::logic_error("avx2::packed_linear: not in this build");
}
Index first_argmax(const float*, Index) { throw std::logic_error("avx2::first_argmax: not in this build"); }
bool quantize_row_int8(const float*, Index, std::uint8_t*, float*) {
  throw std::logic_error("avx2::quantize_row_int8: not in this build");
}
void int8_linear(const std::uint32_t*, const std::int32_t*, const float*, const float*, Index, Index, Index,
                 const std::uint32_t*, const float*, Index, float*, Index) {
  throw std::logic_error("avx2::int8_linear: not in this build");
}
void int8_linear_vnni(const std::uint32_t*, const std::int32_t*, const float*, const float*, Index, Index, Index,
                      const std::uint32_t*, const float*, Index, float*, Index) {
  throw std::logic_error("avx2::int8_linear_vnni: not in this build");
}

#endif

}  // namespace transformer::avx2

#include "transformer/kernels/f32_gemm.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "transformer/kernels/isa.hpp"

// Compiled with function target attributes, never with -m flags for the whole file (see
// bf16_gemm.cpp: inline functions of headers instantiated here must stay plain x86-64 code).
#if defined(__x86_64__) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 8))
#define TCPP_F32_KERNEL 1
#include <immintrin.h>
#define TCPP_F32_TARGET __attribute__((target("avx512f")))
#define TCPP_F32_AVX2_TARGET __attribute__((target("avx2,fma")))
#else
#define TCPP_F32_KERNEL 0
#endif

namespace transformer::f32 {

static bool cpu_supported() {
#if TCPP_F32_KERNEL
  return ((avx512_cpuid().leaf7_ebx >> 16) & 1u) != 0;  // AVX512F
#else
  return false;
#endif
}

bool kernel_runs(Kernel k) {
  switch (k) {
    case Kernel::Avx512:
      return cpu_supported() && isa_allows(Isa::Avx512);
    case Kernel::Avx2:
      return TCPP_F32_KERNEL && isa_allows(Isa::Avx2);
    default:
      return false;
  }
}

Kernel active_kernel() {
  static const Kernel k = [] {
    const char* v = std::getenv(kDisableEnv);
    if (v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0) return Kernel::Eigen;
    // where a 512-bit multiply-add runs as two 256-bit halves (Zen 4) the 12 x 32 tile gains
    // nothing, and the AVX2 kernel reads a row-major A in place instead of packing it: a
    // float32 training step at the tutorial shapes is about 8% faster with it there (AMD EPYC
    // Zen 4, 2026-12-07, docs/performance.md)
    if (kernel_runs(Kernel::Avx512) && !cpu_splits_512bit_fma()) return Kernel::Avx512;
    if (kernel_runs(Kernel::Avx2)) return Kernel::Avx2;
    return Kernel::Eigen;
  }();
  return k;
}

bool supported() { return active_kernel() != Kernel::Eigen; }

const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::Avx512:
      return "avx512";
    case Kernel::Avx2:
      return "avx2";
    default:
      return "eigen";
  }
}

BlockGrid block_grid(Index MP, Index NP, Index rp, Index cp, Index want) {
  auto blocks = [&] { return ((MP + rp - 1) / rp) * ((NP + cp - 1) / cp); };
  while (blocks() < want && (rp > 1 || cp > 1)) {
    if (rp >= cp)
      rp = (rp + 1) / 2;
    else
      cp = (cp + 1) / 2;
    if (rp == 1 && cp == 1) break;
  }
  return {rp, cp, (MP + rp - 1) / rp, (NP + cp - 1) / cp};
}

void check_gemm_args(const char* who, Index M, Index N, Index K, Index lda, bool trans_a, Index ldb, bool trans_b,
                     float beta, Index ldc) {
  TCPP_CHECK(M >= 0 && N >= 0 && K >= 0, who, ": sizes must be >= 0, got M ", M, ", N ", N, ", K ", K);
  TCPP_CHECK(beta == 0.0f || beta == 1.0f, who, ": beta must be 0 or 1, got ", beta);
  TCPP_CHECK(lda >= std::max<Index>(1, trans_a ? M : K), who, ": lda ", lda, " is too small");
  TCPP_CHECK(ldb >= std::max<Index>(1, trans_b ? K : N), who, ": ldb ", ldb, " is too small");
  TCPP_CHECK(ldc >= std::max<Index>(1, N), who, ": ldc ", ldc, " is too small");
}

void gemm_reference(Index M, Index N, Index K, const float* A, Index lda, bool trans_a, const float* B, Index ldb,
                    bool trans_b, float beta, float* C, Index ldc, const float* bias) {
  check_gemm_args("f32::gemm_reference", M, N, K, lda, trans_a, ldb, trans_b, beta, ldc);
  for (Index i = 0; i < M; ++i)
    for (Index j = 0; j < N; ++j) {
      double sum = bias != nullptr ? static_cast<double>(bias[j]) : 0.0;
      for (Index k = 0; k < K; ++k) {
        const float a = trans_a ? A[k * lda + i] : A[i * lda + k];
        const float b = trans_b ? B[j * ldb + k] : B[k * ldb + j];
        sum += static_cast<double>(a) * static_cast<double>(b);
      }
      float& c = C[i * ldc + j];
      c = static_cast<float>(beta == 0.0f ? sum : static_cast<double>(c) + sum);
    }
}

#if TCPP_F32_KERNEL
namespace {

static_assert(kNR == 32 && kMR <= 14, "f32 kernel tile sizes");

// Lanes [0, n) of a 16-lane mask (n may be <= 0 or >= 16).
inline __mmask16 first_lanes(Index n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1u);
}

// A panel of `width` lines for k in [k0, k0 + kc): dst[k*width + w] = line w at k. Lines past
// `count` are zero.
//   k_major: line w's values are src[(k0 + k)*ld + first + w] (consecutive in w: op(A) of a
//            transposed A, op(B) of a plain B), copied `width` at a time;
//   else:    line w is contiguous in k, src[(first + w)*ld + k0 + k] (op(A) of a plain A, op(B) of
//            a transposed B): 16 x 16 blocks are transposed through registers.
TCPP_F32_TARGET void pack_k_major(const float* src, Index ld, Index first, Index count, Index width, Index k0, Index kc,
                                  float* dst) {
  for (Index k = 0; k < kc; ++k) {
    const float* s = src + (k0 + k) * ld + first;
    float* d = dst + k * width;
    for (Index w0 = 0; w0 < width; w0 += 16) {
      const __m512 v = _mm512_maskz_loadu_ps(first_lanes(std::min(count, width) - w0), s + w0);
      _mm512_mask_storeu_ps(d + w0, first_lanes(width - w0), v);
    }
  }
}

TCPP_F32_TARGET void pack_lines(const float* src, Index ld, Index first, Index count, Index width, Index k0, Index kc,
                                float* dst) {
  alignas(64) float block[16][16];
  for (Index w0 = 0; w0 < width; w0 += 16) {
    const Index lines = std::min<Index>(16, width - w0);
    for (Index kb = 0; kb < kc; kb += 16) {
      const Index ks = std::min<Index>(16, kc - kb);
      for (Index w = 0; w < 16; ++w) {
        const bool real = w < lines && w0 + w < count;
        const __m512 v =
            real ? _mm512_maskz_loadu_ps(first_lanes(ks), src + (first + w0 + w) * ld + k0 + kb) : _mm512_setzero_ps();
        _mm512_store_ps(block[w], v);
      }
      for (Index k = 0; k < ks; ++k) {
        float* d = dst + (kb + k) * width + w0;
        for (Index w = 0; w < lines; ++w) d[w] = block[w][k];
      }
    }
  }
}

// One kMR x kNR tile: C[0..rows) x [0..cols) (=, or += with accumulate) A panel . B panel over kc
// values of k, plus bias[0..cols) when bias != nullptr.
TCPP_F32_TARGET inline void micro_kernel(Index kc, const float* a, const float* b, float* c, Index ldc, Index rows,
                                         Index cols, bool accumulate, const float* bias) {
  __m512 acc[kMR][2];
  for (int i = 0; i < kMR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (Index k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b + k * kNR), b1 = _mm512_load_ps(b + k * kNR + 16);
    const float* ak = a + k * kMR;
#pragma GCC unroll 16
    for (int i = 0; i < kMR; ++i) {
      const __m512 ai = _mm512_set1_ps(ak[i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
  }
  const __mmask16 m0 = first_lanes(cols), m1 = first_lanes(cols - 16);
  __m512 bias0 = _mm512_setzero_ps(), bias1 = _mm512_setzero_ps();
  if (bias != nullptr) {
    bias0 = _mm512_maskz_loadu_ps(m0, bias);
    bias1 = _mm512_maskz_loadu_ps(m1, bias + 16);
  }
  // constant indices only (a loop to `rows` would keep the accumulators in memory)
#pragma GCC unroll 16
  for (int i = 0; i < kMR; ++i) {
    if (i >= rows) break;
    float* ci = c + i * ldc;
    __m512 r0 = acc[i][0], r1 = acc[i][1];
    if (accumulate) {
      r0 = _mm512_add_ps(r0, _mm512_maskz_loadu_ps(m0, ci));
      r1 = _mm512_add_ps(r1, _mm512_maskz_loadu_ps(m1, ci + 16));
    }
    if (bias != nullptr) {
      r0 = _mm512_add_ps(r0, bias0);
      r1 = _mm512_add_ps(r1, bias1);
    }
    _mm512_mask_storeu_ps(ci, m0, r0);
    _mm512_mask_storeu_ps(ci + 16, m1, r1);
  }
}

// What one product's k block needs to find its packed panels and C.
struct Block {
  Index M, N, kc;                // rows and columns of C, k values in this block
  Index row_panels, col_panels;  // panels per block of C (the unit of work)
  Index blocks_n;                // blocks of C per row of blocks
  const float* a;                // packed A: panel ip at a + (ip - a_first)*kc*mr; or, when
                                 // lda > 0, op(A) itself from this k block's first k: row i at
                                 // a + i*lda, or with a_columns op(A)[i, k] at a + k*lda + i
  Index lda;                     // 0: a holds packed panels
  bool a_columns;                // op(A) read in place is A transposed (trans_a)
  const float* b;                // packed B: panel jp at b + (jp - b_first)*kc*nr
  Index a_first, b_first;        // the first panel the packed A and B hold (a stripe's)
  float* c;
  Index ldc;
  bool accumulate;
  const float* bias;  // added by the last k block (nullptr: none)
};

using TileFn = void (*)(Index, const float*, const float*, float*, Index, Index, Index, bool, const float*);

// A tile whose A values are read in place (see Block::a): its first row of op(A) at a.
using InPlaceTileFn = void (*)(Index, const float*, Index, const float*, float*, Index, Index, Index, bool,
                               const float*);

// Block `blk` of C: for each B panel (kept in L1), every A panel of the block, MR x NR tiles by
// `tile`, or by `in_place` when op(A) is not packed (template arguments, so that they are inlined
// into each kernel's own copy of this loop).
template <Index MR, Index NR, TileFn tile, InPlaceTileFn in_place = nullptr>
inline void walk_block(const Block& s, Index blk) {
  const Index ip0 = (blk / s.blocks_n) * s.row_panels, jp0 = (blk % s.blocks_n) * s.col_panels;
  const Index ip1 = std::min((s.M + MR - 1) / MR, ip0 + s.row_panels);
  const Index jp1 = std::min((s.N + NR - 1) / NR, jp0 + s.col_panels);
  for (Index jp = jp0; jp < jp1; ++jp) {
    const float* bp = s.b + (jp - s.b_first) * s.kc * NR;
    const float* bias = s.bias != nullptr ? s.bias + jp * NR : nullptr;
    for (Index ip = ip0; ip < ip1; ++ip) {
      float* cp = s.c + ip * MR * s.ldc + jp * NR;
      const Index rows = std::min(MR, s.M - ip * MR), cols = std::min(NR, s.N - jp * NR);
      if constexpr (in_place != nullptr) {
        if (s.lda > 0) {
          in_place(s.kc, s.a + ip * MR * (s.a_columns ? 1 : s.lda), s.lda, bp, cp, s.ldc, rows, cols, s.accumulate,
                   bias);
          continue;
        }
      }
      tile(s.kc, s.a + (ip - s.a_first) * s.kc * MR, bp, cp, s.ldc, rows, cols, s.accumulate, bias);
    }
  }
}

TCPP_F32_TARGET void compute_block(const Block& s, Index blk) { walk_block<kMR, kNR, micro_kernel>(s, blk); }

// ---------------------------------------------------------------- the AVX2 + FMA kernel
//
// The same scheme in 8-float vectors. AVX2 has 16 vector registers, so the tile is kMR2 x kNR2 =
// 6 x 16: 12 accumulators, the two vectors of the B panel and one broadcast A value (the shape of
// the AVX2 micro-kernels of BLIS and OpenBLAS). Lines contiguous in k are packed through 8 x 8
// transposes in registers, the others by plain copies.

constexpr Index kMR2 = 6;
constexpr Index kNR2 = 16;

// The first `count` of 8 lanes (count may be <= 0 or >= 8), as a maskload / maskstore mask.
TCPP_F32_AVX2_TARGET inline __m256i first_lanes8(Index count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::clamp<Index>(count, 0, 8))),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Lines consecutive in k's rows: per k, `width` floats from column `first` of row k0 + k, those
// past `count` zero. The loads read only the first `count` (masked at the end of a row). The
// stores write 8 floats: where a panel's line is narrower (A's 6 rows), the last floats land in
// the next k's place, which that k then overwrites; only stores that would pass the end of the
// panel are masked.
TCPP_F32_AVX2_TARGET void pack_k_major_avx2(const float* src, Index ld, Index first, Index count, Index width, Index k0,
                                            Index kc, float* dst) {
  const Index n = std::min(count, width);
  for (Index k = 0; k < kc; ++k) {
    const float* s = src + (k0 + k) * ld + first;
    float* d = dst + k * width;
    for (Index w0 = 0; w0 < width; w0 += 8) {
      const __m256 v = n - w0 >= 8  ? _mm256_loadu_ps(s + w0)
                       : n - w0 > 0 ? _mm256_maskload_ps(s + w0, first_lanes8(n - w0))
                                    : _mm256_setzero_ps();
      if (width - w0 >= 8 || k * width + w0 + 8 <= kc * width)
        _mm256_storeu_ps(d + w0, v);
      else
        _mm256_maskstore_ps(d + w0, first_lanes8(width - w0), v);
    }
  }
}

// r[i][j] becomes r[j][i] (an 8 x 8 block of floats, one row per register).
TCPP_F32_AVX2_TARGET inline void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);  // per 128-bit half: r[i][0] r[i+1][0] r[i][1] r[i+1][1]
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));  // column 0 of four rows
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);  // the low halves: columns 0..3
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

// Lines contiguous in k: 8 lines x 8 values of k at a time, transposed through registers.
TCPP_F32_AVX2_TARGET void pack_lines_avx2(const float* src, Index ld, Index first, Index count, Index width, Index k0,
                                          Index kc, float* dst) {
  for (Index w0 = 0; w0 < width; w0 += 8) {
    const Index lines = std::min<Index>(8, width - w0);
    const __m256i store_mask = first_lanes8(lines);
    for (Index kb = 0; kb < kc; kb += 8) {
      const Index ks = std::min<Index>(8, kc - kb);
      const __m256i load_mask = first_lanes8(ks);
      __m256 r[8];
#pragma GCC unroll 8
      for (int w = 0; w < 8; ++w) {
        const float* line = src + (first + w0 + w) * ld + k0 + kb;
        if (w >= lines || w0 + w >= count)
          r[w] = _mm256_setzero_ps();
        else
          r[w] = ks == 8 ? _mm256_loadu_ps(line) : _mm256_maskload_ps(line, load_mask);
      }
      transpose8(r);
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        if (k >= ks) break;
        float* d = dst + (kb + k) * width + w0;
        // a panel of one strip narrower than 8 (A's 6 rows) as in pack_k_major_avx2: k ascends,
        // so the next k overwrites what a full store puts past this one's line
        if (lines == 8 || (width < 8 && (kb + k) * width + 8 <= kc * width))
          _mm256_storeu_ps(d, r[k]);
        else
          _mm256_maskstore_ps(d, store_mask, r[k]);
      }
    }
  }
}

// Where a tile's A values are: its packed panel (a + k*6 + i), the rows of a row-major op(A) (row
// i at a + i*lda + k) or the columns of a transposed one (op(A)[i, k] at a + k*lda + i: the six
// values of one k are adjacent).
enum class ASource { Panel, Rows, Columns };

// One 6 x 16 tile, A from `Source`; rows past `rows` read the last row again (never stored), so an
// edge tile reads nothing past op(A). The same multiply-adds in the same order from every source.
template <ASource Source>
TCPP_F32_AVX2_TARGET inline void avx2_tile(Index kc, const float* a, Index lda, const float* b, float* c, Index ldc,
                                           Index rows, Index cols, bool accumulate, const float* bias) {
  // every loop over the accumulators is unrolled: an index that is not a constant would keep
  // them in memory
  __m256 acc[kMR2][2];
#pragma GCC unroll 6
  for (int i = 0; i < kMR2; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  // the tile's rows of C (two cache lines each, unless aligned) are fetched while the loop runs
#pragma GCC unroll 6
  for (int i = 0; i < kMR2; ++i) {
    if (i >= rows) break;
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + cols - 1), _MM_HINT_T0);
  }
  if constexpr (Source != ASource::Rows) {
    // a panel is op(A) transposed with stride 6, its rows past `rows` zero: no clamp needed
    const Index stride = Source == ASource::Panel ? kMR2 : lda;
    if (Source == ASource::Panel || rows == kMR2) {
      for (Index k = 0; k < kc; ++k) {
        const __m256 b0 = _mm256_load_ps(b + k * kNR2), b1 = _mm256_load_ps(b + k * kNR2 + 8);
        const float* ak = a + k * stride;
#pragma GCC unroll 6
        for (int i = 0; i < kMR2; ++i) {
          const __m256 ai = _mm256_broadcast_ss(ak + i);
          acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
          acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
        }
      }
    } else {
      Index col[kMR2];
#pragma GCC unroll 6
      for (int i = 0; i < kMR2; ++i) col[i] = std::min<Index>(i, rows - 1);
      for (Index k = 0; k < kc; ++k) {
        const __m256 b0 = _mm256_load_ps(b + k * kNR2), b1 = _mm256_load_ps(b + k * kNR2 + 8);
        const float* ak = a + k * stride;
#pragma GCC unroll 6
        for (int i = 0; i < kMR2; ++i) {
          const __m256 ai = _mm256_broadcast_ss(ak + col[i]);
          acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
          acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
        }
      }
    }
  } else {
    const float* row[kMR2];
#pragma GCC unroll 6
    for (int i = 0; i < kMR2; ++i) row[i] = a + std::min<Index>(i, rows - 1) * lda;
    for (Index k = 0; k < kc; ++k) {
      const __m256 b0 = _mm256_load_ps(b + k * kNR2), b1 = _mm256_load_ps(b + k * kNR2 + 8);
#pragma GCC unroll 6
      for (int i = 0; i < kMR2; ++i) {
        const __m256 ai = _mm256_broadcast_ss(row[i] + k);
        acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
        acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
      }
    }
  }
  if (rows == kMR2 && cols == kNR2) {
    const __m256 bias0 = bias != nullptr ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
    const __m256 bias1 = bias != nullptr ? _mm256_loadu_ps(bias + 8) : _mm256_setzero_ps();
#pragma GCC unroll 6
    for (int i = 0; i < kMR2; ++i) {
      float* ci = c + i * ldc;
      __m256 r0 = acc[i][0], r1 = acc[i][1];
      if (accumulate) {
        r0 = _mm256_add_ps(r0, _mm256_loadu_ps(ci));
        r1 = _mm256_add_ps(r1, _mm256_loadu_ps(ci + 8));
      }
      if (bias != nullptr) {
        r0 = _mm256_add_ps(r0, bias0);
        r1 = _mm256_add_ps(r1, bias1);
      }
      _mm256_storeu_ps(ci, r0);
      _mm256_storeu_ps(ci + 8, r1);
    }
    return;
  }
  // a tile at the edge of C: through a buffer, element by element, in the same order (C, then bias)
  alignas(32) float tile[kMR2][kNR2];
#pragma GCC unroll 6
  for (int i = 0; i < kMR2; ++i) {
    _mm256_store_ps(tile[i], acc[i][0]);
    _mm256_store_ps(tile[i] + 8, acc[i][1]);
  }
  for (Index i = 0; i < rows; ++i)
    for (Index j = 0; j < cols; ++j) {
      float v = tile[i][j];
      if (accumulate) v += c[i * ldc + j];
      if (bias != nullptr) v += bias[j];
      c[i * ldc + j] = v;
    }
}

TCPP_F32_AVX2_TARGET void micro_kernel_avx2(Index kc, const float* a, const float* b, float* c, Index ldc, Index rows,
                                            Index cols, bool accumulate, const float* bias) {
  avx2_tile<ASource::Panel>(kc, a, 0, b, c, ldc, rows, cols, accumulate, bias);
}

TCPP_F32_AVX2_TARGET void compute_block_avx2(const Block& s, Index blk) {
  if (s.a_columns)
    walk_block<kMR2, kNR2, micro_kernel_avx2, avx2_tile<ASource::Columns>>(s, blk);
  else
    walk_block<kMR2, kNR2, micro_kernel_avx2, avx2_tile<ASource::Rows>>(s, blk);
}

// A kernel: its tile and its three steps.
using PackFn = void (*)(const float*, Index, Index, Index, Index, Index, Index, float*);
struct Steps {
  Index mr, nr;
  Index kc;  // at most this many values of k per block (a B panel of kc * nr floats)
  PackFn pack_k_major, pack_lines;
  void (*compute_block)(const Block&, Index);
  bool reads_a_in_place;  // compute_block reads op(A) without packing it (Block::lda, a_columns)
};

constexpr Steps kAvx512Steps{kMR, kNR, kKC, pack_k_major, pack_lines, compute_block, false};
constexpr Steps kAvx2Steps{kMR2, kNR2, tuning::kF32Avx2GemmKC, pack_k_major_avx2, pack_lines_avx2, compute_block_avx2,
                           true};

}  // namespace
#endif  // TCPP_F32_KERNEL

#if TCPP_F32_KERNEL
namespace {

// Inside the product's parallel region: panels [p0, p1) of r lines, covering lines [p0*r,
// min(n, p1*r)) of op(X), for the k block [k0, k0 + kc) of X (lines of stride ldx), packed into
// `packed` (panel p at packed + (p - p0)*kc*r) and shared among the threads, with no barrier at
// the end. k_major: X holds the panels' k values in its lines (op(A) with trans_a, op(B) without
// trans_b); else each panel line is a line of X.
void pack_panels(const Steps& k, const float* X, Index ldx, Index n, Index r, Index p0, Index p1, Index k0, Index kc,
                 bool k_major, float* packed) {
#pragma omp for schedule(static) nowait
  for (Index p = p0; p < p1; ++p) {
    float* dst = packed + (p - p0) * kc * r;
    const Index lines = std::min(r, n - p * r);
    if (k_major)
      k.pack_k_major(X, ldx, p * r, lines, r, k0, kc, dst);
    else
      k.pack_lines(X, ldx, p * r, lines, r, k0, kc, dst);
  }
}

// Panels of `panel_floats` floats that fit in tuning::kF32StripeBytes. A stripe is as many blocks
// of `per_block` panels as fit, at least one: at most max(per_block, stripe_fit) panels.
Index stripe_fit(Index panel_floats) {
  return static_cast<Index>(tuning::kF32StripeBytes / (static_cast<double>(panel_floats) * sizeof(float)));
}
Index stripe_blocks(Index per_block, Index panel_floats) {
  return std::max<Index>(1, stripe_fit(panel_floats) / per_block);
}

// C = beta C + op(A) op(B) + bias with the steps of one kernel (see the top of the header).
void run(const Steps& k, Index M, Index N, Index K, const float* A, Index lda, bool trans_a, const float* B, Index ldb,
         bool trans_b, float beta, float* C, Index ldc, const float* bias) {
  const Index mr = k.mr, nr = k.nr;
  const Index MP = (M + mr - 1) / mr, NP = (N + nr - 1) / nr;
  // K in blocks of nearly equal size, none above k.kc (600 values of k: two blocks of 300, not
  // 512 and a short one of 88)
  const Index k_blocks = (K + k.kc - 1) / k.kc, max_kc = (K + k_blocks - 1) / k_blocks;
  // per calling thread: the products of a model run in the thread that called it, one at a time
  thread_local std::vector<float> a_buf, b_buf;
  // a row-major op(A) is read in place by a kernel that can; a transposed one when C is narrow
  // (tuning::kF32ColumnsInPlaceMaxN)
  const bool a_in_place = k.reads_a_in_place && (!trans_a || N <= tuning::kF32ColumnsInPlaceMaxN);
  // blocks of C: start from about 48 x 128 (4 x 4 AVX-512 panels, 8 x 8 AVX2 ones); block_grid
  // halves the larger side until every thread has several blocks
  const Index rp0 = std::min<Index>(std::max<Index>(1, 48 / mr), MP),
              cp0 = std::min<Index>(std::max<Index>(1, 128 / nr), NP);
  // a wide product takes its blocks column by column (see tuning::kF32ColumnOrderBytes)
  const bool by_columns = static_cast<double>(NP * nr * max_kc) * sizeof(float) > tuning::kF32ColumnOrderBytes;
  // The operand whose panels the order reads once per k block (B's by columns, a packed A's by
  // rows) is packed one stripe of blocks at a time, just before the stripe's blocks use it: the
  // workspace holds a stripe, not the operand (block_grid only shrinks rp0 and cp0)
  const Index a_panels = by_columns ? MP : std::min(MP, std::max(rp0, stripe_fit(max_kc * mr)));
  const Index b_panels = by_columns ? std::min(NP, std::max(cp0, stripe_fit(max_kc * nr))) : NP;
  float* a_pack = a_in_place ? nullptr : aligned_workspace(a_buf, a_panels * max_kc * mr);
  float* b_pack = aligned_workspace(b_buf, b_panels * max_kc * nr);
  const bool parallel = static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K) >= kParallelMacs;
#pragma omp parallel if (parallel)
  {
    const BlockGrid g = block_grid(MP, NP, rp0, cp0, 4 * team_slot().count);
    const Index rp = g.rp, cp = g.cp, blocks_n = g.blocks_n, blocks_m = g.blocks_m;
    // blocks per stripe along the side the order walks, and how many blocks that side has
    const Index stripe = by_columns   ? stripe_blocks(cp, max_kc * nr)
                         : a_in_place ? blocks_m
                                      : stripe_blocks(rp, max_kc * mr);
    const Index outer = by_columns ? blocks_n : blocks_m;
    for (Index k0 = 0; k0 < K; k0 += max_kc) {
      const Index kc = std::min(max_kc, K - k0);
      for (Index s0 = 0; s0 < outer; s0 += stripe) {
        const Index s1 = std::min(outer, s0 + stripe);
        // the panels this stripe needs: all of the other operand's (packed with the first stripe)
        const Index a0 = by_columns ? 0 : s0 * rp, a1 = by_columns ? MP : std::min(MP, s1 * rp);
        const Index b0 = by_columns ? s0 * cp : 0, b1 = by_columns ? std::min(NP, s1 * cp) : NP;
        // pack op(A) panels and op(B) panels (one barrier ends both): op(A)[i, k] = A[k*lda + i]
        // with trans_a, op(B)[k, j] = B[j*ldb + k] with trans_b
        // (a row-major op(A) is read in place by a kernel that can: its broadcasts need no panels)
        if (!a_in_place && (!by_columns || s0 == 0)) pack_panels(k, A, lda, M, mr, a0, a1, k0, kc, trans_a, a_pack);
        if (by_columns || s0 == 0) pack_panels(k, B, ldb, N, nr, b0, b1, k0, kc, !trans_b, b_pack);
#pragma omp barrier
        const Block s{M,
                      N,
                      kc,
                      rp,
                      cp,
                      blocks_n,
                      a_in_place ? (trans_a ? A + k0 * lda : A + k0) : a_pack,
                      a_in_place ? lda : 0,
                      trans_a,
                      b_pack,
                      a_in_place ? 0 : a0,
                      b0,
                      C,
                      ldc,
                      beta != 0.0f || k0 > 0,
                      k0 + kc >= K ? bias : nullptr};
        // the stripe's blocks, handed out as threads become free: a thread slowed by another
        // process on its core does fewer (each block is still computed by one thread, in the
        // same order); the loop's closing barrier keeps the panels until every block is done
        const Index across = by_columns ? blocks_m : blocks_n, n_blocks = (s1 - s0) * across;
#pragma omp for schedule(dynamic)
        for (Index j = 0; j < n_blocks; ++j)
          k.compute_block(s, by_columns ? (j % blocks_m) * blocks_n + s0 + j / blocks_m : s0 * blocks_n + j);
      }
    }
  }
}

}  // namespace
#endif  // TCPP_F32_KERNEL

void gemm_with(Kernel kernel, Index M, Index N, Index K, const float* A, Index lda, bool trans_a, const float* B,
               Index ldb, bool trans_b, float beta, float* C, Index ldc, const float* bias) {
  check_gemm_args("f32::gemm", M, N, K, lda, trans_a, ldb, trans_b, beta, ldc);
  if (!kernel_runs(kernel))
    throw std::runtime_error(
        concat("f32::gemm: the ", kernel_name(kernel), " kernel cannot run here (CPU, build or ", kIsaEnv, ")"));
#if TCPP_F32_KERNEL
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (Index i = 0; i < M; ++i)
      for (Index j = 0; j < N; ++j) {
        float& c = C[i * ldc + j];
        c = (beta == 0.0f ? 0.0f : c) + (bias != nullptr ? bias[j] : 0.0f);
      }
    return;
  }
  run(kernel == Kernel::Avx512 ? kAvx512Steps : kAvx2Steps, M, N, K, A, lda, trans_a, B, ldb, trans_b, beta, C, ldc,
      bias);
#else
  (void)A, (void)B, (void)C, (void)bias;
#endif
}

void gemm(Index M, Index N, Index K, const float* A, Index lda, bool trans_a, const float* B, Index ldb, bool trans_b,
          float beta, float* C, Index ldc, const float* bias) {
  check_gemm_args("f32::gemm", M, N, K, lda, trans_a, ldb, trans_b, beta, ldc);
  if (!supported())
    throw std::runtime_error("f32::gemm: no float32 kernel runs here (CPU, build, or turned off by the environment)");
  gemm_with(active_kernel(), M, N, K, A, lda, trans_a, B, ldb, trans_b, beta, C, ldc, bias);
}

}  // namespace transformer::f32

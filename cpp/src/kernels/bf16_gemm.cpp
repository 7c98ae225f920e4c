#include "transformer/kernels/bf16_gemm.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "transformer/kernels/amx.hpp"
#include "transformer/kernels/f32_gemm.hpp"
#include "transformer/kernels/isa.hpp"

// The kernel needs a compiler that knows AVX512_BF16 (GCC 10+, Clang 9+) on x86-64. It is compiled
// with function target attributes, never with -m flags for the whole file: inline functions of
// headers (std::, Eigen) instantiated here must stay plain x86-64 code, since the linker may keep
// this file's copy for the whole extension.
#if defined(__x86_64__) && \
    ((defined(__clang__) && __clang_major__ >= 9) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 10))
#define TCPP_BF16_KERNEL 1
#include <immintrin.h>
#define TCPP_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#else
#define TCPP_BF16_KERNEL 0
#endif

// The AMX kernel (amx.hpp says what it needs) also needs the bf16 one's compiler.
#if TCPP_BF16_KERNEL && TCPP_AMX_KERNEL
#define TCPP_BF16_AMX 1
#define TCPP_AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")))
#else
#define TCPP_BF16_AMX 0
#endif

namespace transformer::bf16 {

// ---------------------------------------------------------------------------------------------
// Which CPUs may run it

bool cpu_supported() {
#if TCPP_BF16_KERNEL
  const Avx512Cpuid& w = avx512_cpuid();
  const unsigned b = w.leaf7_ebx;
  const bool f = (b >> 16) & 1u, bw = (b >> 30) & 1u, vl = (b >> 31) & 1u, bf16 = (w.leaf7_1_eax >> 5) & 1u;
  return f && bw && vl && bf16;
#else
  return false;
#endif
}

static bool disabled_by_environment() {
  const char* v = std::getenv(kDisableEnv);
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

bool supported() { return cpu_supported() && !disabled_by_environment() && isa_allows(Isa::Avx512); }

namespace {
// What stops the AMX tiles on this CPU and OS, or "" (decided once).
const std::string& amx_problem() {
  static const std::string problem = cpu_supported()
                                         ? amx::cpu_problem(amx::Op::Bf16)
                                         : "this CPU (or its operating system) does not support AVX512_BF16";
  return problem;
}
}  // namespace

bool amx_cpu_supported() { return amx_problem().empty(); }

bool amx_supported() { return supported() && amx_cpu_supported() && !amx::disabled_by_environment(); }

std::string amx_unsupported_reason() {
  if (!supported()) return unsupported_reason();
  if (!amx_problem().empty()) return amx_problem();
  if (amx::disabled_by_environment())
    return std::string("the environment variable ") + kDisableAmxEnv + " turns the AMX tiles off";
  return "";
}

std::string unsupported_reason() {
#if !TCPP_BF16_KERNEL
  return "this build has no bfloat16 kernel (it needs an x86-64 compiler that knows AVX512_BF16: GCC 10+ or "
         "Clang 9+)";
#else
  if (!cpu_supported())
    return "this CPU (or its operating system) does not support AVX512_BF16 with AVX512F/BW/VL, which the "
           "bfloat16 matrix products need";
  if (disabled_by_environment())
    return std::string("the environment variable ") + kDisableEnv + " turns the bfloat16 kernel off";
  if (!isa_allows(Isa::Avx512))
    return std::string("the instruction-set level is '") + isa_name(active_isa()) + "' (" + kIsaEnv +
           "), below the avx512 that the bfloat16 matrix products need";
  return "";
#endif
}

// ---------------------------------------------------------------------------------------------
// The readable reference

float round_to_bf16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const std::uint32_t exponent = u & 0x7F800000u;
  if (exponent == 0) {
    u &= 0x80000000u;  // zero or subnormal: signed zero
  } else if (exponent == 0x7F800000u) {
    if (u & 0x007FFFFFu) u = (u | 0x00400000u) & 0xFFFF0000u;  // NaN stays a (quiet) NaN
  } else {
    // add half an ulp of bfloat16, minus one unless the kept part is odd (ties to even); a carry
    // into the exponent is the correct rounding (up to infinity past the largest value)
    u += 0x7FFFu + ((u >> 16) & 1u);
    u &= 0xFFFF0000u;
  }
  float r;
  std::memcpy(&r, &u, sizeof r);
  return r;
}

void gemm_reference(Index M, Index N, Index K, const float* A, Index lda, bool trans_a, const float* B, Index ldb,
                    bool trans_b, float beta, float* C, Index ldc) {
  f32::check_gemm_args("bf16::gemm_reference", M, N, K, lda, trans_a, ldb, trans_b, beta, ldc);
  for (Index i = 0; i < M; ++i)
    for (Index j = 0; j < N; ++j) {
      double sum = 0.0;
      for (Index k = 0; k < K; ++k) {
        const float a = trans_a ? A[k * lda + i] : A[i * lda + k];
        const float b = trans_b ? B[j * ldb + k] : B[k * ldb + j];
        sum += static_cast<double>(round_to_bf16(a)) * static_cast<double>(round_to_bf16(b));
      }
      float& c = C[i * ldc + j];
      c = static_cast<float>(beta == 0.0f ? sum : static_cast<double>(c) + sum);
    }
}

// ---------------------------------------------------------------------------------------------
// The kernels

#if TCPP_BF16_KERNEL
namespace {

static_assert(kNR % 16 == 0 && kMR <= 16 && kKC % 32 == 0, "bf16 kernel tile sizes");
static_assert(kAmxKC % 32 == 0, "AMX k blocks hold whole tiles (16 pairs)");

// Lanes [0, n) of a 16-lane mask (n may be <= 0 or >= 16).
inline __mmask16 first_lanes(Index n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1u);
}

// Pack `width` lines of an operand for k in [k0, k0 + kc) into one panel of `stored` pairs (at
// least (kc + 1) / 2; the pairs past kc are zero, as are the lines past `count`). A pair is the
// line's values at k0 + 2p and k0 + 2p + 1. The panel is pair-major, word p*width + w, or with
// line_major line by line, word w*stored + p.
//
// pairs_in_line: line w is contiguous in k (src + (first + w)*ld + k): two neighbouring floats of
//   one line make a pair; 32 floats at a time become 16 words.
TCPP_BF16_TARGET void pack_pairs_in_line(const float* src, Index ld, Index first, Index count, Index width, Index k0,
                                         Index kc, Index stored, std::uint32_t* dst, bool line_major) {
  alignas(64) std::uint32_t words[16];
  for (Index w = 0; w < width; ++w) {
    const float* s = src + (first + std::min(w, count - 1)) * ld + k0;  // lines past count: zeros
    for (Index p0 = 0; p0 < stored; p0 += 16) {
      const Index left = w < count ? kc - 2 * p0 : 0;  // floats left in this line
      const __m512 lo = _mm512_maskz_loadu_ps(first_lanes(left), s + 2 * p0);
      const __m512 hi = _mm512_maskz_loadu_ps(first_lanes(left - 16), s + 2 * p0 + 16);
      // bf16 [lo0..lo15, hi0..hi15]: word q is the pair (s[2q], s[2q + 1])
      const __m512i pair_words = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
      const Index n = std::min<Index>(16, stored - p0);
      if (line_major) {
        _mm512_mask_storeu_epi32(dst + w * stored + p0, first_lanes(n), pair_words);
        continue;
      }
      _mm512_store_si512(words, pair_words);
      std::uint32_t* d = dst + p0 * width + w;
      for (Index q = 0; q < n; ++q) d[q * width] = words[q];
    }
  }
}

// across_lines: the pair's two values are in two consecutive lines of the source (k is the line:
//   src + (k0 + k)*ld + first + w), 16 w at a time: convert both lines, interleave the halves.
TCPP_BF16_TARGET void pack_pairs_across_lines(const float* src, Index ld, Index first, Index count, Index width,
                                              Index k0, Index kc, Index stored, std::uint32_t* dst, bool line_major) {
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  for (Index p = 0; p < stored; ++p) {
    const bool has_even = 2 * p < kc, has_odd = 2 * p + 1 < kc;
    const float* r0 = src + (k0 + (has_even ? 2 * p : 0)) * ld + first;
    for (Index w0 = 0; w0 < width; w0 += 16) {
      const __mmask16 m = first_lanes(std::min(count, width) - w0);
      const __m512 even = has_even ? _mm512_maskz_loadu_ps(m, r0 + w0) : _mm512_setzero_ps();
      const __m512 odd = has_odd ? _mm512_maskz_loadu_ps(m, r0 + ld + w0) : _mm512_setzero_ps();
      const __m512i e = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(even));
      const __m512i o = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(odd));
      const __m512i words = _mm512_or_si512(e, _mm512_slli_epi32(o, 16));
      const __mmask16 store = first_lanes(width - w0);
      if (line_major) {  // word (w0 + l)*stored + p
        const __m512i at = _mm512_mullo_epi32(_mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int>(w0))),
                                              _mm512_set1_epi32(static_cast<int>(stored)));
        _mm512_mask_i32scatter_epi32(dst + p, store, at, words, 4);
      } else {
        _mm512_mask_storeu_epi32(dst + p * width + w0, store, words);
      }
    }
  }
}

// What one product's k block needs to find its packed panels and C.
struct Block {
  Index M, N, pairs;             // rows and columns of C, k pairs stored per panel line
  Index row_panels, col_panels;  // panels per block of C (the unit of work)
  Index blocks_n;                // blocks of C per row of blocks
  const std::uint32_t* a;        // packed A: panel ip at a + ip*pairs*MR
  bool a_line_major;             // A panels stored row by row (word i*pairs + p)
  const std::uint32_t* b;        // packed B: panel jp at b + jp*pairs*NR, pair-major
  float* c;
  Index ldc;
  bool accumulate;
};

// The AVX512_BF16 tiles: a kMR x kNR tile of C in 24 registers; per k pair the kNR/16 vectors of
// the B panel, a broadcast of each of the kMR words of the A panel and kMR * kNR/16 vdpbf16ps.
struct Avx512Bf16Tiles {
  static constexpr Index MR = kMR, NR = kNR, KC = kKC, pair_multiple = 1;
  static constexpr bool a_line_major_always = false;
  static constexpr int kVectors = static_cast<int>(kNR / 16);  // 16-float vectors per tile row

  static void begin() {}
  static void end() {}

  // C[0..rows) x [0..cols) (+)= A panel . B panel over `pairs` k pairs. The A panel is pair-major
  // (word p*kMR + i) or, LineMajorA, row by row (word i*pairs + p).
  template <bool LineMajorA>
  TCPP_BF16_TARGET static inline void tile(Index pairs, const std::uint32_t* a, const std::uint32_t* b, float* c,
                                           Index ldc, Index rows, Index cols, bool accumulate) {
    __m512 acc[kMR][kVectors];
    for (int i = 0; i < kMR; ++i)
      for (int v = 0; v < kVectors; ++v) acc[i][v] = _mm512_setzero_ps();
    const Index row_step = LineMajorA ? pairs : 1, pair_step = LineMajorA ? 1 : kMR;
    for (Index p = 0; p < pairs; ++p) {
      __m512bh bv[kVectors];
      for (int v = 0; v < kVectors; ++v) bv[v] = (__m512bh)_mm512_load_si512(b + p * kNR + 16 * v);
      const std::uint32_t* ap = a + p * pair_step;
#pragma GCC unroll 16
      for (int i = 0; i < kMR; ++i) {
        const __m512bh ai = (__m512bh)_mm512_set1_epi32(static_cast<int>(ap[i * row_step]));
        for (int v = 0; v < kVectors; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], ai, bv[v]);
      }
    }
    __mmask16 masks[kVectors];
    for (int v = 0; v < kVectors; ++v) masks[v] = first_lanes(cols - 16 * v);
    // constant indices only (a loop to `rows` would keep the accumulators in memory)
#pragma GCC unroll 16
    for (int i = 0; i < kMR; ++i) {
      if (i >= rows) break;
      float* ci = c + i * ldc;
      for (int v = 0; v < kVectors; ++v) {
        __m512 r = acc[i][v];
        if (accumulate) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(masks[v], ci + 16 * v));
        _mm512_mask_storeu_ps(ci + 16 * v, masks[v], r);
      }
    }
  }

  TCPP_BF16_TARGET static void panel(const Block& s, const std::uint32_t* ap, const std::uint32_t* bp, float* cp,
                                     Index rows, Index cols) {
    if (s.a_line_major)
      tile<true>(s.pairs, ap, bp, cp, s.ldc, rows, cols, s.accumulate);
    else
      tile<false>(s.pairs, ap, bp, cp, s.ldc, rows, cols, s.accumulate);
  }
};

#if TCPP_BF16_AMX
// The AMX tiles: a 32 x 32 block of C in four 16 x 16 float32 tile registers (tmm0-3); per 16 k
// pairs two A tiles (16 rows x 16 pairs each, tmm4-5, read from row-by-row A panels with the
// panel's row stride) and two B tiles (16 pairs x 16 columns, tmm6-7, read from the pair-major B
// panel, whose 32-column rows are 128 bytes) and four tdpbf16ps. Panels hold a multiple of 16
// pairs (zeros past K), so every tile is whole; C's partial blocks go through a 32 x 32 buffer.
struct AmxTiles {
  static constexpr Index MR = 32, NR = 32, KC = kAmxKC, pair_multiple = 16;
  static constexpr bool a_line_major_always = true;

  // a thread's tile configuration is its own: each thread that computes blocks loads it and
  // releases it after
  static void begin() { amx::configure(); }
  static void end() { amx::release(); }

  TCPP_AMX_TARGET static void panel(const Block& s, const std::uint32_t* ap, const std::uint32_t* bp, float* cp,
                                    Index rows, Index cols) {
    alignas(64) float buf[32 * 32];
    const bool whole = rows == 32 && cols == 32;
    float* c = whole ? cp : buf;
    const Index ld = whole ? s.ldc : 32;
    if (!whole && s.accumulate)
      for (Index i = 0; i < 32; ++i)
        for (Index j = 0; j < 32; ++j) buf[i * 32 + j] = i < rows && j < cols ? cp[i * s.ldc + j] : 0.0f;
    const long stride = static_cast<long>(ld * sizeof(float));
    if (s.accumulate) {
      _tile_loadd(0, c, stride);
      _tile_loadd(1, c + 16, stride);
      _tile_loadd(2, c + 16 * ld, stride);
      _tile_loadd(3, c + 16 * ld + 16, stride);
    } else {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
    }
    const long a_stride = static_cast<long>(s.pairs * sizeof(std::uint32_t));
    const std::uint32_t* a_low = ap + 16 * s.pairs;
    for (Index p0 = 0; p0 < s.pairs; p0 += 16) {
      _tile_loadd(4, ap + p0, a_stride);
      _tile_loadd(5, a_low + p0, a_stride);
      _tile_loadd(6, bp + p0 * 32, 128);
      _tile_loadd(7, bp + p0 * 32 + 16, 128);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c, stride);
    _tile_stored(1, c + 16, stride);
    _tile_stored(2, c + 16 * ld, stride);
    _tile_stored(3, c + 16 * ld + 16, stride);
    if (!whole)
      for (Index i = 0; i < rows; ++i) std::copy(buf + i * 32, buf + i * 32 + cols, cp + i * s.ldc);
  }
};
#endif

// Block `blk` of C: for each B panel (kept in L1), every A panel of the block.
template <class Tiles>
void compute_block(const Block& s, Index blk) {
  constexpr Index MR = Tiles::MR, NR = Tiles::NR;
  const Index ip0 = (blk / s.blocks_n) * s.row_panels, jp0 = (blk % s.blocks_n) * s.col_panels;
  const Index ip1 = std::min((s.M + MR - 1) / MR, ip0 + s.row_panels);
  const Index jp1 = std::min((s.N + NR - 1) / NR, jp0 + s.col_panels);
  for (Index jp = jp0; jp < jp1; ++jp) {
    const std::uint32_t* bp = s.b + jp * s.pairs * NR;
    for (Index ip = ip0; ip < ip1; ++ip)
      Tiles::panel(s, s.a + ip * s.pairs * MR, bp, s.c + ip * MR * s.ldc + jp * NR, std::min(MR, s.M - ip * MR),
                   std::min(NR, s.N - jp * NR));
  }
}

// Pairs stored per panel line for a k block of kc values.
template <class Tiles>
constexpr Index stored_pairs(Index kc) {
  const Index pairs = (kc + 1) / 2;
  return (pairs + Tiles::pair_multiple - 1) / Tiles::pair_multiple * Tiles::pair_multiple;
}

// Inside the product's parallel region: the panels of r lines covering lines [0, n) of op(X),
// for the k block [k0, k0 + kc) of X (lines of stride ldx), `pairs` pairs a panel line, packed
// into `packed` and shared among the threads, with no barrier at the end. in_line: each k pair is
// in one line of X (op(A) without trans_a, op(B) with trans_b), else in two; line_major is passed
// to the pack functions.
void pack_pair_panels(const float* X, Index ldx, Index n, Index r, Index k0, Index kc, Index pairs, bool in_line,
                      bool line_major, std::uint32_t* packed) {
  const Index count = (n + r - 1) / r;
#pragma omp for schedule(static) nowait
  for (Index p = 0; p < count; ++p) {
    std::uint32_t* dst = packed + p * pairs * r;
    const Index lines = std::min(r, n - p * r);
    if (in_line)
      pack_pairs_in_line(X, ldx, p * r, lines, r, k0, kc, pairs, dst, line_major);
    else
      pack_pairs_across_lines(X, ldx, p * r, lines, r, k0, kc, pairs, dst, line_major);
  }
}

// The product with tiles `Tiles` (M, N, K > 0; arguments checked).
template <class Tiles>
void run(Index M, Index N, Index K, const float* A, Index lda, bool trans_a, const float* B, Index ldb, bool trans_b,
         float beta, float* C, Index ldc) {
  constexpr Index MR = Tiles::MR, NR = Tiles::NR, KC = Tiles::KC;
  const Index MP = (M + MR - 1) / MR, NP = (N + NR - 1) / NR;
  const Index max_pairs = stored_pairs<Tiles>(std::min(K, KC));
  thread_local std::vector<std::uint32_t> a_buf, b_buf;
  std::uint32_t* a_pack = f32::aligned_workspace(a_buf, MP * max_pairs * MR);
  std::uint32_t* b_pack = f32::aligned_workspace(b_buf, NP * max_pairs * NR);
  const bool parallel = static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K) >= kParallelMacs;
#pragma omp parallel if (parallel)
  {
    // blocks of C: start from 4 x 4 panels and halve the larger side until every thread has
    // several blocks
    const f32::BlockGrid g =
        f32::block_grid(MP, NP, std::min<Index>(4, MP), std::min<Index>(4, NP), 4 * team_slot().count);
    const Index rp = g.rp, cp = g.cp, blocks_n = g.blocks_n, blocks_m = g.blocks_m, n_blocks = blocks_m * blocks_n;
    // a wide product takes its blocks column by column (see tuning::kF32ColumnOrderBytes)
    const bool by_columns =
        static_cast<double>(NP * NR * max_pairs) * sizeof(std::uint32_t) > tuning::kF32ColumnOrderBytes;
    const bool a_line_major = Tiles::a_line_major_always || !trans_a;
    Tiles::begin();
    for (Index k0 = 0; k0 < K; k0 += KC) {
      const Index kc = std::min(KC, K - k0), pairs = stored_pairs<Tiles>(kc);
      // pack op(A) panels and op(B) panels (one barrier ends both). op(A)[i, k] = A[k*lda + i]
      // with trans_a: the pair is in two lines of A (a_line_major is true without trans_a);
      // op(B)[k, j] = B[j*ldb + k] with trans_b: the pair is in one line of B
      pack_pair_panels(A, lda, M, MR, k0, kc, pairs, !trans_a, a_line_major, a_pack);
      pack_pair_panels(B, ldb, N, NR, k0, kc, pairs, trans_b, false, b_pack);
#pragma omp barrier
      const Block s{M, N, pairs, rp, cp, blocks_n, a_pack, a_line_major, b_pack, C, ldc, beta != 0.0f || k0 > 0};
      // blocks handed out as threads become free (each is still computed by one thread, in the
      // same order)
#pragma omp for schedule(dynamic)
      for (Index blk = 0; blk < n_blocks; ++blk)
        compute_block<Tiles>(s, by_columns ? (blk % blocks_m) * blocks_n + blk / blocks_m : blk);
    }
    Tiles::end();
  }
}

}  // namespace
#endif  // TCPP_BF16_KERNEL

Kernel active_kernel() { return amx_supported() ? Kernel::Amx : Kernel::Avx512Bf16; }

const char* kernel_name(Kernel kernel) {
  return kernel == Kernel::Amx ? "amx" : kernel == Kernel::Avx512Bf16 ? "avx512_bf16" : "auto";
}

void gemm(Index M, Index N, Index K, const float* A, Index lda, bool trans_a, const float* B, Index ldb, bool trans_b,
          float beta, float* C, Index ldc, Kernel kernel) {
  f32::check_gemm_args("bf16::gemm", M, N, K, lda, trans_a, ldb, trans_b, beta, ldc);
  if (!cpu_supported()) throw std::runtime_error("bf16::gemm: " + unsupported_reason());
  if (kernel == Kernel::Auto) kernel = active_kernel();
  if (kernel == Kernel::Amx && !amx_cpu_supported())
    throw std::runtime_error("bf16::gemm: " + amx_unsupported_reason());
#if TCPP_BF16_KERNEL
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (beta == 0.0f)
      for (Index i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, 0.0f);
    return;
  }
#if TCPP_BF16_AMX
  if (kernel == Kernel::Amx) return run<AmxTiles>(M, N, K, A, lda, trans_a, B, ldb, trans_b, beta, C, ldc);
#endif
  run<Avx512Bf16Tiles>(M, N, K, A, lda, trans_a, B, ldb, trans_b, beta, C, ldc);
#endif
}

}  // namespace transformer::bf16

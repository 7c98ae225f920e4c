#include "transformer/kernels/f32_gemm.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "transformer/kernels/isa.hpp"

// Compiled with function target attributes, never with -m flags for the whole file (see
// bf16_gemm.cpp: inline functions of headers instantiated here must stay plain x86-64 code).
#if defined(__x86_64__) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 8))
#define TCPP_F32_KERNEL 1
#include <cpuid.h>
#include <immintrin.h>
#define TCPP_F32_TARGET __attribute__((target("avx512f")))
#else
#define TCPP_F32_KERNEL 0
#endif

namespace transformer::f32 {

static bool cpu_supported() {
#if TCPP_F32_KERNEL
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_max(0, nullptr) < 7) return false;
    __cpuid(1, a, b, c, d);
    if (!((c >> 27) & 1u)) return false;  // OSXSAVE
    // the OS must save the SSE, AVX and AVX-512 (opmask, ZMM0-15 upper halves, ZMM16-31) state
    unsigned xcr0_lo = 0, xcr0_hi = 0;
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & 0xE6u) != 0xE6u) return false;
    __cpuid_count(7, 0, a, b, c, d);
    return ((b >> 16) & 1u) != 0;  // AVX512F
  }();
  return ok;
#else
  return false;
#endif
}

bool supported() {
  static const bool ok = [] {
    const char* v = std::getenv(kDisableEnv);
    const bool disabled = v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
    return cpu_supported() && !disabled && isa_allows(Isa::Avx512);
  }();
  return ok;
}

static void check_args(const char* who, Index M, Index N, Index K, Index lda, bool trans_a, Index ldb, bool trans_b,
                       float beta, Index ldc) {
  TCPP_CHECK(M >= 0 && N >= 0 && K >= 0, who, ": sizes must be >= 0, got M ", M, ", N ", N, ", K ", K);
  TCPP_CHECK(beta == 0.0f || beta == 1.0f, who, ": beta must be 0 or 1, got ", beta);
  TCPP_CHECK(lda >= std::max<Index>(1, trans_a ? M : K), who, ": lda ", lda, " is too small");
  TCPP_CHECK(ldb >= std::max<Index>(1, trans_b ? K : N), who, ": ldb ", ldb, " is too small");
  TCPP_CHECK(ldc >= std::max<Index>(1, N), who, ": ldc ", ldc, " is too small");
}

void gemm_reference(Index M, Index N, Index K, const float* A, Index lda, bool trans_a, const float* B, Index ldb,
                    bool trans_b, float beta, float* C, Index ldc, const float* bias) {
  check_args("f32::gemm_reference", M, N, K, lda, trans_a, ldb, trans_b, beta, ldc);
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
  const float* a;                // packed A: panel ip at a + ip*kc*kMR
  const float* b;                // packed B: panel jp at b + jp*kc*kNR
  float* c;
  Index ldc;
  bool accumulate;
  const float* bias;  // added by the last k block (nullptr: none)
};

// Block `blk` of C: for each B panel (kept in L1), every A panel of the block.
TCPP_F32_TARGET void compute_block(const Block& s, Index blk) {
  const Index ip0 = (blk / s.blocks_n) * s.row_panels, jp0 = (blk % s.blocks_n) * s.col_panels;
  const Index ip1 = std::min((s.M + kMR - 1) / kMR, ip0 + s.row_panels);
  const Index jp1 = std::min((s.N + kNR - 1) / kNR, jp0 + s.col_panels);
  for (Index jp = jp0; jp < jp1; ++jp) {
    const float* bp = s.b + jp * s.kc * kNR;
    const float* bias = s.bias != nullptr ? s.bias + jp * kNR : nullptr;
    for (Index ip = ip0; ip < ip1; ++ip) {
      const float* ap = s.a + ip * s.kc * kMR;
      float* cp = s.c + ip * kMR * s.ldc + jp * kNR;
      const Index rows = std::min(kMR, s.M - ip * kMR), cols = std::min(kNR, s.N - jp * kNR);
      micro_kernel(s.kc, ap, bp, cp, s.ldc, rows, cols, s.accumulate, bias);
    }
  }
}

// A 64-byte aligned buffer of the calling thread, grown when needed.
float* workspace(std::vector<float>& buf, Index floats) {
  const size_t need = static_cast<size_t>(floats) + 16;
  if (buf.size() < need) buf.assign(need, 0.0f);
  const auto addr = reinterpret_cast<std::uintptr_t>(buf.data());
  const size_t skip_floats = ((64 - addr % 64) % 64) / sizeof(float);
  return buf.data() + skip_floats;
}

#ifdef _OPENMP
inline int thread_count() { return omp_get_num_threads(); }
#else
inline int thread_count() { return 1; }
#endif

}  // namespace
#endif  // TCPP_F32_KERNEL

void gemm(Index M, Index N, Index K, const float* A, Index lda, bool trans_a, const float* B, Index ldb, bool trans_b,
          float beta, float* C, Index ldc, const float* bias) {
  check_args("f32::gemm", M, N, K, lda, trans_a, ldb, trans_b, beta, ldc);
  if (!cpu_supported()) throw std::runtime_error("f32::gemm: this CPU (or build) has no AVX-512F kernel");
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
  const Index MP = (M + kMR - 1) / kMR, NP = (N + kNR - 1) / kNR;
  const Index max_kc = std::min(K, kKC);
  // per calling thread: the products of a model run in the thread that called it, one at a time
  thread_local std::vector<float> a_buf, b_buf;
  float* a_pack = workspace(a_buf, MP * max_kc * kMR);
  float* b_pack = workspace(b_buf, NP * max_kc * kNR);
  const bool parallel = static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K) >= kParallelMacs;
#pragma omp parallel if (parallel)
  {
    // blocks of C: start from 4 x 4 panels (48 x 128) and halve the larger side until every
    // thread has several blocks
    const Index want = 4 * static_cast<Index>(thread_count());
    Index rp = std::min<Index>(4, MP), cp = std::min<Index>(4, NP);
    auto blocks = [&] { return ((MP + rp - 1) / rp) * ((NP + cp - 1) / cp); };
    while (blocks() < want && (rp > 1 || cp > 1)) {
      if (rp >= cp)
        rp = (rp + 1) / 2;
      else
        cp = (cp + 1) / 2;
      if (rp == 1 && cp == 1) break;
    }
    const Index blocks_n = (NP + cp - 1) / cp, n_blocks = blocks();
    for (Index k0 = 0; k0 < K; k0 += kKC) {
      const Index kc = std::min(kKC, K - k0);
      // pack op(A) panels and op(B) panels (the barrier at the end of the second loop ends both)
#pragma omp for schedule(static) nowait
      for (Index ip = 0; ip < MP; ++ip) {
        float* dst = a_pack + ip * kc * kMR;
        const Index rows = std::min(kMR, M - ip * kMR);
        if (trans_a)  // op(A)[i, k] = A[k*lda + i]
          pack_k_major(A, lda, ip * kMR, rows, kMR, k0, kc, dst);
        else
          pack_lines(A, lda, ip * kMR, rows, kMR, k0, kc, dst);
      }
#pragma omp for schedule(static)
      for (Index jp = 0; jp < NP; ++jp) {
        float* dst = b_pack + jp * kc * kNR;
        const Index cols = std::min(kNR, N - jp * kNR);
        if (trans_b)  // op(B)[k, j] = B[j*ldb + k]
          pack_lines(B, ldb, jp * kNR, cols, kNR, k0, kc, dst);
        else
          pack_k_major(B, ldb, jp * kNR, cols, kNR, k0, kc, dst);
      }
      const Block s{
          M, N, kc, rp, cp, blocks_n, a_pack, b_pack, C, ldc, beta != 0.0f || k0 > 0, k0 + kc >= K ? bias : nullptr};
#pragma omp for schedule(static)
      for (Index blk = 0; blk < n_blocks; ++blk) compute_block(s, blk);
    }
  }
#endif
}

}  // namespace transformer::f32

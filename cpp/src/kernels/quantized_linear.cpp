#include "transformer/kernels/quantized_linear.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include "transformer/kernels/amx.hpp"
#include "transformer/kernels/avx2.hpp"
#include "transformer/kernels/bf16_gemm.hpp"
#include "transformer/kernels/isa.hpp"
#include "transformer/kernels/neon.hpp"

// As in bf16_gemm.cpp: the kernels are compiled with function target attributes (never -m flags
// for the whole file) and run only after a CPUID check.
#if defined(__x86_64__) && \
    ((defined(__clang__) && __clang_major__ >= 9) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 10))
#define TCPP_LOWP_KERNEL 1
#include <immintrin.h>
#define TCPP_INT8_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#define TCPP_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#else
#define TCPP_LOWP_KERNEL 0
#endif

// The AMX tiles (amx.hpp) take the products of many rows.
#if TCPP_LOWP_KERNEL && TCPP_AMX_KERNEL
#define TCPP_AMX_DECODE 1
#define TCPP_AMX_DECODE_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512bf16,amx-tile,amx-int8,amx-bf16")))
#else
#define TCPP_AMX_DECODE 0
#endif

namespace transformer {

// ---------------------------------------------------------------------------------------------
// Names, and what this CPU can run

ComputeType parse_compute_type(const std::string& name) {
  if (name == "float32") return ComputeType::Float32;
  if (name == "int8") return ComputeType::Int8;
  if (name == "bf16") return ComputeType::BFloat16;
  throw std::invalid_argument("compute_type must be 'float32', 'int8' or 'bf16', got '" + name + "'");
}

std::string to_string(ComputeType c) {
  switch (c) {
    case ComputeType::Int8:
      return "int8";
    case ComputeType::BFloat16:
      return "bf16";
    default:
      return "float32";
  }
}

namespace {
bool cpu_has_vnni() {
#if TCPP_LOWP_KERNEL
  const Avx512Cpuid& w = avx512_cpuid();
  const unsigned b = w.leaf7_ebx, c = w.leaf7_ecx;
  const bool f = (b >> 16) & 1u, bw = (b >> 30) & 1u, vl = (b >> 31) & 1u, vnni = (c >> 11) & 1u;
  return f && bw && vl && vnni;
#else
  return false;
#endif
}

// Whether int8 products run on the AVX512_VNNI kernel (else the AVX2 or AVX-VNNI one of avx2.cpp)
bool int8_kernel_avx512() { return cpu_has_vnni() && isa_allows(Isa::Avx512); }

bool int8_disabled_by_environment() {
  const char* v = std::getenv(kDisableInt8Env);
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}
}  // namespace

bool amx_decoding(ComputeType c) {
  if (c == ComputeType::Float32 || amx::disabled_by_environment()) return false;
  if (c == ComputeType::Int8 && !int8_kernel_avx512()) return false;
  return amx::cpu_problem(c == ComputeType::Int8 ? amx::Op::Int8 : amx::Op::Bf16).empty();
}

bool compute_type_supported(ComputeType c) {
  if (c == ComputeType::Int8)
    return !int8_disabled_by_environment() &&
           ((TCPP_LOWP_KERNEL && ((cpu_has_vnni() && isa_allows(Isa::Avx512)) || isa_allows(Isa::Avx2))) ||
            neon::int8_supported());
  if (c == ComputeType::BFloat16) return bf16::supported();
  return true;
}

std::string compute_type_unsupported_reason(ComputeType c) {
  if (c == ComputeType::BFloat16) return bf16::unsupported_reason();
  if (c != ComputeType::Int8) return "";
#if defined(__aarch64__)
  if (int8_disabled_by_environment())
    return std::string("the environment variable ") + kDisableInt8Env + " turns the int8 kernel off";
  if (!cpu_has_arm_dotprod()) return "this CPU has no ARMv8.2 int8 dot product (sdot), which the int8 products need";
  if (!isa_allows(Isa::Neon))
    return std::string("the instruction-set level is 'generic' (") + kIsaEnv +
           "), below the neon that the int8 products need";
  return neon::int8_supported() ? "" : "this build has no int8 kernel (it needs GCC 10+ or Clang for +dotprod)";
#elif !TCPP_LOWP_KERNEL
  return "this build has no int8 kernel (it needs an x86-64 compiler that knows AVX512_VNNI: GCC 10+ or Clang 9+, "
         "or an AArch64 one)";
#else
  if (int8_disabled_by_environment())
    return std::string("the environment variable ") + kDisableInt8Env + " turns the int8 kernel off";
  if (cpu_isa() == Isa::Generic)
    return "this CPU (or its operating system) supports neither AVX2 with FMA nor AVX512_VNNI, which the int8 "
           "products need";
  if (!isa_allows(Isa::Avx2))
    return std::string("the instruction-set level is 'generic' (") + kIsaEnv +
           "), below the avx2 that the int8 products need";
  return "";
#endif
}

std::string compute_type_kernel(ComputeType c) {
  if (!compute_type_supported(c)) return "unavailable";
  if (c == ComputeType::Int8) {
    if (neon::int8_supported()) return "neon_dotprod";
    if (cpu_has_vnni() && isa_allows(Isa::Avx512)) return amx_decoding(c) ? "amx+avx512_vnni" : "avx512_vnni";
    return cpu_has_avx_vnni() ? "avx_vnni" : "avx2";
  }
  if (c == ComputeType::BFloat16) return amx_decoding(c) ? "amx+avx512_bf16" : "avx512_bf16";
  return "";
}

template <typename T>
void check_compute_type(ComputeType c, const char* who) {
  if (c == ComputeType::Float32) return;
  TCPP_CHECK((std::is_same<T, float>::value), who, ": compute_type '", to_string(c),
             "' needs a float32 model (float64 models are for gradient checks); use compute_type 'float32'");
  TCPP_CHECK(compute_type_supported(c), who, ": compute_type '", to_string(c),
             "' is not available: ", compute_type_unsupported_reason(c), "; use compute_type 'float32'",
             c == ComputeType::Int8 && compute_type_supported(ComputeType::BFloat16) ? " or 'bf16'" : "",
             c == ComputeType::BFloat16 && compute_type_supported(ComputeType::Int8) ? " or 'int8'" : "");
}

template void check_compute_type<float>(ComputeType, const char*);
template void check_compute_type<double>(ComputeType, const char*);

// ---------------------------------------------------------------------------------------------
// Packing and quantising

namespace {
constexpr Index per_word(ComputeType t) { return t == ComputeType::Int8 ? 4 : 2; }

// the upper 16 bits of round_to_bf16(x): its bfloat16 encoding
inline std::uint32_t bf16_bits(float x) {
  const float r = bf16::round_to_bf16(x);
  std::uint32_t u;
  std::memcpy(&u, &r, sizeof u);
  return u >> 16;
}

inline float bf16_value(std::uint32_t bits) {
  const std::uint32_t u = bits << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The int8 code of x with the row's 127 / max|x| (ties to even; the result is in [-127, 127]).
inline int quantize(float x, float inv) {
  const float q = std::nearbyint(x * inv);
  return static_cast<int>(std::min(127.0f, std::max(-127.0f, q)));
}
}  // namespace

void QuantizedLinear::pack(ComputeType type, const float* W, Index N, Index K, Index ldw, const float* b) {
  TCPP_CHECK(type == ComputeType::Int8 || type == ComputeType::BFloat16,
             "QuantizedLinear: compute type must be int8 or bf16, got ", to_string(type));
  TCPP_CHECK(N > 0 && K > 0 && ldw >= K, "QuantizedLinear: bad shape (", N, ", ", K, ") with leading dimension ", ldw);
  type_ = type;
  N_ = N;
  K_ = K;
  const Index pw = per_word(type);
  KW_ = (K + pw - 1) / pw;
  panels_ = (N + kPanel - 1) / kPanel;
  data_.assign(static_cast<size_t>(panels_ * KW_ * kPanel), 0u);
  bias_.assign(static_cast<size_t>(panels_ * kPanel), 0.0f);
  std::copy(b, b + N, bias_.begin());
  w_scale_.assign(static_cast<size_t>(panels_ * kPanel), 0.0f);
  offset_.assign(static_cast<size_t>(panels_ * kPanel), 0);
#pragma omp parallel for schedule(static) if (N * K >= (1 << 16))
  for (Index n = 0; n < N; ++n) {
    const float* w = W + n * ldw;
    const Index p = n / kPanel, j = n % kPanel;
    std::uint32_t* dst = data_.data() + p * KW_ * kPanel + j;  // word w at dst[w * kPanel]
    if (type == ComputeType::Int8) {
      float amax = 0.0f;
      for (Index k = 0; k < K; ++k) amax = std::max(amax, std::abs(w[k]));
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      w_scale_[static_cast<size_t>(n)] = amax / 127.0f;
      std::int32_t sum = 0;
      for (Index k = 0; k < K; ++k) {
        const int q = quantize(w[k], inv);
        sum += q;
        dst[(k / 4) * kPanel] |= static_cast<std::uint32_t>(static_cast<std::uint8_t>(static_cast<std::int8_t>(q)))
                                 << (8 * (k % 4));
      }
      offset_[static_cast<size_t>(n)] = -128 * sum;
    } else {
      for (Index k = 0; k < K; ++k) dst[(k / 2) * kPanel] |= bf16_bits(w[k]) << (16 * (k % 2));
    }
  }
}

float QuantizedLinear::weight(Index n, Index k) const {
  TCPP_CHECK(n >= 0 && n < N_ && k >= 0 && k < K_, "QuantizedLinear::weight: index out of range");
  const Index pw = per_word(type_);
  const std::uint32_t word = data_[static_cast<size_t>(((n / kPanel) * KW_ + k / pw) * kPanel + n % kPanel)];
  if (type_ == ComputeType::Int8) {
    const auto q = static_cast<std::int8_t>(static_cast<std::uint8_t>(word >> (8 * (k % 4))));
    return static_cast<float>(q) * w_scale_[static_cast<size_t>(n)];
  }
  return bf16_value((word >> (16 * (k % 2))) & 0xFFFFu);
}

#if TCPP_LOWP_KERNEL
namespace {
// quantize_rows' int8 rounding of one row, 16 values at a time (the same operations: the
// maximum |x|, x * (127 / max) rounded to nearest even, clamped, + 128); false when the row holds
// NaN or inf (the caller's plain loop handles it).
TCPP_INT8_TARGET bool quantize_row_int8(const float* x, Index K, std::uint8_t* bytes, float* scale) {
  __m512 vmax = _mm512_setzero_ps();
  __mmask16 unordered = 0;
  Index k = 0;
  for (; k + 16 <= K; k += 16) {
    const __m512 v = _mm512_loadu_ps(x + k);
    vmax = _mm512_max_ps(vmax, _mm512_abs_ps(v));
    unordered |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  }
  float amax = _mm512_reduce_max_ps(vmax);
  bool nan = unordered != 0;
  for (Index i = k; i < K; ++i) {
    amax = std::max(amax, std::abs(x[i]));
    nan |= x[i] != x[i];
  }
  if (nan || !std::isfinite(amax)) return false;
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  const __m512 vinv = _mm512_set1_ps(inv), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  const __m512i offset = _mm512_set1_epi32(128);
  for (k = 0; k + 16 <= K; k += 16) {
    __m512 q = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(x + k), vinv),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm512_min_ps(_mm512_max_ps(q, lo), hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(bytes + k),
                     _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(q), offset)));
  }
  for (; k < K; ++k) bytes[k] = static_cast<std::uint8_t>(quantize(x[k], inv) + 128);
  *scale = amax / 127.0f;
  return true;
}
}  // namespace
#endif

void QuantizedLinear::quantize_rows(const float* x, Index R, Index ldx, bool vectorised) const {
  xw_.resize(static_cast<size_t>(R * KW_));
  xs_.resize(static_cast<size_t>(R));
  for (Index r = 0; r < R; ++r) {
    const float* xr = x + r * ldx;
    std::uint32_t* dst = xw_.data() + r * KW_;
#if TCPP_LOWP_KERNEL
    if (vectorised && type_ == ComputeType::Int8) {
      auto* bytes = reinterpret_cast<std::uint8_t*>(dst);
      float* scale = &xs_[static_cast<size_t>(r)];
      if (int8_kernel_avx512() ? quantize_row_int8(xr, K_, bytes, scale)
                               : avx2::quantize_row_int8(xr, K_, bytes, scale)) {
        for (Index k = K_; k < 4 * KW_; ++k) bytes[k] = 128;
        continue;
      }
    }
#else
    (void)vectorised;
#endif
    if (type_ == ComputeType::Int8) {
      // bytes xq + 128 in natural order: word w holds k = 4w .. 4w+3, the padding 128 (xq = 0)
      auto* bytes = reinterpret_cast<std::uint8_t*>(dst);
      float amax = 0.0f;
      bool nan = false;  // std::max passes NaN by: look for it separately
      for (Index k = 0; k < K_; ++k) {
        amax = std::max(amax, std::abs(xr[k]));
        nan |= xr[k] != xr[k];
      }
      if (nan || !std::isfinite(amax)) {  // NaN or inf in: the result is NaN, which decoding reports
        std::fill(bytes, bytes + 4 * KW_, std::uint8_t(128));
        xs_[static_cast<size_t>(r)] = std::numeric_limits<float>::quiet_NaN();
        continue;
      }
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      for (Index k = 0; k < K_; ++k) bytes[k] = static_cast<std::uint8_t>(quantize(xr[k], inv) + 128);
      for (Index k = K_; k < 4 * KW_; ++k) bytes[k] = 128;
      xs_[static_cast<size_t>(r)] = amax / 127.0f;
    } else {
      auto* halves = reinterpret_cast<std::uint16_t*>(dst);
      for (Index k = 0; k < K_; ++k) halves[k] = static_cast<std::uint16_t>(bf16_bits(xr[k]));
      for (Index k = K_; k < 2 * KW_; ++k) halves[k] = 0;
    }
  }
}

void QuantizedLinear::apply_reference(const float* x, Index R, Index ldx, float* y, Index ldy) const {
  quantize_rows(x, R, ldx, /*vectorised=*/false);
  for (Index r = 0; r < R; ++r) {
    const std::uint32_t* xr = xw_.data() + r * KW_;
    for (Index n = 0; n < N_; ++n) {
      const std::uint32_t* w = data_.data() + (n / kPanel) * KW_ * kPanel + n % kPanel;
      if (type_ == ComputeType::Int8) {
        std::int64_t acc = 0;
        for (Index k = 0; k < K_; ++k) {
          const int xq = static_cast<int>((xr[k / 4] >> (8 * (k % 4))) & 0xFFu) - 128;
          // the byte is an int8 weight: sign extension is the point
          const int wq = static_cast<std::int8_t>(  // NOLINT(bugprone-signed-char-misuse)
              static_cast<std::uint8_t>(w[(k / 4) * kPanel] >> (8 * (k % 4))));
          acc += xq * wq;
        }
        y[r * ldy + n] = static_cast<float>(static_cast<double>(acc) * w_scale_[static_cast<size_t>(n)] *
                                                xs_[static_cast<size_t>(r)] +
                                            bias_[static_cast<size_t>(n)]);
      } else {
        double acc = 0;
        for (Index k = 0; k < K_; ++k)
          acc += static_cast<double>(bf16_value((xr[k / 2] >> (16 * (k % 2))) & 0xFFFFu)) *
                 bf16_value((w[(k / 2) * kPanel] >> (16 * (k % 2))) & 0xFFFFu);
        y[r * ldy + n] = static_cast<float>(acc + bias_[static_cast<size_t>(n)]);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The kernels

#if TCPP_LOWP_KERNEL
namespace {

// Rows 0..MR of one panel over wc words: MR x 32 int32 sums in registers, started from the
// offset (-128 sum Wq, first word block) or from the partial sums kept in y (as int32 bits); after
// the last block they are scaled and the bias added. nb < 32 valid outputs are read and written
// with a mask. `ahead`: the next block of the panel, prefetched in step.
template <int MR>
TCPP_INT8_TARGET void int8_rows(const std::uint32_t* x, Index ldx, const std::uint32_t* P, Index wc,
                                const std::int32_t* offset, bool first, bool last, float* y, Index ldy, Index nb,
                                const float* xs, const float* ws, const float* bias, const std::uint32_t* ahead) {
  const __mmask16 m0 = static_cast<__mmask16>(nb >= 16 ? 0xFFFF : (1u << nb) - 1);
  const __mmask16 m1 = static_cast<__mmask16>(nb >= 32 ? 0xFFFF : nb <= 16 ? 0 : (1u << (nb - 16)) - 1);
  __m512i acc[MR][2];
  if (first) {
    const __m512i o0 = _mm512_loadu_si512(offset), o1 = _mm512_loadu_si512(offset + 16);
    for (int i = 0; i < MR; ++i) {
      acc[i][0] = o0;
      acc[i][1] = o1;
    }
  } else {
    for (int i = 0; i < MR; ++i) {
      acc[i][0] = _mm512_maskz_loadu_epi32(m0, y + i * ldy);
      acc[i][1] = _mm512_maskz_loadu_epi32(m1, y + i * ldy + 16);
    }
  }
  for (Index w = 0; w < wc; ++w) {
    if (ahead != nullptr) {
      _mm_prefetch(reinterpret_cast<const char*>(ahead + w * 32), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(ahead + w * 32 + 16), _MM_HINT_T0);
    }
    const __m512i w0 = _mm512_loadu_si512(P + w * 32), w1 = _mm512_loadu_si512(P + w * 32 + 16);
    for (int i = 0; i < MR; ++i) {
      const __m512i xv = _mm512_set1_epi32(static_cast<int>(x[i * ldx + w]));
      acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], xv, w0);  // u8 (x) times s8 (W), 4 per lane
      acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], xv, w1);
    }
  }
  if (last) {
    const __m512 s0 = _mm512_loadu_ps(ws), s1 = _mm512_loadu_ps(ws + 16);
    const __m512 b0 = _mm512_loadu_ps(bias), b1 = _mm512_loadu_ps(bias + 16);
    for (int i = 0; i < MR; ++i) {
      const __m512 xsv = _mm512_set1_ps(xs[i]);
      _mm512_mask_storeu_ps(y + i * ldy, m0,
                            _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc[i][0]), s0), xsv, b0));
      _mm512_mask_storeu_ps(y + i * ldy + 16, m1,
                            _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc[i][1]), s1), xsv, b1));
    }
  } else {
    for (int i = 0; i < MR; ++i) {
      _mm512_mask_storeu_epi32(y + i * ldy, m0, acc[i][0]);
      _mm512_mask_storeu_epi32(y + i * ldy + 16, m1, acc[i][1]);
    }
  }
}

// The same for bfloat16 pairs: float sums started from the bias or the partial sums in y.
template <int MR>
TCPP_BF16_TARGET void bf16_rows(const std::uint32_t* x, Index ldx, const std::uint32_t* P, Index wc,
                                const std::int32_t* /*offset*/, bool first, bool /*last*/, float* y, Index ldy,
                                Index nb, const float* /*xs*/, const float* /*ws*/, const float* bias,
                                const std::uint32_t* ahead) {
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
  for (Index w = 0; w < wc; ++w) {
    if (ahead != nullptr) {
      _mm_prefetch(reinterpret_cast<const char*>(ahead + w * 32), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(ahead + w * 32 + 16), _MM_HINT_T0);
    }
    const __m512bh w0 = (__m512bh)_mm512_loadu_si512(P + w * 32), w1 = (__m512bh)_mm512_loadu_si512(P + w * 32 + 16);
    for (int i = 0; i < MR; ++i) {
      const __m512bh xv = (__m512bh)_mm512_set1_epi32(static_cast<int>(x[i * ldx + w]));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], xv, w0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], xv, w1);
    }
  }
  for (int i = 0; i < MR; ++i) {
    _mm512_mask_storeu_ps(y + i * ldy, m0, acc[i][0]);
    _mm512_mask_storeu_ps(y + i * ldy + 16, m1, acc[i][1]);
  }
}

using RowsFn = void (*)(const std::uint32_t*, Index, const std::uint32_t*, Index, const std::int32_t*, bool, bool,
                        float*, Index, Index, const float*, const float*, const float*, const std::uint32_t*);
constexpr RowsFn kInt8Rows[] = {nullptr,       int8_rows<1>,  int8_rows<2>, int8_rows<3>, int8_rows<4>,
                                int8_rows<5>,  int8_rows<6>,  int8_rows<7>, int8_rows<8>, int8_rows<9>,
                                int8_rows<10>, int8_rows<11>, int8_rows<12>};
constexpr RowsFn kBf16Rows[] = {nullptr,       bf16_rows<1>,  bf16_rows<2>, bf16_rows<3>, bf16_rows<4>,
                                bf16_rows<5>,  bf16_rows<6>,  bf16_rows<7>, bf16_rows<8>, bf16_rows<9>,
                                bf16_rows<10>, bf16_rows<11>, bf16_rows<12>};

}  // namespace
#endif

#if TCPP_AMX_DECODE
namespace {
// Rows r0 .. r0 + rb - 1 (rb <= 32) of one panel over all KW words (a multiple of 16) on the AMX
// tiles: the sums of the first 16 rows in tmm0 (columns 0-15) and tmm1 (16-31), of the next 16 in
// tmm2-3; per 16 words an A tile of 16 rows (tmm4, tmm5: 64 int8 or 32 bf16 values of each row, the
// rows KW words apart, as quantize_rows lays them) and the panel's two 16-column halves as B tiles
// (tmm6, tmm7: a panel's lines of 32 words are 128 bytes apart). The rows past R that a tile reads
// are padding rows of xw. The sums leave through a 32 x 32 buffer and are finished as the AVX-512
// kernels finish theirs: int8 + offset (exact in int32, so the result is the VNNI kernel's to the
// bit), times the two scales, + bias; bf16 + bias.
template <bool Int8>
TCPP_AMX_DECODE_TARGET void amx_rows(const std::uint32_t* x, Index KW, const std::uint32_t* P, Index rb, Index nb,
                                     const std::int32_t* offset, const float* xs, const float* ws, const float* bias,
                                     float* y, Index ldy) {
  const bool two = rb > 16;
  _tile_zero(0);
  _tile_zero(1);
  if (two) {
    _tile_zero(2);
    _tile_zero(3);
  }
  const long x_stride = static_cast<long>(KW * sizeof(std::uint32_t));
  const std::uint32_t* x_low = x + 16 * KW;
  for (Index w0 = 0; w0 < KW; w0 += 16) {
    _tile_loadd(4, x + w0, x_stride);
    _tile_loadd(6, P + w0 * 32, 128);
    _tile_loadd(7, P + w0 * 32 + 16, 128);
    if constexpr (Int8) {
      _tile_dpbusd(0, 4, 6);  // u8 (x) times s8 (W), 4 per 32-bit word
      _tile_dpbusd(1, 4, 7);
    } else {
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
    }
    if (two) {
      _tile_loadd(5, x_low + w0, x_stride);
      if constexpr (Int8) {
        _tile_dpbusd(2, 5, 6);
        _tile_dpbusd(3, 5, 7);
      } else {
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
    }
  }
  alignas(64) std::uint32_t buf[32 * 32];  // int32 or float32 sums, 128 bytes a row
  _tile_stored(0, buf, 128);
  _tile_stored(1, buf + 16, 128);
  if (two) {
    _tile_stored(2, buf + 16 * 32, 128);
    _tile_stored(3, buf + 16 * 32 + 16, 128);
  }
  const __mmask16 m0 = static_cast<__mmask16>(nb >= 16 ? 0xFFFF : (1u << nb) - 1);
  const __mmask16 m1 = static_cast<__mmask16>(nb >= 32 ? 0xFFFF : nb <= 16 ? 0 : (1u << (nb - 16)) - 1);
  const __m512 b0 = _mm512_loadu_ps(bias), b1 = _mm512_loadu_ps(bias + 16);
  for (Index i = 0; i < rb; ++i) {
    const std::uint32_t* row = buf + i * 32;
    __m512 v0, v1;
    if constexpr (Int8) {
      const __m512i a0 = _mm512_add_epi32(_mm512_load_si512(row), _mm512_loadu_si512(offset));
      const __m512i a1 = _mm512_add_epi32(_mm512_load_si512(row + 16), _mm512_loadu_si512(offset + 16));
      const __m512 xsv = _mm512_set1_ps(xs[i]);
      v0 = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(a0), _mm512_loadu_ps(ws)), xsv, b0);
      v1 = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(a1), _mm512_loadu_ps(ws + 16)), xsv, b1);
    } else {
      v0 = _mm512_add_ps(_mm512_castsi512_ps(_mm512_load_si512(row)), b0);
      v1 = _mm512_add_ps(_mm512_castsi512_ps(_mm512_load_si512(row + 16)), b1);
    }
    _mm512_mask_storeu_ps(y + i * ldy, m0, v0);
    _mm512_mask_storeu_ps(y + i * ldy + 16, m1, v1);
  }
}
}  // namespace

void QuantizedLinear::apply_amx(Index R, float* y, Index ldy) const {
  xw_.resize(static_cast<size_t>((R + 31) / 32 * 32 * KW_));  // whole tiles: padding rows past R
  const auto rows = type_ == ComputeType::Int8 ? amx_rows<true> : amx_rows<false>;
  const std::uint32_t* xw = xw_.data();
  const float* xs = xs_.data();
#pragma omp parallel if (panels_ > 1 && panels_ * K_ * R >= (1 << 15))
  {
    amx::configure();
#pragma omp for schedule(static)
    for (Index p = 0; p < panels_; ++p) {
      const Index n0 = p * kPanel, nb = std::min(kPanel, N_ - n0);
      const std::uint32_t* P = data_.data() + p * KW_ * kPanel;
      for (Index r0 = 0; r0 < R; r0 += 32)
        rows(xw + r0 * KW_, KW_, P, std::min<Index>(32, R - r0), nb, offset_.data() + n0, xs + r0, w_scale_.data() + n0,
             bias_.data() + n0, y + r0 * ldy + n0, ldy);
    }
    amx::release();
  }
}
#else
void QuantizedLinear::apply_amx(Index, float*, Index) const {
  throw std::logic_error("QuantizedLinear: this build has no AMX kernel");
}
#endif

void QuantizedLinear::apply(const float* x, Index R, Index ldx, float* y, Index ldy) const {
  TCPP_CHECK(compute_type_supported(type_), "QuantizedLinear: compute_type '", to_string(type_),
             "' is not available: ", compute_type_unsupported_reason(type_));
  if (R <= 0) return;
  quantize_rows(x, R, ldx, /*vectorised=*/true);
  if (type_ == ComputeType::Int8 && neon::int8_supported()) {
    neon::int8_linear(data_.data(), w_scale_.data(), bias_.data(), N_, KW_, xw_.data(), xs_.data(), R, y, ldy);
    return;
  }
#if TCPP_LOWP_KERNEL
  static_assert(kPanel == 32 && kRowBlock == 12, "the kernels are written for 32-wide panels, 12 rows");
  if (type_ == ComputeType::Int8 && !int8_kernel_avx512()) {
    const auto product = cpu_has_avx_vnni() ? avx2::int8_linear_vnni : avx2::int8_linear;
    product(data_.data(), offset_.data(), w_scale_.data(), bias_.data(), N_, KW_, kWordBlock, xw_.data(), xs_.data(), R,
            y, ldy);
    return;
  }
  if (R >= tuning::kAmxDecodeRows && KW_ % 16 == 0 && amx_decoding(type_)) return apply_amx(R, y, ldy);
  const RowsFn* rows = type_ == ComputeType::Int8 ? kInt8Rows : kBf16Rows;
  const Index row_step = type_ == ComputeType::Int8 ? tuning::kVnniDecodeRows : kRowBlock;
  const std::uint32_t* xw = xw_.data();
  const float* xs = xs_.data();
#pragma omp parallel for schedule(static) if (panels_ * K_ * R >= (1 << 15))
  for (Index p = 0; p < panels_; ++p) {
    const Index n0 = p * kPanel, nb = std::min(kPanel, N_ - n0);
    const std::uint32_t* P = data_.data() + p * KW_ * kPanel;
    const std::uint32_t* end = data_.data() + data_.size();
    for (Index w0 = 0; w0 < KW_; w0 += kWordBlock) {
      const Index wc = std::min(kWordBlock, KW_ - w0);
      const std::uint32_t* next = P + (w0 + wc) * kPanel;
      const std::uint32_t* ahead = next + wc * kPanel <= end ? next : nullptr;
      for (Index r0 = 0; r0 < R; r0 += row_step) {
        const Index rb = std::min(row_step, R - r0);
        rows[rb](xw + r0 * KW_ + w0, KW_, P + w0 * kPanel, wc, offset_.data() + n0, w0 == 0, w0 + wc >= KW_,
                 y + r0 * ldy + n0, ldy, nb, xs + r0, w_scale_.data() + n0, bias_.data() + n0,
                 r0 == 0 ? ahead : nullptr);
      }
    }
  }
#else
  (void)y, (void)ldy;
#endif
}

}  // namespace transformer

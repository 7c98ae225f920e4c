#include "transformer/kernels/neon.hpp"

#include <algorithm>
#include <stdexcept>

#include "transformer/kernels/isa.hpp"

#if defined(__aarch64__) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 10))
#define TCPP_NEON_DOT 1
#include <arm_neon.h>
#if defined(__clang__)
#define TCPP_DOT_TARGET __attribute__((target("dotprod")))
#else
#define TCPP_DOT_TARGET __attribute__((target("arch=armv8.2-a+dotprod")))
#endif
#else
#define TCPP_NEON_DOT 0
#endif

namespace transformer::neon {

bool int8_supported() {
#if TCPP_NEON_DOT
  return cpu_has_arm_dotprod() && isa_allows(Isa::Neon);
#else
  return false;
#endif
}

#if TCPP_NEON_DOT
namespace {

constexpr Index kPanel = 32;  // QuantizedLinear::kPanel

// Rows r0 .. r0 + MR of panel p: 32 outputs, MR x 8 accumulators of 4 int32 lanes.
template <int MR>
TCPP_DOT_TARGET void panel_rows(const std::uint32_t* P, Index KW, const std::uint32_t* x, Index ldx, const float* ws,
                                const float* bias, const float* xs, Index nb, float* y, Index ldy) {
  int32x4_t acc[MR][8];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < 8; ++v) acc[i][v] = vdupq_n_s32(0);
  const uint8x16_t flip = vdupq_n_u8(0x80);
  Index w = 0;
  for (; w + 4 <= KW; w += 4) {
    int8x16_t a[MR];
    for (int i = 0; i < MR; ++i)
      a[i] = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(reinterpret_cast<const std::uint8_t*>(x + i * ldx + w)), flip));
    const auto* words = reinterpret_cast<const std::int8_t*>(P + w * kPanel);
    for (int v = 0; v < 8; ++v) {
      const int8x16_t b0 = vld1q_s8(words + 16 * v), b1 = vld1q_s8(words + 128 + 16 * v);
      const int8x16_t b2 = vld1q_s8(words + 256 + 16 * v), b3 = vld1q_s8(words + 384 + 16 * v);
      for (int i = 0; i < MR; ++i) {
        acc[i][v] = vdotq_laneq_s32(acc[i][v], b0, a[i], 0);
        acc[i][v] = vdotq_laneq_s32(acc[i][v], b1, a[i], 1);
        acc[i][v] = vdotq_laneq_s32(acc[i][v], b2, a[i], 2);
        acc[i][v] = vdotq_laneq_s32(acc[i][v], b3, a[i], 3);
      }
    }
  }
  for (; w < KW; ++w) {  // the last 1-3 words
    const auto* words = reinterpret_cast<const std::int8_t*>(P + w * kPanel);
    for (int i = 0; i < MR; ++i) {
      const std::uint32_t word = x[i * ldx + w] ^ 0x80808080u;
      const int8x16_t a = vreinterpretq_s8_u32(vdupq_n_u32(word));
      for (int v = 0; v < 8; ++v) acc[i][v] = vdotq_laneq_s32(acc[i][v], vld1q_s8(words + 16 * v), a, 0);
    }
  }
  for (int i = 0; i < MR; ++i) {
    float out[kPanel];
    for (int v = 0; v < 8; ++v) {
      const float32x4_t scaled = vmulq_n_f32(vmulq_f32(vcvtq_f32_s32(acc[i][v]), vld1q_f32(ws + 4 * v)), xs[i]);
      vst1q_f32(out + 4 * v, vaddq_f32(scaled, vld1q_f32(bias + 4 * v)));
    }
    std::copy(out, out + nb, y + i * ldy);
  }
}

}  // namespace
#endif

void int8_linear(const std::uint32_t* data, const float* w_scale, const float* bias, Index N, Index KW,
                 const std::uint32_t* xw, const float* xs, Index R, float* y, Index ldy) {
  if (!int8_supported()) throw std::runtime_error("neon::int8_linear: this CPU (or build) has no ARM dot product");
#if TCPP_NEON_DOT
  const Index panels = (N + kPanel - 1) / kPanel;
#pragma omp parallel for schedule(static) if (panels * KW * R >= (1 << 13))
  for (Index p = 0; p < panels; ++p) {
    const Index n0 = p * kPanel, nb = std::min(kPanel, N - n0);
    const std::uint32_t* P = data + p * KW * kPanel;
    Index r = 0;
    for (; r + 2 <= R; r += 2)
      panel_rows<2>(P, KW, xw + r * KW, KW, w_scale + n0, bias + n0, xs + r, nb, y + r * ldy + n0, ldy);
    if (r < R) panel_rows<1>(P, KW, xw + r * KW, KW, w_scale + n0, bias + n0, xs + r, nb, y + r * ldy + n0, ldy);
  }
#else
  (void)data, (void)w_scale, (void)bias, (void)N, (void)KW, (void)xw, (void)xs, (void)R, (void)y, (void)ldy;
#endif
}

}  // namespace transformer::neon

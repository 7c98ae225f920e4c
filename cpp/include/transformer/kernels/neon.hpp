// neon.hpp — the int8 decoding product on 64-bit ARM with the ARMv8.2 dot product (`sdot`).
//
// QuantizedLinear (quantized_linear.hpp) packs W once as int8 words, 4 k values a word, in panels
// of 32 output features, and stores each input row as xq + 128 bytes. `sdot` multiplies signed by
// signed bytes and adds each group of 4 products into an int32 lane, so the row's bytes are turned
// back into xq (an exclusive or with 0x80) and the sums start from zero:
//
//     acc[r, n] = sum_k xq[r, k] Wq[n, k]                           exact in int32
//     y[r, n]   = acc[r, n] * w_scale[n] * x_scale[r] + b[n]        float32
//
// which is the x86 kernels' result, bit for bit in the sums. A tile is 2 rows x 32 features
// (16 accumulators of 4 lanes); for each group of 4 words (16 k values) the row's 16 bytes are
// loaded once and `vdotq_laneq_s32` takes word l of them against the 8 weight vectors of word l.
//
// The kernel is compiled with a function target attribute (+dotprod) and runs only when
// cpu_has_arm_dotprod() (isa.hpp); on other CPUs and architectures int8_supported() is false.
#pragma once

#include <cstdint>

#include "transformer/core/tensor.hpp"

namespace transformer::neon {

// Whether this build has the kernel (an AArch64 compiler that knows +dotprod), the CPU has the dot
// product and the instruction-set level is neon.
bool int8_supported();

// y (R, N), leading dimension ldy, = the int8 product of QuantizedLinear: `data` its packed words
// (KW words per panel column), `w_scale` and `bias` zero-filled to whole panels, `xw` (R, KW) the
// rows' words (xq + 128 bytes) and `xs` their scales. Throws std::runtime_error when
// int8_supported() is false.
void int8_linear(const std::uint32_t* data, const float* w_scale, const float* bias, Index N, Index KW,
                 const std::uint32_t* xw, const float* xs, Index R, float* y, Index ldy);

}  // namespace transformer::neon

// avx2.hpp — the AVX2 + FMA kernels of decoding (x86-64 CPUs without AVX-512: Intel's consumer
// cores since 2021, AMD before Zen 4).
//
// Each is compiled for AVX2 + FMA with function target attributes and called only when
// isa_allows(Isa::Avx2) (isa.hpp); the dispatching functions are those of decode_kernels.hpp,
// whose readable references the tests hold these against. The products are those of the AVX-512
// kernels in 8-lane vectors; what changes is the register tile, since AVX2 has 16 vector registers
// instead of 32:
//
// * few_rows_linear: tiles of 4 weight rows x 2 input rows (8 accumulators, 4 weight vectors and
//   one input vector live), each accumulator summed horizontally at the end.
// * packed_linear: PackedLinear<float>'s 32-wide panels are walked as two halves of 16 output
//   features; a tile is kRows rows x 16 features (12 accumulators, 2 weight vectors, 1 broadcast),
//   the 6 x 16 shape of AVX2 GEMM micro-kernels. The k blocks and the prefetch of the next block are
//   the AVX-512 kernel's.
// * int8_linear: QuantizedLinear's int8 product (quantized_linear.hpp: the same packed words, the
//   same rounded rows, the same exact int32 sums) without VNNI. `vpmaddubsw` multiplies unsigned
//   by signed bytes and adds pairs into int16 with saturation: fed x + 128 (up to 255) and W (up to
//   127 in magnitude) a pair reaches 64,770 and saturates. So it is fed |xq| (0..127) and
//   sign(xq) * Wq (-127..127): a pair is at most 2 * 127 * 127 = 32,258, exact in int16; `vpmaddwd`
//   by ones then adds pairs of pairs into int32. The rows arrive as xq + 128 (the VNNI kernels'
//   words) and are turned into signed bytes once per product (xor 0x80), so the loop needs no
//   offset register: tiles of kInt8Rows rows x 16 output features keep their 8 int32
//   accumulators, the 2 weight vectors and the temporaries in the 16 registers.
// * int8_linear_vnni: the same product with AVX-VNNI (`vpdpbusd` on 256-bit vectors, VEX-encoded):
//   x + 128 times W summed in int32 directly, from the -128 sum_k Wq offset, like the AVX512_VNNI
//   kernel. Only for CPUs with AVX-VNNI (isa.hpp, cpu_has_avx_vnni).
#pragma once

#include <cstdint>

#include "transformer/core/tensor.hpp"

namespace transformer::avx2 {

constexpr Index kRows = 6;      // rows of a packed-panel tile: 6 x 2 accumulators of the 16 registers
constexpr Index kInt8Rows = 4;  // rows of an int8 tile: 4 x 2 accumulators, the rest for the sign products

// y (R, N) = x (R, K) W^T + b, all row-major and contiguous, W (N, K), K % 8 == 0.
void few_rows_linear(const float* x, Index R, Index K, const float* W, Index N, const float* b, float* y);

// y (R, N), leading dimension ldy, = x (R, K), leading dimension ldx, W^T + b, with W and b packed
// as PackedLinear<float> packs them: `panels` (K, 32) panels in `data`, `bias` zero-filled to
// panels * 32 values; k blocks of kc_block values.
void packed_linear(const float* data, const float* bias, Index N, Index K, Index kc_block, const float* x, Index R,
                   Index ldx, float* y, Index ldy);

// QuantizedLinear's int8 rounding of one row (x * (127 / max |x|), nearest even, clamped to
// [-127, 127], + 128) into K bytes, and its scale max |x| / 127; false (nothing written) when the
// row holds NaN or inf.
bool quantize_row_int8(const float* x, Index K, std::uint8_t* bytes, float* scale);

// y (R, N), leading dimension ldy, = the int8 product of QuantizedLinear: `data` its packed words
// (KW words per panel column), `offset` its -128 sum_k Wq (used by the VNNI variant only),
// `w_scale` and `bias` zero-filled to whole panels, `xw` (R, KW) the rows' words (xq + 128 bytes)
// and `xs` their scales; word blocks of `word_block`.
void int8_linear(const std::uint32_t* data, const std::int32_t* offset, const float* w_scale, const float* bias,
                 Index N, Index KW, Index word_block, const std::uint32_t* xw, const float* xs, Index R, float* y,
                 Index ldy);
void int8_linear_vnni(const std::uint32_t* data, const std::int32_t* offset, const float* w_scale, const float* bias,
                      Index N, Index KW, Index word_block, const std::uint32_t* xw, const float* xs, Index R, float* y,
                      Index ldy);

// The index of the first largest of v[0..n) (n >= 1); NaNs are never chosen over a number.
Index first_argmax(const float* v, Index n);

}  // namespace transformer::avx2

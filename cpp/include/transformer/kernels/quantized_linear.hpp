// quantized_linear.hpp — y = x W^T + b for decoding with int8 or bfloat16 weights.
//
// The decoding kernels of decode_kernels.hpp read float32 weights; at a few rows per step the
// time goes into fetching them. QuantizedLinear keeps the weight in a smaller type, packed once
// (InferenceBackend, kernels/inference_backend.hpp, packs again only when the weights change), and multiplies
// with the CPU's low-precision dot products:
//
// * int8 (AVX512_VNNI `vpdpbusd`): every output feature n gets a symmetric scale
//   w_scale[n] = max_k |W[n, k]| / 127 and Wq[n, k] = round(W[n, k] / w_scale[n]) in [-127, 127].
//   Each input row is quantised when the product runs, the same way: x_scale[r] = max_k |x[r, k]|
//   / 127, xq[r, k] = round(x[r, k] * (127 / max |x[r, .]|)) (ties to even). `vpdpbusd` multiplies
//   unsigned by signed bytes, so the kernel feeds xq + 128 (0..254) and subtracts the precomputed
//   128 * sum_k Wq[n, k]:
//       acc[r, n] = sum_k (xq[r, k] + 128) Wq[n, k] - 128 sum_k Wq[n, k] = sum_k xq[r, k] Wq[n, k]
//   exactly, in int32 (|acc| <= 127 * 127 * K: no overflow below K = 133,000). Then
//       y[r, n] = acc[r, n] * w_scale[n] * x_scale[r] + b[n]            (float32)
//   An all-zero row or weight row gets scale 0 and contributes exactly 0.
//
// * bf16 (AVX512_BF16 `vdpbf16ps`): W and each input row rounded to bfloat16 (ties to even),
//   products summed in float32, then + b.
//
// Packed layout: panels of kPanel = 32 output features; K is cut into words of kPerWord k values
// (4 int8 or 2 bf16; K padded with zeros to a whole number of words, KW words):
//     word (p*KW + w)*32 + j holds W[p*32 + j, w*kPerWord .. (w+1)*kPerWord - 1]
// (features past N zero). The kernel walks a panel word by word like PackedLinear: it loads the 32
// words of one w (two vectors), broadcasts the row's word w for up to kRowBlock rows, and keeps
// kRowBlock x 32 int32 (float) sums in registers. Panels are split among the threads. Everything
// else in decoding (layer norm, softmax, attention scores, residuals) stays float32.
//
// On CPUs with AMX (amx.hpp), products of tuning::kAmxDecodeRows rows or more (beam search, large
// batches) run on the tiles: the same packed panel is two B tiles side by side (its 32-word lines
// are 128 bytes apart), the quantised rows are A tiles, `tdpbusd` / `tdpbf16ps` sum 16 words of
// 16 rows into 16 x 16 tiles, and the sums are finished as above (int8: the same integers, so the
// same result to the bit).
//
// The kernels are compiled with function target attributes and chosen at run time by CPUID, so the
// extension loads on any x86-64 CPU; check_compute_type says what is missing on one that lacks them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "transformer/core/tensor.hpp"

namespace transformer {

enum class ComputeType {
  Float32,   // the packed float32 kernels of decode_kernels.hpp (or Eigen)
  Int8,      // int8 weights per output channel, int8 activations per row, AVX512_VNNI
  BFloat16,  // bfloat16 weights and activations, float32 sums, AVX512_BF16
};

// "float32" | "int8" | "bf16" (std::invalid_argument naming all three otherwise).
ComputeType parse_compute_type(const std::string& name);
std::string to_string(ComputeType c);

// The environment variable that, set to a non-empty value other than "0", makes int8 decoding
// unsupported on any CPU (to test the error, and to compare the compute types on one CPU). bf16 decoding
// follows the bf16 kernel's own switch (bf16_gemm.hpp, TRANSFORMER_CPP_DISABLE_BF16).
constexpr const char* kDisableInt8Env = "TRANSFORMER_CPP_DISABLE_INT8";

// Whether this CPU and build can run the kernel of compute type c (float32: always), and why not.
bool compute_type_supported(ComputeType c);
std::string compute_type_unsupported_reason(ComputeType c);
// Whether the AMX tiles (amx.hpp) compute the products of compute type c (int8 or bf16) of
// tuning::kAmxDecodeRows rows or more whose K is a whole number of 64-byte tile rows (K a multiple
// of 64 for int8, 32 for bf16): the CPU's AMX-INT8 or AMX-BF16, the kernels of the AVX-512 level,
// and no TRANSFORMER_CPP_DISABLE_AMX. Fewer rows run on the AVX-512 kernel, which reads each weight
// once for up to 12 rows.
bool amx_decoding(ComputeType c);
// The kernel that runs compute type c (int8 or bf16) here ("avx512_vnni", ...), or "unavailable".
std::string compute_type_kernel(ComputeType c);

// Throws std::invalid_argument "<who>: compute_type 'int8' ..." when c cannot run with scalar type T
// on this CPU; says what to use instead.
template <typename T>
void check_compute_type(ComputeType c, const char* who);

class QuantizedLinear {
 public:
  static constexpr Index kPanel = 32;                               // output features per panel (two 16-lane vectors)
  static constexpr Index kRowBlock = 12;                            // rows sharing one pass over a panel
  static constexpr Index kWordBlock = tuning::kQuantizedWordBlock;  // words of a panel kept in L1

  // Quantise and pack W (N, K), leading dimension ldw >= K, and the bias b (N). type is Int8 or
  // BFloat16. Repacking reuses the memory.
  void pack(ComputeType type, const float* W, Index N, Index K, Index ldw, const float* b);

  // y (R, N), leading dimension ldy, = x (R, K), leading dimension ldx, W^T + b with the
  // low-precision kernel (requires compute_type_supported(type())).
  void apply(const float* x, Index R, Index ldx, float* y, Index ldy) const;
  // The same result computed plainly: the rows quantised (rounded) as above, the products summed
  // exactly (int64, or double for bf16), the scales and bias applied in double. For tests.
  void apply_reference(const float* x, Index R, Index ldx, float* y, Index ldy) const;

  ComputeType type() const { return type_; }
  Index out_features() const { return N_; }
  Index in_features() const { return K_; }
  // The dequantised weight W'[n, k] the kernel multiplies with (int8: Wq * w_scale; bf16: the
  // rounded value), for tests.
  float weight(Index n, Index k) const;

 private:
  // x rows as the kernel's words (KW per row, the padding words zero: int8 128 128 128 128 (an
  // offset zero), bf16 0) into xw_, and the int8 row scales into xs_. `vectorised`: the int8
  // rounding by AVX-512 (the same operations; apply), else the plain loop (apply_reference).
  void quantize_rows(const float* x, Index R, Index ldx, bool vectorised) const;
  // apply's product on the AMX tiles, from the quantised rows in xw_ (amx_decoding(type_), KW_ a
  // multiple of 16)
  void apply_amx(Index R, float* y, Index ldy) const;

  ComputeType type_ = ComputeType::Int8;
  Index N_ = 0, K_ = 0, KW_ = 0, panels_ = 0;
  std::vector<std::uint32_t> data_;        // panels_ * KW_ * kPanel packed words
  std::vector<float> bias_;                // panels_ * kPanel (zero-filled)
  std::vector<float> w_scale_;             // int8: panels_ * kPanel
  std::vector<std::int32_t> offset_;       // int8: -128 * sum_k Wq[n, k], the accumulators' start
  mutable std::vector<std::uint32_t> xw_;  // (R, KW_) scratch of apply
  mutable std::vector<float> xs_;          // (R) int8 row scales
};

}  // namespace transformer

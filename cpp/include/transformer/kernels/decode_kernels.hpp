// decode_kernels.hpp — y = x W^T + b for the few rows of a decoding step.
//
// A decoding step multiplies a handful of rows (one per live hypothesis) by every weight of the
// decoder and by the (V, d) output projection. A general GEMM re-packs the weight for every such
// product, and for a few rows that packing costs as much as the product itself. Two kernels
// avoid it (float; AVX-512 here, AVX2 + FMA in avx2.cpp, chosen at run time by the instruction-set
// level of isa.hpp; at the generic level the dense layers' GEMM, see InferenceBackend in
// kernels/inference_backend.hpp):
//
// * few_rows_linear reads W (N, K) as it is: tiles of 4 weight rows x 4 input rows, 16-lane
//   partial dot products, summed horizontally at the end. No set-up; best below ~4 rows.
//
// * PackedLinear packs the weight once (decoding keeps the packed copy with the model and packs
//   again only when the weights change, see InferenceBackend) into panels of kPanel output features,
//
//     panel p holds W[p*kPanel + j, k] at data[(p*K + k)*kPanel + j]   (K, kPanel) row-major,
//
//   zero-filled past N. The kernel walks a panel k by k: it loads the kPanel weights of one k
//   once, broadcasts x[r, k] for up to kRowBlock rows, and keeps kRowBlock x kPanel accumulators
//   in registers, so every weight fetched serves kRowBlock rows and no horizontal sums are needed.
//   K is walked in blocks of kKBlock: a block of the panel stays in L1 while every row block uses
//   it, and the next block is prefetched. Panels are split among the threads. From a few rows on,
//   a weight fetched once serving many rows makes it the faster of the two.
#pragma once

#include <cstddef>
#include <cstdint>

#include "transformer/core/tensor.hpp"

namespace transformer {

// True when the float kernels may run: an x86-64 build at instruction-set level avx2 or avx512
// (isa.hpp). Without them the decoder uses the dense layers' GEMM for every product.
bool have_decode_kernels();

// Which kernels run: "avx512", "avx2" or "reference" (PackedLinear's plain loop, no few-row kernel).
const char* decode_kernels_isa();

// y (R, N) = x (R, K) W^T + b, all row-major and contiguous, W (N, K). Requires
// have_decode_kernels() and K % 16 == 0.
void few_rows_linear(const float* x, Index R, Index K, const float* W, Index N, const float* b, float* y);

// A 64-bit fingerprint of `bytes` bytes, seeded: 64 independent lanes each fold in every 64th
// 8-byte word as lane = (lane ^ word) * odd constant (a bijection of the lane for any word, so a
// change confined to one lane always changes the result), then the lanes, the length and the seed
// are mixed together. For telling whether weights changed since they were packed; not a
// cryptographic hash.
std::uint64_t fingerprint(const void* data, std::size_t bytes, std::uint64_t seed);

// The index of the first largest of v[0..n) (n >= 1); NaNs are never chosen over a number.
// Vectorised for float at the avx2 and avx512 levels.
template <typename T>
Index first_argmax(const T* v, Index n);

template <typename T>
class PackedLinear {
 public:
  static constexpr Index kPanel = 32;                      // output features per panel (two 16-float vectors)
  static constexpr Index kRowBlock = 12;                   // rows sharing one pass over a panel
  static constexpr Index kKBlock = tuning::kPackedKBlock;  // k values of a panel kept in L1

  // Pack W (N, K), leading dimension ldw >= K, and the bias b (N). Repacking reuses the memory.
  void pack(const T* W, Index N, Index K, Index ldw, const T* b);

  // y (R, N), leading dimension ldy, = x (R, K), leading dimension ldx, W^T + b. For float the
  // AVX-512 or AVX2 kernel by the instruction-set level, else the plain loop of apply_reference.
  void apply(const T* x, Index R, Index ldx, T* y, Index ldy) const;
  // The same product as three plain loops over the packed layout (the readable reference).
  void apply_reference(const T* x, Index R, Index ldx, T* y, Index ldy) const;

  Index out_features() const { return N_; }
  Index in_features() const { return K_; }

 private:
  Index N_ = 0, K_ = 0, panels_ = 0;
  RowVector<T> data_;  // panels_ * K_ * kPanel, aligned for full-vector loads
  RowVector<T> bias_;  // panels_ * kPanel (zero-filled)
};

extern template class PackedLinear<float>;
extern template class PackedLinear<double>;

}  // namespace transformer

// block_product.hpp — the small products inside the blocked attention kernels:
//
//   C (M, N) = [C +] op(A) (M, K) B (K, N)
//
// with op(A)[i, k] = A[i * lda + k], or with trans_a A[k * lda + i]; B and C row-major with leading
// dimensions ldb and ldc. Tiled softmax attention (a 64-query block against a 128-key block) and
// LSH attention (a chunk against its window) call it on blocks that are already in cache, with M, N
// and K between 1 and a few hundred. A general GEMM first packs both operands into panels; at
// these sizes packing costs about a third of the multiply-adds, so for float32 at the avx2 level
// (isa.hpp) a register-tiled loop reads A and B where they are: tiles of 6 rows x 16 columns of C
// in 12 YMM accumulators, per k two loads of a row of B and 6 broadcasts of A. The columns past the
// last multiple of 16 use masked loads and stores. Everything else (float64, other levels) is
// Eigen's product.
//
// A product with a transposed right side (S = Q K^T) takes a transposed copy of that side: the
// attention kernels keep K^T and V^T per head.
#pragma once

#include "transformer/core/tensor.hpp"

namespace transformer {

template <typename T>
void block_product(Index M, Index N, Index K, const T* A, Index lda, bool trans_a, const T* B, Index ldb,
                   bool accumulate, T* C, Index ldc);

// The same product as three plain loops, summed in double: the reference the tests hold
// block_product against.
template <typename T>
void block_product_reference(Index M, Index N, Index K, const T* A, Index lda, bool trans_a, const T* B, Index ldb,
                             bool accumulate, T* C, Index ldc);

// Which loop block_product<float> runs at the process's level: "avx2" or "eigen".
const char* block_product_kernel();

// dst (cols, rows) = src (rows, cols)^T, src row i at src + i * src_stride, dst row-major with
// leading dimension dst_stride: the transposed copies of K and V.
template <typename T>
void transpose_block(Index rows, Index cols, const T* src, Index src_stride, T* dst, Index dst_stride);

}  // namespace transformer

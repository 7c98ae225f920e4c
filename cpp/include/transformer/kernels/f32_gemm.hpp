// f32_gemm.hpp — float32 matrix products with AVX-512 and AVX2 + FMA micro-kernels (the dense
// layers' products in float32 precision; Eigen's GEMM remains the fallback and the float64 path).
//
//   C (M, N) = beta * C + op(A) (M, K) op(B) (K, N) [+ bias]     beta 0 or 1, all row-major float32
//
// op(A)[i, k] is A[i*lda + k], or with trans_a A[k*lda + i]; op(B)[k, j] is B[k*ldb + j], or with
// trans_b B[j*ldb + k]. `bias` (N values, may be nullptr) is added to every row of the result:
// C[i, j] = beta C[i, j] + sum_k op(A)[i, k] op(B)[k, j] + bias[j]. The three products of a Linear
// layer y = x W^T + b (W (out, in)) are
//   forward   y  = x W^T + b gemm(N, out, in, x, in, false, W, in, true, 0, y, out, b)
//   dx        dx = dy W      gemm(N, in, out, dy, out, false, W, in, false, 0, dx, in)
//   dW        dW += dy^T x   gemm(out, in, N, dy, out, true, x, in, false, 1, dW, in)
//
// The layout is bf16_gemm's (the BLIS/GotoBLAS scheme) with float32 panels:
//   * K is walked in blocks of nearly equal size, at most kKC values of k each (K = 600: two of
//     300). For each block op(A) is packed into panels of kMR rows and op(B) into panels of kNR
//     columns:
//        A panel ip: float (ip*KC + k)*kMR + i = op(A)[ip*kMR + i, k0 + k]
//        B panel jp: float (jp*KC + k)*kNR + j = op(B)[k0 + k, jp*kNR + j]
//     (rows and columns past M and N are zero).
//   * The micro-kernel keeps a kMR x kNR tile of C in 24 AVX-512 registers: per k it loads the two
//     16-float vectors of the B panel, broadcasts each of the kMR values of the A panel and issues
//     kMR * 2 fused multiply-adds. The first k block stores its tile (beta 0: C is never read, so
//     no pass clears it first), later blocks add to it; the last adds the bias.
//   * C is cut into blocks of panels handed out to the OpenMP threads as they become free (one
//     parallel region per product; packing is split among the threads too), row of blocks by row
//     of blocks, or column by column when one k block's B panels are larger than
//     tuning::kF32ColumnOrderBytes (each column's B panels then come from memory once). The
//     operand that order reads once per k block (B by columns, a packed A by rows) is packed one
//     stripe of blocks at a time (tuning::kF32StripeBytes), right before the stripe's blocks
//     run, so the workspace holds a stripe rather than the whole operand. Each element of C is
//     computed by one thread in a fixed order (k ascending), so results do not depend on the
//     thread count, on which thread took a block or on the order of the blocks.
//
// The AVX2 + FMA kernel (CPUs without AVX-512) is the same scheme in 8-float vectors: a 6 x 16
// tile (12 of AVX2's 16 registers accumulate), k blocks of up to tuning::kF32Avx2GemmKC = 512
// values (its B panels, half as wide, take as many bytes as the AVX-512 kernel's); panels are
// packed with 8-float loads and stores (lines contiguous in k through 8 x 8 transposes in
// registers). It reads a row-major op(A) (not trans_a) in place instead of packing it: its
// broadcasts load one float of each of the tile's six rows per k, which costs the same from the
// rows as from a panel, and the product skips a pass over A (the activations and the logits'
// gradient). A transposed op(A) (the weight gradients' dy^T) is read in place too when C is narrow
// (tuning::kF32ColumnsInPlaceMaxN columns: each A tile is read by few B panels), its six values of
// one k adjacent in A's row k. The multiply-adds and their order are the same, so the results are
// too.
//
// Chosen at run time by CPUID through function target attributes (AVX-512 where the instruction-set
// level of isa.hpp allows it and the CPU runs 512-bit multiply-adds whole, else AVX2), so one
// build runs on any x86-64 CPU, with Eigen where neither can; kDisableEnv turns both off.
#pragma once

#include <cstdint>
#include <vector>

#include "transformer/core/tensor.hpp"

namespace transformer::f32 {

constexpr Index kMR = 12;                  // rows of C per micro-kernel tile (broadcast A values)
constexpr Index kNR = 32;                  // columns of C per tile (two 16-float vectors)
constexpr Index kKC = tuning::kF32GemmKC;  // k values per packed block (a B panel: kKC * kNR floats)
// products with fewer multiply-adds than this run on the calling thread only
constexpr double kParallelMacs = tuning::kF32ParallelMacs;

// The environment variable that, set to a non-empty value other than "0", makes supported()
// false (the dense layers then use Eigen's GEMM; for comparisons and tests).
constexpr const char* kDisableEnv = "TRANSFORMER_CPP_DISABLE_F32_KERNEL";

enum class Kernel { Eigen, Avx2, Avx512 };

// "eigen" | "avx2" | "avx512"
const char* kernel_name(Kernel k);

// A 64-byte aligned buffer of at least `count` 4-byte values (float32 values, packed words) in
// `buf`, grown when needed: the packed panels of the products here and in bf16_gemm.hpp.
template <typename W>
W* aligned_workspace(std::vector<W>& buf, Index count) {
  static_assert(sizeof(W) == 4, "4-byte values");
  const size_t need = static_cast<size_t>(count) + 16;
  if (buf.size() < need) buf.assign(need, W(0));
  const auto addr = reinterpret_cast<std::uintptr_t>(buf.data());
  const size_t skip = ((64 - addr % 64) % 64) / sizeof(W);
  return buf.data() + skip;
}

// How a parallel product cuts C into blocks of rp x cp panels: blocks_m x blocks_n of them.
struct BlockGrid {
  Index rp, cp, blocks_m, blocks_n;
};
// The grid over MP x NP panels: from blocks of rp x cp panels, the larger side halved until there
// are `want` blocks or more (or the blocks are single panels).
BlockGrid block_grid(Index MP, Index NP, Index rp, Index cp, Index want);

// The argument check of the products here and in bf16_gemm.hpp: throws std::invalid_argument,
// naming `who`, unless M, N, K >= 0, beta is 0 or 1 and lda, ldb, ldc hold op(A), op(B) and C.
void check_gemm_args(const char* who, Index M, Index N, Index K, Index lda, bool trans_a, Index ldb, bool trans_b,
                     float beta, Index ldc);

// Whether this build has kernel k and the CPU, its OS and the instruction-set level (isa.hpp) let
// it run (kDisableEnv aside: tests run each kernel that can run).
bool kernel_runs(Kernel k);

// The kernel of the dense layers' float32 products: the widest that runs (AVX2 rather than
// AVX-512 where cpu_splits_512bit_fma()), or Eigen when none does or kDisableEnv turns them off.
// Read once per process.
Kernel active_kernel();

// Whether active_kernel() is one of this file's (not Eigen).
bool supported();

// C = beta C + op(A) op(B) + bias (see the top of this file) with active_kernel(), or with kernel.
// Throws std::runtime_error when that kernel cannot run here and std::invalid_argument for a beta
// other than 0 or 1 or inconsistent sizes.
void gemm(Index M, Index N, Index K, const float* A, Index lda, bool trans_a, const float* B, Index ldb, bool trans_b,
          float beta, float* C, Index ldc, const float* bias = nullptr);
void gemm_with(Kernel kernel, Index M, Index N, Index K, const float* A, Index lda, bool trans_a, const float* B,
               Index ldb, bool trans_b, float beta, float* C, Index ldc, const float* bias = nullptr);

// The readable reference: the same product summed in double, then rounded to float. For tests.
void gemm_reference(Index M, Index N, Index K, const float* A, Index lda, bool trans_a, const float* B, Index ldb,
                    bool trans_b, float beta, float* C, Index ldc, const float* bias = nullptr);

}  // namespace transformer::f32

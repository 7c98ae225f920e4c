// bf16_gemm.hpp — matrix products with bfloat16 inputs and float32 accumulation (AVX512_BF16, AMX).
//
//   C (M, N) = beta * C + op(A) (M, K) op(B) (K, N)        beta 0 or 1, all row-major float32
//
// op(A)[i, k] is A[i*lda + k], or with trans_a A[k*lda + i]; op(B)[k, j] is B[k*ldb + j], or with
// trans_b B[j*ldb + k]. The three products of a Linear layer y = x W^T (W (out, in)) are
//   forward   y  = x W^T     gemm(N, out, in, x, in, false, W, in, true, 0, y, out)
//   dx        dx = dy W      gemm(N, in, out, dy, out, false, W, in, false, 0, dx, in)
//   dW        dW += dy^T x   gemm(out, in, N, dy, out, true, x, in, false, 1, dW, in)
//
// Every input value is rounded to the nearest bfloat16 (ties to even; the conversion instruction
// flushes float32 subnormals to zero) while it is packed; the products of two bfloat16 values are
// exact in float32 and are summed in float32 by `vdpbf16ps`, which multiplies and adds two pairs
// of bfloat16 per 32-bit lane: acc[l] += a[2l] b[2l] + a[2l+1] b[2l+1].
//
// How the work is laid out (the BLIS/GotoBLAS scheme):
//   * K is walked in blocks of kKC. For each block, op(A) is packed into panels of kMR rows and
//     op(B) into panels of kNR columns, k-pair by k-pair:
//        A panel ip: word (ip*KP + p)*kMR + i = bf16 pair (op(A)[ip*kMR + i, 2p], op(A)[.., 2p + 1])
//                    (with trans_a; otherwise row by row, word (ip*kMR + i)*KP + p, as A lies)
//        B panel jp: word (jp*KP + p)*kNR + j = bf16 pair (op(B)[2p, jp*kNR + j], op(B)[2p + 1, ..])
//     (KP = pairs in the block, an odd K padded with a zero; rows and columns past M and N are
//     zero). A pair is one 32-bit word: low half the even k, high half the odd k.
//   * The micro-kernel keeps a kMR x kNR tile of C in 24 AVX-512 registers: per k pair it loads
//     the kNR/16 vectors of the B panel, broadcasts each of the kMR words of the A panel and issues
//     kMR * kNR/16 vdpbf16ps.
//   * C is cut into blocks of panels, spread over the OpenMP threads (one parallel region per
//     product; packing is split among the threads too). Each element of C is computed by one
//     thread in a fixed order, so results do not depend on the thread count.
//
// On CPUs with AMX (Intel Xeon since Sapphire Rapids) panels of the same kind, 32 lines wide, feed
// the tile registers instead: a 32 x 32 block of C lives in four 16 x 16 float32 tiles, and each
// `tdpbf16ps` multiplies a 16-row A tile by a 16-column B tile over 16 k pairs (the B panel's rows
// of 32 columns are two B tiles side by side; A panels are stored row by row, as an A tile reads
// them). Panels hold a multiple of 16 pairs, zeros past K, so every tile is whole. The tiles sum
// each product in float32 as vdpbf16ps does, in another order.
//
// The kernels are compiled with function target attributes and chosen at run time by CPUID, so the
// extension loads (and float32 works) on any x86-64 CPU; `supported()` says whether they may run.
#pragma once

#include <cstdint>
#include <string>

#include "transformer/core/tensor.hpp"
#include "transformer/kernels/amx.hpp"

namespace transformer::bf16 {

// The micro-kernel's register tile is kMR x kNR (see bf16_gemm.cpp); the knobs are in tuning.hpp.
constexpr Index kMR = 12;                   // rows of C per micro-kernel tile (broadcast A words)
constexpr Index kNR = 32;                   // columns of C per tile (two 16-float vectors)
constexpr Index kKC = tuning::kBf16GemmKC;  // k values per packed block (a B panel: kKC * kNR words)
// products with fewer multiply-adds than this run on the calling thread only
constexpr double kParallelMacs = tuning::kBf16ParallelMacs;

constexpr Index kAmxKC = tuning::kAmxGemmKC;  // k values per packed block of the AMX kernel

// The environment variable that, set to a non-empty value other than "0", makes supported()
// false on any CPU (to test the unsupported path and to compare with float32 on one CPU).
constexpr const char* kDisableEnv = "TRANSFORMER_CPP_DISABLE_BF16";

// Whether the CPU and OS can run the kernel (AVX512F, AVX512BW, AVX512VL, AVX512_BF16, and the
// OS saves the AVX-512 state), this build has it, and kDisableEnv does not turn it off.
bool supported();
// Why not, in a sentence (empty when supported()).
std::string unsupported_reason();

// The same for the AMX tiles: set, the kernel of every bf16 product is the AVX512_BF16 one.
constexpr const char* kDisableAmxEnv = amx::kDisableEnv;

// Which instructions compute a product: Auto is what the layers use, AMX where amx_supported(),
// else AVX512_BF16.
enum class Kernel { Auto, Avx512Bf16, Amx };
Kernel active_kernel();
const char* kernel_name(Kernel kernel);  // "auto" | "avx512_bf16" | "amx"

// C = beta C + op(A) op(B) (see the top of this file) with `kernel`.
// Throws std::runtime_error when !cpu_supported(), or for Amx when !amx_cpu_supported() (never
// executes the instructions then), and std::invalid_argument for a beta other than 0 or 1 or
// inconsistent sizes.
void gemm(Index M, Index N, Index K, const float* A, Index lda, bool trans_a, const float* B, Index ldb, bool trans_b,
          float beta, float* C, Index ldc, Kernel kernel = Kernel::Auto);

// The readable reference: the same product with every input rounded to bfloat16 by
// round_to_bf16, multiplied and summed in double, then rounded to float. Slow; for tests.
void gemm_reference(Index M, Index N, Index K, const float* A, Index lda, bool trans_a, const float* B, Index ldb,
                    bool trans_b, float beta, float* C, Index ldc);

// x rounded to the nearest bfloat16 (8 significant bits), ties to even, returned as a float; like
// the conversion instruction, subnormals become (signed) zero, NaN stays NaN, overflow gives inf.
float round_to_bf16(float x);

// The CPU check alone (ignores kDisableEnv): what gemm() requires.
bool cpu_supported();

// Whether the AMX tiles compute the bf16 products: supported(), a CPU with AMX-BF16 whose
// operating system grants this process the tile state, a build that has the kernel, and no
// kDisableAmxEnv. amx_cpu_supported() is the CPU, OS and build part alone (what Kernel::Amx needs).
bool amx_supported();
bool amx_cpu_supported();
// Why not, in a sentence (empty when amx_supported()).
std::string amx_unsupported_reason();

}  // namespace transformer::bf16

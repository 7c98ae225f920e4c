// amx.hpp — the AMX tile registers (Intel Xeon since Sapphire Rapids): whether this process may use
// them, and the one tile shape every AMX kernel here configures.
//
// A tile is up to 16 rows of 64 bytes; `tdpbf16ps` multiplies a 16 x 32 bfloat16 tile by a 32 x 16
// one into 16 x 16 float32 sums, `tdpbusd` a 16 x 64 unsigned-byte tile by a 64 x 16 signed-byte one
// into 16 x 16 int32 sums (the B tile holds k in groups of 2 or 4 per 32-bit word, the layout of
// the AVX-512 dot products). Linux grants the tile state per process (arch_prctl
// ARCH_REQ_XCOMP_PERM, Linux 5.16+); it is asked for once, before the first tile instruction.
// The bf16 training products (bf16_gemm.hpp) and the int8 and bf16 decoding products
// (quantized_linear.hpp) use the tiles.
#pragma once

#include <string>

// The tile instructions need GCC 11+ or Clang 12+, and Linux.
#if defined(__x86_64__) && defined(__linux__) && \
    ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11))
#define TCPP_AMX_KERNEL 1
#else
#define TCPP_AMX_KERNEL 0
#endif

namespace transformer::amx {

// The environment variable that, set to a non-empty value other than "0", turns the tiles off: the
// products then run on the AVX-512 kernels (read at each product, so a test can switch it).
constexpr const char* kDisableEnv = "TRANSFORMER_CPP_DISABLE_AMX";
bool disabled_by_environment();

// The tile multiplication a kernel needs: AMX-BF16 or AMX-INT8.
enum class Op { Bf16, Int8 };

// What stops this process from running `op` on the tiles, in a sentence, or "" (decided once per
// op): the CPU's AMX-TILE and the op's instructions, the operating system saving the tile state,
// palette 1 offering eight tiles of 16 rows of 64 bytes, this build having the kernels, and Linux
// granting this process the tile state. It does not look at kDisableEnv.
const std::string& cpu_problem(Op op);

// Loads the calling thread's tile configuration: palette 1, eight tiles of 16 rows of 64 bytes
// (tmm0-7). release() gives the tile state back. Only where cpu_problem() of the op is "".
void configure();
void release();

}  // namespace transformer::amx

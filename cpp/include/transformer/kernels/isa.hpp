// isa.hpp — the instruction-set level the core's own kernels run at, decided once per process.
//
// The extension is one build for every x86-64 CPU: each SIMD kernel is compiled for its
// instruction set with function target attributes and runs only when the level decided here
// allows it. The levels, each including the one below:
//
//   generic  plain C++ loops and Eigen (whatever the build's -march gives Eigen)
//   avx2     AVX2 + FMA (Intel since Haswell, AMD since Zen), and the OS saves the YMM state
//   avx512   AVX-512F, and the OS saves the ZMM and opmask state. The kernels that need more
//            (AVX512_BF16, AVX512_VNNI) check their own features too
//
// On 64-bit ARM the levels are generic and neon (AArch64 always has NEON; Eigen uses it at every
// level). The neon kernels that need more (the int8 dot product `sdot` of ARMv8.2) check their own
// feature too. x86 levels are refused on ARM, and neon on x86-64.
//
// The level is the highest the CPU has, or the one TRANSFORMER_CPP_ISA names (avx512 | avx2 |
// generic, any case), so that tests and the bench can run the avx2 or generic kernels on a larger
// CPU, as CTranslate2's CT2_FORCE_CPU_ISA does. A level above the CPU's is refused, not lowered:
// a run that asked for AVX-512 must not report AVX2 figures under that name. Both that and an
// unknown name throw std::invalid_argument from every call (the extension refuses to load).
//
// The level governs the core's own kernels only. Eigen is compiled with the build's flags: a
// -march=native build on an AVX-512 machine uses AVX-512 inside Eigen at any level, and only a
// portable build (TRANSFORMER_CPP_NATIVE=OFF) keeps everything outside the kernels to x86-64.
// The TRANSFORMER_CPP_DISABLE_* switches of each kernel still turn that kernel off at any level.
#pragma once

#include <string>

namespace transformer {

enum class Isa { Generic = 0, Avx2 = 1, Avx512 = 2, Neon = 3 };

// The environment variable that forces a level.
constexpr const char* kIsaEnv = "TRANSFORMER_CPP_ISA";

// "generic" | "avx2" | "avx512" | "neon"
const char* isa_name(Isa isa);

// The highest level this CPU (and its operating system) supports. Read once.
Isa cpu_isa();

// The level the kernels run at: TRANSFORMER_CPP_ISA when set (and not above cpu_isa()), else
// cpu_isa(). Decided once; throws std::invalid_argument (the same message every call) when the
// variable names an unknown level or one this CPU lacks.
Isa active_isa();

// Whether the kernels of `level` may run: generic always; neon when the level is neon; an x86 level
// when the active level is an x86 level at least as high.
inline bool isa_allows(Isa level) {
  if (level == Isa::Generic) return true;
  const Isa active = active_isa();
  if (level == Isa::Neon || active == Isa::Neon) return active == level;
  return static_cast<int>(active) >= static_cast<int>(level);
}

// x86-64: the feature words of CPUID leaf 7 (sub-leaf 0: EBX, ECX, EDX; sub-leaf 1: EAX) when
// the CPU has that leaf and the operating system saves the AVX-512 state (opmask, ZMM0-15 upper
// halves, ZMM16-31); all zero otherwise, and on other CPUs, so that every AVX-512 feature reads as
// absent. The AVX-512 kernels test their features (F, BW, VL, VNNI, BF16) in it. Read once.
struct Avx512Cpuid {
  unsigned leaf7_ebx = 0, leaf7_ecx = 0, leaf7_edx = 0, leaf7_1_eax = 0;
};
const Avx512Cpuid& avx512_cpuid();

// AMD Zen 4 (family 19h; the family's only CPUs with AVX-512): its cores run each 512-bit
// multiply-add as two 256-bit halves, so a 512-bit kernel does no more multiply-adds per cycle
// than a 256-bit one. Read from CPUID once; false on other CPUs.
bool cpu_splits_512bit_fma();

// AVX-VNNI: the VEX-encoded 256-bit int8 dot product (vpdpbusd ymm) of Intel's cores since Alder
// Lake and AMD's since Zen 5; with AVX2 it serves int8 decoding where AVX-512 is not there.
bool cpu_has_avx_vnni();

// The int8 dot product of ARMv8.2 (`sdot`, FEAT_DotProd): Apple M1 and later, Cortex-A55/A76 and
// later, Neoverse. Read from the operating system once (Linux: HWCAP_ASIMDDP; macOS: sysctl).
bool cpu_has_arm_dotprod();

}  // namespace transformer

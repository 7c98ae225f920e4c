#include "transformer/kernels/isa.hpp"

#include <cctype>
#include <cstdlib>
#include <stdexcept>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TCPP_X86_CPUID 1
#include <cpuid.h>
#else
#define TCPP_X86_CPUID 0
#endif

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#elif defined(__aarch64__) && defined(__APPLE__)
#include <sys/sysctl.h>
#endif

namespace transformer {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Avx512:
      return "avx512";
    case Isa::Avx2:
      return "avx2";
    case Isa::Neon:
      return "neon";
    default:
      return "generic";
  }
}

namespace {
#if TCPP_X86_CPUID
// The bits of XCR0 (the state the OS saves on a context switch): SSE and AVX (YMM upper halves);
// the AVX-512 opmask, ZMM0-15 upper halves and ZMM16-31.
constexpr unsigned kXcr0Avx = 0x06u;
constexpr unsigned kXcr0Avx512 = 0xE6u;

unsigned xcr0() {
  unsigned lo = 0, hi = 0;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return lo;
}
#endif

Isa detect() {
#if TCPP_X86_CPUID
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return Isa::Generic;
  __cpuid(1, a, b, c, d);
  const bool fma = (c >> 12) & 1u, osxsave = (c >> 27) & 1u, avx = (c >> 28) & 1u;
  if (!osxsave || !avx || !fma) return Isa::Generic;
  const unsigned saved = xcr0();
  if ((saved & kXcr0Avx) != kXcr0Avx) return Isa::Generic;
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx2 = (b >> 5) & 1u, avx512f = (b >> 16) & 1u;
  if (!avx2) return Isa::Generic;
  if (avx512f && (saved & kXcr0Avx512) == kXcr0Avx512) return Isa::Avx512;
  return Isa::Avx2;
#elif defined(__aarch64__)
  return Isa::Neon;
#else
  return Isa::Generic;
#endif
}

struct Decision {
  Isa isa = Isa::Generic;
  std::string error;  // non-empty: TRANSFORMER_CPP_ISA was refused
};

Decision decide() {
  Decision out;
  const Isa cpu = cpu_isa();
  out.isa = cpu;
  const char* env = std::getenv(kIsaEnv);
  if (env == nullptr || env[0] == '\0') return out;
  std::string name(env);
  for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  Isa asked = Isa::Generic;
  if (name == "avx512") {
    asked = Isa::Avx512;
  } else if (name == "avx2") {
    asked = Isa::Avx2;
  } else if (name == "neon") {
    asked = Isa::Neon;
  } else if (name != "generic") {
    out.error = std::string(kIsaEnv) + " must be 'avx512', 'avx2', 'neon' or 'generic', got '" + env + "'";
    return out;
  }
  // x86 levels and neon never mix; within x86 the levels are ordered
  const bool other_family = asked != Isa::Generic && ((asked == Isa::Neon) != (cpu == Isa::Neon));
  if (other_family || (asked != Isa::Neon && static_cast<int>(asked) > static_cast<int>(cpu))) {
    out.error = std::string(kIsaEnv) + "=" + env + " asks for more than this CPU (or its operating system) " +
                "supports: its level is '" + isa_name(cpu) + "'; set it to '" + isa_name(cpu) +
                "' or lower, or unset it";
    return out;
  }
  out.isa = asked;
  return out;
}
}  // namespace

Isa cpu_isa() {
  static const Isa isa = detect();
  return isa;
}

Isa active_isa() {
  static const Decision decision = decide();
  if (!decision.error.empty()) throw std::invalid_argument(decision.error);
  return decision.isa;
}

const Avx512Cpuid& avx512_cpuid() {
  static const Avx512Cpuid words = [] {
    Avx512Cpuid w;
#if TCPP_X86_CPUID
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_max(0, nullptr) < 7) return w;
    __cpuid(1, a, b, c, d);
    if (!((c >> 27) & 1u)) return w;                      // OSXSAVE
    if ((xcr0() & kXcr0Avx512) != kXcr0Avx512) return w;  // the OS saves the AVX-512 state
    __cpuid_count(7, 0, a, b, c, d);
    w.leaf7_ebx = b;
    w.leaf7_ecx = c;
    w.leaf7_edx = d;
    __cpuid_count(7, 1, a, b, c, d);
    w.leaf7_1_eax = a;
#endif
    return w;
  }();
  return words;
}

bool cpu_splits_512bit_fma() {
#if TCPP_X86_CPUID
  static const bool split = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(0, &a, &b, &c, &d) == 0) return false;
    const bool amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;  // "AuthenticAMD"
    if (!amd || __get_cpuid(1, &a, &b, &c, &d) == 0) return false;
    const unsigned family = ((a >> 8) & 0xfu) + ((a >> 20) & 0xffu);  // base + extended family
    return family == 0x19u;
  }();
  return split;
#else
  return false;
#endif
}

bool cpu_has_avx_vnni() {
#if TCPP_X86_CPUID
  static const bool ok = [] {
    if (cpu_isa() == Isa::Generic) return false;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_max(0, nullptr) < 7) return false;
    __cpuid_count(7, 1, a, b, c, d);
    return ((a >> 4) & 1u) != 0;  // CPUID.(EAX=7, ECX=1):EAX[4] AVX-VNNI
  }();
  return ok;
#else
  return false;
#endif
}

bool cpu_has_arm_dotprod() {
#if defined(__aarch64__) && defined(__linux__)
  static const bool ok = (getauxval(AT_HWCAP) & (1ul << 20)) != 0;  // HWCAP_ASIMDDP
  return ok;
#elif defined(__aarch64__) && defined(__APPLE__)
  static const bool ok = [] {
    int value = 0;
    size_t size = sizeof value;
    return sysctlbyname("hw.optional.arm.FEAT_DotProd", &value, &size, nullptr, 0) == 0 && value != 0;
  }();
  return ok;
#else
  return false;
#endif
}

}  // namespace transformer

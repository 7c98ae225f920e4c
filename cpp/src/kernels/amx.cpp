#include "transformer/kernels/amx.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>

#if TCPP_AMX_KERNEL
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define TCPP_AMX_TILE_TARGET __attribute__((target("amx-tile")))
#endif

namespace transformer::amx {

bool disabled_by_environment() {
  const char* v = std::getenv(kDisableEnv);
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

namespace {
#if TCPP_AMX_KERNEL
// The CPU, OS and palette checks shared by both ops, then the permission (asked for once).
std::string tile_problem() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return "this CPU has no AMX tiles (Intel Xeon since Sapphire Rapids has them)";
  __cpuid(1, a, b, c, d);
  if (!((c >> 27) & 1u)) return "the operating system does not save the AMX tile state";  // no XSAVE enabled
  __cpuid_count(7, 0, a, b, c, d);
  if (!((d >> 24) & 1u)) return "this CPU has no AMX tiles (Intel Xeon since Sapphire Rapids has them)";
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & 0x60000u) != 0x60000u) return "the operating system does not save the AMX tile state";
  if (__get_cpuid_max(0, nullptr) < 0x1D) return "this CPU does not describe its AMX tiles (CPUID leaf 0x1D)";
  __cpuid_count(0x1D, 1, a, b, c, d);
  const unsigned names = b >> 16, bytes_per_row = b & 0xFFFFu, rows = c & 0xFFFFu;
  if (names < 8 || bytes_per_row < 64 || rows < 16)
    return "this CPU's AMX palette is smaller than 8 tiles of 16 x 64 bytes";
  constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) != 0)
    return "the operating system refuses this process the AMX tiles (Linux 5.16 or later grants them)";
  return "";
}

std::string op_problem(Op op) {
  static const std::string tiles = tile_problem();
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0, nullptr) >= 7) __cpuid_count(7, 0, a, b, c, d);
  if (op == Op::Bf16 && !((d >> 22) & 1u))
    return "this CPU has no AMX-BF16 tiles (Intel Xeon since Sapphire Rapids has them)";
  if (op == Op::Int8 && !((d >> 25) & 1u))
    return "this CPU has no AMX-INT8 tiles (Intel Xeon since Sapphire Rapids has them)";
  return tiles;
}
#else
std::string op_problem(Op) {
  return "this build has no AMX kernel (it needs Linux and GCC 11+ or Clang 12+ on x86-64)";
}
#endif
}  // namespace

const std::string& cpu_problem(Op op) {
  static const std::string bf16 = op_problem(Op::Bf16), int8 = op_problem(Op::Int8);
  return op == Op::Bf16 ? bf16 : int8;
}

#if TCPP_AMX_KERNEL
namespace {
struct alignas(64) Config {
  std::uint8_t palette = 1, start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t bytes_per_row[16] = {};
  std::uint8_t rows[16] = {};
};
}  // namespace

TCPP_AMX_TILE_TARGET void configure() {
  Config cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.bytes_per_row[t] = 64;
    cfg.rows[t] = 16;
  }
  // ldtilecfg reads all 64 bytes: the memory operand says so (GCC 12's _tile_loadconfig names only
  // the first 8, and the optimiser then drops the stores of the rest)
  __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

TCPP_AMX_TILE_TARGET void release() { _tile_release(); }
#else
void configure() {}
void release() {}
#endif

}  // namespace transformer::amx

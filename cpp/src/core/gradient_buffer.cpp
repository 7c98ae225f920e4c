#include "transformer/core/gradient_buffer.hpp"

#include <cstdint>
#include <cstring>
#include <new>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#define TCPP_HAVE_MMAP 1
#endif

namespace transformer::gradient_memory {

namespace {

// From this size on a buffer is mapped: below it a mapping would waste most of its last page
// and cost a system call for what a zeroed heap block gives as cheaply.
constexpr std::size_t kMapMinBytes = std::size_t(64) << 10;
constexpr std::size_t kAlign = 64;
constexpr std::size_t kBlock = 4096;

bool all_zero_bytes(const unsigned char* p, std::size_t n) {
  std::size_t i = 0;
  for (; i + sizeof(std::uint64_t) <= n; i += sizeof(std::uint64_t)) {
    std::uint64_t w;
    std::memcpy(&w, p + i, sizeof w);
    if (w != 0) return false;
  }
  for (; i < n; ++i)
    if (p[i] != 0) return false;
  return true;
}

}  // namespace

void* allocate_zeroed(std::size_t bytes, bool& mapped) {
  mapped = false;
#ifdef TCPP_HAVE_MMAP
  if (bytes >= kMapMinBytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    mapped = true;
    return p;
  }
#endif
  void* p = ::operator new(bytes, std::align_val_t(kAlign));
  std::memset(p, 0, bytes);
  return p;
}

void release(void* p, std::size_t bytes, bool mapped) {
#ifdef TCPP_HAVE_MMAP
  if (mapped) {
    ::munmap(p, bytes);
    return;
  }
#endif
  (void)bytes;
  (void)mapped;
  ::operator delete(p, std::align_val_t(kAlign));
}

void zero_written(void* p, std::size_t bytes) {
  auto* b = static_cast<unsigned char*>(p);
  for (std::size_t i = 0; i < bytes; i += kBlock) {
    const std::size_t n = bytes - i < kBlock ? bytes - i : kBlock;
    if (!all_zero_bytes(b + i, n)) std::memset(b + i, 0, n);
  }
}

}  // namespace transformer::gradient_memory

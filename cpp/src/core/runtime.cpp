#include "transformer/core/runtime.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <stdexcept>

#include "transformer/core/checks.hpp"
#include "transformer/core/tensor.hpp"

#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#endif

#ifdef _OPENMP
#include <omp.h>
#endif

namespace transformer {

double thread_stack_bytes() {
  // OpenMP's worker threads get OMP_STACKSIZE ("512K", "4M", a number of kilobytes) when it is
  // set, else the default of new threads (from ulimit -s)
  if (const char* env = std::getenv("OMP_STACKSIZE")) {
    char* end = nullptr;
    const double size = std::strtod(env, &end);
    if (end != env && size > 0) {
      while (*end == ' ') ++end;
      const char unit = static_cast<char>(std::toupper(static_cast<unsigned char>(*end)));
      const double scale = unit == 'B' ? 1.0 : unit == 'M' ? 1048576.0 : unit == 'G' ? 1073741824.0 : 1024.0;
      return size * scale;
    }
  }
#if defined(__unix__) || defined(__APPLE__)
  pthread_attr_t attr;
  size_t size = 0;
  if (pthread_attr_init(&attr) == 0) {
    pthread_attr_getstacksize(&attr, &size);
    pthread_attr_destroy(&attr);
  }
  if (size > 0) return static_cast<double>(size);
#endif
  return 8.0 * 1048576.0;
}

int affordable_threads() {
  const double room = address_space_room_bytes();
  if (room < 0) return kMaxThreads;
  // every thread beyond this one maps a stack and a guard page (and glibc may give it a malloc
  // arena): let the stacks take at most half of what the process may still map
  const double per_thread = thread_stack_bytes() + 65536.0;
  const double extra = room / 2.0 / per_thread;
  return extra + 1.0 >= kMaxThreads ? kMaxThreads : static_cast<int>(extra) + 1;
}

namespace {
// The most threads this process has been given (by set_num_threads, or OMP_NUM_THREADS when it
// was loaded): a count up to it needs no address space that is not already taken or promised.
// Their stacks are counted in the virtual size once they have started, so checking such a count
// again would refuse to go back to a count that runs (a thread governor lowers the count while
// another program holds a core, then raises it again).
std::atomic<int> granted_threads{0};
}  // namespace

void set_num_threads(int n) {
  TCPP_CHECK(n >= 1 && n <= kMaxThreads, "set_num_threads: n must be in [1, ", kMaxThreads, "], got ", n);
  const int granted = std::max(granted_threads.load(), get_num_threads());
  if (n > granted) {
    const int most = affordable_threads();
    TCPP_CHECK(n <= most, "set_num_threads: ", n, " threads need ", format_bytes((n - 1) * thread_stack_bytes()),
               " of address space for their stacks (", format_bytes(thread_stack_bytes()), " each), more than half of ",
               "the ", format_bytes(address_space_room_bytes()), " this process may still map (ulimit -v); ask for at ",
               "most ", most);
  }
  int seen = granted_threads.load();
  const int now = std::max(granted, n);
  while (seen < now && !granted_threads.compare_exchange_weak(seen, now)) {
  }
#ifdef _OPENMP
  omp_set_num_threads(n);
#endif
  Eigen::setNbThreads(n);
}

int get_num_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

}  // namespace transformer

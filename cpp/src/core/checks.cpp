#include "transformer/core/checks.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/resource.h>
#include <unistd.h>
#endif

namespace transformer {

namespace {

// MemAvailable (bytes) from /proc/meminfo, or -1 where there is none.
double available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (f >> key >> kb) {
    std::getline(f, unit);
    if (key == "MemAvailable:") return kb * 1024.0;
  }
  return -1.0;
}

// Resident bytes of this process (/proc/self/statm), or 0.
double resident_bytes() {
#if defined(__unix__)
  std::ifstream f("/proc/self/statm");
  double size = 0, resident = 0;
  if (f >> size >> resident) return resident * static_cast<double>(sysconf(_SC_PAGESIZE));
#endif
  return 0.0;
}

// What the cgroup (v2) lets this container still use, or -1 without a limit.
double cgroup_room_bytes() {
  std::ifstream max_file("/sys/fs/cgroup/memory.max"), current_file("/sys/fs/cgroup/memory.current");
  double max = 0, current = 0;
  if (!(max_file >> max) || !(current_file >> current)) return -1.0;  // "max" (no limit) fails to parse
  return std::max(0.0, max - current);
}

// Virtual size of this process (/proc/self/statm), or 0.
double virtual_bytes() {
#if defined(__unix__)
  std::ifstream f("/proc/self/statm");
  double size = 0;
  if (f >> size) return size * static_cast<double>(sysconf(_SC_PAGESIZE));
#endif
  return 0.0;
}

double physical_bytes() {
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) return static_cast<double>(pages) * static_cast<double>(page);
#endif
  return 64.0 * (1ull << 30);  // nothing known: a laptop's worth
}

}  // namespace

double address_space_room_bytes() {
  double room = -1.0;
#if defined(__unix__) || defined(__APPLE__)
  const double used = virtual_bytes();
  for (int resource : {RLIMIT_AS, RLIMIT_DATA}) {
    struct rlimit r;
    if (getrlimit(resource, &r) != 0 || r.rlim_cur == RLIM_INFINITY) continue;
    // RLIMIT_DATA counts less than the whole address space, so the virtual size overstates what
    // it has used: a conservative room
    const double left = std::max(0.0, static_cast<double>(r.rlim_cur) - used);
    room = room < 0 ? left : std::min(room, left);
  }
#endif
  return room;
}

double memory_limit_bytes() {
  double available = available_bytes();
  const double room = cgroup_room_bytes();
  if (room >= 0 && (available < 0 || room < available)) available = room;
  double limit = available >= 0 ? available + resident_bytes() : physical_bytes();
  // an address-space limit (ulimit -v, RLIMIT_AS) fails allocations with memory to spare: what
  // the process may still map, plus what it holds (its buffers are reused)
  const double space = address_space_room_bytes();
  if (space >= 0) limit = std::min(limit, space + resident_bytes());
  if (const char* env = std::getenv("TRANSFORMER_CPP_MEMORY_LIMIT")) {
    char* end = nullptr;
    const double cap = std::strtod(env, &end);
    if (end != env && cap > 0) limit = std::min(limit, cap);
  }
  return limit;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"bytes", "KB", "MB", "GB", "TB", "PB", "EB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 6) {
    bytes /= 1024.0;
    ++u;
  }
  if (u == 6 && bytes >= 1024.0) return concat(format_count(bytes * std::pow(1024.0, 6)), " bytes");
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

std::string format_count(double count) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), std::fabs(count) < 1e15 ? "%.0f" : "%.3g", count);
  return buf;
}

void check_memory(const std::string& who, const std::string& what, double bytes) {
  const double limit = memory_limit_bytes();
  if (!(bytes <= limit) && !std::isnan(bytes))
    throw std::invalid_argument(concat(who, ": ", what, " needs ", format_bytes(bytes), ", more than the ",
                                       format_bytes(limit), " of memory available"));
}

template <typename T>
Index first_nonfinite(const T* p, Index n) {
  constexpr Index kChunk = tuning::kElementChunk;
  const Index chunks = (n + kChunk - 1) / kChunk;
  Index first = n;
#pragma omp parallel for schedule(static) reduction(min : first) if (n >= 4 * kParallelMin)
  for (Index c = 0; c < chunks; ++c) {
    const Index a = c * kChunk, b = std::min(n, a + kChunk);
    if (all_finite(p + a, b - a)) continue;  // the common case, vectorised
    for (Index i = a; i < b; ++i)
      if (!std::isfinite(p[i])) {
        first = std::min(first, i);
        break;
      }
  }
  return first < n ? first : -1;
}

template <typename T>
void check_finite_input(const T* p, Index n, const std::string& who, const std::string& arg) {
  const Index i = first_nonfinite(p, n);
  if (i >= 0)
    throw std::invalid_argument(concat(who, ": ", arg, " holds ", static_cast<double>(p[i]), " at flat index ", i,
                                       "; inputs must be finite (no NaN or infinity)"));
}

template <typename T>
std::vector<std::string> nonfinite_parameters(const ParameterList<T>& params) {
  std::vector<std::string> bad;
  for (const auto& p : params)
    if (first_nonfinite(p.value, p.size()) >= 0) bad.push_back(p.name);
  return bad;
}

template <typename T>
void check_finite_parameters(const ParameterList<T>& params, const std::string& who) {
  const std::vector<std::string> bad = nonfinite_parameters(params);
  if (bad.empty()) return;
  std::ostringstream names;
  for (size_t i = 0; i < bad.size() && i < 5; ++i) names << (i ? ", " : "") << "'" << bad[i] << "'";
  if (bad.size() > 5) names << " and " << bad.size() - 5 << " more";
  throw NonFiniteError(concat(who, ": the weights are not finite: ", bad.size() == 1 ? "parameter " : "parameters ",
                              names.str(), bad.size() == 1 ? " holds" : " hold",
                              " NaN or infinite values; load weights that are finite "
                              "(a checkpoint from before training diverged)"));
}

template Index first_nonfinite<float>(const float*, Index);
template Index first_nonfinite<double>(const double*, Index);
template void check_finite_input<float>(const float*, Index, const std::string&, const std::string&);
template void check_finite_input<double>(const double*, Index, const std::string&, const std::string&);
template std::vector<std::string> nonfinite_parameters<float>(const ParameterList<float>&);
template std::vector<std::string> nonfinite_parameters<double>(const ParameterList<double>&);
template void check_finite_parameters<float>(const ParameterList<float>&, const std::string&);
template void check_finite_parameters<double>(const ParameterList<double>&, const std::string&);

}  // namespace transformer

// check.hpp — what the C++ tests share: CHECK, CHECK_CLOSE and CHECK_WITHIN (a failed check
// prints its file, line and the worst element, and the test goes on), a test runner, random
// inputs, and float64 central finite differences.
//
// Each test program's main() runs its tests with run() and returns finish(): 1 when any check
// failed (ctest then reports the program as failed), 0 otherwise. A test that cannot run on this
// CPU calls skip() with the reason; it is reported as skipped, not passed. main() starts with
// level_runs(): a program run at a level above this CPU's (TRANSFORMER_CPP_ISA) returns
// kSkipReturnCode, since every call of the core refuses such a level.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "transformer/kernels/isa.hpp"

namespace transformer::testing {

constexpr int kSkipReturnCode = 77;  // ctest's SKIP_RETURN_CODE (cpp/tests/CMakeLists.txt)

// Prints the instruction-set level the tests run at; false (printing why) when TRANSFORMER_CPP_ISA
// names a level above this CPU's or an unknown one.
inline bool level_runs() {
  try {
    std::printf("instruction-set level %s (CPU %s)\n", isa_name(active_isa()), isa_name(cpu_isa()));
    return true;
  } catch (const std::invalid_argument& e) {
    std::printf("skipped: %s\n", e.what());
    return false;
  }
}

struct Counts {
  int failed_checks = 0;
  int failed_tests = 0;
  int passed_tests = 0;
  int skipped_tests = 0;
};

inline Counts& counts() {
  static Counts c;
  return c;
}

inline void fail(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "%s:%d: check failed: %s\n", file, line, what.c_str());
  ++counts().failed_checks;
}

// got[i] against want[i] for i < n: |got - want| <= bound[i] for every element (a bound of its
// own for each element, e.g. from the rounding error of its sum). On failure, names the element
// that exceeds its bound the most (NaN exceeds any bound).
template <typename G, typename W>
bool within(const char* file, int line, const std::string& what, const G* got, const W* want, const double* bound,
            std::size_t n) {
  std::size_t worst = 0;
  double worst_excess = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    double excess = std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i])) - bound[i];
    if (std::isnan(excess)) excess = INFINITY;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  if (worst_excess <= 0.0) return true;
  char buf[320];
  std::snprintf(buf, sizeof(buf), "%s: element %zu of %zu is %.10g, expected %.10g within %.3g", what.c_str(), worst, n,
                static_cast<double>(got[worst]), static_cast<double>(want[worst]), bound[worst]);
  fail(file, line, buf);
  return false;
}

// The same with one tolerance for all: |got - want| <= atol + rtol * |want|.
template <typename G, typename W>
bool close(const char* file, int line, const std::string& what, const G* got, const W* want, std::size_t n, double atol,
           double rtol) {
  std::vector<double> bound(n);
  for (std::size_t i = 0; i < n; ++i) bound[i] = atol + rtol * std::fabs(static_cast<double>(want[i]));
  return within(file, line, what, got, want, bound.data(), n);
}

#define CHECK(cond)                                                                    \
  do {                                                                                 \
    if (!(cond)) ::transformer::testing::fail(__FILE__, __LINE__, "CHECK(" #cond ")"); \
  } while (0)

// CHECK_CLOSE(what, got, want, n, atol, rtol): got and want point to n values each.
#define CHECK_CLOSE(what, got, want, n, atol, rtol) \
  ::transformer::testing::close(__FILE__, __LINE__, what, got, want, n, atol, rtol)

// CHECK_WITHIN(what, got, want, bound, n): bound points to n tolerances, one per element.
#define CHECK_WITHIN(what, got, want, bound, n) \
  ::transformer::testing::within(__FILE__, __LINE__, what, got, want, bound, n)

// Thrown by skip(): this CPU or build cannot run what the test checks (what() says why).
struct Skipped : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] inline void skip(const std::string& reason) { throw Skipped(reason); }

inline void run(const char* name, const std::function<void()>& test) {
  const int before = counts().failed_checks;
  try {
    test();
  } catch (const Skipped& s) {
    std::printf("SKIP %s: %s\n", name, s.what());
    ++counts().skipped_tests;
    return;
  } catch (const std::exception& e) {
    fail(__FILE__, __LINE__, std::string(name) + " threw: " + e.what());
  }
  if (counts().failed_checks == before) {
    std::printf("PASS %s\n", name);
    ++counts().passed_tests;
  } else {
    std::printf("FAIL %s\n", name);
    ++counts().failed_tests;
  }
}

inline int finish() {
  const Counts& c = counts();
  std::printf("%d passed, %d failed, %d skipped\n", c.passed_tests, c.failed_tests, c.skipped_tests);
  return c.failed_checks == 0 ? 0 : 1;
}

// n values uniform in [lo, hi) from a fixed seed.
template <typename T>
std::vector<T> uniform(std::size_t n, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(dist(gen));
  return v;
}

// The gradient of the scalar f with respect to the n values at x by central differences, one
// element at a time: (f(x + h e_i) - f(x - h e_i)) / 2h, x[i] restored after each. In float64 the
// error is O(h^2) (the third derivative) plus O(eps / h) (rounding): about 1e-10 with h = 1e-5 for
// the smooth functions tested here.
inline std::vector<double> finite_differences(double* x, std::size_t n, const std::function<double()>& f,
                                              double h = 1e-5) {
  std::vector<double> g(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = f();
    x[i] = saved - h;
    const double down = f();
    x[i] = saved;
    g[i] = (up - down) / (2.0 * h);
  }
  return g;
}

}  // namespace transformer::testing

// runtime.hpp — threads and build facts.
#pragma once

#include <map>
#include <string>

namespace transformer {

// Number of threads used by OpenMP loops and Eigen's parallel GEMM (the same pool), at most
// kMaxThreads.
constexpr int kMaxThreads = 1024;
void set_num_threads(int n);
int get_num_threads();
// Compiler, flags, OpenMP, Eigen version, SIMD level: what this extension was built with.
std::map<std::string, std::string> build_info();

}  // namespace transformer

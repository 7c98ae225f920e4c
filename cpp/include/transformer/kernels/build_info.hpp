// build_info.hpp — what this extension was built with and which kernel runs each product here.
#pragma once

#include <map>
#include <string>

namespace transformer {

// Compiler, flags, OpenMP, Eigen version, SIMD level, the instruction-set level (isa.hpp) and the
// kernel of each product at that level ("kernel.<product>" keys).
std::map<std::string, std::string> build_info();

}  // namespace transformer

#include "transformer/runtime.hpp"

#include <Eigen/Core>
#include <stdexcept>
#include <thread>

#include "transformer/tensor.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace transformer {

void set_num_threads(int n) {
  TCPP_CHECK(n >= 1 && n <= kMaxThreads, "set_num_threads: n must be in [1, ", kMaxThreads, "], got ", n);
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

std::map<std::string, std::string> build_info() {
  std::map<std::string, std::string> info;
#ifdef TCPP_COMPILER
  info["compiler"] = TCPP_COMPILER;
#endif
#ifdef TCPP_FLAGS
  info["flags"] = TCPP_FLAGS;
#endif
#ifdef TCPP_BUILD_TYPE
  info["build_type"] = TCPP_BUILD_TYPE;
#endif
#ifdef _OPENMP
  info["openmp"] = "on (" + std::to_string(_OPENMP) + ")";
#else
  info["openmp"] = "off";
#endif
  info["eigen_version"] = std::to_string(EIGEN_WORLD_VERSION) + "." +
                          std::to_string(EIGEN_MAJOR_VERSION) + "." +
                          std::to_string(EIGEN_MINOR_VERSION);
#ifdef TCPP_EIGEN_DIR
  info["eigen_dir"] = TCPP_EIGEN_DIR;
#endif
  info["simd"] = Eigen::SimdInstructionSetsInUse();
  info["hardware_threads"] = std::to_string(std::thread::hardware_concurrency());
  return info;
}

}  // namespace transformer

#include "transformer/kernels/build_info.hpp"

#include <Eigen/Core>
#include <thread>

#include "transformer/kernels/bf16_gemm.hpp"
#include "transformer/kernels/decode_kernels.hpp"
#include "transformer/kernels/f32_gemm.hpp"
#include "transformer/kernels/isa.hpp"
#include "transformer/kernels/quantized_linear.hpp"

namespace transformer {

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
  info["eigen_version"] = std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) + "." +
                          std::to_string(EIGEN_MINOR_VERSION);
#ifdef TCPP_EIGEN_DIR
  info["eigen_dir"] = TCPP_EIGEN_DIR;
#endif
  info["simd"] = Eigen::SimdInstructionSetsInUse();
  info["hardware_threads"] = std::to_string(std::thread::hardware_concurrency());
  // the instruction-set level (isa.hpp) and what runs at it; "kernel." keys become the
  // "kernels" dictionary of the Python build_info()
  info["isa"] = isa_name(active_isa());
  info["isa_cpu"] = isa_name(cpu_isa());
  info["kernel.f32_gemm"] = f32::kernel_name(f32::active_kernel());
  info["kernel.bf16_gemm"] = bf16::supported() ? bf16::kernel_name(bf16::active_kernel()) : "unavailable";
  info["kernel.decode_float32"] = have_decode_kernels() ? decode_kernels_isa() : "eigen";
  info["kernel.decode_int8"] = compute_type_kernel(ComputeType::Int8);
  info["kernel.decode_bf16"] = compute_type_kernel(ComputeType::BFloat16);
  return info;
}

}  // namespace transformer

#include "bindings.hpp"
#include "transformer/positional_encoding.hpp"
#include "transformer/runtime.hpp"

namespace transformer::bindings {

void bind_runtime(py::module_& m) {
  m.def("set_num_threads", &set_num_threads, py::arg("n"),
        "Set the number of threads used by OpenMP loops and Eigen's GEMM.");
  m.def("get_num_threads", &get_num_threads, "Number of threads the core will use.");
  m.def("build_info", &build_info, "Compiler, flags, OpenMP, Eigen version and SIMD level.");
}

void bind_positional_encoding(py::module_& m) {
  m.def(
      "positional_encoding",
      [](long long length, long long depth, const std::string& layout, const std::string& dtype) {
        const PositionalLayout lay = parse_positional_layout(layout);
        if (dtype == "float32") {
          Matrix<float> pe;
          {
            py::gil_scoped_release release;
            pe = positional_encoding<float>(length, depth, lay);
          }
          return py::array(copy_out<float>(pe.data(), {pe.rows(), pe.cols()}));
        }
        if (dtype == "float64") {
          Matrix<double> pe;
          {
            py::gil_scoped_release release;
            pe = positional_encoding<double>(length, depth, lay);
          }
          return py::array(copy_out<double>(pe.data(), {pe.rows(), pe.cols()}));
        }
        throw py::value_error("positional_encoding: dtype must be 'float32' or 'float64', got '" + dtype + "'");
      },
      py::arg("length"), py::arg("depth"), py::arg("layout") = "interleaved",
      py::arg("dtype") = "float32");
}

}  // namespace transformer::bindings

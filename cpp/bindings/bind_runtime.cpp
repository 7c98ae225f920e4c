#include "bindings.hpp"
#include "transformer/core/random.hpp"
#include "transformer/core/runtime.hpp"
#include "transformer/kernels/bf16_gemm.hpp"
#include "transformer/kernels/build_info.hpp"
#include "transformer/kernels/decode_kernels.hpp"
#include "transformer/kernels/f32_gemm.hpp"
#include "transformer/kernels/isa.hpp"
#include "transformer/kernels/quantized_linear.hpp"
#include "transformer/layers/positional_encoding.hpp"

namespace transformer::bindings {

namespace {

// The operands of the tests' matrix-product bindings: a and b (2-D; op(a) is (M, K), op(b) is
// (K, N)) and the (M, N) output, a copy of c with beta 1 when c is given, else all `fill` with
// beta 0.
struct MatmulOperands {
  RowsInput<float> a, b;
  Index M = 0, N = 0, K = 0;
  Matrix<float> out;
  float beta = 0.0f;
};

MatmulOperands matmul_operands(const char* who, const py::handle& a, const py::handle& b, bool trans_a, bool trans_b,
                               const py::handle& c, float fill) {
  MatmulOperands o;
  o.a = as_rows<float>(a, who, "a", -1);
  o.b = as_rows<float>(b, who, "b", -1);
  if (o.a.lead_shape.size() != 1 || o.b.lead_shape.size() != 1)
    throw py::value_error(concat(who, ": a and b must be 2-D"));
  o.M = trans_a ? o.a.cols : o.a.rows;
  o.K = trans_a ? o.a.rows : o.a.cols;
  const Index Kb = trans_b ? o.b.cols : o.b.rows;
  o.N = trans_b ? o.b.rows : o.b.cols;
  if (o.K != Kb)
    throw py::value_error(concat(who, ": op(a) is (", o.M, ", ", o.K, ") but op(b) is (", Kb, ", ", o.N, ")"));
  o.out = Matrix<float>::Constant(o.M, o.N, fill);
  if (!c.is_none()) {
    auto cs = as_rows<float>(c, who, "c", o.N);
    if (cs.lead_shape.size() != 1 || cs.rows != o.M)
      throw py::value_error(concat(who, ": c must have shape (", o.M, ", ", o.N, ")"));
    std::copy(cs.array.data(), cs.array.data() + o.M * o.N, o.out.data());
    o.beta = 1.0f;
  }
  return o;
}

// The operands of the tests' decoding-product bindings, y = x W^T + b: W (N, K), x (M, K), b (N).
struct LinearOperands {
  RowsInput<float> w, x, b;
};

LinearOperands linear_operands(const char* who, const py::handle& x, const py::handle& W, const py::handle& b) {
  LinearOperands o;
  o.w = as_rows<float>(W, who, "W", -1);
  o.x = as_rows<float>(x, who, "x", o.w.cols);
  o.b = as_rows<float>(b, who, "b", o.w.rows);
  if (o.w.lead_shape.size() != 1 || o.x.lead_shape.size() != 1 || o.b.rows != 1 || !o.b.lead_shape.empty())
    throw py::value_error(concat(who, ": x and W must be 2-D, b 1-D"));
  return o;
}

}  // namespace

void bind_runtime(py::module_& m) {
  // A TRANSFORMER_CPP_ISA that names no level, or one above this CPU's, stops the import with its
  // message (isa.hpp) rather than at the first product.
  try {
    (void)active_isa();
  } catch (const std::invalid_argument& e) {
    throw py::import_error(std::string("transformer_cpp: ") + e.what());
  }
  m.def(
      "set_num_threads",
      [](const py::object& n) {
        set_num_threads(static_cast<int>(int_arg(n, "set_num_threads", "n", 1, kMaxThreads)));
      },
      py::arg("n"), "Set the number of threads used by OpenMP loops and Eigen's GEMM.");
  m.def("get_num_threads", &get_num_threads, "Number of threads the core will use.");
  // More threads than the address space holds (OMP_NUM_THREADS=100000 under ulimit -v) would kill
  // the process at the first parallel loop: the importing thread starts with what fits. (The
  // package lowers OMP_NUM_THREADS before loading this module too, for the threads started later.)
  const int asked = get_num_threads(), most = affordable_threads();
  if (asked > most) {
    set_num_threads(most);
    if (PyErr_WarnEx(PyExc_RuntimeWarning,
                     concat("transformer_cpp: ", asked,
                            " threads (OMP_NUM_THREADS) do not fit in the address space "
                            "this process may still map (ulimit -v); using ",
                            most)
                         .c_str(),
                     1) != 0)
      throw py::error_already_set();
  }
  m.def("build_info", &build_info, "Compiler, flags, OpenMP, Eigen version and SIMD level.");
  // The core's memory check, for the Python modules that allocate from user sizes.
  m.def("_memory_limit_bytes", &memory_limit_bytes, "Bytes this process may still use (see checks.hpp).");
  m.def(
      "_check_memory",
      [](const std::string& who, const std::string& what, double bytes) { check_memory(who, what, bytes); },
      py::arg("who"), py::arg("what"), py::arg("bytes"),
      "ValueError '<who>: <what> needs N, more than the M of memory available' when bytes > the limit.");

  // The decoding kernels on their own, for the tests that compare them with NumPy.
  m.def("_have_decode_kernels", &have_decode_kernels,
        "Whether the AVX2 or AVX-512 decoding kernels may run (build and instruction-set level).");
  m.def(
      "_decode_linear",
      [](const py::handle& x, const py::handle& W, const py::handle& b, const std::string& kernel) {
        const LinearOperands o = linear_operands("_decode_linear", x, W, b);
        const RowsInput<float>&w = o.w, &xs = o.x, &bs = o.b;
        Matrix<float> y(xs.rows, w.rows);
        if (kernel == "packed" || kernel == "packed_reference") {
          PackedLinear<float> p;
          without_gil([&] {
            p.pack(w.array.data(), w.rows, w.cols, w.cols, bs.array.data());
            if (kernel == "packed")
              p.apply(xs.array.data(), xs.rows, xs.cols, y.data(), y.cols());
            else
              p.apply_reference(xs.array.data(), xs.rows, xs.cols, y.data(), y.cols());
          });
        } else if (kernel == "few_rows") {
          if (!have_decode_kernels())
            throw py::value_error(std::string("_decode_linear: no few_rows kernel at instruction-set level '") +
                                  isa_name(active_isa()) + "'");
          if (w.cols % 16 != 0) throw py::value_error("_decode_linear: few_rows needs K % 16 == 0");
          without_gil([&] {
            few_rows_linear(xs.array.data(), xs.rows, w.cols, w.array.data(), w.rows, bs.array.data(), y.data());
          });
        } else {
          throw py::value_error("_decode_linear: kernel must be 'packed', 'packed_reference' or 'few_rows'");
        }
        return copy_out<float>(y.data(), {y.rows(), y.cols()});
      },
      py::arg("x"), py::arg("W"), py::arg("b"), py::arg("kernel"), "y = x W^T + b by one decoding kernel (tests).");
  // The int8 / bf16 decoding kernels on their own (quantized_linear.hpp), for the tests.
  m.def(
      "_compute_type_supported",
      [](const std::string& name) { return compute_type_supported(parse_compute_type(name)); }, py::arg("name"),
      "Whether decoding with compute type name ('float32', 'int8', 'bf16') may run here.");
  m.def(
      "_compute_type_unsupported_reason",
      [](const std::string& name) { return compute_type_unsupported_reason(parse_compute_type(name)); },
      py::arg("name"), "Why not, or '' when it may.");
  m.def(
      "_quantized_linear",
      [](const py::handle& x, const py::handle& W, const py::handle& b, const std::string& compute_type,
         const std::string& kernel) {
        const LinearOperands o = linear_operands("_quantized_linear", x, W, b);
        const RowsInput<float>&w = o.w, &xs = o.x, &bs = o.b;
        const ComputeType c = parse_compute_type(compute_type);
        if (c == ComputeType::Float32)
          throw py::value_error("_quantized_linear: compute_type must be 'int8' or 'bf16'");
        if (kernel != "kernel" && kernel != "reference" && kernel != "weight")
          throw py::value_error("_quantized_linear: kernel must be 'kernel', 'reference' or 'weight'");
        if (kernel == "kernel" && !compute_type_supported(c))
          throw py::value_error("_quantized_linear: " + compute_type_unsupported_reason(c));
        QuantizedLinear q;
        Matrix<float> y;
        without_gil([&] {
          q.pack(c, w.array.data(), w.rows, w.cols, w.cols, bs.array.data());
          if (kernel == "weight") {  // the dequantised weight (N, K)
            y.resize(w.rows, w.cols);
            for (Index n = 0; n < w.rows; ++n)
              for (Index k = 0; k < w.cols; ++k) y(n, k) = q.weight(n, k);
          } else {
            y.resize(xs.rows, w.rows);
            if (kernel == "kernel")
              q.apply(xs.array.data(), xs.rows, xs.cols, y.data(), y.cols());
            else
              q.apply_reference(xs.array.data(), xs.rows, xs.cols, y.data(), y.cols());
          }
        });
        return copy_out<float>(y.data(), {y.rows(), y.cols()});
      },
      py::arg("x"), py::arg("W"), py::arg("b"), py::arg("compute_type"), py::arg("kernel"),
      "y = x W^T + b with int8 or bf16 weights: the kernel, its reference, or the dequantised weight (tests).");
  // The bfloat16 matrix-product kernel on its own, for the tests that compare it with its reference.
  m.def("_bf16_supported", &bf16::supported, "Whether the bfloat16 kernel may run here (CPU, build, environment).");
  m.def("_bf16_unsupported_reason", &bf16::unsupported_reason, "Why not, or '' when it may.");
  m.def("_bf16_amx_supported", &bf16::amx_supported, "Whether the AMX tiles compute the bf16 products here.");
  m.def("_bf16_amx_cpu_supported", &bf16::amx_cpu_supported,
        "Whether the AMX tiles can run here (CPU, OS, build), whatever the environment says.");
  m.def("_bf16_amx_unsupported_reason", &bf16::amx_unsupported_reason, "Why not, or '' when they do.");
  m.def(
      "_bf16_kernel", [] { return std::string(bf16::kernel_name(bf16::active_kernel())); },
      "The kernel of the bf16 products: 'amx' or 'avx512_bf16'.");
  m.def(
      "_bf16_matmul",
      [](const py::handle& a, const py::handle& b, bool trans_a, bool trans_b, const py::handle& c,
         const std::string& kernel) {
        MatmulOperands o = matmul_operands("_bf16_matmul", a, b, trans_a, trans_b, c, 0.0f);
        const Index M = o.M, N = o.N, K = o.K;
        if (kernel == "auto" || kernel == "avx512_bf16" || kernel == "amx") {
          if (!bf16::cpu_supported()) throw py::value_error("_bf16_matmul: " + bf16::unsupported_reason());
          if (kernel == "amx" && !bf16::amx_cpu_supported())
            throw py::value_error("_bf16_matmul: " + bf16::amx_unsupported_reason());
          const bf16::Kernel which = kernel == "amx"           ? bf16::Kernel::Amx
                                     : kernel == "avx512_bf16" ? bf16::Kernel::Avx512Bf16
                                                               : bf16::Kernel::Auto;
          without_gil([&] {
            bf16::gemm(M, N, K, o.a.array.data(), o.a.cols, trans_a, o.b.array.data(), o.b.cols, trans_b, o.beta,
                       o.out.data(), N, which);
          });
        } else if (kernel == "reference") {
          without_gil([&] {
            bf16::gemm_reference(M, N, K, o.a.array.data(), o.a.cols, trans_a, o.b.array.data(), o.b.cols, trans_b,
                                 o.beta, o.out.data(), N);
          });
        } else {
          throw py::value_error("_bf16_matmul: kernel must be 'auto', 'avx512_bf16', 'amx' or 'reference'");
        }
        return copy_out<float>(o.out.data(), {M, N});
      },
      py::arg("a"), py::arg("b"), py::arg("trans_a"), py::arg("trans_b"), py::arg("c"), py::arg("kernel"),
      "op(a) op(b) (+ c) with bfloat16 inputs and float32 sums (tests).");
  // The float32 matrix-product kernel of the dense layers on its own (tests against its reference).
  m.def("_f32_kernel_supported", &f32::supported,
        "Whether a float32 kernel (AVX-512 or AVX2) runs the dense layers' products here (CPU, build, environment).");
  m.def(
      "_f32_kernel_runs",
      [](const std::string& kernel) {
        if (kernel == "avx512") return f32::kernel_runs(f32::Kernel::Avx512);
        if (kernel == "avx2") return f32::kernel_runs(f32::Kernel::Avx2);
        throw py::value_error("_f32_kernel_runs: kernel must be 'avx512' or 'avx2', got '" + kernel + "'");
      },
      py::arg("kernel"), "Whether the float32 kernel `kernel` can run here (CPU, build, instruction-set level).");
  m.def(
      "_f32_matmul",
      [](const py::handle& a, const py::handle& b, bool trans_a, bool trans_b, const py::handle& c,
         const py::handle& bias, const std::string& kernel) {
        const char* who = "_f32_matmul";
        // NaN: beta 0 must not read C
        MatmulOperands o = matmul_operands(who, a, b, trans_a, trans_b, c, std::nanf(""));
        const Index M = o.M, N = o.N, K = o.K;
        RowVector<float> bias_values;
        if (!bias.is_none()) {
          auto bv = as_rows<float>(bias, who, "bias", N);
          if (!bv.lead_shape.empty()) throw py::value_error(concat("_f32_matmul: bias must have shape (", N, ",)"));
          bias_values = Eigen::Map<const RowVector<float>>(bv.array.data(), N);
        }
        const float* bias_ptr = bias.is_none() ? nullptr : bias_values.data();
        if (kernel == "auto" || kernel == "avx512" || kernel == "avx2") {
          f32::Kernel k = f32::active_kernel();
          if (kernel == "avx512") k = f32::Kernel::Avx512;
          if (kernel == "avx2") k = f32::Kernel::Avx2;
          if (k == f32::Kernel::Eigen || !f32::kernel_runs(k))
            throw py::value_error(
                concat("_f32_matmul: the float32 ", kernel == "auto" ? "" : kernel + " ", "kernel cannot run here"));
          without_gil([&] {
            f32::gemm_with(k, M, N, K, o.a.array.data(), o.a.cols, trans_a, o.b.array.data(), o.b.cols, trans_b, o.beta,
                           o.out.data(), N, bias_ptr);
          });
        } else if (kernel == "reference") {
          without_gil([&] {
            f32::gemm_reference(M, N, K, o.a.array.data(), o.a.cols, trans_a, o.b.array.data(), o.b.cols, trans_b,
                                o.beta, o.out.data(), N, bias_ptr);
          });
        } else {
          throw py::value_error("_f32_matmul: kernel must be 'auto', 'avx512', 'avx2' or 'reference'");
        }
        return copy_out<float>(o.out.data(), {M, N});
      },
      py::arg("a"), py::arg("b"), py::arg("trans_a"), py::arg("trans_b"), py::arg("c"), py::arg("bias"),
      py::arg("kernel"), "op(a) op(b) (+ c) (+ bias) in float32 (tests).");
  m.def(
      "_round_to_bf16",
      [](const py::handle& x) {
        auto a = as_floats<float>(x, "_round_to_bf16", "x", -1);
        py::array_t<float> out(std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim()));
        float* o = out.mutable_data();
        for (py::ssize_t i = 0; i < a.size(); ++i) o[i] = bf16::round_to_bf16(a.data()[i]);
        return out;
      },
      py::arg("x"), "Each value rounded to the nearest bfloat16, ties to even (tests).");
  m.def(
      "_splitmix64", [](std::uint64_t x) { return splitmix64(x); }, py::arg("x"),
      "splitmix64 of x, the core's one seed mixer (random.hpp); Python derives seeds with it.");
  m.def(
      "_fingerprint",
      [](const py::array& data, std::uint64_t seed) {
        if (!(data.flags() & py::array::c_style)) throw py::value_error("_fingerprint: data must be C-contiguous");
        return fingerprint(data.data(), static_cast<std::size_t>(data.nbytes()), seed);
      },
      py::arg("data"), py::arg("seed") = 0, "64-bit fingerprint of a contiguous buffer's bytes (tests).");
  m.def(
      "_first_argmax",
      [](const py::handle& v) {
        auto a = as_rows<float>(v, "_first_argmax", "v", -1);
        if (!a.lead_shape.empty() || a.cols < 1) throw py::value_error("_first_argmax: v must be 1-D and non-empty");
        return first_argmax(a.array.data(), a.cols);
      },
      py::arg("v"), "Index of the first largest value (tests of the decoding argmax).");
}

// The table as a NumPy array that owns the matrix (no second copy of a table that may be large).
template <typename T>
py::array table_array(Index length, Index depth, PositionalLayout lay) {
  auto pe = std::make_unique<Matrix<T>>();
  without_gil([&] { *pe = positional_encoding<T>(length, depth, lay); });
  const std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(pe->rows()), static_cast<py::ssize_t>(pe->cols())};
  T* data = pe->data();
  py::capsule owner(pe.release(), [](void* p) { delete static_cast<Matrix<T>*>(p); });
  return py::array_t<T>(shape, data, owner);
}

void bind_positional_encoding(py::module_& m) {
  m.def(
      "positional_encoding",
      [](const py::object& length_arg, const py::object& depth_arg, const py::object& layout_arg,
         const py::object& dtype_arg) {
        const char* who = "positional_encoding";
        const Index length = int_arg(length_arg, who, "length"), depth = int_arg(depth_arg, who, "depth");
        const PositionalLayout lay = parse_positional_layout(str_arg(layout_arg, who, "layout"));
        const std::string dtype = str_arg(dtype_arg, who, "dtype");
        if (dtype == "float32") return table_array<float>(length, depth, lay);
        if (dtype == "float64") return table_array<double>(length, depth, lay);
        throw py::value_error("positional_encoding: dtype must be 'float32' or 'float64', got '" + dtype + "'");
      },
      py::arg("length"), py::arg("depth"), py::arg("layout") = "interleaved", py::arg("dtype") = "float32");
}

}  // namespace transformer::bindings

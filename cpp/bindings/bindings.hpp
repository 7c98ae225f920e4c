// bindings.hpp — shared helpers for the pybind11 module `_core`. Bindings are thin: they check
// and convert NumPy input, release the GIL around heavy work and call the C++ core.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <climits>
#include <cstdint>
#include <string>

#include "transformer/checks.hpp"
#include "transformer/tensor.hpp"

namespace py = pybind11;

namespace transformer {
class Limit;
}

namespace transformer::bindings {

// One registration function per family; module.cpp calls them all.
void bind_runtime(py::module_& m);
void bind_positional_encoding(py::module_& m);
void bind_parameter(py::module_& m);
void bind_layers(py::module_& m);        // Linear, Dropout, attention, feed-forward, encoder/decoder
void bind_basic_layers(py::module_& m);  // LayerNorm, ReLU, softmax, embeddings, loss, Adam
void bind_config(py::module_& m);        // Limit, ConfigField, TransformerConfig, OptimizerConfig
void bind_model(py::module_& m);         // Transformer

// A short description of a NumPy array for error messages: "float64 array of shape (2, 3)".
std::string describe(const py::array& a);

// Numbers arrive as Python objects, so that any int (even one beyond 64 bits), NumPy scalar or
// wrong type gets an error naming the argument and what it may be, never pybind11's list of
// signatures. int_arg: an integer in [lo, hi] (TypeError for non-integers and bools, ValueError
// out of range); seed_arg: an integer in [0, 2**64); float_arg: a real number (the core checks
// its range, e.g. finite and >= 0).
// (lo = kAnyInt: any 64-bit value, the core then says what it accepts.)
constexpr long long kAnyInt = LLONG_MIN;
long long int_arg(const py::handle& v, const char* who, const char* name, long long lo = kAnyInt,
                  long long hi = LLONG_MAX);
std::uint64_t seed_arg(const py::handle& v, const char* who, const char* name = "seed");
double float_arg(const py::handle& v, const char* who, const char* name);
// A str argument (TypeError naming it otherwise).
std::string str_arg(const py::handle& v, const char* who, const char* name);

// v as an int, float, bool or str if `limit` allows it, else TypeError (a value of the wrong type) or
// ValueError (out of range) with Limit::message: "<owner>: <name> must be <what is allowed>, got <v>".
py::object check_setting(const Limit& limit, const std::string& owner, const std::string& name, const py::handle& v);

// One call at a time per core object. Layers and models keep activations and scratch as members,
// so two threads in one object would race on them (double free, segfault). Every call that
// releases the GIL, or that changes what such a call reads, holds an InUse for its whole duration;
// it is created and destroyed with the GIL held, so the flag needs no lock. A call from another
// Python thread meanwhile raises RuntimeError. `what` names the kind of object ("layer").
inline void check_idle(bool busy, const char* who, const char* what) {
  if (busy)
    throw std::runtime_error(concat(who, ": this ", what, " is in use by another thread (a C++ core ", what,
                                    " runs one call at a time; use one ", what, " per thread)"));
}

class InUse {
 public:
  InUse(bool& busy, const char* who, const char* what = "layer") : busy_(busy) {
    check_idle(busy, who, what);
    busy = true;
  }
  ~InUse() { busy_ = false; }
  InUse(const InUse&) = delete;
  InUse& operator=(const InUse&) = delete;

 private:
  bool& busy_;
};

// Token ids: any integer dtype of the given rank, returned as a C-contiguous int64 array (no
// copy when it already is one). Floats, bools and other kinds raise TypeError.
py::array_t<std::int64_t, py::array::c_style> as_tokens(const py::handle& obj, const char* who, const char* arg,
                                                        int ndim);

// Floating input of the given rank (ndim < 0: any rank) as a C-contiguous array of T (no copy
// when dtype and layout already match; other float dtypes are converted). Integers, bools and
// other kinds raise TypeError.
template <typename T>
py::array_t<T, py::array::c_style> as_floats(const py::handle& obj, const char* who, const char* arg, int ndim);

// A NumPy view of `data` with the given shape that keeps `owner` alive.
template <typename T>
py::array_t<T> view(T* data, const std::vector<Index>& shape, py::handle owner);

// A fresh NumPy array holding a copy of `data`.
template <typename T>
py::array_t<T> copy_out(const T* data, const std::vector<Index>& shape);

// Class names in _core carry the scalar type: Linear_float32, Linear_float64.
template <typename T>
constexpr const char* dtype_suffix() {
  return sizeof(T) == 4 ? "_float32" : "_float64";
}
template <typename T>
std::string class_name(const char* base) {
  return std::string(base) + dtype_suffix<T>();
}

// A parameter as Python sees it: name, and writable NumPy views of value and gradient that keep
// the owning layer alive.
struct PyParameter {
  std::string name;
  py::array value;
  py::array grad;
};

// OrderedDict name -> PyParameter for a C++ parameter list owned by `owner`.
template <typename T>
py::object parameters_dict(const ParameterList<T>& params, py::handle owner) {
  py::object od = py::module_::import("collections").attr("OrderedDict")();
  for (const auto& p : params) {
    PyParameter pp{p.name, view<T>(p.value, p.shape, owner), view<T>(p.grad, p.shape, owner)};
    od[py::str(p.name)] = py::cast(std::move(pp));
  }
  return od;
}

// An array the core reads again later (in backward) must not change under it: a copy, unless the
// conversion already made one that nothing else holds.
template <typename T>
py::array_t<T, py::array::c_style> owned(py::array_t<T, py::array::c_style> a) {
  if (a.owndata() && a.ref_count() == 1) return a;
  py::array_t<T, py::array::c_style> copy(std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim()));
  std::copy(a.data(), a.data() + a.size(), copy.mutable_data());
  return copy;
}

// Float input of shape (..., cols) seen as an (N, cols) matrix; `array` keeps the memory alive.
template <typename T>
struct RowsInput {
  py::array_t<T, py::array::c_style> array;
  std::vector<Index> lead_shape;  // the leading dimensions (...)
  Index rows = 0, cols = 0;
  ConstMatrixMap<T> map() const { return ConstMatrixMap<T>(array.data(), rows, cols); }
};

template <typename T>
RowsInput<T> as_rows(const py::handle& obj, const char* who, const char* arg, Index cols) {
  RowsInput<T> r;
  r.array = as_floats<T>(obj, who, arg, -1);
  if (r.array.ndim() < 1)
    throw py::value_error(concat(who, ": ", arg, " must have at least 1 dimension, got a scalar"));
  const Index last = r.array.shape(r.array.ndim() - 1);
  if (cols >= 0 && last != cols)
    throw py::value_error(concat(who, ": ", arg, " must have last dimension ", cols, ", got ", describe(r.array)));
  r.cols = last;
  r.rows = 1;
  for (py::ssize_t i = 0; i + 1 < r.array.ndim(); ++i) {
    r.lead_shape.push_back(r.array.shape(i));
    r.rows *= r.array.shape(i);
  }
  return r;
}

// Copy an (N, C) matrix out as a NumPy array of shape (*lead, C).
template <typename T>
py::array_t<T> rows_out(const Matrix<T>& m, std::vector<Index> lead) {
  lead.push_back(m.cols());
  return copy_out<T>(m.data(), lead);
}

// Python-side state of a layer: the C++ layer plus the input array(s) of the last forward, which
// the layer reads again in backward (it caches pointers, not copies; they are owned copies, see
// owned()).
template <typename Layer>
struct Holder {
  template <typename... Args>
  explicit Holder(Args&&... args) : layer(std::forward<Args>(args)...) {}
  Layer layer;
  py::object saved;
  std::vector<py::object> keep;  // further arrays the layer points into until backward
  std::vector<Index> lead;
  bool has_forward = false;
  bool flag = false;  // layer-specific (MultiHeadAttention: the last forward was cross-attention)
  bool busy = false;  // a call is running on this layer (see InUse)
};

// A layer input: finite (ValueError naming it otherwise) and, with `keep`, owned by the layer.
template <typename T>
void check_input(RowsInput<T>& r, const char* who, const char* arg, bool keep) {
  check_finite_input(r.array.data(), static_cast<Index>(r.array.size()), who, arg);
  if (keep) r.array = owned<T>(r.array);
}

// What a layer's forward checks before it runs: that the buffers it will keep (`elements` of
// type T, estimated from the shapes by the helpers of checks.hpp) fit in memory, and that its
// weights are finite.
template <typename T, typename Layer>
void check_forward(Layer& layer, const char* who, const std::string& what, double elements) {
  check_memory(who, what, elements * static_cast<double>(sizeof(T)));
  check_finite_parameters(layer.parameters(), who);
}

// A layer output that is not finite comes from finite inputs and weights only by overflow.
template <typename T>
void check_output(const Matrix<T>& y, const char* who) {
  const Index i = first_nonfinite(y.data(), y.size());
  if (i >= 0)
    throw NonFiniteError(concat(who, ": the output is not finite (", static_cast<double>(y.data()[i]),
                                " at flat index ", i,
                                "): the computation overflowed; the inputs or weights are "
                                "too large"));
}

// parameters() of a layer that has none.
inline py::object empty_parameters() { return py::module_::import("collections").attr("OrderedDict")(); }

inline std::vector<Index> shape_of(const py::array& a) { return std::vector<Index>(a.shape(), a.shape() + a.ndim()); }

// "(2, 3)", "(5,)", "()" as Python prints shapes.
inline std::string shape_str(const std::vector<Index>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// What a backward returns (a gradient `g` of an input) and what it accumulates (the parameter
// gradients) must be finite; from finite inputs, weights and dout they are not only after an
// overflow, which is then an error instead of NaN passed on.
template <typename T>
void check_gradient(const Matrix<T>& g, const char* who, const char* what = "input gradient") {
  const Index i = first_nonfinite(g.data(), g.size());
  if (i >= 0)
    throw NonFiniteError(concat(who, ": the ", what, " is not finite (", static_cast<double>(g.data()[i]),
                                " at flat index ", i,
                                "): the computation overflowed; the inputs, weights or dout "
                                "are too large"));
}
template <typename T>
void check_parameter_gradients(const ParameterList<T>& params, const char* who) {
  for (const auto& p : params)
    if (first_nonfinite(p.grad, p.size()) >= 0)
      throw NonFiniteError(concat(who, ": the gradient of parameter '", p.name,
                                  "' is not finite: the computation "
                                  "overflowed (or it has accumulated too much: zero_grad()); the inputs, weights "
                                  "or dout are too large"));
}

// dout of backward() must have the shape of the last output: (*lead, cols).
template <typename T>
RowsInput<T> dout_rows(const py::handle& dout, const char* who, Index cols, const std::vector<Index>& lead) {
  auto d = as_rows<T>(dout, who, "dout", cols);
  check_input(d, who, "dout", false);
  if (d.lead_shape != lead) {
    std::vector<Index> want = lead;
    want.push_back(d.cols);
    throw py::value_error(
        concat(who, ": dout must have the shape of the last output ", shape_str(want), ", got ", describe(d.array)));
  }
  return d;
}

}  // namespace transformer::bindings

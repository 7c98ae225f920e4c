// bindings.hpp — shared helpers for the pybind11 module `_core`. Bindings are thin: they check
// and convert NumPy input, release the GIL around heavy work and call the C++ core.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>

#include "transformer/tensor.hpp"

namespace py = pybind11;

namespace transformer::bindings {

// One registration function per family; module.cpp calls them all.
void bind_runtime(py::module_& m);
void bind_positional_encoding(py::module_& m);
void bind_parameter(py::module_& m);
void bind_layers(py::module_& m);        // Linear, Dropout, attention, feed-forward, encoder/decoder
void bind_basic_layers(py::module_& m);  // LayerNorm, ReLU, softmax, embeddings, loss, Adam
void bind_model(py::module_& m);         // Transformer

// A short description of a NumPy array for error messages: "float64 array of shape (2, 3)".
std::string describe(const py::array& a);

// Token ids: any integer dtype of the given rank, returned as a C-contiguous int64 array (no
// copy when it already is one). Floats, bools and other kinds raise TypeError.
py::array_t<std::int64_t, py::array::c_style> as_tokens(const py::handle& obj, const char* who,
                                                        const char* arg, int ndim);

// Floating input of the given rank (ndim < 0: any rank) as a C-contiguous array of T (no copy
// when dtype and layout already match; other float dtypes are converted). Integers, bools and
// other kinds raise TypeError.
template <typename T>
py::array_t<T, py::array::c_style> as_floats(const py::handle& obj, const char* who,
                                             const char* arg, int ndim);

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
    throw py::value_error(concat(who, ": ", arg, " must have last dimension ", cols, ", got ",
                                 describe(r.array)));
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
// the layer reads again in backward (it caches pointers, not copies).
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
};

// parameters() of a layer that has none.
inline py::object empty_parameters() { return py::module_::import("collections").attr("OrderedDict")(); }

inline std::vector<Index> shape_of(const py::array& a) { return std::vector<Index>(a.shape(), a.shape() + a.ndim()); }

// "(2, 3)", "(5,)", "()" as Python prints shapes.
inline std::string shape_str(const std::vector<Index>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// dout of backward() must have the shape of the last output: (*lead, cols).
template <typename T>
RowsInput<T> dout_rows(const py::handle& dout, const char* who, Index cols, const std::vector<Index>& lead) {
  auto d = as_rows<T>(dout, who, "dout", cols);
  if (d.lead_shape != lead) {
    std::vector<Index> want = lead;
    want.push_back(d.cols);
    throw py::value_error(concat(who, ": dout must have the shape of the last output ", shape_str(want),
                                 ", got ", describe(d.array)));
  }
  return d;
}

}  // namespace transformer::bindings

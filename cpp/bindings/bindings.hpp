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

}  // namespace transformer::bindings

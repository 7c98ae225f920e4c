#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "bindings.hpp"
#include "transformer/attention/kinds.hpp"

namespace transformer::bindings {

std::string describe(const py::array& a) {
  std::string s = py::str(a.dtype()).cast<std::string>() + " array of shape (";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) {
    s += std::to_string(a.shape(i));
    if (i + 1 < a.ndim() || a.ndim() == 1) s += a.ndim() == 1 ? "," : ", ";
  }
  return s + ")";
}

namespace {
std::string type_name(const py::handle& v) { return py::str(py::type::of(v).attr("__name__")).cast<std::string>(); }

// v checked by Limit::integer(lo[, hi]). Without hi, an integer the C++ type cannot hold (beyond
// [lo, most]; below lo only when lo is the type's own minimum) is refused with that range written
// out instead: "an integer >= 0" would not say why 2**70 is refused.
py::object integer_arg(const py::handle& v, const char* who, const char* name, std::int64_t lo,
                       std::optional<std::uint64_t> hi, std::uint64_t most) {
  if (!hi && !PyBool_Check(v.ptr()) && PyIndex_Check(v.ptr())) {
    py::object i = py::reinterpret_steal<py::object>(PyNumber_Index(v.ptr()));
    if (!i) throw py::error_already_set();
    const bool below = lo == std::numeric_limits<std::int64_t>::min() && py_less(i, py::int_(lo));
    if (below || py_less(py::int_(most), i))
      throw py::value_error(Limit::integer(lo, most).message(who, name, value_repr(i)));
  }
  return check_setting(Limit::integer(lo, hi), who, name, v);
}
}  // namespace

std::string value_repr(const py::handle& v) {
  std::string s;
  try {
    s = py::repr(v).cast<std::string>();
  } catch (const py::error_already_set&) {
    s = "<" + type_name(v) + ">";
  }
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

std::int64_t int_arg(const py::handle& v, const char* who, const char* name, std::int64_t lo,
                     std::optional<std::int64_t> hi) {
  const auto most = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  std::optional<std::uint64_t> high;
  if (hi) high = static_cast<std::uint64_t>(*hi);
  return integer_arg(v, who, name, lo, high, most).cast<std::int64_t>();
}

std::uint64_t seed_arg(const py::handle& v, const char* who, const char* name) {
  return integer_arg(v, who, name, 0, std::nullopt, std::numeric_limits<std::uint64_t>::max()).cast<std::uint64_t>();
}

double float_arg(const py::handle& v, const char* who, const char* name, const Limit& limit) {
  return check_setting(limit, who, name, v).cast<double>();
}

std::string str_arg(const py::handle& v, const char* who, const char* name) {
  if (!PyUnicode_Check(v.ptr()))
    throw py::type_error(concat(who, ": ", name, " must be a str, got ", type_name(v), " ", value_repr(v)));
  return v.cast<std::string>();
}

py::array_t<std::int64_t, py::array::c_style> as_tokens(const py::handle& obj, const char* who, const char* arg,
                                                        int ndim) {
  py::array a = py::array::ensure(obj);
  if (!a) throw py::type_error(concat(who, ": ", arg, " must be an integer array"));
  const char kind = a.dtype().kind();
  if (kind != 'i' && kind != 'u')
    throw py::type_error(concat(who, ": ", arg, " must hold integer token ids, got ", describe(a)));
  if (a.ndim() != ndim)
    throw py::value_error(concat(who, ": ", arg, " must have ", ndim, " dimensions, got ", describe(a)));
  if (kind == 'u' && a.itemsize() == 8) {
    // beyond 2**63 - 1 a cast to int64 would wrap to a negative id and the message would name it
    auto u = py::array_t<std::uint64_t, py::array::c_style | py::array::forcecast>::ensure(a);
    const std::uint64_t* p = u.data();
    for (py::ssize_t i = 0; i < u.size(); ++i)
      if (p[i] > static_cast<std::uint64_t>(INT64_MAX))
        throw py::value_error(
            concat(who, ": ", arg, " holds the token id ", p[i], " at flat index ", i, ", beyond any vocabulary"));
  }
  return py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
}

template <typename T>
py::array_t<T, py::array::c_style> as_floats(const py::handle& obj, const char* who, const char* arg, int ndim) {
  py::array a = py::array::ensure(obj);
  if (!a) throw py::type_error(concat(who, ": ", arg, " must be a floating-point array"));
  if (a.dtype().kind() != 'f')
    throw py::type_error(concat(who, ": ", arg, " must be a floating-point array, got ", describe(a)));
  if (ndim >= 0 && a.ndim() != ndim)
    throw py::value_error(concat(who, ": ", arg, " must have ", ndim, " dimensions, got ", describe(a)));
  return py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(a);
}

template <typename T>
py::array_t<T> view(T* data, const std::vector<Index>& shape, py::handle owner) {
  std::vector<py::ssize_t> sh(shape.begin(), shape.end());
  return py::array_t<T>(sh, data, owner);
}

template <typename T>
py::array_t<T> copy_out(const T* data, const std::vector<Index>& shape) {
  std::vector<py::ssize_t> sh(shape.begin(), shape.end());
  py::array_t<T> out(sh);
  std::copy(data, data + out.size(), out.mutable_data());
  return out;
}

namespace {
// What the attention kinds' bind files registered. A fixed table (constant-initialised, so that
// registering at load time cannot throw); more kinds than it holds is an error at import.
struct KindBinding {
  const char* kind;
  void (*bind)(py::module_&);
};
constexpr size_t kMaxKindBindings = 32;
std::array<KindBinding, kMaxKindBindings> kind_bindings{};
size_t n_kind_bindings = 0;
}  // namespace

AttentionKindBinding::AttentionKindBinding(const char* kind, void (*bind)(py::module_&)) noexcept {
  if (n_kind_bindings < kMaxKindBindings) kind_bindings[n_kind_bindings] = {kind, bind};
  ++n_kind_bindings;
}

void bind_attention_kind_classes(py::module_& m) {
  if (n_kind_bindings > kMaxKindBindings)
    throw std::logic_error(concat("transformer_cpp._core: ", n_kind_bindings, " attention kinds registered a binding; ",
                                  "module.cpp's table holds ", kMaxKindBindings));
  std::vector<std::string_view> kinds, bound;
  for (const AttentionKind& kind : attention_kinds()) kinds.emplace_back(kind.name);
  for (size_t i = 0; i < n_kind_bindings; ++i) bound.emplace_back(kind_bindings[i].kind);
  if (const std::string problem = kind_binding_problem(kinds, bound); !problem.empty())
    throw std::logic_error("transformer_cpp._core: " + problem);
  for (const AttentionKind& kind : attention_kinds())  // each has exactly one binding
    std::find_if(kind_bindings.begin(), kind_bindings.begin() + n_kind_bindings, [&](const KindBinding& b) {
      return std::string_view(b.kind) == kind.name;
    })->bind(m);
}

void bind_parameter(py::module_& m) {
  py::class_<PyParameter>(m, "Parameter", "A named parameter: writable NumPy views of value and grad.")
      .def_readonly("name", &PyParameter::name)
      .def_readonly("value", &PyParameter::value)
      .def_readonly("grad", &PyParameter::grad)
      .def_property_readonly(
          "shape",
          [](const PyParameter& p) { return py::typing::Tuple<py::int_, py::ellipsis>(p.value.attr("shape")); })
      .def("__repr__", [](const PyParameter& p) { return "Parameter(" + p.name + ", " + describe(p.value) + ")"; });
}

template py::array_t<float, py::array::c_style> as_floats<float>(const py::handle&, const char*, const char*, int);
template py::array_t<double, py::array::c_style> as_floats<double>(const py::handle&, const char*, const char*, int);
template py::array_t<float> view<float>(float*, const std::vector<Index>&, py::handle);
template py::array_t<double> view<double>(double*, const std::vector<Index>&, py::handle);
template py::array_t<float> copy_out<float>(const float*, const std::vector<Index>&);
template py::array_t<double> copy_out<double>(const double*, const std::vector<Index>&);

}  // namespace transformer::bindings

PYBIND11_MODULE(_core, m) {
  m.doc() = "transformer_cpp._core: the C++ core (private; use the transformer_cpp package)";
  using namespace transformer::bindings;
  // NonFiniteError: a FloatingPointError (it is one) and a RuntimeError (what code that catches
  // the core's runtime failures expects)
  py::register_exception<transformer::NonFiniteError>(
      m, "NonFiniteError", py::make_tuple(py::handle(PyExc_FloatingPointError), py::handle(PyExc_RuntimeError)));
  bind_runtime(m);
  bind_positional_encoding(m);
  bind_parameter(m);
  bind_layers(m);
  bind_basic_layers(m);
  bind_config(m);
  bind_model(m);
  bind_attention_kind_classes(m);
  bind_language_model(m);
  bind_reversible(m);
}

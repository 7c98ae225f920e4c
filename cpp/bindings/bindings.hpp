// bindings.hpp — shared helpers for the pybind11 module `_core`. Bindings are thin: they check
// and convert NumPy input, release the GIL around heavy work and call the C++ core.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/typing.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "transformer/core/checks.hpp"
#include "transformer/core/config.hpp"
#include "transformer/core/tensor.hpp"

namespace py = pybind11;

namespace transformer {
enum class AttentionImpl;  // attention/attention.hpp
}

namespace transformer::bindings {

// One registration function per family; module.cpp calls them all.
void bind_runtime(py::module_& m);
void bind_positional_encoding(py::module_& m);
void bind_parameter(py::module_& m);
void bind_layers(py::module_& m);          // Linear, Dropout, attention, feed-forward, encoder/decoder
void bind_basic_layers(py::module_& m);    // LayerNorm, ReLU, softmax, embeddings, loss, Adam
void bind_config(py::module_& m);          // Limit, ConfigField, TransformerConfig, OptimizerConfig
void bind_model(py::module_& m);           // Transformer
void bind_language_model(py::module_& m);  // LanguageModel (decoder-only)
void bind_reversible(py::module_& m);      // ReversibleStack

// The classes of each attention kind (kinds.hpp) are bound by the kind's own bind file, which
// registers its function at load time with one line,
//   const AttentionKindBinding registered("lsh", bind_lsh_attention);
// so that adding a kind touches no list here or in module.cpp. bind_attention_kind_classes calls them in
// the order of the kinds' table, after the layers and before the models; a kind of the table
// without a binding, or a binding of no kind, is an error at import.
struct AttentionKindBinding {
  AttentionKindBinding(const char* kind, void (*bind)(py::module_&)) noexcept;
};
void bind_attention_kind_classes(py::module_& m);

// A short description of a NumPy array for error messages: "float64 array of shape (2, 3)".
std::string describe(const py::array& a);
// repr(v) for a message, cut to 60 characters; a value whose repr fails (an int of more than 4300
// digits) is named by its type: "<int>".
std::string value_repr(const py::handle& v);

// Numbers arrive as Python objects, so that any int (even one beyond 64 bits), NumPy scalar or
// wrong type gets an error naming the argument and what it may be, never pybind11's list of
// signatures. Each is checked by the one validator, Limit (check_setting below), so every message
// reads "<who>: <name> must be <what is allowed>, got <value>" (TypeError for a value of the wrong
// type, ValueError for one out of range):
//   int_arg:   an integer in [lo, hi]; without hi, any that fits in 64 bits (a larger one is
//              refused with the 64-bit bound written out). lo = kAnyInt: any 64-bit value, the core
//              then says what it accepts.
//   seed_arg:  an integer in [0, 2**64).
//   float_arg: a number `limit` allows (limits:: below, the ranges the core checks too).
constexpr std::int64_t kAnyInt = INT64_MIN;
std::int64_t int_arg(const py::handle& v, const char* who, const char* name, std::int64_t lo = kAnyInt,
                     std::optional<std::int64_t> hi = std::nullopt);
std::uint64_t seed_arg(const py::handle& v, const char* who, const char* name = "seed");
double float_arg(const py::handle& v, const char* who, const char* name, const Limit& limit);
// A str argument (TypeError naming it otherwise).
std::string str_arg(const py::handle& v, const char* who, const char* name);
// "plain" | "tiled" | "auto": an attention_impl (ValueError / TypeError naming the argument).
AttentionImpl impl_arg(const py::handle& v, const char* who);

// The ranges of the layers' numeric arguments.
namespace limits {
inline Limit finite() { return Limit::number(-std::numeric_limits<double>::infinity()); }  // a finite number
inline Limit non_negative() { return Limit::number(0.0); }                                 // finite, >= 0
inline Limit positive() { return Limit::number(0.0, std::numeric_limits<double>::infinity(), true); }  // > 0
inline Limit rate() { return Limit::number(0.0, 1.0, false, true); }  // a dropout rate, Adam's betas: [0, 1)
inline Limit fraction() { return Limit::number(0.0, 1.0); }           // label smoothing: [0, 1]
}  // namespace limits

// a < b for two Python objects (Python's comparison: exact for ints of any size).
inline bool py_less(const py::handle& a, const py::handle& b) {
  const int r = PyObject_RichCompareBool(a.ptr(), b.ptr(), Py_LT);
  if (r < 0) throw py::error_already_set();
  return r == 1;
}

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

// What parameters() returns: an OrderedDict name -> Parameter. A type of its own so that the
// signatures pybind11 writes (and the stubs generated from them) name it.
class ParameterDict : public py::object {
 public:
  ParameterDict() : py::object(py::module_::import("collections").attr("OrderedDict")()) {}
  static bool check_(py::handle h) { return h.ptr() != nullptr; }
};

// OrderedDict name -> PyParameter for a C++ parameter list owned by `owner`.
template <typename T>
ParameterDict parameters_dict(const ParameterList<T>& params, py::handle owner) {
  ParameterDict od;
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

// Python-side state of a layer: the C++ layer plus the arrays of the last forward that the layer
// reads again in backward (it caches pointers, not copies; they are owned copies, see owned()).
template <typename Layer>
struct Holder {
  template <typename... Args>
  explicit Holder(Args&&... args) : layer(std::forward<Args>(args)...) {}
  Layer layer;
  std::vector<py::object> keep;  // the arrays the layer points into until backward
  std::vector<Index> lead;       // the leading shape of the last output (see LayerForward::run)
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

// Copy a (B*T, C) matrix out as a NumPy array of shape (B, T, C).
template <typename T>
py::array_t<T> btc_out(const Matrix<T>& m, Index B, Index Tn) {
  return copy_out<T>(m.data(), {B, Tn, m.cols()});
}

// parameters() of a layer that has none.
inline ParameterDict empty_parameters() { return ParameterDict(); }

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

// (B, T, C) float input: shape, finite values and (keep) an owned copy for backward.
template <typename T>
RowsInput<T> as_btc(const py::handle& obj, const char* who, const char* arg, Index C, bool keep) {
  auto r = as_rows<T>(obj, who, arg, C);
  if (r.lead_shape.size() != 2)
    throw py::value_error(concat(who, ": ", arg, " must have shape (batch, length, ", C, "), got ", describe(r.array)));
  check_input(r, who, arg, keep);
  return r;
}

// ---------------------------------------------------------------------------------------------
// The bookkeeping of a bound call, written once
//
// A method that runs heavy work holds its object for the whole call (InUse: one call at a time),
// checks its inputs and the memory they need before anything runs, runs the work with the GIL
// released (without_gil), and checks what the work produced. For the layers (a Holder, or any
// struct with its busy / has_forward / keep / lead members) LayerForward and LayerBackward are that
// sequence, so that each bound forward and backward reads:
//
//   LayerForward<T, H> call(h, "Linear.forward");
//   auto in = call.rows(x, "x", h.layer.in_features(), /*keep=*/true);  // finite; kept for backward
//   call.check(rows_what(in.rows), elements);                             // memory, finite weights
//   const Matrix<T>& y = call.run(in.lead_shape, [&]() -> const Matrix<T>& { return h.layer.forward(in.map()); });
//   return rows_out<T>(y, in.lead_shape);
//
//   LayerBackward<T, H> call(h, "Linear.backward");              // and a forward to go back through
//   auto d = call.dout_rows(dout, h.layer.out_features());         // finite, the last output's shape
//   const Matrix<T>& dx = call.run([&]() -> const Matrix<T>& { return h.layer.backward(d.map()); });
//   call.check_gradient(dx);
//   call.check_parameter_gradients();
//   return rows_out<T>(dx, h.lead);

// work() with the GIL released (other Python threads run meanwhile); returns what it returns. The
// work must not touch Python objects.
template <typename Work>
decltype(auto) without_gil(Work&& work) {
  py::gil_scoped_release release;
  return std::forward<Work>(work)();
}

// Whether a layer has parameters() (Dropout and scaled dot-product attention have none).
template <typename Layer, typename = void>
struct HasParameters : std::false_type {};
template <typename Layer>
struct HasParameters<Layer, std::void_t<decltype(std::declval<Layer&>().parameters())>> : std::true_type {};

template <typename T, typename H>
class LayerForward {
 public:
  // `failure_keeps_previous`: the layer checks its inputs before it changes any state (the
  // embeddings check the token ids first), so a forward that fails leaves the previous one for
  // backward. Otherwise a failed forward leaves none.
  LayerForward(H& h, const char* who, bool failure_keeps_previous = false)
      : h_(h), who_(who), in_use_(h.busy, who), failure_keeps_previous_(failure_keeps_previous) {}

  const char* who() const { return who_; }

  // A float input of shape (..., cols) (cols < 0: any), finite; with `keep`, owned and kept until
  // backward (the layer reads it again).
  RowsInput<T> rows(const py::handle& obj, const char* arg, Index cols, bool keep) {
    auto r = as_rows<T>(obj, who_, arg, cols);
    check_input(r, who_, arg, keep);
    if (keep) keep_.push_back(r.array);
    return r;
  }
  // The same of shape (batch, length, C).
  RowsInput<T> btc(const py::handle& obj, const char* arg, Index C, bool keep) {
    auto r = as_btc<T>(obj, who_, arg, C, keep);
    if (keep) keep_.push_back(r.array);
    return r;
  }
  // An array already converted (as_floats), checked finite, then owned and kept.
  void finite_kept(py::array_t<T, py::array::c_style>& a, const char* arg) {
    check_finite_input(a.data(), static_cast<Index>(a.size()), who_, arg);
    a = owned<T>(a);
    keep_.push_back(a);
  }
  // Any further object the layer points into until backward (token ids, masks).
  void keep(py::object o) { keep_.push_back(std::move(o)); }

  // Before the work: the buffers the layer keeps (`elements` values of type T, estimated from the
  // shapes by the helpers of checks.hpp) fit in memory, and the weights are finite.
  void check(const std::string& what, double elements) {
    check_memory(who_, what, elements * static_cast<double>(sizeof(T)));
    if constexpr (HasParameters<decltype(h_.layer)>::value) check_finite_parameters(h_.layer.parameters(), who_);
  }
  // The same for a layer without weights, in bytes.
  void check_memory_bytes(const std::string& what, double bytes) { check_memory(who_, what, bytes); }

  // The work (it returns the output) with the GIL released; then the forward is recorded for
  // backward (the kept arrays, the output's leading shape `lead`) and the output checked finite.
  template <typename Work>
  const Matrix<T>& run(std::vector<Index> lead, Work&& work) {
    if (!failure_keeps_previous_) h_.has_forward = false;  // the layer's cached state changes from here
    const Matrix<T>& y = without_gil(std::forward<Work>(work));
    h_.keep = std::move(keep_);
    h_.lead = std::move(lead);
    h_.has_forward = true;
    check_output(y, who_);
    return y;
  }

 private:
  H& h_;
  const char* who_;
  InUse in_use_;
  bool failure_keeps_previous_;
  std::vector<py::object> keep_;  // the arrays of this forward, the layer's own once it succeeded
};

template <typename T, typename H>
class LayerBackward {
 public:
  LayerBackward(H& h, const char* who) : h_(h), who_(who), in_use_(h.busy, who) {
    if (!h.has_forward) throw std::runtime_error(concat(who, ": call forward() first"));
  }

  const char* who() const { return who_; }

  // dout of shape (*lead, cols) of the last output (cols < 0: any), finite.
  RowsInput<T> dout_rows(const py::handle& dout, Index cols) {
    return bindings::dout_rows<T>(dout, who_, cols, h_.lead);
  }
  // dout of shape (B, T, C) with the B and T of the last output, finite.
  RowsInput<T> dout_btc(const py::handle& dout, Index C) {
    auto d = as_btc<T>(dout, who_, "dout", C, false);
    if (d.lead_shape[0] != h_.lead[0] || d.lead_shape[1] != h_.lead[1])
      throw py::value_error(concat(who_, ": dout must have the output's shape, got ", describe(d.array)));
    return d;
  }

  // dout of a kernel bound on its own (no Holder): a float array of the last output's `shape`,
  // finite.
  py::array_t<T, py::array::c_style> dout_array(const py::handle& dout, const std::vector<Index>& shape) {
    auto d = as_floats<T>(dout, who_, "dout", static_cast<int>(shape.size()));
    if (shape_of(d) != shape)
      throw py::value_error(
          concat(who_, ": dout must have the output's shape ", shape_str(shape), ", got ", describe(d)));
    check_finite_input(d.data(), static_cast<Index>(d.size()), who_, "dout");
    return d;
  }

  // The work with the GIL released; returns what it returns.
  template <typename Work>
  decltype(auto) run(Work&& work) {
    return without_gil(std::forward<Work>(work));
  }

  // After the work: a gradient it returns, and the parameter gradients it accumulated, are finite.
  void check_gradient(const Matrix<T>& g, const char* what = "input gradient") {
    bindings::check_gradient(g, who_, what);
  }
  void check_parameter_gradients() { bindings::check_parameter_gradients(h_.layer.parameters(), who_); }

 private:
  H& h_;
  const char* who_;
  InUse in_use_;
};

// Every class is bound once per scalar type (Linear_float32, Linear_float64): a family's
// registration calls for_each_scalar([&](auto t) { bind_linear<decltype(t)>(m); ... }), which
// binds the family's classes for float, then for double.
template <typename Bind>
void for_each_scalar(Bind&& bind) {
  bind(float());
  bind(double());
}

// parameters() and zero_grad() of a bound layer H (a Holder) that `name` names in messages
// ("Linear": "Linear.zero_grad: this layer is in use by another thread ...").
template <typename T, typename H>
void def_parameters(py::class_<H>& cls, const std::string& name) {
  cls.def("parameters", [](py::object self) { return parameters_dict<T>(self.cast<H&>().layer.parameters(), self); });
  cls.def("zero_grad", [who = name + ".zero_grad"](H& h) {
    check_idle(h.busy, who.c_str(), "layer");
    h.layer.zero_grad();
  });
}
// The same of an object without parameters: an empty dict, and nothing to zero.
template <typename H>
void def_no_parameters(py::class_<H>& cls) {
  cls.def("parameters", [](py::object) { return empty_parameters(); });
  cls.def("zero_grad", [](H&) {});
}

// The d_model and n_heads properties of a bound multi-head layer; def_head_properties adds d_k.
template <typename H>
void def_model_heads(py::class_<H>& cls) {
  cls.def_property_readonly("d_model", [](H& h) { return h.layer.d_model(); });
  cls.def_property_readonly("n_heads", [](H& h) { return h.layer.n_heads(); });
}
template <typename H>
void def_head_properties(py::class_<H>& cls) {
  def_model_heads(cls);
  cls.def_property_readonly("d_k", [](H& h) { return h.layer.d_k(); });
}
// The constructor (d_model, n_heads, seed=0) of a bound multi-head layer that `name` names in
// messages, then its properties.
template <typename H>
void def_heads_init(py::class_<H>& cls, const std::string& name) {
  cls.def(py::init([name](const py::object& d_model, const py::object& n_heads, const py::object& seed) {
            const char* who = name.c_str();
            return new H(int_arg(d_model, who, "d_model"), int_arg(n_heads, who, "n_heads"), seed_arg(seed, who));
          }),
          py::arg("d_model"), py::arg("n_heads"), py::arg("seed") = 0);
  def_head_properties(cls);
}

// What a method reading the last forward's state checks first: the object is idle, and a forward
// has run ("<who>: call forward() first" otherwise).
template <typename H>
void check_forward_done(const H& h, const char* who) {
  check_idle(h.busy, who, "layer");
  if (!h.has_forward) throw std::runtime_error(concat(who, ": call forward() first"));
}

// backward() of a bound layer H whose backward(dout) returns the gradient of its input:
// .def("backward", backward_method<T, H>("Linear.backward", width, Dout::Rows), ...). dout has
// the last output's shape, (..., width(layer)) or (B, T, width(layer)), and is finite; so are the
// input gradient returned, in the last input's shape, and the parameter gradients accumulated.
enum class Dout { Rows, BTC };
template <typename T, typename H, typename Width>
auto backward_method(std::string who, Width width, Dout shape) {
  return [who = std::move(who), width, shape](H& h, const py::handle& dout) {
    LayerBackward<T, H> call(h, who.c_str());
    const Index cols = std::invoke(width, h.layer);
    auto d = shape == Dout::BTC ? call.dout_btc(dout, cols) : call.dout_rows(dout, cols);
    const Matrix<T>& dx = call.run([&]() -> const Matrix<T>& { return h.layer.backward(d.map()); });
    call.check_gradient(dx);
    call.check_parameter_gradients();
    return shape == Dout::BTC ? btc_out<T>(dx, h.lead[0], h.lead[1]) : rows_out<T>(dx, h.lead);
  };
}
// That backward bound on the class of a layer `name` names ("Linear": "Linear.backward"), with the
// docstring `doc` (none: nullptr).
template <typename T, typename H, typename Width>
void def_backward(py::class_<H>& cls, const std::string& name, Width width, Dout shape, const char* doc) {
  auto method = backward_method<T, H>(name + ".backward", width, shape);
  if (doc)
    cls.def("backward", std::move(method), py::arg("dout"), doc);
  else
    cls.def("backward", std::move(method), py::arg("dout"));
}
// The same for a layer whose dout is (B, T, d_model).
template <typename T, typename H>
void def_d_model_backward(py::class_<H>& cls, const std::string& name, const char* doc) {
  def_backward<T>(cls, name, [](const auto& l) { return l.d_model(); }, Dout::BTC, doc);
}

}  // namespace transformer::bindings

template <>
struct pybind11::detail::handle_type_name<transformer::bindings::ParameterDict> {
  static constexpr auto name = const_name("collections.OrderedDict[str, transformer_cpp._core.Parameter]");
};

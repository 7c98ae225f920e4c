// Bindings of the configuration: Limit, the one check of a setting (numbers, flags, names) with
// the one message format, for the core and the Python package alike; and the configuration
// structs as classes made from their tables (TransformerConfig, OptimizerConfig,
// LanguageModelConfig): keyword arguments checked field by field, to_dict(), and fields(), the
// table itself, from which the Python package derives keyword arguments, docstrings, checkpoint
// JSON and command-line options. And the attention kinds' records (kinds.hpp), read-only:
// attention_kinds() and attention_kind(name).
#include <cmath>
#include <limits>
#include <string>

#include "bindings.hpp"
#include "transformer/attention/kinds.hpp"
#include "transformer/core/config.hpp"
#include "transformer/core/enum_names.hpp"
#include "transformer/models/language_model.hpp"
#include "transformer/models/transformer.hpp"

namespace transformer::bindings {

namespace {

bool is_numpy_bool(const py::handle& v) {
  const py::handle type = py::type::of(v);
  if (!py::hasattr(type, "__module__")) return false;
  const std::string module = py::str(type.attr("__module__")).cast<std::string>();
  const std::string name = py::str(type.attr("__name__")).cast<std::string>();
  return module == "numpy" && (name == "bool_" || name == "bool");
}

[[noreturn]] void refuse(const Limit& l, const std::string& owner, const std::string& name, const py::handle& v,
                         bool wrong_type) {
  const std::string msg = l.message(owner, name, value_repr(v));
  if (wrong_type) throw py::type_error(msg);
  throw py::value_error(msg);
}

// A bound of a number Limit: a finite number, or an infinite float for no bound on that side.
double bound_arg(const py::handle& v, const char* name) {
  if (PyFloat_Check(v.ptr()) && std::isinf(PyFloat_AsDouble(v.ptr()))) return PyFloat_AsDouble(v.ptr());
  return float_arg(v, "Limit", name, limits::finite());
}

const char* kind_name(Limit::Kind k) {
  switch (k) {
    case Limit::Kind::Integer:
      return "integer";
    case Limit::Kind::Number:
      return "number";
    case Limit::Kind::Flag:
      return "flag";
    case Limit::Kind::Choice:
      return "choice";
  }
  return "number";
}

py::object field_value_object(const FieldValue& v) {
  if (const auto* b = std::get_if<bool>(&v)) return py::bool_(*b);
  if (const auto* i = std::get_if<std::int64_t>(&v)) return py::int_(*i);
  if (const auto* u = std::get_if<std::uint64_t>(&v)) return py::int_(*u);
  if (const auto* d = std::get_if<double>(&v)) return py::float_(*d);
  return py::str(std::get<std::string>(v));
}

// A value that check_setting returned, as the FieldValue of its kind.
FieldValue to_field_value(const Limit& l, const py::object& v) {
  switch (l.kind()) {
    case Limit::Kind::Flag:
      return v.cast<bool>();
    case Limit::Kind::Choice:
      return v.cast<std::string>();
    case Limit::Kind::Number:
      return v.cast<double>();
    case Limit::Kind::Integer:
      break;
  }
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
  if (x == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (overflow == 0) return static_cast<std::int64_t>(x);
  if (overflow < 0) throw std::out_of_range("below 64 bits");
  const unsigned long long u = PyLong_AsUnsignedLongLong(v.ptr());
  if (PyErr_Occurred()) {
    PyErr_Clear();
    throw std::out_of_range("beyond 64 bits");
  }
  return static_cast<std::uint64_t>(u);
}

// A Config from keyword arguments: each checked by its row (unknown names: TypeError), then the
// whole (check).
template <typename Config>
Config config_from_kwargs(const py::kwargs& kwargs, void (*check)(const Config&)) {
  using Table = ConfigTable<Config>;
  const std::string owner = Table::owner();
  Config c;
  for (const auto& item : kwargs) {
    const std::string key = py::str(item.first).cast<std::string>();
    const ConfigField<Config>* f = nullptr;
    for (const auto& row : Table::fields())
      if (row.name == key) f = &row;
    if (f == nullptr) {
      std::string names;
      for (const auto& row : Table::fields()) names += (names.empty() ? "" : ", ") + row.name;
      throw py::type_error(concat(owner, ": unknown setting '", key, "'; the settings are ", names));
    }
    const py::object value = check_setting(f->limit, owner, f->name, item.second);
    try {
      f->set(c, to_field_value(f->limit, value));
    } catch (const std::out_of_range&) {  // an integer no C++ member holds, where the row sets no upper bound
      refuse(Limit::integer(f->limit.int_low(), std::numeric_limits<std::int64_t>::max()), owner, f->name, item.second,
             false);
    }
  }
  check(c);
  return c;
}

template <typename Config>
py::dict config_dict(const Config& c) {
  py::dict d;
  for (const auto& f : ConfigTable<Config>::fields()) d[py::str(f.name)] = field_value_object(f.get(c));
  return d;
}

// What Python sees of a table row (ConfigField is a template over the struct).
struct PyConfigField {
  std::string name;
  Limit limit;
  py::object default_value;
  std::string help;
  std::optional<std::string> option;
};

template <typename Config>
py::list config_fields() {
  py::list out;
  const Config defaults;
  for (const auto& f : ConfigTable<Config>::fields())
    out.append(py::cast(PyConfigField{f.name, f.limit, field_value_object(f.get(defaults)), f.help, f.option}));
  return out;
}

template <typename Config>
void bind_config_class(py::module_& m, const char* name, const char* doc, void (*check)(const Config&)) {
  py::class_<Config>(m, name, doc)
      .def(py::init([check](const py::kwargs& kwargs) { return config_from_kwargs<Config>(kwargs, check); }),
           "Every field by keyword (the others keep their defaults), each checked against its row of fields(): "
           "TypeError for an unknown name or a value of the wrong type, ValueError for one out of range.")
      .def_static("fields", &config_fields<Config>, "The table of the fields, in order: list of ConfigField.")
      .def("to_dict", &config_dict<Config>, "The fields as a dict, in the table's order (JSON-serialisable).")
      .def("__eq__",
           [](const Config& a, const py::object& b) {
             if (!py::isinstance<Config>(b)) return false;
             return config_dict(a).equal(config_dict(b.cast<const Config&>()));
           })
      .def("__repr__", [name](const Config& c) {
        std::string s = std::string(name) + "(";
        bool first = true;
        for (const auto& f : ConfigTable<Config>::fields()) {
          s += (first ? "" : ", ") + f.name + "=" + value_text(f.get(c));
          first = false;
        }
        return s + ")";
      });
}

}  // namespace

py::object check_setting(const Limit& l, const std::string& owner, const std::string& name, const py::handle& v) {
  const bool is_bool = PyBool_Check(v.ptr()) || is_numpy_bool(v);
  switch (l.kind()) {
    case Limit::Kind::Flag:
      if (!is_bool) refuse(l, owner, name, v, true);
      return py::bool_(PyObject_IsTrue(v.ptr()) == 1);
    case Limit::Kind::Choice: {
      if (!PyUnicode_Check(v.ptr())) refuse(l, owner, name, v, true);
      const std::string s = v.cast<std::string>();
      if (!l.allows(s)) refuse(l, owner, name, v, false);
      return py::str(s);
    }
    case Limit::Kind::Integer: {
      if (is_bool || !PyIndex_Check(v.ptr())) refuse(l, owner, name, v, true);
      py::object i = py::reinterpret_steal<py::object>(PyNumber_Index(v.ptr()));
      if (!i) throw py::error_already_set();
      if (py_less(i, py::int_(l.int_low())) || (l.int_high() && py_less(py::int_(*l.int_high()), i)))
        refuse(l, owner, name, v, false);
      return i;
    }
    case Limit::Kind::Number:
      break;
  }
  if (is_bool || PyUnicode_Check(v.ptr()) || PyBytes_Check(v.ptr())) refuse(l, owner, name, v, true);
  const double x = PyFloat_AsDouble(v.ptr());
  if (x == -1.0 && PyErr_Occurred()) {
    const bool overflow = PyErr_ExceptionMatches(PyExc_OverflowError);  // an int beyond any float: not finite
    PyErr_Clear();
    refuse(l, owner, name, v, !overflow);
  }
  if (!l.allows(x)) refuse(l, owner, name, v, false);
  return py::float_(x);
}

namespace {

// The name of a kind's generation step (None: no name).
constexpr EnumName<GenerationStep> kStepNames[] = {{GenerationStep::KeyValueCache, "key_value_cache"},
                                                   {GenerationStep::RecurrentState, "recurrent_state"}};
const char* step_name(GenerationStep step) { return name_of(kStepNames, step); }

void bind_attention_kinds(py::module_& m) {
  using K = AttentionKind;
  py::class_<K>(m, "AttentionKind",
                "What one attention kind supports (read-only; the records of the core's attention/kinds.hpp). "
                "Every kind is causal.")
      .def_property_readonly("name", [](const K& k) { return std::string(k.name); })
      .def_property_readonly("summary", [](const K& k) { return std::string(k.summary); })
      .def_property_readonly(
          "bidirectional", [](const K& k) { return k.bidirectional; }, "Works without a causal mask (causal=False).")
      .def_property_readonly(
          "memory", [](const K& k) { return k.memory; },
          "Takes a segment memory of preceding positions and encodes positions itself "
          "(memory_length, clamp_len; no absolute positional encoding).")
      .def_property_readonly(
          "step",
          [](const K& k) -> py::object {
            if (k.step == GenerationStep::None) return py::none();
            return py::str(step_name(k.step));
          },
          "The generation step: 'key_value_cache', 'recurrent_state' or None (generation re-reads the context).")
      .def_property_readonly("has_cached_step", &K::has_cached_step)
      .def_property_readonly(
          "reversible", [](const K& k) { return k.reversible; }, "Works in a reversible stack.")
      .def_property_readonly(
          "cross_attention", [](const K& k) { return k.cross_attention; }, "Works as a decoder's cross-attention.")
      .def_property_readonly(
          "key_padding", [](const K& k) { return k.key_padding; },
          "Masks the padded keys of a bidirectional batch (a translator's encoder).")
      .def_property_readonly(
          "full_weights", [](const K& k) { return k.full_weights; },
          "Keeps the (B, H, T, T) attention weights on short inputs.")
      .def_property_readonly(
          "hashed", [](const K& k) { return k.hashed; }, "Hashes positions into buckets (the lsh_* settings).")
      .def("__repr__", [](const K& k) { return concat("AttentionKind('", k.name, "')"); });
  m.def(
      "attention_kinds",
      [] {
        const auto& kinds = attention_kinds();
        py::tuple out(kinds.size());
        for (size_t i = 0; i < kinds.size(); ++i) out[i] = py::cast(&kinds[i], py::return_value_policy::reference);
        return out;
      },
      "The attention kinds' records, in the order messages list them.");
  m.def(
      "attention_kind", [](const std::string& name) -> const K& { return attention_kind(name, "attention_kind"); },
      py::arg("name"), py::return_value_policy::reference,
      "The record of the attention kind `name`; ValueError naming the kinds for any other name.");
}

}  // namespace

void bind_config(py::module_& m) {
  py::class_<Limit>(m, "Limit",
                    "The allowed values of a setting: an integer (integer=True) or a finite number from low to high "
                    "(high may be infinite; low_open / high_open exclude the bound), Limit.flag() (True or False) "
                    "or Limit.one_of(names). check() refuses anything else with one message format, "
                    "'<owner>: <name> must be <describe()>, got <value>' (TypeError for a value of the wrong "
                    "type, ValueError for one out of range); the core checks its configurations with the same.")
      .def(py::init([](bool integer, const py::object& low, const py::object& high, bool low_open, bool high_open,
                       const std::string& unit) {
             if (integer) {
               if (low_open || high_open || !unit.empty())
                 throw py::value_error("Limit: an integer limit has closed bounds and no unit");
               const std::int64_t lo = int_arg(low, "Limit", "low");
               if (PyFloat_Check(high.ptr()) && std::isinf(high.cast<double>()) && high.cast<double>() > 0)
                 return Limit::integer(lo);
               const std::uint64_t hi = seed_arg(high, "Limit", "high");
               if (lo >= 0 && hi < static_cast<std::uint64_t>(lo)) throw py::value_error("Limit: low must be <= high");
               return Limit::integer(lo, hi);
             }
             return Limit::number(bound_arg(low, "low"), bound_arg(high, "high"), low_open, high_open, unit);
           }),
           py::arg("integer"), py::arg("low"), py::arg("high") = std::numeric_limits<double>::infinity(),
           py::arg("low_open") = false, py::arg("high_open") = false, py::arg("unit") = "")
      .def_static("flag", &Limit::flag, "True or False.")
      .def_static("one_of", &Limit::one_of, py::arg("choices"), "One of these names.")
      .def_property_readonly(
          "kind", [](const Limit& l) { return kind_name(l.kind()); }, "'integer', 'number', 'flag' or 'choice'.")
      .def_property_readonly("integer", [](const Limit& l) { return l.kind() == Limit::Kind::Integer; })
      .def_property_readonly("low",
                             [](const Limit& l) -> py::object {
                               if (l.kind() == Limit::Kind::Integer) return py::int_(l.int_low());
                               return py::float_(l.low());
                             })
      .def_property_readonly("high",
                             [](const Limit& l) -> py::object {
                               if (l.kind() == Limit::Kind::Integer && l.int_high()) return py::int_(*l.int_high());
                               return py::float_(l.high());
                             })
      .def_property_readonly("low_open", &Limit::low_open)
      .def_property_readonly("high_open", &Limit::high_open)
      .def_property_readonly("unit", &Limit::unit)
      .def_property_readonly("choices", &Limit::choices)
      .def("describe", &Limit::describe,
           "What is allowed: 'an integer in [1, 16384]', 'a finite number > 0', 'a number in [0, 1)', 'True or "
           "False', \"'float32' or 'bf16'\".")
      .def(
          "check",
          [](const Limit& l, const std::string& owner, const std::string& name, const py::handle& value) {
            return py::typing::Union<py::int_, py::float_, py::bool_, py::str>(check_setting(l, owner, name, value));
          },
          py::arg("owner"), py::arg("name"), py::arg("value"),
          "value as an int, float, bool or str if allowed; else TypeError (wrong type) or ValueError (out of "
          "range): '<owner>: <name> must be <describe()>, got <value>' ('<name> must be ...' without an owner).")
      .def(
          "message",
          [](const Limit& l, const std::string& owner, const std::string& name, const py::handle& value) {
            return l.message(owner, name, value_repr(value));
          },
          py::arg("owner"), py::arg("name"), py::arg("value"), "The message check() gives for value.")
      .def("__eq__",
           [](const Limit& a, const py::object& b) { return py::isinstance<Limit>(b) && a == b.cast<const Limit&>(); })
      .def("__hash__", [](const Limit& l) { return py::hash(py::str(l.describe())); })
      .def("__repr__", [](const Limit& l) { return "Limit(" + l.describe() + ")"; });

  py::class_<PyConfigField>(m, "ConfigField", "One row of a configuration's table (TransformerConfig.fields()).")
      .def_readonly("name", &PyConfigField::name)
      .def_readonly("limit", &PyConfigField::limit, "What the field allows (its kind: limit.kind).")
      .def_readonly("default", &PyConfigField::default_value)
      .def_readonly("help", &PyConfigField::help)
      .def_readonly("option", &PyConfigField::option,
                    "The field's name among the training settings and on the command line (--option-name), "
                    "or None: a field the program sets.")
      .def("__repr__",
           [](const PyConfigField& f) { return "ConfigField(" + f.name + ", " + f.limit.describe() + ")"; });

  bind_attention_kinds(m);

  bind_config_class<TransformerConfig>(
      m, "TransformerConfig", "The model's architecture (ConfigTable<TransformerConfig> in the core).", &check_config);
  bind_config_class<OptimizerConfig>(m, "OptimizerConfig",
                                     "Adam, the learning-rate schedule, clipping and label smoothing.", &validate);
  bind_config_class<LanguageModelConfig>(
      m, "LanguageModelConfig", "The language model's architecture (ConfigTable<LanguageModelConfig>).", &check_config);
}

}  // namespace transformer::bindings

// config.hpp — what a setting may be (Limit), and configuration structs described by a table of
// their fields (ConfigField), so that one list says each field's name, allowed values and help.
//
// A configuration struct (TransformerConfig and OptimizerConfig in models/transformer.hpp,
// LanguageModelConfig in models/language_model.hpp) keeps plain members with their defaults; its
// table, written next to it, names each member once more with what it allows. Everything else is
// derived from the table: the check of a whole config (check_fields), the Python class of the
// struct (its keyword arguments, dict and field list; see bindings/bind_config.cpp) and, in
// Python, the model's keyword arguments and docstring, checkpoint JSON, the command line's
// options and TrainConfig's optimiser settings.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace transformer {

// The allowed values of one setting, and the one message format for a value outside them:
// "<owner>: <name> must be <describe()>, got <value>". Four kinds:
//   integer: an integer from low to high (high optional: no upper bound but the C++ type's)
//   number:  a finite number from low to high (high may be infinite; either bound may be open)
//   flag:    True or False
//   choice:  one of a list of names
class Limit {
 public:
  enum class Kind { Integer, Number, Flag, Choice };

  static Limit integer(std::int64_t low, std::optional<std::uint64_t> high = std::nullopt);
  static Limit number(double low, double high = std::numeric_limits<double>::infinity(), bool low_open = false,
                      bool high_open = false, std::string unit = "");
  static Limit flag();
  static Limit one_of(std::vector<std::string> names);

  Kind kind() const { return kind_; }
  // "an integer in [1, 16384]", "a finite number > 0", "a number in [0, 1)", "True or False",
  // "'float32' or 'bf16'", "one of 'float32', 'int8', 'bf16'"
  std::string describe() const;
  // "<owner>: <name> must be <describe()>, got <got>" ("<name> must be ..." without an owner)
  std::string message(const std::string& owner, const std::string& name, const std::string& got) const;

  bool allows(bool v) const;  // a flag allows either
  bool allows(std::int64_t v) const;
  bool allows(std::uint64_t v) const;
  bool allows(double v) const;  // finite and in range (number); an integral value in range (integer)
  bool allows(const std::string& v) const;

  std::int64_t int_low() const { return int_low_; }
  std::optional<std::uint64_t> int_high() const { return int_high_; }
  double low() const { return low_; }
  double high() const { return high_; }
  bool low_open() const { return low_open_; }
  bool high_open() const { return high_open_; }
  const std::string& unit() const { return unit_; }
  const std::vector<std::string>& choices() const { return choices_; }
  bool operator==(const Limit& o) const;
  bool operator!=(const Limit& o) const { return !(*this == o); }

 private:
  Kind kind_ = Kind::Number;
  std::int64_t int_low_ = 0;
  std::optional<std::uint64_t> int_high_;
  double low_ = 0.0, high_ = std::numeric_limits<double>::infinity();
  bool low_open_ = false, high_open_ = false;
  std::string unit_;
  std::vector<std::string> choices_;
};

// A number as Python's repr() writes it (0.1, 1e-09, 2.0, nan, inf), so that a message about a
// value from C++ reads like one about the same value from Python.
std::string python_repr(double x);

// The value of one field of a configuration struct, whatever its C++ type (an enum by its name).
using FieldValue = std::variant<bool, std::int64_t, std::uint64_t, double, std::string>;
// As Python's repr() writes it: 3, 0.1, True, 'bf16'.
std::string value_text(const FieldValue& v);

// One field of a configuration struct Config: its name, what it allows, a line of help, and its
// option: the name under which the training settings (TrainConfig) and the command line
// (--option-name) set it, the field's own name unless the table says otherwise, or none (a
// field the program sets: vocabulary sizes from the tokenizers, a run's total steps).
template <typename Config>
struct ConfigField {
  std::string name;
  Limit limit;
  std::string help;
  std::optional<std::string> option;
  FieldValue (*get)(const Config&);
  void (*set)(Config&, const FieldValue&);  // the value must be of the field's kind (see check_fields)
};

// The option argument of field(): the field's name (kSameName), none (kNoOption), or another name.
inline constexpr const char* kSameName = nullptr;
inline constexpr const char* kNoOption = "";

namespace detail {
template <typename P>
struct MemberOf;
template <typename C, typename M>
struct MemberOf<M C::*> {
  using Class = C;
  using Type = M;
};

template <typename M>
FieldValue to_value(const M& m) {
  if constexpr (std::is_same_v<M, bool> || std::is_same_v<M, std::string>) {
    return m;
  } else if constexpr (std::is_enum_v<M>) {
    return to_string(m);  // the enum's own to_string, found by argument-dependent lookup
  } else if constexpr (std::is_integral_v<M> && std::is_signed_v<M>) {
    return static_cast<std::int64_t>(m);
  } else if constexpr (std::is_integral_v<M>) {
    return static_cast<std::uint64_t>(m);
  } else {
    return static_cast<double>(m);
  }
}

template <typename M>
void from_value(const FieldValue& v, M& m) {
  if constexpr (std::is_same_v<M, bool>) {
    m = std::get<bool>(v);
  } else if constexpr (std::is_same_v<M, std::string>) {
    m = std::get<std::string>(v);
  } else if constexpr (std::is_enum_v<M>) {
    parse_name(std::get<std::string>(v), m);  // the enum's parse_name, found by argument-dependent lookup
  } else if constexpr (std::is_integral_v<M>) {
    if (const auto* u = std::get_if<std::uint64_t>(&v)) {
      if (*u > static_cast<std::uint64_t>(std::numeric_limits<M>::max()))
        throw std::out_of_range("configuration value beyond its C++ type");
      m = static_cast<M>(*u);
    } else {
      const std::int64_t i = std::get<std::int64_t>(v);
      if constexpr (std::is_unsigned_v<M>) {
        if (i < 0) throw std::out_of_range("configuration value beyond its C++ type");
      }
      m = static_cast<M>(i);
    }
  } else {
    m = static_cast<M>(std::get<double>(v));
  }
}

template <auto P>
FieldValue get_member(const typename MemberOf<decltype(P)>::Class& c) {
  return to_value(c.*P);
}
template <auto P>
void set_member(typename MemberOf<decltype(P)>::Class& c, const FieldValue& v) {
  from_value(v, c.*P);
}
}  // namespace detail

// A table row for member P: field<&Config::member>("member", Limit::..., "help"[, option]).
template <auto P>
ConfigField<typename detail::MemberOf<decltype(P)>::Class> field(const char* name, Limit limit, const char* help,
                                                                 const char* option = kSameName) {
  std::optional<std::string> opt;
  if (option == kSameName)
    opt = std::string(name);
  else if (*option != '\0')
    opt = std::string(option);
  return {name, std::move(limit), help, std::move(opt), &detail::get_member<P>, &detail::set_member<P>};
}

// The table of a configuration struct: specialised next to each struct, with
//   static const char* owner();  // what messages start with ("Transformer")
//   static const std::vector<ConfigField<Config>>& fields();
template <typename Config>
struct ConfigTable;

namespace detail {
// The number of members of an aggregate such as TransformerConfig: the most initialisers it takes.
struct AnyMember {
  template <typename M>
  operator M() const;  // NOLINT(google-explicit-constructor): only named in unevaluated contexts
};
template <typename C, typename Seq, typename = void>
struct TakesInitialisers : std::false_type {};
template <typename C, std::size_t... I>
struct TakesInitialisers<C, std::index_sequence<I...>, std::void_t<decltype(C{(void(I), AnyMember{})...})>>
    : std::true_type {};
template <typename C, std::size_t N = 0>
constexpr std::size_t member_count() {
  if constexpr (TakesInitialisers<C, std::make_index_sequence<N + 1>>::value)
    return member_count<C, N + 1>();
  else
    return N;
}
}  // namespace detail

// The table of Config (`what`: its name) as given, when it lists every member: a member left out
// of its table would be invisible to Python, so the table is refused instead (std::logic_error,
// when the table is first used).
template <typename Config>
std::vector<ConfigField<Config>> complete_table(std::vector<ConfigField<Config>> table, const char* what) {
  constexpr std::size_t members = detail::member_count<Config>();
  if (table.size() != members)
    throw std::logic_error(std::string(what) + " has " + std::to_string(members) + " members but its table lists " +
                           std::to_string(table.size()) + ": add the new member to ConfigTable<" + what + ">");
  return table;
}

// Throws std::invalid_argument naming the first field whose value its limit does not allow:
// "<owner>: <name> must be <what is allowed>, got <value>".
template <typename Config>
void check_fields(const Config& c) {
  for (const auto& f : ConfigTable<Config>::fields()) {
    const FieldValue v = f.get(c);
    const bool ok = std::visit([&](const auto& x) { return f.limit.allows(x); }, v);
    if (!ok) throw std::invalid_argument(f.limit.message(ConfigTable<Config>::owner(), f.name, value_text(v)));
  }
}

}  // namespace transformer

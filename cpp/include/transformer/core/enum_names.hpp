// enum_names.hpp — the names of an enum's values, written once per enum as a table and read both
// ways: the name of a value (for messages, configs and Python) and the value of a name (parsing).
//
//   constexpr EnumName<Activation> kActivationNames[] = {{Activation::Relu, "relu"}, ...};
//   name_of(kActivationNames, Activation::Gelu)  // "gelu"
//   value_of(kActivationNames, "swish")          // Activation::Swish; std::nullopt for an unknown name
//   parse_name(kActivationNames, name, message)  // the same, std::invalid_argument(message()) when unknown
#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>

namespace transformer {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

// The name of `value`, or `missing` when the table does not list it.
template <typename E, std::size_t N>
const char* name_of(const EnumName<E> (&names)[N], E value, const char* missing = nullptr) {
  for (const EnumName<E>& n : names)
    if (n.value == value) return n.name;
  return missing;
}

// The value named `name`, if the table lists it.
template <typename E, std::size_t N>
std::optional<E> value_of(const EnumName<E> (&names)[N], const std::string& name) {
  for (const EnumName<E>& n : names)
    if (name == n.name) return n.value;
  return std::nullopt;
}

// The value named `name`; std::invalid_argument(message()) when the table does not list it.
template <typename E, std::size_t N, typename Message>
E parse_name(const EnumName<E> (&names)[N], const std::string& name, Message&& message) {
  if (const std::optional<E> v = value_of(names, name)) return *v;
  throw std::invalid_argument(message());
}

}  // namespace transformer

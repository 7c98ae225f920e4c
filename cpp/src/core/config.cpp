#include "transformer/core/config.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace transformer {

Limit Limit::integer(std::int64_t low, std::optional<std::uint64_t> high) {
  Limit l;
  l.kind_ = Kind::Integer;
  l.int_low_ = low;
  l.int_high_ = high;
  l.low_ = static_cast<double>(low);
  l.high_ = high ? static_cast<double>(*high) : std::numeric_limits<double>::infinity();
  return l;
}

Limit Limit::number(double low, double high, bool low_open, bool high_open, std::string unit) {
  if (std::isnan(low) || std::isnan(high) || low > high) throw std::invalid_argument("Limit: low must be <= high");
  Limit l;
  l.kind_ = Kind::Number;
  l.low_ = low;
  l.high_ = high;
  l.low_open_ = low_open;
  l.high_open_ = high_open;
  l.unit_ = std::move(unit);
  return l;
}

Limit Limit::flag() {
  Limit l;
  l.kind_ = Kind::Flag;
  return l;
}

Limit Limit::one_of(std::vector<std::string> names) {
  if (names.empty()) throw std::invalid_argument("Limit.one_of: no names");
  Limit l;
  l.kind_ = Kind::Choice;
  l.choices_ = std::move(names);
  return l;
}

namespace {
// A bound as the messages write it: 0, 1000000, 0.5, 1e-09.
std::string bound_text(double x) {
  if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 1e18) return std::to_string(static_cast<long long>(x));
  return python_repr(x);
}

std::string quoted(const std::string& s) {
  // as Python's repr() of a str without quotes or backslashes in it
  return (s.find('\'') == std::string::npos ? "'" + s + "'" : "\"" + s + "\"");
}
}  // namespace

std::string Limit::describe() const {
  switch (kind_) {
    case Kind::Flag:
      return "True or False";
    case Kind::Choice: {
      if (choices_.size() == 1) return quoted(choices_[0]);
      if (choices_.size() == 2) return quoted(choices_[0]) + " or " + quoted(choices_[1]);
      std::string s = "one of ";
      for (size_t i = 0; i < choices_.size(); ++i) s += (i ? ", " : "") + quoted(choices_[i]);
      return s;
    }
    case Kind::Integer:
      if (!int_high_ && int_low_ == std::numeric_limits<std::int64_t>::min()) return "an integer";
      if (!int_high_) return "an integer >= " + std::to_string(int_low_);
      return "an integer in [" + std::to_string(int_low_) + ", " + std::to_string(*int_high_) + "]";
    case Kind::Number:
      break;
  }
  std::string kind = std::isinf(high_) ? "a finite number" : "a number";
  if (!unit_.empty()) kind += " of " + unit_;
  if (std::isinf(high_) && std::isinf(low_)) return kind;
  if (std::isinf(high_)) return kind + (low_open_ ? " > " : " >= ") + bound_text(low_);
  return kind + " in " + (low_open_ ? "(" : "[") + bound_text(low_) + ", " + bound_text(high_) +
         (high_open_ ? ")" : "]");
}

std::string Limit::message(const std::string& owner, const std::string& name, const std::string& got) const {
  return (owner.empty() ? "" : owner + ": ") + name + " must be " + describe() + ", got " + got;
}

bool Limit::allows(bool /*v*/) const { return kind_ == Kind::Flag; }

bool Limit::allows(std::int64_t v) const {
  if (kind_ == Kind::Number) return allows(static_cast<double>(v));
  if (kind_ != Kind::Integer || v < int_low_) return false;
  return !int_high_ || v < 0 || static_cast<std::uint64_t>(v) <= *int_high_;
}

bool Limit::allows(std::uint64_t v) const {
  if (kind_ == Kind::Number) return allows(static_cast<double>(v));
  if (kind_ != Kind::Integer) return false;
  if (int_low_ > 0 && v < static_cast<std::uint64_t>(int_low_)) return false;
  return !int_high_ || v <= *int_high_;
}

bool Limit::allows(double v) const {
  if (kind_ == Kind::Integer) {
    if (!std::isfinite(v) || v != std::floor(v) || v < low_) return false;
    return !int_high_ || v <= high_;
  }
  if (kind_ != Kind::Number || !std::isfinite(v)) return false;
  return (low_open_ ? v > low_ : v >= low_) && (high_open_ ? v < high_ : v <= high_);
}

bool Limit::allows(const std::string& v) const {
  if (kind_ != Kind::Choice) return false;
  for (const auto& c : choices_)
    if (c == v) return true;
  return false;
}

bool Limit::operator==(const Limit& o) const {
  return kind_ == o.kind_ && int_low_ == o.int_low_ && int_high_ == o.int_high_ &&
         (low_ == o.low_ || (std::isnan(low_) && std::isnan(o.low_))) && high_ == o.high_ && low_open_ == o.low_open_ &&
         high_open_ == o.high_open_ && unit_ == o.unit_ && choices_ == o.choices_;
}

std::string python_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  // the shortest decimal that reads back as x, as Python finds it ...
  char buf[40];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*e", digits - 1, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  // ... "-d.ddde+XX" split into sign, digits and decimal exponent ...
  std::string s(buf);
  const bool negative = s[0] == '-';
  if (negative) s.erase(0, 1);
  const size_t e = s.find('e');
  const int exponent = static_cast<int>(std::strtol(s.c_str() + e + 1, nullptr, 10));
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (s[i] != '.') digits += s[i];
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  // ... and laid out as repr() does: positional notation for exponents in [-4, 16), else scientific
  std::string out;
  if (exponent >= -4 && exponent < 16) {
    const int point = exponent + 1;  // digits before the decimal point
    if (point <= 0) {
      out = "0." + std::string(static_cast<size_t>(-point), '0') + digits;
    } else if (static_cast<size_t>(point) >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(point) - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(point)) + "." + digits.substr(static_cast<size_t>(point));
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', exponent < 0 ? -exponent : exponent);
    out += exp;
  }
  return (negative ? "-" : "") + out;
}

std::string value_text(const FieldValue& v) {
  if (const auto* b = std::get_if<bool>(&v)) return *b ? "True" : "False";
  if (const auto* i = std::get_if<std::int64_t>(&v)) return std::to_string(*i);
  if (const auto* u = std::get_if<std::uint64_t>(&v)) return std::to_string(*u);
  if (const auto* d = std::get_if<double>(&v)) return python_repr(*d);
  return quoted(std::get<std::string>(v));
}

}  // namespace transformer

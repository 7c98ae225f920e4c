#include "transformer/layers/positional_encoding.hpp"

#include <cmath>

#include "transformer/core/checks.hpp"
#include "transformer/core/enum_names.hpp"

namespace transformer {

namespace {
constexpr EnumName<PositionalLayout> kLayoutNames[] = {{PositionalLayout::Interleaved, "interleaved"},
                                                       {PositionalLayout::Concatenated, "concatenated"}};
}  // namespace

PositionalLayout parse_positional_layout(const std::string& name) {
  return parse_name(kLayoutNames, name, [&] {
    return concat("positional_encoding: unknown layout '", name, "'; expected 'interleaved' or 'concatenated'");
  });
}

std::string to_string(PositionalLayout layout) { return name_of(kLayoutNames, layout, "concatenated"); }

template <typename T>
Matrix<T> positional_encoding(Index length, Index depth, PositionalLayout layout) {
  TCPP_CHECK(length > 0, "positional_encoding: length must be a positive integer, got ", length);
  TCPP_CHECK(depth > 0, "positional_encoding: depth must be a positive integer, got ", depth);
  check_memory("positional_encoding", concat("a table of length ", length, " x depth ", depth),
               static_cast<double>(length) * static_cast<double>(depth) * sizeof(T));
  Matrix<T> pe(length, depth);  // (length, depth)
  if (layout == PositionalLayout::Interleaved) {
    // column c uses frequency index i = c/2; even columns sin, odd columns cos.
    // An odd depth is allowed here: the last column is a lone sin.
    for (Index pos = 0; pos < length; ++pos) {
      for (Index c = 0; c < depth; c += 2) {
        const double angle =
            static_cast<double>(pos) / std::pow(10000.0, static_cast<double>(c) / static_cast<double>(depth));
        pe(pos, c) = static_cast<T>(std::sin(angle));
        if (c + 1 < depth) pe(pos, c + 1) = static_cast<T>(std::cos(angle));
      }
    }
  } else {
    TCPP_CHECK(depth % 2 == 0, "positional_encoding: the 'concatenated' layout needs an even depth, got ", depth);
    const Index half = depth / 2;
    for (Index pos = 0; pos < length; ++pos) {
      for (Index i = 0; i < half; ++i) {
        const double angle =
            static_cast<double>(pos) / std::pow(10000.0, static_cast<double>(i) / static_cast<double>(half));
        pe(pos, i) = static_cast<T>(std::sin(angle));
        pe(pos, half + i) = static_cast<T>(std::cos(angle));
      }
    }
  }
  return pe;
}

template Matrix<float> positional_encoding<float>(Index, Index, PositionalLayout);
template Matrix<double> positional_encoding<double>(Index, Index, PositionalLayout);

}  // namespace transformer

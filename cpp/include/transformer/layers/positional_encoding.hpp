// positional_encoding.hpp — the sinusoidal position signal of "Attention Is All You Need".
//
//   interleaved  (paper, PyTorch):   PE(pos, 2i)   = sin(pos / 10000^(2i/d))
//                                     PE(pos, 2i+1) = cos(pos / 10000^(2i/d))
//   concatenated (TensorFlow tutorial): PE(pos, i)       = sin(pos / 10000^(i/(d/2)))
//                                       PE(pos, d/2 + i) = cos(pos / 10000^(i/(d/2))),  i < d/2
//
// Both layouts contain the same d/2 frequencies; only the column order differs.
#pragma once

#include <string>

#include "transformer/core/tensor.hpp"

namespace transformer {

enum class PositionalLayout { Interleaved, Concatenated };

// Parse "interleaved" / "concatenated"; throws std::invalid_argument otherwise.
PositionalLayout parse_positional_layout(const std::string& name);
std::string to_string(PositionalLayout layout);

// (length, depth) table. Angles are computed in double precision and then rounded to T.
// Throws std::invalid_argument for length <= 0, depth <= 0, or an odd depth with the
// concatenated layout (which needs depth/2 sin and depth/2 cos columns).
template <typename T>
Matrix<T> positional_encoding(Index length, Index depth, PositionalLayout layout);

}  // namespace transformer

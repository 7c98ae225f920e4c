// embedding.hpp — token embedding (token 0 is padding) and the positional embedding of the paper:
//   PositionalEmbedding(tokens) = Embedding(tokens) * sqrt(d_model) + PE[:T]
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>

#include "transformer/core/tensor.hpp"
#include "transformer/layers/positional_encoding.hpp"

namespace transformer {

template <typename T>
class Embedding {
 public:
  // Weights N(0, d^-1/2) so that embedding * sqrt(d) has unit scale; row 0 (padding) is zero and
  // receives no gradient (as PyTorch's padding_idx=0).
  Embedding(Index vocab_size, Index d_model, std::uint64_t seed = 0);

  // tokens: (B, T) ids in [0, vocab) -> (B*T, d) rows weight[token] * scale.
  // Throws std::invalid_argument naming the bad id and the vocabulary size.
  const Matrix<T>& forward(ConstTokenMap tokens, T scale = T(1));
  // dy: (B*T, d): dweight[token] += scale * dy_row for every non-padding token.
  void backward(ConstMatrixMap<T> dy);

  ParameterList<T> parameters();  // "weight" (vocab, d)
  void zero_grad();
  Index vocab_size() const { return weight_.rows(); }
  Index dim() const { return weight_.cols(); }

  Matrix<T> weight_, dweight_;  // (vocab, d)

 private:
  template <typename U>
  friend class PositionalEmbedding;  // fuses the lookup with "+ PE" but shares cache_tokens()
  // Check every id is in [0, vocab) and remember tokens and scale for backward().
  void cache_tokens(ConstTokenMap tokens, T scale);

  TokenMatrix tokens_;  // (B, T) copy of the last input (small)
  T scale_ = T(1);
  bool has_forward_ = false;
  Matrix<T> y_;  // (B*T, d)
};

template <typename T>
class PositionalEmbedding {
 public:
  PositionalEmbedding(Index vocab_size, Index d_model, Index max_length = 2048,
                      PositionalLayout layout = PositionalLayout::Interleaved, std::uint64_t seed = 0);

  // tokens: (B, T) -> (B*T, d) = weight[tokens] * sqrt(d) + PE[:T]. The sinusoid table is a
  // cache: `max_length` rows are built up front and it grows when a longer sequence arrives.
  const Matrix<T>& forward(ConstTokenMap tokens);
  // Only the rows of `layout` (a packed batch): row r is padded row layout.ids[r].
  const Matrix<T>& forward(ConstTokenMap tokens, const RowLayout& layout);
  void backward(ConstMatrixMap<T> dy);  // accumulates into the embedding gradient
  // Inference: y (n, d), row i = weight[token] * sqrt(d) + PE[position] for (token, position) =
  // row(i). Every id is checked; the table must already hold every position (reserve_positions).
  // Keeps nothing for backward().
  template <typename Row>
  void infer(Index n, Row&& row, Matrix<T>& y) const;

  ParameterList<T> parameters() { return embedding_.parameters(); }  // "weight"
  void zero_grad() { embedding_.zero_grad(); }
  Index max_length() const { return pe_.rows(); }  // rows cached so far
  // Grow the cached table to at least `length` rows (the sinusoids exist for every position).
  void reserve_positions(Index length);
  Index dim() const { return pe_.cols(); }
  Index vocab_size() const { return embedding_.vocab_size(); }
  PositionalLayout layout() const { return layout_; }
  const Matrix<T>& table() const { return pe_; }
  Embedding<T>& embedding() { return embedding_; }
  const Embedding<T>& embedding() const { return embedding_; }

 private:
  Embedding<T> embedding_;
  PositionalLayout layout_;
  Matrix<T> pe_;  // (cached positions, d), grown by reserve_positions
  Matrix<T> y_;   // (B*T, d)
};

template <typename T>
template <typename Row>
void PositionalEmbedding<T>::infer(Index n, Row&& row, Matrix<T>& y) const {
  const Index d = dim(), V = vocab_size();
  for (Index i = 0; i < n; ++i) {
    const std::pair<std::int64_t, Index> at = row(i);
    TCPP_CHECK(at.first >= 0 && at.first < V, "Embedding: token id ", at.first, " is out of range for vocabulary size ",
               V);
    TCPP_CHECK(at.second >= 0 && at.second < pe_.rows(), "PositionalEmbedding: position ", at.second,
               " is beyond the table's ", pe_.rows(), " rows (reserve_positions first)");
  }
  const T scale = static_cast<T>(std::sqrt(static_cast<double>(d)));
  const Matrix<T>& w = embedding_.weight_;
  y.resize(n, d);
  auto fill = [&](Index i) {
    const std::pair<std::int64_t, Index> at = row(i);
    y.row(i) = w.row(at.first) * scale + pe_.row(at.second);
  };
  if (n * d < kParallelElements) {  // a decoding step's few rows: not even an inactive parallel region
    for (Index i = 0; i < n; ++i) fill(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (Index i = 0; i < n; ++i) fill(i);
}

// (B, T) bytes: 1 where tokens == 0 (padding), else 0.
std::vector<std::uint8_t> padding_mask(ConstTokenMap tokens);

}  // namespace transformer

// embedding.hpp — token embedding (token 0 is padding unless set_padding_id says otherwise) and the
// positional embedding of the paper:
//   PositionalEmbedding(tokens) = Embedding(tokens) * sqrt(d_model) + PE[:T]
// (the factor sqrt(d_model) can be turned off: set_scale)
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>

#include "transformer/core/gradient_buffer.hpp"
#include "transformer/core/tensor.hpp"
#include "transformer/layers/dropout.hpp"
#include "transformer/layers/positional_encoding.hpp"

namespace transformer {

template <typename T>
class Embedding {
 public:
  // Weights N(0, d^-1/2) so that embedding * sqrt(d) has unit scale; row 0 (padding) is zero and
  // receives no gradient (as PyTorch's padding_idx=0). With `owner`, tied to it from the start
  // (see tie_to): nothing of its own is allocated.
  Embedding(Index vocab_size, Index d_model, std::uint64_t seed = 0, Embedding<T>* owner = nullptr);

  // tokens: (B, T) ids in [0, vocab) -> (B*T, d) rows weight[token] * scale.
  // Throws std::invalid_argument naming the bad id and the vocabulary size.
  const Matrix<T>& forward(ConstTokenMap tokens, T scale = T(1));
  // dy: (B*T, d): dweight[token] += scale * dy_row for every non-padding token.
  void backward(ConstMatrixMap<T> dy);

  ParameterList<T> parameters();  // "weight" (vocab, d)
  void zero_grad();
  Index vocab_size() const { return w().rows(); }
  Index dim() const { return w().cols(); }
  // The id whose rows get no gradient (0 by default); its weight row is set to zero.
  void set_padding_id(std::int64_t id);
  std::int64_t padding_id() const { return padding_id_; }
  // Use `owner`'s weight and gradient from now on (one embedding for two vocabularies: the
  // gradients of both uses are summed in owner's); frees this one's own and lists no parameter.
  void tie_to(Embedding<T>& owner);
  bool tied() const { return tied_ != nullptr; }
  // The weight and gradient in use: this embedding's own, or its owner's when tied.
  const Matrix<T>& w() const { return tied_ ? tied_->weight_ : weight_; }
  GradientBuffer<T>& dw() { return tied_ ? tied_->dweight_ : dweight_; }

  Matrix<T> weight_;           // (vocab, d); empty when tied
  GradientBuffer<T> dweight_;  // (vocab, d); empty when tied

 private:
  template <typename U>
  friend class PositionalEmbedding;  // fuses the lookup with "+ PE" but shares cache_tokens()
  // Check every id is in [0, vocab) and remember tokens and scale for backward().
  void cache_tokens(ConstTokenMap tokens, T scale);

  TokenMatrix tokens_;  // (B, T) copy of the last input (small)
  T scale_ = T(1);
  std::int64_t padding_id_ = 0;
  Embedding<T>* tied_ = nullptr;
  bool has_forward_ = false;
  Matrix<T> y_;  // (B*T, d)
};

template <typename T>
class PositionalEmbedding {
 public:
  // With `shared`, the token embedding is tied to that one (Embedding's owner).
  PositionalEmbedding(Index vocab_size, Index d_model, Index max_length = 2048,
                      PositionalLayout layout = PositionalLayout::Interleaved, std::uint64_t seed = 0,
                      Embedding<T>* shared = nullptr);

  // tokens: (B, T) -> (B*T, d) = weight[tokens] * sqrt(d) + PE[:T]. The sinusoid table is a
  // cache: `max_length` rows are built up front and it grows when a longer sequence arrives.
  const Matrix<T>& forward(ConstTokenMap tokens);
  // The model's input layer in one pass over each row: x (layout.rows(), d), resized, = Dropout(
  // weight[tokens] * sqrt(d) + PE) over the rows of `layout` (all B*T of a dense one; of a packed
  // one, row r is padded row layout.ids[r] and draws that row's mask), written into the caller's
  // buffer. On a dense layout the same values as forward(tokens) followed by
  // dropout.forward_inplace(x, training); backward() then takes the layout's rows.
  void forward_dropout(ConstTokenMap tokens, const RowLayout& layout, Dropout<T>& dropout, bool training, Matrix<T>& x);
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
  // Multiply the embedding by sqrt(d_model) (true, the default) or not (false).
  void set_scale(bool on) { scaled_ = on; }
  bool scaled() const { return scaled_; }
  T scale() const { return scaled_ ? static_cast<T>(std::sqrt(static_cast<double>(dim()))) : T(1); }

 private:
  Embedding<T> embedding_;
  PositionalLayout layout_;
  bool scaled_ = true;
  Matrix<T> pe_;  // (cached positions, d), grown by reserve_positions
  Matrix<T> y_;   // (B*T, d)
  // Check the ids, grow the table, and keep for backward the tokens of the layout's rows (all of
  // them for a dense layout): the step every forward starts with. Returns the scale.
  T start_forward(ConstTokenMap tokens, const RowLayout& layout);
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
  const T scale = this->scale();
  const Matrix<T>& w = embedding_.w();
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

// (B, T) bytes: 1 where tokens == padding_id, else 0.
std::vector<std::uint8_t> padding_mask(ConstTokenMap tokens, std::int64_t padding_id = 0);

}  // namespace transformer

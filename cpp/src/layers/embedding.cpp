#include "transformer/layers/embedding.hpp"

#include <algorithm>
#include <cmath>

#include "transformer/core/checks.hpp"
#include "transformer/core/random.hpp"

namespace transformer {

namespace {

// dweight[token] += scale * dy_row for every non-padding token. Several rows may hold the same
// token, so threads split the columns rather than the rows: no two threads touch the same
// element, and every element sums its rows in the same order whatever the thread count.
template <typename T>
void scatter_add_rows(const TokenMatrix& tokens, std::int64_t padding_id, T scale, ConstMatrixMap<T> dy,
                      MatrixMap<T> dweight) {
  const Index n = tokens.size(), d = dweight.cols();
  const std::int64_t* tok = tokens.data();
#pragma omp parallel if (n * d >= kParallelElements)
  {
    const auto [nt, tid] = team_slot();
    const Index c0 = d * tid / nt, c1 = d * (tid + 1) / nt;
    for (Index i = 0; i < n && c1 > c0; ++i) {
      if (tok[i] == padding_id) continue;  // padding gets no gradient
      dweight.row(tok[i]).segment(c0, c1 - c0) += scale * dy.row(i).segment(c0, c1 - c0);
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Embedding

template <typename T>
Embedding<T>::Embedding(Index vocab_size, Index d_model, std::uint64_t seed, Embedding<T>* owner) {
  TCPP_CHECK(vocab_size > 0, "Embedding: vocab_size must be positive, got ", vocab_size);
  TCPP_CHECK(d_model > 0, "Embedding: d_model must be positive, got ", d_model);
  if (owner != nullptr) {
    TCPP_CHECK(owner->vocab_size() == vocab_size && owner->dim() == d_model, "Embedding: cannot share a (",
               owner->vocab_size(), ", ", owner->dim(), ") embedding with a (", vocab_size, ", ", d_model, ") one");
    tied_ = owner;
    return;
  }
  checked_size<T>("Embedding", concat("vocab_size ", vocab_size, " x d_model ", d_model),
                  static_cast<double>(vocab_size) * static_cast<double>(d_model), 0, 0);
  weight_.resize(vocab_size, d_model);
  dweight_ = GradientBuffer<T>(vocab_size, d_model);
  // N(0, d^-1/2): embedding * sqrt(d) then has unit scale, like the positional encoding.
  Rng rng(seed);
  const double std = 1.0 / std::sqrt(static_cast<double>(d_model));
  weight_.row(0).setZero();  // padding
  for (Index i = d_model; i < weight_.size(); ++i) weight_.data()[i] = static_cast<T>(std * rng.normal());
}

template <typename T>
void Embedding<T>::cache_tokens(ConstTokenMap tokens, T scale) {
  const Index n = tokens.size();
  const std::int64_t vocab = vocab_size();
  const std::int64_t* tok = tokens.data();
  for (Index i = 0; i < n; ++i) {
    TCPP_CHECK(tok[i] >= 0 && tok[i] < vocab, "Embedding: token id ", tok[i], " is out of range for vocabulary size ",
               vocab);
  }
  tokens_ = tokens;  // (B, T); reallocates only when the shape changes
  scale_ = scale;
  has_forward_ = true;
}

template <typename T>
const Matrix<T>& Embedding<T>::forward(ConstTokenMap tokens, T scale) {
  cache_tokens(tokens, scale);
  const Index n = tokens_.size(), d = dim();
  y_.resize(n, d);  // (B*T, d)
  const std::int64_t* tok = tokens_.data();
  const Matrix<T>& w = this->w();
#pragma omp parallel for schedule(static) if (n * d >= kParallelElements)
  for (Index i = 0; i < n; ++i) y_.row(i) = w.row(tok[i]) * scale;
  return y_;
}

template <typename T>
void Embedding<T>::backward(ConstMatrixMap<T> dy) {
  if (!has_forward_) throw std::runtime_error("Embedding: backward() called before forward()");
  TCPP_CHECK(dy.rows() == tokens_.size() && dy.cols() == dim(), "Embedding: backward got dout of shape (", dy.rows(),
             ", ", dy.cols(), "), expected (", tokens_.size(), ", ", dim(), ")");
  // forward was y_i = weight[token_i] * scale, so dweight[token_i] += scale * dy_i.
  scatter_add_rows(tokens_, padding_id_, scale_, dy, mmap(dw()));
}

template <typename T>
ParameterList<T> Embedding<T>::parameters() {
  if (tied_) return {};  // the owner lists the weight
  return {{"weight", weight_.data(), dweight_.data(), {weight_.rows(), weight_.cols()}}};
}

template <typename T>
void Embedding<T>::zero_grad() {
  dweight_.setZero();  // empty when tied: the owner zeroes the gradient in use
}

template <typename T>
void Embedding<T>::set_padding_id(std::int64_t id) {
  TCPP_CHECK(id >= 0 && id < vocab_size(), "Embedding: padding id ", id, " is out of range for vocabulary size ",
             vocab_size());
  padding_id_ = id;
  if (!tied_) weight_.row(id).setZero();
}

template <typename T>
void Embedding<T>::tie_to(Embedding<T>& owner) {
  TCPP_CHECK(owner.vocab_size() == vocab_size() && owner.dim() == dim(), "Embedding: cannot share a (",
             owner.vocab_size(), ", ", owner.dim(), ") embedding with a (", vocab_size(), ", ", dim(), ") one");
  tied_ = &owner;
  weight_.resize(0, 0);
  dweight_.reset();
}

// ---------------------------------------------------------------------------------------------
// PositionalEmbedding

template <typename T>
PositionalEmbedding<T>::PositionalEmbedding(Index vocab_size, Index d_model, Index max_length, PositionalLayout layout,
                                            std::uint64_t seed, Embedding<T>* shared)
    : embedding_(vocab_size, d_model, seed, shared), layout_(layout) {
  TCPP_CHECK(max_length > 0, "PositionalEmbedding: max_length must be positive, got ", max_length);
  check_memory("PositionalEmbedding", concat("a positional table of max_length ", max_length, " x d_model ", d_model),
               static_cast<double>(max_length) * static_cast<double>(d_model) * sizeof(T));
  pe_ = positional_encoding<T>(max_length, d_model, layout);  // (max_length, d), built once
}

template <typename T>
void PositionalEmbedding<T>::reserve_positions(Index length) {
  if (length <= pe_.rows()) return;
  // at least double, so that a decode growing one position at a time rebuilds rarely
  pe_ = positional_encoding<T>(std::max(length, 2 * pe_.rows()), dim(), layout_);
}

template <typename T>
const Matrix<T>& PositionalEmbedding<T>::forward(ConstTokenMap tokens) {
  const Index batch = tokens.rows(), length = tokens.cols(), d = dim();
  const T scale = start_forward(tokens, RowLayout::dense(batch, length));
  y_.resize(batch * length, d);  // (B*T, d)
  const std::int64_t* tok = embedding_.tokens_.data();
  const Matrix<T>& w = embedding_.w();
  // y[b, t] = weight[tokens[b, t]] * sqrt(d) + PE[t], in one pass
#pragma omp parallel for schedule(static) if (batch * length * d >= kParallelElements)
  for (Index i = 0; i < batch * length; ++i) {
    y_.row(i) = w.row(tok[i]) * scale + pe_.row(i % length);
  }
  return y_;
}

template <typename T>
T PositionalEmbedding<T>::start_forward(ConstTokenMap tokens, const RowLayout& layout) {
  reserve_positions(tokens.cols());
  const T scale = this->scale();
  embedding_.cache_tokens(tokens, scale);  // checks every id
  if (layout.packed) {
    // keep only the computed rows' tokens, so backward scatters exactly these rows
    const Index n = layout.rows();
    TokenMatrix picked(n, 1);
    for (Index r = 0; r < n; ++r) picked(r, 0) = tokens.data()[layout.ids[static_cast<size_t>(r)]];
    embedding_.tokens_.swap(picked);
  }
  return scale;
}

template <typename T>
void PositionalEmbedding<T>::forward_dropout(ConstTokenMap tokens, const RowLayout& layout, Dropout<T>& dropout,
                                             bool training, Matrix<T>& x) {
  TCPP_CHECK(layout.B == tokens.rows() && layout.T == tokens.cols(), "PositionalEmbedding: a layout of (", layout.B,
             ", ", layout.T, ") positions for (", tokens.rows(), ", ", tokens.cols(), ") tokens");
  const Index length = tokens.cols(), d = dim();
  const T scale = start_forward(tokens, layout);
  x.resize(layout.rows(), d);
  const Matrix<T>& w = embedding_.w();
  const Index* ids = layout.row_ids();  // packed: row r is padded row ids[r]; dense: row r itself
  const std::int64_t* tok = embedding_.tokens_.data();
  // forward()'s expression per row, the dropout's draw and multiply after it while the row is hot
  dropout.fill_inplace(mmap(x), training, ids, [&](Index r, T* row) {
    Eigen::Map<RowVector<T>>(row, d) = w.row(tok[r]) * scale + pe_.row((ids ? ids[r] : r) % length);
  });
}

template <typename T>
void PositionalEmbedding<T>::backward(ConstMatrixMap<T> dy) {
  if (!embedding_.has_forward_) throw std::runtime_error("PositionalEmbedding: backward() called before forward()");
  TCPP_CHECK(dy.rows() == embedding_.tokens_.size() && dy.cols() == dim(),
             "PositionalEmbedding: backward got dout of shape (", dy.rows(), ", ", dy.cols(), "), expected (",
             embedding_.tokens_.size(), ", ", dim(), ")");
  // PE is a constant, so the gradient is the embedding's: dweight[token] += sqrt(d) * dy.
  embedding_.backward(dy);
}

std::vector<std::uint8_t> padding_mask(ConstTokenMap tokens, std::int64_t padding_id) {
  std::vector<std::uint8_t> mask(static_cast<size_t>(tokens.size()));
  const std::int64_t* tok = tokens.data();
  for (Index i = 0; i < tokens.size(); ++i) mask[static_cast<size_t>(i)] = tok[i] == padding_id ? 1 : 0;
  return mask;
}

template class Embedding<float>;
template class Embedding<double>;
template class PositionalEmbedding<float>;
template class PositionalEmbedding<double>;

}  // namespace transformer

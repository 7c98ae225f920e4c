#include "transformer/kernels/inference_backend.hpp"

#include <algorithm>
#include <stdexcept>

#include "transformer/kernels/matmul.hpp"

namespace transformer {

template <typename T>
void PreparedLinear<T>::pack(ComputeType t, const T* W, Index N, Index K, Index ldw, const T* b) {
  type = t;
  if (t == ComputeType::Float32) {
    f32.pack(W, N, K, ldw, b);
    return;
  }
  if constexpr (std::is_same_v<T, float>)
    low.pack(t, W, N, K, ldw, b);
  else
    throw std::logic_error("PreparedLinear: int8 / bf16 requested for a float64 model");
}

template <typename T>
void PreparedLinear<T>::apply(const T* x, Index R, Index ldx, T* y, Index ldy) const {
  if (type == ComputeType::Float32) {
    f32.apply(x, R, ldx, y, ldy);
    return;
  }
  if constexpr (std::is_same_v<T, float>)
    low.apply(x, R, ldx, y, ldy);
  else
    throw std::logic_error("PreparedLinear: int8 / bf16 requested for a float64 model");
}

namespace {

// Fingerprints of weight blocks: each block's weight and bias in 1 MB pieces, hashed in parallel
// (each piece seeded by its place in its block), then each block's piece hashes combined in order.
template <typename T>
struct Piece {
  const T* data;
  Index size;
  std::uint64_t seed;
};

template <typename T>
void add_pieces(std::vector<Piece<T>>& pieces, const T* W, Index NK, const T* b, Index N) {
  constexpr Index kPiece = tuning::kFingerprintPieceBytes / static_cast<Index>(sizeof(T));
  std::uint64_t seed = 0;
  for (Index i = 0; i < NK; i += kPiece) pieces.push_back({W + i, std::min(kPiece, NK - i), seed++});
  for (Index i = 0; i < N; i += kPiece) pieces.push_back({b + i, std::min(kPiece, N - i), seed++});
}

// hashes[i] = the fingerprint of pieces[i]
template <typename T>
void hash_pieces(const std::vector<Piece<T>>& pieces, std::vector<std::uint64_t>& hashes) {
  hashes.resize(pieces.size());
#pragma omp parallel for schedule(dynamic, 4) if (pieces.size() > 1)
  for (Index i = 0; i < static_cast<Index>(pieces.size()); ++i) {
    const Piece<T>& p = pieces[static_cast<size_t>(i)];
    hashes[static_cast<size_t>(i)] = fingerprint(p.data, static_cast<std::size_t>(p.size) * sizeof(T), p.seed);
  }
}

}  // namespace

template <typename T>
std::uint64_t InferenceBackend<T>::fingerprint_of(const Block& blk) {
  std::vector<Piece<T>> pieces;
  add_pieces(pieces, blk.W, blk.N * blk.K, blk.b, blk.N);
  std::vector<std::uint64_t> h;
  hash_pieces(pieces, h);
  return fingerprint(h.data(), h.size() * sizeof(std::uint64_t), 0);
}

template <typename T>
void InferenceBackend<T>::begin(ComputeType c, bool prepare, bool verify) {
  if (c != type_) blocks_.clear();  // prepared for another compute type
  type_ = c;
  // int8 and bf16 exist only as prepared weights
  prepare_ = c != ComputeType::Float32 || (prepare && available());
  next_ = 0;
  if (!prepare_ || !verify || blocks_.empty()) return;
  // every prepared block against the model's weights now, in one parallel pass over all pieces;
  // the blocks that changed are prepared again
  std::vector<Piece<T>> pieces;
  std::vector<size_t> first(blocks_.size() + 1, 0);  // block i's pieces are [first[i], first[i + 1])
  for (size_t i = 0; i < blocks_.size(); ++i) {
    add_pieces(pieces, blocks_[i].W, blocks_[i].N * blocks_[i].K, blocks_[i].b, blocks_[i].N);
    first[i + 1] = pieces.size();
  }
  std::vector<std::uint64_t> h;
  hash_pieces(pieces, h);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    Block& blk = blocks_[i];
    const std::uint64_t f = fingerprint(h.data() + first[i], (first[i + 1] - first[i]) * sizeof(std::uint64_t), 0);
    if (f == blk.fingerprint) continue;
    blk.weights.pack(type_, blk.W, blk.N, blk.K, blk.K, blk.b);
    blk.fingerprint = f;
  }
}

template <typename T>
typename InferenceBackend<T>::Block& InferenceBackend<T>::find(const T* W, const T* b, Index N, Index K) {
  auto is = [&](const Block& blk) { return blk.W == W && blk.b == b && blk.N == N && blk.K == K; };
  if (next_ < blocks_.size() && is(blocks_[next_])) return blocks_[next_++];
  for (size_t i = 0; i < blocks_.size(); ++i)
    if (is(blocks_[i])) {
      next_ = i + 1;
      return blocks_[i];
    }
  // the first product with this block: prepare it
  blocks_.push_back({W, b, N, K, 0, {}});
  Block& blk = blocks_.back();
  blk.weights.pack(type_, W, N, K, K, b);
  blk.fingerprint = fingerprint_of(blk);
  next_ = blocks_.size();
  return blk;
}

template <typename T>
void InferenceBackend<T>::plain(ConstMatrixMap<T> x, const T* W, const T* b, Index N, Matrix<T>& y) const {
  const Index R = x.rows(), K = x.cols();
  if constexpr (std::is_same_v<T, float>) {
    if (have_decode_kernels() && R <= few_rows() && K % 16 == 0) {
      few_rows_linear(x.data(), R, K, W, N, b, y.data());
      return;
    }
  }
  dense_forward<T>(Precision::Float32, x, ConstMatrixMap<T>(W, N, K), MatrixMap<T>(y.data(), R, N), b);
}

template <typename T>
void InferenceBackend<T>::linear(ConstMatrixMap<T> x, const T* W, const T* b, Index N, Matrix<T>& y) {
  const Index R = x.rows(), K = x.cols();
  y.resize(R, N);
  if (R == 0) return;
  if (prepare_ && (type_ != ComputeType::Float32 || R >= kMinRows)) {
    find(W, b, N, K).weights.apply(x.data(), R, K, y.data(), N);
    return;
  }
  plain(x, W, b, N, y);
}

Index SentenceRows::longest() const {
  Index n = 0;
  for (Index b = 0; b < B; ++b) n = std::max(n, offsets[static_cast<size_t>(b + 1)] - offsets[static_cast<size_t>(b)]);
  return n;
}

void SentenceRows::assign(ConstTokenMap tokens, std::int64_t padding_id) {
  B = tokens.rows();
  S = tokens.cols();
  ids.clear();
  offsets.assign(static_cast<size_t>(B + 1), 0);
  for (Index b = 0; b < B; ++b) {
    for (Index t = 0; t < S; ++t)
      if (tokens(b, t) != padding_id) ids.push_back(b * S + t);
    offsets[static_cast<size_t>(b + 1)] = static_cast<Index>(ids.size());
  }
}

template struct PreparedLinear<float>;
template struct PreparedLinear<double>;
template class InferenceBackend<float>;
template class InferenceBackend<double>;

}  // namespace transformer

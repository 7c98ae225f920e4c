// dropout.hpp — inverted dropout: in training, each element is kept with probability 1 - rate and
// scaled by 1 / (1 - rate); in inference it is the identity.
//
// The keep/drop decision for element i of the c-th training forward is
// counter_uniform(seed, stream, c, i) < rate, so masks are the same for any thread count and a
// run can be resumed exactly by restoring `calls()`. The mask is kept for backward as one bit an
// element (a row starts a new 64-bit word), not as a matrix of scale factors: the draw and the
// multiply are one pass, and backward reads 1/32 of the bytes of a float32 mask.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "transformer/core/tensor.hpp"

namespace transformer {

template <typename T>
class Dropout {
 public:
  explicit Dropout(double rate = 0.1, std::uint64_t seed = 0, std::uint64_t stream = 0);

  // x: (N, C) -> y: (N, C). With training == false or rate == 0 the output is a copy of x.
  const Matrix<T>& forward(ConstMatrixMap<T> x, bool training);
  // In-place variant for buffers the caller owns: x *= mask (training) or unchanged. With row_ids
  // (a packed batch), row r draws the mask of padded row row_ids[r], so a packed pass drops the same
  // elements as the padded one.
  void forward_inplace(MatrixMap<T> x, bool training, const Index* row_ids = nullptr);
  // x = Dropout(ReLU(x)) in one pass over x (the feed-forward's hidden layer): the same values as
  // relu_inplace then forward_inplace.
  void forward_relu_inplace(MatrixMap<T> x, bool training, const Index* row_ids = nullptr);
  // Row r of x = fill(r, its first value) then dropout of it, in one pass over each row (the
  // embedding's lookup and positional table, then the dropout after them): the same values as
  // writing every row with fill, then forward_inplace. fill is called once per row, from the
  // threads of one parallel loop.
  using RowFill = std::function<void(Index, T*)>;
  void fill_inplace(MatrixMap<T> x, bool training, const Index* row_ids, const RowFill& fill);
  // dy -> dx = dy * mask (the same scaled mask as the last forward).
  const Matrix<T>& backward(ConstMatrixMap<T> dy);
  void backward_inplace(MatrixMap<T> dy) const;
  // dst = src * mask in one pass (dst resized to src's shape; it must not be src's storage).
  void backward_into(ConstMatrixMap<T> src, Matrix<T>& dst) const;
  // The factor of a kept element in the last forward: 1 / (1 - rate) in training, else 1. Where
  // the forward's output is positive the element was kept, so ReLU's and dropout's backward
  // together are dx = (y > 0) ? dy * kept_scale() : 0 (FeedForward), without reading the mask.
  T kept_scale() const { return last_training_ ? static_cast<T>(1.0 / (1.0 - rate_)) : T(1); }

  double rate() const { return rate_; }
  std::uint64_t calls() const { return calls_; }
  void set_calls(std::uint64_t c) { calls_ = c; }
  std::uint64_t seed() const { return seed_; }
  void set_seed(std::uint64_t s) { seed_ = s; }
  bool last_training() const { return last_training_; }
  const Matrix<T>& output() const { return y_; }

 private:
  // Draws the mask of a training forward over x (recording it in kept_) and multiplies x by it,
  // after `before` (when set) has written or transformed each row in the same pass; rows_, cols_
  // and last_training_ describe x afterwards.
  void drop(MatrixMap<T> x, bool training, const Index* row_ids, const RowFill& before);
  // dst = src * mask over rows_ x cols_ values (dst may be src).
  void apply_mask(const T* src, T* dst) const;
  void check_backward(Index rows, Index cols) const;  // a forward ran, on this shape
  Index words_per_row() const { return (cols_ + 63) / 64; }
  double rate_;
  std::uint64_t seed_, stream_, calls_ = 0;
  bool last_training_ = false;
  Index rows_ = -1, cols_ = -1;
  // bit c % 64 of word r * words_per_row() + c / 64: element (r, c) was kept; valid when
  // last_training_ (a vector only grows, so its storage is reused from batch to batch)
  std::vector<std::uint64_t> kept_;
  Matrix<T> y_, dx_;
};

}  // namespace transformer

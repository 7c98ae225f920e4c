// dropout.hpp — inverted dropout: in training, each element is kept with probability 1 - rate and
// scaled by 1 / (1 - rate); in inference it is the identity.
//
// The keep/drop decision for element i of the c-th training forward is
// counter_uniform(seed, stream, c, i) < rate, so masks are the same for any thread count and a
// run can be resumed exactly by restoring `calls()`.
#pragma once

#include <cstdint>
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
  // dy -> dx = dy * mask (the same scaled mask as the last forward).
  const Matrix<T>& backward(ConstMatrixMap<T> dy);
  void backward_inplace(MatrixMap<T> dy) const;

  double rate() const { return rate_; }
  std::uint64_t calls() const { return calls_; }
  void set_calls(std::uint64_t c) { calls_ = c; }
  std::uint64_t seed() const { return seed_; }
  void set_seed(std::uint64_t s) { seed_ = s; }
  bool last_training() const { return last_training_; }
  const Matrix<T>& output() const { return y_; }

 private:
  void make_mask(Index rows, Index cols, const Index* row_ids);
  double rate_;
  std::uint64_t seed_, stream_, calls_ = 0;
  bool last_training_ = false;
  Index rows_ = -1, cols_ = -1;
  std::vector<T> mask_;  // (N*C) of 0 or 1/(1-rate), valid when last_training_
  Matrix<T> y_, dx_;
};

}  // namespace transformer

#include "transformer/layers/dropout.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "transformer/core/random.hpp"
#include "transformer/layers/activations.hpp"

namespace transformer {

template <typename T>
Dropout<T>::Dropout(double rate, std::uint64_t seed, std::uint64_t stream) : rate_(rate), seed_(seed), stream_(stream) {
  TCPP_CHECK(rate >= 0.0 && rate < 1.0, "Dropout: rate must be in [0, 1), got ", rate);
}

namespace {
// 64 bytes of 0 or 1 as the bits of one word (byte j -> bit j): eight bytes at a time, the
// multiply gathering byte i's low bit into bit 56 + i.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "pack_bytes reads bytes as a little-endian word");
std::uint64_t pack_bytes(const unsigned char* keep) {
  std::uint64_t bits = 0;
  for (int b = 0; b < 8; ++b) {
    std::uint64_t eight;
    std::memcpy(&eight, keep + 8 * b, sizeof eight);  // little-endian: byte i at bits 8i
    bits |= ((eight * 0x0102040810204080ULL) >> 56) << (8 * b);
  }
  return bits;
}
// The inverse: bit j of `bits` as byte j of keep (0 or 1), eight at a time. The multiply copies a
// byte of bits into every byte, the mask keeps bit i in byte i, and adding 0x7F carries a set bit
// into bit 7 of its byte (no byte passes 0xFF), which the shift brings down to bit 0.
void unpack_bits(std::uint64_t bits, unsigned char* keep) {
  for (int b = 0; b < 8; ++b) {
    const std::uint64_t spread = (((bits >> (8 * b)) & 0xFFu) * 0x0101010101010101ULL) & 0x8040201008040201ULL;
    const std::uint64_t eight = ((spread + 0x7F7F7F7F7F7F7F7FULL) >> 7) & 0x0101010101010101ULL;
    std::memcpy(keep + 8 * b, &eight, sizeof eight);
  }
}
}  // namespace

template <typename T>
void Dropout<T>::drop(MatrixMap<T> x, bool training, const Index* row_ids, const RowFill& before) {
  rows_ = x.rows();
  cols_ = x.cols();
  last_training_ = training && rate_ > 0.0;
  const Index rows = rows_, cols = cols_;
  if (!last_training_) {
    if (before) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
      for (Index r = 0; r < rows; ++r) before(r, x.data() + r * cols);
    }
    return;
  }
  const Index words = words_per_row();
  kept_.resize(static_cast<size_t>(rows * words));  // a vector's storage only grows; a copy takes the size
  const T scale = static_cast<T>(1.0 / (1.0 - rate_));
  // u = bits * 2^-53 < rate exactly when bits < rate * 2^53 (exact: a power-of-2 scale), that
  // is bits < ceil(rate * 2^53): the draw compared as an integer, without the conversion
  const std::uint64_t drop_below = static_cast<std::uint64_t>(std::ceil(std::ldexp(rate_, 53)));
  const std::uint64_t key = counter_key(seed_, stream_, calls_++);
  T* const data = x.data();
  std::uint64_t* const kept = kept_.data();
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
  for (Index r = 0; r < rows; ++r) {
    T* row = data + r * cols;
    if (before) before(r, row);
    // element (r, c) draws index (padded row) * cols + c: a packed pass drops what the padded one does
    const std::uint64_t base = static_cast<std::uint64_t>(row_ids ? row_ids[r] : r) * static_cast<std::uint64_t>(cols);
    for (Index w = 0; w < words; ++w) {
      const Index c0 = w * 64, n = std::min<Index>(64, cols - c0);
      unsigned char keep[64] = {};  // 1: kept (0 past n, so that the packing below reads zeros)
      for (Index j = 0; j < n; ++j)
        keep[j] = keyed_bits53(key, base + static_cast<std::uint64_t>(c0 + j)) >= drop_below ? 1 : 0;
      for (Index j = 0; j < n; ++j)
        row[c0 + j] *= keep[j] ? scale : T(0);  // a product, as a mask of scale factors gives (NaN stays NaN)
      kept[r * words + w] = pack_bytes(keep);
    }
  }
}

template <typename T>
void Dropout<T>::apply_mask(const T* src, T* dst) const {
  const Index rows = rows_, cols = cols_, words = words_per_row();
  const T scale = static_cast<T>(1.0 / (1.0 - rate_));
  const std::uint64_t* const kept = kept_.data();
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
  for (Index r = 0; r < rows; ++r) {
    const T* s = src + r * cols;
    T* d = dst + r * cols;
    for (Index w = 0; w < words; ++w) {
      const Index c0 = w * 64, n = std::min<Index>(64, cols - c0);
      unsigned char keep[64];
      unpack_bits(kept[r * words + w], keep);
      for (Index j = 0; j < n; ++j) d[c0 + j] = s[c0 + j] * (keep[j] ? scale : T(0));
    }
  }
}

template <typename T>
void Dropout<T>::forward_inplace(MatrixMap<T> x, bool training, const Index* row_ids) {
  drop(x, training, row_ids, RowFill());
}

template <typename T>
void Dropout<T>::forward_relu_inplace(MatrixMap<T> x, bool training, const Index* row_ids) {
  if (!(training && rate_ > 0.0)) {  // no mask: ReLU alone, over the whole matrix at once
    drop(x, training, row_ids, RowFill());
    relu_inplace<T>(x.data(), x.size());
    return;
  }
  const Index cols = x.cols();
  drop(x, training, row_ids, [cols](Index, T* row) {
    RowArray<T>(row, cols) = RowArray<T>(row, cols).max(T(0));  // relu_inplace's expression
  });
}

template <typename T>
void Dropout<T>::fill_inplace(MatrixMap<T> x, bool training, const Index* row_ids, const RowFill& fill) {
  TCPP_CHECK(static_cast<bool>(fill), "Dropout::fill_inplace needs a row fill");
  drop(x, training, row_ids, fill);
}

template <typename T>
const Matrix<T>& Dropout<T>::forward(ConstMatrixMap<T> x, bool training) {
  y_ = x;
  forward_inplace(mmap(y_), training);
  return y_;
}

template <typename T>
void Dropout<T>::check_backward(Index rows, Index cols) const {
  if (rows_ < 0) throw std::runtime_error("Dropout: backward() called before forward()");
  TCPP_CHECK(rows == rows_ && cols == cols_, "Dropout: backward got dout of shape (", rows, ", ", cols, "), expected (",
             rows_, ", ", cols_, ")");
}

template <typename T>
void Dropout<T>::backward_inplace(MatrixMap<T> dy) const {
  check_backward(dy.rows(), dy.cols());
  // forward was y = x * mask, so dx = dy * mask.
  if (last_training_) apply_mask(dy.data(), dy.data());
}

template <typename T>
void Dropout<T>::backward_into(ConstMatrixMap<T> src, Matrix<T>& dst) const {
  check_backward(src.rows(), src.cols());
  dst.resize(src.rows(), src.cols());
  if (last_training_)
    apply_mask(src.data(), dst.data());
  else
    dst = src;
}

template <typename T>
const Matrix<T>& Dropout<T>::backward(ConstMatrixMap<T> dy) {
  backward_into(dy, dx_);
  return dx_;
}

template class Dropout<float>;
template class Dropout<double>;

}  // namespace transformer

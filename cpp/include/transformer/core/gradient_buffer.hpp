// gradient_buffer.hpp — the storage of a parameter's gradient.
//
// A model that is read, evaluated, translated or saved but never trained should not pay for its
// gradients, which are as large as its weights. A GradientBuffer is zero from the start without
// writing a byte: a large one is an anonymous memory mapping, whose pages the operating system
// supplies (as zeros) only when they are first written, so the memory is spent by the first
// backward (or whatever else writes the gradient), not by the constructor. A small one (a bias,
// a LayerNorm) is ordinary zeroed heap memory. The storage never moves while the buffer lives, so
// the views handed out (Parameter::grad, to Python and to Adam) stay valid.
#pragma once

#include <cstddef>
#include <utility>

#include "transformer/core/tensor.hpp"

namespace transformer {

namespace gradient_memory {
// `bytes` of zeroed memory, 64-byte aligned (a mapping is page-aligned); `mapped` tells how it
// was obtained, for release. Throws std::bad_alloc when there is none.
void* allocate_zeroed(std::size_t bytes, bool& mapped);
void release(void* p, std::size_t bytes, bool mapped);
// Set p[0, bytes) to zero bytes, writing only the 4 KiB blocks that hold a non-zero byte: the
// pages of a mapping that were never written are read (as the shared zero page), not touched.
void zero_written(void* p, std::size_t bytes);
}  // namespace gradient_memory

template <typename T>
class GradientBuffer {
 public:
  GradientBuffer() = default;
  // A (rows, cols) buffer of zeros (row-major, as Matrix<T>).
  GradientBuffer(Index rows, Index cols) : rows_(rows), cols_(cols) {
    if (size() > 0) data_ = static_cast<T*>(gradient_memory::allocate_zeroed(bytes(), mapped_));
  }
  ~GradientBuffer() { reset(); }
  GradientBuffer(const GradientBuffer&) = delete;
  GradientBuffer& operator=(const GradientBuffer&) = delete;
  GradientBuffer(GradientBuffer&& o) noexcept { swap(o); }
  GradientBuffer& operator=(GradientBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      swap(o);
    }
    return *this;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  Index rows() const { return rows_; }
  Index cols() const { return cols_; }
  Index size() const { return rows_ * cols_; }
  MatrixMap<T> map() { return MatrixMap<T>(data_, rows_, cols_); }
  ConstMatrixMap<T> cmap() const { return ConstMatrixMap<T>(data_, rows_, cols_); }
  // Every value +0; blocks that already hold only zero bytes are left unwritten.
  void setZero() {
    if (data_ != nullptr) gradient_memory::zero_written(data_, bytes());
  }
  // Free the storage (an empty (0, 0) buffer), e.g. when a tied layer uses its owner's gradient.
  void reset() {
    if (data_ != nullptr) gradient_memory::release(data_, bytes(), mapped_);
    data_ = nullptr;
    rows_ = cols_ = 0;
    mapped_ = false;
  }

 private:
  std::size_t bytes() const { return static_cast<std::size_t>(size()) * sizeof(T); }
  void swap(GradientBuffer& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(rows_, o.rows_);
    std::swap(cols_, o.cols_);
    std::swap(mapped_, o.mapped_);
  }
  T* data_ = nullptr;
  Index rows_ = 0, cols_ = 0;
  bool mapped_ = false;
};

// A gradient buffer as the map that layers and kernels take, as for a Matrix (tensor.hpp).
template <typename T>
ConstMatrixMap<T> cmap(const GradientBuffer<T>& g) {
  return g.cmap();
}
template <typename T>
MatrixMap<T> mmap(GradientBuffer<T>& g) {
  return g.map();
}

}  // namespace transformer

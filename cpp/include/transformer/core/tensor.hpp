// tensor.hpp — the few types every layer shares.
//
// Activations are row-major Eigen matrices with one row per token: a batch of B sequences of
// T tokens with C channels is a (B*T, C) matrix. Python sees the same memory as (B, T, C).
//
// Gradient policy (every layer follows it):
//   * forward(...) caches exactly what backward(...) needs, in member buffers that are resized
//     only when the shapes change (no allocation per step once shapes are stable; softmax
//     attention's buffers and shared scratch, whose shapes change from call to call, are
//     GrowOnlyMatrix, which allocates only while it grows);
//   * backward(dout) returns the gradient of the input(s) and ACCUMULATES (+=) into the
//     parameter gradients;
//   * only zero_grad() clears parameter gradients.
#pragma once

#include <Eigen/Core>

#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "transformer/core/tuning.hpp"

namespace transformer {

using Index = Eigen::Index;

template <typename T>
using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using RowVector = Eigen::Matrix<T, 1, Eigen::Dynamic>;
template <typename T>
using MatrixMap = Eigen::Map<Matrix<T>>;
template <typename T>
using ConstMatrixMap = Eigen::Map<const Matrix<T>>;
// A strided block of a row-major matrix, e.g. one head's columns of (B*T, C).
template <typename T>
using StridedMap = Eigen::Map<Matrix<T>, 0, Eigen::OuterStride<>>;
template <typename T>
using ConstStridedMap = Eigen::Map<const Matrix<T>, 0, Eigen::OuterStride<>>;
// One row (or any contiguous run) of values as an Eigen array, for element-wise row kernels.
template <typename T>
using RowArray = Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>>;
template <typename T>
using ConstRowArray = Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>>;

// A whole matrix as the map that layers and kernels take (a view, no copy): cmap to read it, mmap
// to write it.
template <typename T>
ConstMatrixMap<T> cmap(const Matrix<T>& m) {
  return ConstMatrixMap<T>(m.data(), m.rows(), m.cols());
}
template <typename T>
MatrixMap<T> mmap(Matrix<T>& m) {
  return MatrixMap<T>(m.data(), m.rows(), m.cols());
}

// A row-major (rows, cols) buffer whose storage only grows: resize() to a shape that fits in what
// it holds keeps the storage (the values are then unspecified, as after Matrix::resize). Per-step
// scratch whose shape changes from batch to batch (packed row counts; self- and cross-attention
// sharing a slot) then allocates only while it grows, and touches fresh pages only then, where a
// Matrix frees and allocates at every change of size. The storage is 64-byte aligned. It converts
// to no Matrix, so nothing copies it without a visible call: read and write it through cmap() and
// mmap(), data() or row().
template <typename T>
class GrowOnlyMatrix {
 public:
  GrowOnlyMatrix() = default;
  GrowOnlyMatrix(const GrowOnlyMatrix& o) { *this = o; }
  GrowOnlyMatrix& operator=(const GrowOnlyMatrix& o) {
    if (this != &o) {
      resize(o.rows_, o.cols_);
      std::copy_n(o.data(), o.size(), data());
    }
    return *this;
  }
  GrowOnlyMatrix(GrowOnlyMatrix&& o) noexcept { swap(o); }
  GrowOnlyMatrix& operator=(GrowOnlyMatrix&& o) noexcept {
    GrowOnlyMatrix(std::move(o)).swap(*this);
    return *this;
  }
  void swap(GrowOnlyMatrix& o) noexcept {
    std::swap(raw_, o.raw_);
    std::swap(data_, o.data_);
    std::swap(capacity_, o.capacity_);
    std::swap(rows_, o.rows_);
    std::swap(cols_, o.cols_);
  }

  void resize(Index rows, Index cols) {
    if (rows < 0 || cols < 0)
      throw std::invalid_argument("GrowOnlyMatrix: rows and cols must be >= 0, got " + std::to_string(rows) + " and " +
                                  std::to_string(cols));
    const size_t need = static_cast<size_t>(rows) * static_cast<size_t>(cols);
    if (need > capacity_) {
      release();  // the old values are not kept: free them before allocating
      // malloc and a 64-byte offset into it, as Eigen aligns its own storage
      size_t space = need * sizeof(T) + 64;
      raw_.reset(std::malloc(space));
      if (!raw_) throw std::bad_alloc();
      void* at = raw_.get();
      data_ = static_cast<T*>(std::align(64, need * sizeof(T), at, space));
      capacity_ = need;
    }
    rows_ = rows;
    cols_ = cols;
  }
  // Frees the storage (shape (0, 0)).
  void release() {
    raw_.reset();
    data_ = nullptr;
    capacity_ = 0;
    rows_ = cols_ = 0;
  }
  Index rows() const { return rows_; }
  Index cols() const { return cols_; }
  Index size() const { return rows_ * cols_; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  Eigen::Map<RowVector<T>> row(Index i) { return Eigen::Map<RowVector<T>>(data() + i * cols_, cols_); }
  Eigen::Map<const RowVector<T>> row(Index i) const {
    return Eigen::Map<const RowVector<T>>(data() + i * cols_, cols_);
  }

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> raw_;
  T* data_ = nullptr;
  size_t capacity_ = 0;
  Index rows_ = 0, cols_ = 0;
};
template <typename T>
ConstMatrixMap<T> cmap(const GrowOnlyMatrix<T>& m) {
  return ConstMatrixMap<T>(m.data(), m.rows(), m.cols());
}
template <typename T>
MatrixMap<T> mmap(GrowOnlyMatrix<T>& m) {
  return MatrixMap<T>(m.data(), m.rows(), m.cols());
}

// Token ids as they come from NumPy (int64) — row-major (B, T).
using TokenMatrix = Eigen::Matrix<std::int64_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstTokenMap = Eigen::Map<const TokenMatrix>;
// Attention masks: (B, T_q, T_k) bytes, 1 = blocked (may not attend), 0 = allowed.
using MaskBuffer = std::vector<std::uint8_t>;

// Which rows of a padded batch (B sequences of T positions, row b*T + t) a pass computes: all of
// them, or ("removing padding") only the listed ones. Position-wise work (projections, LayerNorm,
// feed-forward, dropout, the output layer) then runs on rows() rows instead of B*T; attention
// scatters its inputs back into the padded (B, T) layout, where the masks live.
struct RowLayout {
  Index B = 0, T = 0;
  bool packed = false;
  std::vector<Index> ids;  // packed: the padded row index b*T + t of every computed row, increasing
  Index rows() const { return packed ? static_cast<Index>(ids.size()) : B * T; }
  const Index* row_ids() const { return packed ? ids.data() : nullptr; }
  static RowLayout dense(Index B, Index T) {
    RowLayout l;
    l.B = B;
    l.T = T;
    return l;
  }
};

// A named view of one parameter tensor and its gradient. The storage belongs to a layer which
// never reallocates it after construction, so views handed out (to Python, to Adam) stay valid
// for the layer's lifetime.
template <typename T>
struct Parameter {
  std::string name;
  T* value = nullptr;
  T* grad = nullptr;
  std::vector<Index> shape;
  Index size() const {
    Index n = 1;
    for (Index s : shape) n *= s;
    return n;
  }
};

template <typename T>
using ParameterList = std::vector<Parameter<T>>;

// Append `in` to `out` with `prefix.` before every name.
template <typename T>
void append_parameters(ParameterList<T>& out, const ParameterList<T>& in, const std::string& prefix) {
  for (const auto& p : in) {
    Parameter<T> q = p;
    q.name = prefix.empty() ? p.name : prefix + "." + p.name;
    out.push_back(std::move(q));
  }
}

// The parameters of a layer made of named parts, each part's names after "<part>.":
//   named_parameters<T>({{"linear1", linear1_.parameters()}, {"linear2", linear2_.parameters()}})
template <typename T>
ParameterList<T> named_parameters(std::initializer_list<std::pair<const char*, ParameterList<T>>> parts) {
  ParameterList<T> ps;
  for (const auto& part : parts) append_parameters(ps, part.second, part.first);
  return ps;
}

// zero_grad() of every part of a layer.
template <typename... Parts>
void zero_grads(Parts&... parts) {
  (parts.zero_grad(), ...);
}

// Errors: std::invalid_argument -> Python ValueError, std::out_of_range -> IndexError,
// std::runtime_error -> RuntimeError (pybind11's standard translation).
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// Element-wise helpers that split rows or columns among the OpenMP threads once the work is large
// enough to pay for a parallel region. Each element is computed by one thread in a fixed order, so
// results do not depend on the thread count. The thresholds are in tuning.hpp.
constexpr Index kParallelMin = tuning::kParallelMin;
constexpr Index kParallelElements = tuning::kParallelElements;

// The calling thread's place in the innermost OpenMP team: `count` threads, this one number `id`
// (1 and 0 outside a parallel region or without OpenMP).
struct TeamSlot {
  Index count, id;
};
inline TeamSlot team_slot() {
#ifdef _OPENMP
  return {omp_get_num_threads(), omp_get_thread_num()};
#else
  return {1, 0};
#endif
}

// y.row(r) += b for every row of a row-major (rows, cols) buffer.
template <typename T>
void add_row_vector(T* y, Index rows, Index cols, const T* b) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
  for (Index r = 0; r < rows; ++r) {
    T* yr = y + r * cols;
    for (Index c = 0; c < cols; ++c) yr[c] += b[c];
  }
}

// db += the column sums of a row-major (rows, cols) dy; threads own column ranges and add rows in
// order.
template <typename T>
void add_column_sums(const T* dy, Index rows, Index cols, T* db) {
#pragma omp parallel if (rows * cols >= kParallelMin)
  {
    const auto [nt, tid] = team_slot();
    // column blocks of 16 so that threads do not share cache lines of db
    const Index blocks = (cols + 15) / 16;
    const Index c0 = std::min(cols, 16 * (blocks * tid / nt)), c1 = std::min(cols, 16 * (blocks * (tid + 1) / nt));
    // sum each chunk of columns over the rows first, then add the sums to db (db + sum, as a
    // separate reduction would: accumulating the same gradient twice doubles it exactly)
    for (Index k0 = c0; k0 < c1; k0 += 256) {
      const Index k1 = std::min(c1, k0 + 256);
      T acc[256];
      for (Index c = k0; c < k1; ++c) acc[c - k0] = T(0);
      for (Index r = 0; r < rows; ++r) {
        const T* row = dy + r * cols;
        for (Index c = k0; c < k1; ++c) acc[c - k0] += row[c];
      }
      for (Index c = k0; c < k1; ++c) db[c] += acc[c - k0];
    }
  }
}

// out = a + b over n elements (out may alias a or b).
template <typename T>
void add_arrays(T* out, const T* a, const T* b, Index n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (Index i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

#define TCPP_CHECK(cond, ...)                                                     \
  do {                                                                            \
    if (!(cond)) throw std::invalid_argument(::transformer::concat(__VA_ARGS__)); \
  } while (0)

}  // namespace transformer

// inference_backend.hpp — what the layers' inference entry points share: the matrix-product backend, the
// rows of a batch of sentences without padding, and scratch buffers.
//
// Every layer has, beside forward()/backward(), const inference methods (`infer`, `infer_step`;
// see attention.hpp, feed_forward.hpp, encoder.hpp, decoder.hpp, transformer.hpp) that greedy and
// beam search (inference/decoding.hpp) call. They keep nothing for backward() and touch none of the layer's
// training state; their dense products go through an InferenceBackend, which decides how
// y = x W^T + b is computed:
//
//   * plain: straight from the model's weights (float32: the few-row kernel of decode_kernels.hpp
//     for a handful of rows, else the dense layers' float32 kernel; float64: Eigen's GEMM);
//   * prepared: each weight block prepared once for the compute type (quantized_linear.hpp):
//     float32 panels (PackedLinear), int8 or bf16 (QuantizedLinear). A block is prepared the first
//     time a layer multiplies by it and kept; begin() checks the prepared blocks against the
//     model's current weights (a 64-bit fingerprint of each) and prepares again the ones that
//     changed. The weights are not listed anywhere: the layers name their own blocks.
//
// Precision of inference is therefore a backend choice, never a copy of a layer.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "transformer/core/tensor.hpp"
#include "transformer/kernels/decode_kernels.hpp"
#include "transformer/kernels/isa.hpp"
#include "transformer/kernels/quantized_linear.hpp"

namespace transformer {

// One dense layer's weight prepared for inference: float32 panels (PackedLinear), or int8 / bf16
// (QuantizedLinear), by the compute type it was prepared for.
template <typename T>
struct PreparedLinear {
  ComputeType type = ComputeType::Float32;
  PackedLinear<T> f32;
  QuantizedLinear low;  // float models only

  void pack(ComputeType t, const T* W, Index N, Index K, Index ldw, const T* b);
  // y (R, N) = x (R, K) W^T + b
  void apply(const T* x, Index R, Index ldx, T* y, Index ldy) const;
};

template <typename T>
class InferenceBackend {
 public:
  // Steps with fewer rows than this multiply float32 weights as they are (no packing pays off at
  // batch 1): prepared float32 panels serve products of at least kMinRows rows.
  static constexpr Index kMinRows = tuning::kPreparedMinRows;
  // Plain float32 products of up to this many rows use the few-row kernel (it reads W as it is;
  // the dense layers' kernel packs W on every call).
  static constexpr Index kFewRows = tuning::kFewRows;
  // Preparing float32 weights is worth it only for float builds with the AVX-512 kernels (at the
  // avx2 level Eigen's products on the weights as they are decode as fast at batch 32, and the
  // panels would cost a second copy of the weights); int8 and bf16 always prepare theirs
  // (check_compute_type says whether they can run).
  static bool available() { return std::is_same_v<T, float> && have_decode_kernels() && isa_allows(Isa::Avx512); }
  // Plain float32 products of up to this many rows use the few-row kernel: kFewRows with the
  // AVX-512 kernel; at the avx2 level only the products of a step at batch 1 to 3 (beyond, Eigen
  // is as fast).
  static Index few_rows() { return isa_allows(Isa::Avx512) ? kFewRows : kMinRows - 1; }
  // Whether a decode of `rows` rows (after the first step) in compute type c prepares weights.
  static bool wanted(ComputeType c, Index rows) {
    return c != ComputeType::Float32 || (available() && rows >= kMinRows);
  }

  // Start a pass in compute type c, with prepared weights (`prepare`; float32: only when
  // available(); int8 and bf16: always) or plain products. With `verify`, the blocks prepared by
  // earlier passes are checked against the model's current weights and prepared again where they
  // changed; without, the caller knows that no weight changed since they were last checked.
  void begin(ComputeType c, bool prepare, bool verify);

  // y (R, N) = x (R, K) W^T + b for a block of the model's weights: W (N, K) row-major and
  // contiguous, b (N); by the prepared block (prepared now if this is its first use) or plainly.
  void linear(ConstMatrixMap<T> x, const T* W, const T* b, Index N, Matrix<T>& y);
  void linear(const Matrix<T>& x, const T* W, const T* b, Index N, Matrix<T>& y) { linear(cmap(x), W, b, N, y); }

  ComputeType compute_type() const { return type_; }
  bool prepared() const { return prepare_; }

 private:
  struct Block {
    const T* W;
    const T* b;
    Index N, K;
    std::uint64_t fingerprint;  // of W and b as they were prepared
    PreparedLinear<T> weights;
  };
  static std::uint64_t fingerprint_of(const Block& blk);
  void plain(ConstMatrixMap<T> x, const T* W, const T* b, Index N, Matrix<T>& y) const;
  Block& find(const T* W, const T* b, Index N, Index K);

  ComputeType type_ = ComputeType::Float32;
  bool prepare_ = false;
  std::vector<Block> blocks_;  // in the order of first use
  size_t next_ = 0;            // where the next lookup starts: products come in the same order every step
};

// The rows of a batch of B token sequences of length S without the padding: row i is padded
// position ids[i] = b*S + t (increasing), sentence b's rows are [offsets[b], offsets[b + 1]).
struct SentenceRows {
  Index B = 0, S = 0;
  std::vector<Index> ids;      // (rows)
  std::vector<Index> offsets;  // (B + 1)
  Index rows() const { return static_cast<Index>(ids.size()); }
  Index longest() const;
  // The non-padding positions of tokens (B, S): those not equal to padding_id.
  void assign(ConstTokenMap tokens, std::int64_t padding_id = 0);
};

// Buffers of the inference entry points, reused from call to call. One buffer per shape that a
// step uses (an Eigen matrix reallocates whenever its size changes).
template <typename T>
struct InferenceScratch {
  Matrix<T> x;            // (rows, d) the stack's running activations
  Matrix<T> n, a;         // (rows, d) residual sub-layers: the normed input or the sum, the sub-layer's output
  Matrix<T> qkv, q, ctx;  // attention: [Q | K | V] (rows, 3d), cross-attention's Q (rows, d), heads (rows, d)
  Matrix<T> f;            // (rows, d_ff) the feed-forward's hidden layer
  std::vector<T> scores;  // attention scores, one row per (row, head)
  Matrix<T> gather;       // select_rows
  T* score_rows(Index rows, Index cols) {
    const size_t need = static_cast<size_t>(rows * cols);
    if (scores.size() < need) scores.resize(need);
    return scores.data();
  }
};

}  // namespace transformer

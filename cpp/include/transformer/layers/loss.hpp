// loss.hpp — masked softmax cross-entropy from logits, fused with its gradient, and accuracy.
//
// Targets equal to 0 (padding) are ignored. With n = number of non-padding targets and label
// smoothing eps over V classes, the target distribution is q = (1 - eps) onehot(t) + eps / V
// (PyTorch's convention), and
//   loss = (1/n) sum_rows sum_j q_j (logsumexp(x) - x_j),   dlogits = (softmax(x) - q) / n.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "transformer/core/tensor.hpp"
#include "transformer/kernels/matmul.hpp"

namespace transformer {

struct LossStats {
  double loss = 0.0;  // mean over non-padding targets (0 when there are none)
  Index count = 0;    // number of non-padding targets
  Index correct = 0;  // argmax(logits) == target, over non-padding targets
};

// logits (N, V), targets (N) with ids in [0, V); targets equal to padding_id have no loss. When dlogits != nullptr it
// is resized to (N, V) and receives d loss / d logits; it may be the matrix behind logits (the gradient then replaces
// the logits in place, row by row). Throws std::invalid_argument for ids out of range and
// NonFiniteError (a std::runtime_error, see checks.hpp) when the loss is not finite.
template <typename T>
LossStats masked_cross_entropy(ConstMatrixMap<T> logits, const std::int64_t* targets, Matrix<T>* dlogits,
                               double label_smoothing = 0.0, std::int64_t padding_id = 0);

// The training loss of the model's output layer, fused: logits (N, V) hold y W^T without the
// bias. Row by row, while the row is in cache, this adds the bias, computes the masked
// cross-entropy as masked_cross_entropy does, writes d loss / d logits over the logits (which are
// then the gradient of y W^T + b as well) and adds the gradient's column sums to dbias (V).
// `partial` is scratch. Same errors as masked_cross_entropy; on a throw the logits hold nothing
// useful and dbias is unchanged.
template <typename T>
LossStats output_cross_entropy(MatrixMap<T> logits, const T* bias, const std::int64_t* targets, double label_smoothing,
                               T* dbias, Matrix<T>& partial, std::int64_t padding_id = 0);

// Scratch of chunked_output_loss, kept by its caller from step to step: one chunk's logits
// (chunk rows, V) and the bias gradient's block sums. The buffers grow, never shrink, and are
// 64-byte aligned, so that the vectorised row loops split every row the same way (and sum it in the
// same order) wherever the buffer lands.
template <typename T>
class OutputLossScratch {
 public:
  T* logits(Index values) { return aligned(logits_, values); }
  T* partial(Index values) { return aligned(partial_, values); }

 private:
  static T* aligned(std::vector<T>& buf, Index values) {
    const size_t need = static_cast<size_t>(values) + 64 / sizeof(T);
    if (buf.size() < need) buf.resize(need);
    void* p = buf.data();
    size_t space = buf.size() * sizeof(T);
    return static_cast<T*>(std::align(64, static_cast<size_t>(values) * sizeof(T), p, space));
  }
  std::vector<T> logits_, partial_;
};

// Rows per chunk of chunked_output_loss for a vocabulary of `classes` and scalars of
// `scalar_bytes`: tuning::kOutputChunkBytes of logits, at least tuning::kOutputChunkMinRows, a
// multiple of tuning::kLossBlockRows.
Index output_chunk_rows(Index classes, Index scalar_bytes);

// The output layer logits = y W^T + b and its training loss fused, chunk by chunk of rows, so that
// the (N, V) logits are never stored whole: for each chunk c of chunk_rows rows (0: sized by
// output_chunk_rows), logits_c = y_c W^T in scratch; the bias, the masked cross-entropy and its
// gradient as output_cross_entropy computes them row by row (normalised by the non-padding
// targets of all N rows); then dW += dlogits_c^T y_c, dbias += its column sums and
// dy_c = dlogits_c W. The products run at `precision` (dense_forward / dense_backward_*).
// y (N, d), W (V, d), bias (V), targets (N), dW (V, d) accumulated, dbias (V) accumulated, dy
// (N, d) written. The same results as dense_forward + output_cross_entropy + dense_backward_*
// on the whole matrix but for the order of the sums over rows of dW and dbias (by chunk, then
// within it); independent of the thread count. Same errors as output_cross_entropy; on a throw
// dW, dbias and dy hold part of the step's sums (a step whose loss is not finite applies none of its
// gradients).
template <typename T>
LossStats chunked_output_loss(Precision precision, ConstMatrixMap<T> y, ConstMatrixMap<T> W, const T* bias,
                              const std::int64_t* targets, double label_smoothing, MatrixMap<T> dW, T* dbias,
                              MatrixMap<T> dy, OutputLossScratch<T>& scratch, Index chunk_rows = 0,
                              std::int64_t padding_id = 0);

// Fraction of non-padding targets whose argmax is right (0 when there are none).
template <typename T>
LossStats masked_accuracy(ConstMatrixMap<T> logits, const std::int64_t* targets, std::int64_t padding_id = 0);

}  // namespace transformer

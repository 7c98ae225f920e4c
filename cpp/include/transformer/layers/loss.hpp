// loss.hpp — masked softmax cross-entropy from logits, fused with its gradient, and accuracy.
//
// Targets equal to 0 (padding) are ignored. With n = number of non-padding targets and label
// smoothing eps over V classes, the target distribution is q = (1 - eps) onehot(t) + eps / V
// (PyTorch's convention), and
//   loss = (1/n) sum_rows sum_j q_j (logsumexp(x) - x_j),   dlogits = (softmax(x) - q) / n.
#pragma once

#include <cstdint>

#include "transformer/core/tensor.hpp"

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

// Fraction of non-padding targets whose argmax is right (0 when there are none).
template <typename T>
LossStats masked_accuracy(ConstMatrixMap<T> logits, const std::int64_t* targets, std::int64_t padding_id = 0);

}  // namespace transformer

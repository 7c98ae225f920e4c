#include "transformer/layers/loss.hpp"

#include <algorithm>
#include <cmath>

#include "transformer/core/checks.hpp"

namespace transformer {

namespace {

// output_cross_entropy sums the bias gradient over fixed blocks of this many rows.
constexpr Index kLossBlockRows = tuning::kLossBlockRows;

// Every target must be a class index in [0, V); returns how many are not padding (pad).
Index check_targets(const char* who, const std::int64_t* targets, Index rows, Index classes, std::int64_t pad) {
  Index count = 0;
  for (Index i = 0; i < rows; ++i) {
    TCPP_CHECK(targets[i] >= 0 && targets[i] < classes, who, ": target id ", targets[i], " at row ", i,
               " is out of range for ", classes, " classes");
    count += targets[i] != pad;
  }
  return count;
}

// Whether t is the arg max of x (the first maximum, as numpy.argmax and torch.argmax), given the
// row maximum m: x_t must equal m and no earlier entry may. Cheaper than an index-tracking max,
// which Eigen does not vectorise; the second test only runs on the rare exact ties.
template <typename T>
inline bool is_argmax(const ConstRowArray<T>& x, T m, std::int64_t t) {
  return x(t) == m && !(x.head(t) == m).any();
}

// One row of the loss: x (V) are the row's logits, t its target (not padding). Returns the row's
// loss, adds 1 to `correct` when t is the arg max, and (g != nullptr) writes the row's gradient
// into g, which may be x itself: everything the loss needs from x is read before g is written.
// With lse = logsumexp(x) and q = (1 - eps) onehot(t) + eps / V,
//   loss_row = sum_j q_j (lse - x_j) = (1 - eps)(lse - x_t) + eps (lse - mean_j x_j)
// and, since d lse / d x_j = softmax_j and sum_j q_j = 1,
//   dlogits_j = (softmax_j - q_j) / n = softmax_j / n - eps / (V n) - [j == t] (1 - eps) / n.
template <typename T>
inline double cross_entropy_row(const T* xp, T* gp, Index classes, std::int64_t t, double eps, T inv_count, T smooth,
                                T hit, Index& correct) {
  ConstRowArray<T> x(xp, classes);
  const T m = x.maxCoeff();  // vectorised; the arg max is not needed, see is_argmax()
  const double x_t = static_cast<double>(x(t));
  const double x_mean = eps > 0.0 ? static_cast<double>(x.mean()) : 0.0;
  correct += is_argmax(x, m, t);
  double lse;
  if (gp != nullptr) {
    RowArray<T> g(gp, classes);
    g = (x - m).exp();  // (V) unnormalised softmax
    const T s = g.sum();
    lse = static_cast<double>(m) + std::log(static_cast<double>(s));
    g = g * (inv_count / s) - smooth;
    g(t) -= hit;
  } else {
    lse = static_cast<double>(m) + std::log(static_cast<double>((x - m).exp().sum()));
  }
  double row_loss = (1.0 - eps) * (lse - x_t);
  if (eps > 0.0) row_loss += eps * (lse - x_mean);
  return row_loss;
}

[[noreturn]] void throw_nonfinite_loss(Index row, std::int64_t target) {
  throw NonFiniteError(concat("masked_cross_entropy: the loss is not finite (first at row ", row, ", target ", target,
                              "): the logits contain NaN or infinite values; training has diverged or the input "
                              "is corrupt"));
}

}  // namespace

template <typename T>
LossStats masked_cross_entropy(ConstMatrixMap<T> logits, const std::int64_t* targets, Matrix<T>* dlogits,
                               double label_smoothing, std::int64_t padding_id) {
  const Index rows = logits.rows(), classes = logits.cols();
  TCPP_CHECK(classes > 0, "masked_cross_entropy: logits need at least one class column");
  TCPP_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
             "masked_cross_entropy: label_smoothing must be in [0, 1], got ", label_smoothing);
  LossStats stats;
  stats.count = check_targets("masked_cross_entropy", targets, rows, classes, padding_id);
  if (dlogits != nullptr) dlogits->resize(rows, classes);  // (N, V)
  if (stats.count == 0) {
    if (dlogits != nullptr) dlogits->setZero();
    return stats;
  }

  const double eps = label_smoothing;
  const T inv_count = static_cast<T>(1.0 / static_cast<double>(stats.count));
  const T smooth = static_cast<T>(eps / static_cast<double>(classes * stats.count));  // eps / (V n)
  const T hit = static_cast<T>((1.0 - eps) / static_cast<double>(stats.count));       // (1 - eps) / n
  const T* xp = logits.data();
  T* dp = dlogits != nullptr ? dlogits->data() : nullptr;

  double total = 0.0;
  Index correct = 0;
  Index first_bad = rows;  // first row whose loss is NaN or infinite
#pragma omp parallel for schedule(static) reduction(+ : total, correct) \
    reduction(min : first_bad) if (rows * classes >= kParallelElements)
  for (Index i = 0; i < rows; ++i) {
    const std::int64_t t = targets[i];
    if (t == padding_id) {  // padding: no loss, no gradient
      if (dp != nullptr) RowArray<T>(dp + i * classes, classes).setZero();
      continue;
    }
    const double row_loss = cross_entropy_row(xp + i * classes, dp != nullptr ? dp + i * classes : nullptr, classes, t,
                                              eps, inv_count, smooth, hit, correct);
    if (!std::isfinite(row_loss) && i < first_bad) first_bad = i;
    total += row_loss;
  }
  if (first_bad < rows) throw_nonfinite_loss(first_bad, targets[first_bad]);
  stats.loss = total / static_cast<double>(stats.count);
  stats.correct = correct;
  return stats;
}

template <typename T>
LossStats output_cross_entropy(MatrixMap<T> logits, const T* bias, const std::int64_t* targets, double label_smoothing,
                               T* dbias, Matrix<T>& partial, std::int64_t padding_id) {
  const Index rows = logits.rows(), classes = logits.cols();
  TCPP_CHECK(classes > 0, "masked_cross_entropy: logits need at least one class column");
  TCPP_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
             "masked_cross_entropy: label_smoothing must be in [0, 1], got ", label_smoothing);
  LossStats stats;
  stats.count = check_targets("masked_cross_entropy", targets, rows, classes, padding_id);
  if (stats.count == 0) {
    logits.setZero();
    return stats;
  }
  const double eps = label_smoothing;
  const T inv_count = static_cast<T>(1.0 / static_cast<double>(stats.count));
  const T smooth = static_cast<T>(eps / static_cast<double>(classes * stats.count));  // eps / (V n)
  const T hit = static_cast<T>((1.0 - eps) / static_cast<double>(stats.count));       // (1 - eps) / n
  T* xp = logits.data();
  ConstRowArray<T> b(bias, classes);
  // Rows go in fixed blocks; each block sums its rows' gradients into its own row of `partial`
  // (blocks, V) while they are in cache, and the blocks are added to dbias in block order, so the
  // bias gradient does not depend on the thread count.
  const Index blocks = (rows + kLossBlockRows - 1) / kLossBlockRows;
  partial.resize(blocks, classes);
  T* pp = partial.data();
  double total = 0.0;
  Index correct = 0;
  Index first_bad = rows;  // first row whose loss is NaN or infinite
#pragma omp parallel for schedule(static) reduction(+ : total, correct) \
    reduction(min : first_bad) if (rows * classes >= kParallelElements)
  for (Index blk = 0; blk < blocks; ++blk) {
    RowArray<T> pdb(pp + blk * classes, classes);
    pdb.setZero();
    const Index end = std::min(rows, (blk + 1) * kLossBlockRows);
    for (Index i = blk * kLossBlockRows; i < end; ++i) {
      T* row = xp + i * classes;
      const std::int64_t t = targets[i];
      if (t == padding_id) {  // padding: no loss, no gradient
        RowArray<T>(row, classes).setZero();
        continue;
      }
      RowArray<T>(row, classes) += b;  // logits = y W^T + b
      const double row_loss = cross_entropy_row<T>(row, row, classes, t, eps, inv_count, smooth, hit, correct);
      if (!std::isfinite(row_loss) && i < first_bad) first_bad = i;
      total += row_loss;
      pdb += ConstRowArray<T>(row, classes);
    }
  }
  if (first_bad < rows) throw_nonfinite_loss(first_bad, targets[first_bad]);
  // dbias += the column sums of the gradient: threads own column ranges, blocks added in order
#pragma omp parallel for schedule(static) if (blocks * classes >= kParallelElements)
  for (Index c0 = 0; c0 < classes; c0 += 256) {
    const Index c1 = std::min(classes, c0 + 256);
    T acc[256];
    for (Index c = c0; c < c1; ++c) acc[c - c0] = T(0);
    for (Index blk = 0; blk < blocks; ++blk) {
      const T* pr = pp + blk * classes;
      for (Index c = c0; c < c1; ++c) acc[c - c0] += pr[c];
    }
    for (Index c = c0; c < c1; ++c) dbias[c] += acc[c - c0];
  }
  stats.loss = total / static_cast<double>(stats.count);
  stats.correct = correct;
  return stats;
}

template <typename T>
LossStats masked_accuracy(ConstMatrixMap<T> logits, const std::int64_t* targets, std::int64_t padding_id) {
  const Index rows = logits.rows(), classes = logits.cols();
  TCPP_CHECK(classes > 0, "masked_accuracy: logits need at least one class column");
  LossStats stats;
  stats.count = check_targets("masked_accuracy", targets, rows, classes, padding_id);
  Index correct = 0;
  Index first_nan = rows;  // an arg max over NaN means nothing
  const T* xp = logits.data();
#pragma omp parallel for schedule(static) reduction(+ : correct) \
    reduction(min : first_nan) if (rows * classes >= kParallelElements)
  for (Index i = 0; i < rows; ++i) {
    if (targets[i] == padding_id) continue;
    ConstRowArray<T> x(xp + i * classes, classes);
    if (x.isNaN().any()) {
      first_nan = std::min(first_nan, i);
      continue;
    }
    correct += is_argmax(x, x.maxCoeff(), targets[i]);
  }
  if (first_nan < rows)
    throw NonFiniteError(concat("masked_accuracy: the logits of row ", first_nan,
                                " are NaN: training has diverged or the input is corrupt"));
  stats.correct = correct;
  return stats;
}

template LossStats masked_cross_entropy<float>(ConstMatrixMap<float>, const std::int64_t*, Matrix<float>*, double,
                                               std::int64_t);
template LossStats masked_cross_entropy<double>(ConstMatrixMap<double>, const std::int64_t*, Matrix<double>*, double,
                                                std::int64_t);
template LossStats output_cross_entropy<float>(MatrixMap<float>, const float*, const std::int64_t*, double, float*,
                                               Matrix<float>&, std::int64_t);
template LossStats output_cross_entropy<double>(MatrixMap<double>, const double*, const std::int64_t*, double, double*,
                                                Matrix<double>&, std::int64_t);
template LossStats masked_accuracy<float>(ConstMatrixMap<float>, const std::int64_t*, std::int64_t);
template LossStats masked_accuracy<double>(ConstMatrixMap<double>, const std::int64_t*, std::int64_t);

}  // namespace transformer

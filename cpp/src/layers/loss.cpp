#include "transformer/layers/loss.hpp"

#include <algorithm>
#include <cmath>

#include "transformer/core/checks.hpp"
#include "transformer/kernels/matmul.hpp"

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

// The constants of the rows' loss and gradient for label smoothing eps over `classes` classes and
// `count` non-padding targets (see cross_entropy_row).
template <typename T>
struct RowScale {
  RowScale(double eps_, Index classes, Index count)
      : eps(eps_),
        inv_count(static_cast<T>(1.0 / static_cast<double>(count))),
        smooth(static_cast<T>(eps_ / static_cast<double>(classes * count))),  // eps / (V n)
        hit(static_cast<T>((1.0 - eps_) / static_cast<double>(count))) {}     // (1 - eps) / n
  double eps;
  T inv_count, smooth, hit;
};

// One row of the loss: x (V) are the row's logits, t its target (not padding). Returns the row's
// loss, adds 1 to `correct` when t is the arg max, and (g != nullptr) writes the row's gradient
// into g, which may be x itself: everything the loss needs from x is read before g is written.
// With lse = logsumexp(x) and q = (1 - eps) onehot(t) + eps / V,
//   loss_row = sum_j q_j (lse - x_j) = (1 - eps)(lse - x_t) + eps (lse - mean_j x_j)
// and, since d lse / d x_j = softmax_j and sum_j q_j = 1,
//   dlogits_j = (softmax_j - q_j) / n = softmax_j / n - eps / (V n) - [j == t] (1 - eps) / n.
template <typename T>
inline double cross_entropy_row(const T* xp, T* gp, Index classes, std::int64_t t, const RowScale<T>& k,
                                Index& correct) {
  const double eps = k.eps;
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
    g = g * (k.inv_count / s) - k.smooth;
    g(t) -= k.hit;
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

void check_loss_args(Index classes, double label_smoothing) {
  TCPP_CHECK(classes > 0, "masked_cross_entropy: logits need at least one class column");
  TCPP_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
             "masked_cross_entropy: label_smoothing must be in [0, 1], got ", label_smoothing);
}

// What output_loss_rows found: the rows' summed loss, how many arg maxes were right, and the
// first row whose loss is not finite (`rows` when none).
struct RowsLoss {
  double total = 0.0;
  Index correct = 0;
  Index first_bad = 0;
};

// The row-wise work of the output layer's loss over `rows` rows of logits xp (rows, V) holding
// y W^T without the bias: adds the bias, computes each row's loss and writes its gradient over
// it, normalised by `count`, the non-padding targets of the whole batch (so that rows taken
// chunk by chunk get the gradient of the batch's mean). Each fixed block of kLossBlockRows rows
// sums its gradients into its own row of `partial` (blocks, V) while they are in cache, and the
// blocks are added to dbias in block order: the bias gradient does not depend on the thread
// count. dbias is left unchanged when a row's loss is not finite.
template <typename T>
RowsLoss output_loss_rows(T* xp, Index rows, Index classes, const T* bias, const std::int64_t* targets, double eps,
                          Index count, T* dbias, T* pp, std::int64_t padding_id) {
  const RowScale<T> k(eps, classes, count);
  ConstRowArray<T> b(bias, classes);
  const Index blocks = (rows + kLossBlockRows - 1) / kLossBlockRows;
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
      const double row_loss = cross_entropy_row<T>(row, row, classes, t, k, correct);
      if (!std::isfinite(row_loss) && i < first_bad) first_bad = i;
      total += row_loss;
      pdb += ConstRowArray<T>(row, classes);
    }
  }
  RowsLoss out;
  out.total = total;
  out.correct = correct;
  out.first_bad = first_bad;
  if (first_bad < rows) return out;
  // dbias += the column sums of the gradient, the blocks added in order
  add_column_sums(pp, blocks, classes, dbias);
  return out;
}

}  // namespace

template <typename T>
LossStats masked_cross_entropy(ConstMatrixMap<T> logits, const std::int64_t* targets, Matrix<T>* dlogits,
                               double label_smoothing, std::int64_t padding_id) {
  const Index rows = logits.rows(), classes = logits.cols();
  check_loss_args(classes, label_smoothing);
  LossStats stats;
  stats.count = check_targets("masked_cross_entropy", targets, rows, classes, padding_id);
  if (dlogits != nullptr) dlogits->resize(rows, classes);  // (N, V)
  if (stats.count == 0) {
    if (dlogits != nullptr) dlogits->setZero();
    return stats;
  }

  const RowScale<T> k(label_smoothing, classes, stats.count);
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
    const double row_loss =
        cross_entropy_row(xp + i * classes, dp != nullptr ? dp + i * classes : nullptr, classes, t, k, correct);
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
  check_loss_args(classes, label_smoothing);
  LossStats stats;
  stats.count = check_targets("masked_cross_entropy", targets, rows, classes, padding_id);
  if (stats.count == 0) {
    logits.setZero();
    return stats;
  }
  const Index blocks = (rows + kLossBlockRows - 1) / kLossBlockRows;
  if (partial.size() < blocks * classes) partial.resize(blocks, classes);  // grows only
  const RowsLoss r = output_loss_rows<T>(logits.data(), rows, classes, bias, targets, label_smoothing, stats.count,
                                         dbias, partial.data(), padding_id);
  if (r.first_bad < rows) throw_nonfinite_loss(r.first_bad, targets[r.first_bad]);
  stats.loss = r.total / static_cast<double>(stats.count);
  stats.correct = r.correct;
  return stats;
}

Index output_chunk_rows(Index classes, Index scalar_bytes) {
  const Index row_bytes = std::max<Index>(1, classes) * std::max<Index>(1, scalar_bytes);
  const Index rows = std::max(tuning::kOutputChunkMinRows, tuning::kOutputChunkBytes / row_bytes);
  return (rows + kLossBlockRows - 1) / kLossBlockRows * kLossBlockRows;  // whole bias-gradient blocks
}

template <typename T>
LossStats chunked_output_loss(Precision precision, ConstMatrixMap<T> y, ConstMatrixMap<T> W, const T* bias,
                              const std::int64_t* targets, double label_smoothing, MatrixMap<T> dW, T* dbias,
                              MatrixMap<T> dy, OutputLossScratch<T>& scratch, Index chunk_rows,
                              std::int64_t padding_id) {
  const Index rows = y.rows(), classes = W.rows(), d = W.cols();
  check_loss_args(classes, label_smoothing);
  TCPP_CHECK(y.cols() == d && dW.rows() == classes && dW.cols() == d && dy.rows() == rows && dy.cols() == d,
             "chunked_output_loss: shapes disagree: y (", y.rows(), ", ", y.cols(), "), W (", classes, ", ", d,
             "), dW (", dW.rows(), ", ", dW.cols(), "), dy (", dy.rows(), ", ", dy.cols(), ")");
  TCPP_CHECK(chunk_rows >= 0, "chunked_output_loss: chunk_rows must be 0 (sized from the vocabulary) or positive, got ",
             chunk_rows);
  LossStats stats;
  stats.count = check_targets("masked_cross_entropy", targets, rows, classes, padding_id);
  if (stats.count == 0) {  // no loss: every gradient of the logits is 0
    dy.setZero();
    return stats;
  }
  const Index R = std::min(rows, chunk_rows > 0 ? chunk_rows : output_chunk_rows(classes, sizeof(T)));
  const Index blocks = (R + kLossBlockRows - 1) / kLossBlockRows;
  T* const chunk = scratch.logits(R * classes);  // (R, V) logits of one chunk, then their gradient
  T* const partial = scratch.partial(blocks * classes);
  double total = 0.0;
  Index correct = 0;
  for (Index c0 = 0; c0 < rows; c0 += R) {
    const Index n = std::min(R, rows - c0);
    const std::int64_t* tc = targets + c0;
    ConstMatrixMap<T> yc(y.data() + c0 * d, n, d);
    MatrixMap<T> dyc(dy.data() + c0 * d, n, d);
    if (std::all_of(tc, tc + n, [&](std::int64_t t) { return t == padding_id; })) {
      dyc.setZero();  // padding only: the chunk's gradient is 0, nothing to add to dW or dbias
      continue;
    }
    MatrixMap<T> xc(chunk, n, classes);
    dense_forward<T>(precision, yc, W, xc, nullptr);  // logits_c = y_c W^T (the loss adds the bias)
    const RowsLoss r =
        output_loss_rows<T>(xc.data(), n, classes, bias, tc, label_smoothing, stats.count, dbias, partial, padding_id);
    if (r.first_bad < n) throw_nonfinite_loss(c0 + r.first_bad, tc[r.first_bad]);
    total += r.total;
    correct += r.correct;
    // xc now holds d loss / d logits_c: dW += dlogits_c^T y_c, dy_c = dlogits_c W
    dense_backward_weight<T>(precision, ConstMatrixMap<T>(xc.data(), n, classes), yc, dW);
    dense_backward_input<T>(precision, ConstMatrixMap<T>(xc.data(), n, classes), W, dyc);
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
template LossStats chunked_output_loss<float>(Precision, ConstMatrixMap<float>, ConstMatrixMap<float>, const float*,
                                              const std::int64_t*, double, MatrixMap<float>, float*, MatrixMap<float>,
                                              OutputLossScratch<float>&, Index, std::int64_t);
template LossStats chunked_output_loss<double>(Precision, ConstMatrixMap<double>, ConstMatrixMap<double>, const double*,
                                               const std::int64_t*, double, MatrixMap<double>, double*,
                                               MatrixMap<double>, OutputLossScratch<double>&, Index, std::int64_t);
template LossStats masked_accuracy<float>(ConstMatrixMap<float>, const std::int64_t*, std::int64_t);
template LossStats masked_accuracy<double>(ConstMatrixMap<double>, const std::int64_t*, std::int64_t);

}  // namespace transformer

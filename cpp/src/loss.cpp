#include "transformer/loss.hpp"

#include <algorithm>
#include <cmath>

#include "transformer/checks.hpp"

namespace transformer {

namespace {

// Rows in parallel once a call has at least this many logits.
constexpr Index kParallelElements = 16384;


// Every target must be a class index in [0, V); returns how many are not padding (0).
Index check_targets(const char* who, const std::int64_t* targets, Index rows, Index classes) {
  Index count = 0;
  for (Index i = 0; i < rows; ++i) {
    TCPP_CHECK(targets[i] >= 0 && targets[i] < classes, who, ": target id ", targets[i], " at row ", i,
               " is out of range for ", classes, " classes");
    count += targets[i] != 0;
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

}  // namespace

template <typename T>
LossStats masked_cross_entropy(ConstMatrixMap<T> logits, const std::int64_t* targets,
                               Matrix<T>* dlogits, double label_smoothing) {
  const Index rows = logits.rows(), classes = logits.cols();
  TCPP_CHECK(classes > 0, "masked_cross_entropy: logits need at least one class column");
  TCPP_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
             "masked_cross_entropy: label_smoothing must be in [0, 1], got ", label_smoothing);
  LossStats stats;
  stats.count = check_targets("masked_cross_entropy", targets, rows, classes);
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
  // With lse = logsumexp(x) and q = (1 - eps) onehot(t) + eps / V,
  //   loss_row = sum_j q_j (lse - x_j) = (1 - eps)(lse - x_t) + eps (lse - mean_j x_j)
  // and, since d lse / d x_j = softmax_j and sum_j q_j = 1,
  //   dlogits_j = (softmax_j - q_j) / n.
#pragma omp parallel for schedule(static) reduction(+ : total, correct) reduction(min : first_bad) \
    if (rows * classes >= kParallelElements)
  for (Index i = 0; i < rows; ++i) {
    const std::int64_t t = targets[i];
    if (t == 0) {  // padding: no loss, no gradient
      if (dp != nullptr) RowArray<T>(dp + i * classes, classes).setZero();
      continue;
    }
    ConstRowArray<T> x(xp + i * classes, classes);
    const T m = x.maxCoeff();  // vectorised; the arg max is not needed, see is_argmax()
    // read what the loss needs from x before the gradient is written: dlogits may be logits itself
    const double x_t = static_cast<double>(x(t));
    const double x_mean = eps > 0.0 ? static_cast<double>(x.mean()) : 0.0;
    correct += is_argmax(x, m, t);
    double lse;
    if (dp != nullptr) {
      RowArray<T> g(dp + i * classes, classes);
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
    if (!std::isfinite(row_loss) && i < first_bad) first_bad = i;
    total += row_loss;
  }
  if (first_bad < rows) {
    throw NonFiniteError(concat("masked_cross_entropy: the loss is not finite (first at row ", first_bad,
                                    ", target ", targets[first_bad], "): the logits contain NaN or "
                                    "infinite values; training has diverged or the input is corrupt"));
  }
  stats.loss = total / static_cast<double>(stats.count);
  stats.correct = correct;
  return stats;
}

template <typename T>
LossStats masked_accuracy(ConstMatrixMap<T> logits, const std::int64_t* targets) {
  const Index rows = logits.rows(), classes = logits.cols();
  TCPP_CHECK(classes > 0, "masked_accuracy: logits need at least one class column");
  LossStats stats;
  stats.count = check_targets("masked_accuracy", targets, rows, classes);
  Index correct = 0;
  Index first_nan = rows;  // an arg max over NaN means nothing
  const T* xp = logits.data();
#pragma omp parallel for schedule(static) reduction(+ : correct) reduction(min : first_nan) \
    if (rows * classes >= kParallelElements)
  for (Index i = 0; i < rows; ++i) {
    if (targets[i] == 0) continue;
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

template LossStats masked_cross_entropy<float>(ConstMatrixMap<float>, const std::int64_t*, Matrix<float>*, double);
template LossStats masked_cross_entropy<double>(ConstMatrixMap<double>, const std::int64_t*, Matrix<double>*, double);
template LossStats masked_accuracy<float>(ConstMatrixMap<float>, const std::int64_t*);
template LossStats masked_accuracy<double>(ConstMatrixMap<double>, const std::int64_t*);

}  // namespace transformer

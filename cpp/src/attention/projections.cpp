#include "transformer/attention/projections.hpp"

#include <cmath>

#include "transformer/core/random.hpp"

namespace transformer {

template <typename T>
AttentionProjections<T>::AttentionProjections(Index d_model, std::initializer_list<ProjectionPart> parts,
                                              std::uint64_t seed)
    : out(d_model, d_model, true, splitmix64(seed + 4)), d_(d_model) {
  const Index n = static_cast<Index>(parts.size());
  w_in.resize(n * d_, d_);
  dw_in = GradientBuffer<T>(n * d_, d_);
  b_in = RowVector<T>::Zero(n * d_);
  db_in = GradientBuffer<T>(1, n * d_);
  const double a = std::sqrt(6.0 / static_cast<double>(2 * d_));
  Index part = 0;
  for (const ProjectionPart& p : parts) {
    names_.emplace_back(p.name);
    Rng rng(splitmix64(seed + p.stream));
    T* w = w_in.data() + part * d_ * d_;
    for (Index i = 0; i < d_ * d_; ++i) w[i] = static_cast<T>(rng.uniform(-a, a));
    ++part;
  }
}

template <typename T>
void AttentionProjections<T>::backward(Precision p, ConstMatrixMap<T> dy, ConstMatrixMap<T> x, Index first, Index n,
                                       Matrix<T>* dx) {
  dense_backward_weight<T>(p, dy, x, MatrixMap<T>(dw_in.data() + first * d_ * d_, n * d_, d_));
  add_column_sums(dy.data(), dy.rows(), n * d_, db_in.data() + first * d_);
  if (dx == nullptr) return;
  dx->resize(dy.rows(), d_);
  dense_backward_input<T>(p, dy, weight(first, n), mmap(*dx));
}

template <typename T>
void AttentionProjections<T>::append_input_parameters(ParameterList<T>& ps) {
  for (Index part = 0; part < parts(); ++part) {
    const std::string& name = names_[static_cast<size_t>(part)];
    ps.push_back({name + ".weight", w_in.data() + part * d_ * d_, dw_in.data() + part * d_ * d_, {d_, d_}});
    ps.push_back({name + ".bias", b_in.data() + part * d_, db_in.data() + part * d_, {d_}});
  }
}

template <typename T>
ParameterList<T> AttentionProjections<T>::parameters() {
  ParameterList<T> ps;
  append_input_parameters(ps);
  append_parameters(ps, out.parameters(), "output");
  return ps;
}

template <typename T>
void AttentionProjections<T>::zero_grad() {
  dw_in.setZero();
  db_in.setZero();
  out.zero_grad();
}

template class AttentionProjections<float>;
template class AttentionProjections<double>;

}  // namespace transformer

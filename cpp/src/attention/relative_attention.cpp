#include "transformer/attention/relative_attention.hpp"

#include <algorithm>
#include <cmath>

#include "transformer/core/checks.hpp"
#include "transformer/core/random.hpp"
#include "transformer/kernels/matmul.hpp"
#include "transformer/layers/positional_encoding.hpp"
#include "transformer/layers/softmax.hpp"

namespace transformer {

namespace {

// rows [first, first + n) of a row-major matrix: contiguous, e.g. W_q or [W_k; W_v] of W_in
template <typename T>
ConstMatrixMap<T> rows_of(const Matrix<T>& m, Index first, Index n) {
  return ConstMatrixMap<T>(m.data() + first * m.cols(), n, m.cols());
}

// The relative shift of score row i of a (T, L) block in place: entry j <= M + i (M = L - T) takes
// entry j + T-1-i, the later entries are left as they are (the causal mask covers them). Reading
// ahead of the write, left to right, needs no copy.
template <typename T>
inline void shift_row(T* row, Index i, Index T_len, Index L) {
  const Index off = T_len - 1 - i, n = L - off;  // n = M + i + 1 entries visible
  if (off > 0) std::copy(row + off, row + off + n, row);
}

// Its transpose: entry j <= M + i goes back to j + T-1-i, and the entries no score read (the
// distances beyond M + i, at the front) become 0.
template <typename T>
inline void unshift_row(T* row, Index i, Index T_len, Index L) {
  const Index off = T_len - 1 - i, n = L - off;
  if (off == 0) return;
  std::copy_backward(row, row + n, row + off + n);
  std::fill(row, row + off, T(0));
}

// The softmax of score row i over its n visible entries (the rest get weight 0).
template <typename T>
inline void causal_softmax_row(T* row, Index n, Index L) {
  masked_softmax_row(row, n, static_cast<const std::uint8_t*>(nullptr));
  std::fill(row + n, row + L, T(0));
}

// Sinusoid rows for the given distances (clamped): out.row(p) = PE(min(dist(p), clamp)).
template <typename T, typename Distance>
void sinusoid_rows(Index rows, Index d, Index clamp, Distance dist, Matrix<T>& out) {
  Index largest = 0;
  for (Index p = 0; p < rows; ++p) largest = std::max(largest, dist(p));
  if (clamp >= 0) largest = std::min(largest, clamp);
  const Matrix<T> table = positional_encoding<T>(largest + 1, d, PositionalLayout::Concatenated);
  out.resize(rows, d);
  for (Index p = 0; p < rows; ++p) {
    const Index r = clamp >= 0 ? std::min(dist(p), clamp) : dist(p);
    out.row(p) = table.row(r);
  }
}

// What forward and backward read of one (sequence b, head h): Q + u and Q + v (T, dk) of the
// segment, K and V (L, dk) of [memory ; segment], and the distance encodings P (L, dk).
template <typename T>
struct HeadInputs {
  HeadInputs(const T* qu, const T* qv, const T* kv, const T* rk, Index b, Index h, Index T_len, Index L, Index d,
             Index dk)
      : Qu(qu + b * T_len * d + h * dk, T_len, dk, Eigen::OuterStride<>(d)),
        Qv(qv + b * T_len * d + h * dk, T_len, dk, Eigen::OuterStride<>(d)),
        K(kv + b * L * 2 * d + h * dk, L, dk, Eigen::OuterStride<>(2 * d)),
        V(kv + b * L * 2 * d + d + h * dk, L, dk, Eigen::OuterStride<>(2 * d)),
        P(rk + h * dk, L, dk, Eigen::OuterStride<>(d)) {}
  ConstStridedMap<T> Qu, Qv, K, V, P;
};

}  // namespace

template <typename T>
void relative_shift(const T* in, T* out, Index G, Index T_len, Index L) {
  TCPP_CHECK(G >= 0 && T_len > 0 && L >= T_len, "relative_shift: needs L >= T > 0, got T = ", T_len, ", L = ", L);
  const Index M = L - T_len;
#pragma omp parallel for schedule(static) if (G * T_len * L >= kParallelMin)
  for (Index g = 0; g < G; ++g) {
    for (Index i = 0; i < T_len; ++i) {
      const T* src = in + (g * T_len + i) * L;
      T* dst = out + (g * T_len + i) * L;
      const Index off = T_len - 1 - i, n = M + i + 1;
      std::copy(src + off, src + off + n, dst);
      std::fill(dst + n, dst + L, T(0));
    }
  }
}

template <typename T>
RelativeMultiHeadAttention<T>::RelativeMultiHeadAttention(Index d_model, Index n_heads, std::uint64_t seed,
                                                          Index clamp_len)
    // the whole layer's size is checked before its first weight is allocated
    : proj_(checked_size<T>("RelativeMultiHeadAttention", concat("d_model ", d_model),
                            attention_parameters(d_model) + static_cast<double>(d_model) * (d_model + 2), 0,
                            d_model > 0 ? d_model : 1),
            {{"query", 1}, {"key", 2}, {"value", 3}}, seed),
      d_(d_model),
      h_(n_heads),
      clamp_(clamp_len < 0 ? -1 : clamp_len) {
  TCPP_CHECK(d_model > 0 && n_heads > 0, "RelativeMultiHeadAttention: d_model and n_heads must be positive, got ",
             d_model, " and ", n_heads);
  TCPP_CHECK(d_model % n_heads == 0, "RelativeMultiHeadAttention: d_model ", d_model, " is not divisible by n_heads ",
             n_heads);
  TCPP_CHECK(d_model % 2 == 0, "RelativeMultiHeadAttention: d_model must be even (the sinusoids of the relative ",
             "distances come in sin/cos pairs), got ", d_model);
  dk_ = d_model / n_heads;
  // W_{k,R} is Glorot-uniform as a (d, d) matrix like W_q, W_k and W_v, from its own stream
  w_pos_.resize(d_, d_);
  dw_pos_ = GradientBuffer<T>(d_, d_);
  {
    const double a = std::sqrt(6.0 / static_cast<double>(2 * d_));
    Rng rng(splitmix64(seed + 5));
    for (Index i = 0; i < d_ * d_; ++i) w_pos_.data()[i] = static_cast<T>(rng.uniform(-a, a));
  }
  // u and v: small values (uniform with standard deviation 0.02), so that the biases start near 0
  u_.resize(h_, dk_);
  v_.resize(h_, dk_);
  du_ = GradientBuffer<T>(h_, dk_);
  dv_ = GradientBuffer<T>(h_, dk_);
  Rng rng(splitmix64(seed + 6));
  const double b = 0.02 * std::sqrt(3.0);
  for (Index i = 0; i < d_; ++i) u_.data()[i] = static_cast<T>(rng.uniform(-b, b));
  for (Index i = 0; i < d_; ++i) v_.data()[i] = static_cast<T>(rng.uniform(-b, b));
}

template <typename T>
void RelativeMultiHeadAttention<T>::sinusoids(Index L, Matrix<T>& R) const {
  sinusoid_rows<T>(L, d_, clamp_, [L](Index p) { return L - 1 - p; }, R);
}

template <typename T>
void RelativeMultiHeadAttention<T>::set_memory(const T* memory, Index M) {
  TCPP_CHECK(M >= 0 && (M == 0 || memory != nullptr), "RelativeMultiHeadAttention: a memory of ", M,
             " positions needs its rows");
  mem_set_ = memory;
  mem_set_len_ = M;
}

template <typename T>
const Matrix<T>& RelativeMultiHeadAttention<T>::forward(ConstMatrixMap<T> x, Index B, Index T_len, bool causal) {
  TCPP_CHECK(causal, "RelativeMultiHeadAttention: attention is causal (queries see the memory and earlier positions); ",
             "causal=false is not supported");
  return forward(x, ConstMatrixMap<T>(mem_set_, B * mem_set_len_, d_), B, T_len, mem_set_len_);
}

template <typename T>
const Matrix<T>& RelativeMultiHeadAttention<T>::forward(ConstMatrixMap<T> x, ConstMatrixMap<T> memory, Index B,
                                                        Index T_len, Index M) {
  TCPP_CHECK(B > 0 && T_len > 0 && x.rows() == B * T_len && x.cols() == d_, "RelativeMultiHeadAttention: x has shape (",
             x.rows(), ", ", x.cols(), "), expected (B*T, d_model) = (", B, "*", T_len, ", ", d_, ")");
  TCPP_CHECK(M >= 0 && memory.rows() == B * M && (M == 0 || memory.cols() == d_),
             "RelativeMultiHeadAttention: memory has shape (", memory.rows(), ", ", memory.cols(),
             "), expected (B*M, d_model) = (", B, "*", M, ", ", d_, ")");
  has_forward_ = false;
  B_ = B;
  T_ = T_len;
  M_ = M;
  x_ = x.data();
  const Index L = M + T_len, d = d_, H = h_, dk = dk_;
  // h = [memory ; x] of each sequence                                     (B*L, d)
  h_cat_.resize(B * L, d);
  for (Index b = 0; b < B; ++b) {
    if (M > 0) std::copy(memory.data() + b * M * d, memory.data() + (b + 1) * M * d, h_cat_.data() + b * L * d);
    std::copy(x.data() + b * T_len * d, x.data() + (b + 1) * T_len * d, h_cat_.data() + (b * L + M) * d);
  }
  // Q = x W_q^T + b_q                                                     (B*T, d)
  proj_.project(Precision::Float32, x, 0, 1, q_);
  // [K | V] = h [W_k; W_v]^T + [b_k | b_v]                                (B*L, 2d)
  proj_.project(Precision::Float32, cmap(h_cat_), 1, 2, kv_);
  // Q + u, Q + v: u and v (H, d_k) are d values in the heads' column order (B*T, d) each
  qu_.resize(B * T_len, d);
  qv_.resize(B * T_len, d);
  {
    const Eigen::Map<const RowVector<T>> u(u_.data(), d), v(v_.data(), d);
    qu_ = q_.rowwise() + u;
    qv_ = q_.rowwise() + v;
  }
  // R (L, d), row p the sinusoid of distance L-1-p; P = R W_{k,R}^T       (L, d)
  sinusoids(L, R_);
  rk_.resize(L, d);
  dense_forward<T>(Precision::Float32, cmap(R_), cmap(w_pos_), mmap(rk_), nullptr);
  weights_.resize(B * H * T_len, L);
  ctx_.resize(B * T_len, d);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(dk)));
#pragma omp parallel for schedule(static)
  for (Index bh = 0; bh < B * H; ++bh) {
    const Index b = bh / H, h = bh % H;
    const Eigen::OuterStride<> sd(d);
    const HeadInputs<T> in(qu_.data(), qv_.data(), kv_.data(), rk_.data(), b, h, T_len, L, d, dk);
    const auto &Qu = in.Qu, &Qv = in.Qv, &K = in.K, &V = in.V, &P = in.P;
    MatrixMap<T> S(weights_.data() + bh * T_len * L, T_len, L);            // (T, L)
    StridedMap<T> O(ctx_.data() + b * T_len * d + h * dk, T_len, dk, sd);  // (T, dk)
    // position terms (b) + (d) for every distance once: BD_raw = (Q + v) P^T, column p distance L-1-p
    S.noalias() = Qv * P.transpose();
    // the relative shift: entry (i, j) reads distance M + i - j
    for (Index i = 0; i < T_len; ++i) shift_row(S.data() + i * L, i, T_len, L);
    // content terms (a) + (c): (Q + u) K^T
    S.noalias() += Qu * K.transpose();
    // scaled, causal softmax: query i sees positions j <= M + i
    S *= scale;
    for (Index i = 0; i < T_len; ++i) causal_softmax_row(S.data() + i * L, M + i + 1, L);
    O.noalias() = S * V;
  }
  const Matrix<T>& y = proj_.out.forward(cmap(ctx_));
  has_forward_ = true;
  return y;
}

template <typename T>
const Matrix<T>& RelativeMultiHeadAttention<T>::backward(ConstMatrixMap<T> dout) {
  if (!has_forward_) throw std::runtime_error("RelativeMultiHeadAttention: backward() called before forward()");
  const Index B = B_, T_len = T_, M = M_, L = M + T_len, d = d_, H = h_, dk = dk_, rows = B * T_len;
  TCPP_CHECK(dout.rows() == rows && dout.cols() == d, "RelativeMultiHeadAttention: backward got dout of shape (",
             dout.rows(), ", ", dout.cols(), "), expected (", rows, ", ", d, ")");
  // output projection: dctx = dout W_o                                    (B*T, d)
  const Matrix<T>& dctx = proj_.out.backward(dout);
  dscores_.resize(B * H * T_len, L);
  dkv_.resize(B * L, 2 * d);
  dqu_.resize(rows, d);
  dqv_.resize(rows, d);
  drk_.resize(B * L, d);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(dk)));
#pragma omp parallel for schedule(static)
  for (Index bh = 0; bh < B * H; ++bh) {
    const Index b = bh / H, h = bh % H;
    const Eigen::OuterStride<> sd(d), s2d(2 * d);
    const HeadInputs<T> in(qu_.data(), qv_.data(), kv_.data(), rk_.data(), b, h, T_len, L, d, dk);
    const auto &Qu = in.Qu, &Qv = in.Qv, &K = in.K, &V = in.V, &P = in.P;
    ConstMatrixMap<T> A(weights_.data() + bh * T_len * L, T_len, L);             // (T, L)
    ConstStridedMap<T> dO(dctx.data() + b * T_len * d + h * dk, T_len, dk, sd);  // (T, dk)
    MatrixMap<T> dS(dscores_.data() + bh * T_len * L, T_len, L);                 // (T, L)
    StridedMap<T> dK(dkv_.data() + b * L * 2 * d + h * dk, L, dk, s2d);          // (L, dk)
    StridedMap<T> dV(dkv_.data() + b * L * 2 * d + d + h * dk, L, dk, s2d);      // (L, dk)
    StridedMap<T> dQu(dqu_.data() + b * T_len * d + h * dk, T_len, dk, sd);      // (T, dk)
    StridedMap<T> dQv(dqv_.data() + b * T_len * d + h * dk, T_len, dk, sd);      // (T, dk)
    StridedMap<T> dP(drk_.data() + b * L * d + h * dk, L, dk, sd);               // (L, dk) this sequence's share
    // O = A V: dA = dO V^T, dV = A^T dO
    dS.noalias() = dO * V.transpose();
    dV.noalias() = A.transpose() * dO;
    // A = softmax(S) over the visible entries: dS from dA, times the 1/sqrt(d_k) of the scores;
    // entries of weight 0 (later positions, or underflow) get exactly 0
    attention_weights_backward(A.data(), dS.data(), T_len, L, scale);
    // content terms S_c = (Q + u) K^T: d(Q + u) = dS K, dK = dS^T (Q + u)
    dQu.noalias() = dS * K;
    dK.noalias() = dS.transpose() * Qu;
    // the shift's transpose: the gradient of entry (i, j) goes back to distance column j + T-1-i
    for (Index i = 0; i < T_len; ++i) unshift_row(dS.data() + i * L, i, T_len, L);
    // position terms BD_raw = (Q + v) P^T: d(Q + v) = dBD P, dP = dBD^T (Q + v)
    dQv.noalias() = dS * P;
    dP.noalias() = dS.transpose() * Qv;
  }
  // u and v are added to every query row of their head: du = column sums of d(Q + u), dv likewise
  add_column_sums(dqu_.data(), rows, d, du_.data());
  add_column_sums(dqv_.data(), rows, d, dv_.data());
  // dQ = d(Q + u) + d(Q + v); Q = x W_q^T + b_q: dW_q += dQ^T x, db_q += column sums, and the
  // query path of dx, dx = dQ W_q
  add_arrays(dqu_.data(), dqu_.data(), dqv_.data(), rows * d);
  ConstMatrixMap<T> x(x_, rows, d);
  proj_.backward(Precision::Float32, cmap(dqu_), x, 0, 1, &dx_);
  // [K | V] = h W_kv^T + b_kv over memory and segment rows: dW_kv += d[K | V]^T h, db_kv += sums
  proj_.backward(Precision::Float32, cmap(dkv_), cmap(h_cat_), 1, 2, nullptr);
  // P = R W_{k,R}^T with dP summed over the sequences: dW_{k,R} += dP^T R
  drk_sum_ = rows_of(drk_, 0, L);
  for (Index b = 1; b < B; ++b) drk_sum_ += rows_of(drk_, b * L, L);
  dense_backward_weight<T>(Precision::Float32, cmap(drk_sum_), cmap(R_), mmap(dw_pos_));
  // dx += d[K | V] W_kv over the segment's rows only (the memory is a stop-gradient input)
  const Matrix<T>* dkv_x = &dkv_;
  if (M > 0) {
    dkv_x_.resize(rows, 2 * d);
    for (Index b = 0; b < B; ++b)
      std::copy(dkv_.data() + (b * L + M) * 2 * d, dkv_.data() + (b + 1) * L * 2 * d,
                dkv_x_.data() + b * T_len * 2 * d);
    dkv_x = &dkv_x_;
  }
  dx_.noalias() += *dkv_x * proj_.weight(1, 2);
  return dx_;
}

template <typename T>
ParameterList<T> RelativeMultiHeadAttention<T>::parameters() {
  ParameterList<T> ps;
  proj_.append_input_parameters(ps);
  ps.push_back({"position.weight", w_pos_.data(), dw_pos_.data(), {d_, d_}});
  append_parameters(ps, proj_.out.parameters(), "output");
  ps.push_back({"u", u_.data(), du_.data(), {h_, dk_}});
  ps.push_back({"v", v_.data(), dv_.data(), {h_, dk_}});
  return ps;
}

template <typename T>
void RelativeMultiHeadAttention<T>::zero_grad() {
  proj_.zero_grad();
  dw_pos_.setZero();
  du_.setZero();
  dv_.setZero();
}

template <typename T>
void RelativeMultiHeadAttention<T>::release() {
  has_forward_ = false;
  x_ = nullptr;
  for (Matrix<T>* m : {&h_cat_, &q_, &kv_, &qu_, &qv_, &R_, &rk_, &weights_, &ctx_, &dscores_, &dkv_, &dkv_x_, &dqu_,
                       &dqv_, &drk_, &drk_sum_, &dx_})
    m->resize(0, 0);
}

// ---------------------------------------------------------------------------------------------
// Evaluation with state reuse

template <typename T>
void RelativeAttentionCache<T>::reset(Index batch_, Index mem_len_) {
  TCPP_CHECK(batch_ > 0 && mem_len_ >= 0, "RelativeAttentionCache: batch must be positive and mem_len >= 0, got ",
             batch_, " and ", mem_len_);
  batch = batch_;
  mem_len = mem_len_;
  length = offset = capacity = 0;
  kv.resize(0, 0);
  pos.resize(0, 0);
}

namespace {

// Room for `extra` more rows after the ones held in each sequence's block: the held rows move to
// the front, or the blocks grow to twice what is needed, so that appending one position at a time
// costs one move of the memory per mem_len positions.
template <typename T>
void make_room(RelativeAttentionCache<T>& c, Index extra, Index width) {
  if (c.offset + c.length + extra <= c.capacity) return;
  const Index need = c.length + extra;
  Matrix<T>* dst = &c.kv;
  Matrix<T> grown;
  Index cap = c.capacity;
  if (need > c.capacity) {
    cap = 2 * std::max(need, c.mem_len + extra);
    grown.resize(c.batch * cap, width);
    dst = &grown;
  }
  for (Index b = 0; b < c.batch; ++b) {
    const T* from = c.kv.data() + (b * c.capacity + c.offset) * width;
    // moving left within one block never overwrites rows not yet moved
    std::copy(from, from + c.length * width, dst->data() + b * cap * width);
  }
  if (dst == &grown) c.kv.swap(grown);
  c.capacity = cap;
  c.offset = 0;
}

}  // namespace

template <typename T>
void RelativeMultiHeadAttention<T>::infer_memory(ConstMatrixMap<T> memory, Index M,
                                                 RelativeAttentionCache<T>& c) const {
  TCPP_CHECK(c.batch > 0, "RelativeMultiHeadAttention: reset the evaluation cache before use");
  TCPP_CHECK(M >= 0 && memory.rows() == c.batch * M && (M == 0 || memory.cols() == d_),
             "RelativeMultiHeadAttention: memory has shape (", memory.rows(), ", ", memory.cols(),
             "), expected (batch*M, d_model) = (", c.batch, "*", M, ", ", d_, ")");
  c.length = c.offset = 0;
  const Index keep = std::min(M, c.mem_len), d = d_;
  make_room(c, keep, 2 * d);
  // [K | V] of the last `keep` memory rows of each sequence                (keep, 2d) per sequence
  for (Index b = 0; b < c.batch && keep > 0; ++b)
    dense_forward<T>(Precision::Float32, ConstMatrixMap<T>(memory.data() + (b * M + M - keep) * d, keep, d),
                     proj_.weight(1, 2), MatrixMap<T>(c.kv.data() + b * c.capacity * 2 * d, keep, 2 * d),
                     proj_.bias(1));
  c.length = keep;
}

template <typename T>
void RelativeMultiHeadAttention<T>::infer(ConstMatrixMap<T> x, Index T_len, RelativeAttentionCache<T>& c,
                                          InferenceBackend<T>& be, Matrix<T>& y) const {
  TCPP_CHECK(c.batch > 0, "RelativeMultiHeadAttention: reset the evaluation cache before use");
  const Index B = c.batch, d = d_, H = h_, dk = dk_;
  TCPP_CHECK(T_len > 0 && x.rows() == B * T_len && x.cols() == d_, "RelativeMultiHeadAttention: x has shape (",
             x.rows(), ", ", x.cols(), "), expected (batch*T, d_model) = (", B, "*", T_len, ", ", d_, ")");
  const Index n = c.length, L = n + T_len;
  make_room(c, T_len, 2 * d);
  // [Q | K | V] of the new positions                                      (B*T, 3d)
  be.linear(x, proj_.w_in.data(), proj_.b_in.data(), 3 * d, c.qkv);
  // their keys and values join the held ones; [Q + u | Q + v]             (B*T, 2d)
  c.q.resize(B * T_len, 2 * d);
  const Eigen::Map<const RowVector<T>> u(u_.data(), d), v(v_.data(), d);
  for (Index r = 0; r < B * T_len; ++r) {
    const Index b = r / T_len, t = r % T_len;
    const T* src = c.qkv.data() + r * 3 * d;
    std::copy(src + d, src + 3 * d, c.kv.data() + (b * c.capacity + c.offset + n + t) * 2 * d);
    const Eigen::Map<const RowVector<T>> q(src, d);
    Eigen::Map<RowVector<T>>(c.q.data() + r * 2 * d, d) = q + u;
    Eigen::Map<RowVector<T>>(c.q.data() + r * 2 * d + d, d) = q + v;
  }
  // W_{k,R} R_r for the distances r < L, kept between calls                (distances, d)
  if (c.pos.rows() < L) {
    Matrix<T> R;
    const Index rows = std::max(L, 2 * static_cast<Index>(c.pos.rows()));
    sinusoid_rows<T>(rows, d, clamp_, [](Index r) { return r; }, R);
    c.pos.resize(rows, d);
    dense_forward<T>(Precision::Float32, cmap(R), cmap(w_pos_), mmap(c.pos), nullptr);
  }
  c.scores.resize(B * H * T_len, L);
  c.ctx.resize(B * T_len, d);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(dk)));
  const Index cap = c.capacity, off = c.offset;
  Matrix<T>& scores = c.scores;
  const Matrix<T>& qs = c.q;
  const Matrix<T>& kv = c.kv;
  const Matrix<T>& pos = c.pos;
  Matrix<T>& ctx = c.ctx;
#pragma omp parallel for schedule(static) if (B * H * T_len * L * dk >= kParallelMin)
  for (Index bh = 0; bh < B * H; ++bh) {
    const Index b = bh / H, h = bh % H;
    const Eigen::OuterStride<> sd(d), s2d(2 * d);
    ConstStridedMap<T> Qu(qs.data() + b * T_len * 2 * d + h * dk, T_len, dk, s2d);       // (T, dk)
    ConstStridedMap<T> Qv(qs.data() + b * T_len * 2 * d + d + h * dk, T_len, dk, s2d);   // (T, dk)
    ConstStridedMap<T> K(kv.data() + (b * cap + off) * 2 * d + h * dk, L, dk, s2d);      // (L, dk)
    ConstStridedMap<T> V(kv.data() + (b * cap + off) * 2 * d + d + h * dk, L, dk, s2d);  // (L, dk)
    ConstStridedMap<T> P(pos.data() + h * dk, L, dk, sd);                                // (L, dk) distance 0..L-1
    MatrixMap<T> S(scores.data() + bh * T_len * L, T_len, L);                            // (T, L)
    StridedMap<T> O(ctx.data() + b * T_len * d + h * dk, T_len, dk, sd);                 // (T, dk)
    // position terms by distance, then entry (i, j) reads distance n + i - j: the first n + i + 1
    // entries of row i in reverse order
    S.noalias() = Qv * P.transpose();
    for (Index i = 0; i < T_len; ++i) std::reverse(S.data() + i * L, S.data() + i * L + n + i + 1);
    S.noalias() += Qu * K.transpose();
    S *= scale;
    for (Index i = 0; i < T_len; ++i) causal_softmax_row(S.data() + i * L, n + i + 1, L);
    O.noalias() = S * V;
  }
  // output projection                                                     (B*T, d)
  be.linear(ctx, proj_.out.weight_.data(), proj_.out.bias_.data(), d, y);
  // the oldest positions beyond mem_len leave
  c.length = L;
  if (c.length > c.mem_len) {
    c.offset += c.length - c.mem_len;
    c.length = c.mem_len;
  }
}

template void relative_shift<float>(const float*, float*, Index, Index, Index);
template void relative_shift<double>(const double*, double*, Index, Index, Index);
template struct RelativeAttentionCache<float>;
template struct RelativeAttentionCache<double>;
template class RelativeMultiHeadAttention<float>;
template class RelativeMultiHeadAttention<double>;

}  // namespace transformer

#include "transformer/attention/linear_attention.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "transformer/core/checks.hpp"
#include "transformer/core/tuning.hpp"
#include "transformer/kernels/matmul.hpp"

namespace transformer {

namespace {

template <typename T>
using ColVector = Eigen::Matrix<T, Eigen::Dynamic, 1>;
template <typename T>
using ColMap = Eigen::Map<ColVector<T>>;
template <typename T>
using RowMap = Eigen::Map<RowVector<T>>;
template <typename T>
using ConstRowMap = Eigen::Map<const RowVector<T>>;

// phi(x) = elu(x) + 1 = x + 1 for x > 0, e^x otherwise, element-wise:          x (n, d) -> f (n, d)
// written as e^min(x, 0) + max(x, 0), which is the same at every x and vectorises (no branch).
template <typename T, typename In>
void feature_map(const In& x, MatrixMap<T> f) {
  f.array() = x.array().min(T(0)).exp() + x.array().max(T(0));
}

// g *= phi'(x) element-wise, given f = phi(x): phi'(x) = 1 for x > 0, e^x = phi(x) otherwise, which
// is min(phi(x), 1) exactly (phi(x) > 1 exactly when x > 0).
template <typename T, typename Out>
void times_feature_map_grad(const MatrixMap<T>& f, Out&& g) {
  g.array() *= f.array().min(T(1));
}

// The buffers of one thread's chunk: a few (chunk, d), (chunk, chunk) and (d, d) blocks, grown
// only when a larger chunk or width comes along and kept for the thread's next call.
template <typename T>
struct ChunkBuffers {
  std::vector<T> fq, fk, a, da, u, w, s, r, rz;
  static void grow(std::vector<T>& v, Index n) {
    if (static_cast<Index>(v.size()) < n) v.resize(static_cast<size_t>(n));
  }
  void ensure(Index C, Index d) {
    grow(fq, C * d);     // (C, d) phi(Q_c)
    grow(fk, C * d);     // (C, d) phi(K_c)
    grow(a, C * C);      // (C, C) phi(Q_c) phi(K_c)^T, lower triangle
    grow(da, C * C);     // (C, C) its gradient
    grow(u, C * d);      // (C, d) dout / den
    grow(w, C);          // (C)    gradient of den
    grow(s, d * d + d);  // (d, d) + (d) the backward's prefix sums S and z
    grow(r, d * d);      // (d, d) the backward's suffix (or total) sum
    grow(rz, d);         // (d)    ... and that of the denominator
  }
};

template <typename T>
ChunkBuffers<T>& chunk_buffers(Index C, Index d) {
  thread_local ChunkBuffers<T> buffers;
  buffers.ensure(C, d);
  return buffers;
}

// Rows t0 .. t0+n-1 of head h of sequence b in the strided addressing of the header.
template <typename T>
ConstStridedMap<T> head_rows(const T* base, Index stride, Index b, Index h, Index T_len, Index d, Index t0, Index n) {
  return ConstStridedMap<T>(base + (b * T_len + t0) * stride + h * d, n, d, Eigen::OuterStride<>(stride));
}
template <typename T>
StridedMap<T> head_rows_mut(T* base, Index stride, Index b, Index h, Index T_len, Index d, Index t0, Index n) {
  return StridedMap<T>(base + (b * T_len + t0) * stride + h * d, n, d, Eigen::OuterStride<>(stride));
}

// u = dout / den row-wise and w_i = -(dout_i . out_i) / den_i = -(u_i . out_i): the gradients of
// the numerator and of the denominator of out_i = num_i / den_i.
template <typename T>
void numerator_denominator_grads(const ConstStridedMap<T>& G, const ConstStridedMap<T>& O, const T* den, Index n,
                                 MatrixMap<T> U, ColMap<T> w) {
  for (Index i = 0; i < n; ++i) {
    const T inv = T(1) / den[i];
    U.row(i) = G.row(i) * inv;
    w(i) = -U.row(i).dot(O.row(i));
  }
}

}  // namespace

template <typename T>
void linear_attention_forward(const T* q, Index q_stride, const T* k, Index k_stride, const T* v, Index v_stride,
                              Index B, Index H, Index T_len, Index d, bool causal, T* out, Index out_stride, T* den,
                              T* state) {
  const Index C = tuning::kLinearAttentionChunk, ss = linear_attention_state_size(d);
  const T eps = static_cast<T>(kLinearAttentionEps);
#pragma omp parallel for schedule(static)
  for (Index bh = 0; bh < B * H; ++bh) {
    const Index b = bh / H, h = bh % H;
    ChunkBuffers<T>& cb = chunk_buffers<T>(C, d);
    MatrixMap<T> S(state + bh * ss, d, d);    // (d, d) sum of phi(K_j)^T V_j so far
    RowMap<T> z(state + bh * ss + d * d, d);  // (d)    sum of phi(K_j) so far
    T* dn = den + bh * T_len;                 // (T)
    S.setZero();
    z.setZero();
    if (!causal) {  // every query sees the whole sequence: S and z first
      for (Index t0 = 0; t0 < T_len; t0 += C) {
        const Index n = std::min(C, T_len - t0);
        MatrixMap<T> Fk(cb.fk.data(), n, d);  // (n, d)
        feature_map<T>(head_rows(k, k_stride, b, h, T_len, d, t0, n), Fk);
        S.noalias() += Fk.transpose() * head_rows(v, v_stride, b, h, T_len, d, t0, n);
        z += Fk.colwise().sum();
      }
    }
    for (Index t0 = 0; t0 < T_len; t0 += C) {
      const Index n = std::min(C, T_len - t0);
      const ConstStridedMap<T> Q = head_rows(q, q_stride, b, h, T_len, d, t0, n);  // (n, d)
      StridedMap<T> O = head_rows_mut(out, out_stride, b, h, T_len, d, t0, n);     // (n, d)
      ColMap<T> den_c(dn + t0, n);                                                 // (n)
      MatrixMap<T> Fq(cb.fq.data(), n, d);                                         // (n, d)
      feature_map<T>(Q, Fq);
      // the positions before the chunk, through the state
      O.noalias() = Fq * S;
      den_c.noalias() = Fq * z.transpose();
      if (causal) {
        // the chunk itself: A_ij = phi(Q_i) . phi(K_j) for j <= i                    (n, n)
        const ConstStridedMap<T> K = head_rows(k, k_stride, b, h, T_len, d, t0, n);
        const ConstStridedMap<T> V = head_rows(v, v_stride, b, h, T_len, d, t0, n);
        MatrixMap<T> Fk(cb.fk.data(), n, d);
        MatrixMap<T> A(cb.a.data(), n, n);
        feature_map<T>(K, Fk);
        A.noalias() = Fq * Fk.transpose();
        A.template triangularView<Eigen::StrictlyUpper>().setZero();
        O.noalias() += A * V;
        den_c += A.rowwise().sum();
        // the chunk joins the prefix
        S.noalias() += Fk.transpose() * V;
        z += Fk.colwise().sum();
      }
      den_c.array() += eps;
      for (Index i = 0; i < n; ++i) O.row(i) /= den_c(i);
    }
  }
}

// The backward, with num_i = phi(Q_i) S_i (a d-vector), den_i = phi(Q_i) . z_i + eps and
// out_i = num_i / den_i, where S_i, z_i sum over j <= i (causal) or over every j:
//
//   u_i = dout_i / den_i                           gradient of num_i
//   w_i = -(dout_i . num_i) / den_i^2 = -(u_i . out_i)   gradient of den_i
//
// num and den are linear in phi(Q_i), in each phi(K_j) and in each V_j:
//
//   d phi(Q_i) = u_i S_i^T + w_i z_i                                        (paper Eq. 13 + den)
//   d phi(K_j) = sum_{i>=j} [ (u_i . V_j) + w_i ] phi(Q_i)
//              = V_j R_j^T + r_j,  R_j = sum_{i>=j} phi(Q_i)^T u_i,  r_j = sum_{i>=j} w_i phi(Q_i)
//                                                                           (Eq. 14 + den)
//   d V_j      = sum_{i>=j} u_i (phi(Q_i) . phi(K_j)) = phi(K_j) R_j        (Eq. 15)
//
// (the sums over i run over every i in the non-causal form, so R and r are the same for all j).
// Then dQ = d phi(Q) * phi'(Q), dK = d phi(K) * phi'(K) with phi'(x) = 1 for x > 0, e^x otherwise.
//
// The causal form runs in chunks, as the forward does. Within a chunk c the pairs j <= i are the
// lower triangle of A = phi(Q_c) phi(K_c)^T, whose gradient is dA_ij = u_i . V_j + w_i (j <= i);
// so d phi(Q_c) += dA phi(K_c), d phi(K_c) += dA^T phi(Q_c), dV_c += A^T u_c. The pairs across
// chunks go through running sums: a pass forward over the chunks with S and z of the chunks before
// (d phi(Q_c) += u_c S^T + w_c z), and a pass backward with R and r of the chunks after
// (d phi(K_c) += V_c R^T + r, dV_c += phi(K_c) R). Nothing per position is larger than d.
template <typename T>
void linear_attention_backward(const T* q, Index q_stride, const T* k, Index k_stride, const T* v, Index v_stride,
                               Index B, Index H, Index T_len, Index d, bool causal, const T* out, Index out_stride,
                               const T* den, const T* state, const T* dout, Index dout_stride, T* dq, Index dq_stride,
                               T* dk_out, Index dk_stride, T* dv, Index dv_stride) {
  const Index C = tuning::kLinearAttentionChunk, ss = linear_attention_state_size(d);
#pragma omp parallel for schedule(static)
  for (Index bh = 0; bh < B * H; ++bh) {
    const Index b = bh / H, h = bh % H;
    ChunkBuffers<T>& cb = chunk_buffers<T>(C, d);
    const T* dn = den + bh * T_len;     // (T)
    MatrixMap<T> R(cb.r.data(), d, d);  // (d, d) sum of phi(Q_i)^T u_i (after the chunk, or all)
    RowMap<T> rz(cb.rz.data(), d);      // (d)    sum of w_i phi(Q_i)   (likewise)
    auto rows = [&](const T* base, Index stride, Index t0, Index n) {
      return head_rows(base, stride, b, h, T_len, d, t0, n);
    };
    auto rows_mut = [&](T* base, Index stride, Index t0, Index n) {
      return head_rows_mut(base, stride, b, h, T_len, d, t0, n);
    };
    // u and w of chunk [t0, t0+n) into the buffers
    auto grads_of_chunk = [&](Index t0, Index n, MatrixMap<T>& U, ColMap<T>& w) {
      numerator_denominator_grads<T>(rows(dout, dout_stride, t0, n), rows(out, out_stride, t0, n), dn + t0, n, U, w);
    };
    if (!causal) {
      const ConstMatrixMap<T> S(state + bh * ss, d, d);  // (d, d) sum over the whole sequence
      const ConstRowMap<T> z(state + bh * ss + d * d, d);
      R.setZero();
      rz.setZero();
      for (Index t0 = 0; t0 < T_len; t0 += C) {  // dQ; R and r over every position
        const Index n = std::min(C, T_len - t0);
        const ConstStridedMap<T> Q = rows(q, q_stride, t0, n);
        StridedMap<T> dQ = rows_mut(dq, dq_stride, t0, n);
        MatrixMap<T> Fq(cb.fq.data(), n, d), U(cb.u.data(), n, d);
        ColMap<T> w(cb.w.data(), n);
        feature_map<T>(Q, Fq);
        grads_of_chunk(t0, n, U, w);
        dQ.noalias() = U * S.transpose();
        dQ.noalias() += w * z;
        R.noalias() += Fq.transpose() * U;
        rz.noalias() += w.transpose() * Fq;
        times_feature_map_grad<T>(Fq, dQ);
      }
      for (Index t0 = 0; t0 < T_len; t0 += C) {  // dK, dV
        const Index n = std::min(C, T_len - t0);
        const ConstStridedMap<T> K = rows(k, k_stride, t0, n), V = rows(v, v_stride, t0, n);
        StridedMap<T> dK = rows_mut(dk_out, dk_stride, t0, n), dV = rows_mut(dv, dv_stride, t0, n);
        MatrixMap<T> Fk(cb.fk.data(), n, d);
        feature_map<T>(K, Fk);
        dK.noalias() = V * R.transpose();
        dK.rowwise() += rz;
        dV.noalias() = Fk * R;
        times_feature_map_grad<T>(Fk, dK);
      }
      continue;
    }
    // causal, forward over the chunks: the in-chunk terms of all three, and dQ's terms from the
    // chunks before through S and z (rebuilt here, as the forward built them)
    MatrixMap<T> Sp(cb.s.data(), d, d);    // (d, d) sum of phi(K_j)^T V_j before the chunk
    RowMap<T> zp(cb.s.data() + d * d, d);  // (d)    sum of phi(K_j) before the chunk
    Sp.setZero();
    zp.setZero();
    for (Index t0 = 0; t0 < T_len; t0 += C) {
      const Index n = std::min(C, T_len - t0);
      const ConstStridedMap<T> Q = rows(q, q_stride, t0, n), K = rows(k, k_stride, t0, n), V = rows(v, v_stride, t0, n);
      StridedMap<T> dQ = rows_mut(dq, dq_stride, t0, n), dK = rows_mut(dk_out, dk_stride, t0, n),
                    dV = rows_mut(dv, dv_stride, t0, n);
      MatrixMap<T> Fq(cb.fq.data(), n, d), Fk(cb.fk.data(), n, d), U(cb.u.data(), n, d);
      MatrixMap<T> A(cb.a.data(), n, n), dA(cb.da.data(), n, n);
      ColMap<T> w(cb.w.data(), n);
      feature_map<T>(Q, Fq);
      feature_map<T>(K, Fk);
      grads_of_chunk(t0, n, U, w);
      // A_ij = phi(Q_i) . phi(K_j) and dA_ij = u_i . V_j + w_i, for j <= i            (n, n)
      A.noalias() = Fq * Fk.transpose();
      A.template triangularView<Eigen::StrictlyUpper>().setZero();
      dA.noalias() = U * V.transpose();
      dA.colwise() += w;
      dA.template triangularView<Eigen::StrictlyUpper>().setZero();
      // d phi(Q_c) = u_c S^T + w_c z + dA phi(K_c)
      dQ.noalias() = U * Sp.transpose();
      dQ.noalias() += w * zp;
      dQ.noalias() += dA * Fk;
      times_feature_map_grad<T>(Fq, dQ);
      // the in-chunk parts of d phi(K_c) and dV_c (the later chunks add theirs below)
      dK.noalias() = dA.transpose() * Fq;
      dV.noalias() = A.transpose() * U;
      Sp.noalias() += Fk.transpose() * V;
      zp += Fk.colwise().sum();
    }
    // causal, backward over the chunks: d phi(K_c) += V_c R^T + r, dV_c += phi(K_c) R, with R and r
    // summed over the chunks after c
    R.setZero();
    rz.setZero();
    const Index last = ((T_len - 1) / C) * C;
    for (Index t0 = last; t0 >= 0; t0 -= C) {
      const Index n = std::min(C, T_len - t0);
      const ConstStridedMap<T> Q = rows(q, q_stride, t0, n), K = rows(k, k_stride, t0, n), V = rows(v, v_stride, t0, n);
      StridedMap<T> dK = rows_mut(dk_out, dk_stride, t0, n), dV = rows_mut(dv, dv_stride, t0, n);
      MatrixMap<T> Fq(cb.fq.data(), n, d), Fk(cb.fk.data(), n, d), U(cb.u.data(), n, d);
      ColMap<T> w(cb.w.data(), n);
      feature_map<T>(Q, Fq);
      feature_map<T>(K, Fk);
      grads_of_chunk(t0, n, U, w);
      dK.noalias() += V * R.transpose();
      dK.rowwise() += rz;
      dV.noalias() += Fk * R;
      times_feature_map_grad<T>(Fk, dK);
      R.noalias() += Fq.transpose() * U;
      rz.noalias() += w.transpose() * Fq;
    }
  }
}

template <typename T>
void linear_attention_step(const T* q, Index q_stride, const T* k, Index k_stride, const T* v, Index v_stride, Index R,
                           Index H, Index d, T* state, T* out, Index out_stride) {
  const Index ss = linear_attention_state_size(d);
  const T eps = static_cast<T>(kLinearAttentionEps);
#pragma omp parallel for schedule(static) if (R * H > 1 && R * H * ss >= tuning::kParallelMin)
  for (Index rh = 0; rh < R * H; ++rh) {
    const Index r = rh / H, h = rh % H;
    ChunkBuffers<T>& cb = chunk_buffers<T>(1, d);
    MatrixMap<T> S(state + rh * ss, d, d);    // (d, d)
    RowMap<T> z(state + rh * ss + d * d, d);  // (d)
    MatrixMap<T> fq(cb.fq.data(), 1, d), fk(cb.fk.data(), 1, d);
    feature_map<T>(ConstMatrixMap<T>(q + r * q_stride + h * d, 1, d), fq);
    feature_map<T>(ConstMatrixMap<T>(k + r * k_stride + h * d, 1, d), fk);
    const ConstRowMap<T> vv(v + r * v_stride + h * d, d);
    // s_t = s_{t-1} + phi(k_t)^T v_t,  z_t = z_{t-1} + phi(k_t)   (paper Eqs. 18-19)
    S.noalias() += fk.transpose() * vv;
    z += fk.row(0);
    // y_t = phi(q_t) s_t / (phi(q_t) . z_t + eps)                   (Eq. 20, before f_l)
    RowMap<T> o(out + r * out_stride + h * d, d);
    o.noalias() = fq.row(0) * S;
    o /= fq.row(0).dot(z) + eps;
  }
}

// ---------------------------------------------------------------------------------------------
// The layer

template <typename T>
LinearMultiHeadAttention<T>::LinearMultiHeadAttention(Index d_model, Index n_heads, std::uint64_t seed)
    // the whole layer's size is checked before its first weight is allocated
    : proj_(checked_size<T>("LinearMultiHeadAttention", concat("d_model ", d_model), attention_parameters(d_model), 0,
                            d_model > 0 ? d_model : 1),
            {{"query", 1}, {"key", 2}, {"value", 3}}, seed),
      d_(d_model),
      h_(n_heads) {
  TCPP_CHECK(d_model > 0 && n_heads > 0, "LinearMultiHeadAttention: d_model and n_heads must be positive, got ",
             d_model, " and ", n_heads);
  TCPP_CHECK(d_model % n_heads == 0, "LinearMultiHeadAttention: d_model ", d_model, " is not divisible by n_heads ",
             n_heads);
  dk_ = d_model / n_heads;
}

template <typename T>
const Matrix<T>& LinearMultiHeadAttention<T>::forward(ConstMatrixMap<T> x, Index B, Index T_len, bool causal) {
  return run(x, B, T_len, causal, nullptr);
}

template <typename T>
const Matrix<T>& LinearMultiHeadAttention<T>::forward_key_padding(ConstMatrixMap<T> x, Index B, Index T_len,
                                                                  const std::uint8_t* key_padding) {
  TCPP_CHECK(key_padding != nullptr, "LinearMultiHeadAttention: forward_key_padding needs the key padding");
  return run(x, B, T_len, false, key_padding);
}

template <typename T>
const Matrix<T>& LinearMultiHeadAttention<T>::run(ConstMatrixMap<T> x, Index B, Index T_len, bool causal,
                                                  const std::uint8_t* key_padding) {
  TCPP_CHECK(B > 0 && T_len > 0 && x.rows() == B * T_len, "LinearMultiHeadAttention: input has ", x.rows(),
             " rows, expected B*T = ", B, "*", T_len);
  TCPP_CHECK(x.cols() == d_, "LinearMultiHeadAttention: input has ", x.cols(), " features, expected d_model ", d_);
  x_ = x.data();
  B_ = B;
  T_ = T_len;
  causal_ = causal;
  // [Q | K | V] = x [W_q; W_k; W_v]^T + b                               (B*T, 3d)
  proj_.project(precision_, x, 0, 3, qkv_);
  if (key_padding != nullptr)  // phi of a padded key is 0: it adds nothing to S and z
    for (Index i = 0; i < B * T_len; ++i)
      if (key_padding[i] != 0) qkv_.row(i).segment(d_, d_).setConstant(static_cast<T>(kLinearAttentionMaskedKey));
  ctx_.resize(x.rows(), d_);                                // (B*T, d)
  den_.resize(B * h_, T_len);                               // (B*H, T)
  state_.resize(B * h_, linear_attention_state_size(dk_));  // (B*H, d_k^2 + d_k)
  const T* base = qkv_.data();
  linear_attention_forward<T>(base, 3 * d_, base + d_, 3 * d_, base + 2 * d_, 3 * d_, B, h_, T_len, dk_, causal,
                              ctx_.data(), d_, den_.data(), state_.data());
  return proj_.out.forward(cmap(ctx_));
}

template <typename T>
const Matrix<T>& LinearMultiHeadAttention<T>::backward(ConstMatrixMap<T> dout) {
  if (x_ == nullptr) throw std::runtime_error("LinearMultiHeadAttention: backward() called before forward()");
  const Index rows = B_ * T_;
  TCPP_CHECK(dout.rows() == rows && dout.cols() == d_, "LinearMultiHeadAttention: backward got dout of shape (",
             dout.rows(), ", ", dout.cols(), "), expected (", rows, ", ", d_, ")");
  // output projection: dctx = dout W_o                                  (B*T, d)
  const Matrix<T>& dctx = proj_.out.backward(dout);
  // d[Q | K | V]                                                         (B*T, 3d)
  dqkv_.resize(rows, 3 * d_);
  const T* base = qkv_.data();
  T* dbase = dqkv_.data();
  linear_attention_backward<T>(base, 3 * d_, base + d_, 3 * d_, base + 2 * d_, 3 * d_, B_, h_, T_, dk_, causal_,
                               ctx_.data(), d_, den_.data(), state_.data(), dctx.data(), d_, dbase, 3 * d_, dbase + d_,
                               3 * d_, dbase + 2 * d_, 3 * d_);
  // forward was [Q|K|V] = x W_in^T + b_in, so dW_in += d[Q|K|V]^T x, db_in += column sums,
  // and dx = d[Q|K|V] W_in (the three paths summed by the one product)
  ConstMatrixMap<T> x(x_, rows, d_);
  proj_.backward(precision_, cmap(dqkv_), x, 0, 3, &dx_);
  return dx_;
}

template <typename T>
void LinearMultiHeadAttention<T>::set_precision(Precision p) {
  check_precision<T>(p, "LinearMultiHeadAttention");
  proj_.out.set_precision(p);
  precision_ = p;
}

template <typename T>
ParameterList<T> LinearMultiHeadAttention<T>::parameters() {
  return proj_.parameters();
}

template <typename T>
void LinearMultiHeadAttention<T>::zero_grad() {
  proj_.zero_grad();
}

template <typename T>
void LinearMultiHeadAttention<T>::release() {
  x_ = nullptr;
  B_ = T_ = 0;
  for (Matrix<T>* m : {&qkv_, &ctx_, &den_, &state_, &dqkv_, &dx_}) *m = Matrix<T>();
  proj_.out.release();
}

template <typename T>
void LinearMultiHeadAttention<T>::reset_state(LinearAttentionState<T>& st, Index rows) const {
  TCPP_CHECK(rows > 0, "LinearMultiHeadAttention: a generation state needs at least one row, got ", rows);
  st.s = Matrix<T>::Zero(rows, h_ * linear_attention_state_size(dk_));
  st.length = 0;
}

template <typename T>
void LinearMultiHeadAttention<T>::infer(const Matrix<T>& x, const SentenceRows& rows, InferenceBackend<T>& be,
                                        InferenceScratch<T>& s, Matrix<T>& y) const {
  TCPP_CHECK(x.cols() == d_ && x.rows() == rows.rows(), "LinearMultiHeadAttention: infer input has shape (", x.rows(),
             ", ", x.cols(), "), expected (", rows.rows(), ", ", d_, ")");
  // [Q | K | V] = x [W_q; W_k; W_v]^T + b                               (rows, 3d)
  be.linear(x, proj_.w_in.data(), proj_.b_in.data(), 3 * d_, s.qkv);
  s.ctx.resize(x.rows(), d_);
  const T* qkv = s.qkv.data();
  // each sentence is a batch of one over its own rows (no padding to mask)
  for (Index b = 0; b < rows.B; ++b) {
    const Index r0 = rows.offsets[static_cast<size_t>(b)], len = rows.offsets[static_cast<size_t>(b + 1)] - r0;
    if (len == 0) continue;
    std::vector<T> den(static_cast<size_t>(h_ * len)),
        state(static_cast<size_t>(h_ * linear_attention_state_size(dk_)));
    const T* base = qkv + r0 * 3 * d_;
    linear_attention_forward<T>(base, 3 * d_, base + d_, 3 * d_, base + 2 * d_, 3 * d_, 1, h_, len, dk_, false,
                                s.ctx.data() + r0 * d_, d_, den.data(), state.data());
  }
  be.linear(s.ctx, proj_.out.weight_.data(), proj_.out.bias_.data(), d_, y);  // (rows, d)
}

template <typename T>
void LinearMultiHeadAttention<T>::step(ConstMatrixMap<T> x, LinearAttentionState<T>& st, InferenceBackend<T>& be,
                                       Matrix<T>& y) const {
  TCPP_CHECK(x.cols() == d_, "LinearMultiHeadAttention: step input has ", x.cols(), " features, expected d_model ", d_);
  TCPP_CHECK(st.s.cols() == h_ * linear_attention_state_size(dk_) && x.rows() == st.rows() && x.rows() > 0,
             "LinearMultiHeadAttention: the step has ", x.rows(), " rows but the state was reset for ", st.rows(),
             " rows of this layer's shape");
  const Index R = x.rows();
  // [Q | K | V] of the new position                                      (R, 3d)
  be.linear(x, proj_.w_in.data(), proj_.b_in.data(), 3 * d_, st.qkv);
  st.ctx.resize(R, d_);  // (R, d)
  const T* base = st.qkv.data();
  linear_attention_step<T>(base, 3 * d_, base + d_, 3 * d_, base + 2 * d_, 3 * d_, R, h_, dk_, st.s.data(),
                           st.ctx.data(), d_);
  ++st.length;
  be.linear(st.ctx, proj_.out.weight_.data(), proj_.out.bias_.data(), d_, y);  // (R, d)
}

template void linear_attention_forward<float>(const float*, Index, const float*, Index, const float*, Index, Index,
                                              Index, Index, Index, bool, float*, Index, float*, float*);
template void linear_attention_forward<double>(const double*, Index, const double*, Index, const double*, Index, Index,
                                               Index, Index, Index, bool, double*, Index, double*, double*);
template void linear_attention_backward<float>(const float*, Index, const float*, Index, const float*, Index, Index,
                                               Index, Index, Index, bool, const float*, Index, const float*,
                                               const float*, const float*, Index, float*, Index, float*, Index, float*,
                                               Index);
template void linear_attention_backward<double>(const double*, Index, const double*, Index, const double*, Index, Index,
                                                Index, Index, Index, bool, const double*, Index, const double*,
                                                const double*, const double*, Index, double*, Index, double*, Index,
                                                double*, Index);
template void linear_attention_step<float>(const float*, Index, const float*, Index, const float*, Index, Index, Index,
                                           Index, float*, float*, Index);
template void linear_attention_step<double>(const double*, Index, const double*, Index, const double*, Index, Index,
                                            Index, Index, double*, double*, Index);
template class LinearMultiHeadAttention<float>;
template class LinearMultiHeadAttention<double>;

}  // namespace transformer

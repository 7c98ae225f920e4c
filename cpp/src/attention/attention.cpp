#include "transformer/attention/attention.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "transformer/attention/tiled_attention.hpp"
#include "transformer/core/checks.hpp"
#include "transformer/core/tuning.hpp"
#include "transformer/layers/softmax.hpp"

namespace transformer {

void build_attention_mask(std::vector<std::uint8_t>& out, const std::uint8_t* key_padding, Index B, Index Tq, Index Tk,
                          bool causal) {
  out.resize(static_cast<size_t>(B * Tq * Tk));
  for (Index b = 0; b < B; ++b) {
    for (Index i = 0; i < Tq; ++i) {
      std::uint8_t* row = out.data() + (b * Tq + i) * Tk;
      for (Index j = 0; j < Tk; ++j) {
        const bool pad = key_padding != nullptr && key_padding[b * Tk + j] != 0;
        row[j] = static_cast<std::uint8_t>(pad || (causal && j > i));
      }
    }
  }
}

template <typename T>
void attention_forward(const T* q, Index q_stride, const T* k, Index k_stride, const T* v, Index v_stride, Index B,
                       Index H, Index Tq, Index Tk, Index dk, const AttentionMask& mask, T* weights, T* out,
                       Index out_stride) {
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(dk)));
#pragma omp parallel for schedule(static)
  for (Index bh = 0; bh < B * H; ++bh) {
    const Index b = bh / H, h = bh % H;
    ConstStridedMap<T> Q(q + b * Tq * q_stride + h * dk, Tq, dk, Eigen::OuterStride<>(q_stride));   // (Tq, dk)
    ConstStridedMap<T> K(k + b * Tk * k_stride + h * dk, Tk, dk, Eigen::OuterStride<>(k_stride));   // (Tk, dk)
    ConstStridedMap<T> V(v + b * Tk * v_stride + h * dk, Tk, dk, Eigen::OuterStride<>(v_stride));   // (Tk, dk)
    MatrixMap<T> P(weights + bh * Tq * Tk, Tq, Tk);                                                 // (Tq, Tk)
    StridedMap<T> O(out + b * Tq * out_stride + h * dk, Tq, dk, Eigen::OuterStride<>(out_stride));  // (Tq, dk)
    // scores = Q K^T / sqrt(dk); the scale written first, so that Eigen passes it to its product
    // as the factor alpha (written after the product, it makes a temporary for the product)
    P.noalias() = scale * (Q * K.transpose());
    // masked softmax over each row; blocked keys get weight 0, a fully blocked row is all 0
    for (Index i = 0; i < Tq; ++i) masked_softmax_row(P.data() + i * Tk, Tk, mask.row(b, i, Tk));
    // out = P V
    O.noalias() = P * V;
  }
}

template <typename T>
void attention_backward(const T* q, Index q_stride, const T* k, Index k_stride, const T* v, Index v_stride, Index B,
                        Index H, Index Tq, Index Tk, Index dk, const T* weights, const T* dout, Index dout_stride,
                        T* dq, Index dq_stride, T* dk_out, Index dk_stride, T* dv, Index dv_stride, T* dscores) {
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(dk)));
#pragma omp parallel for schedule(static)
  for (Index bh = 0; bh < B * H; ++bh) {
    const Index b = bh / H, h = bh % H;
    ConstStridedMap<T> Q(q + b * Tq * q_stride + h * dk, Tq, dk, Eigen::OuterStride<>(q_stride));
    ConstStridedMap<T> K(k + b * Tk * k_stride + h * dk, Tk, dk, Eigen::OuterStride<>(k_stride));
    ConstStridedMap<T> V(v + b * Tk * v_stride + h * dk, Tk, dk, Eigen::OuterStride<>(v_stride));
    ConstMatrixMap<T> P(weights + bh * Tq * Tk, Tq, Tk);
    ConstStridedMap<T> dO(dout + b * Tq * dout_stride + h * dk, Tq, dk, Eigen::OuterStride<>(dout_stride));
    StridedMap<T> dQ(dq + b * Tq * dq_stride + h * dk, Tq, dk, Eigen::OuterStride<>(dq_stride));
    StridedMap<T> dK(dk_out + b * Tk * dk_stride + h * dk, Tk, dk, Eigen::OuterStride<>(dk_stride));
    StridedMap<T> dV(dv + b * Tk * dv_stride + h * dk, Tk, dk, Eigen::OuterStride<>(dv_stride));
    MatrixMap<T> dS(dscores + bh * Tq * Tk, Tq, Tk);
    // forward was O = P V, so dP = dO V^T and dV = P^T dO
    dS.noalias() = dO * V.transpose();
    dV.noalias() = P.transpose() * dO;
    // P = softmax(S) row-wise: dS from dP, times the 1/sqrt(dk) (0 where P is 0)
    attention_weights_backward(P.data(), dS.data(), Tq, Tk, scale);
    // S = Q K^T (scaled), so dQ = dS K and dK = dS^T Q
    dQ.noalias() = dS * K;
    dK.noalias() = dS.transpose() * Q;
  }
}

template <typename T>
MultiHeadAttention<T>::MultiHeadAttention(Index d_model, Index n_heads, std::uint64_t seed)
    // the whole layer's size is checked before its first weight is allocated
    : proj_(checked_size<T>("MultiHeadAttention", concat("d_model ", d_model), attention_parameters(d_model), 0,
                            d_model > 0 ? d_model : 1),
            {{"query", 1}, {"key", 2}, {"value", 3}}, seed),
      d_(d_model),
      h_(n_heads) {
  TCPP_CHECK(d_model > 0 && n_heads > 0, "MultiHeadAttention: d_model and n_heads must be positive, got ", d_model,
             " and ", n_heads);
  TCPP_CHECK(d_model % n_heads == 0, "MultiHeadAttention: d_model ", d_model, " is not divisible by n_heads ", n_heads);
  dk_ = d_model / n_heads;
}

namespace {

// Packed rows -> the padded (B*T, C) layout, zero at the rows not listed.
template <typename T>
void scatter_rows(ConstMatrixMap<T> packed, const RowLayout& l, GrowOnlyMatrix<T>& padded) {
  const Index C = packed.cols(), n = l.B * l.T;
  padded.resize(n, C);
  // sequence by sequence in parallel: the ids are increasing, so sequence b's packed rows are the
  // ones with ids in [b*T, (b+1)*T), found by binary search
#pragma omp parallel for schedule(static) if (n * C >= (1 << 15))
  for (Index b = 0; b < l.B; ++b) {
    Index r = std::lower_bound(l.ids.begin(), l.ids.end(), b * l.T) - l.ids.begin();
    for (Index j = b * l.T; j < (b + 1) * l.T; ++j) {
      if (r < packed.rows() && l.ids[static_cast<size_t>(r)] == j) {
        padded.row(j) = packed.row(r++);
      } else {
        padded.row(j).setZero();
      }
    }
  }
}

// The listed rows of a padded (B*T, C) matrix.
template <typename T>
void gather_rows(const GrowOnlyMatrix<T>& padded, const RowLayout& l, GrowOnlyMatrix<T>& packed) {
  const Index n = l.rows();
  packed.resize(n, padded.cols());
#pragma omp parallel for schedule(static) if (n * padded.cols() >= (1 << 15))
  for (Index r = 0; r < n; ++r) packed.row(r) = padded.row(l.ids[static_cast<size_t>(r)]);
}

// Buffers that only live inside one backward() call (score and projection gradients) are shared by
// every MultiHeadAttention of a thread instead of one set per layer: a model's backward runs in
// the thread that called it, one layer at a time, so the peak memory holds one set, not 3N.
// The padded copies of packed projections (and of the context) are scratch too: backward rebuilds
// them from the packed rows it keeps, which costs one copy and saves a padded buffer per layer.
enum BackwardScratch { kDScores, kDCtxPad, kDQkvPad, kDKvPad, kDQkv, kDKv, kQkvPad, kKvPad, kCtxPad, kScratchCount };

template <typename T>
GrowOnlyMatrix<T>& backward_scratch(BackwardScratch slot) {
  thread_local std::array<GrowOnlyMatrix<T>, kScratchCount> buffers;
  return buffers[slot];
}

}  // namespace

template <typename T>
const Matrix<T>& MultiHeadAttention<T>::forward(ConstMatrixMap<T> x, Index B, Index T_len, const AttentionMask& mask) {
  TCPP_CHECK(B > 0 && T_len > 0 && x.rows() == B * T_len, "MultiHeadAttention: input has ", x.rows(),
             " rows, expected B*T = ", B, "*", T_len);
  own_q_ = RowLayout::dense(B, T_len);
  return forward(x, own_q_, mask);
}

template <typename T>
const Matrix<T>& MultiHeadAttention<T>::forward(ConstMatrixMap<T> x, ConstMatrixMap<T> memory, Index B, Index Tq,
                                                Index Tk, const AttentionMask& mask) {
  TCPP_CHECK(B > 0 && Tq > 0 && Tk > 0 && x.rows() == B * Tq && memory.rows() == B * Tk,
             "MultiHeadAttention: query rows ", x.rows(), " and memory rows ", memory.rows(),
             " do not match B*Tq = ", B, "*", Tq, " and B*Tk = ", B, "*", Tk);
  own_q_ = RowLayout::dense(B, Tq);
  own_k_ = RowLayout::dense(B, Tk);
  return forward(x, memory, own_q_, own_k_, mask);
}

template <typename T>
const Matrix<T>& MultiHeadAttention<T>::forward(ConstMatrixMap<T> x, Index B, Index T_len, bool causal,
                                                const std::uint8_t* key_padding) {
  TCPP_CHECK(B > 0 && T_len > 0 && x.rows() == B * T_len, "MultiHeadAttention: input has ", x.rows(),
             " rows, expected B*T = ", B, "*", T_len);
  own_q_ = RowLayout::dense(B, T_len);
  return attend_self(x, own_q_, AttentionMask{}, causal, key_padding);
}

template <typename T>
bool MultiHeadAttention<T>::use_tiled(Index Tk) const {
  return runs_tiled(impl_, Tk);
}

template <typename T>
void MultiHeadAttention<T>::release() {
  for (GrowOnlyMatrix<T>* m : {&qkv_, &kv_, &weights_, &ctx_, &lse_}) m->release();
  for (Matrix<T>* m : {&dx_, &dmem_}) *m = Matrix<T>();
  proj_.out.release();
  MaskBuffer().swap(mask_buf_);
  lq_ = lk_ = nullptr;
  x_ = mem_ = nullptr;
}

template <typename T>
const Matrix<T>& MultiHeadAttention<T>::forward(ConstMatrixMap<T> x, const RowLayout& l, const AttentionMask& mask) {
  return attend_self(x, l, mask, false, nullptr);
}

template <typename T>
const Matrix<T>& MultiHeadAttention<T>::attend_self(ConstMatrixMap<T> x, const RowLayout& l, const AttentionMask& mask,
                                                    bool causal, const std::uint8_t* key_padding) {
  TCPP_CHECK(x.cols() == d_, "MultiHeadAttention: input has ", x.cols(), " features, expected d_model ", d_);
  TCPP_CHECK(x.rows() == l.rows(), "MultiHeadAttention: input has ", x.rows(), " rows, expected ", l.rows());
  self_ = true;
  x_ = x.data();
  mem_ = nullptr;
  lq_ = lk_ = &l;
  // [Q | K | V] = x [W_q; W_k; W_v]^T + b                               (rows, 3d)
  proj_.project(precision_, x, 0, 3, qkv_);
  // attention works in the padded (B, T) layout where the masks live      (B*T, 3d)
  const T* base = qkv_.data();
  GrowOnlyMatrix<T>& qkv_pad = backward_scratch<T>(kQkvPad);
  if (l.packed) {
    scatter_rows(cmap(qkv_), l, qkv_pad);
    base = qkv_pad.data();
  }
  return attend_padded(base, 3 * d_, base + d_, base + 2 * d_, 3 * d_, l, l, mask, causal, key_padding);
}

template <typename T>
const Matrix<T>& MultiHeadAttention<T>::attend_padded(const T* q, Index ldq, const T* k, const T* v, Index ldkv,
                                                      const RowLayout& lq, const RowLayout& lk,
                                                      const AttentionMask& mask, bool causal,
                                                      const std::uint8_t* key_padding) {
  const Index B = lq.B, Tq = lq.T, Tk = lk.T;
  GrowOnlyMatrix<T>& ctx_pad = backward_scratch<T>(kCtxPad);
  GrowOnlyMatrix<T>& ctx = lq.packed ? ctx_pad : ctx_;
  ctx.resize(B * Tq, d_);
  tiled_ = use_tiled(Tk);
  causal_ = causal;
  key_padding_ = key_padding;
  mask_ = mask;
  if (tiled_) {
    weights_.resize(0, 0);
    lse_.resize(B * h_, Tq);
    tiled_attention_forward<T>(q, ldq, k, ldkv, v, ldkv, B, h_, Tq, Tk, dk_, TiledMask{causal, key_padding, mask},
                               ctx.data(), d_, lse_.data());
  } else {
    AttentionMask mk = mask;
    if (key_padding != nullptr) {  // the structured mask as the (B, Tq, Tk) bytes the plain kernel reads
      build_attention_mask(mask_buf_, key_padding, B, Tq, Tk, causal);
      mk = AttentionMask{mask_buf_.data(), Tq * Tk};
    } else if (causal) {  // one (Tq, Tk) look-ahead mask for every sequence (batch stride 0)
      build_attention_mask(mask_buf_, nullptr, 1, Tq, Tk, true);
      mk = AttentionMask{mask_buf_.data(), 0};
    }
    weights_.resize(B * h_ * Tq, Tk);
    attention_forward<T>(q, ldq, k, ldkv, v, ldkv, B, h_, Tq, Tk, dk_, mk, weights_.data(), ctx.data(), d_);
  }
  if (lq.packed) gather_rows(ctx_pad, lq, ctx_);
  return proj_.out.forward(cmap(ctx_));
}

template <typename T>
const Matrix<T>& MultiHeadAttention<T>::forward(ConstMatrixMap<T> x, ConstMatrixMap<T> memory, const RowLayout& lq,
                                                const RowLayout& lk, const AttentionMask& mask) {
  TCPP_CHECK(x.cols() == d_ && memory.cols() == d_, "MultiHeadAttention: inputs have ", x.cols(), " and ",
             memory.cols(), " features, expected d_model ", d_);
  TCPP_CHECK(x.rows() == lq.rows() && memory.rows() == lk.rows() && lq.B == lk.B, "MultiHeadAttention: query rows ",
             x.rows(), " and memory rows ", memory.rows(), " do not match their layouts (", lq.rows(), ", ", lk.rows(),
             ")");
  self_ = false;
  x_ = x.data();
  mem_ = memory.data();
  lq_ = &lq;
  lk_ = &lk;
  // Q = x W_q^T + b_q                                                   (rows_q, d)
  proj_.project(precision_, x, 0, 1, qkv_);
  // [K | V] = memory [W_k; W_v]^T + [b_k | b_v]                         (rows_k, 2d)
  proj_.project(precision_, memory, 1, 2, kv_);
  const T* q = qkv_.data();
  const T* kv = kv_.data();
  GrowOnlyMatrix<T>& q_pad = backward_scratch<T>(kQkvPad);
  GrowOnlyMatrix<T>& kv_pad = backward_scratch<T>(kKvPad);
  if (lq.packed) {
    scatter_rows(cmap(qkv_), lq, q_pad);
    q = q_pad.data();
  }
  if (lk.packed) {
    scatter_rows(cmap(kv_), lk, kv_pad);
    kv = kv_pad.data();
  }
  return attend_padded(q, d_, kv, kv + d_, 2 * d_, lq, lk, mask, false, nullptr);
}

template <typename T>
const Matrix<T>& MultiHeadAttention<T>::backward(ConstMatrixMap<T> dout) {
  if (lq_ == nullptr) throw std::runtime_error("MultiHeadAttention: backward() called before forward()");
  const RowLayout& lq = *lq_;
  const RowLayout& lk = *lk_;
  const Index B = lq.B, Tq = lq.T, Tk = lk.T, rq = lq.rows(), rk = lk.rows();
  TCPP_CHECK(dout.rows() == rq && dout.cols() == d_, "MultiHeadAttention: backward got dout of shape (", dout.rows(),
             ", ", dout.cols(), "), expected (", rq, ", ", d_, ")");
  GrowOnlyMatrix<T>& dscores_ = backward_scratch<T>(kDScores);
  GrowOnlyMatrix<T>& dctx_pad_ = backward_scratch<T>(kDCtxPad);
  GrowOnlyMatrix<T>& dqkv_pad_ = backward_scratch<T>(kDQkvPad);
  GrowOnlyMatrix<T>& dkv_pad_ = backward_scratch<T>(kDKvPad);
  GrowOnlyMatrix<T>& dqkv_ = backward_scratch<T>(kDQkv);
  GrowOnlyMatrix<T>& dkv_ = backward_scratch<T>(kDKv);
  // output projection: dctx = dout W_o                                  (rows_q, d)
  const Matrix<T>& dctx = proj_.out.backward(dout);
  const T* dctx_ptr = dctx.data();
  if (lq.packed) {  // padding query rows get a zero gradient
    scatter_rows(cmap(dctx), lq, dctx_pad_);
    dctx_ptr = dctx_pad_.data();
  }
  if (!tiled_) dscores_.resize(weights_.rows(), weights_.cols());
  ConstMatrixMap<T> x(x_, rq, d_);
  // the tiled backward reads the forward's output (padded rows rebuilt like the projections)
  const TiledMask tmask{causal_, key_padding_, mask_};
  const T* ctx_ptr = ctx_.data();
  if (tiled_ && lq.packed) {
    GrowOnlyMatrix<T>& ctx_pad = backward_scratch<T>(kCtxPad);
    scatter_rows(cmap(ctx_), lq, ctx_pad);
    ctx_ptr = ctx_pad.data();
  }
  // the padded projections of the forward, rebuilt from the packed rows kept
  GrowOnlyMatrix<T>& qkv_pad_ = backward_scratch<T>(kQkvPad);
  GrowOnlyMatrix<T>& kv_pad_ = backward_scratch<T>(kKvPad);
  if (lq.packed) scatter_rows(cmap(qkv_), lq, qkv_pad_);
  if (!self_ && lk.packed) scatter_rows(cmap(kv_), lk, kv_pad_);
  if (self_) {
    const T* base = lq.packed ? qkv_pad_.data() : qkv_.data();
    GrowOnlyMatrix<T>& dpad = lq.packed ? dqkv_pad_ : dqkv_;
    dpad.resize(B * Tq, 3 * d_);
    T* dbase = dpad.data();
    if (tiled_)
      tiled_attention_backward<T>(base, 3 * d_, base + d_, 3 * d_, base + 2 * d_, 3 * d_, B, h_, Tq, Tk, dk_, tmask,
                                  ctx_ptr, d_, lse_.data(), dctx_ptr, d_, dbase, 3 * d_, dbase + d_, 3 * d_,
                                  dbase + 2 * d_, 3 * d_);
    else
      attention_backward<T>(base, 3 * d_, base + d_, 3 * d_, base + 2 * d_, 3 * d_, B, h_, Tq, Tk, dk_, weights_.data(),
                            dctx_ptr, d_, dbase, 3 * d_, dbase + d_, 3 * d_, dbase + 2 * d_, 3 * d_, dscores_.data());
    if (lq.packed) gather_rows(dqkv_pad_, lq, dqkv_);
    // forward was [Q|K|V] = x W_in^T + b_in, so dW_in += d[Q|K|V]^T x, db_in += column sums,
    // and dx = d[Q|K|V] W_in (the three paths summed by the one product)
    proj_.backward(precision_, cmap(dqkv_), x, 0, 3, &dx_);
    return dx_;
  }
  ConstMatrixMap<T> mem(mem_, rk, d_);
  const T* q = lq.packed ? qkv_pad_.data() : qkv_.data();
  const T* kv = lk.packed ? kv_pad_.data() : kv_.data();
  GrowOnlyMatrix<T>& dq = lq.packed ? dqkv_pad_ : dqkv_;
  GrowOnlyMatrix<T>& dkv = lk.packed ? dkv_pad_ : dkv_;
  dq.resize(B * Tq, d_);
  dkv.resize(B * Tk, 2 * d_);
  if (tiled_)
    tiled_attention_backward<T>(q, d_, kv, 2 * d_, kv + d_, 2 * d_, B, h_, Tq, Tk, dk_, tmask, ctx_ptr, d_, lse_.data(),
                                dctx_ptr, d_, dq.data(), d_, dkv.data(), 2 * d_, dkv.data() + d_, 2 * d_);
  else
    attention_backward<T>(q, d_, kv, 2 * d_, kv + d_, 2 * d_, B, h_, Tq, Tk, dk_, weights_.data(), dctx_ptr, d_,
                          dq.data(), d_, dkv.data(), 2 * d_, dkv.data() + d_, 2 * d_, dscores_.data());
  if (lq.packed) gather_rows(dqkv_pad_, lq, dqkv_);
  if (lk.packed) gather_rows(dkv_pad_, lk, dkv_);
  // Q = x W_q^T + b_q and [K | V] = memory [W_k; W_v]^T + b_kv: dx from the queries, dmemory
  // from the keys and values
  proj_.backward(precision_, cmap(dqkv_), x, 0, 1, &dx_);
  proj_.backward(precision_, cmap(dkv_), mem, 1, 2, &dmem_);
  return dx_;
}

template <typename T>
void MultiHeadAttention<T>::set_precision(Precision p) {
  check_precision<T>(p, "MultiHeadAttention");
  proj_.out.set_precision(p);
  precision_ = p;
}

template <typename T>
ParameterList<T> MultiHeadAttention<T>::parameters() {
  return proj_.parameters();
}

template <typename T>
void MultiHeadAttention<T>::zero_grad() {
  proj_.zero_grad();
}

// ---------------------------------------------------------------------------------------------
// Inference

namespace {

// One query against n keys and values (rows j at K + j*ld, V + j*ld, dk wide), every key visible:
// o = softmax(scale * q.K_j) V. s holds the n scores (scratch); n = 0 gives o = 0.
template <typename T>
inline void attend(const T* q, const T* K, const T* V, Index n, Index ld, Index dk, T scale, T* s, T* o) {
  using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  const Eigen::OuterStride<> stride(ld);
  const ConstStridedMap<T> Km(K, n, dk, stride), Vm(V, n, dk, stride);  // (n, dk) each
  Eigen::Map<Vec> sv(s, n);
  sv.noalias() = Km * Eigen::Map<const Vec>(q, dk);  // s_j = K_j . q                    (n)
  sv *= scale;
  masked_softmax_row(s, n, static_cast<const std::uint8_t*>(nullptr));
  Eigen::Map<Vec>(o, dk).noalias() = Vm.transpose() * sv;  // o = sum_j s_j V_j        (dk)
}

}  // namespace

template <typename T>
void KVCache<T>::reset(Index rows, Index positions, Index d) {
  k.resize(rows, positions * d);
  v.resize(rows, positions * d);
  length = 0;
  capacity = positions;
}

template <typename T>
void KVCache<T>::select_rows(const std::vector<Index>& rows, Matrix<T>& scratch) {
  const Index n = static_cast<Index>(rows.size());
  const Index used = capacity > 0 ? length * (k.cols() / capacity) : 0;  // cached columns in use
  for (Matrix<T>* m : {&k, &v}) {
    scratch.resize(n, m->cols());
#pragma omp parallel for schedule(static) if (n * used >= (1 << 16))  // megabytes per step in beam search
    for (Index i = 0; i < n; ++i) {
      const T* from = m->data() + rows[static_cast<size_t>(i)] * m->cols();
      std::copy(from, from + used, scratch.data() + i * m->cols());
    }
    m->swap(scratch);
  }
}

template <typename T>
void MultiHeadAttention<T>::infer(const Matrix<T>& x, const SentenceRows& rows, InferenceBackend<T>& be,
                                  InferenceScratch<T>& s, Matrix<T>& y) const {
  const Index n = x.rows(), B = rows.B, S = rows.longest();
  // [Q | K | V] = x [W_q; W_k; W_v]^T + b                               (rows, 3d)
  be.linear(x, proj_.w_in.data(), proj_.b_in.data(), 3 * d_, s.qkv);
  // sentence b's queries against its own keys, which are exactly its rows
  s.ctx.resize(n, d_);
  T* scores = s.score_rows(B * h_, S);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(dk_)));
  const T* qkv = s.qkv.data();
  T* ctx = s.ctx.data();
#pragma omp parallel for schedule(dynamic, 4) if (B * h_ > 8)
  for (Index bh = 0; bh < B * h_; ++bh) {
    const Index b = bh / h_, h = bh % h_;
    const Index r0 = rows.offsets[static_cast<size_t>(b)], len = rows.offsets[static_cast<size_t>(b + 1)] - r0;
    const T* base = qkv + r0 * 3 * d_ + h * dk_;
    for (Index i = 0; i < len; ++i)
      attend(base + i * 3 * d_, base + d_, base + 2 * d_, len, 3 * d_, dk_, scale, scores + bh * S,
             ctx + (r0 + i) * d_ + h * dk_);
  }
  be.linear(s.ctx, proj_.out.weight_.data(), proj_.out.bias_.data(), d_, y);  // (rows, d)
}

template <typename T>
void MultiHeadAttention<T>::infer_step(const Matrix<T>& x, KVCache<T>& cache, InferenceBackend<T>& be,
                                       InferenceScratch<T>& s, Matrix<T>& y) const {
  TCPP_CHECK(cache.length < cache.capacity && cache.k.rows() == x.rows() && cache.k.cols() == cache.capacity * d_,
             "MultiHeadAttention: the key/value cache has no room for this step (", cache.length, " of ",
             cache.capacity, " positions held, for ", cache.k.rows(), " rows; the step has ", x.rows(), ")");
  const Index R = x.rows(), t = cache.length, n = t + 1, stride = cache.capacity * d_;
  // [Q | K | V] of the new position                                      (R, 3d)
  be.linear(x, proj_.w_in.data(), proj_.b_in.data(), 3 * d_, s.qkv);
  s.ctx.resize(R, d_);
  T* scores = s.score_rows(R * h_, cache.capacity);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(dk_)));
  const T* qkv = s.qkv.data();
  T* ctx = s.ctx.data();
  T* K = cache.k.data();
  T* V = cache.v.data();
  // a thread per (row, head): in chunks of 16 for a batch, one by one for the few heads of a
  // single sequence once its cache is long enough to be worth waking a second thread
  const bool parallel = R * h_ > 8 || (R * h_ > 1 && R * h_ * n * dk_ >= kParallelMin);
  const int chunk = R * h_ > 8 ? 16 : 1;
#pragma omp parallel for schedule(dynamic, chunk) if (parallel)
  for (Index rh = 0; rh < R * h_; ++rh) {
    const Index r = rh / h_, h = rh % h_;
    // append this position's key and value of head h to row r's cache
    const T* kv = qkv + r * 3 * d_ + h * dk_;
    std::copy(kv + d_, kv + d_ + dk_, K + r * stride + t * d_ + h * dk_);
    std::copy(kv + 2 * d_, kv + 2 * d_ + dk_, V + r * stride + t * d_ + h * dk_);
    attend(kv, K + r * stride + h * dk_, V + r * stride + h * dk_, n, d_, dk_, scale, scores + rh * cache.capacity,
           ctx + r * d_ + h * dk_);
  }
  ++cache.length;
  be.linear(s.ctx, proj_.out.weight_.data(), proj_.out.bias_.data(), d_, y);  // (R, d)
}

template <typename T>
void MultiHeadAttention<T>::infer_memory(const Matrix<T>& memory, InferenceBackend<T>& be, Matrix<T>& kv) const {
  // [K | V] = memory [W_k; W_v]^T + [b_k | b_v]                           (rows, 2d)
  be.linear(memory, proj_.weight(1, 2).data(), proj_.bias(1), 2 * d_, kv);
}

template <typename T>
void MultiHeadAttention<T>::infer_cross(const Matrix<T>& x, const Matrix<T>& kv, const SentenceRows& memory_rows,
                                        const std::vector<Index>& sentence_of, InferenceBackend<T>& be,
                                        InferenceScratch<T>& s, Matrix<T>& y, Matrix<T>* weights) const {
  const Index R = x.rows(), S = memory_rows.longest();
  TCPP_CHECK(static_cast<Index>(sentence_of.size()) == R && kv.rows() == memory_rows.rows() && kv.cols() == 2 * d_,
             "MultiHeadAttention: cross-attention of ", R, " rows over a memory of ", kv.rows(), " rows (",
             memory_rows.rows(), " expected) for ", sentence_of.size(), " rows");
  // Q = x W_q^T + b_q                                                     (R, d)
  be.linear(x, proj_.w_in.data(), proj_.b_in.data(), d_, s.q);
  s.ctx.resize(R, d_);
  if (weights != nullptr) weights->resize(R * h_, S);
  T* scores = weights != nullptr ? weights->data() : s.score_rows(R * h_, S);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(dk_)));
  const T* q = s.q.data();
  T* ctx = s.ctx.data();
#pragma omp parallel for schedule(dynamic, 16) if (R * h_ > 8)
  for (Index rh = 0; rh < R * h_; ++rh) {
    const Index r = rh / h_, h = rh % h_;
    const Index sent = sentence_of[static_cast<size_t>(r)];
    const Index m0 = memory_rows.offsets[static_cast<size_t>(sent)];
    const Index len = memory_rows.offsets[static_cast<size_t>(sent + 1)] - m0;
    const T* base = kv.data() + m0 * 2 * d_ + h * dk_;
    attend(q + r * d_ + h * dk_, base, base + d_, len, 2 * d_, dk_, scale, scores + rh * S, ctx + r * d_ + h * dk_);
  }
  be.linear(s.ctx, proj_.out.weight_.data(), proj_.out.bias_.data(), d_, y);  // (R, d)
}

template void attention_forward<float>(const float*, Index, const float*, Index, const float*, Index, Index, Index,
                                       Index, Index, Index, const AttentionMask&, float*, float*, Index);
template void attention_forward<double>(const double*, Index, const double*, Index, const double*, Index, Index, Index,
                                        Index, Index, Index, const AttentionMask&, double*, double*, Index);
template void attention_backward<float>(const float*, Index, const float*, Index, const float*, Index, Index, Index,
                                        Index, Index, Index, const float*, const float*, Index, float*, Index, float*,
                                        Index, float*, Index, float*);
template void attention_backward<double>(const double*, Index, const double*, Index, const double*, Index, Index, Index,
                                         Index, Index, Index, const double*, const double*, Index, double*, Index,
                                         double*, Index, double*, Index, double*);
template struct KVCache<float>;
template struct KVCache<double>;
template class MultiHeadAttention<float>;
template class MultiHeadAttention<double>;

}  // namespace transformer

#include "transformer/attention/tiled_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "transformer/core/enum_names.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

#include "transformer/core/checks.hpp"
#include "transformer/core/tuning.hpp"
#include "transformer/kernels/block_product.hpp"

namespace transformer {

namespace {

constexpr Index kBr = tuning::kTiledQueryBlock;  // query rows per block
constexpr Index kBc = tuning::kTiledKeyBlock;    // keys per block

template <typename T>
using ColArray = Eigen::Array<T, Eigen::Dynamic, 1>;  // one value per query row of a block

// One head's operands: row i of Q at q + i*stride (dk wide), and so on.
template <typename T>
ConstStridedMap<T> head(const T* base, Index b, Index h, Index rows, Index stride, Index dk) {
  return ConstStridedMap<T>(base + b * rows * stride + h * dk, rows, dk, Eigen::OuterStride<>(stride));
}
template <typename T>
StridedMap<T> head_mut(T* base, Index b, Index h, Index rows, Index stride, Index dk) {
  return StridedMap<T>(base + b * rows * stride + h * dk, rows, dk, Eigen::OuterStride<>(stride));
}

// Whether some entry of the block (queries i0.., keys [j0, j0 + nj)) of batch b may be blocked, so
// that the block needs the element-wise mask; most blocks need none.
bool block_masked(const TiledMask& m, Index b, Index Tk, Index i0, Index j0, Index nj) {
  if (m.mask.data != nullptr) return true;
  if (m.causal && j0 + nj - 1 > i0) return true;  // crosses the diagonal
  if (m.key_padding != nullptr) {
    const std::uint8_t* kp = m.key_padding + b * Tk + j0;
    for (Index j = 0; j < nj; ++j)
      if (kp[j] != 0) return true;
  }
  return false;
}

// Set the blocked entries of the (ni, nj) block S (row-major, contiguous) to `fill`.
template <typename T>
void mask_block(const TiledMask& m, Index b, Index Tk, Index i0, Index ni, Index j0, Index nj, T* S, T fill) {
  const std::uint8_t* kp = m.key_padding != nullptr ? m.key_padding + b * Tk + j0 : nullptr;
  for (Index i = 0; i < ni; ++i) {
    T* s = S + i * nj;
    const std::uint8_t* row = m.mask.data != nullptr ? m.mask.row(b, i0 + i, Tk) + j0 : nullptr;
    // causal: keys j0 + j with j0 + j > i0 + i are blocked
    const Index open = m.causal ? std::clamp<Index>(i0 + i - j0 + 1, 0, nj) : nj;
    for (Index j = open; j < nj; ++j) s[j] = fill;
    if (kp != nullptr)
      for (Index j = 0; j < open; ++j)
        if (kp[j] != 0) s[j] = fill;
    if (row != nullptr)
      for (Index j = 0; j < open; ++j)
        if (row[j] != 0) s[j] = fill;
  }
}

// The key blocks a query block [i0, i0 + ni) may see: keys [0, end). With causal, keys after the
// block's last query are blocked for all its rows, so those blocks are skipped.
Index key_end(const TiledMask& m, Index Tk, Index i0, Index ni) { return m.causal ? std::min(Tk, i0 + ni) : Tk; }
// The first query block that may see key block [j0, ..): with causal, queries before j0 see none
// of it.
Index query_begin(const TiledMask& m, Index j0) { return m.causal ? (j0 / kBr) * kBr : 0; }

int threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// The leading dimension of a copy whose rows have `width` values: a multiple of 16 floats (whole
// cache lines) that is an odd number of 64-byte lines, so that the rows block_product walks down
// (16 columns of each) fall into different cache sets. With a power-of-two stride, such as 64
// values or 4,096, every row maps to the same few sets of L1 and they evict each other.
Index padded_ld(Index width) {
  Index ld = (width + 15) / 16 * 16;
  if ((ld / 16) % 2 == 0) ld += 16;
  return ld;
}

// One operand of every head copied into the layout block_product reads fastest. Either the
// (T, dk) rows, head bh at at(bh) with its rows ld apart; or, with `transposed`, the right side of
// S = Q K^T and dP = dO V^T: the (dk, kBc) transpose of each key block, block j0 / kBc of head bh
// at key_block(bh, j0) with its rows ld apart. (A transpose of the whole head would put the rows
// of a block T values apart, too far for the hardware to keep the block in L1.)
template <typename T>
struct HeadCopies {
  std::vector<T> values;
  Index ld = 0, per_head = 0, per_block = 0;
  const T* at(Index bh) const { return values.data() + bh * per_head; }
  const T* key_block(Index bh, Index j0) const { return at(bh) + (j0 / kBc) * per_block; }
};

template <typename T>
HeadCopies<T> heads_copied(const T* x, Index stride, Index B, Index H, Index T_len, Index dk, bool transposed) {
  HeadCopies<T> c;
  c.ld = padded_ld(transposed ? kBc : dk);
  c.per_block = dk * c.ld;
  c.per_head = transposed ? (T_len + kBc - 1) / kBc * c.per_block : T_len * c.ld;
  c.values.resize(static_cast<size_t>(B * H * c.per_head));
#pragma omp parallel for schedule(static) if (B * H * T_len * dk >= tuning::kParallelMin)
  for (Index bh = 0; bh < B * H; ++bh) {
    const T* src = x + (bh / H) * T_len * stride + (bh % H) * dk;
    T* dst = c.values.data() + bh * c.per_head;
    if (transposed)
      for (Index j0 = 0; j0 < T_len; j0 += kBc)
        transpose_block<T>(std::min(kBc, T_len - j0), dk, src + j0 * stride, stride, dst + (j0 / kBc) * c.per_block,
                           c.ld);
    else
      for (Index i = 0; i < T_len; ++i) std::copy(src + i * stride, src + i * stride + dk, dst + i * c.ld);
  }
  return c;
}

// Per-thread blocks of the backward.
template <typename T>
struct BackwardBlocks {
  Matrix<T> Qs;        // (kBr, dk) one query block times 1/sqrt(dk)
  Matrix<T> P, dP;     // (kBr, kBc) weights and their gradient, then dS
  Matrix<T> dKj, dVj;  // (kBc, dk) one key block's gradients, summed over the query blocks
  Matrix<T> dQ;        // (Tq, dk) one head's query gradient (fused schedule), or (kBr, dk)
};

// P = exp(S - lse_i) for the block (queries i0.., keys j0..) and dS = P o (dP - D_i), where
//   S  = (Q_i / sqrt(dk)) K_j^T    the scores, recomputed as the forward computed them (ni, nj)
//   P  = exp(S - L_i)              the forward's weights: L_i is row i's log-sum-exp
//   dP = dO_i V_j^T                since O = P V                                   (ni, nj)
//   dS = P o (dP - D_i)            the softmax backward, D_i = sum_j P_ij dP_ij = rowsum(dO_i o O_i)
// Blocked entries get P = 0 and dS = 0 (set, not computed, so that no 0 * inf can appear).
// On return bl.P holds P and bl.dP holds dS, both (ni, nj) contiguous.
template <typename T>
void weights_and_score_gradient(const T* Q, Index ldq, const T* KT, const T* VT, Index ldt, const T* dO, Index ldo,
                                Index dk, const T* L, const T* D, const TiledMask& m, Index b, Index Tk, Index i0,
                                Index ni, Index j0, Index nj, T scale, BackwardBlocks<T>& bl) {
  MatrixMap<T> P(bl.P.data(), ni, nj);
  MatrixMap<T> dS(bl.dP.data(), ni, nj);
  auto Qs = bl.Qs.topRows(ni);
  Qs = ConstStridedMap<T>(Q + i0 * ldq, ni, dk, Eigen::OuterStride<>(ldq)) * scale;
  block_product<T>(ni, nj, dk, Qs.data(), dk, false, KT, ldt, false, P.data(), nj);  // S = Qs K_j^T
  for (Index i = 0; i < ni; ++i) {
    // a fully blocked row has L = +inf; its entries are all blocked and zeroed below
    const T Li = std::isfinite(L[i0 + i]) ? L[i0 + i] : T(0);
    P.row(i).array() = (P.row(i).array() - Li).exp();
  }
  const bool masked = block_masked(m, b, Tk, i0, j0, nj);
  if (masked) mask_block<T>(m, b, Tk, i0, ni, j0, nj, P.data(), T(0));
  block_product<T>(ni, nj, dk, dO + i0 * ldo, ldo, false, VT, ldt, false, dS.data(), nj);  // dP = dO_i V_j^T
  for (Index i = 0; i < ni; ++i) dS.row(i).array() = P.row(i).array() * (dS.row(i).array() - D[i0 + i]);
  if (masked) mask_block<T>(m, b, Tk, i0, ni, j0, nj, dS.data(), T(0));
}

}  // namespace

namespace {
constexpr EnumName<AttentionImpl> kImplNames[] = {
    {AttentionImpl::Plain, "plain"}, {AttentionImpl::Tiled, "tiled"}, {AttentionImpl::Auto, "auto"}};
}  // namespace

AttentionImpl parse_attention_impl(const std::string& name) {
  return parse_name(kImplNames, name,
                    [&] { return "attention_impl must be 'plain', 'tiled' or 'auto', got '" + name + "'"; });
}

const char* attention_impl_name(AttentionImpl impl) { return name_of(kImplNames, impl, "auto"); }

template <typename T>
void tiled_attention_forward(const T* q, Index q_stride, const T* k, Index k_stride, const T* v, Index v_stride,
                             Index B, Index H, Index Tq, Index Tk, Index dk, const TiledMask& mask, T* out,
                             Index out_stride, T* lse) {
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(dk)));
  const T inf = std::numeric_limits<T>::infinity();
  const Index nqb = (Tq + kBr - 1) / kBr;
  const HeadCopies<T> kt = heads_copied(k, k_stride, B, H, Tk, dk, true);   // K^T of each key block (dk, kBc)
  const HeadCopies<T> vc = heads_copied(v, v_stride, B, H, Tk, dk, false);  // V of each head (Tk, dk)
  // every (head, query block) is independent; with causal the later blocks see more keys, so
  // the blocks are handed out one at a time
#pragma omp parallel
  {
    Matrix<T> Qs(kBr, dk);   // (ni, dk) the query block times 1/sqrt(dk)
    Matrix<T> S(kBr, kBc);   // (ni, nj) scores, then weights exp(S - m), of one block
    Matrix<T> acc(kBr, dk);  // (ni, dk) running sum of weights x values
    ColArray<T> mrow(kBr);   // running row maximum of the scores
    ColArray<T> lrow(kBr);   // running row sum of exp(S - m)
#pragma omp for schedule(dynamic, 1)
    for (Index task = 0; task < B * H * nqb; ++task) {
      const Index bh = task / nqb, b = bh / H, h = bh % H;
      const Index i0 = (task % nqb) * kBr, ni = std::min(kBr, Tq - i0);
      const auto Q = head(q, b, h, Tq, q_stride, dk);    // (Tq, dk)
      const T* V = vc.at(bh);                            // (Tk, dk)
      auto O = head_mut(out, b, h, Tq, out_stride, dk);  // (Tq, dk)
      auto A = acc.topRows(ni);
      A.setZero();
      // 1/sqrt(dk) folded into the query block once instead of a pass over every score block (the
      // same scores when it is a power of two, as at dk = 64)
      auto Qi = Qs.topRows(ni);
      Qi = Q.middleRows(i0, ni) * scale;
      mrow.head(ni).setConstant(-inf);
      lrow.head(ni).setZero();
      const Index jend = key_end(mask, Tk, i0, ni);
      for (Index j0 = 0; j0 < jend; j0 += kBc) {
        const Index nj = std::min(kBc, jend - j0);
        MatrixMap<T> Sb(S.data(), ni, nj);  // (ni, nj)
        // S = (Q_i / sqrt(dk)) K_j^T, blocked scores -inf
        block_product<T>(ni, nj, dk, Qi.data(), dk, false, kt.key_block(bh, j0), kt.ld, false, Sb.data(), nj);
        const bool masked = block_masked(mask, b, Tk, i0, j0, nj);
        if (masked) mask_block<T>(mask, b, Tk, i0, ni, j0, nj, Sb.data(), -inf);
        for (Index i = 0; i < ni; ++i) {
          // m_new = max(m, rowmax S); what was summed against m scales by alpha = exp(m - m_new)
          auto r = Sb.row(i).array();
          const T m_new = std::max(mrow(i), r.maxCoeff());
          const T alpha = mrow(i) == -inf ? T(0) : std::exp(mrow(i) - m_new);
          mrow(i) = m_new;
          // P~ = exp(S - m_new) (a row with nothing open yet stays zero: the mask below)
          r = (r - (m_new == -inf ? T(0) : m_new)).exp();
          if (masked) mask_block<T>(mask, b, Tk, i0 + i, 1, j0, nj, Sb.data() + i * nj, T(0));
          // l = alpha l + rowsum P~;  acc = alpha acc (+ P~ V_j below)
          lrow(i) = alpha * lrow(i) + r.sum();
          if (alpha != T(1)) A.row(i) *= alpha;
        }
        block_product<T>(ni, dk, nj, Sb.data(), nj, false, V + j0 * vc.ld, vc.ld, true, A.data(), dk);  // acc += P~ V_j
      }
      // O = acc / l and L = m + log l; a row with every key blocked has l = 0: O = 0, L = +inf
      T* L = lse + bh * Tq + i0;
      for (Index i = 0; i < ni; ++i) {
        if (lrow(i) > T(0)) {
          O.row(i0 + i) = A.row(i) / lrow(i);
          L[i] = mrow(i) + std::log(lrow(i));
        } else {
          O.row(i0 + i).setZero();
          L[i] = inf;
        }
      }
    }
  }
}

// The backward, with L_i the forward's log-sum-exp of row i (so P_ij = exp(S_ij - L_i) is
// recomputed block by block, never stored whole):
//   D_i  = sum_c dO_ic O_ic                  ( = sum_j P_ij dP_ij, since O_i = sum_j P_ij V_j )
//   dP   = dO V^T
//   dS   = P o (dP - D)                      (softmax backward, row by row)
//   dQ   = dS K / sqrt(dk)                   (S = Q K^T / sqrt(dk))
//   dK   = dS^T Q / sqrt(dk)
//   dV   = P^T dO                            (O = P V)
// Each key block's dK_j, dV_j sums over the query blocks i; each query block's dQ_i sums over
// the key blocks j. With at least as many heads as threads a thread takes a whole head: key
// blocks outer (dK_j, dV_j in registers-sized blocks), query blocks inner, dQ summed in a
// (Tq, dk) buffer. With fewer heads than threads (B*H = 1 at batch 1) the work splits into two
// passes, one task per (head, key block) for dK, dV and one per (head, query block) for dQ; this
// recomputes P and dP once more but keeps both threads busy. Both schedules add the same terms in
// the same order, so the result does not depend on the thread count.
template <typename T>
void tiled_attention_backward(const T* q, Index q_stride, const T* k, Index k_stride, const T* v, Index v_stride,
                              Index B, Index H, Index Tq, Index Tk, Index dk, const TiledMask& mask, const T* out,
                              Index out_stride, const T* lse, const T* dout, Index dout_stride, T* dq, Index dq_stride,
                              T* dk_out, Index dk_stride, T* dv, Index dv_stride) {
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(dk)));
  const Index BH = B * H, nqb = (Tq + kBr - 1) / kBr, nkb = (Tk + kBc - 1) / kBc;
  // D_i = rowsum(dO_i o O_i)                                              (B*H*Tq)
  std::vector<T> D(static_cast<size_t>(BH * Tq));
#pragma omp parallel for schedule(static) if (BH * Tq * dk >= tuning::kParallelMin)
  for (Index bh = 0; bh < BH; ++bh) {
    const Index b = bh / H, h = bh % H;
    const auto O = head(out, b, h, Tq, out_stride, dk);
    const auto dO = head(dout, b, h, Tq, dout_stride, dk);
    for (Index i = 0; i < Tq; ++i) D[static_cast<size_t>(bh * Tq + i)] = O.row(i).dot(dO.row(i));
  }
  const bool fused = BH >= threads();
  // the operands of every head in the layouts block_product reads fastest
  const HeadCopies<T> qc = heads_copied(q, q_stride, B, H, Tq, dk, false);         // Q (Tq, dk)
  const HeadCopies<T> kc = heads_copied(k, k_stride, B, H, Tk, dk, false);         // K (Tk, dk)
  const HeadCopies<T> kt = heads_copied(k, k_stride, B, H, Tk, dk, true);          // K^T per key block (dk, kBc)
  const HeadCopies<T> vt = heads_copied(v, v_stride, B, H, Tk, dk, true);          // V^T per key block (dk, kBc)
  const HeadCopies<T> doc = heads_copied(dout, dout_stride, B, H, Tq, dk, false);  // dO (Tq, dk)

  // dK_j, dV_j of key block j0 of head (b, h), from the query blocks that may see it; with
  // dQ != nullptr also dQ_i += dS K_j (unscaled) for each of those query blocks.
  auto key_block = [&](Index b, Index h, Index j0, BackwardBlocks<T>& bl, Matrix<T>* dQacc) {
    const Index bh = b * H + h, nj = std::min(kBc, Tk - j0);
    const T *Q = qc.at(bh), *K = kc.at(bh), *dO = doc.at(bh);
    const T *KT = kt.key_block(bh, j0), *VT = vt.key_block(bh, j0);  // (dk, nj) each
    auto dKj = bl.dKj.topRows(nj);
    auto dVj = bl.dVj.topRows(nj);
    dKj.setZero();
    dVj.setZero();
    for (Index i0 = query_begin(mask, j0); i0 < Tq; i0 += kBr) {
      const Index ni = std::min(kBr, Tq - i0);
      // with causal, the keys of the block after the query block's last row are blocked for all
      // its rows: only the first nk keys of the block take part
      const Index nk = std::min(nj, key_end(mask, Tk, i0, ni) - j0);
      weights_and_score_gradient<T>(Q, qc.ld, KT, VT, kt.ld, dO, doc.ld, dk, lse + bh * Tq, D.data() + bh * Tq, mask, b,
                                    Tk, i0, ni, j0, nk, scale, bl);
      const T* P = bl.P.data();    // (ni, nk)
      const T* dS = bl.dP.data();  // (ni, nk)
      // dV_j += P^T dO_i;  dK_j += dS^T Q_i;  dQ_i += dS K_j
      block_product<T>(nk, dk, ni, P, nk, true, dO + i0 * doc.ld, doc.ld, true, dVj.data(), dk);
      block_product<T>(nk, dk, ni, dS, nk, true, Q + i0 * qc.ld, qc.ld, true, dKj.data(), dk);
      if (dQacc != nullptr)
        block_product<T>(ni, dk, nk, dS, nk, false, K + j0 * kc.ld, kc.ld, true, dQacc->data() + i0 * dk, dk);
    }
    head_mut(dk_out, b, h, Tk, dk_stride, dk).middleRows(j0, nj) = dKj * scale;
    head_mut(dv, b, h, Tk, dv_stride, dk).middleRows(j0, nj) = dVj;
  };

  if (fused) {
#pragma omp parallel
    {
      BackwardBlocks<T> bl{Matrix<T>(kBr, dk), Matrix<T>(kBr, kBc), Matrix<T>(kBr, kBc),
                           Matrix<T>(kBc, dk), Matrix<T>(kBc, dk),  Matrix<T>(Tq, dk)};
#pragma omp for schedule(dynamic, 1)
      for (Index bh = 0; bh < BH; ++bh) {
        const Index b = bh / H, h = bh % H;
        bl.dQ.setZero();
        for (Index j0 = 0; j0 < Tk; j0 += kBc) key_block(b, h, j0, bl, &bl.dQ);
        head_mut(dq, b, h, Tq, dq_stride, dk) = bl.dQ * scale;
      }
    }
    return;
  }
#pragma omp parallel
  {
    BackwardBlocks<T> bl{Matrix<T>(kBr, dk), Matrix<T>(kBr, kBc), Matrix<T>(kBr, kBc),
                         Matrix<T>(kBc, dk), Matrix<T>(kBc, dk),  Matrix<T>(kBr, dk)};
    // pass 1: dK, dV, one task per (head, key block)
#pragma omp for schedule(dynamic, 1)
    for (Index task = 0; task < BH * nkb; ++task) {
      const Index bh = task / nkb;
      key_block(bh / H, bh % H, (task % nkb) * kBc, bl, nullptr);
    }
    // pass 2: dQ, one task per (head, query block); the terms in the order of the fused schedule
#pragma omp for schedule(dynamic, 1)
    for (Index task = 0; task < BH * nqb; ++task) {
      const Index bh = task / nqb, b = bh / H, h = bh % H;
      const Index i0 = (task % nqb) * kBr, ni = std::min(kBr, Tq - i0);
      const T *Q = qc.at(bh), *K = kc.at(bh), *dO = doc.at(bh);
      auto dQi = bl.dQ.topRows(ni);
      dQi.setZero();
      const Index jend = key_end(mask, Tk, i0, ni);
      for (Index j0 = 0; j0 < jend; j0 += kBc) {
        const Index nj = std::min(kBc, jend - j0);
        weights_and_score_gradient<T>(Q, qc.ld, kt.key_block(bh, j0), vt.key_block(bh, j0), kt.ld, dO, doc.ld, dk,
                                      lse + bh * Tq, D.data() + bh * Tq, mask, b, Tk, i0, ni, j0, nj, scale, bl);
        block_product<T>(ni, dk, nj, bl.dP.data(), nj, false, K + j0 * kc.ld, kc.ld, true, dQi.data(),
                         dk);  // dQ_i += dS K_j
      }
      head_mut(dq, b, h, Tq, dq_stride, dk).middleRows(i0, ni) = dQi * scale;
    }
  }
}

template void tiled_attention_forward<float>(const float*, Index, const float*, Index, const float*, Index, Index,
                                             Index, Index, Index, Index, const TiledMask&, float*, Index, float*);
template void tiled_attention_forward<double>(const double*, Index, const double*, Index, const double*, Index, Index,
                                              Index, Index, Index, Index, const TiledMask&, double*, Index, double*);
template void tiled_attention_backward<float>(const float*, Index, const float*, Index, const float*, Index, Index,
                                              Index, Index, Index, Index, const TiledMask&, const float*, Index,
                                              const float*, const float*, Index, float*, Index, float*, Index, float*,
                                              Index);
template void tiled_attention_backward<double>(const double*, Index, const double*, Index, const double*, Index, Index,
                                               Index, Index, Index, Index, const TiledMask&, const double*, Index,
                                               const double*, const double*, Index, double*, Index, double*, Index,
                                               double*, Index);

}  // namespace transformer

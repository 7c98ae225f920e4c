#include "transformer/attention/lsh_attention.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "transformer/core/checks.hpp"
#include "transformer/core/random.hpp"
#include "transformer/core/tuning.hpp"
#include "transformer/kernels/block_product.hpp"
#include "transformer/kernels/matmul.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace transformer {

double lsh_kernel_elements(double B, double H, double T, double d_k, double n_hashes, double n_buckets, double chunk,
                           double threads) {
  // kept: keys, 1/||q||, lse, three int tables (counted as elements), each round's probabilities
  // (T x 2 chunk) and log-partitions; backward: the keys' gradient
  const double window = 2 * std::min(T, chunk), rows = B * H * T;
  const double kept = rows * (d_k + 2) + 3 * rows * n_hashes + rows * n_hashes * (window + 1);
  const double backward = rows * d_k;
  const double rotations = n_hashes * H * d_k * n_buckets / 2;
  const double hash_rows = std::min(T, static_cast<double>(tuning::kLshHashRows));
  const double per_thread =
      T * (7 * d_k + n_hashes + 2) + hash_rows * n_buckets / 2 + 3 * chunk * 2 * chunk + n_buckets;
  return kept + backward + rotations + threads * per_thread;
}

double lsh_attention_elements(double rows, double B, double H, double T, double d, double n_hashes, double n_buckets,
                              double chunk, double threads) {
  // the kernel's, and [Q|V], the heads' outputs, the output; backward: [dQ|dV], dx, dctx
  return lsh_kernel_elements(B, H, T, d / H, n_hashes, n_buckets, chunk, threads) + rows * 4 * d + rows * 4 * d;
}

namespace {

template <typename T>
T neg_inf() {
  return -std::numeric_limits<T>::infinity();
}

int max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

int thread_id() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

// resize only when the shape grows (a Matrix keeps its allocation when shrunk by conservative use)
template <typename T>
void ensure(Matrix<T>& m, Index rows, Index cols) {
  if (m.rows() < rows || m.cols() < cols) m.resize(std::max(rows, m.rows()), std::max(cols, m.cols()));
}
template <typename V>
void ensure(std::vector<V>& v, Index n) {
  if (static_cast<Index>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

// The rows of a round in sorted order, so that a chunk and its window are contiguous blocks:
//   to_m.row(i) = from_m.row(perm[i]) for each of the n_m (from, to) pairs    (n, d_k) each
// One pass over perm for all pairs; the source rows are scattered over memory, so the rows a few
// steps ahead are prefetched.
template <typename T, int n_m>
void gather_sorted(const std::array<const T*, n_m>& from, const std::array<Index, n_m>& stride,
                   const std::int32_t* perm, Index n, Index width, const std::array<T*, n_m>& to) {
  constexpr Index ahead = 8, line = 64 / sizeof(T);
  for (Index i = 0; i < n; ++i) {
    if (i + ahead < n)
      for (int m = 0; m < n_m; ++m)
        for (Index c = 0; c < width; c += line) __builtin_prefetch(from[m] + perm[i + ahead] * stride[m] + c);
    for (int m = 0; m < n_m; ++m) std::copy_n(from[m] + perm[i] * stride[m], width, to[m] + i * width);
  }
}

// The inverse, adding: to_m.row(perm[i]) += from_m.row(i)                   (n, d_k) each
template <typename T, int n_m>
void scatter_add_sorted(const std::array<const T*, n_m>& from, const std::int32_t* perm, Index n, Index width,
                        const std::array<T*, n_m>& to, const std::array<Index, n_m>& stride) {
  constexpr Index ahead = 8, line = 64 / sizeof(T);
  for (Index i = 0; i < n; ++i) {
    if (i + ahead < n)
      for (int m = 0; m < n_m; ++m)
        for (Index c = 0; c < width; c += line) __builtin_prefetch(to[m] + perm[i + ahead] * stride[m] + c, 1);
    for (int m = 0; m < n_m; ++m) {
      const T* src = from[m] + i * width;
      T* dst = to[m] + perm[i] * stride[m];
      for (Index c = 0; c < width; ++c) dst[c] += src[c];
    }
  }
}

}  // namespace

template <typename T>
LSHAttention<T>::LSHAttention(Index chunk, Index n_hashes, Index n_buckets, std::uint64_t seed, const char* who)
    : chunk_(chunk), nh_(n_hashes), nb_setting_(n_buckets), hash_seed_(splitmix64(seed + 5)) {
  TCPP_CHECK(chunk >= 1, who, ": chunk must be an integer >= 1, got ", chunk);
  TCPP_CHECK(n_hashes >= 1 && n_hashes <= kMaxHashes, who, ": n_hashes must be an integer in [1, ", kMaxHashes,
             "], got ", n_hashes);
  TCPP_CHECK(n_buckets == 0 || (n_buckets >= 2 && n_buckets % 2 == 0 && n_buckets <= (Index(1) << 30)), who,
             ": n_buckets must be an even integer in [2, 2**30] (h(x) = argmax([xR; -xR]) uses "
             "n_buckets/2 rotations), or None to choose 2 * max(1, length // chunk), got ",
             n_buckets);
}

template <typename T>
LSHSelfAttention<T>::LSHSelfAttention(Index d_model, Index n_heads, Index chunk, Index n_hashes, Index n_buckets,
                                      std::uint64_t seed)
    // the whole layer's size is checked before its first weight is allocated; W_q, W_v and W_o
    // come from the streams MultiHeadAttention uses for them, so the two layers built with one
    // seed start from the same projections
    : proj_(checked_size<T>("LSHSelfAttention", concat("d_model ", d_model), 3 * (double(d_model) * d_model + d_model),
                            0, d_model > 0 ? d_model : 1),
            {{"query", 1}, {"value", 3}}, seed),
      d_(d_model),
      h_(n_heads),
      dk_(n_heads > 0 ? d_model / n_heads : 0),
      attn_(chunk, n_hashes, n_buckets, seed, "LSHSelfAttention") {
  TCPP_CHECK(d_model > 0 && n_heads > 0, "LSHSelfAttention: d_model and n_heads must be positive, got ", d_model,
             " and ", n_heads);
  TCPP_CHECK(d_model % n_heads == 0, "LSHSelfAttention: d_model ", d_model, " is not divisible by n_heads ", n_heads);
}

template <typename T>
Index LSHAttention<T>::buckets_for(Index T_len) const {
  return nb_setting_ > 0 ? nb_setting_ : 2 * std::max<Index>(1, T_len / chunk_);
}

template <typename T>
typename LSHAttention<T>::Scratch& LSHAttention<T>::scratch() {
  return scratch_[static_cast<size_t>(thread_id())];
}

// R (H*n_hashes*d_k, n_buckets/2) with N(0, 1) entries: element e is a Box-Muller draw from the
// counter-based uniforms (hash seed, stream 1, calls, 2e) and (..., 2e + 1), the same numbers
// whatever the thread count.
template <typename T>
void LSHAttention<T>::draw_rotations() {
  const Index half = nb_ / 2;
  rot_.resize(H_ * nh_ * dk_, half);
  T* r = rot_.data();
  const Index n = rot_.size();
  const std::uint64_t counter = calls_;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (Index e = 0; e < n; ++e) {
    const auto i = static_cast<std::uint64_t>(e);
    const double u1 = 1.0 - counter_uniform(hash_seed_, 1, counter, 2 * i);  // (0, 1]
    const double u2 = counter_uniform(hash_seed_, 1, counter, 2 * i + 1);
    r[e] = static_cast<T>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
}

// Keys, buckets and the sort of one (sequence, head) for every round.
template <typename T>
void LSHAttention<T>::hash_item(Index b, Index h, Scratch& s) {
  const Index Tn = T_, half = nb_ / 2, bh = b * H_ + h;
  ConstStridedMap<T> Q(head(q_, qs_, b, h), Tn, dk_, Eigen::OuterStride<>(qs_.row));  // (T, d_k)
  MatrixMap<T> K(keys_.data() + bh * Tn * dk_, Tn, dk_);                              // (T, d_k)
  T* inv_norm = inv_norm_.data() + bh * Tn;
  // k_t = q_t / ||q_t||; a zero q gives k = 0 (and no gradient through the norm)
  for (Index t = 0; t < Tn; ++t) {
    const T n = Q.row(t).norm();
    const T inv = n > T(0) ? T(1) / n : T(0);
    inv_norm[t] = inv;
    K.row(t) = Q.row(t) * inv;
  }
  // the rotated keys in blocks of rows: O(rows x n_buckets) scratch, not O(T x n_buckets)
  const Index block = std::min(Tn, tuning::kLshHashRows);
  ensure(s.proj, block, half);
  ensure(s.count, nb_ + 1);
  for (Index r = 0; r < nh_; ++r) {
    ConstMatrixMap<T> R(rot_.data() + (h * nh_ + r) * dk_ * half, dk_, half);  // (d_k, n_buckets/2)
    std::int32_t* bucket = bucket_.data() + (bh * nh_ + r) * Tn;
    for (Index t0 = 0; t0 < Tn; t0 += block) {
      const Index n = std::min(block, Tn - t0);
      // proj = K R_(h,r)                                               (n, n_buckets/2)
      MatrixMap<T> P(s.proj.data(), n, half);
      block_product<T>(n, half, dk_, K.data() + t0 * dk_, dk_, false, R.data(), half, false, P.data(), half);
      // h(k) = argmax([kR; -kR]): the first maximum of kR against the first minimum of kR, ties
      // to the first half (the first occurrence in the concatenation)
      for (Index t = 0; t < n; ++t) {
        const T* p = P.data() + t * half;
        Index imax = 0, imin = 0;
        for (Index j = 1; j < half; ++j) {
          if (p[j] > p[imax]) imax = j;
          if (p[j] < p[imin]) imin = j;
        }
        bucket[t0 + t] = static_cast<std::int32_t>(p[imax] >= -p[imin] ? imax : half + imin);
      }
    }
    // stable counting sort by bucket: positions in increasing order within a bucket
    std::int32_t* count = s.count.data();
    std::fill(count, count + nb_ + 1, 0);
    for (Index t = 0; t < Tn; ++t) ++count[bucket[t] + 1];
    for (Index j = 0; j < nb_; ++j) count[j + 1] += count[j];
    std::int32_t* perm = perm_.data() + (bh * nh_ + r) * Tn;
    std::int32_t* chunk_of = chunk_of_.data() + bh * Tn * nh_;
    for (Index t = 0; t < Tn; ++t) {
      const std::int32_t i = count[bucket[t]]++;
      perm[i] = static_cast<std::int32_t>(t);
      chunk_of[t * nh_ + r] = static_cast<std::int32_t>(i / chunk_);
    }
  }
}

template <typename T>
void LSHAttention<T>::chunks_transposed(const Matrix<T>& x, std::vector<T>& xt) const {
  // xt (T/m, d_k, m): block c is rows [c m, c m + m) of x transposed, m = min(chunk, T)
  const Index Tn = T_, m = std::min(chunk_, T_), blocks = (Tn + m - 1) / m;
  ensure(xt, blocks * dk_ * m);
  for (Index i = 0; i < Tn; ++i) {
    T* dst = xt.data() + (i / m) * dk_ * m + i % m;
    const T* src = x.data() + i * dk_;
    for (Index k = 0; k < dk_; ++k) dst[k * m] = src[k];
  }
}

template <typename T>
void LSHAttention<T>::times_window_t(const T* a, const T* xt, Index q0, Index nq, Index k0, T* c) const {
  // C (nq, nk) = A (nq, d_k) X_window^T: the window is the chunk before (if any) and chunk q0/m,
  // each a transposed block of xt (d_k, m) whose first rows are the chunk's
  const Index m = std::min(chunk_, T_), nk = q0 + nq - k0;
  if (k0 < q0) block_product<T>(nq, m, dk_, a, dk_, false, xt + (k0 / m) * dk_ * m, m, false, c, nk);
  block_product<T>(nq, nq, dk_, a, dk_, false, xt + (q0 / m) * dk_ * m, m, false, c + (q0 - k0), nk);
}

template <typename T>
void LSHAttention<T>::chunk_scores(const std::int32_t* perm, Index q0, Index nq, Index k0, Index nk, bool causal,
                                   T* S_out, Scratch& s) const {
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(dk_)));
  MatrixMap<T> S(S_out, nq, nk);
  MatrixMap<T> A(s.allowed.data(), nq, nk);
  // S = Q_chunk K_window^T, scaled below                              (nq, nk)
  times_window_t(s.q.data() + q0 * dk_, s.kt.data(), q0, nq, k0, S.data());
  // Row by row, in loops over the keys of the window that the compiler vectorises:
  //   N_ij = #{r : chunk_r(j) in {chunk_r(i), chunk_r(i) - 1}}    (>= 1: the pair meets in this round)
  //   S_ij -= log N_ij;  blocked pairs (causal: a key at a later or the same position; else the
  //   query's own position, see forward's end): S_ij = -inf, allowed_ij = 0
  const Index Tn = T_;
  const std::int32_t* ck = s.ck.data();  // (n_hashes, T)
  const std::int32_t* pos = perm + k0;   // (nk) the window's positions
  T* met = s.met.data();                 // (nk) N_ij of row i, counted in floating point
  const T blocked = neg_inf<T>();
  for (Index i = 0; i < nq; ++i) {
    const std::int32_t pi = perm[q0 + i];
    T* srow = S.data() + i * nk;
    T* arow = A.data() + i * nk;
    if (nh_ > 1) {
      std::fill(met, met + nk, T(0));
      for (Index r = 0; r < nh_; ++r) {
        const std::int32_t* cr = ck + r * Tn;
        const std::int32_t ci = cr[q0 + i];
        const std::int32_t* cj = cr + k0;
        // c_i - c_j in {0, 1}, as one unsigned comparison
        for (Index j = 0; j < nk; ++j) met[j] += static_cast<std::uint32_t>(ci - cj[j]) <= 1u ? T(1) : T(0);
      }
      // log N by Eigen's vectorised log (a table lookup per key would be a scalar loop)
      RowArray<T>(srow, nk) = RowArray<T>(srow, nk) * scale - ConstRowArray<T>(met, nk).log();
    } else {
      for (Index j = 0; j < nk; ++j) srow[j] *= scale;
    }
    if (causal) {
      for (Index j = 0; j < nk; ++j) {
        const bool ok = pos[j] < pi;
        arow[j] = ok ? T(1) : T(0);
        srow[j] = ok ? srow[j] : blocked;
      }
    } else {
      for (Index j = 0; j < nk; ++j) {
        const bool ok = pos[j] != pi;
        arow[j] = ok ? T(1) : T(0);
        srow[j] = ok ? srow[j] : blocked;
      }
    }
  }
}

template <typename T>
void LSHAttention<T>::sorted_chunks(const std::int32_t* chunk_of, const std::int32_t* perm, Scratch& s) const {
  // ck (n_hashes, T): ck[r, i] = the chunk of round r that position perm[i] is in
  const Index Tn = T_;
  for (Index i = 0; i < Tn; ++i) {
    const std::int32_t* c = chunk_of + perm[i] * nh_;
    for (Index r = 0; r < nh_; ++r) s.ck[static_cast<size_t>(r * Tn + i)] = c[r];
  }
}

template <typename T>
void LSHAttention<T>::forward_item(Index b, Index h, bool causal, Scratch& s) {
  const Index Tn = T_, m = std::min(chunk_, T_), bh = b * H_ + h;
  ConstStridedMap<T> Q(head(q_, qs_, b, h), Tn, dk_, Eigen::OuterStride<>(qs_.row));  // (T, d_k)
  ConstStridedMap<T> V(head(v_, vs_, b, h), Tn, dk_, Eigen::OuterStride<>(vs_.row));  // (T, d_k)
  ConstMatrixMap<T> K(keys_.data() + bh * Tn * dk_, Tn, dk_);                         // (T, d_k)
  StridedMap<T> O(head(out_, os_, b, h), Tn, dk_, Eigen::OuterStride<>(os_.row));     // (T, d_k)
  T* Z = lse_.data() + bh * Tn;                                                       // (T)
  O.setZero();
  std::fill(Z, Z + Tn, neg_inf<T>());
  s.q.resize(Tn, dk_);
  s.k.resize(Tn, dk_);
  s.v.resize(Tn, dk_);
  s.o.resize(Tn, dk_);
  ensure(s.allowed, m, 2 * m);
  ensure(s.ck, Tn * nh_);
  ensure(s.met, 2 * m);
  const std::int32_t* chunk_of = chunk_of_.data() + bh * Tn * nh_;
  for (Index r = 0; r < nh_; ++r) {
    const std::int32_t* perm = perm_.data() + (bh * nh_ + r) * Tn;
    T* probs = probs_.data() + (bh * nh_ + r) * Tn * 2 * m;  // this round's probabilities, kept
    T* z = round_lse_.data() + (bh * nh_ + r) * Tn;          // and log-partitions
    gather_sorted<T, 3>({Q.data(), K.data(), V.data()}, {qs_.row, dk_, vs_.row}, perm, Tn, dk_,
                        {s.q.data(), s.k.data(), s.v.data()});
    chunks_transposed(s.k, s.kt);
    sorted_chunks(chunk_of, perm, s);
    for (Index q0 = 0; q0 < Tn; q0 += m) {
      // chunk [q0, q0+nq) attends to [k0, q0+nq): itself and the chunk before
      const Index nq = std::min(m, Tn - q0), k0 = std::max<Index>(0, q0 - m), nk = q0 + nq - k0;
      MatrixMap<T> P(probs + q0 * 2 * m, nq, nk);  // scores -> probabilities of this round
      chunk_scores(perm, q0, nq, k0, nk, causal, P.data(), s);
      // P = softmax(S) row by row; z_i = log sum_j exp(S_ij), -inf when every key is blocked
      for (Index i = 0; i < nq; ++i) {
        RowArray<T> row(P.data() + i * nk, nk);
        ConstRowArray<T> ok(s.allowed.data() + i * nk, nk);
        const T mx = row.maxCoeff();
        if (mx == neg_inf<T>()) {
          row.setZero();
          z[q0 + i] = neg_inf<T>();
          continue;
        }
        row = (row - mx).exp() * ok;  // blocked keys: exactly 0
        const T l = row.sum();
        row *= T(1) / l;
        z[q0 + i] = mx + std::log(l);
      }
      // o (nq, d_k) = P V_window
      block_product<T>(nq, dk_, nk, P.data(), nk, false, s.v.data() + k0 * dk_, dk_, false, s.o.data() + q0 * dk_, dk_);
    }
    // combine with the rounds before: Z = logaddexp(Z, z_r), O = (e^Z O + e^z_r o_r) / e^Z_new
    // (Eqs. 12-16 as a running softmax over the rounds)
    for (Index i = 0; i < Tn; ++i) {
      const T zr = z[i];
      if (zr == neg_inf<T>()) continue;
      const Index p = perm[i];
      if (Z[p] == neg_inf<T>()) {
        O.row(p) = s.o.row(i);
        Z[p] = zr;
        continue;
      }
      const T mx = std::max(Z[p], zr);
      const T a = std::exp(Z[p] - mx), c = std::exp(zr - mx), sum = a + c;
      O.row(p) = (O.row(p) * a + s.o.row(i) * c) * (T(1) / sum);
      Z[p] = mx + std::log(sum);
    }
  }
  // a query with no key other than itself in any round attends to itself: o = v
  for (Index t = 0; t < Tn; ++t)
    if (Z[t] == neg_inf<T>()) O.row(t) = V.row(t);
}

template <typename T>
void LSHAttention<T>::forward(const T* q, HeadStrides qs, const T* v, HeadStrides vs, Index B, Index H, Index T_len,
                              Index d_k, bool causal, T* out, HeadStrides os) {
  TCPP_CHECK(B > 0 && H > 0 && T_len > 0 && d_k > 0, "LSHAttention: B, H, T and d_k must be positive, got ", B, ", ", H,
             ", ", T_len, ", ", d_k);
  TCPP_CHECK(T_len <= std::numeric_limits<std::int32_t>::max(), "LSHAttention: length ", T_len,
             " is beyond the 2**31 - 1 positions the sort tables hold");
  q_ = nullptr;  // no forward to go back through until this one is done
  B_ = B;
  H_ = H;
  T_ = T_len;
  dk_ = d_k;
  nb_ = buckets_for(T_len);
  qs_ = qs;
  vs_ = vs;
  os_ = os;
  v_ = v;
  out_ = out;
  const Index items = B * H, rows = items * T_len;
  keys_.resize(rows, d_k);
  inv_norm_.resize(items, T_len);
  lse_.resize(items, T_len);
  const auto tables = static_cast<size_t>(items * nh_ * T_len);
  bucket_.resize(tables);
  perm_.resize(tables);
  chunk_of_.resize(tables);
  probs_.resize(items * nh_ * T_len, 2 * std::min(chunk_, T_len));
  round_lse_.resize(items * nh_, T_len);
  draw_rotations();
  if (!freeze_) ++calls_;
  if (static_cast<int>(scratch_.size()) < max_threads()) scratch_.resize(static_cast<size_t>(max_threads()));
  q_ = q;
  // (sequence, head) items are independent; each is done by one thread in a fixed order
#pragma omp parallel for schedule(dynamic, 1) if (items > 1)
  for (Index it = 0; it < items; ++it) {
    Scratch& s = scratch();
    hash_item(it / H, it % H, s);
    forward_item(it / H, it % H, causal, s);
  }
}

template <typename T>
const Matrix<T>& LSHSelfAttention<T>::forward(ConstMatrixMap<T> x, Index B, Index T_len, bool causal) {
  TCPP_CHECK(B > 0 && T_len > 0 && x.rows() == B * T_len, "LSHSelfAttention: input has ", x.rows(),
             " rows, expected B*T = ", B, "*", T_len);
  TCPP_CHECK(x.cols() == d_, "LSHSelfAttention: input has ", x.cols(), " features, expected d_model ", d_);
  TCPP_CHECK(T_len <= std::numeric_limits<std::int32_t>::max(), "LSHSelfAttention: length ", T_len,
             " is beyond the 2**31 - 1 positions the sort tables hold");
  x_ = nullptr;  // no forward to go back through until this one is done
  B_ = B;
  T_ = T_len;
  const Index rows = B * T_len;
  // [Q | V] = x [W_q; W_v]^T + [b_q | b_v]                              (B*T, 2d)
  proj_.project(Precision::Float32, x, 0, 2, qv_);
  ctx_.resize(rows, d_);
  // head h of sequence b: rows b*T + t, columns h*d_k of [Q | V] and of ctx
  const HeadStrides in{T_len * 2 * d_, dk_, 2 * d_}, heads_out{T_len * d_, dk_, d_};
  attn_.forward(qv_.data(), in, qv_.data() + d_, in, B, h_, T_len, dk_, causal, ctx_.data(), heads_out);
  x_ = x.data();
  return proj_.out.forward(cmap(ctx_));
}

template <typename T>
void LSHAttention<T>::backward_item(Index b, Index h, const T* dout, HeadStrides ds, T* dq, HeadStrides dqs, T* dv,
                                    HeadStrides dvs, Scratch& s) {
  const Index Tn = T_, m = std::min(chunk_, T_), bh = b * H_ + h;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(dk_)));
  ConstStridedMap<T> Q(head(q_, qs_, b, h), Tn, dk_, Eigen::OuterStride<>(qs_.row));    // (T, d_k)
  ConstStridedMap<T> V(head(v_, vs_, b, h), Tn, dk_, Eigen::OuterStride<>(vs_.row));    // (T, d_k)
  ConstStridedMap<T> O(head(out_, os_, b, h), Tn, dk_, Eigen::OuterStride<>(os_.row));  // (T, d_k)
  ConstStridedMap<T> dO(head(dout, ds, b, h), Tn, dk_, Eigen::OuterStride<>(ds.row));   // (T, d_k)
  StridedMap<T> dQ(head(dq, dqs, b, h), Tn, dk_, Eigen::OuterStride<>(dqs.row));        // (T, d_k)
  StridedMap<T> dV(head(dv, dvs, b, h), Tn, dk_, Eigen::OuterStride<>(dvs.row));        // (T, d_k)
  ConstMatrixMap<T> K(keys_.data() + bh * Tn * dk_, Tn, dk_);                           // (T, d_k)
  MatrixMap<T> dK(dkeys_.data() + bh * Tn * dk_, Tn, dk_);                              // (T, d_k)
  const T* inv_norm = inv_norm_.data() + bh * Tn;
  const T* Z = lse_.data() + bh * Tn;
  dQ.setZero();
  dV.setZero();
  dK.setZero();
  s.q.resize(Tn, dk_);
  s.k.resize(Tn, dk_);
  s.v.resize(Tn, dk_);
  s.o.resize(Tn, dk_);
  s.dq.resize(Tn, dk_);
  s.dk.resize(Tn, dk_);
  s.dv.resize(Tn, dk_);
  ensure(s.s, m, 2 * m);
  ensure(s.dp, m, 2 * m);
  ensure(s.z, Tn);
  ensure(s.dd, Tn);
  // The forward is one softmax over the union of the rounds' windows: with p_rij = exp(s_rij - Z_i)
  // (s already count-corrected), o_i = sum_r sum_j p_rij v_j and sum_r sum_j p_rij = 1. The
  // forward kept round r's own probabilities P_rij = exp(s_rij - z_ri), so p_rij = P_rij e^(z_ri - Z_i).
  // So
  //   dv_j  += sum p_rij do_i                          dp_rij = do_i . v_j
  //   ds_rij = p_rij (dp_rij - D_i),  D_i = sum_rj p_rij dp_rij = do_i . o_i
  //   dq_i  += sum_j ds_rij k_j / sqrt(d_k)            dk_j  += sum_i ds_rij q_i / sqrt(d_k)
  // round by round on rows gathered into sorted order, then scattered back (added).
  for (Index r = 0; r < nh_; ++r) {
    const std::int32_t* perm = perm_.data() + (bh * nh_ + r) * Tn;
    const T* probs = probs_.data() + (bh * nh_ + r) * Tn * 2 * m;  // the forward's P_r
    const T* zr = round_lse_.data() + (bh * nh_ + r) * Tn;         // and z_r
    gather_sorted<T, 4>({Q.data(), K.data(), V.data(), dO.data()}, {qs_.row, dk_, vs_.row, ds.row}, perm, Tn, dk_,
                        {s.q.data(), s.k.data(), s.v.data(), s.o.data()});
    chunks_transposed(s.v, s.vt);
    for (Index i = 0; i < Tn; ++i) {
      const Index p = perm[i];
      s.z[static_cast<size_t>(i)] = Z[p];
      s.dd[static_cast<size_t>(i)] = dO.row(p).dot(O.row(p));
    }
    s.dq.setZero();
    s.dk.setZero();
    s.dv.setZero();
    for (Index q0 = 0; q0 < Tn; q0 += m) {
      const Index nq = std::min(m, Tn - q0), k0 = std::max<Index>(0, q0 - m), nk = q0 + nq - k0;
      MatrixMap<T> P(s.s.data(), nq, nk);
      const T* Pr = probs + q0 * 2 * m;  // (nq, nk)
      for (Index i = 0; i < nq; ++i) {
        RowArray<T> row(P.data() + i * nk, nk);
        const T Zi = s.z[static_cast<size_t>(q0 + i)], zi = zr[q0 + i];
        // Z = -inf: attends to itself only, no score reaches the output; z_r = -inf: every key of
        // this round's window blocked (the forward's row is zero)
        if (Zi == neg_inf<T>() || zi == neg_inf<T>()) {
          row.setZero();
          continue;
        }
        row = ConstRowArray<T>(Pr + i * nk, nk) * std::exp(zi - Zi);
      }
      auto dOc = s.o.middleRows(q0, nq);  // (nq, d_k)
      // dV_window += P^T dO_chunk                                        (nk, d_k)
      block_product<T>(nk, dk_, nq, P.data(), nk, true, dOc.data(), dk_, true, s.dv.data() + k0 * dk_, dk_);
      // dP = dO_chunk V_window^T                                         (nq, nk)
      MatrixMap<T> dP(s.dp.data(), nq, nk);
      times_window_t(dOc.data(), s.vt.data(), q0, nq, k0, dP.data());
      // dS = P (dP - D) / sqrt(d_k), in place of dP
      for (Index i = 0; i < nq; ++i) {
        RowArray<T> g(dP.data() + i * nk, nk);
        g = ConstRowArray<T>(P.data() + i * nk, nk) * (g - s.dd[static_cast<size_t>(q0 + i)]) * scale;
      }
      // dQ_chunk += dS K_window; dK_window += dS^T Q_chunk
      block_product<T>(nq, dk_, nk, dP.data(), nk, false, s.k.data() + k0 * dk_, dk_, true, s.dq.data() + q0 * dk_,
                       dk_);
      block_product<T>(nk, dk_, nq, dP.data(), nk, true, s.q.data() + q0 * dk_, dk_, true, s.dk.data() + k0 * dk_, dk_);
    }
    scatter_add_sorted<T, 3>({s.dq.data(), s.dk.data(), s.dv.data()}, perm, Tn, dk_, {dQ.data(), dK.data(), dV.data()},
                             {dqs.row, dk_, dvs.row});
  }
  for (Index t = 0; t < Tn; ++t) {
    // a query that attended to itself only: o = v
    if (Z[t] == neg_inf<T>()) dV.row(t) += dO.row(t);
    // k = q / ||q||: dk/dq = (I - k k^T) / ||q||, so dq += (dk - k (k . dk)) / ||q||
    const T inv = inv_norm[t];
    dQ.row(t) += (dK.row(t) - K.row(t) * K.row(t).dot(dK.row(t))) * inv;
  }
}

template <typename T>
void LSHAttention<T>::backward(const T* dout, HeadStrides ds, T* dq, HeadStrides dqs, T* dv, HeadStrides dvs) {
  if (q_ == nullptr) throw std::runtime_error("LSHAttention: backward() called before forward()");
  const Index items = B_ * H_;
  dkeys_.resize(items * T_, dk_);
  if (static_cast<int>(scratch_.size()) < max_threads()) scratch_.resize(static_cast<size_t>(max_threads()));
#pragma omp parallel for schedule(dynamic, 1) if (items > 1)
  for (Index it = 0; it < items; ++it) backward_item(it / H_, it % H_, dout, ds, dq, dqs, dv, dvs, scratch());
}

template <typename T>
void LSHAttention<T>::release() {
  q_ = v_ = out_ = nullptr;
  for (Matrix<T>* m : {&keys_, &inv_norm_, &lse_, &probs_, &round_lse_, &dkeys_}) m->resize(0, 0);
  for (std::vector<std::int32_t>* t : {&bucket_, &perm_, &chunk_of_}) {
    t->clear();
    t->shrink_to_fit();
  }
  scratch_.clear();
}

template <typename T>
const Matrix<T>& LSHSelfAttention<T>::backward(ConstMatrixMap<T> dout) {
  if (x_ == nullptr) throw std::runtime_error("LSHSelfAttention: backward() called before forward()");
  const Index rows = B_ * T_;
  TCPP_CHECK(dout.rows() == rows && dout.cols() == d_, "LSHSelfAttention: backward got dout of shape (", dout.rows(),
             ", ", dout.cols(), "), expected (", rows, ", ", d_, ")");
  // output projection: dctx = dout W_o                                  (B*T, d)
  const Matrix<T>& dctx = proj_.out.backward(dout);
  dqv_.resize(rows, 2 * d_);
  const HeadStrides heads_in{T_ * 2 * d_, dk_, 2 * d_}, heads_out{T_ * d_, dk_, d_};
  attn_.backward(dctx.data(), heads_out, dqv_.data(), heads_in, dqv_.data() + d_, heads_in);
  // forward was [Q|V] = x [W_q; W_v]^T + b, so d[W_q; W_v] += d[Q|V]^T x, db += column sums,
  // dx = d[Q|V] [W_q; W_v]
  ConstMatrixMap<T> x(x_, rows, d_);
  proj_.backward(Precision::Float32, cmap(dqv_), x, 0, 2, &dx_);
  return dx_;
}

template <typename T>
ParameterList<T> LSHSelfAttention<T>::parameters() {
  return proj_.parameters();
}

template <typename T>
void LSHSelfAttention<T>::zero_grad() {
  proj_.zero_grad();
}

template <typename T>
void LSHSelfAttention<T>::release() {
  x_ = nullptr;
  for (Matrix<T>* m : {&qv_, &ctx_, &dqv_, &dx_}) m->resize(0, 0);
  attn_.release();
  proj_.out.release();
}

template class LSHAttention<float>;
template class LSHAttention<double>;
template class LSHSelfAttention<float>;
template class LSHSelfAttention<double>;

}  // namespace transformer

// lsh_attention.hpp — Reformer's LSH self-attention (Kitaev et al. 2020, §2 and App. A).
//
// Full attention compares every query with every key: O(T^2) time and memory. LSH attention
// compares a query only with keys that are likely to be near it. Per head and per hash round:
//
//   shared QK:  one projection gives the queries q; the keys are the same vectors normalised,
//               k_j = q_j / ||q_j|| (a zero q gives k = 0), so a query and its key hash alike.
//   hash:       h(x) = argmax([x R ; -x R]) with a random rotation R (d_k, n_buckets/2).
//   sort:       positions sorted by (bucket, position), a stable counting sort.
//   chunk:      the sorted sequence cut into chunks of `chunk` positions (the last may be
//               shorter); the queries of chunk c attend to the keys of chunks c and c-1 (Eq. 5;
//               chunk 0 has no previous chunk: nothing wraps around).
//   masks:      causal: key position <= query position (original positions); a query never
//               attends to its own position unless it has no other key in any round (then its
//               output is its own value: the paper's self mask of -1e5, taken to its limit).
//   rounds:     with n_hashes rounds a query sees the union of its windows. A (query, key) pair
//               met in N rounds has log N subtracted from its score in each (App. A), and the
//               rounds' outputs are combined with weights softmax_r(z_r), z_r the log-partition
//               (log-sum-exp) of round r (Eqs. 12-16). Together this is exactly a softmax over the
//               union of the windows, each key counted once.
//
// Scores are q_i . k_j / sqrt(d_k). LSHAttention is all of the above over given queries and values
// of B x H heads; LSHSelfAttention, the layer, puts its projections around it. The layer's
// parameters (PyTorch layout (out, in)): query.weight/bias, value.weight/bias, output.weight/bias;
// no key projection (keys are the normalised queries).
//
// Randomness: the rotations of a forward are drawn from (seed, calls()) by a counter-based
// generator, independent of the thread count; each forward advances calls() unless
// freeze_hash() is set. Backward uses the buckets of its forward; a recomputation (a reversible
// stack's) gets the same buckets by restoring calls() before it, or with freeze_hash. The bucket
// assignment and the sort are constants for the backward: argmax has no gradient.
//
// Cost per head and round: the hash (T x d_k x n_buckets/2) and, per chunk, two (chunk x d_k) by
// (d_k x 2 chunk) products forward and four backward on rows gathered into sorted order so that a
// chunk and its window are contiguous blocks. The forward keeps each round's probabilities
// (T x 2 chunk per head and round, and the round's log-partitions) for the backward, which
// therefore neither recomputes the scores nor their masks and counts: memory linear in T, like
// the rest. Nothing of size T x T exists.
#pragma once

#include <cstdint>
#include <vector>

#include "transformer/attention/projections.hpp"
#include "transformer/attention/self_attention.hpp"
#include "transformer/core/tensor.hpp"
#include "transformer/layers/linear.hpp"

namespace transformer {

// Where head h of sequence b keeps its row t: at data + b * batch + h * head + t * row. A layer's
// (B*T, H*d_k) rows are {T * width, d_k, width}; (B, H, T, d_k) heads are {H * T * d_k, T * d_k, d_k}.
struct HeadStrides {
  Index batch, head, row;
};

// Elements of type T that an LSHAttention forward and backward over B sequences of T positions and
// H heads of d_k keep (keys and their gradient, 1/||q||, log-partitions, the integer tables counted
// as elements, each round's probabilities, the rotations) plus the per-thread scratch of `threads`
// threads: for the memory checks of the bindings.
double lsh_kernel_elements(double B, double H, double T, double d_k, double n_hashes, double n_buckets, double chunk,
                           double threads);
// The same for an LSHSelfAttention over `rows` = B*T rows of width d: the kernel's, plus the
// projections, the heads' outputs, the output and their gradients.
double lsh_attention_elements(double rows, double B, double H, double T, double d, double n_hashes, double n_buckets,
                              double chunk, double threads);

// The attention itself, over given shared-QK queries and values of B x H heads: no weights. The
// layer below puts its projections around it; bound alone (Python's LSHAttention) it is the kernel
// that `bench --attention` sets beside the exact kernels.
template <typename T>
class LSHAttention {
 public:
  // Rounds beyond this buy nothing (8 already nearly matches full attention, Reformer Fig. 4) and
  // each pair's duplicate count costs n_hashes.
  static constexpr Index kMaxHashes = 64;

  // n_buckets = 0: 2 * max(1, T / chunk) for a sequence of T positions (about one chunk per
  // bucket, as trax chooses). Throws std::invalid_argument for chunk < 1, n_hashes outside
  // [1, kMaxHashes], or n_buckets odd or < 2 (other than 0), its message starting with `who`.
  LSHAttention(Index chunk = 64, Index n_hashes = 4, Index n_buckets = 0, std::uint64_t seed = 0,
               const char* who = "LSHAttention");

  // q: the shared queries and keys, v: the values, each (B, H, T, d_k) in its strides; writes the
  // output (B, H, T, d_k) at `out`. q, v and out must stay alive and unchanged until backward().
  void forward(const T* q, HeadStrides qs, const T* v, HeadStrides vs, Index B, Index H, Index T_len, Index d_k,
               bool causal, T* out, HeadStrides os);
  // dout (B, H, T, d_k) -> dq and dv (assigned), each in its strides.
  void backward(const T* dout, HeadStrides ds, T* dq, HeadStrides dqs, T* dv, HeadStrides dvs);
  void release();

  Index chunk() const { return chunk_; }
  Index n_hashes() const { return nh_; }
  Index n_buckets() const { return nb_setting_; }  // 0: chosen from the length
  // The number of buckets a sequence of T_len positions is hashed into.
  Index buckets_for(Index T_len) const;

  std::uint64_t calls() const { return calls_; }
  void set_calls(std::uint64_t c) { calls_ = c; }
  bool freeze_hash() const { return freeze_; }
  void set_freeze_hash(bool f) { freeze_ = f; }

  bool has_forward() const { return q_ != nullptr; }
  Index batch() const { return B_; }
  Index heads() const { return H_; }
  Index length() const { return T_; }
  Index d_k() const { return dk_; }
  Index last_n_buckets() const { return nb_; }
  // The rotations of the last forward: (H * n_hashes * d_k, n_buckets/2) = (H, n_hashes, d_k, n_buckets/2).
  const Matrix<T>& rotations() const { return rot_; }
  // The buckets of the last forward: (B, H, n_hashes, T) flattened.
  const std::vector<std::int32_t>& buckets() const { return bucket_; }

 private:
  // Buffers of one (sequence, head) item, one set per thread, resized only when shapes grow.
  struct Scratch {
    Matrix<T> q, k, v;                // (T, d_k) rows gathered in sorted order
    std::vector<T> kt, vt;            // (T/chunk, d_k, chunk) K^T and V^T of the sorted rows, chunk by chunk
    Matrix<T> o;                      // (T, d_k) forward: a round's output; backward: dO, sorted
    Matrix<T> dq, dk, dv;             // (T, d_k) a round's gradients in sorted order
    Matrix<T> s, dp;                  // (chunk, 2 chunk) scores / probabilities, and dP
    Matrix<T> allowed;                // (chunk, 2 chunk) 1 where the query may attend to the key, else 0
    Matrix<T> proj;                   // (kLshHashRows, n_buckets/2) k R of a block of rows
    std::vector<T> z, dd;             // (T) a round's log-partitions; backward: Z and D sorted
    std::vector<std::int32_t> count;  // (n_buckets + 1) counting sort
    std::vector<std::int32_t> ck;     // (n_hashes, T) chunk_of of the positions in sorted order
    std::vector<T> met;               // (2 chunk) the rounds in which a query meets each key of its window
  };

  // The rows of head h of sequence b in strides st, from base.
  static const T* head(const T* base, HeadStrides st, Index b, Index h) { return base + b * st.batch + h * st.head; }
  static T* head(T* base, HeadStrides st, Index b, Index h) { return base + b * st.batch + h * st.head; }

  void draw_rotations();
  void hash_item(Index b, Index h, Scratch& s);
  void forward_item(Index b, Index h, bool causal, Scratch& s);
  void backward_item(Index b, Index h, const T* dout, HeadStrides ds, T* dq, HeadStrides dqs, T* dv, HeadStrides dvs,
                     Scratch& s);
  // xt = the chunks of x (T, d_k) transposed, each a contiguous (d_k, chunk) block
  void chunks_transposed(const Matrix<T>& x, std::vector<T>& xt) const;
  // C (nq, nk) = A (nq, d_k) X_window^T, X_window the rows [k0, q0 + nq) of x, from xt
  void times_window_t(const T* a, const T* xt, Index q0, Index nq, Index k0, T* c) const;
  // s.ck from chunk_of (T, n_hashes) for a round's order perm
  void sorted_chunks(const std::int32_t* chunk_of, const std::int32_t* perm, Scratch& s) const;
  // Scores of one chunk of round r against its window, masked and count-corrected:
  //   S (nq, nk) = Q_s[q0:q0+nq] K_s[k0:k0+nk]^T / sqrt(d_k) - log N, blocked pairs -inf.
  //   allowed (nq, nk) = 1 where the pair is not blocked. perm: sorted index -> position of the round.
  // S is written at `S` (nq, nk contiguous), allowed into s.allowed.
  void chunk_scores(const std::int32_t* perm, Index q0, Index nq, Index k0, Index nk, bool causal, T* S,
                    Scratch& s) const;

  Index chunk_, nh_, nb_setting_;
  std::uint64_t hash_seed_;
  std::uint64_t calls_ = 0;
  bool freeze_ = false;

  // the last forward, kept for backward
  const T* q_ = nullptr;  // the caller's queries, values and output, in their strides
  const T* v_ = nullptr;
  T* out_ = nullptr;
  HeadStrides qs_{}, vs_{}, os_{};
  Index B_ = 0, H_ = 0, T_ = 0, dk_ = 0, nb_ = 0;
  Matrix<T> rot_;                       // (H*n_hashes*d_k, n_buckets/2)
  Matrix<T> keys_;                      // (B*H*T, d_k) k = q / ||q||, head by head
  Matrix<T> inv_norm_;                  // (B*H, T) 1 / ||q|| (0 for q = 0)
  Matrix<T> lse_;                       // (B*H, T) log-partition over all rounds; -inf: attends to itself only
  std::vector<std::int32_t> bucket_;    // (B, H, n_hashes, T)
  std::vector<std::int32_t> perm_;      // (B, H, n_hashes, T) sorted index -> position
  std::vector<std::int32_t> chunk_of_;  // (B, H, T, n_hashes) the chunk of position t in round r
  // Each round's probabilities, (B*H*n_hashes*T, 2 chunk) in sorted order: the rows of chunk q0 hold
  // its (nq, nk) block contiguously. An Eigen matrix, not a std::vector, for Eigen's alignment: the
  // vectorised exp and log run their first elements unvectorised up to an aligned address, so a
  // buffer whose alignment changed from one allocation to the next would round differently.
  Matrix<T> probs_;
  Matrix<T> round_lse_;  // (B*H*n_hashes, T) each round's log-partitions z_r, sorted order
  Matrix<T> dkeys_;      // (B*H*T, d_k) backward: the gradient of the normalised keys

  std::vector<Scratch> scratch_;  // one per thread
  Scratch& scratch();
};

// The layer: x (B*T, d) -> [Q | V] = x [W_q; W_v]^T + b -> LSHAttention over H heads -> W_o.
template <typename T>
class LSHSelfAttention : public SelfAttention<T> {
 public:
  static constexpr Index kMaxHashes = LSHAttention<T>::kMaxHashes;

  // Throws std::invalid_argument for d_model % n_heads != 0 and LSHAttention's.
  LSHSelfAttention(Index d_model, Index n_heads, Index chunk = 64, Index n_hashes = 4, Index n_buckets = 0,
                   std::uint64_t seed = 0);

  // x (B*T_len, d) -> (B*T_len, d). x must stay alive and unchanged until backward().
  const Matrix<T>& forward(ConstMatrixMap<T> x, Index B, Index T_len, bool causal) override;
  // dout (B*T_len, d) -> dx (B*T_len, d); parameter gradients accumulate.
  const Matrix<T>& backward(ConstMatrixMap<T> dout) override;

  ParameterList<T> parameters() override;  // query, value, output . weight/bias
  void zero_grad() override;
  void release() override;

  Index d_model() const override { return d_; }
  Index n_heads() const override { return h_; }
  Index d_k() const { return dk_; }
  Index chunk() const { return attn_.chunk(); }
  Index n_hashes() const { return attn_.n_hashes(); }
  Index n_buckets() const { return attn_.n_buckets(); }
  Index buckets_for(Index T_len) const { return attn_.buckets_for(T_len); }

  std::uint64_t calls() const { return attn_.calls(); }
  void set_calls(std::uint64_t c) { attn_.set_calls(c); }
  bool freeze_hash() const { return attn_.freeze_hash(); }
  void set_freeze_hash(bool f) { attn_.set_freeze_hash(f); }

  bool has_forward() const { return x_ != nullptr; }
  Index batch() const { return attn_.batch(); }
  Index length() const { return attn_.length(); }
  Index last_n_buckets() const { return attn_.last_n_buckets(); }
  const Matrix<T>& rotations() const { return attn_.rotations(); }
  const std::vector<std::int32_t>& buckets() const { return attn_.buckets(); }

 private:
  AttentionProjections<T> proj_;  // W_in (2d, d) = [W_q; W_v] (queries are also the keys), and W_o
  Index d_, h_, dk_;
  LSHAttention<T> attn_;
  const T* x_ = nullptr;  // (B*T, d) the caller's input, kept for backward
  Index B_ = 0, T_ = 0;
  Matrix<T> qv_;   // (B*T, 2d) = [Q | V]
  Matrix<T> ctx_;  // (B*T, d) the heads' outputs, before W_o
  Matrix<T> dqv_;  // (B*T, 2d) = [dQ | dV]
  Matrix<T> dx_;   // (B*T, d)
};

}  // namespace transformer

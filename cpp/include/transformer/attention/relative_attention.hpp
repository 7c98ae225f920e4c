// relative_attention.hpp — Transformer-XL's relative multi-head attention with a segment memory
// (Dai et al. 2019, Sec. 3.2-3.3).
//
// Queries come from the current segment x (B, T, d); keys and values from [memory ; x], where the
// memory (B, M, d) holds the previous segment's hidden states of the layer below. The memory is a
// stop-gradient input: no gradient flows into it (the key and value weights still learn from the
// keys and values they make of it). Query i of the segment sits at position M + i of the
// concatenation and sees every memory position and the segment positions <= i (causal).
//
// For one head, with q_i, k_j the head's query and key (d_k wide) and r_{i-j} the head's columns
// of W_{k,R} R_{i-j} (R the non-learned sinusoids of the relative distance i-j between the query's
// and the key's position in the concatenation):
//
//   score(i, j) = [ (q_i + u) . k_j  +  (q_i + v) . r_{i-j} ] / sqrt(d_k)
//               = [ (a) q_i.k_j + (b) q_i.r_{i-j} + (c) u.k_j + (d) v.r_{i-j} ] / sqrt(d_k)
//
// the paper's four terms: content, content-dependent position, global content bias, global
// position bias. Then a softmax over j, the weighted sum of the values, and the output projection.
//
// The position terms of one query row read one relative distance per key. They are computed once
// per distance, BD_raw (T, L) = (Q + v) P^T with P (L, d_k) the rows r for distances
// L-1, L-2, ..., 0 (L = M + T), and the relative shift reads entry (i, j) from BD_raw(i, j + T-1-i)
// (distance M + i - j). The shift is an index remap done in place in the score rows; its backward
// (the transpose) moves the score gradients back to the distances they were read from.
//
// u and v (n_heads, d_k) belong to each layer here (parameters "u" and "v"); the paper shares them
// across layers, which a model obtains by tying them. The sinusoids use the [sin | cos] layout of
// positional_encoding (PositionalLayout::Concatenated), as the original code does; a clamp length
// c >= 0 uses R_c for every distance beyond c.
#pragma once

#include <cstdint>

#include "transformer/attention/projections.hpp"
#include "transformer/attention/self_attention.hpp"
#include "transformer/core/tensor.hpp"
#include "transformer/kernels/inference_backend.hpp"
#include "transformer/layers/linear.hpp"

namespace transformer {

// The relative shift on G groups of (T, L) rows, L >= T (M = L - T memory positions):
//   out(g, i, j) = in(g, i, j + T-1-i)   for j <= M + i,   0 for j > M + i (later positions).
// When column p of `in` holds distance L-1-p, entry (i, j) of `out` holds distance M + i - j.
template <typename T>
void relative_shift(const T* in, T* out, Index G, Index T_len, Index L);

// The evaluation state of a RelativeMultiHeadAttention layer: the keys and values of the cached
// positions (the memory) of B sequences, and the position rows W_{k,R} R_r by distance. It depends
// on the weights it was built with: reset it after they change.
template <typename T>
struct RelativeAttentionCache {
  Index batch = 0;
  Index mem_len = 0;   // positions kept after each call (the memory length)
  Index length = 0;    // positions held, <= mem_len between calls
  Index offset = 0;    // row of the oldest position held within each sequence's block
  Index capacity = 0;  // rows of each sequence's block
  Matrix<T> kv;        // (batch*capacity, 2d): [K | V], sequence b in rows [b*capacity, (b+1)*capacity)
  Matrix<T> pos;       // (distances, d): W_{k,R} R_r for r = 0, 1, ...
  // scratch of one call
  Matrix<T> q;       // (B*T, d) queries of the new positions
  Matrix<T> qkv;     // (B*T, 3d) projections of the new positions
  Matrix<T> scores;  // (B*H*T, length + T)
  Matrix<T> ctx;     // (B*T, d)
  // Empty, for `batch` sequences keeping `mem_len` positions.
  void reset(Index batch, Index mem_len);
};

template <typename T>
class RelativeMultiHeadAttention : public SelfAttention<T> {
 public:
  // Throws std::invalid_argument when d_model % n_heads != 0 (or when the sizes are not positive).
  // clamp_len < 0: no clamp.
  RelativeMultiHeadAttention(Index d_model, Index n_heads, std::uint64_t seed = 0, Index clamp_len = -1);

  // Training: x (B*T_len, d) is the segment, memory (B*M, d) the memory (M may be 0); both must stay
  // alive and unchanged until backward().                               x (B*T_len, d) -> (B*T_len, d)
  const Matrix<T>& forward(ConstMatrixMap<T> x, ConstMatrixMap<T> memory, Index B, Index T_len, Index M);
  // SelfAttention: the memory set by set_memory (none unless set). Relative attention is causal
  // (a left-to-right model): causal = false is refused.
  const Matrix<T>& forward(ConstMatrixMap<T> x, Index B, Index T_len, bool causal) override;
  // The memory the next SelfAttention forward uses: (B*M, d), kept by the caller until backward.
  void set_memory(const T* memory, Index M);
  void clear_memory() { set_memory(nullptr, 0); }
  // dout (B*T, d) -> dx (B*T, d); the memory gets no gradient. Parameter gradients accumulate.
  const Matrix<T>& backward(ConstMatrixMap<T> dout) override;

  // query/key/value.weight|bias, position.weight (W_{k,R}, no bias), output.weight|bias, u, v
  ParameterList<T> parameters() override;
  void zero_grad() override;
  void release() override;

  // Evaluation with state reuse. Nothing that forward() keeps for backward() is read or written.
  // The memory (B*M, d) becomes the cached positions (their keys and values), replacing those held;
  // the last mem_len of them are kept.
  void infer_memory(ConstMatrixMap<T> memory, Index M, RelativeAttentionCache<T>& cache) const;
  // New positions x (B*T_len, d) attend to the cached positions and to themselves (causal), as
  // forward(x, memory) does; then their keys and values join the cache and the oldest beyond
  // mem_len leave it. The projections run on `be` (at a few rows, the decoding kernels read the
  // weights as they are).                                        x (B*T_len, d) -> y (B*T_len, d)
  void infer(ConstMatrixMap<T> x, Index T_len, RelativeAttentionCache<T>& cache, InferenceBackend<T>& be,
             Matrix<T>& y) const;

  Index d_model() const override { return d_; }
  Index n_heads() const override { return h_; }
  Index d_k() const { return dk_; }
  Index clamp_len() const { return clamp_; }
  // clamp < 0: no clamp
  void set_clamp_len(Index clamp) { clamp_ = clamp < 0 ? -1 : clamp; }
  Index batch() const { return B_; }
  Index query_length() const { return T_; }
  Index memory_length() const { return M_; }
  bool has_forward() const { return has_forward_; }
  // Weights of the last forward, (B*H*T, M+T) = (B, H, T, M+T).
  const Matrix<T>& attention_weights() const { return weights_; }

  Matrix<T> w_pos_;            // (d, d): W_{k,R}
  GradientBuffer<T> dw_pos_;   // (d, d)
  Matrix<T> u_, v_;            // (H, d_k)
  GradientBuffer<T> du_, dv_;  // (H, d_k)

 private:
  AttentionProjections<T> proj_;  // W_in (3d, d) = [W_q; W_k; W_v], and W_o
  // R (L, d): row p holds the sinusoid of distance L-1-p (clamped)
  void sinusoids(Index L, Matrix<T>& R) const;

  Index d_, h_, dk_, clamp_;
  const T* mem_set_ = nullptr;  // set_memory()
  Index mem_set_len_ = 0;

  bool has_forward_ = false;
  Index B_ = 0, T_ = 0, M_ = 0;
  const T* x_ = nullptr;  // (B*T, d) input of the last forward (the caller's)
  Matrix<T> h_cat_;       // (B*L, d) [memory ; x] per sequence
  Matrix<T> q_;           // (B*T, d) Q = x W_q^T + b_q
  Matrix<T> kv_;          // (B*L, 2d) [K | V] = h W_kv^T + b_kv
  Matrix<T> qu_, qv_;     // (B*T, d) Q + u and Q + v (per head)
  Matrix<T> R_;           // (L, d) sinusoids, distances L-1 ... 0
  Matrix<T> rk_;          // (L, d) P = R W_{k,R}^T
  Matrix<T> weights_;     // (B*H*T, L) attention weights
  Matrix<T> ctx_;         // (B*T, d) heads concatenated, before W_o
  // backward
  Matrix<T> dscores_;  // (B*H*T, L)
  Matrix<T> dkv_;      // (B*L, 2d)
  Matrix<T> dkv_x_;    // (B*T, 2d) the segment's rows of dkv
  Matrix<T> dqu_;      // (B*T, d) gradient through the content term
  Matrix<T> dqv_;      // (B*T, d) gradient through the position term
  Matrix<T> drk_;      // (B*L, d) dP of each sequence, summed after the parallel loop
  Matrix<T> drk_sum_;  // (L, d)
  Matrix<T> dx_;       // (B*T, d)
};

}  // namespace transformer

// linear_attention.hpp — linear attention (Katharopoulos et al. 2020, "Transformers are RNNs").
//
// Softmax attention's similarity exp(q.k / sqrt(d)) is replaced by a kernel phi(q).phi(k) with
// the feature map phi(x) = elu(x) + 1 (positive, so every weight is positive), which lets the
// product be re-associated:
//
//   non-causal   out_i = phi(Q_i) (sum_j phi(K_j)^T V_j) / (phi(Q_i) . sum_j phi(K_j) + eps)
//   causal       out_i = phi(Q_i) S_i / (phi(Q_i) . z_i + eps),
//                S_i = sum_{j<=i} phi(K_j)^T V_j  (d x d),   z_i = sum_{j<=i} phi(K_j)  (d)
//
// Time and memory are linear in the length: nothing of size T x T is formed, and the causal form
// never stores an S_i per position. It runs in chunks of tuning::kLinearAttentionChunk positions:
// inside a chunk the masked product (phi(Q_c) phi(K_c)^T, lower triangle) V_c is a small GEMM,
// and the running S and z carry everything before the chunk. The causal form is also an RNN:
// one position at a time, S += phi(k)^T v, z += phi(k), out = phi(q) S / (phi(q) . z + eps),
// which is how a decoder-only model generates in constant time per token.
#pragma once

#include <cstdint>

#include "transformer/attention/projections.hpp"
#include "transformer/attention/self_attention.hpp"
#include "transformer/core/tensor.hpp"
#include "transformer/kernels/inference_backend.hpp"
#include "transformer/layers/linear.hpp"

namespace transformer {

// The eps of the denominator (the value fast-transformers uses).
inline constexpr double kLinearAttentionEps = 1e-6;
// A projected key at which phi(k) = exp(k) underflows to exactly 0 in float and double (a padded
// key of forward_key_padding).
inline constexpr double kLinearAttentionMaskedKey = -1e4;

// The recurrent state of one (sequence, head): S (d x d, row-major) then z (d).
inline constexpr Index linear_attention_state_size(Index d) { return d * d + d; }

// Linear attention over B x H heads of width d (for queries, keys and values alike), all of
// length T_len. Head h of batch b reads row t at
//   q + (b*T_len + t) * q_stride + h*d                  (likewise k, v, out)
// so Q, K, V can be column blocks of one fused projection, as in attention_forward. Writes the
// output rows, den (B*H, T_len): the denominators phi(Q_t) . z_t + eps, and state
// (B*H, linear_attention_state_size(d)): S and z over the whole sequence (for the causal form, the
// state after the last position, from which an RNN can continue). Heads run in parallel.
template <typename T>
void linear_attention_forward(const T* q, Index q_stride, const T* k, Index k_stride, const T* v, Index v_stride,
                              Index B, Index H, Index T_len, Index d, bool causal, T* out, Index out_stride, T* den,
                              T* state);

// The backward of linear_attention_forward given its inputs, the out, den and state it wrote and
// dout. Writes (assigns, does not accumulate) dq, dk, dv in the same addressing. The state is read
// by the non-causal form only (it may be nullptr for the causal one). Memory beyond the arguments:
// a few chunk-sized buffers per thread.
template <typename T>
void linear_attention_backward(const T* q, Index q_stride, const T* k, Index k_stride, const T* v, Index v_stride,
                               Index B, Index H, Index T_len, Index d, bool causal, const T* out, Index out_stride,
                               const T* den, const T* state, const T* dout, Index dout_stride, T* dq, Index dq_stride,
                               T* dk_out, Index dk_stride, T* dv, Index dv_stride);

// One RNN step of causal linear attention for R rows (sequences) x H heads: row r's new position
// reads q + r*q_stride + h*d (likewise k, v). state (R*H, linear_attention_state_size(d)) holds
// S and z of the positions so far and is advanced by this one; out gets the step's output. Equal
// to the causal form of linear_attention_forward at that position.
template <typename T>
void linear_attention_step(const T* q, Index q_stride, const T* k, Index k_stride, const T* v, Index v_stride, Index R,
                           Index H, Index d, T* state, T* out, Index out_stride);

// The generation state of a LinearMultiHeadAttention: S and z per (row, head), and the buffers of
// a step.
template <typename T>
struct LinearAttentionState {
  Matrix<T> s;         // (R, H * linear_attention_state_size(d_k))
  Index length = 0;    // positions fed so far
  Matrix<T> qkv, ctx;  // step buffers: (R, 3d), (R, d)
  Index rows() const { return s.rows(); }
};

// Multi-head linear attention: the fused Q/K/V projection and the output projection of
// MultiHeadAttention (same parameter names, layout and initialisation for a given seed), with
// linear attention between them.
template <typename T>
class LinearMultiHeadAttention : public SelfAttention<T> {
 public:
  // Throws std::invalid_argument when d_model % n_heads != 0.
  LinearMultiHeadAttention(Index d_model, Index n_heads, std::uint64_t seed = 0);

  // x (B*T_len, d) -> (B*T_len, d). `x` must stay alive and unchanged until backward().
  const Matrix<T>& forward(ConstMatrixMap<T> x, Index B, Index T_len, bool causal) override;
  // The non-causal form over a padded batch: the projected key of a padded position is set to
  // kLinearAttentionMaskedKey, where phi (and its derivative) is exactly 0, so that position adds
  // nothing to any query's sums and gets no gradient through its key and value.
  const Matrix<T>& forward_key_padding(ConstMatrixMap<T> x, Index B, Index T_len,
                                       const std::uint8_t* key_padding) override;
  // dout (B*T_len, d) -> dx (B*T_len, d); parameter gradients accumulate.
  const Matrix<T>& backward(ConstMatrixMap<T> dout) override;
  ParameterList<T> parameters() override;  // query/key/value/output . weight/bias
  void zero_grad() override;
  void release() override;

  Index d_model() const override { return d_; }
  Index n_heads() const override { return h_; }
  // The precision of the four projections' products; linear attention itself stays in T.
  void set_precision(Precision p) override;
  Index d_k() const { return dk_; }
  bool has_forward() const { return x_ != nullptr; }
  bool causal() const { return causal_; }
  // Of the last forward: den (B*H, T) and the state after the whole sequence (B*H, d_k^2 + d_k).
  const Matrix<T>& denominators() const { return den_; }
  const Matrix<T>& final_state() const { return state_; }

  // Generation (the RNN form): an empty state for `rows` sequences, then one position per step.
  // Nothing that forward() keeps for backward() is read or written.
  void reset_state(LinearAttentionState<T>& st, Index rows) const;
  // Inference over the sentences of `rows` (x: their rows, no padding), non-causal, each sentence
  // attending to its own positions; the projections on `be`, nothing of forward()'s state touched.
  //                                                                    x (rows, d) -> y (rows, d)
  void infer(const Matrix<T>& x, const SentenceRows& rows, InferenceBackend<T>& be, InferenceScratch<T>& s,
             Matrix<T>& y) const;
  // The projections run on `be` (at a few rows, the decoding kernels read the weights as they are).
  //                                                                       x (R, d) -> y (R, d)
  void step(ConstMatrixMap<T> x, LinearAttentionState<T>& st, InferenceBackend<T>& be, Matrix<T>& y) const;

 private:
  AttentionProjections<T> proj_;  // W_in (3d, d) = [W_q; W_k; W_v], as MultiHeadAttention, and W_o
  Index d_, h_, dk_;
  Precision precision_ = Precision::Float32;
  const T* x_ = nullptr;  // (B*T, d) input of the last forward (the caller's)
  Index B_ = 0, T_ = 0;
  bool causal_ = false;
  const Matrix<T>& run(ConstMatrixMap<T> x, Index B, Index T_len, bool causal, const std::uint8_t* key_padding);
  Matrix<T> qkv_;    // (B*T, 3d) = [Q | K | V]
  Matrix<T> ctx_;    // (B*T, d) heads concatenated, before W_o
  Matrix<T> den_;    // (B*H, T) denominators
  Matrix<T> state_;  // (B*H, d_k^2 + d_k) S and z after the whole sequence
  Matrix<T> dqkv_;   // (B*T, 3d)
  Matrix<T> dx_;     // (B*T, d)
};

}  // namespace transformer

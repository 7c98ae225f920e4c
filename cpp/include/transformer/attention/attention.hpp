// attention.hpp — scaled dot-product attention, masks, and multi-head attention.
//
//   Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k) + mask) V
//
// Masks are bytes with 1 = blocked (the query may not attend to that key) and 0 = allowed, the
// convention of PyTorch's boolean masks and of the original TensorFlow tutorial's 0/1 masks.
// A query row whose keys are all blocked gets all-zero weights and a zero output, never NaN; a
// row of NaN (or overflowed, all -inf) scores gets NaN weights, which the entry points refuse.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "transformer/attention/projections.hpp"
#include "transformer/core/tensor.hpp"
#include "transformer/core/tuning.hpp"
#include "transformer/kernels/inference_backend.hpp"

namespace transformer {

// A (Bm, T_q, T_k) byte mask; batch_stride = T_q*T_k, or 0 to use one mask for every batch entry.
struct AttentionMask {
  const std::uint8_t* data = nullptr;  // nullptr: nothing blocked
  Index batch_stride = 0;
  const std::uint8_t* row(Index b, Index i, Index Tk) const {
    return data == nullptr ? nullptr : data + b * batch_stride + i * Tk;
  }
};

// Build a (B, T_q, T_k) mask: key j of batch b is blocked when key_padding[b*T_k + j] != 0
// (key_padding may be nullptr) or, when causal, when j > i (a look-ahead mask).
void build_attention_mask(std::vector<std::uint8_t>& out, const std::uint8_t* key_padding, Index B, Index Tq, Index Tk,
                          bool causal);

// Batched attention over B x H heads. Head h of batch b reads query row i at
//   q + (b*Tq + i) * q_stride + h*dk            (likewise k, v with Tk rows)
// so Q, K, V can be column blocks of one fused projection. Writes the attention weights
// (B, H, Tq, Tk) and the output rows (same addressing with out_stride). Heads run in parallel.
template <typename T>
void attention_forward(const T* q, Index q_stride, const T* k, Index k_stride, const T* v, Index v_stride, Index B,
                       Index H, Index Tq, Index Tk, Index dk, const AttentionMask& mask, T* weights, T* out,
                       Index out_stride);

// The backward of attention_forward given its inputs, the weights it wrote and dout. Writes
// (assigns, does not accumulate) dq, dk, dv in the same addressing; dscores is scratch of the
// size of weights.
template <typename T>
void attention_backward(const T* q, Index q_stride, const T* k, Index k_stride, const T* v, Index v_stride, Index B,
                        Index H, Index Tq, Index Tk, Index dk, const T* weights, const T* dout, Index dout_stride,
                        T* dq, Index dq_stride, T* dk_out, Index dk_stride, T* dv, Index dv_stride, T* dscores);

// The inference state of a decoder's self-attention: the keys and values of the positions fed so
// far. Row r belongs to hypothesis r and holds its positions 0..length-1, position t in columns
// [t*d, (t+1)*d).
template <typename T>
struct KVCache {
  Matrix<T> k, v;      // (R, capacity * d)
  Index length = 0;    // positions held
  Index capacity = 0;  // positions there is room for
  // Empty, for `rows` hypotheses of up to `capacity` positions of width d.
  void reset(Index rows, Index capacity, Index d);
  // Keep rows: new row i is old row rows[i] (rows may repeat: beam expansion); scratch is reused.
  void select_rows(const std::vector<Index>& rows, Matrix<T>& scratch);
};

// Which kernel MultiHeadAttention's training forward and backward run:
//   Plain: attention_forward / attention_backward, which keep the (B, H, T_q, T_k) weights;
//   Tiled: tiled_attention_forward / _backward (tiled_attention.hpp), which keep the output and one
//          log-sum-exp per query row instead, so memory grows linearly with the length;
//   Auto:  Tiled from tuning::kTiledAttentionMinLength keys on, Plain below.
// The results agree up to rounding. attention_weights() exists after a Plain forward only.
enum class AttentionImpl { Plain, Tiled, Auto };
// Whether `impl` runs the tiled kernel over Tk keys.
inline bool runs_tiled(AttentionImpl impl, Index Tk) {
  return impl == AttentionImpl::Tiled || (impl == AttentionImpl::Auto && Tk >= tuning::kTiledAttentionMinLength);
}

template <typename T>
class MultiHeadAttention {
 public:
  // Throws std::invalid_argument when d_model % n_heads != 0.
  MultiHeadAttention(Index d_model, Index n_heads, std::uint64_t seed = 0);

  // Self-attention: queries, keys and values all projected from x with one fused GEMM. x holds
  // layout.rows() rows (all B*T, or only the packed non-padding ones); mask is (B, T, T) in padded
  // coordinates. `layout` must stay alive until backward().
  const Matrix<T>& forward(ConstMatrixMap<T> x, const RowLayout& layout, const AttentionMask& mask);
  // Cross-attention: queries from x (rows of lq), keys and values from memory (rows of lk).
  const Matrix<T>& forward(ConstMatrixMap<T> x, ConstMatrixMap<T> memory, const RowLayout& lq, const RowLayout& lk,
                           const AttentionMask& mask);
  // Dense (unpacked) conveniences: x (B*T, d); memory (B*Tk, d).
  const Matrix<T>& forward(ConstMatrixMap<T> x, Index B, Index T_len, const AttentionMask& mask);
  const Matrix<T>& forward(ConstMatrixMap<T> x, ConstMatrixMap<T> memory, Index B, Index Tq, Index Tk,
                           const AttentionMask& mask);
  // Self-attention with the mask given by its structure, x (B*T, d): with `causal` position t sees
  // positions <= t; key_padding (B, T) bytes, 1 = blocked, or nullptr (it must stay alive until
  // backward()). The tiled kernel then needs no (B, T, T) mask buffer.
  const Matrix<T>& forward(ConstMatrixMap<T> x, Index B, Index T_len, bool causal, const std::uint8_t* key_padding);
  // dout (rows, d) -> dx (rows, d). For self-attention dx includes the key and value paths; for
  // cross-attention the memory gradient is in dmemory(). Parameter gradients accumulate.
  const Matrix<T>& backward(ConstMatrixMap<T> dout);
  const Matrix<T>& dmemory() const { return dmem_; }

  ParameterList<T> parameters();  // query/key/value/output . weight/bias
  void zero_grad();
  // Free what forward kept for backward and the gradients of the last backward (backward() then
  // needs a new forward).
  void release();

  // The kernel of the following forwards (see AttentionImpl). With Tiled (or Auto at a long
  // length), the forward's mask must stay alive until backward(), which reads it again.
  void set_attention_impl(AttentionImpl impl) { impl_ = impl; }
  AttentionImpl attention_impl() const { return impl_; }
  // Whether the last forward ran the tiled kernel (and so kept no attention weights).
  bool last_forward_tiled() const { return tiled_; }

  // Inference (kernels/inference_backend.hpp): the products go through `be`, buffers come from `s`, and nothing
  // that forward() keeps for backward() is read or written.
  // Self-attention of whole sentences (the encoder): x holds the rows of `rows`, which have no
  // padding, so no key is masked.                                        x (rows, d) -> y (rows, d)
  void infer(const Matrix<T>& x, const SentenceRows& rows, InferenceBackend<T>& be, InferenceScratch<T>& s,
             Matrix<T>& y) const;
  // Self-attention of one new position per hypothesis (the decoder): its key and value are
  // appended to `cache`, and it attends to its hypothesis's positions so far (nothing later
  // exists, so there is no look-ahead to mask).                              x (R, d) -> y (R, d)
  void infer_step(const Matrix<T>& x, KVCache<T>& cache, InferenceBackend<T>& be, InferenceScratch<T>& s,
                  Matrix<T>& y) const;
  // Cross-attention keys and values of a memory, once per batch: kv (rows, 2d) = [K | V].
  void infer_memory(const Matrix<T>& memory, InferenceBackend<T>& be, Matrix<T>& kv) const;
  // Cross-attention of query rows: row r attends to the memory rows of sentence sentence_of[r]
  // (memory_rows.offsets), whose keys and values infer_memory put in kv.     x (R, d) -> y (R, d)
  // With `weights`, the attention weights are kept there: (R * heads, longest source), row
  // r * heads + h; its first (source length of row r's sentence) entries are that head's weights.
  void infer_cross(const Matrix<T>& x, const Matrix<T>& kv, const SentenceRows& memory_rows,
                   const std::vector<Index>& sentence_of, InferenceBackend<T>& be, InferenceScratch<T>& s, Matrix<T>& y,
                   Matrix<T>* weights = nullptr) const;

  Index d_model() const { return d_; }
  Index n_heads() const { return h_; }
  Index d_k() const { return dk_; }
  Index batch() const { return lq_ ? lq_->B : -1; }
  Index query_length() const { return lq_ ? lq_->T : 0; }
  Index key_length() const { return lk_ ? lk_->T : 0; }
  bool has_forward() const { return lq_ != nullptr; }
  // The precision of the four projections' products (matmul.hpp); the score and weighted-sum
  // products stay in T. Throws std::invalid_argument when it cannot run here.
  void set_precision(Precision p);
  Precision precision() const { return precision_; }
  // Weights of the last forward, (B*H*Tq, Tk) = (B, H, Tq, Tk). Throws std::runtime_error after a
  // tiled forward, which keeps none.
  const GrowOnlyMatrix<T>& attention_weights() const {
    if (tiled_)
      throw std::runtime_error(
          "MultiHeadAttention: the last forward ran the tiled kernel, which keeps no attention weights; "
          "set attention_impl to 'plain' to read them");
    return weights_;
  }
  const Matrix<T>& output() const { return proj_.out.output(); }
  Matrix<T>& output_mut() { return const_cast<Matrix<T>&>(proj_.out.output()); }

 private:
  AttentionProjections<T> proj_;  // W_in (3d, d) = [W_q; W_k; W_v], and W_o
  Index d_, h_, dk_;
  Precision precision_ = Precision::Float32;

  bool self_ = true;
  const T* x_ = nullptr;           // (rows_q, d) input of the last forward (the caller's)
  const T* mem_ = nullptr;         // (rows_k, d) memory of the last cross-attention forward
  const RowLayout* lq_ = nullptr;  // rows of the queries (and keys/values for self-attention)
  const RowLayout* lk_ = nullptr;  // rows of the keys/values
  RowLayout own_q_, own_k_;        // dense layouts for the (B, T) conveniences
  GrowOnlyMatrix<T> qkv_;          // self: (rows, 3d) = [Q | K | V];  cross: (rows_q, d) = Q
  GrowOnlyMatrix<T> kv_;           // cross: (rows_k, 2d) = [K | V]
  GrowOnlyMatrix<T> weights_;      // (B*H*Tq, Tk)
  GrowOnlyMatrix<T> ctx_;          // (rows_q, d) heads concatenated, before W_o
  // (padded copies of packed batches and the gradients of scores, projections and context live in
  // per-thread scratch shared by every MultiHeadAttention; see backward_scratch in attention.cpp)
  AttentionImpl impl_ = AttentionImpl::Plain;
  bool tiled_ = false;   // the last forward ran the tiled kernel
  bool causal_ = false;  // its structured mask (tiled): causal, key padding, byte mask
  const std::uint8_t* key_padding_ = nullptr;
  AttentionMask mask_;
  MaskBuffer mask_buf_;    // (B, T, T) mask built for the plain kernel from a structured one
  GrowOnlyMatrix<T> lse_;  // (B*H, Tq) log-sum-exp of each row (tiled)
  bool use_tiled(Index Tk) const;
  const Matrix<T>& attend_self(ConstMatrixMap<T> x, const RowLayout& l, const AttentionMask& mask, bool causal,
                               const std::uint8_t* key_padding);
  // The attention and output projection of both forwards, from the projected (padded) queries
  // (row stride ldq), keys and values (row stride ldkv): ctx_ (rows_q, d), then W_o.
  const Matrix<T>& attend_padded(const T* q, Index ldq, const T* k, const T* v, Index ldkv, const RowLayout& lq,
                                 const RowLayout& lk, const AttentionMask& mask, bool causal,
                                 const std::uint8_t* key_padding);
  Matrix<T> dx_;    // (rows_q, d)
  Matrix<T> dmem_;  // (rows_k, d)
};

}  // namespace transformer

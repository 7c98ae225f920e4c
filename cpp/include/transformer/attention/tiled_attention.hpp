// tiled_attention.hpp — exact softmax attention that never holds the (T_q, T_k) weights.
//
//   Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k) + mask) V
//
// computed block by block (the scheme of FlashAttention-2, Dao 2023): a block of query rows meets
// the key blocks one after another while each row keeps its running maximum m and running sum l
// of exp(s - m) (an "online softmax"); when a later block raises m, what was summed so far is
// rescaled by exp(m_old - m_new). The forward keeps only the output and each row's log-sum-exp
// L = m + log(l), (B, H, T_q); the backward recomputes each block of weights as exp(s - L). Memory
// is linear in the length instead of quadratic; the result equals attention_forward's up to
// rounding.
//
// Masks follow attention.hpp: 1 = blocked, and a query row whose keys are all blocked gets a zero
// output and zero gradients, never NaN.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "transformer/attention/attention.hpp"
#include "transformer/attention/self_attention.hpp"
#include "transformer/core/tensor.hpp"

namespace transformer {

// What a query may not see, without a (T_q, T_k) buffer for the common cases.
struct TiledMask {
  bool causal = false;                        // key j is blocked for query i when j > i
  const std::uint8_t* key_padding = nullptr;  // (B, T_k): key j of batch b blocked when != 0
  AttentionMask mask;                         // optional (Bm, T_q, T_k) byte mask, as attention_forward's
};

// Batched attention over B x H heads in the addressing of attention_forward: head h of batch b
// reads query row i at q + (b*Tq + i) * q_stride + h*dk (likewise k, v with Tk rows, out with
// out_stride). Writes the output and lse (B*H*Tq) = the log-sum-exp of each row's scaled,
// unblocked scores (+inf for a row with every key blocked). Parallel over (head, query block).
template <typename T>
void tiled_attention_forward(const T* q, Index q_stride, const T* k, Index k_stride, const T* v, Index v_stride,
                             Index B, Index H, Index Tq, Index Tk, Index dk, const TiledMask& mask, T* out,
                             Index out_stride, T* lse);

// The backward of tiled_attention_forward from its inputs, its output, lse and dout. Writes
// (assigns) dq, dk, dv in the same addressing. Scratch is linear in the lengths.
template <typename T>
void tiled_attention_backward(const T* q, Index q_stride, const T* k, Index k_stride, const T* v, Index v_stride,
                              Index B, Index H, Index Tq, Index Tk, Index dk, const TiledMask& mask, const T* out,
                              Index out_stride, const T* lse, const T* dout, Index dout_stride, T* dq, Index dq_stride,
                              T* dk_out, Index dk_stride, T* dv, Index dv_stride);

// "plain" | "tiled" | "auto" -> AttentionImpl; throws std::invalid_argument naming what is allowed.
AttentionImpl parse_attention_impl(const std::string& name);
const char* attention_impl_name(AttentionImpl impl);

// Softmax self-attention behind the SelfAttention interface: MultiHeadAttention with queries, keys
// and values from x and, when causal, the look-ahead mask given by its structure (no (T, T) mask
// buffer). The kind "softmax" of make_self_attention: the language model's blocks (whose cached
// generation step is attention().infer_step) and the reversible stack's (which calls release()
// after each block) use it.
template <typename T>
class SoftmaxSelfAttention : public SelfAttention<T> {
 public:
  SoftmaxSelfAttention(Index d_model, Index n_heads, std::uint64_t seed = 0, AttentionImpl impl = AttentionImpl::Auto)
      : mha_(d_model, n_heads, seed) {
    mha_.set_attention_impl(impl);
  }

  const Matrix<T>& forward(ConstMatrixMap<T> x, Index B, Index T_len, bool causal) override {
    return mha_.forward(x, B, T_len, causal, nullptr);
  }
  const Matrix<T>& backward(ConstMatrixMap<T> dout) override { return mha_.backward(dout); }
  ParameterList<T> parameters() override { return mha_.parameters(); }
  void zero_grad() override { mha_.zero_grad(); }
  void release() override { mha_.release(); }
  Index d_model() const override { return mha_.d_model(); }
  Index n_heads() const override { return mha_.n_heads(); }
  void set_precision(Precision p) override { mha_.set_precision(p); }

  MultiHeadAttention<T>& attention() { return mha_; }
  const MultiHeadAttention<T>& attention() const { return mha_; }

 private:
  MultiHeadAttention<T> mha_;
};

}  // namespace transformer

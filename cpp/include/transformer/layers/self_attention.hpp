// self_attention.hpp — what a block of the decoder-only language model asks of its attention.
//
// The language model's blocks read like the paper's (x = norm(x + dropout(attn(x)))) whatever
// attention computes inside: softmax attention (MultiHeadAttention), linear attention
// (Katharopoulos et al. 2020), LSH attention (Reformer) or relative attention with a memory
// (Transformer-XL). Each is a class that implements this interface, so the block, the reversible
// stack and the gradient checks treat them alike.
#pragma once

#include "transformer/tensor.hpp"

namespace transformer {

template <typename T>
class SelfAttention {
 public:
  virtual ~SelfAttention() = default;

  // Self-attention of B sequences of T_len positions:          x (B*T_len, d) -> (B*T_len, d)
  // Row b*T_len + t is position t of sequence b. With `causal`, position t attends to positions
  // <= t only. The result stays valid until the next forward; forward keeps what backward needs.
  virtual const Matrix<T>& forward(ConstMatrixMap<T> x, Index B, Index T_len, bool causal) = 0;
  // The gradient of the last forward:                       dout (B*T_len, d) -> dx (B*T_len, d)
  // Parameter gradients accumulate (+=).
  virtual const Matrix<T>& backward(ConstMatrixMap<T> dout) = 0;

  virtual ParameterList<T> parameters() = 0;
  virtual void zero_grad() = 0;
  // Free what forward kept for backward (a reversible stack keeps no layer's activations).
  virtual void release() {}

  virtual Index d_model() const = 0;
  virtual Index n_heads() const = 0;
};

}  // namespace transformer

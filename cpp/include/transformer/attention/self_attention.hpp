// self_attention.hpp — what a block of the decoder-only language model asks of its attention.
//
// The language model's blocks read like the paper's (x = norm(x + dropout(attn(x)))) whatever
// attention computes inside: softmax attention (MultiHeadAttention), linear attention
// (Katharopoulos et al. 2020), LSH attention (Reformer) or relative attention with a memory
// (Transformer-XL). Each is a class that implements this interface, so the block, the reversible
// stack and the gradient checks treat them alike.
//
// make_self_attention builds one by name ("softmax", "linear", "lsh", "relative"): the one factory
// of the language model's blocks and of the reversible stack. What a kind supports is its record
// (kinds.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "transformer/core/tensor.hpp"
#include "transformer/kernels/matmul.hpp"

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
  // Bidirectional self-attention in which no query sees the keys marked in key_padding (B, T_len)
  // bytes (1 = padding): an encoder's padded batch. Only a kind whose record says key_padding
  // overrides it; any other throws std::logic_error (the records keep such calls from happening).
  virtual const Matrix<T>& forward_key_padding(ConstMatrixMap<T> x, Index B, Index T_len,
                                               const std::uint8_t* key_padding) {
    (void)x, (void)B, (void)T_len, (void)key_padding;
    throw std::logic_error("this attention kind takes no key padding");
  }

  virtual ParameterList<T> parameters() = 0;
  virtual void zero_grad() = 0;
  // Free what forward kept for backward (a reversible stack keeps no layer's activations).
  virtual void release() {}

  virtual Index d_model() const = 0;
  virtual Index n_heads() const = 0;
  // The precision of the kind's dense products (matmul.hpp): float32 by default. A kind that runs
  // them in bf16 too (softmax, linear) overrides this; any other refuses every precision but
  // float32 with std::invalid_argument, so that a bf16 model never runs a layer in float32 unsaid.
  virtual void set_precision(Precision p) {
    if (p != Precision::Float32)
      throw std::invalid_argument("this attention kind runs its products in float32 only, not in " + to_string(p));
  }
};

// The settings of the kinds that have any (LSH attention's); the defaults are LSHSelfAttention's.
struct SelfAttentionOptions {
  Index lsh_chunk = 64;   // positions per chunk; a chunk attends to itself and the chunk before
  Index lsh_hashes = 4;   // hash rounds
  Index lsh_buckets = 0;  // buckets per round, even; 0: 2 * max(1, T / chunk) for a sequence of T
};

// The kinds make_self_attention knows, in the order messages list them: the names of the records of
// kinds.hpp ("softmax", "linear", "lsh", "relative"), which say what each supports.
const std::vector<std::string>& self_attention_kinds();

// A self-attention of `kind`, built by the maker of its record (kinds.cpp's table names each
// kind's class: SoftmaxSelfAttention, LinearMultiHeadAttention, LSHSelfAttention with the options'
// chunk, hashes and buckets, RelativeMultiHeadAttention).
// Throws std::invalid_argument naming the kinds for any other name, and for bad LSH options.
template <typename T>
std::unique_ptr<SelfAttention<T>> make_self_attention(const std::string& kind, Index d_model, Index n_heads,
                                                      std::uint64_t seed,
                                                      const SelfAttentionOptions& options = SelfAttentionOptions{});

}  // namespace transformer

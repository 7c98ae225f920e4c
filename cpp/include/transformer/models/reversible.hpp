// reversible.hpp — Reformer's reversible residual stack (Kitaev et al. 2020, Sec. 3).
//
// The stack carries two streams (x1, x2), each (rows, d). Its input is the embedding duplicated
// into both streams, x1 = x2 = x; its output is their average, (y1 + y2) / 2. Block i computes
//
//   y1 = x1 + F(x2),   F(x) = Dropout(Attention(LN_1(x)))                  (pre-norm attention)
//   y2 = x2 + G(y1),   G(x) = Dropout(FFN(LN_2(x)))                        (pre-norm feed-forward)
//
// and can be inverted exactly from its outputs:
//
//   x2 = y2 - G(y1),   x1 = y1 - F(x2).
//
// So a reversible stack keeps only the last block's outputs: backward rebuilds each block's
// inputs from its outputs, top block first, recomputing F and G with caching and going back
// through them at once. Activation memory is that of one block plus the two streams, whatever
// the depth. Dropout masks are a function of (seed, stream, call counter, element) (dropout.hpp);
// forward records each block's counters and the recomputation replays them, so the rebuilt F and
// G are the ones of the forward, bit for bit.
//
// G is position-wise, so it runs on chunks of rows (Reformer's chunked feed-forward, Eq. 10):
// the feed-forward's hidden layer is (chunk, d_ff), not (rows, d_ff). Each chunk draws the
// dropout masks of its own rows (Dropout's row ids), so chunking changes nothing but memory.
//
// The attention is any kind of make_self_attention. LSH attention draws its hash rotations from
// a call counter (lsh_attention.hpp): forward records each block's counter and the recomputation
// restores it, so the rebuilt F hashes into the same buckets as the forward.
//
// With `reversible = false` the same blocks form an ordinary stack: each block keeps its own
// activations and backward is the plain chain rule. It gives the same function and gradients,
// and is what the reversible stack is measured against.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transformer/attention/self_attention.hpp"
#include "transformer/layers/dropout.hpp"
#include "transformer/layers/feed_forward.hpp"
#include "transformer/layers/layer_norm.hpp"

namespace transformer {

struct ReversibleStackOptions {
  Index n_layers = 2, d_model = 64, n_heads = 4, d_ff = 256;
  double dropout = 0.1;
  bool causal = true;
  std::uint64_t seed = 0;
  std::string attention = "softmax";       // a kind of make_self_attention (self_attention.hpp)
  SelfAttentionOptions attention_options;  // LSH attention's chunk, hashes and buckets
  bool reversible = true;
  Index chunk_rows = tuning::kReversibleChunkRows;  // rows of one feed-forward chunk, > 0
  double eps = 1e-6;                                // LayerNorm
};

template <typename T>
class ReversibleStack {
 public:
  // Throws std::invalid_argument on a bad option (naming it and what is allowed).
  explicit ReversibleStack(const ReversibleStackOptions& options);
  ~ReversibleStack();
  ReversibleStack(const ReversibleStack&) = delete;
  ReversibleStack& operator=(const ReversibleStack&) = delete;

  // B sequences of T_len positions:                              x (B*T_len, d) -> (B*T_len, d)
  // `x` need not stay alive: the stack keeps what it needs.
  const Matrix<T>& forward(ConstMatrixMap<T> x, Index B, Index T_len, bool training);
  // The gradient of the last forward:                         dout (B*T_len, d) -> dx (B*T_len, d)
  // Parameter gradients accumulate. A reversible stack rebuilds its inputs on the way, so a second
  // backward of the same forward is refused.
  const Matrix<T>& backward(ConstMatrixMap<T> dout);

  // "layers.i.norm1.*" (before the attention), "layers.i.self_attention.*", "layers.i.norm2.*",
  // "layers.i.feed_forward.linear{1,2}.*".
  ParameterList<T> parameters();
  void zero_grad();

  // The two streams (x1, x2) that the last backward rebuilt at the bottom of the stack; equal to
  // the input (up to rounding) when the stack is reversible.
  const Matrix<T>& rebuilt_x1() const { return x1_; }
  const Matrix<T>& rebuilt_x2() const { return x2_; }
  // Bytes of activations the stack holds for backward after a forward: the two streams when it
  // is reversible, every block's cached activations (counted from their shapes) when not.
  double activation_bytes() const;

  // Block i's attention (made by make_self_attention from the options' kind).
  SelfAttention<T>& attention(Index i);
  // Every block's dropouts: after the attention, inside and after the feed-forward.
  std::vector<Dropout<T>*> dropouts();

  const ReversibleStackOptions& options() const { return opt_; }
  Index n_layers() const { return opt_.n_layers; }
  Index d_model() const { return opt_.d_model; }
  bool has_forward() const { return state_ == State::Forward; }

  struct Block;  // reversible.cpp

 private:
  enum class State { None, Forward, Backward };
  void forward_reversible(bool training);
  void forward_ordinary(bool training);
  void backward_reversible();
  void backward_ordinary();
  // G on rows [r0, r1) of `in` into the same rows of `out`, caching for backward.
  void g_chunk(Block& b, const T* in, Index r0, Index r1, bool training, T* out);
  void drop_rows(Dropout<T>& owner, std::uint64_t counter, T* data, Index r0, Index n, bool training);
  // Shrink what the block's layers keep to one row (after its forward, or its backward).
  void release_block(Block& b, bool after_backward);

  ReversibleStackOptions opt_;
  std::vector<std::unique_ptr<Block>> blocks_;
  State state_ = State::None;
  Index B_ = 0, T_ = 0;
  bool training_ = false;
  std::vector<Index> row_ids_;  // 0 .. rows-1: the chunks' row ids for dropout
  // Reversible: the streams (x1, x2) of the current block, y after forward, x after backward.
  Matrix<T> x1_, x2_;    // (rows, d)
  Matrix<T> dx1_, dx2_;  // (rows, d) gradients of the streams
  Matrix<T> buf_;        // (rows, d) F's norm output, or G / F output, reused
  Matrix<T> dbuf_;       // (rows, d) dropped-out gradient, reused
  Matrix<T> out_, dx_;   // (rows, d) output, input gradient
  Matrix<T> zero_;       // (1, d) the row release_block runs
  Dropout<T> worker_;    // draws every block's residual dropout masks (a copy of the block's)
};

}  // namespace transformer
